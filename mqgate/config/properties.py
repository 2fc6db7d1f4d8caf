"""
A parser for Java ``.properties`` text.

Theory of operation
-------------------
The configuration file is a Java properties file (SPEC introduction) so that an OpenMQ
``config.properties`` carries over unchanged.  This module follows the rules of
``java.util.Properties.load``:

1. The text is split into *natural lines* at ``\\n``, ``\\r`` or ``\\r\\n``.
2. Leading white space (space, tab, form feed) of a natural line is skipped.  A line
   that is then empty, or starts with ``#`` or ``!``, is a blank or comment line and
   is ignored (a comment line is never continued, even if it ends with a backslash).
3. A natural line ending in an odd number of backslashes continues on the next natural
   line; the backslash and the line terminator are removed and the leading white space
   of the next line is dropped.  Together these form one *logical line*.
4. The key runs up to the first unescaped ``=``, ``:`` or white space.  The separator is
   any white space, then at most one ``=`` or ``:``, then any white space.  The rest of
   the logical line is the value (it may be empty).
5. In keys and values ``\\t \\n \\r \\f`` are control characters, ``\\uXXXX`` is a
   Unicode code point and a backslash before any other character stands for that
   character (so ``\\=``, ``\\:``, ``\\ `` and ``\\\\`` can appear in a key).

The module is pure: text in, ``(key, value, line_number)`` tuples out, in file order.
Duplicate keys are all returned; the caller decides that the last one wins.  Nothing
here knows which keys exist: that is ``schema.py``'s job.
"""

import re

from mqgate.errors import ConfigError

__all__ = ["parse_properties", "escape_value"]

# Rule 1: only these three terminators end a natural line (str.splitlines would also
# split at \v, \x1c, \u2028 ..., which Java does not).
_LINE_TERMINATOR = re.compile(r"\r\n|\r|\n")

# Rule 2/4: Java's notion of white space in a properties file.
_WHITESPACE = " \t\f"
_SEPARATORS = "=:"

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}

_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")

_BAD_UNICODE = "\\u followed by four hexadecimal digits"


def parse_properties(text, *, source=None):
    """Parse Java properties text.

    Args:
        text: the whole file as a str.
        source: optional name of the file, used in error messages (``path:line``).

    Returns:
        A list of ``(key, value, line_number)`` tuples in file order, where
        ``line_number`` (1-based) is the natural line on which the entry starts.

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape; the error names the key and
            the line.
    """
    entries = []
    for line_number, logical in _logical_lines(text):
        where = f"{source}:{line_number}" if source else f"line {line_number}"
        raw_key, raw_value = _split_entry(logical)
        key = _unescape(raw_key, raw_key, where)
        value = _unescape(raw_value, key, where)
        entries.append((key, value, line_number))
    return entries


def _logical_lines(text):
    """Yield ``(line_number, logical_line)`` for every non-blank, non-comment entry.

    The logical line still holds its escapes; only continuations are resolved (rule 3).
    """
    natural = _LINE_TERMINATOR.split(text)
    index = 0
    while index < len(natural):
        start = index
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            if index >= len(natural):
                # A continuation at end of input continues onto nothing.
                line = ""
                break
            line = natural[index].lstrip(_WHITESPACE)
            index += 1
        parts.append(line)
        yield start + 1, "".join(parts)


def _continues(line):
    """Return True if the line ends with an odd number of backslashes (rule 3)."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(logical):
    """Split a logical line into its raw (still escaped) key and value (rule 4)."""
    position = 0
    length = len(logical)
    while position < length:
        char = logical[position]
        if char == "\\":
            # An escaped character is part of the key, whatever it is.
            position += 2
            continue
        if char in _SEPARATORS or char in _WHITESPACE:
            break
        position += 1
    key = logical[:position]
    rest = logical[position:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(raw, key, where):
    """Resolve the escapes of rule 5 in a key or a value.

    Args:
        raw: the escaped text.
        key: the key to name in an error (the raw key while the key itself is decoded).
        where: ``path:line`` or ``line N`` for the error.
    """
    if "\\" not in raw:
        return raw
    out = []
    position = 0
    length = len(raw)
    while position < length:
        char = raw[position]
        if char != "\\":
            out.append(char)
            position += 1
            continue
        if position + 1 >= length:
            # A lone trailing backslash (left by a continuation at end of input).
            break
        code = raw[position + 1]
        if code == "u":
            digits = raw[position + 2:position + 6]
            if not _HEX4.fullmatch(digits):
                raise ConfigError(key, "\\u" + digits, _BAD_UNICODE, where)
            out.append(chr(int(digits, 16)))
            position += 6
            continue
        out.append(_ESCAPES.get(code, code))
        position += 2
    # Java strings are UTF-16: a character above U+FFFF is written as two \u escapes
    # (a surrogate pair), which Python must join into one code point.
    text = "".join(out)
    utf16 = text.encode("utf-16-le", "surrogatepass")
    return utf16.decode("utf-16-le", "surrogatepass")


def escape_value(value):
    """Escape a value so that ``parse_properties`` reads it back unchanged.

    Used when rendering the documented properties file.  Backslashes and control
    characters are escaped, and so is a leading space (which the parser would drop).
    Non-ASCII characters are written as ``\\uXXXX`` so the file stays ASCII, as Java's
    ``Properties.store`` does.
    """
    out = []
    for index, char in enumerate(value):
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char == " " and index == 0:
            out.append("\\ ")
        elif ord(char) > 0x7E:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char):
    """Return the UTF-16 code units of one character (a surrogate pair above U+FFFF)."""
    encoded = char.encode("utf-16-be")
    return [int.from_bytes(encoded[i:i + 2], "big") for i in range(0, len(encoded), 2)]
