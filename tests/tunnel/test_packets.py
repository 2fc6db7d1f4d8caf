"""Tunnel packet framing (S10.3, FACTS 1.2): the 24-byte header, encode and parse."""

import struct

import pytest

from mqgate.tunnel import packets as p


def test_header_layout_is_the_source_systems():
    """A DATA packet's 24-byte header: version 100, type, size, id, seq, window."""
    data = p.encode(p.Packet(p.DATA, conn_id=7, seq=3, window=64, body=b"hello"))
    assert len(data) == 24 + 5
    assert struct.unpack(">HHIIIHHI", data[:24]) == (100, 4, 29, 7, 3, 64, 0, 0)
    assert data[24:] == b"hello"


def test_round_trip_of_several_packets_back_to_back():
    """Packets encoded back to back parse back to the same packets, in order."""
    packets = [p.Packet(p.ACK, 1, 5, 10), p.Packet(p.DATA, 1, 6, 0, b"x" * p.MAX_BODY),
               p.option(1, p.OPTION_PULL_PERIOD, 30), p.Packet(p.CONN_CLOSE, 1, 7)]
    parsed = p.parse_all(p.encode_all(packets))
    assert parsed == packets
    assert p.parse_option(parsed[2]) == (p.OPTION_PULL_PERIOD, 30)


def test_sequence_numbers_wrap_on_the_wire():
    """A sequence number past 2**32 is sent as its low 32 bits."""
    data = p.encode(p.Packet(p.DATA, 1, (1 << 32) + 9))
    assert p.parse(data)[0].seq == 9


@pytest.mark.parametrize("data, words", [
    (b"\x00\x64\x00\x04", "shorter than the 24-byte header"),
    (struct.pack(">HHIIIHHI", 101, 4, 24, 1, 1, 0, 0, 0), "version 101"),
    (struct.pack(">HHIIIHHI", 100, 77, 24, 1, 1, 0, 0, 0), "unknown type 77"),
    (struct.pack(">HHIIIHHI", 100, 4, 10, 1, 1, 0, 0, 0), "size 10 outside"),
    (struct.pack(">HHIIIHHI", 100, 4, 9000, 1, 1, 0, 0, 0), "size 9000 outside"),
    (struct.pack(">HHIIIHHI", 100, 4, 30, 1, 1, 0, 0, 0) + b"abc", "only 27 bytes left"),
])
def test_malformed_input_is_a_named_error(data, words):
    """Each kind of malformed packet is refused with a PacketError saying what is wrong."""
    with pytest.raises(p.PacketError, match=words):
        p.parse_all(data)


def test_a_body_over_the_limit_is_refused_when_encoding():
    """A body larger than MAX_BODY cannot be encoded."""
    with pytest.raises(p.PacketError, match="limit"):
        p.encode(p.Packet(p.DATA, 1, 1, body=b"x" * (p.MAX_BODY + 1)))


def test_parse_all_bounds_the_number_of_packets():
    """A request with more packets than the caller's limit is refused."""
    data = p.encode_all([p.Packet(p.NO_OP)] * 5)
    assert len(p.parse_all(data, limit=5)) == 5
    with pytest.raises(p.PacketError, match="more than 4"):
        p.parse_all(data, limit=4)
