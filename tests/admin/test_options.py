"""imqcmd-style options of admin commands (S11.1): what is read and what is refused."""

import pytest

from mqgate.admin.options import destination_type, parse_options, property_pairs
from mqgate.admin.requests import BadRequest

USAGE = "pause dst -t q|t -n NAME [-pst WHAT] [-tmp] [-o p=v]..."


def parse(words):
    return parse_options(words, USAGE, values={"-t", "-n", "-pst"}, flags={"-tmp"},
                         repeated={"-o"}, required={"-t", "-n"})


def test_values_flags_and_repeated_options_are_read():
    """Values, a flag and a repeated option come back by option, in order."""
    options = parse(["-n", "orders", "-t", "q", "-tmp", "-o", "a=1", "-o", "b=2"])
    assert options == {"-n": "orders", "-t": "q", "-tmp": True, "-o": ["a=1", "b=2"]}
    assert parse(["-t", "t", "-n", "x"]) == {"-t": "t", "-n": "x", "-o": []}


@pytest.mark.parametrize("words, says", [
    (["-t", "q"], "missing -n"),
    (["-t", "q", "-n"], "-n needs a value"),
    (["-t", "q", "-n", "a", "-n", "b"], "-n given twice"),
    (["-t", "q", "-n", "a", "-x"], "unknown option '-x'"),
    (["-t", "q", "-n", "a", "stray"], "unexpected word 'stray'"),
])
def test_bad_options_are_refused_with_the_usage(words, says):
    """Each mistake is named, with the command's usage line."""
    with pytest.raises(BadRequest) as caught:
        parse(words)
    assert says in str(caught.value) and USAGE in str(caught.value)


def test_destination_types():
    """q, t and the full words are understood; anything else is refused by name."""
    assert [destination_type(v) for v in ("q", "T", "queue", "topic")] == \
        ["queue", "topic", "queue", "topic"]
    with pytest.raises(BadRequest, match="'x'"):
        destination_type("x")


def test_property_pairs():
    """-o name=value pairs become a dict; a pair without = or twice is refused."""
    assert property_pairs(["maxNumMsgs = 10", "limitBehavior=REMOVE_OLDEST"], USAGE) \
        == {"maxNumMsgs": "10", "limitBehavior": "REMOVE_OLDEST"}
    for bad in (["maxNumMsgs"], ["=3"], ["a=1", "a=2"]):
        with pytest.raises(BadRequest):
            property_pairs(bad, USAGE)
