"""Tests of STOMP frame parsing and serialization (S10.2 framing, S10.4 limits, P5)."""

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.stomp.errors import FrameError, MessageTooBig
from mqgate.stomp.frames import (
    HEARTBEAT, Frame, FrameLimits, FrameParser, HeaderBlock, MessageTemplate, encode_frame,
    serialize,
)

PROPS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def parse_all(data, version="1.2", limits=FrameLimits()):
    """Parse a whole byte string; resume after CONNECT-like frames with the same version."""
    parser = FrameParser(version, limits)
    out = parser.feed(data)
    while parser.paused:
        out += parser.resume(version)
    return out


def frames_only(items):
    return [item for item in items if item is not HEARTBEAT]


# -- round trips ---------------------------------------------------------------------------

def header_text(version, name=False):
    """Header text each version can carry (1.0 has no escapes: no EOLs; 1.1 no CR)."""
    excluded = {"1.0": "\r\n", "1.1": "\r", "1.2": ""}[version] + (":" if name and
                                                                     version == "1.0" else "")
    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters=excluded)
    return st.text(alphabet, min_size=1 if name else 0, max_size=12)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_round_trip_per_version(version):
    """S10.2: serialize then parse gives the same frame back, for each version's alphabet."""
    @PROPS
    @given(headers=st.lists(st.tuples(header_text(version, name=True),
                                      header_text(version)), max_size=6),
           body=st.binary(max_size=64))
    def check(headers, body):
        headers = [(n, v) for n, v in headers if n != "content-length"]
        frame = Frame("SEND", headers, body)
        (parsed,) = frames_only(parse_all(serialize(frame, version), version))
        expected = headers + ([("content-length", str(len(body)))] if body else [])
        assert (parsed.command, parsed.headers, parsed.body) == ("SEND", expected, body)
    check()


def test_serialize_layout():
    """S10.2: a frame is command, header lines, blank line, body, NUL; content-length added."""
    data = encode_frame("SEND", [("destination", "/queue/a")], b"hi", "1.2")
    assert data == b"SEND\ndestination:/queue/a\ncontent-length:2\n\nhi\x00"


def test_serialize_empty_body_has_no_content_length():
    """S10.2: a frame without a body gets no content-length header."""
    assert encode_frame("RECEIPT", [("receipt-id", "7")], b"", "1.2") == \
        b"RECEIPT\nreceipt-id:7\n\n\x00"


def test_serialize_replaces_a_stale_content_length():
    """S10.2: a content-length among the given headers is replaced by the true one."""
    data = encode_frame("MESSAGE", [("content-length", "99"), ("a", "b")], b"xyz", "1.2")
    assert data == b"MESSAGE\na:b\ncontent-length:3\n\nxyz\x00"


def test_serialize_converts_non_string_values():
    """Header values that are not strings (an int priority) are written with str()."""
    assert encode_frame("MESSAGE", [("priority", 4)], b"", "1.2") == \
        b"MESSAGE\npriority:4\n\n\x00"


# -- escaping ------------------------------------------------------------------------------

ESCAPES = [
    # version, decoded value, encoded value
    ("1.2", "a:b", b"a\\cb"),
    ("1.2", "a\nb", b"a\\nb"),
    ("1.2", "a\rb", b"a\\rb"),
    ("1.2", "a\\b", b"a\\\\b"),
    ("1.2", "\\n", b"\\\\n"),
    ("1.1", "a:b", b"a\\cb"),
    ("1.1", "a\nb", b"a\\nb"),
    ("1.1", "a\\b", b"a\\\\b"),
    ("1.0", "a\\b", b"a\\b"),
    ("1.0", "a\\cb", b"a\\cb"),
    ("1.0", "a:b", b"a:b"),
]


@pytest.mark.parametrize("version,value,wire", ESCAPES)
def test_escaping_table(version, value, wire):
    """S10.2: header escaping per version (1.2: \\r \\n \\c \\\\; 1.1: no \\r; 1.0: none)."""
    data = encode_frame("SEND", [("h", value)], b"", version)
    assert data == b"SEND\nh:" + wire + b"\n\n\x00"
    (frame,) = parse_all(data, version)
    assert frame.get("h") == value


def test_header_names_are_escaped_too():
    """S10.2: escaping applies to header names as well as values (1.1+)."""
    data = encode_frame("SEND", [("a:b", "v")], b"", "1.2")
    assert data == b"SEND\na\\cb:v\n\n\x00"
    assert parse_all(data)[0].headers == [("a:b", "v")]


@pytest.mark.parametrize("version,wire", [
    ("1.2", b"a\\tb"), ("1.1", b"a\\rb"), ("1.1", b"a\\tb"), ("1.2", b"ab\\"),
])
def test_undefined_escape_is_fatal(version, wire):
    """S10.2: an undefined escape sequence (or a lone trailing backslash) is a FrameError."""
    with pytest.raises(FrameError, match="undefined escape"):
        parse_all(b"SEND\nh:" + wire + b"\n\n\x00", version)


@pytest.mark.parametrize("command", ["CONNECT", "STOMP", "CONNECTED"])
def test_connect_frames_are_not_unescaped(command):
    """S10.2: CONNECT, STOMP and CONNECTED headers are taken literally, even in 1.2."""
    (frame,) = FrameParser("1.2").feed(command.encode() + b"\npasscode:a\\cb\\t\n\n\x00")
    assert frame.get("passcode") == "a\\cb\\t"


def test_connected_is_not_escaped():
    """S10.2: a CONNECTED frame's values are written as they are (no \\c)."""
    data = encode_frame("CONNECTED", [("server", "a:b")], b"", "1.2")
    assert data == b"CONNECTED\nserver:a:b\n\n\x00"


def test_version_1_0_sends_an_eol_in_a_value_as_a_space():
    """S10.2: 1.0 cannot escape an EOL, so it becomes a space rather than break framing."""
    data = encode_frame("MESSAGE", [("h", "a\r\nb")], b"", "1.0")
    assert data == b"MESSAGE\nh:a  b\n\n\x00"


def test_value_keeps_colons_after_the_first():
    """S10.2: a header line is split at its first colon (lenient for unescaped colons)."""
    (frame,) = parse_all(b"SEND\ndestination:/a:b\n\n\x00", "1.0")
    assert frame.get("destination") == "/a:b"


# -- structure -----------------------------------------------------------------------------

def test_repeated_header_first_wins():
    """S10.2 (1.2 Repeated Header Entries): get() returns the first; all are kept."""
    (frame,) = parse_all(b"MESSAGE\nfoo:World\nfoo:Hello\n\n\x00")
    assert frame.get("foo") == "World"
    assert frame.headers == [("foo", "World"), ("foo", "Hello")]


def test_get_default():
    """Frame.get returns the default when the header is absent."""
    assert Frame("SEND").get("x", "d") == "d"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_crlf_line_endings(version):
    """S10.2: EOL may be CR LF; the CR is not part of the command or the header value."""
    (frame,) = parse_all(b"SEND\r\ndestination:/q\r\nx:\r\n\r\nbody\x00", version)
    assert (frame.command, frame.headers, frame.body) == (
        "SEND", [("destination", "/q"), ("x", "")], b"body")


def test_content_length_body_may_contain_nuls():
    """S10.2: with content-length, exactly that many octets are read, NULs included."""
    body = b"a\x00b\x00\x00c"
    data = b"SEND\ncontent-length:6\n\n" + body + b"\x00SEND\n\n\x00"
    frames = parse_all(data)
    assert [f.body for f in frames] == [body, b""]


def test_content_length_must_be_followed_by_nul():
    """S10.2: a body of content-length octets must end with a NUL, or it is a FrameError."""
    with pytest.raises(FrameError, match="not followed by a NUL"):
        parse_all(b"SEND\ncontent-length:2\n\nabc\x00")


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "\u0661"])
def test_content_length_must_be_a_number(value):
    """S10.4: a content-length that is not a decimal octet count is a FrameError."""
    with pytest.raises(FrameError, match="content-length"):
        parse_all(f"SEND\ncontent-length:{value}\n\n\x00".encode())


def test_content_length_first_occurrence_counts():
    """S10.2: of two content-length headers the first decides the body size."""
    (frame,) = parse_all(b"SEND\ncontent-length:1\ncontent-length:5\n\nx\x00")
    assert frame.body == b"x"


def test_heartbeat_eols_between_frames():
    """S10.2: EOLs between frames are heart-beats, reported once per run, frames intact."""
    items = FrameParser("1.2").feed(b"\n\r\n\nSEND\n\na\x00\n\nSEND\n\nb\x00\n")
    assert [i if i is HEARTBEAT else i.body for i in items] == [
        HEARTBEAT, b"a", HEARTBEAT, b"b", HEARTBEAT]


def test_heartbeat_alone():
    """S10.2: a single EOL on an idle stream is a heart-beat."""
    assert FrameParser("1.1").feed(b"\n") == [HEARTBEAT]


def test_header_without_colon_is_malformed():
    """S10.4: a header line without a colon is a FrameError."""
    with pytest.raises(FrameError, match="no colon"):
        parse_all(b"SEND\nnocolon\n\n\x00")


def test_header_not_utf8_is_malformed():
    """S10.4: header octets that are not UTF-8 are a FrameError."""
    with pytest.raises(FrameError, match="not UTF-8"):
        parse_all(b"SEND\nh:\xff\xfe\n\n\x00")


def test_command_not_ascii_is_malformed():
    """S10.4: a command line that is not ASCII is a FrameError."""
    with pytest.raises(FrameError, match="not ASCII"):
        parse_all(b"S\xe9ND\n\n\x00")


STREAM = (b"SEND\ndestination:/q/a\\cb\r\ncontent-length:3\n\na\x00b\x00\n\r\n"
          b"SUBSCRIBE\nid:1\ndestination:/t\n\n\x00ACK\nid:x\n\n\x00")


def test_split_at_every_position_gives_the_same_frames():
    """S10.2, P12: a stream cut into two pieces at any point parses to the same frames."""
    whole = frames_only(parse_all(STREAM))
    assert len(whole) == 3
    for cut in range(len(STREAM) + 1):
        parser = FrameParser("1.2")
        items = parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:])
        assert frames_only(items) == whole, cut


def test_byte_at_a_time_gives_the_same_frames():
    """S10.2, P12: feeding one byte at a time gives the same frames as the whole stream."""
    parser = FrameParser("1.2")
    items = []
    for i in range(len(STREAM)):
        items += parser.feed(STREAM[i:i + 1])
    assert frames_only(items) == frames_only(parse_all(STREAM))


@PROPS
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_split_at_random_positions(cuts):
    """S10.2, P12: any number of cuts anywhere gives the same frames."""
    parser = FrameParser("1.2")
    items, start = [], 0
    for cut in sorted(cuts) + [len(STREAM)]:
        items += parser.feed(STREAM[start:cut])
        start = cut
    assert frames_only(items) == frames_only(parse_all(STREAM))


# -- pausing after CONNECT -----------------------------------------------------------------

def test_parser_pauses_after_connect_and_resumes_with_the_version():
    """S10.2: frames after CONNECT wait for the agreed version, then unescape by it."""
    parser = FrameParser(None)
    items = parser.feed(b"CONNECT\naccept-version:1.2\n\n\x00SEND\nh:a\\cb\n\n\x00")
    assert [f.command for f in items] == ["CONNECT"]
    assert parser.paused and parser.feed(b"") == []
    (send,) = parser.resume("1.2")
    assert send.get("h") == "a:b"


def test_frames_before_an_error_are_returned_first():
    """S10.4: good frames ahead of bad bytes are delivered; the error comes on the next call."""
    parser = FrameParser("1.2")
    items = parser.feed(b"SEND\n\nok\x00SEND\nbad\n\n\x00")
    assert [f.body for f in items] == [b"ok"]
    assert isinstance(parser.error, FrameError)
    with pytest.raises(FrameError):
        parser.feed(b"more")


def test_unknown_version_is_refused():
    """Only 1.0, 1.1 and 1.2 exist."""
    with pytest.raises(ValueError):
        FrameParser("2.0")


# -- limits --------------------------------------------------------------------------------

SMALL = FrameLimits(max_body_size=100, max_headers=4, max_header_line=50,
                    max_command_line=20)


def feed_until_error(parser, prefix, filler, total):
    """Feed prefix, then filler in small chunks up to total bytes; return bytes fed."""
    fed = 0
    with pytest.raises(FrameError) as info:
        parser.feed(prefix)
        fed = len(prefix)
        while fed < total:
            parser.feed(filler)
            fed += len(filler)
    return fed, info.value


def test_command_line_limit_is_detected_as_bytes_arrive():
    """P5, S10.4: a command line over the limit fails after limit+2 bytes, naming the limit."""
    fed, error = feed_until_error(FrameParser("1.2", SMALL), b"", b"X", 10_000)
    assert fed <= 22
    assert str(error).startswith("command line longer than 20 bytes")


def test_command_line_limit_on_a_complete_line():
    """P5: a complete command line over the limit is refused too."""
    with pytest.raises(FrameError, match="command line longer than 20 bytes"):
        FrameParser("1.2", SMALL).feed(b"X" * 21 + b"\n")


def test_header_line_limit_is_detected_as_bytes_arrive():
    """P5, S10.4: a header line over the limit fails before the rest is buffered."""
    fed, error = feed_until_error(FrameParser("1.2", SMALL), b"SEND\nh:", b"v" * 7, 100_000)
    assert fed <= len(b"SEND\n") + 51 + 7
    assert error.message == "header line longer than 50 bytes"


def test_header_line_at_the_limit_is_accepted():
    """P5: a header line of exactly the limit is fine (the EOL does not count)."""
    line = b"h:" + b"v" * 48
    (frame,) = FrameParser("1.2", SMALL).feed(b"SEND\n" + line + b"\r\n\n\x00")
    assert frame.get("h") == "v" * 48


def test_header_count_limit():
    """P5, S10.4: one header more than the limit is a FrameError naming the limit."""
    ok = b"SEND\n" + b"h:v\n" * 4 + b"\n\x00"
    assert len(FrameParser("1.2", SMALL).feed(ok)[0].headers) == 4
    with pytest.raises(FrameError, match="more than 4 headers"):
        FrameParser("1.2", SMALL).feed(b"SEND\n" + b"h:v\n" * 5)


def test_body_limit_without_content_length_is_detected_as_bytes_arrive():
    """P5, S9.5: a body without NUL past the limit fails before the rest is buffered."""
    fed, error = feed_until_error(FrameParser("1.2", SMALL), b"SEND\n\n", b"b" * 10, 100_000)
    assert fed <= len(b"SEND\n\n") + 110
    # S9.5: a SEND over the limit is the CLIENT_CLIENT_MESSAGE_TOO_BIG event.
    assert error.message == "CLIENT_CLIENT_MESSAGE_TOO_BIG"
    assert "at most 100 bytes" in error.detail


def test_body_limit_with_content_length_fails_before_the_body():
    """P5, S9.5: a content-length over the limit fails as soon as the headers end."""
    with pytest.raises(MessageTooBig) as caught:
        FrameParser("1.2", SMALL).feed(b"SEND\ncontent-length:101\n\n")
    assert (caught.value.size, caught.value.limit, caught.value.guaranteed) == \
        (101, 100, False)


def test_huge_content_length_is_a_limit_error():
    """P5: a content-length with thousands of digits is refused as too big, nothing else."""
    with pytest.raises(MessageTooBig):
        FrameParser("1.2").feed(b"SEND\ncontent-length:" + b"9" * 5000 + b"\n\n")


def test_body_at_the_limit_is_accepted():
    """P5: bodies of exactly the limit pass, with or without content-length."""
    body = b"b" * 100
    assert parse_all(b"SEND\n\n" + body + b"\x00", limits=SMALL)[0].body == body
    data = encode_frame("SEND", [], body, "1.2")
    assert parse_all(data, limits=SMALL)[0].body == body


def test_default_limits():
    """P5, S9.5: the defaults are 64 MiB bodies, 256 headers, 8 KiB header lines, 1 KiB command."""
    assert FrameLimits() == FrameLimits(64 * 1024 * 1024, 256, 8192, 1024)


@pytest.mark.parametrize("persistent,size,refused", [
    (b"persistent:true\n", 60, True), (b"persistent:true\n", 50, False),
    (b"", 60, False), (b"persistent:false\n", 101, True)])
def test_send_limit_by_class(persistent, size, refused):
    """S9.5: a persistent SEND is held to the guaranteed limit, any other SEND to the
    direct one (max_body_size); with or without content-length."""
    limits = FrameLimits(max_body_size=100, max_guaranteed_size=50)
    for length in (b"", b"content-length:%d\n" % size):
        raw = b"SEND\n" + persistent + length + b"\n" + b"x" * size + b"\x00"
        if refused:
            with pytest.raises(MessageTooBig) as caught:
                FrameParser("1.2", limits).feed(raw)
            assert caught.value.guaranteed == (persistent == b"persistent:true\n")
        else:
            assert len(FrameParser("1.2", limits).feed(raw)[0].body) == size


# -- the header block in one pass ---------------------------------------------------------

def outcome(feeds, version, limits):
    """The frames, or the error, of feeding the pieces in C{feeds} one after the other."""
    parser = FrameParser(version, limits)
    items = []
    try:
        for piece in feeds:
            items += parser.feed(piece)
    except FrameError as error:
        return ("error", error.message, str(error))
    if parser.error is not None:
        return ("error", parser.error.message, str(parser.error), frames_only(items))
    return frames_only(items)


# Header lines mixing what the one-pass reader handles (ASCII, CR LF) with what it hands
# to the line-by-line reader (escapes, UTF-8, no colon, too long, too many).
HEADER_LINE = st.one_of(
    st.sampled_from([b"a:b", b"k:v:w", b"x:", b":y", b"persistent:true", b"h:v\r",
                     b"e:a\\cb", b"e:\\q", b"u:\xc3\xa9", b"bad:\xff", b"nocolon",
                     b"long:" + b"v" * 60, b"content-length:3", b"content-length:x"]),
    st.binary(max_size=8).filter(lambda b: b"\n" not in b))


@PROPS
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]),
       lines=st.lists(HEADER_LINE, max_size=7),
       eol=st.sampled_from([b"\n", b"\r\n"]))
def test_whole_and_byte_at_a_time_agree_on_any_header_block(version, lines, eol):
    """S10.2, S10.4: a frame given whole (its headers read in one pass) and given one
    octet at a time (line by line) give the same frame or the same error."""
    data = b"SEND" + eol + b"".join(line + eol for line in lines) + eol + b"abc\x00"
    data += b"SEND\ndestination:/q/2\n\n\x00"
    whole = outcome([data], version, SMALL)
    assert outcome([data[i:i + 1] for i in range(len(data))], version, SMALL) == whole


def test_header_block_longer_than_the_window_is_read_line_by_line():
    """S10.2: headers that do not fit the one-pass window are still all read, in order."""
    headers = [(f"h{i}", "v" * 100) for i in range(120)]
    data = encode_frame("SEND", headers, b"body")
    assert len(data) > 8192
    (frame,) = parse_all(data + b"\n")[:1]
    assert frame.headers == headers + [("content-length", "4")]
    assert frame.body == b"body"


def test_frame_without_headers_in_one_pass():
    """S10.2: a frame with no header lines at all, LF or CR LF, is read whole."""
    for data in (b"DISCONNECT\n\n\x00", b"DISCONNECT\r\n\r\n\x00"):
        (frame,) = parse_all(data)
        assert (frame.command, frame.headers, frame.body) == ("DISCONNECT", [], b"")


# -- MESSAGE frames from a template ----------------------------------------------------------

@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("body", [b"", b"a\x00b"])
def test_template_renders_what_encode_frame_renders(version, body):
    """S10.2: a MESSAGE from a subscription's template and a message's HeaderBlock has
    the same bytes as encode_frame gives, escaping and content-length included."""
    own = [("content-type", "text/plain"), ("k", "a:b\\c\nd\re"), ("n", 7),
           ("destination", "/x"), ("content-length", "99"), ("é", "ü")]
    extra = [("redelivered", "true")]
    template = MessageTemplate("s:1", "/queue/a\nb", version)
    expected = encode_frame(
        "MESSAGE", [("subscription", "s:1"), ("message-id", "m-1"),
                    ("destination", "/queue/a\nb")]
        + ([("ack", "m-1")] if version == "1.2" else [])
        + [h for h in own if h[0] != "destination"] + extra, body, version)
    block = HeaderBlock(own)
    for _ in range(2):   # the second frame comes from the encoded block kept by the first
        assert template.render("m-1", block, body, "m-1", extra) == expected
    assert template.render("m-1", own, body, "m-1", extra) == expected


@PROPS
@given(count=st.integers(0, 40), budget=st.integers(1, 7), cut=st.integers(0, 10**6))
def test_a_frame_budget_returns_the_same_frames_a_budget_at_a_time(count, budget, cut):
    """feed(data, max_frames) gives at most that many frames a call and keeps the rest
    unparsed (C{more}); going on with feed(b"") yields exactly the frames, in order,
    that one unbounded feed would, wherever the bytes were cut in two."""
    data = b"".join(encode_frame("SEND", [("destination", "/queue/q"), ("n", str(i))],
                                 b"x" * (i % 5), "1.2") + b"\n" * (i % 2)
                    for i in range(count))
    cut = cut % (len(data) + 1)
    parser = FrameParser("1.2")
    got = []
    for chunk in (data[:cut], data[cut:]):
        batch = parser.feed(chunk, budget)
        while True:
            assert len(batch) <= budget
            got += batch
            if not parser.more:
                break
            batch = parser.feed(b"", budget)
    assert frames_only(got) == frames_only(parse_all(data))
    assert not parser.more


def test_more_is_false_when_the_budget_ends_at_the_last_byte():
    parser = FrameParser("1.2")
    two = encode_frame("SEND", [("destination", "/q")], b"a") * 2
    assert len(parser.feed(two, 2)) == 2
    assert not parser.more
    assert len(parser.feed(two, 1)) == 1 and parser.more
