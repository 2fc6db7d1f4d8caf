"""One tunnel connection's stream over lossy HTTP (S10.3): numbers, ACKs, the window."""

import random

from twisted.internet.task import Clock

from mqgate.tunnel import packets as p
from mqgate.tunnel.session import TunnelSession, unwrap


def pair(window=4, max_body=100, rto=5.0):
    clock = Clock()
    return clock, (TunnelSession(1, clock, window=window, max_body=max_body, rto=rto),
                   TunnelSession(1, clock, window=window, max_body=max_body, rto=rto))


def data_of(packets):
    return [q for q in packets if q.type in (p.DATA, p.CONN_CLOSE)]


def test_bytes_arrive_in_order_and_are_acknowledged():
    """What one end writes the other reads in order; the ACK frees the sender's buffer."""
    clock, (a, b) = pair()
    a.write(b"x" * 250)
    out = a.outgoing()
    assert [len(q.body) for q in data_of(out)] == [100, 100, 50]
    assert a.buffered == 250
    b.receive(out)
    assert b.read() == b"x" * 250
    a.receive([b.ack()])
    assert a.buffered == 0 and not a.has_outgoing()


def test_a_repeated_request_duplicates_nothing():
    """Packets delivered twice (a retried request) are read once."""
    clock, (a, b) = pair()
    a.write(b"abc")
    out = a.outgoing()
    b.receive(out)
    b.receive(out)
    assert b.read() == b"abc" and b.duplicates == 1


def test_reordered_packets_are_held_until_the_gap_fills():
    """A packet ahead of a missing one waits (within the window); both read in order."""
    clock, (a, b) = pair()
    a.write(b"1" * 100 + b"2" * 100)
    first, second = data_of(a.outgoing())
    b.receive([second])
    assert b.read() == b""
    assert b.ack().seq == 0
    b.receive([first])
    assert b.read() == b"1" * 100 + b"2" * 100


def test_a_lost_request_is_resent_when_the_owner_says_so():
    """resend_all puts every unacknowledged packet in the next batch again."""
    clock, (a, b) = pair()
    a.write(b"lost")
    a.outgoing()                      # the request carrying it is lost
    assert not a.has_outgoing()
    a.resend_all()
    assert a.has_outgoing()
    b.receive(a.outgoing())
    assert b.read() == b"lost" and a.resent == 1


def test_an_unacknowledged_packet_is_resent_after_the_timeout():
    """A packet unacknowledged for rto seconds goes again unasked."""
    clock, (a, b) = pair(rto=5.0)
    a.write(b"late")
    a.outgoing()
    clock.advance(4.9)
    assert not a.has_outgoing() and a.next_deadline() == 5.0
    clock.advance(0.1)
    assert data_of(a.outgoing())[0].body == b"late"


def test_the_window_bounds_packets_in_flight():
    """At most `window` packets are unacknowledged; the rest waits for an ACK."""
    clock, (a, b) = pair(window=4)
    a.write(b"y" * 1000)              # ten packets' worth
    first = data_of(a.outgoing())
    assert len(first) == 4 and a.full
    assert data_of(a.outgoing()) == []
    b.receive(first)
    b.read()
    a.receive([b.ack()])
    assert [q.seq for q in data_of(a.outgoing())] == [5, 6, 7, 8]


def test_a_reader_that_does_not_read_closes_the_window():
    """Bytes not read fill the receiver's buffer; its ACK then advertises no room and the
    sender stops; reading reopens it."""
    clock, (a, b) = pair(window=4)
    a.write(b"z" * 1000)
    b.receive(a.outgoing())
    ack = b.ack()
    assert ack.window == 0
    a.receive([ack])
    assert data_of(a.outgoing()) == []
    assert b.read() == b"z" * 400
    assert b.has_outgoing()           # a window update is owed
    a.receive([b.ack()])
    b.receive(a.outgoing())
    assert b.read() == b"z" * 400


def test_packets_beyond_the_window_are_dropped_and_come_again():
    """A packet too far ahead is not held; it is accepted when it comes again."""
    clock, (a, b) = pair(window=2)
    b.receive([p.Packet(p.DATA, 1, 5, body=b"far")])
    assert b.read() == b"" and b.ack().seq == 0


def test_close_is_delivered_after_the_data():
    """The numbered CONN_CLOSE ends the peer's stream only after every byte before it."""
    clock, (a, b) = pair()
    a.write(b"last words")
    a.close()
    a.write(b"ignored")
    data, close = data_of(a.outgoing())
    b.receive([close])
    assert not b.peer_closed
    b.receive([data])
    assert b.peer_closed and b.read() == b"last words"
    a.receive([b.ack()])
    assert a.finished


def test_an_abort_ends_the_stream_at_once():
    """CONN_ABORT is not numbered: the peer is closed whatever is missing."""
    clock, (a, b) = pair()
    b.receive([p.Packet(p.CONN_ABORT, 1)])
    assert b.peer_closed and b.peer_aborted


def test_unwrap_finds_the_nearest_number():
    """32-bit wire numbers map back to the unbounded number nearest the expected one."""
    assert unwrap(5, 3) == 5
    assert unwrap(2, (1 << 32) + 1) == (1 << 32) + 2
    assert unwrap(0xFFFFFFFF, 1 << 32) == (1 << 32) - 1


def test_a_lossy_link_loses_and_duplicates_nothing():
    """Over a link dropping, repeating and reordering batches, 300 KB arrive once each."""
    rng = random.Random(12)
    clock, (a, b) = pair(window=8, max_body=1000, rto=1.0)
    payload = bytes(rng.randrange(256) for _ in range(300_000))
    got = bytearray()
    fed = 0
    in_flight = []
    for _round in range(5000):
        if fed < len(payload) and not a.full:
            a.write(payload[fed:fed + 7000])
            fed += 7000
        batch = a.outgoing()
        if rng.random() < 0.2:
            a.resend_all()            # the client saw its request fail
        elif rng.random() < 0.8:
            in_flight.append(batch)
        rng.shuffle(in_flight)
        while in_flight and rng.random() < 0.7:
            delivered = in_flight.pop()
            b.receive(delivered)
            if rng.random() < 0.2:
                b.receive(delivered)  # a repeated request
        got += b.read()
        if rng.random() < 0.8:
            a.receive([b.ack()])
        clock.advance(0.3)
        if len(got) == len(payload):
            break
    assert bytes(got) == payload
    assert b.duplicates > 0 and a.resent > 0


def test_a_batch_can_be_capped_in_bytes():
    """outgoing(max_bytes) stops before the cap; the rest comes with the next call."""
    clock, (a, b) = pair(window=8)
    a.write(b"q" * 500)
    first = a.outgoing(max_bytes=24 + 2 * 124)
    assert [q.seq for q in data_of(first)] == [1, 2]
    assert [q.seq for q in data_of(a.outgoing())] == [3, 4, 5]


def test_no_resend_into_a_full_receiver():
    """Packets the peer has no room for are not sent again until it advertises room."""
    clock, (a, b) = pair(window=4)
    a.write(b"w" * 400)
    a.outgoing()
    a.receive([p.Packet(p.ACK, 1, 0, 0)])   # nothing taken, no room
    a.resend_all()
    assert not a.has_outgoing()
    a.receive([p.Packet(p.ACK, 1, 0, 4)])
    assert len(data_of(a.outgoing())) == 4
