"""
Tunnel packets (S10.3, FACTS 1.2): the unit every HTTP request and response of the tunnel
carries, a push body holding one or more, a pull response zero or more, back to back.

Each packet is a 24-byte big-endian header and a body::

    offset size field
    0      2    version      always 100 (a reader refuses any other)
    2      2    type         CONN_INIT ... NO_OP (below)
    4      4    total size   header + body, in bytes
    8      4    connection   the tunnel connection's id (0 before connect)
    12     4    sequence     DATA/CONN_CLOSE: the packet's number in its direction;
                             ACK: the last number received in order
    16     2    window       the sender's receive window, in packets
    18     2    reserved     0
    20     4    checksum     0 (HTTP and TLS protect the bytes already)

Sequence numbers are 32 bits on the wire; L{mqgate.tunnel.session} keeps them as
unbounded integers and wraps them here.
"""

import struct

from mqgate.errors import ProtocolError

__all__ = [
    "VERSION", "HEADER", "HEADER_SIZE", "MAX_PACKET_SIZE", "MAX_BODY",
    "CONN_INIT", "CONN_INIT_ACK", "CONN_REJECTED", "DATA", "CONN_CLOSE", "ACK",
    "CONN_SHUTDOWN", "LINK_INIT", "CONN_ABORT", "CONN_OPTION", "LISTEN_STATE",
    "NO_OP", "DUMMY", "OPTION_PULL_PERIOD", "OPTION_CONNECTION_TIMEOUT",
    "Packet", "PacketError", "encode", "encode_all", "parse", "parse_all",
    "option", "parse_option",
]

VERSION = 100
HEADER = struct.Struct(">HHIIIHHI")
HEADER_SIZE = HEADER.size            # 24
#: The largest packet, header included (the source system's MAX_PACKETSIZE).
MAX_PACKET_SIZE = 8192
MAX_BODY = MAX_PACKET_SIZE - HEADER_SIZE

CONN_INIT = 1
CONN_INIT_ACK = 2
CONN_REJECTED = 3
DATA = 4
CONN_CLOSE = 5
ACK = 6
CONN_SHUTDOWN = 7
LINK_INIT = 8
CONN_ABORT = 9
CONN_OPTION = 10
LISTEN_STATE = 11
NO_OP = 12
DUMMY = 100

_KNOWN_TYPES = frozenset((CONN_INIT, CONN_INIT_ACK, CONN_REJECTED, DATA, CONN_CLOSE, ACK,
                          CONN_SHUTDOWN, LINK_INIT, CONN_ABORT, CONN_OPTION, LISTEN_STATE,
                          NO_OP, DUMMY))

#: CONN_OPTION bodies: C{int option, int value}.
OPTION_PULL_PERIOD = 1
OPTION_CONNECTION_TIMEOUT = 2
_OPTION = struct.Struct(">ii")

_U32 = 0xFFFFFFFF


class PacketError(ProtocolError):
    """Bytes that are not a well-formed tunnel packet; the message says what is wrong."""


class Packet:
    """One tunnel packet: C{type}, C{conn_id}, C{seq}, C{window} and C{body} bytes."""

    __slots__ = ("type", "conn_id", "seq", "window", "body")

    def __init__(self, type, conn_id=0, seq=0, window=0, body=b""):
        self.type = type
        self.conn_id = conn_id
        self.seq = seq
        self.window = window
        self.body = body

    def __eq__(self, other):
        if not isinstance(other, Packet):
            return NotImplemented
        return ((self.type, self.conn_id, self.seq, self.window, bytes(self.body))
                == (other.type, other.conn_id, other.seq, other.window, bytes(other.body)))

    def __repr__(self):
        return (f"Packet(type={self.type}, conn_id={self.conn_id}, seq={self.seq}, "
                f"window={self.window}, body={len(self.body)} bytes)")


def encode(packet):
    """The wire bytes of C{packet}; a body over L{MAX_BODY} is a L{PacketError}."""
    body = packet.body
    if len(body) > MAX_BODY:
        raise PacketError(f"tunnel packet body of {len(body)} bytes is over the "
                          f"{MAX_BODY}-byte limit")
    head = HEADER.pack(VERSION, packet.type, HEADER_SIZE + len(body),
                       packet.conn_id & _U32, packet.seq & _U32,
                       min(max(packet.window, 0), 0xFFFF), 0, 0)
    return head + bytes(body)


def encode_all(packets):
    """The bytes of C{packets} back to back (a push body or a pull response)."""
    return b"".join(encode(p) for p in packets)


def parse(data, offset=0):
    """Read the packet at C{offset} of C{data}: return C{(packet, next_offset)}.

    @raise PacketError: a short header, a version other than 100, an unknown type, a
        size smaller than the header or larger than L{MAX_PACKET_SIZE}, or a body cut
        short; the message says which and at what offset.
    """
    view = memoryview(data)
    left = len(view) - offset
    if left < HEADER_SIZE:
        raise PacketError(f"tunnel packet at byte {offset}: {left} bytes, shorter than "
                          f"the {HEADER_SIZE}-byte header")
    version, type_, size, conn_id, seq, window, _reserved, _checksum = \
        HEADER.unpack_from(view, offset)
    if version != VERSION:
        raise PacketError(f"tunnel packet at byte {offset}: version {version}, expected "
                          f"{VERSION} (is the URL that of an mqgate tunnel?)")
    if type_ not in _KNOWN_TYPES:
        raise PacketError(f"tunnel packet at byte {offset}: unknown type {type_}")
    if size < HEADER_SIZE or size > MAX_PACKET_SIZE:
        raise PacketError(f"tunnel packet at byte {offset}: size {size} outside "
                          f"{HEADER_SIZE}..{MAX_PACKET_SIZE}")
    if size > left:
        raise PacketError(f"tunnel packet at byte {offset}: size {size} but only "
                          f"{left} bytes left")
    body = bytes(view[offset + HEADER_SIZE:offset + size])
    return Packet(type_, conn_id, seq, window, body), offset + size


def parse_all(data, limit=None):
    """Every packet in C{data}, in order; at most C{limit} of them (L{PacketError}
    past it) so that a request cannot make the caller build an unbounded list."""
    packets, offset = [], 0
    while offset < len(data):
        if limit is not None and len(packets) >= limit:
            raise PacketError(f"more than {limit} tunnel packets in one request")
        packet, offset = parse(data, offset)
        packets.append(packet)
    return packets


def option(conn_id, which, value):
    """A CONN_OPTION packet telling the peer C{which} option is C{value} seconds."""
    return Packet(CONN_OPTION, conn_id, body=_OPTION.pack(which, int(value)))


def parse_option(packet):
    """C{(option, value)} of a CONN_OPTION packet."""
    if len(packet.body) != _OPTION.size:
        raise PacketError(f"tunnel CONN_OPTION body of {len(packet.body)} bytes, "
                          f"expected {_OPTION.size}")
    return _OPTION.unpack(packet.body)
