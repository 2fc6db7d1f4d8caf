"""AMQP framing (S10.1; AMQP 1.0 Part 2 sections 2.2-2.3): protocol headers, frame
headers, and FrameReader cutting a byte stream into frames whatever the chunking."""

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.amqp import codec
from mqgate.amqp.codec import DecodeError
from mqgate.amqp.frames import (
    AMQP_FRAME, AMQP_HEADER, EMPTY_FRAME, SASL_FRAME, SASL_HEADER, TLS_HEADER, FrameReader,
    FramingError, encode_frame, frame_header, split_body,
)
from mqgate.amqp.performatives import Close, Flow, encode_composite
from mqgate.errors import RemoteProtocolError


def as_tuples(frames):
    return [(ftype, channel, bytes(body)) for ftype, channel, body in frames]


def test_protocol_headers():
    """S10.1 (section 2.2): the three protocol headers are the spec's eight bytes."""
    assert AMQP_HEADER == b"AMQP\x00\x01\x00\x00"
    assert TLS_HEADER == b"AMQP\x02\x01\x00\x00"
    assert SASL_HEADER == b"AMQP\x03\x01\x00\x00"


def test_frame_header_layout():
    """S10.1 (section 2.3.1): size(4) doff(1)=2 type(1) channel(2), big-endian."""
    assert frame_header(10, channel=3) == b"\x00\x00\x00\x12\x02\x00\x00\x03"
    assert frame_header(0, 0, SASL_FRAME) == b"\x00\x00\x00\x08\x02\x01\x00\x00"
    assert encode_frame(b"abc", channel=258) == b"\x00\x00\x00\x0b\x02\x00\x01\x02abc"
    assert EMPTY_FRAME == b"\x00\x00\x00\x08\x02\x00\x00\x00"


def test_one_frame():
    """S10.1: a whole frame fed at once comes out with its type, channel and body."""
    reader = FrameReader(4096)
    body = encode_composite(Close())
    assert as_tuples(reader.feed(encode_frame(body, channel=7))) == [(AMQP_FRAME, 7, body)]
    assert reader.buffered == 0


def test_heartbeat_frame_has_an_empty_body():
    """S10.1 (section 2.4.5): an empty frame is read as a frame with an empty body."""
    reader = FrameReader(4096)
    frames = reader.feed(EMPTY_FRAME + EMPTY_FRAME)
    assert as_tuples(frames) == [(AMQP_FRAME, 0, b""), (AMQP_FRAME, 0, b"")]


def test_extended_header_is_skipped():
    """S10.1 (section 2.3.1): bytes between the 8-byte header and doff*4 are ignored."""
    reader = FrameReader(4096)
    data = b"\x00\x00\x00\x0f\x03\x00\x00\x01" + b"EXTN" + b"abc"
    assert as_tuples(reader.feed(data)) == [(AMQP_FRAME, 1, b"abc")]


def test_sasl_frame_type_is_reported():
    """S10.1 (Part 5 section 5.3.1): the frame type byte is passed through (1 for SASL)."""
    reader = FrameReader(4096)
    assert as_tuples(reader.feed(encode_frame(b"x", frame_type=SASL_FRAME))) == [
        (SASL_FRAME, 0, b"x")]


def test_partial_frame_is_kept():
    """S10.1: an incomplete frame (or header) is buffered until the rest arrives."""
    reader = FrameReader(4096)
    data = encode_frame(b"hello", channel=2)
    assert reader.feed(data[:3]) == []
    assert reader.buffered == 3
    assert reader.feed(data[3:9]) == []
    assert reader.buffered == 9
    assert as_tuples(reader.feed(data[9:] + EMPTY_FRAME[:2])) == [(AMQP_FRAME, 2, b"hello")]
    assert reader.buffered == 2


def test_bodies_stay_valid_after_later_feeds():
    """S10.1: a body handed out stays intact after the reader is fed again."""
    reader = FrameReader(4096)
    data = encode_frame(b"one") + encode_frame(b"two")
    first = reader.feed(data[:-1])
    second = reader.feed(data[-1:] + encode_frame(b"three"))
    assert [bytes(f[2]) for f in first + second] == [b"one", b"two", b"three"]


def test_memoryview_chunks():
    """S10.1: the reader accepts memoryview chunks as well as bytes."""
    reader = FrameReader(4096)
    data = encode_frame(b"abc") + encode_frame(b"de")
    frames = reader.feed(memoryview(data)[:13]) + reader.feed(memoryview(data)[13:])
    assert [bytes(f[2]) for f in frames] == [b"abc", b"de"]


def test_oversize_frame_names_its_size():
    """S10.1, P5: a frame above max-frame-size raises FramingError naming the size and the
    limit, as soon as its header is seen (its body is never buffered)."""
    reader = FrameReader(512)
    header = frame_header(5000 - 8)
    with pytest.raises(FramingError) as info:
        reader.feed(header)
    assert "5000" in str(info.value)
    assert "512" in str(info.value)
    assert info.value.condition == "amqp:connection:framing-error"
    assert isinstance(info.value, RemoteProtocolError)


def test_frame_of_exactly_max_size_is_accepted():
    """S10.1: a frame of exactly max-frame-size bytes is allowed."""
    reader = FrameReader(512)
    assert len(reader.feed(encode_frame(bytes(504)))[0][2]) == 504
    with pytest.raises(FramingError):
        FrameReader(512).feed(encode_frame(bytes(505)))


@pytest.mark.parametrize("header", [
    b"\x00\x00\x00\x08\x01\x00\x00\x00",   # doff 1 < 2
    b"\x00\x00\x00\x08\x00\x00\x00\x00",   # doff 0
    b"\x00\x00\x00\x07\x02\x00\x00\x00",   # size 7 < 8
    b"\x00\x00\x00\x00\x02\x00\x00\x00",   # size 0
    b"\x00\x00\x00\x0c\x04\x00\x00\x00",   # doff*4 = 16 > size 12
], ids=["doff1", "doff0", "size7", "size0", "doff-past-end"])
def test_malformed_header(header):
    """S10.4: a frame header with doff < 2, size < 8 or doff beyond the frame raises
    FramingError."""
    with pytest.raises(FramingError) as info:
        FrameReader(4096).feed(header + bytes(16))
    assert "malformed" in str(info.value)


def test_split_body():
    """S10.1: split_body returns the performative and the payload after it."""
    body = encode_composite(Flow(handle=1)) + b"payload"
    value, rest = split_body(memoryview(body), codec.decode)
    assert bytes(rest) == b"payload"
    assert value.descriptor == 0x13


def test_split_body_refuses_an_empty_body():
    """S10.4: an empty body where a performative is expected raises DecodeError."""
    with pytest.raises(DecodeError):
        split_body(memoryview(b""), codec.decode)


_frames = st.lists(
    st.tuples(st.sampled_from([AMQP_FRAME, SASL_FRAME]), st.integers(0, 0xFFFF),
              st.binary(max_size=300)),
    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_frames, st.data())
def test_property_any_chunking(frames, data):
    """S10.1: the frames read are the same whatever points the stream is split at."""
    stream = b"".join(encode_frame(body, channel, ftype) for ftype, channel, body in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    reader = FrameReader(4096)
    got = []
    start = 0
    for cut in cuts + [len(stream)]:
        got += as_tuples(reader.feed(stream[start:cut]))
        start = cut
    assert got == [(ftype, channel, body) for ftype, channel, body in frames]
    assert reader.buffered == 0


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(_frames)
def test_property_byte_at_a_time(frames):
    """S10.1: feeding one byte per call gives the same frames as feeding the whole."""
    stream = b"".join(encode_frame(body, channel, ftype) for ftype, channel, body in frames)
    reader = FrameReader(4096)
    got = []
    for i in range(len(stream)):
        got += as_tuples(reader.feed(stream[i:i + 1]))
    assert got == as_tuples(FrameReader(4096).feed(stream))
