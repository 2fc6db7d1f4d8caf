"""
STOMP 1.0/1.1/1.2 frames: parse and serialize (S10.2), with limits (docs/design.md).

Theory of operation
-------------------
A frame is a command line, header lines, a blank line, a body and a NUL octet::

    COMMAND EOL *(name ":" value EOL) EOL body NUL *(EOL)

EOL is LF or CR LF. STOMP 1.2 allows the CR; 1.0 and 1.1 say LF, but clients on every
version send CR LF now and then, and a CR at the end of a line can mean nothing else, so
we accept it everywhere. EOLs between frames are heart-beats (1.1+); they are reported
as the single L{HEARTBEAT} value (several in a row count once).

The body ends at the first NUL, unless the frame carries C{content-length}: then exactly
that many octets are read (NULs included) and a NUL must follow.

Header escaping depends on the version (the spec's "Value Encoding"):

    1.0   none: a backslash is an ordinary octet
    1.1   \\n \\c \\\\
    1.2   \\r \\n \\c \\\\
    any other escape sequence is a fatal error (1.1, 1.2)

CONNECT, STOMP and CONNECTED frames are never escaped, whatever the version, because the
version is not agreed until they have been exchanged (1.2 says so for CONNECT and
CONNECTED; STOMP is CONNECT by another name). For the same reason the parser stops after
one of those frames: the connection negotiates the version and then calls
L{FrameParser.resume} with it, so the frames behind it are unescaped the right way.

Repeated headers keep their order; L{Frame.get} returns the first, as 1.1 and 1.2 ask.

The parser works a line at a time with C{bytearray.find}, never byte by byte, and never
scans the same bytes twice (a partial line or a body without content-length remembers
how far it was searched). Every limit is checked as the bytes arrive, so a peer cannot
make us buffer more than one limit's worth before it is told off.
"""

import re
from dataclasses import dataclass, field

from mqgate.stomp.errors import FrameError, MessageTooBig

__all__ = [
    "Frame", "FrameParser", "FrameLimits", "Heartbeat", "HEARTBEAT", "DEFAULT_LIMITS",
    "serialize", "encode_frame", "VERSIONS", "HeaderBlock", "MessageTemplate",
]

#: The versions this module knows, oldest first.
VERSIONS = ("1.0", "1.1", "1.2")

# The frames that are never escaped and after which the version may change.
_UNESCAPED = frozenset(("CONNECT", "STOMP", "CONNECTED"))


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Size limits on incoming frames (the spec's "Size Limits": servers MAY limit the
    number of headers, the length of header lines and the size of the body).

    @ivar max_body_size: octets in one frame body. 64 MiB is the broker's largest
        direct message (S9.5); a bigger SEND could not be accepted anyway, and reading
        it first would only cost memory.
    @ivar max_headers: header lines in one frame. Real frames carry a dozen or two
        (JMS mapping plus application properties); 256 leaves room for generous
        property sets while bounding the per-frame work and memory.
    @ivar max_header_line: octets in one header line (EOL excluded). 8 KiB, the common
        HTTP header-line limit (Tomcat, Apache httpd), fits selectors and long
        properties, and bounds what a partial line can make us hold.
    @ivar max_command_line: octets in the command line. The longest command is 11
        octets; 1 KiB is only there so that garbage without a newline is refused early.
    @ivar max_guaranteed_size: octets in the body of a persistent SEND (S9.5: 30 MB by
        default, set by the broker), or None for C{max_body_size}. A SEND over its
        limit raises L{MessageTooBig}.
    """
    max_body_size: int = 64 * 1024 * 1024
    max_headers: int = 256
    max_header_line: int = 8192
    max_command_line: int = 1024
    max_guaranteed_size: int | None = None


DEFAULT_LIMITS = FrameLimits()


@dataclass(slots=True)
class Frame:
    """One STOMP frame.

    @ivar command: e.g. C{"SEND"} (case-sensitive, as the spec says).
    @ivar headers: C{(name, value)} string pairs, in wire order, repeats kept.
    @ivar body: the body octets.
    """
    command: str
    headers: list = field(default_factory=list)
    body: bytes = b""

    def get(self, name, default=None):
        """The value of the FIRST header called C{name} (1.2 "Repeated Header Entries")."""
        for key, value in self.headers:
            if key == name:
                return value
        return default


class Heartbeat:
    """The type of L{HEARTBEAT}: one or more EOLs between frames."""

    __slots__ = ()

    def __repr__(self):
        return "HEARTBEAT"


HEARTBEAT = Heartbeat()

# -- escaping ------------------------------------------------------------------------------

_DECODE_ESCAPES = {
    "1.1": {b"n": b"\n", b"c": b":", b"\\": b"\\"},
    "1.2": {b"r": b"\r", b"n": b"\n", b"c": b":", b"\\": b"\\"},
}
# A backslash and the octet after it (or nothing, at the end of the value).
_ESCAPE_RE = re.compile(rb"\\(.?)", re.S)
_NEEDS_ESCAPE_11 = re.compile(r"[\\\n:]").search
_NEEDS_ESCAPE_12 = re.compile(r"[\\\r\n:]").search


def _unescaper(table):
    def replace(match):
        try:
            return table[match.group(1)]
        except KeyError:
            raise FrameError(
                "undefined escape sequence",
                f"header contains the undefined escape {match.group(0)!r}") from None

    def unescape(raw):
        return _ESCAPE_RE.sub(replace, raw) if b"\\" in raw else raw
    return unescape


_UNESCAPERS = {version: _unescaper(table) for version, table in _DECODE_ESCAPES.items()}


def _escape_11(text):
    if _NEEDS_ESCAPE_11(text) is None:
        return text
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def _escape_12(text):
    if _NEEDS_ESCAPE_12(text) is None:
        return text
    return (text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
            .replace(":", "\\c"))


def _escape_none(text):
    # 1.0 and the CONNECT/CONNECTED frames have no escapes: an EOL inside a value would
    # end the header line and desynchronise the stream, so it is sent as a space.
    if "\n" in text or "\r" in text:
        return text.replace("\r", " ").replace("\n", " ")
    return text


_ESCAPERS = {"1.1": _escape_11, "1.2": _escape_12}


def _escaper(version, command):
    if command in _UNESCAPED:
        return _escape_none
    return _ESCAPERS.get(version, _escape_none)


# -- serializing ---------------------------------------------------------------------------

def encode_frame(command, headers, body=b"", version="1.2"):
    """Serialize a frame from its parts in one join (the hot path of MESSAGE frames).

    Header names and values are escaped for C{version}; values that are not strings are
    converted with C{str}. Any C{content-length} in C{headers} is dropped and, for a
    non-empty body, the right one is added, so a body with NULs always frames correctly.

    @return: the frame's bytes, NUL included.
    """
    escape = _escaper(version, command)
    lines = [command]
    append = lines.append
    for name, value in headers:
        if name == "content-length":
            continue
        if type(value) is not str:
            value = str(value)
        append(f"{escape(name)}:{escape(value)}")
    if body:
        append(f"content-length:{len(body)}")
    append("\n")
    return b"".join(("\n".join(lines).encode("utf-8"), body, b"\x00"))


# The headers a MESSAGE frame sets itself; the same names among a message's own headers
# are left out (content-length is always computed from the body).
MESSAGE_OWN_HEADERS = frozenset(
    ("destination", "message-id", "subscription", "ack", "content-length"))


def _header_lines(headers, escape, skip):
    """C{name:value} lines, each ending with LF, for the pairs whose name is not in
    C{skip}, escaped with C{escape}; values that are not strings go through C{str}."""
    lines = []
    append = lines.append
    for name, value in headers:
        if name in skip:
            continue
        if type(value) is not str:
            value = str(value)
        append(f"{escape(name)}:{escape(value)}\n")
    return "".join(lines).encode("utf-8")


class HeaderBlock:
    """A message's own headers, for the MESSAGE frames of every subscriber: escaped and
    encoded once per STOMP version, however many frames carry them (fan-out,
    redelivery).

    @ivar pairs: the C{(name, value)} pairs, in order.
    """

    __slots__ = ("pairs", "_encoded")

    def __init__(self, pairs):
        self.pairs = pairs
        self._encoded = {}   # version -> bytes

    def encoded(self, version):
        """The header lines for C{version}, without those of L{MESSAGE_OWN_HEADERS}."""
        if not self.pairs:
            return b""
        data = self._encoded.get(version)
        if data is None:
            data = self._encoded[version] = _header_lines(
                self.pairs, _escaper(version, "MESSAGE"), MESSAGE_OWN_HEADERS)
        return data


class MessageTemplate:
    """The parts of one subscription's MESSAGE frames that are the same in every frame
    (command, subscription, destination), escaped and encoded once.

    A frame is rendered as C{encode_frame} would write it: subscription, message-id,
    destination, ack (1.2, when C{ack_id} is given), the message's headers, the
    C{extra} pairs, content-length (non-empty body), the body and the NUL.
    """

    __slots__ = ("version", "_escape", "_head", "_destination")

    def __init__(self, subscription, destination, version):
        self.version = version
        escape = self._escape = _escaper(version, "MESSAGE")
        self._head = f"MESSAGE\nsubscription:{escape(str(subscription))}\nmessage-id:".encode()
        self._destination = f"\ndestination:{escape(str(destination))}\n".encode()

    def render(self, message_id, headers, body, ack_id=None, extra=()):
        """The frame's bytes. C{headers}: a L{HeaderBlock} or C{(name, value)} pairs."""
        escape = self._escape
        parts = [self._head, escape(str(message_id)).encode("utf-8"), self._destination]
        if ack_id is not None and self.version == "1.2":
            parts.append(f"ack:{escape(str(ack_id))}\n".encode("utf-8"))
        if type(headers) is HeaderBlock:
            parts.append(headers.encoded(self.version))
        elif headers:
            parts.append(_header_lines(headers, escape, MESSAGE_OWN_HEADERS))
        if extra:
            parts.append(_header_lines(extra, escape, MESSAGE_OWN_HEADERS))
        if body:
            parts.append(b"content-length:%d\n\n" % len(body))
            parts.append(body)
            parts.append(b"\x00")
        else:
            parts.append(b"\n\x00")
        return b"".join(parts)


def serialize(frame, version):
    """Serialize a L{Frame} for C{version} (see L{encode_frame})."""
    return encode_frame(frame.command, frame.headers, frame.body, version)


# -- parsing -------------------------------------------------------------------------------

_COMMAND, _HEADERS, _BODY = "COMMAND", "HEADERS", "BODY"
_CR, _NUL = 13, b"\x00"
# How far past a command line L{FrameParser._header_block} looks for the blank line.
_BLOCK_WINDOW = 8192


class FrameParser:
    """Turns a byte stream into L{Frame}s and L{HEARTBEAT}s.

    @param version: the agreed version (C{"1.0"}, C{"1.1"}, C{"1.2"}), or None before
        it is agreed (nothing is unescaped then).
    @param limits: a L{FrameLimits}.
    @param expect: the commands the next frame may have, or None for any. A command line
        naming another is a L{FrameError} at once, before the frame's headers and body
        are read (a server expects CONNECT or STOMP first, whatever follows it). L{resume}
        lifts it.
    @ivar paused: True after a CONNECT, STOMP or CONNECTED frame, until L{resume}.
    @ivar error: the L{FrameError} that stopped the parser, or None.
    """

    def __init__(self, version=None, limits=DEFAULT_LIMITS, expect=None):
        if version is not None and version not in VERSIONS:
            raise ValueError(f"unknown STOMP version {version!r}")
        self.version = version
        self.limits = limits
        self.expect = expect
        self.paused = False
        self.error = None
        self._buf = bytearray()
        self._scan = 0              # where the next search may start (bytes before: seen)
        self._state = _COMMAND
        self._command = None
        self._headers = []
        self._length = None         # content-length of the frame being read, or None
        self._limit = limits.max_body_size   # body limit of the frame being read
        self._guaranteed = False             # ... which is a persistent SEND
        self._unescape = None
        self.more = False           # stopped at max_frames: buffered bytes not parsed

    def feed(self, data, max_frames=None):
        """Add received bytes; return the frames (and heart-beats) now complete, in order.

        @param max_frames: return at most this many; the bytes behind them stay
            buffered, unparsed, and C{more} is True until a later call (C{feed(b"")}
            will do) has taken them. So the work of one call is bounded by frames, not
            by bytes: 64 KiB of tiny frames are two thousand of them.
        @raise FrameError: the stream is malformed or a limit was exceeded. When frames
            were complete before the bad bytes, they are returned first and the error is
            kept in C{error} and raised by the next call.
        """
        if self.error is not None:
            raise self.error
        if data:
            self._buf += data
        self.more = False
        if self.paused:
            return []
        return self._run(max_frames)

    def resume(self, version):
        """Continue after a CONNECT/STOMP/CONNECTED frame, now that C{version} is agreed.

        @return: the frames complete in what was buffered meanwhile (as L{feed}).
        """
        if version not in VERSIONS:
            raise ValueError(f"unknown STOMP version {version!r}")
        self.version = version
        self.paused = False
        self.expect = None
        return self.feed(b"")

    def _run(self, max_frames=None):
        out = []
        try:
            self._parse(out, max_frames)
        except FrameError as error:
            self.error = error
            self._buf = bytearray()   # nothing more will be read: free the memory
            if not out:
                raise
        return out

    def _parse(self, out, max_frames=None):
        buf = self._buf
        pos = 0
        try:
            while not self.paused:
                if max_frames is not None and len(out) >= max_frames:
                    self.more = pos < len(buf)
                    break
                if self._state is _COMMAND:
                    start = self._head(buf, pos)
                    if start >= 0:
                        pos = start       # and on to its body, in this same turn
                if self._state is _BODY:
                    end = self._body_end(buf, pos)
                    if end < 0:
                        break
                    with memoryview(buf) as view:   # one copy of the body, not two
                        body = bytes(view[pos:end])
                    self._emit(body, out)
                    pos = end + 1
                    continue
                nl = buf.find(b"\n", max(pos, self._scan))
                if nl < 0:
                    self._check_partial_line(len(buf) - pos)
                    self._scan = len(buf)
                    break
                end = nl - 1 if nl > pos and buf[nl - 1] == _CR else nl
                line = bytes(buf[pos:end])
                pos = nl + 1
                if self._state is _COMMAND:
                    self._on_command_line(line, out)
                else:
                    self._on_header_line(line)
        finally:
            if pos:
                del buf[:pos]
                self._scan = max(0, self._scan - pos)

    def _head(self, buf, pos):
        """Read a frame's command and header lines in one pass when its blank line is
        buffered (the common case: a client writes a frame in one piece), and start its
        body; return where the body starts, or -1 to leave the frame to the
        line-by-line path. That path takes whatever is out of the ordinary (a heart-beat,
        a line over a limit, a command not expected, escapes, UTF-8, a line without a
        colon) and reports any error in it, so both paths raise the same errors in the
        same order.

        The blank line is only looked for in the next L{_BLOCK_WINDOW} octets, so a
        stream of frames never makes us search far past the frame at hand.
        """
        window = pos + _BLOCK_WINDOW
        blank = buf.find(b"\n\n", pos, window)
        crlf = buf.find(b"\n\r\n", pos, window if blank < 0 else blank + 1)
        if crlf >= 0:
            end, start = crlf, crlf + 3
        elif blank >= 0:
            end, start = blank, blank + 2
        else:
            return -1
        try:
            head = buf[pos:end].decode("ascii")
        except UnicodeDecodeError:
            return -1             # UTF-8 headers: the line path decodes them
        lines = head.split("\n")
        if "\r" in head:
            lines = [line[:-1] if line[-1:] == "\r" else line for line in lines]
        command = lines[0]
        limits = self.limits
        if not command or len(command) > limits.max_command_line or (
                self.expect is not None and command not in self.expect):
            return -1
        unescape = None if command in _UNESCAPED else _UNESCAPERS.get(self.version)
        if unescape is not None and "\\" in head:
            return -1             # escapes: the line path undoes them
        del lines[0]
        # No line is longer than all of them: most frames need no look at each.
        if len(lines) > limits.max_headers or (
                len(head) > limits.max_header_line
                and max(map(len, lines)) > limits.max_header_line):
            return -1
        headers = []
        append = headers.append
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                return -1
            append((name, value))
        self._command = command
        self._unescape = unescape
        self._headers = headers
        self._length = None
        self._start_body()
        return start

    def _check_partial_line(self, size):
        # An unfinished line may still end with the CR of its EOL: allow one octet more.
        if self._state is _COMMAND:
            if size > self.limits.max_command_line + 1:
                raise self._too_long_command()
        elif size > self.limits.max_header_line + 1:
            raise self._too_long_header()

    def _too_long_command(self):
        limit = self.limits.max_command_line
        return FrameError(f"command line longer than {limit} bytes",
                          f"the frame's command line exceeds the limit of {limit} bytes")

    def _too_long_header(self):
        limit = self.limits.max_header_line
        return FrameError(f"header line longer than {limit} bytes",
                          f"a header line of a {self._command} frame exceeds the limit "
                          f"of {limit} bytes")

    def _on_command_line(self, line, out):
        if not line:
            # EOLs between frames: heart-beats (1.1 "Heart-beating"), also allowed after
            # the NUL of every frame by the grammar. Several in a row count once.
            if not out or out[-1] is not HEARTBEAT:
                out.append(HEARTBEAT)
            return
        if len(line) > self.limits.max_command_line:
            raise self._too_long_command()
        try:
            command = line.decode("ascii")
        except UnicodeDecodeError:
            raise FrameError("malformed frame",
                             f"the command line {line[:40]!r} is not ASCII") from None
        if self.expect is not None and command not in self.expect:
            raise FrameError("not connected",
                             f"the first frame must be {' or '.join(sorted(self.expect))}, "
                             f"not {command[:40]!r}")
        self._command = command
        self._headers = []
        self._length = None
        self._state = _HEADERS
        version = None if command in _UNESCAPED else self.version
        self._unescape = _UNESCAPERS.get(version)

    def _on_header_line(self, line):
        if not line:
            self._start_body()
            return
        if len(line) > self.limits.max_header_line:
            raise self._too_long_header()
        if len(self._headers) >= self.limits.max_headers:
            limit = self.limits.max_headers
            raise FrameError(f"more than {limit} headers",
                             f"the {self._command} frame has more than the limit of "
                             f"{limit} headers")
        name, colon, value = line.partition(b":")
        if not colon:
            raise FrameError("malformed frame",
                             f"header line {line[:40]!r} of a {self._command} frame "
                             "has no colon")
        unescape = self._unescape
        if unescape is not None:
            name, value = unescape(name), unescape(value)
        try:
            self._headers.append((name.decode("utf-8"), value.decode("utf-8")))
        except UnicodeDecodeError:
            raise FrameError("malformed frame",
                             f"a header of a {self._command} frame is not UTF-8") from None

    def _start_body(self):
        self._state = _BODY
        limits = self.limits
        self._limit = limits.max_body_size
        self._guaranteed = False
        # One pass for both headers the body depends on; the first of each wins (1.2).
        length = persistent = None
        for name, value in self._headers:
            if name == "content-length":
                if length is None:
                    length = value
            elif name == "persistent" and persistent is None:
                persistent = value
        if (persistent == "true" and self._command == "SEND"
                and limits.max_guaranteed_size is not None):
            self._guaranteed = True
            self._limit = limits.max_guaranteed_size
        if length is not None:
            self._length = self._content_length(length)

    def _content_length(self, value):
        limit = self._limit
        if not (value.isascii() and value.isdigit()):
            raise FrameError("malformed frame",
                             f"content-length {value[:40]!r} is not a number of octets")
        # Length check before int(): a 5000-digit number must not reach int() (which
        # refuses more than 4300 digits) or anything else.
        if len(value) > len(str(limit)):
            raise self._too_big(int(value) if len(value) <= 20 else None)
        length = int(value)
        if length > limit:
            raise self._too_big(length if len(value) <= 20 else None)
        return length

    def _too_big(self, size=None):
        limit = self._limit
        if self._command == "SEND":
            return MessageTooBig(size if size is not None else limit + 1, limit,
                                 self._guaranteed)
        return FrameError(f"frame body longer than {limit} bytes",
                          f"the {self._command} frame's body exceeds the limit of "
                          f"{limit} bytes")

    def _body_end(self, buf, pos):
        """The offset of the body's NUL, or -1 when more bytes are needed."""
        length = self._length
        if length is not None:
            end = pos + length
            if len(buf) <= end:
                return -1
            if buf[end] != 0:
                raise FrameError("malformed frame",
                                 f"the {self._command} frame's body of content-length "
                                 f"{length} is not followed by a NUL")
            return end
        end = buf.find(_NUL, max(pos, self._scan))
        if end < 0:
            if len(buf) - pos > self._limit:
                raise self._too_big(len(buf) - pos)
            self._scan = len(buf)
        elif end - pos > self._limit:
            raise self._too_big(end - pos)
        return end

    def _emit(self, body, out):
        command = self._command
        out.append(Frame(command, self._headers, body))
        self._state = _COMMAND
        self._command = None
        self._headers = []
        if command in _UNESCAPED:
            self.paused = True
