"""Settlement and redelivery (S8.1, design rule 3)."""

import pytest

from mqgate.core import BrokerMessage
from mqgate.core.errors import CoreError

from tests.core import consume, make_broker, send


def test_close_requeues_unsettled_in_order_with_count_raised():
    """S8.1, rule 3: unsettled deliveries return at the head, in their original order,
    ahead of later messages, marked redelivered."""
    broker, _ = make_broker()
    first, _ = consume(broker, "queue://q", credit=3)
    send(broker, "queue://q", b"1", b"2", b"3", b"4", b"5")
    first.close()
    second, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"1", b"2", b"3", b"4", b"5"]
    counts = [d.delivery_count for d in target.deliveries]
    assert counts == [1, 1, 1, 0, 0]
    assert [d.redelivered for d in target.deliveries] == [True] * 3 + [False] * 2


def test_close_requeues_only_unsettled():
    """S8.1: settled deliveries are gone; only unsettled ones come back."""
    broker, _ = make_broker()
    first, first_target = consume(broker, "queue://q", credit=3)
    send(broker, "queue://q", b"1", b"2", b"3")
    first.settle(first_target.deliveries[1])
    first.close()
    second, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"1", b"3"]
    # Requeued deliveries no longer hold on to the closed consumer.
    assert first_target.deliveries[0].consumer is None
    assert first_target.deliveries[1].consumer is first


def test_settle_after_close_is_noop():
    """S8.1: a disposition arriving after the consumer closed changes nothing."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"1")
    consumer.close()
    consumer.settle(target.deliveries[0])
    assert broker.queue("q").depth == 1 and broker.queue("q").messages_out == 0


def test_released_keeps_delivery_count():
    """S8.1: RELEASED puts the message back at the head without raising its count."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"1", b"2")
    consumer.settle(target.deliveries[0], "released")
    consumer.set_credit(2)
    assert target.payloads == [b"1", b"1", b"2"]
    assert target.deliveries[1].delivery_count == 0


def test_modified_delivery_failed_raises_count():
    """S8.1: MODIFIED with delivery-failed puts the message back with its count raised."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"1", b"2")
    consumer.settle(target.deliveries[0], "modified", delivery_failed=True)
    consumer.set_credit(1)
    assert target.payloads == [b"1", b"1"]
    assert target.deliveries[1].delivery_count == 1
    consumer.settle(target.deliveries[1], "modified")
    consumer.set_credit(1)
    assert target.deliveries[2].delivery_count == 1


def test_modified_undeliverable_here_goes_to_another_consumer():
    """S8.1: MODIFIED undeliverable-here is redelivered to another consumer, not to the
    one that refused it, and without blocking the rest of the queue."""
    broker, _ = make_broker()
    a, ta = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"poison", b"next")
    a.settle(ta.deliveries[0], "modified", delivery_failed=True, undeliverable_here=True)
    a.set_credit(5)
    assert ta.payloads == [b"poison", b"next"]
    assert broker.queue("q").depth == 1
    b, tb = consume(broker, "queue://q", credit=5)
    assert tb.payloads == [b"poison"] and tb.deliveries[0].delivery_count == 1


def test_undeliverable_here_freed_when_refusing_consumer_closes():
    """S8.1: a message parked away from a consumer is available again once it closes."""
    broker, _ = make_broker()
    a, ta = consume(broker, "topic://t", credit=1, durable_name="d", container_id="c")
    send(broker, "topic://t", b"1")
    a.settle(ta.deliveries[0], "modified", undeliverable_here=True)
    a.close()
    again, target = consume(broker, "topic://t", credit=1, durable_name="d",
                            container_id="c")
    assert target.payloads == [b"1"]


def test_rejected_is_gone_and_counted():
    """S8.1: REJECTED removes the message and counts it as dropped."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1")
    consumer.settle(target.deliveries[0], "rejected")
    queue = broker.queue("q")
    assert (queue.held, queue.rejected, queue.dropped) == (0, 1, 1)
    consumer.close()
    assert queue.depth == 0


def test_unknown_outcome_raises_and_keeps_delivery():
    """S8.1: an unknown outcome is a protocol error and the delivery stays unsettled."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1")
    with pytest.raises(CoreError):
        consumer.settle(target.deliveries[0], "bogus")
    assert consumer.unsettled == 1


def test_settle_twice_is_noop():
    """FACTS 3.3: settling an already settled delivery does nothing."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1")
    consumer.settle(target.deliveries[0])
    consumer.settle(target.deliveries[0], "released")
    assert broker.queue("q").depth == 0 and broker.queue("q").messages_out == 1


def test_presettled_consumer_leaves_nothing_unsettled():
    """S8.1: at-most-once: deliveries count as settled when handed over, are never
    redelivered, and a client's disposition for them is ignored (FACTS 3.3)."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=5, presettled=True)
    send(broker, "queue://q", b"1", b"2")
    assert consumer.unsettled == 0
    consumer.settle(target.deliveries[0], "released")
    consumer.close()
    assert broker.queue("q").held == 0 and broker.queue("q").messages_out == 2


def test_reentrant_settle_inside_deliver():
    """S8.1: a target that settles inside deliver (re-entrantly) gets every message
    once and leaves nothing unsettled."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", settle="accepted")
    send(broker, "queue://q", *[b"%d" % i for i in range(5)])
    consumer.set_credit(10)
    send(broker, "queue://q", b"5", b"6")
    assert target.payloads == [b"%d" % i for i in range(7)]
    assert consumer.unsettled == 0 and broker.queue("q").held == 0


def test_reentrant_release_inside_deliver_is_bounded_by_credit():
    """S8.1: a target releasing inside deliver gets the message again, at most as often
    as its credit allows."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", settle="released")
    send(broker, "queue://q", b"1")
    consumer.set_credit(3)
    assert target.payloads == [b"1"] * 3 and broker.queue("q").depth == 1


def test_reentrant_close_inside_deliver():
    """Rule 3: a consumer closing inside deliver hands its delivery back (redelivered)
    and the backlog waits, in order, for the next consumer."""
    broker, _ = make_broker()
    send(broker, "queue://q", b"1", b"2", b"3")
    other, target = consume(broker, "queue://q")
    closer, closing = consume(broker, "queue://q")
    closing.on_deliver = lambda target, delivery: target.consumer.close()
    closer.set_credit(10)
    assert closing.payloads == [b"1"] and closer.closed
    other.set_credit(10)
    assert target.payloads == [b"1", b"2", b"3"]
    assert [d.delivery_count for d in target.deliveries] == [1, 0, 0]


def test_reentrant_send_and_credit_inside_deliver():
    """S2.1: a target that publishes and tops up its credit inside deliver keeps the
    queue order and gets every message once."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    remaining = [b"2", b"3"]

    def on_deliver(target, delivery):
        if remaining:
            producer.send(BrokerMessage(remaining.pop(0)))
        target.consumer.set_credit(1)

    consumer, target = consume(broker, "queue://q")
    target.on_deliver = on_deliver
    consumer.set_credit(1)
    producer.send(BrokerMessage(b"1"))
    assert target.payloads == [b"1", b"2", b"3"]


def test_many_consumers_each_message_exactly_once():
    """S2.1, S8.1: 50 competing consumers receiving 10,000 messages with credit refills
    and settlements get every message exactly once."""
    broker, _ = make_broker()
    pairs = [consume(broker, "queue://q", credit=7) for _ in range(50)]
    producer = broker.open_producer("queue://q")
    for i in range(10_000):
        producer.send(BrokerMessage(i))
        if i % 97 == 0:
            for consumer, target in pairs:
                target.settle_all()
                consumer.set_credit(7)
    while broker.queue("q").depth:
        for consumer, target in pairs:
            consumer.set_credit(7)
    received = [p for _, target in pairs for p in target.payloads]
    assert sorted(received) == list(range(10_000))
    assert all(target.payloads for _, target in pairs)


def test_chain_of_sends_from_deliver_does_not_recurse():
    """S2.1: messages sent from inside deliver are queued and dispatched by the running
    loop, so a long request/reply-style chain does not grow the call stack."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")

    def on_deliver(target, delivery):
        if delivery.message.payload < 5_000:
            producer.send(BrokerMessage(delivery.message.payload + 1))

    consumer, target = consume(broker, "queue://q", credit=10_000, settle="accepted")
    target.on_deliver = on_deliver
    producer.send(BrokerMessage(0))
    assert target.payloads == list(range(5_001))


def test_credit_top_up_inside_deliver_keeps_round_robin():
    """S2.1: a consumer that refills its credit inside deliver keeps its turn: the
    other competing consumers are still served in rotation."""
    broker, _ = make_broker()
    first, _ = consume(broker, "queue://q", credit=4)
    send(broker, "queue://q", b"1", b"2", b"3", b"4")
    a, ta = consume(broker, "queue://q", credit=10)
    ta.on_deliver = lambda target, delivery: target.consumer.set_credit(10)
    b, tb = consume(broker, "queue://q", credit=10)
    first.close()
    assert ta.payloads == [b"1", b"3"] and tb.payloads == [b"2", b"4"]
