"""Tests for the Java .properties parser (SPEC introduction: the file format)."""

import pytest

from mqgate.config.properties import escape_value, parse_properties
from mqgate.errors import ConfigError


def parse_one(text):
    """Parse text holding exactly one entry and return its (key, value)."""
    [(key, value, _line)] = parse_properties(text)
    return key, value


@pytest.mark.parametrize("text", [
    "a=b", "a:b", "a b", "a\tb", "a\fb",
    "a = b", "a : b", "a   b", "a \t= \t b", "  a=b",
])
def test_each_separator(text):
    """The key ends at '=', ':' or white space, with white space around it ignored."""
    assert parse_one(text) == ("a", "b")


def test_only_one_separator_character_is_consumed():
    """After the separator, a second '=' or ':' belongs to the value."""
    assert parse_one("a==b") == ("a", "=b")
    assert parse_one("a :: b") == ("a", ": b")
    assert parse_one("a b=c") == ("a", "b=c")


def test_trailing_whitespace_of_value_is_kept():
    """Like Java, the parser keeps trailing white space (Settings strips it)."""
    assert parse_one("a=b  ") == ("a", "b  ")


def test_empty_value():
    """A key with a separator and nothing after it, or no separator at all, is empty."""
    assert parse_properties("a=\nb\nc:   \n") == [
        ("a", "", 1), ("b", "", 2), ("c", "", 3)]


def test_comments_and_blank_lines_are_skipped():
    """Blank lines and lines starting with '#' or '!' (after blanks) are skipped."""
    text = "# comment\n  ! also comment\n\n   \t\na=1\n#b=2\n"
    assert parse_properties(text) == [("a", "1", 5)]


def test_comment_marker_inside_a_value_is_text():
    """A '#' after the start of a line is part of the value, not a comment."""
    assert parse_one("a=b # not a comment") == ("a", "b # not a comment")


def test_line_continuation_drops_leading_whitespace():
    """A trailing backslash joins the next line, minus its leading white space."""
    text = "list = jms,\\\n        admin,\\\n   ssljms\nnext=1\n"
    assert parse_properties(text) == [("list", "jms,admin,ssljms", 1), ("next", "1", 4)]


def test_even_backslashes_do_not_continue():
    """Two trailing backslashes are an escaped backslash, not a continuation."""
    assert parse_properties("a=b\\\\\nc=d") == [("a", "b\\", 1), ("c", "d", 2)]


def test_continued_line_starting_with_hash_is_not_a_comment():
    """A continuation line is part of the value even when it starts with '#'."""
    assert parse_one("a=1\\\n  #2") == ("a", "1#2")


def test_comment_line_is_never_continued():
    """A comment ending with a backslash does not swallow the next line."""
    assert parse_properties("# comment \\\na=1") == [("a", "1", 2)]


def test_continuation_at_end_of_input():
    """A continuation on the last line continues onto nothing."""
    assert parse_one("a=b\\") == ("a", "b")


def test_line_terminators():
    """\\n, \\r and \\r\\n all end a line; line numbers count natural lines."""
    assert parse_properties("a=1\r\nb=2\rc=3\n") == [("a", "1", 1), ("b", "2", 2),
                                                      ("c", "3", 3)]


def test_line_number_is_where_entry_starts():
    """An entry continued over several lines reports its first line."""
    assert parse_properties("\n\na=1\\\n2\\\n3\nb=4")[1] == ("b", "4", 6)


def test_escapes_in_value():
    """\\t \\n \\r \\f are control characters; any other escaped char is itself."""
    assert parse_one(r"a=x\ty\nz\r\f\\\q\=") == ("a", "x\ty\nz\r\f\\q=")


def test_unicode_escape():
    """\\uXXXX is a Unicode code point, in any hex letter case."""
    assert parse_one(r"greeting=caf\u00e9 \u00C9t\u00E9") == ("greeting", "café Été")


def test_unicode_surrogate_pair_is_joined():
    """A surrogate pair of \\u escapes becomes one character above U+FFFF."""
    assert parse_one(r"a=\ud83d\ude00") == ("a", "\U0001F600")


def test_bad_unicode_escape_names_key_and_line():
    """A malformed \\u escape raises ConfigError naming the key and the line."""
    with pytest.raises(ConfigError) as info:
        parse_properties("ok=1\nbad=\\u12G4\n", source="etc/x.properties")
    assert info.value.key == "bad"
    assert info.value.source == "etc/x.properties:2"
    assert "etc/x.properties:2" in str(info.value)
    assert "\\u12G4" in str(info.value)


def test_truncated_unicode_escape():
    """A \\u escape with fewer than four digits at end of line is an error too."""
    with pytest.raises(ConfigError) as info:
        parse_properties("a=\\u00")
    assert info.value.source == "line 1"


@pytest.mark.parametrize("text, key", [
    (r"a\=b=c", "a=b"),
    (r"a\:b:c", "a:b"),
    (r"a\ b c", "a b"),
    (r"a\\=c", "a\\"),
    (r"\#notcomment=c", "#notcomment"),
])
def test_key_with_escaped_separator(text, key):
    """An escaped separator (or white space, or '#') is part of the key."""
    assert parse_one(text) == (key, "c")


def test_duplicates_are_all_returned_in_order():
    """Every occurrence of a key is returned; the caller lets the last one win."""
    assert parse_properties("a=1\na=2") == [("a", "1", 1), ("a", "2", 2)]


@pytest.mark.parametrize("value", [
    "", "plain", " leading space", "back\\slash", "tab\tnew\nline", "café",
    "\U0001F600", "a=b:c d",
])
def test_escape_value_round_trips(value):
    """escape_value writes a value that the parser reads back unchanged, in ASCII."""
    escaped = escape_value(value)
    assert escaped.isascii()
    assert parse_one("k=" + escaped) == ("k", value)
