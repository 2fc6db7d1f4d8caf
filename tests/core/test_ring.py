"""Ring queues: fixed size, oldest dropped and counted, never blocking (S7.1, S7.2)."""

import pytest

from mqgate.core import BrokerMessage
from mqgate.core.ring import is_ring, ring_size

from tests.core import consume, make_broker, send


def test_ring_drops_the_oldest_and_counts():
    """A full ring queue drops its oldest message for each new one, counted; it never
    holds more than its size while nothing is in delivery."""
    broker, _ = make_broker()
    ring = broker.create_ring_queue("r", 3)
    send(broker, "queue://r", *[b"%d" % i for i in range(10)])
    assert (ring.depth, ring.removed, ring.dropped) == (3, 7, 7)
    _, target = consume(broker, "queue://r", credit=10)
    assert target.payloads == [b"7", b"8", b"9"]


def test_ring_never_blocks_a_producer():
    """A producer sending to a full ring is never blocked nor refused."""
    broker, _ = make_broker()
    broker.create_ring_queue("r", 2)
    producer = broker.open_producer("queue://r")
    for i in range(100):
        assert producer.send(BrokerMessage(b"x")) is None
        assert not producer.blocked
    assert broker.queue("r").depth == 2


def test_ring_sends_nothing_to_the_dmq():
    """A ring's dropped messages are gone: the DMQ does not fill with them."""
    broker, _ = make_broker()
    broker.create_ring_queue("r", 1)
    send(broker, "queue://r", b"1", b"2", b"3")
    assert broker.dmq.depth == 0


def test_ring_in_delivery_may_exceed_its_size():
    """Messages in delivery cannot be dropped (FACTS 2): the ring holds them beyond
    its size until they are settled, then drops down to size again."""
    broker, _ = make_broker()
    ring = broker.create_ring_queue("r", 2)
    consumer, target = consume(broker, "queue://r", credit=2)
    send(broker, "queue://r", b"1", b"2", b"3", b"4")
    assert ring.in_flight == 2 and ring.depth == 1 and ring.held == 3
    target.settle_all()
    assert ring.held == 1


def test_ring_expiry_with_a_clock():
    """Ring copies with an expiry go at their time, reaped like any message."""
    broker, clock = make_broker()
    ring = broker.create_ring_queue("r", 5)
    send(broker, "queue://r", b"1", expiry=clock.seconds() + 10)
    clock.advance(11)
    assert ring.reap(clock.seconds()) == 1 and ring.depth == 0


def test_existing_queue_made_a_ring_shrinks_at_once():
    """Making an existing queue a ring drops what is over its size, oldest first."""
    broker, _ = make_broker()
    send(broker, "queue://q", *[b"%d" % i for i in range(5)])
    queue = broker.create_ring_queue("q", 2)
    assert is_ring(queue) and ring_size(queue) == 2 and queue.depth == 2


@pytest.mark.parametrize("size", [0, -1, 1.5, "10", True])
def test_ring_size_must_be_positive_whole(size):
    """A bad ring size is refused with the value named."""
    broker, _ = make_broker()
    with pytest.raises(ValueError, match="whole number of messages"):
        broker.create_ring_queue("r", size)
