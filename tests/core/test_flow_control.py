"""Bounded destinations and producer flow control in the core (S2.3, S2.7, docs/design.md
rule 4): FLOW_CONTROL blocks producers of a full destination until it drains below its
low-water mark; REJECT_NEWEST refuses the message; -1 means no limit."""

import pytest

from mqgate.core import BrokerMessage, CoreConfig
from mqgate.core.broker import REJECT_NEWEST, ResourceLimitExceeded
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import ConfigError

from tests.core import consume, make_broker


def fill(producer, count, payload=b"m", **fields):
    """Send C{count} messages through C{producer}."""
    for _ in range(count):
        producer.send(BrokerMessage(payload, **fields))


class Calls:
    """A callback that counts how often it was called."""

    def __init__(self):
        self.count = 0

    def __call__(self):
        self.count += 1


def test_blocked_when_queue_reaches_max_count():
    """S2.3 FLOW_CONTROL: the send that makes a queue hold maxNumMsgs is accepted, and
    leaves its producer blocked; the ones before it do not."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    fill(producer, 9)
    assert not producer.blocked
    fill(producer, 1)
    assert producer.blocked
    assert broker.queue("q").held == 10 and broker.queue("q").full


def test_blocked_producer_may_overshoot():
    """S2.7: a blocked producer's sends still go through (what it had in flight is
    bounded by its credit, which the glue withholds)."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    fill(producer, 15)
    assert producer.blocked and broker.queue("q").held == 15


def test_unblocked_below_low_water_calls_back_once():
    """S2.7: the callback runs once, synchronously, when settlements take the queue
    below 90 % of its limit, and not before."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    fill(producer, 10)
    calls = Calls()
    producer.when_unblocked(calls)
    consumer, target = consume(broker, "queue://q", credit=10)
    # All ten are in flight now: still held.
    assert producer.blocked and calls.count == 0
    consumer.settle(target.deliveries[0])
    assert producer.blocked and calls.count == 0  # 9 held: at the low-water mark
    consumer.settle(target.deliveries[1])
    assert not producer.blocked and calls.count == 1  # 8 held: below it
    target.settle_all()
    assert calls.count == 1


def test_presettled_consumer_unblocks():
    """S2.7: messages leaving through an at-most-once consumer free room too."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    fill(producer, 10)
    calls = Calls()
    producer.when_unblocked(calls)
    consume(broker, "queue://q", credit=2, presettled=True)
    assert not producer.blocked and calls.count == 1


def test_released_delivery_keeps_queue_full():
    """S2.7: a delivery given back (released) is still held: the queue stays full
    above its low-water mark."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    fill(producer, 12)
    consumer, target = consume(broker, "queue://q", credit=1)
    consumer.settle(target.deliveries[0], "released")
    assert producer.blocked and broker.queue("q").held == 12


def test_when_unblocked_on_free_producer_calls_at_once():
    """A producer that is not blocked is called back immediately."""
    broker, _ = make_broker(max_num_msgs=10)
    producer = broker.open_producer("queue://q")
    calls = Calls()
    producer.when_unblocked(calls)
    assert calls.count == 1


def test_closed_producer_callbacks_are_dropped():
    """A producer that closes while blocked is never called back, and the queue
    forgets it."""
    broker, _ = make_broker(max_num_msgs=2)
    producer = broker.open_producer("queue://q")
    fill(producer, 2)
    calls = Calls()
    producer.when_unblocked(calls)
    producer.close()
    consume(broker, "queue://q", credit=2, presettled=True)
    assert calls.count == 0 and not broker.queue("q")._waiters


def test_max_bytes_blocks_and_drains():
    """S2.3: maxTotalMsgBytes limits the bytes of waiting messages the same way."""
    broker, _ = make_broker(max_num_msgs=-1, max_total_msg_bytes=1000)
    producer = broker.open_producer("queue://q")
    fill(producer, 9, payload=b"x" * 100)
    assert not producer.blocked
    fill(producer, 1, payload=b"x" * 100)
    assert producer.blocked and broker.queue("q").held_bytes == 1000
    calls = Calls()
    producer.when_unblocked(calls)
    consume(broker, "queue://q", credit=2, presettled=True)
    assert calls.count == 1 and broker.queue("q").held_bytes == 800


def test_expiry_frees_room():
    """S2.7: messages that expire on the way to a consumer free room as well."""
    broker, clock = make_broker(max_num_msgs=4)
    producer = broker.open_producer("queue://q")
    fill(producer, 4, expiry=5.0)
    assert producer.blocked
    clock.advance(10)
    consume(broker, "queue://q", credit=1)
    assert not producer.blocked and broker.queue("q").expired == 4


def test_topic_full_subscription_blocks_publisher():
    """S2.3: a topic's subscription queues are its destinations: one full subscription
    blocks the topic's publishers until it drains."""
    broker, _ = make_broker(max_num_msgs=5)
    slow, slow_target = consume(broker, "topic://t")
    consume(broker, "topic://t", credit=100, presettled=True)
    producer = broker.open_producer("topic://t")
    fill(producer, 5)
    assert producer.blocked
    calls = Calls()
    producer.when_unblocked(calls)
    slow.set_credit(2)
    slow_target.settle_all()
    assert calls.count == 1 and not producer.blocked


def test_anonymous_producer_blocks_on_the_full_destination():
    """S2.7: an anonymous producer is blocked by the destination its message filled,
    and stays blocked while any destination it filled is full."""
    broker, _ = make_broker(max_num_msgs=3)
    producer = broker.open_producer(None)
    fill(producer, 3, to="queue://a")
    fill(producer, 3, to="queue://b")
    calls = Calls()
    producer.when_unblocked(calls)
    consume(broker, "queue://a", credit=3, presettled=True)
    assert producer.blocked and calls.count == 0
    consume(broker, "queue://b", credit=3, presettled=True)
    assert not producer.blocked and calls.count == 1


def test_deleted_queue_releases_its_producers():
    """A destination that goes away (a temporary queue, a subscription) wakes the
    producers waiting for it."""
    broker, _ = make_broker(max_num_msgs=2)
    subscriber, _ = consume(broker, "topic://t")
    producer = broker.open_producer("topic://t")
    fill(producer, 2)
    calls = Calls()
    producer.when_unblocked(calls)
    subscriber.close()
    assert calls.count == 1 and not producer.blocked


def test_reject_newest_raises_with_condition():
    """S2.3 REJECT_NEWEST: a send to a full queue raises amqp:resource-limit-exceeded,
    naming the destination and the limit, and enqueues nothing; the producer is never
    blocked."""
    broker, _ = make_broker(max_num_msgs=3, limit_behavior=REJECT_NEWEST)
    producer = broker.open_producer("queue://orders")
    fill(producer, 3)
    assert not producer.blocked
    with pytest.raises(ResourceLimitExceeded) as caught:
        fill(producer, 1)
    error = caught.value
    assert isinstance(error, CoreError)
    assert error.kind is ErrorKind.LIMIT_EXCEEDED
    assert "'orders'" in error.description and "3" in error.description
    assert "maxNumMsgs" in error.description
    assert broker.queue("orders").held == 3 and broker.queue("orders").messages_in == 3


def test_reject_newest_accepts_again_with_room():
    """S2.3 REJECT_NEWEST: one settlement makes room for one more message."""
    broker, _ = make_broker(max_num_msgs=3, limit_behavior=REJECT_NEWEST)
    producer = broker.open_producer("queue://q")
    fill(producer, 3)
    consume(broker, "queue://q", credit=1, presettled=True)
    fill(producer, 1)
    with pytest.raises(ResourceLimitExceeded):
        fill(producer, 1)


def test_reject_newest_topic_enqueues_nowhere():
    """S2.3 REJECT_NEWEST on a topic: with one subscription full, the message goes to
    no subscription at all."""
    broker, _ = make_broker(max_num_msgs=2, limit_behavior=REJECT_NEWEST)
    _, slow_target = consume(broker, "topic://t")
    _, fast_target = consume(broker, "topic://t", credit=100, presettled=True)
    producer = broker.open_producer("topic://t")
    fill(producer, 2)
    with pytest.raises(ResourceLimitExceeded) as caught:
        fill(producer, 1)
    assert "topic 't'" in caught.value.description
    assert len(fast_target.deliveries) == 2


@pytest.mark.parametrize("config", [
    {"max_num_msgs": -1, "max_total_msg_bytes": -1},
    {"max_num_msgs": -1, "max_total_msg_bytes": -1, "limit_behavior": REJECT_NEWEST},
])
def test_unlimited_never_blocks(config):
    """S2.3: -1 means no limit: a producer with no consumer is never blocked nor
    refused."""
    broker, _ = make_broker(**config)
    producer = broker.open_producer("queue://q")
    fill(producer, 5000, payload=b"x" * 1000)
    assert not producer.blocked and not broker.queue("q").full


def test_default_limits_are_the_autocreate_defaults():
    """S2.5, FACTS 1.6: auto-created destinations get maxNumMsgs 100000, FLOW_CONTROL."""
    limits = CoreConfig().limits
    assert (limits.max_count, limits.behavior) == (100000, "FLOW_CONTROL")


@pytest.mark.parametrize("config, key", [
    ({"limit_behavior": "REMOVE_NEWEST"}, "mqgate.autocreate.destination.limitBehavior"),
    ({"max_num_msgs": 0}, "mqgate.autocreate.destination.maxNumMsgs"),
    ({"max_total_msg_bytes": -2}, "mqgate.autocreate.destination.maxTotalMsgBytes"),
])
def test_bad_limits_are_config_errors(config, key):
    """Limits the core cannot honour are configuration errors naming the key."""
    with pytest.raises(ConfigError) as caught:
        CoreConfig(**config)
    assert key in str(caught.value)
