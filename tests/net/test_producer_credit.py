"""Producer credit near a FLOW_CONTROL limit (S2.3, S2.7, issue 10): a producer that
sends all the credit it holds before reading anything, as a fast client does, carries
its queue past the limit by at most a message or so, not by its whole credit.

Engines in memory, as in L{tests.net.test_flow_control}: the real AMQP factory on a
StringTransport with a Clock, a client engine as the peer.
"""

from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import SENDER
from mqgate.core.broker import REJECT_NEWEST
from tests.net.test_amqp_adapter import attach
from tests.net.test_flow_control import CREDIT, LimitedHarness

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
