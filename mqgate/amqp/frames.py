"""
AMQP 1.0 framing (Part 2 sections 2.2 and 2.3): protocol headers and frames.

A frame is ``size(4) doff(1) type(1) channel(2)``, extended header (skipped), then a body:
an encoded performative optionally followed by a payload (a transfer's message bytes).
An empty body is a heart-beat. L{FrameReader} cuts a byte stream into frames without
copying complete frames: it hands out memoryviews over the received chunk, and copies
only a partial frame left at the end of a chunk.
"""

import struct

from mqgate.amqp.codec import DecodeError
from mqgate.errors import RemoteProtocolError

__all__ = [
    "AMQP_HEADER", "SASL_HEADER", "TLS_HEADER", "FrameReader", "FramingError", "encode_frame",
    "frame_header", "EMPTY_FRAME", "AMQP_FRAME", "SASL_FRAME", "MIN_MAX_FRAME_SIZE",
]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
HEADER_SIZE = 8

AMQP_FRAME = 0x00
SASL_FRAME = 0x01

# Part 2 section 2.7.1: no peer may insist on frames smaller than this.
MIN_MAX_FRAME_SIZE = 512

_header = struct.Struct(">IBBH")
EMPTY_FRAME = _header.pack(8, 2, AMQP_FRAME, 0)


class FramingError(RemoteProtocolError):
    """The byte stream is not a sequence of well-formed frames."""

    condition = "amqp:connection:framing-error"


def frame_header(body_size, channel=0, frame_type=AMQP_FRAME):
    """The 8-byte header of a frame whose body is C{body_size} bytes."""
    return _header.pack(body_size + 8, 2, frame_type, channel)


def encode_frame(body, channel=0, frame_type=AMQP_FRAME):
    """A whole frame (header + body) as bytes."""
    return _header.pack(len(body) + 8, 2, frame_type, channel) + body


class FrameReader:
    """Cut a byte stream into frames.

    @ivar max_frame_size: the largest frame we accept (our advertised max-frame-size);
        a bigger frame is a framing error rather than a buffer that grows without bound.
    """

    def __init__(self, max_frame_size):
        self.max_frame_size = max_frame_size
        self._partial = b""

    def feed(self, data):
        """Return a list of C{(frame_type, channel, body)} for every complete frame.

        C{body} is a memoryview (empty for heart-beats). Bytes of an incomplete frame are
        kept for the next call.

        @raise FramingError: a frame header is invalid or a frame exceeds the limit.
        """
        if self._partial:
            data = self._partial + data
            self._partial = b""
        view = memoryview(data)
        n = len(data)
        pos = 0
        frames = []
        unpack = _header.unpack_from
        limit = self.max_frame_size
        while n - pos >= 8:
            size, doff, ftype, channel = unpack(data, pos)
            if size < 8 or doff < 2 or doff * 4 > size:
                raise FramingError(
                    f"malformed frame header (size {size}, data offset {doff})")
            if size > limit:
                raise FramingError(
                    f"frame of {size} bytes exceeds the negotiated max-frame-size {limit}")
            if n - pos < size:
                break
            frames.append((ftype, channel, view[pos + doff * 4:pos + size]))
            pos += size
        if pos < n:
            self._partial = bytes(view[pos:])
        return frames

    @property
    def buffered(self):
        """Bytes held of a frame not yet complete."""
        return len(self._partial)


def split_body(body, decode):
    """Decode the performative at the start of a frame body; return it and the rest.

    @raise DecodeError: the performative does not decode.
    """
    if not body:
        raise DecodeError("frame body is empty where a performative was expected", 0)
    value, end = decode(body, 0)
    return value, body[end:]
