"""Selector parsing and evaluation: the JMS SQL-92 subset, three-valued (S2.8)."""

import re

import pytest
from hypothesis import given, strategies as st

from mqgate.amqp.message import Properties, encode_message, parse_message
from mqgate.amqp.types import Symbol, UInt
from mqgate.core import BrokerMessage
from mqgate.core.selectors import (
    HEADER_FIELDS, MAX_DEPTH, MAX_SELECTOR_LENGTH, Selector, SelectorError,
    SelectorTooDeep, SelectorTooLong, compile_selector, message_field)
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import MqgateError

T, F, U = True, False, None

#: Property values the table below evaluates against.
VALUES = {
    "n": 5, "m": -3, "x": 2.5, "zero": 0, "big": 10 ** 12,
    "s": "abc", "t": "it's", "empty": "",
    "yes": True, "no": False,
    "u": UInt(7), "sym": Symbol("abc"),
    "raw": b"abc",
    "JMSPriority": 7, "JMSDeliveryMode": "PERSISTENT",
}


def evaluate(text, values=VALUES):
    return compile_selector(text).evaluate(values.get)


@pytest.mark.parametrize("text, expected", [
    # comparisons on numbers (exact and approximate mix)
    ("n = 5", T), ("n = 6", F), ("n <> 6", T), ("n <> 5", F),
    ("n < 6", T), ("n < 5", F), ("n <= 5", T), ("n > 4", T), ("n > 5", F),
    ("n >= 5", T), ("x > 2", T), ("x = 2.5", T), ("n = 5.0", T), ("u = 7", T),
    ("big > 999999999999", T), ("m < zero", T),
    # strings and booleans compare only with = and <>
    ("s = 'abc'", T), ("s <> 'abc'", F), ("s = 'ABC'", F), ("sym = 'abc'", T),
    ("t = 'it''s'", T), ("empty = ''", T),
    ("s < 'b'", U), ("s > 'a'", U),
    ("yes = TRUE", T), ("no = TRUE", F), ("no <> TRUE", T), ("yes < TRUE", U),
    # unlike types: UNKNOWN, so never selected either way
    ("n = '5'", U), ("n <> '5'", U), ("s = 5", U), ("yes = 1", U),
    ("NOT (n = '5')", U), ("raw = 'abc'", U), ("raw IS NULL", F),
    # arithmetic, Java division, unary minus
    ("n + 1 = 6", T), ("n - 6 = -1", T), ("n * 2 = 10", T), ("n / 2 = 2", T),
    ("m / 2 = -1", T), ("x * 2 = 5", T), ("n / 2.0 = 2.5", T), ("-n = -5", T),
    ("- -n = 5", T), ("+n = 5", T), ("-x < 0", T), ("1 + 2 * 3 = 7", T),
    ("(1 + 2) * 3 = 9", T), ("10 - 2 - 3 = 5", T), ("12 / 2 / 3 = 2", T),
    ("n / zero = 1", U), ("s + 1 = 1", U), ("-s = 1", U), ("yes + 1 = 2", U),
    ("missing + 1 = 1", U),
    # numeric literals
    ("7E3 = 7000", T), ("-57.9E2 = -5790", T), ("7. = 7", T), (".5 = 0.5", T),
    ("1e-1 < 1", T), ("057 = 57", T),
    # NULL and missing properties
    ("missing = 1", U), ("missing <> 1", U), ("missing IS NULL", T),
    ("missing IS NOT NULL", F), ("n IS NULL", F), ("n IS NOT NULL", T),
    ("NULL IS NULL", T), ("n = NULL", U), ("missing", U),
    # identifiers are case-sensitive, keywords are not
    ("N = 5", U), ("n = 5 and s = 'abc'", T), ("n is not null", T),
    # boolean identifiers and literals as conditions
    ("yes", T), ("no", F), ("NOT yes", F), ("TRUE", T), ("FALSE", F), ("s", U),
    ("n", U),
])
def test_operators(text, expected):
    """S2.8: each operator gives the JMS result, with UNKNOWN for NULL and unlike
    types."""
    assert evaluate(text) is expected


@pytest.mark.parametrize("left", ["TRUE", "FALSE", "missing"])
@pytest.mark.parametrize("right", ["TRUE", "FALSE", "missing"])
def test_three_valued_logic(left, right):
    """S2.8: AND, OR and NOT follow SQL three-valued logic (missing is UNKNOWN)."""
    value = {"TRUE": T, "FALSE": F, "missing": U}
    a, b = value[left], value[right]
    expected_and = F if F in (a, b) else (U if U in (a, b) else T)
    expected_or = T if T in (a, b) else (U if U in (a, b) else F)
    assert evaluate(f"{left} AND {right}") is expected_and
    assert evaluate(f"{left} OR {right}") is expected_or
    assert evaluate(f"NOT {left}") is (None if a is None else not a)


@pytest.mark.parametrize("text, expected", [
    ("n > 1 AND s = 'abc' AND yes", T),
    ("n > 1 AND missing = 1 AND no", F),      # FALSE wins over UNKNOWN
    ("n > 1 AND missing = 1", U),
    ("n = 1 OR missing = 1 OR yes", T),       # TRUE wins over UNKNOWN
    ("n = 1 OR missing = 1", U),
    ("n = 1 OR s = 'x' OR no", F),
    ("NOT n = 5", F),                          # NOT binds looser than =
    ("n = 1 OR n = 5 AND s = 'abc'", T),       # AND before OR
    ("(n = 1 OR n = 5) AND s = 'x'", F),
    ("NOT NOT yes", T),
])
def test_logic_combinations(text, expected):
    """S2.8: AND binds tighter than OR, NOT looser than comparisons, and chains are
    decided by FALSE (AND) or TRUE (OR) even when another term is UNKNOWN."""
    assert evaluate(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("n BETWEEN 1 AND 5", T), ("n BETWEEN 5 AND 9", T), ("n BETWEEN 6 AND 9", F),
    ("n NOT BETWEEN 6 AND 9", T), ("n NOT BETWEEN 1 AND 9", F),
    ("x BETWEEN 2 AND 3", T), ("n BETWEEN 1 + 1 AND n * 2", T),
    ("missing BETWEEN 1 AND 2", U), ("missing NOT BETWEEN 1 AND 2", U),
    ("s BETWEEN 'a' AND 'z'", U), ("n BETWEEN 1 AND 5 AND s = 'abc'", T),
    ("n BETWEEN 9 AND missing", F),            # 9 <= 5 is FALSE whatever the other
    ("n BETWEEN 1 AND missing", U),
])
def test_between(text, expected):
    """S2.8: BETWEEN is inclusive and three-valued; NOT BETWEEN negates it."""
    assert evaluate(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("s IN ('abc', 'def')", T), ("s IN ('x', 'y')", F), ("s NOT IN ('x', 'y')", T),
    ("s NOT IN ('abc')", F), ("t IN ('it''s')", T),
    ("missing IN ('a')", U), ("missing NOT IN ('a')", U),
    ("n IN (1, 5, 9)", T), ("n IN (1, 2)", F), ("x IN (2.5)", T), ("m IN (-3)", T),
    ("n IN ('5')", U), ("n NOT IN ('5')", U),           # unlike types
    ("s IN ('x', 1)", U), ("s IN ('abc', 1)", T),        # x = 'x' OR x = 1
    ("yes IN ('true')", U),
])
def test_in(text, expected):
    """S2.8: IN is x = a OR x = b ...; NOT IN negates it; NULL gives UNKNOWN."""
    assert evaluate(text) is expected


@pytest.mark.parametrize("pattern, value, expected", [
    ("abc", "abc", T), ("abc", "abcd", F), ("a%", "abc", T), ("a%", "a", T),
    ("a%", "ba", F), ("%c", "abc", T), ("%b%", "abc", T), ("%", "", T),
    ("_", "a", T), ("_", "", F), ("_", "ab", F), ("a_c", "abc", T), ("a_c", "ac", F),
    ("%_%", "", F), ("%a%b%", "xaxbx", T), ("%a%b%", "xbxax", F),
    ("a%a", "a", F), ("a%a", "aa", T), ("%ab", "aab", T), ("ab%ab", "abab", T),
    ("ab%ab", "aba", F), ("a.c", "abc", F), ("a.c", "a.c", T), ("(x)*", "(x)*", T),
    ("[a]", "a", F), ("a%", "a\nb", T), ("_", "\n", T), ("é_", "éa", T),
])
def test_like_wildcards(pattern, value, expected):
    """S2.8: LIKE matches the whole value; % is any run and _ one character; other
    characters (regex specials included) are literal."""
    assert compile_selector(f"s LIKE '{pattern}'").evaluate({"s": value}.get) is expected


@pytest.mark.parametrize("text, value, expected", [
    ("s LIKE 'a\\%' ESCAPE '\\'", "a%", T),
    ("s LIKE 'a\\%' ESCAPE '\\'", "ab", F),
    ("s LIKE '\\_%' ESCAPE '\\'", "_x", T),
    ("s LIKE '\\_%' ESCAPE '\\'", "ax", F),
    ("s LIKE 'a!!b' ESCAPE '!'", "a!b", T),
    ("s LIKE '%!%%' ESCAPE '!'", "100%", T),
    ("s LIKE '%!%%' ESCAPE '!'", "100", F),
    ("s LIKE 'x''%' ESCAPE ''''", "x%", T),
    ("s NOT LIKE 'a%'", "abc", F),
    ("s NOT LIKE 'a%'", "xbc", T),
    ("s like 'a%' escape '!'", "abc", T),
])
def test_like_escape_and_not(text, value, expected):
    """S2.8: ESCAPE makes the next character literal; NOT LIKE negates."""
    assert compile_selector(text).evaluate({"s": value}.get) is expected


@pytest.mark.parametrize("value", [None, 5, True, b"abc"])
def test_like_on_non_string_is_unknown(value):
    """S2.8: LIKE and NOT LIKE on NULL or a non-string are UNKNOWN."""
    lookup = {"s": value}.get
    assert compile_selector("s LIKE '%'").evaluate(lookup) is None
    assert compile_selector("s NOT LIKE '%'").evaluate(lookup) is None


def _reference_like(pattern, value):
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c)
                    for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


@given(st.text(alphabet="ab%_", max_size=8), st.text(alphabet="ab", max_size=10))
def test_like_agrees_with_backtracking_matcher(pattern, value):
    """S2.8: the backtracking-free LIKE matcher agrees with a plain regex matcher."""
    selector = compile_selector(f"s LIKE '{pattern}'")
    assert selector.evaluate({"s": value}.get) is _reference_like(pattern, value)


def test_like_hostile_pattern_is_linear():
    """S2.8: a pattern that makes a backtracking matcher explode is answered at once
    (segments are matched leftmost, never retried)."""
    selector = compile_selector("s LIKE '" + "%a" * 300 + "%b'")
    assert selector.evaluate({"s": "a" * 4000}.get) is False
    assert selector.evaluate({"s": "a" * 300 + "b"}.get) is True


@pytest.mark.parametrize("text, position, problem", [
    ("", 0, "expected an identifier, a literal or '(', found end of selector"),
    ("n =", 3, "expected an identifier, a literal or '(', found end of selector"),
    ("n = 1 = 2", 6, "expected AND, OR or the end of the selector, found '='"),
    ("(n = 1", 6, "expected ')', found end of selector"),
    ("n = 1)", 5, "expected AND, OR or the end of the selector, found ')'"),
    ("n = 1 AND", 9, "expected an identifier, a literal or '(', found end of selector"),
    ("n 5", 2, "expected AND, OR or the end of the selector, found number 5"),
    ("s = 'abc", 4, "unterminated string literal"),
    ("n ! 1", 2, "unexpected character '!'"),
    ("n == 1", 3, "expected an identifier, a literal or '(', found '='"),
    ("12e = 1", 2, "malformed number '12e'"),
    ("n = 1.2.3", 7, "malformed number '1.2.'"),
    ("n + 1", 0, "expected a condition"),
    ("'abc'", 0, "expected a condition"),
    ("n = 1 AND 5", 10, "expected a condition"),
    ("NOT n + 1", 4, "expected a condition"),
    ("(n > 1) + 1 = 2", 1, "expected a number, found a condition"),
    ("s LIKE 5", 7, "expected a string literal (the LIKE pattern), found number 5"),
    ("s LIKE t", 7, "expected a string literal (the LIKE pattern), found identifier"),
    ("s LIKE 'a' ESCAPE 'ab'", 18, "expected a one-character string after ESCAPE"),
    ("s LIKE 'a!' ESCAPE '!'", 7, "the LIKE pattern ends with its escape character"),
    ("s IN ()", 6, "expected a string or number literal in the IN list, found ')'"),
    ("s IN 'a'", 5, "expected '(' after IN, found string 'a'"),
    ("s IN ('a' 'b')", 10, "expected ',' or ')' in the IN list, found string 'b'"),
    ("s IN (t)", 6, "expected a string or number literal in the IN list"),
    ("s IN (-'a')", 7, "expected a number after the sign, found string 'a'"),
    ("n BETWEEN 1 OR 2", 12, "expected AND (of BETWEEN ... AND ...), found OR"),
    ("n NOT 5", 6, "expected BETWEEN, IN or LIKE after NOT, found number 5"),
    ("n IS 5", 5, "expected NULL after IS, found number 5"),
    ("n IS NOT 5", 9, "expected NULL after IS NOT, found number 5"),
    ("AND = 1", 0, "expected an identifier, a literal or '(', found AND"),
])
def test_syntax_errors(text, position, problem):
    """S2.8: a selector that does not parse raises SelectorError naming the position
    and what was expected there, with the AMQP condition amqp:invalid-field."""
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    error = caught.value
    assert isinstance(error, CoreError)
    assert error.kind is ErrorKind.INVALID
    assert error.position == position
    assert error.problem.startswith(problem)
    assert error.description == f"invalid selector at position {position}: {error.problem}"


def test_selector_must_be_text():
    """S2.8: a selector that is not text (a broken filter value) is a SelectorError."""
    with pytest.raises(SelectorError, match="a selector is text, not bytes"):
        compile_selector(b"n = 1")


def test_length_limit():
    """S2.8: selectors up to MAX_SELECTOR_LENGTH characters compile; longer ones raise
    SelectorTooLong."""
    padding = " " * (MAX_SELECTOR_LENGTH - len("n = 1"))
    assert compile_selector("n = 1" + padding).matches({"n": 1}.get)
    with pytest.raises(SelectorTooLong) as caught:
        compile_selector("n = 1" + padding + " ")
    assert caught.value.position == MAX_SELECTOR_LENGTH
    assert "at most 4096" in caught.value.problem


@pytest.mark.parametrize("make", [
    lambda d: "(" * d + "n = 1" + ")" * d,
    lambda d: "NOT " * d + "yes",
    lambda d: "-" * d + "n = 1",
    lambda d: " + ".join(["n"] * (d + 1)) + " = 1",
    lambda d: "n = " + "(" * d + "1" + ")" * d,
])
def test_depth_limit(make):
    """S2.8: nesting just under MAX_DEPTH levels compiles (the comparison counts as a
    level); deeper raises SelectorTooDeep, so the parser and evaluator never hit
    Python's recursion limit."""
    compile_selector(make(MAX_DEPTH - 2))
    with pytest.raises(SelectorTooDeep, match=f"nested more than {MAX_DEPTH} levels"):
        compile_selector(make(MAX_DEPTH + 1))


def test_long_and_or_chains_are_not_deep():
    """S2.8: long AND/OR chains (generated selectors) are flat, not nested."""
    text = " OR ".join(f"n = {i}" for i in range(350))
    assert len(text) < MAX_SELECTOR_LENGTH
    selector = compile_selector(text)
    assert selector.matches({"n": 349}.get)
    assert not selector.matches({"n": 350}.get)


def test_compiled_once():
    """S2.8: a compiled selector keeps its text and identifiers and evaluates with no
    further parsing (it can be reused for any number of lookups)."""
    selector = compile_selector("color = 'red' AND JMSPriority > 4")
    assert isinstance(selector, Selector)
    assert selector.text == "color = 'red' AND JMSPriority > 4"
    assert selector.identifiers == frozenset({"color", "JMSPriority"})
    asked = []

    def lookup(name):
        asked.append(name)
        return {"color": "red", "JMSPriority": 9}[name]
    assert all(selector.matches(lookup) for _ in range(3))
    assert asked == ["color", "JMSPriority"] * 3
    assert repr(selector) == "<Selector \"color = 'red' AND JMSPriority > 4\">"


def test_matches_only_when_true():
    """S2.8: matches() is True only for TRUE; UNKNOWN and FALSE do not select."""
    selector = compile_selector("n > 1")
    assert selector.matches({"n": 2}.get) is True
    assert selector.matches({"n": 0}.get) is False
    assert selector.matches({}.get) is False
    assert selector.evaluate({}.get) is None


class _Payload:
    """A payload with the attributes an EncodedMessage offers (duck typing)."""

    def __init__(self, application_properties=None, properties=None):
        self.application_properties = application_properties or {}
        self.properties = properties


class _BrokenPayload:
    @property
    def application_properties(self):
        raise MqgateError("cannot decode")


def test_message_field_headers():
    """S2.8: header fields come from the BrokerMessage routing fields."""
    message = BrokerMessage(b"x", durable=True, priority=7, expiry=12.5,
                            message_id="ID:1", correlation_id="c-9")
    assert message_field(message, "JMSPriority") == 7
    assert message_field(message, "JMSMessageID") == "ID:1"
    assert message_field(message, "JMSCorrelationID") == "c-9"
    assert message_field(message, "JMSDeliveryMode") == "PERSISTENT"
    assert message_field(message, "JMSExpiration") == 12500
    plain = BrokerMessage(b"x")
    assert message_field(plain, "JMSDeliveryMode") == "NON_PERSISTENT"
    assert message_field(plain, "JMSExpiration") == 0     # JMS: never expires
    assert message_field(plain, "JMSMessageID") is None
    assert message_field(plain, "JMSType") is None
    assert message_field(plain, "JMSTimestamp") is None
    assert "JMSExpiration" in HEADER_FIELDS and len(HEADER_FIELDS) == 7


def test_message_field_properties_by_duck_typing():
    """S2.8: other names are application properties of a payload that has them;
    a payload without them, or whose properties cannot be decoded, has none."""
    payload = _Payload({"color": "red"}, Properties(subject="quote", creation_time=99))
    message = BrokerMessage(payload)
    assert message_field(message, "color") == "red"
    assert message_field(message, "size") is None
    assert message_field(message, "JMSType") == "quote"
    assert message_field(message, "JMSTimestamp") == 99
    assert message_field(BrokerMessage(b"bytes"), "color") is None
    assert message_field(BrokerMessage(_BrokenPayload()), "color") is None


def test_accepts_an_encoded_amqp_message():
    """S2.8: accepts() reads the application properties of a real encoded AMQP
    message, decoded lazily from its bytes."""
    data = encode_message(b"body", properties=Properties(subject="order"),
                          application_properties={"region": "EU", "qty": 12})
    message = BrokerMessage(parse_message(data), priority=6)
    assert compile_selector(
        "region = 'EU' AND qty > 10 AND JMSType = 'order' AND JMSPriority = 6"
    ).accepts(message)
    assert not compile_selector("region = 'US'").accepts(message)
