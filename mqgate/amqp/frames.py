"""
AMQP 1.0 framing (Part 2 sections 2.2 and 2.3): protocol headers and frames.

A frame is ``size(4) doff(1) type(1) channel(2)``, extended header (skipped), then a body:
an encoded performative optionally followed by a payload (a transfer's message bytes).
An empty body is a heart-beat. L{FrameReader} cuts a byte stream into frames without
copying complete frames: it hands out memoryviews over the received chunk, and collects
a frame cut across reads in one buffer, copied out once complete.
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

    Complete frames are handed out as memoryviews over the chunk they arrived in, without
    a copy. A frame cut across reads is collected in one buffer, topped up with only the
    bytes it still lacks (its size is known from its header), and copied out once when
    complete: a 1 MiB frame arriving a byte at a time costs a million appends, not a
    million copies of what came before.

    @ivar max_frame_size: the largest frame we accept (our advertised max-frame-size);
        a bigger frame is a framing error rather than a buffer that grows without bound.
    """

    def __init__(self, max_frame_size):
        self.max_frame_size = max_frame_size
        self._partial = bytearray()   # the start of a frame cut across reads
        self._need = None             # that frame's size, once its header is in

    def feed(self, data):
        """Return a list of C{(frame_type, channel, body)} for every complete frame.

        C{body} is a memoryview (empty for heart-beats). Bytes of an incomplete frame are
        kept for the next call.

        @raise FramingError: a frame header is invalid or a frame exceeds the limit.
        """
        frames = []
        view = memoryview(data)
        if self._partial:
            view = self._complete(view, frames)
            if view is None:
                return frames
        n = len(view)
        pos = 0
        unpack = _header.unpack_from
        while n - pos >= 8:
            size, doff, ftype, channel = unpack(view, pos)
            self._check(size, doff)
            if n - pos < size:
                break
            frames.append((ftype, channel, view[pos + doff * 4:pos + size]))
            pos += size
        if pos < n:
            self._partial += view[pos:]
            if len(self._partial) >= 8:
                self._need = _header.unpack_from(self._partial)[0]
        return frames

    def _complete(self, view, frames):
        """Top up the frame held from earlier reads; return what is left of C{view}, or
        None when all of it went into a frame still incomplete."""
        partial = self._partial
        if self._need is None:
            take = 8 - len(partial)
            partial += view[:take]
            view = view[take:]
            if len(partial) < 8:
                return None
            size, doff, _, _ = _header.unpack_from(partial)
            self._check(size, doff)
            self._need = size
        take = self._need - len(partial)
        partial += view[:take]
        if len(partial) < self._need:
            return None
        body = bytes(partial)
        size, doff, ftype, channel = _header.unpack_from(body)
        frames.append((ftype, channel, memoryview(body)[doff * 4:]))
        self._partial = bytearray()
        self._need = None
        return view[take:]

    def _check(self, size, doff):
        if size < 8 or doff < 2 or doff * 4 > size:
            raise FramingError(f"malformed frame header (size {size}, data offset {doff})")
        if size > self.max_frame_size:
            raise FramingError(f"frame of {size} bytes exceeds the negotiated "
                               f"max-frame-size {self.max_frame_size}")

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
