"""Broker-wide limits (S2.2: C{mqgate.system.max_count}, C{max_size},
C{mqgate.message.max_size}) and the limit on destinations clients may make (S2.5:
C{mqgate.system.max_destinations}), on the memory store with a Clock."""

import pytest

from twisted.internet.task import Clock

from mqgate.core import Broker, BrokerMessage, CoreConfig
from mqgate.core.broker import ResourceLimitExceeded
from mqgate.core.persistence import Persistence
from mqgate.store.memory import MemoryStore
from mqgate.core.errors import ErrorKind

from tests.core import consume, make_broker


def sent(producer, payload=b"m", **fields):
    """Send one message; return it."""
    message = BrokerMessage(payload, **fields)
    producer.send(message)
    return message


def refused(producer, payload=b"m"):
    """The description of the error a send gets (it must get one)."""
    with pytest.raises(ResourceLimitExceeded) as caught:
        producer.send(BrokerMessage(payload))
    assert caught.value.kind is ErrorKind.LIMIT_EXCEEDED
    return caught.value.description


def test_max_count_refuses_until_a_consumer_takes_one():
    """S2.2: once the broker holds max_count messages, over all its queues, the next is
    refused naming the setting; a settlement makes room for exactly one more."""
    broker, _ = make_broker(max_count=3)
    a, b = broker.open_producer("queue://a"), broker.open_producer("queue://b")
    sent(a), sent(b), sent(a)
    assert "mqgate.system.max_count" in refused(b)
    assert broker.queue("b").held == 1    # the refused one went nowhere
    consumer, target = consume(broker, "queue://a", credit=1)
    assert "mqgate.system.max_count" in refused(b)   # in flight still counts
    target.settle_all()
    sent(b)
    refused(a)


def test_max_count_counts_a_fanned_out_message_per_subscription():
    """S2.2: a topic message held by two subscriptions counts twice; a pre-settled
    consumer taking its copy frees it at once."""
    broker, _ = make_broker(max_count=4)
    consume(broker, "topic://t")
    quick, _ = consume(broker, "topic://#", presettled=True)
    producer = broker.open_producer("topic://t")
    sent(producer), sent(producer)
    assert broker.stats["system_count"] == 4
    refused(producer)
    quick.set_credit(2)
    assert broker.stats["system_count"] == 2
    sent(producer)


def test_max_size_refuses_until_bytes_are_taken():
    """S2.2: once the waiting bytes reach max_size new messages are refused; a
    consumer taking them makes room again."""
    broker, _ = make_broker(max_size=1000)
    producer = broker.open_producer("queue://q")
    sent(producer, b"x" * 600)
    sent(producer, b"x" * 600)         # 600 < 1000: accepted, now over
    assert "mqgate.system.max_size" in refused(producer)
    consume(broker, "queue://q", credit=2, presettled=True)
    sent(producer, b"x" * 600)


def test_message_max_size():
    """S2.2: a message larger than mqgate.message.max_size is refused, a message of
    exactly that size is not."""
    broker, _ = make_broker(max_message_size=100)
    producer = broker.open_producer("queue://q")
    sent(producer, b"x" * 100)
    assert "mqgate.message.max_size" in refused(producer, b"x" * 101)
    assert broker.queue("q").held == 1


def test_counts_come_back_to_zero():
    """S2.2: every way a message leaves (accepted, rejected, released and retaken,
    expired, pre-settled, consumer gone, subscription gone) gives back what it held
    (useDMQ=false: the dead ones are dropped, none held by the DMQ)."""
    broker, clock = make_broker(max_count=100, use_dmq=False)
    producer = broker.open_producer("queue://q")
    for _ in range(4):
        sent(producer, b"abc")
    sent(producer, b"abc", expiry=5)
    consumer, target = consume(broker, "queue://q", credit=2)
    target.consumer.settle(target.deliveries[0], "accepted")
    target.consumer.settle(target.deliveries[1], "released")
    consumer.close()                  # nothing unsettled: back as it was
    consumer, target = consume(broker, "queue://q", credit=2)
    target.consumer.settle(target.deliveries[0], "rejected")
    target.consumer.settle(target.deliveries[1], "modified", undeliverable_here=True)
    consumer.close()                 # the parked one is for anyone again
    clock.advance(10)
    consume(broker, "queue://q", credit=10, presettled=True)
    subscription, _ = consume(broker, "topic://t")
    sent(broker.open_producer("topic://t"), b"abcd")
    assert broker.stats["system_count"] == 1
    subscription.close()             # a non-durable subscription goes with its messages
    stats = broker.stats
    assert (stats["system_count"], stats["system_bytes"], stats["held"]) == (0, 0, 0)


def test_unsettled_deliveries_of_a_deleted_subscription_are_not_held():
    """A subscription deleted while deliveries were out: when they come back they are
    dropped, and nothing stays counted."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "topic://t", credit=3)
    producer = broker.open_producer("topic://t")
    sent(producer), sent(producer)
    consumer.close()
    target.consumer.settle(target.deliveries[0], "released")
    assert broker.stats["system_count"] == 0


def _stored_broker(store, **config):
    persistence = Persistence(store, encode=lambda m: m.payload,
                              decode=lambda data: BrokerMessage(data))
    broker = Broker(Clock(), CoreConfig(**config), persistence=persistence)
    recovered = []
    store.recover().addCallback(recovered.append)
    return broker, recovered[0]


def test_recovery_is_not_refused_by_system_limits():
    """S2.2: messages accepted before a restart all come back, even past a lower
    limit (and past max_destinations), and new ones are refused until the broker
    drains."""
    first, recovered = _stored_broker(MemoryStore())
    first.persistence.restore(first, recovered)
    for name in ("a", "b"):
        producer = first.open_producer("queue://" + name)
        for n in range(3):
            sent(producer, b"%d" % n, durable=True)
    store = first.persistence.store.restarted()
    again, recovered = _stored_broker(store, max_count=4, max_destinations=1)
    again.persistence.restore(again, recovered)
    assert again.queue("a").held == 3 and again.queue("b").held == 3
    refused(again.open_producer("queue://a"))
    consume(again, "queue://a", credit=3, presettled=True)
    sent(again.open_producer("queue://b"))


def test_max_destinations_refuses_auto_creation():
    """S2.5: past max_destinations a producer or consumer naming a new queue or topic
    is refused naming the setting; existing ones stay usable."""
    broker, _ = make_broker(max_destinations=2)
    broker.open_producer("queue://a")
    consume(broker, "topic://t")
    for attach in (lambda: broker.open_producer("queue://b"),
                   lambda: consume(broker, "topic://u"),
                   lambda: consume(broker, None, dynamic=True)):
        with pytest.raises(ResourceLimitExceeded) as caught:
            attach()
        assert "mqgate.system.max_destinations" in caught.value.description
    broker.open_producer("queue://a").send(BrokerMessage(b"x"))
    consume(broker, "topic://#")     # a pattern creates no topic
    assert broker.queues() == ["a"] and broker.topics() == ["t"]


def test_anonymous_route_to_a_new_destination_refused():
    """S2.5: an anonymous producer's message to a destination past the limit is
    refused, and the route is not cached."""
    broker, _ = make_broker(max_destinations=1)
    broker.create_queue("a")
    producer = broker.open_producer(None)
    message = BrokerMessage(b"x")
    message.to = "queue://b"
    with pytest.raises(ResourceLimitExceeded):
        producer.send(message)
    message.to = "queue://a"
    producer.send(message)


def test_durable_subscriptions_count():
    """S2.5: a durable subscription stays when its consumer leaves, so it counts; a
    reattach to it is not a new one, a new name past the limit is refused."""
    broker, _ = make_broker(max_destinations=2)
    consumer, _ = consume(broker, "topic://t", durable_name="d1", container_id="c")
    consumer.close()
    consume(broker, "topic://t", durable_name="d1", container_id="c")
    with pytest.raises(ResourceLimitExceeded):
        consume(broker, "topic://t", durable_name="d2", container_id="c")


def test_admin_creation_and_recovery_not_refused():
    """Destinations made by the operator or restored from the store are not refused
    (they count: clients then get no new ones)."""
    broker, _ = make_broker(max_destinations=1)
    broker.create_queue("a")
    broker.create_topic("b")
    broker.restore_durable("c", "d", "b", None)
    with pytest.raises(ResourceLimitExceeded):
        broker.open_producer("queue://new")


# -- the room a producer may be granted (S2.7) -------------------------------------------


def test_room_of_a_queue_counts_messages_and_bytes():
    """S2.7: a FLOW_CONTROL queue's room is what it takes before it is full: by count,
    and by bytes at the mean size of what waits; a full queue has none."""
    broker, _ = make_broker(max_num_msgs=10, max_total_msg_bytes=1000)
    producer = broker.open_producer("queue://q")
    assert producer.room == 10
    sent(producer, b"x" * 100), sent(producer, b"x" * 100)
    assert producer.room == 8                        # 800 bytes left: 8 of 100
    sent(producer, b"x" * 400)
    assert producer.room == 2                        # 400 bytes left, 200 a message
    sent(producer, b"x" * 400)
    assert producer.room == 0 and producer.blocked


def test_room_is_shared_among_producers():
    """S2.7: two producers attached to one queue each get half of its room; an
    anonymous producer and one facing REJECT_NEWEST are held back by no room."""
    broker, _ = make_broker(max_num_msgs=10)
    first = broker.open_producer("queue://q")
    second = broker.open_producer("queue://q")
    assert first.room == second.room == 5
    second.close()
    assert first.room == 10
    assert broker.open_producer(None).room is None
    rejecting, _ = make_broker(max_num_msgs=10, limit_behavior="REJECT_NEWEST")
    assert rejecting.open_producer("queue://q").room is None


def test_room_of_a_topic_is_its_fullest_subscription():
    """S2.7: a topic's room is the least of its subscriptions'; with none it has no
    limit to respect."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("topic://t")
    assert producer.room is None
    consume(broker, "topic://t")
    sent(producer)
    consume(broker, "topic://#")
    assert producer.room == 9
    sent(producer)
    assert producer.room == 8


def test_limits_logged_when_refusing_starts_and_ends():
    """Operators learn from one log line, naming the setting, that the broker started
    refusing messages, and from another that it accepts them again; not one line per
    refused message."""
    from twisted.logger import globalLogPublisher
    lines = []
    observer = lines.append
    globalLogPublisher.addObserver(observer)
    try:
        broker, _ = make_broker(max_count=1, max_destinations=1)
        producer = broker.open_producer("queue://q")
        sent(producer)
        for _ in range(3):
            refused(producer)
        for _ in range(2):
            with pytest.raises(ResourceLimitExceeded):
                broker.open_producer("queue://other")
        consume(broker, "queue://q", credit=1, presettled=True)
        sent(producer)
    finally:
        globalLogPublisher.removeObserver(observer)
    texts = [e["log_format"].format(**e) for e in lines if "log_format" in e]
    assert len([t for t in texts if "mqgate.system.max_count=1 allows" in t]) == 1
    assert len([t for t in texts if "accepts messages again" in t]) == 1
    assert len([t for t in texts if "mqgate.system.max_destinations=1" in t]) == 1


# -- bytes in flight count (S2.2, S2.3) --------------------------------------------------


def test_max_size_counts_bytes_in_flight_until_settled():
    """S2.2: a message handed to a consumer that has not settled it is still held, its
    bytes too: mqgate.system.max_size refuses until the consumer settles."""
    broker, _ = make_broker(max_size=1000)
    producer = broker.open_producer("queue://q")
    consumer, target = consume(broker, "queue://q", credit=5)
    sent(producer, b"x" * 600)
    sent(producer, b"x" * 600)         # both in flight: 1200 bytes held
    assert broker.stats["system_bytes"] == 1200
    assert "mqgate.system.max_size" in refused(producer)
    target.consumer.settle(target.deliveries[0], "accepted")
    sent(producer, b"x" * 100)
    target.settle_all()
    assert broker.stats["system_bytes"] == 0


def test_max_total_msg_bytes_counts_bytes_in_flight():
    """S2.3: maxTotalMsgBytes holds a producer back when the bytes of a queue's
    messages, waiting or in flight, reach it, and lets it go once settlements take
    them under the low-water mark."""
    broker, _ = make_broker(max_num_msgs=-1, max_total_msg_bytes=1000)
    producer = broker.open_producer("queue://q")
    consumer, target = consume(broker, "queue://q", credit=20)
    for _ in range(10):
        sent(producer, b"x" * 100)
    queue = broker.queue("q")
    assert queue.in_flight == 10 and queue.held_bytes == 1000
    assert producer.blocked and producer.room == 0
    woken = []
    producer.when_unblocked(lambda: woken.append(True))
    target.consumer.settle(target.deliveries[0], "accepted")
    assert not woken                   # 900 bytes: not under the low-water mark
    target.consumer.settle(target.deliveries[1], "rejected")
    assert woken and queue.held_bytes == 800


def test_bytes_in_flight_come_back_to_zero():
    """S2.2: bytes and messages in flight are given back whichever way they leave:
    released and modified (held again, then taken), a consumer closing with
    deliveries out, a target that fails to take one, and a temporary queue deleted
    while another consumer holds its deliveries."""
    broker, _ = make_broker(max_count=100, max_size=10000)
    producer = broker.open_producer("queue://q")
    for _ in range(4):
        sent(producer, b"abc")
    consumer, target = consume(broker, "queue://q", credit=4)
    target.consumer.settle(target.deliveries[0], "released")
    target.consumer.settle(target.deliveries[1], "modified", delivery_failed=True)
    target.consumer.settle(target.deliveries[2], "modified", undeliverable_here=True)
    consumer.close()                   # one still out: back to the queue
    assert broker.stats["system_bytes"] == 12 and broker.stats["system_count"] == 4

    def fail(target, delivery):
        raise RuntimeError("a broken target")

    failing, failed = consume(broker, "queue://q")
    failed.on_deliver = fail
    failing.set_credit(1)
    assert broker.stats["system_bytes"] == 12 and broker.stats["system_count"] == 4
    failing.close()
    _, taker = consume(broker, "queue://q", credit=10)
    taker.settle_all()

    owner, _ = consume(broker, None, dynamic=True)
    other, held = consume(broker, owner.address, credit=5)
    sent(broker.open_producer(owner.address), b"abcd")
    assert broker.stats["system_bytes"] == 4
    owner.close()                      # the temporary queue goes, one delivery out
    held.settle_all()
    stats = broker.stats
    assert (stats["system_count"], stats["system_bytes"], stats["held"]) == (0, 0, 0)
