"""Producers near a FLOW_CONTROL limit (S2.3, S2.7): an AMQP producer that
sends all the credit it holds before reading anything, as a fast client does, carries
its queue past the limit by at most a message or so, not by its whole credit; a burst
of STOMP SENDs read at once stops at the one that fills the queue.

Engines in memory, as in L{tests.net.test_flow_control}: the real AMQP factory on a
StringTransport with a Clock, a client engine as the peer.
"""

from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import SENDER
from mqgate.core.broker import REJECT_NEWEST
from tests.net.test_amqp_adapter import attach
from tests.net.test_flow_control import CREDIT, LimitedHarness, StompPeer, stomp_frame

LIMIT = 50


def flood(peer, senders, rounds=200):
    """Each round, every sender sends all the credit it holds, then the bytes move
    (the worst case: nothing is read between sends). Returns the messages sent."""
    sent = 0
    for _ in range(rounds):
        burst = 0
        for sender in senders:
            while sender.credit > 0:
                sender.send(encode_message(b"m"), settled=True)
                burst += 1
        peer.pump()
        if not burst:
            break
        sent += burst
    return sent


def test_lone_producer_stops_at_the_limit(tmp_path):
    """One producer flooding with credit 10 fills a queue of 50 to its limit, not to
    the 60 its credit used to allow, and is then held back."""
    harness = LimitedHarness(tmp_path, max_num_msgs=LIMIT)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    assert sender.credit == CREDIT
    sent = flood(peer, [sender])
    queue = harness.broker.queue("q")
    assert queue.full and sender.credit == 0
    assert LIMIT <= queue.held == sent <= LIMIT + 1


def test_producers_share_the_room(tmp_path):
    """Four producers flooding one queue share the room left: together they pass the
    limit by a few messages, not by four credits."""
    harness = LimitedHarness(tmp_path, max_num_msgs=LIMIT)
    peer = harness.opened()
    senders = [attach(peer, SENDER, "q", name=f"p{n}") for n in range(4)]
    flood(peer, senders)
    queue = harness.broker.queue("q")
    assert queue.full and all(s.credit == 0 for s in senders)
    assert LIMIT <= queue.held <= LIMIT + 4


def test_full_credit_far_from_the_limit(tmp_path):
    """A producer far from any limit, or facing REJECT_NEWEST (which refuses rather
    than waits), keeps the whole configured credit."""
    for core in ({"max_num_msgs": -1},
                 {"max_num_msgs": 5, "limit_behavior": REJECT_NEWEST}):
        harness = LimitedHarness(tmp_path, **core)
        peer = harness.opened()
        sender = attach(peer, SENDER, "q")
        flood(peer, [sender], rounds=5)
        assert sender.credit == CREDIT


# -- STOMP: frames read in one burst (S2.7) ----------------------------------------------


def test_stomp_burst_stops_at_the_send_that_fills_the_queue(tmp_path):
    """Thirty SENDs read at once into a queue of ten: the tenth fills it, the other
    twenty wait (no receipt yet), and go on in order once the queue has drained."""
    peer = StompPeer(tmp_path, max_num_msgs=10)
    peer.send(29, receipt="r-last")
    queue = peer.broker.queue("q")
    assert queue.held == 10 and peer.paused
    assert b"r-last" not in peer.transport.value()
    target = _Taking()
    peer.broker.open_consumer("queue://q", target, presettled=True).set_credit(100)
    assert not peer.paused
    peer.clock.advance(0)    # the held frames are acted on in the next turn
    assert b"receipt-id:r-last" in peer.transport.value()
    assert len(target.taken) == 30 and queue.held == 0


def test_stomp_acks_are_not_held(tmp_path):
    """A client filling a queue it also consumes from with client acks, in one burst:
    the ACKs read after the SEND that filled the queue still go on, drain it, and let
    the SEND after them through."""
    peer = StompPeer(tmp_path, max_num_msgs=10)
    peer.protocol.dataReceived(stomp_frame("SUBSCRIBE", destination="/queue/q", id="s",
                                           ack="client-individual"))
    peer.send(8)
    acks = [line.split(b":", 1)[1].decode()
            for line in peer.transport.value().split(b"\n") if line.startswith(b"ack:")]
    assert len(acks) == 8 and not peer.paused
    burst = stomp_frame("SEND", b"9", destination="/queue/q")
    burst += stomp_frame("SEND", b"10", destination="/queue/q")
    burst += b"".join(stomp_frame("ACK", id=ack) for ack in acks)
    burst += stomp_frame("SEND", b"after", destination="/queue/q", receipt="r-after")
    peer.protocol.dataReceived(burst)
    assert peer.broker.queue("q").held == 2 and not peer.paused
    peer.clock.advance(0)
    assert b"receipt-id:r-after" in peer.transport.value()


class _Taking:
    """A consumer target keeping what it is given."""

    def __init__(self):
        self.taken = []

    def deliver(self, delivery):
        self.taken.append(delivery)
