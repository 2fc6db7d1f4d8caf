"""Consumers with selectors on queues and topics (S2.8, with S2.1, S2.9, S8.1)."""

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.core import BrokerMessage
from mqgate.core.broker import MODIFIED, RELEASED
from mqgate.core.selectors import SelectorError, compile_selector
from mqgate.core.errors import ErrorKind

from tests.core import RecordingTarget, consume, make_broker


class Payload:
    """A payload carrying application properties the way an EncodedMessage does."""

    def __init__(self, name, **properties):
        self.name = name
        self.application_properties = properties

    def __repr__(self):
        return f"<Payload {self.name}>"


def publish(broker, address, *specs, **fields):
    """Send one message per C{(name, properties)} spec; returns the messages."""
    producer = broker.open_producer(address)
    messages = [BrokerMessage(Payload(name, **props), **fields) for name, props in specs]
    for message in messages:
        producer.send(message)
    producer.close()
    return messages


def names(target):
    return [d.message.payload.name for d in target.deliveries]


RED, BLUE = {"color": "red"}, {"color": "blue"}


# -- queues ----------------------------------------------------------------------------

def test_queue_selector_consumer_gets_only_matching():
    """S2.8: on a queue, a selector consumer receives only messages that match; the
    others stay queued, in order."""
    broker, _ = make_broker()
    _, target = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    publish(broker, "queue://q", ("r1", RED), ("b1", BLUE), ("r2", RED), ("b2", BLUE))
    assert names(target) == ["r1", "r2"]
    assert broker.queue("q").depth == 2
    _, plain = consume(broker, "queue://q", credit=10)
    assert names(plain) == ["b1", "b2"]


def test_queue_mixed_consumers_each_message_once():
    """S2.8, S2.1: with a selector consumer and a plain one, every message goes to
    exactly one eligible consumer, and the selector consumer only gets matches."""
    broker, _ = make_broker()
    _, picky = consume(broker, "queue://q", credit=100, selector="color = 'red'")
    _, plain = consume(broker, "queue://q", credit=100)
    specs = [(f"m{i}", RED if i % 3 else BLUE) for i in range(30)]
    publish(broker, "queue://q", *specs)
    assert sorted(names(picky) + names(plain)) == sorted(n for n, _ in specs)
    red = {n for n, p in specs if p is RED}
    assert set(names(picky)) <= red and names(picky)
    assert broker.queue("q").depth == 0


def test_queue_backlog_skipped_in_order():
    """S2.8: credit arriving on a backlog delivers the matching messages in order and
    leaves the others where they were, in their order, for a later consumer."""
    broker, _ = make_broker()
    specs = [(f"m{i}", RED if i % 2 else BLUE) for i in range(8)]
    publish(broker, "queue://q", *specs)
    picky, target = consume(broker, "queue://q", selector="color = 'red'")
    picky.set_credit(2)
    assert names(target) == ["m1", "m3"]
    picky.set_credit(10)
    assert names(target) == ["m1", "m3", "m5", "m7"]
    _, plain = consume(broker, "queue://q", credit=10)
    assert names(plain) == ["m0", "m2", "m4", "m6"]


def test_queue_selector_respects_priority():
    """S2.8, S2.9: among matching messages a selector consumer gets the highest
    priority first, FIFO within a priority."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    for name, priority, props in [("low", 1, RED), ("blue-high", 9, BLUE),
                                  ("high", 8, RED), ("high2", 8, RED)]:
        producer.send(BrokerMessage(Payload(name, **props), priority=priority))
    _, target = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    assert names(target) == ["high", "high2", "low"]


def test_queue_selector_consumers_round_robin():
    """S2.8, S2.1: selector consumers that both accept a message are served in turn."""
    broker, _ = make_broker()
    _, a = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    _, b = consume(broker, "queue://q", credit=10, selector="color IN ('red', 'x')")
    publish(broker, "queue://q", *[(f"r{i}", RED) for i in range(4)])
    assert (names(a), names(b)) == (["r0", "r2"], ["r1", "r3"])


def test_queue_selector_on_header_fields():
    """S2.8: a selector can test the header fields the core holds (here priority and
    delivery mode)."""
    broker, _ = make_broker()
    _, target = consume(broker, "queue://q", credit=10,
                        selector="JMSPriority >= 7 AND JMSDeliveryMode = 'PERSISTENT'")
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(Payload("a"), priority=9, durable=True))
    producer.send(BrokerMessage(Payload("b"), priority=9))
    producer.send(BrokerMessage(Payload("c"), priority=3, durable=True))
    assert names(target) == ["a"]
    assert broker.queue("q").depth == 2


def test_queue_non_matching_message_is_not_lost_when_selector_consumer_leaves():
    """S2.8, S8.1: closing the only (selector) consumer leaves refused messages and
    requeues its unsettled ones; a plain consumer then gets all of them once."""
    broker, _ = make_broker()
    picky, target = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    publish(broker, "queue://q", ("r1", RED), ("b1", BLUE), ("r2", RED))
    assert names(target) == ["r1", "r2"]
    picky.close()
    _, plain = consume(broker, "queue://q", credit=10)
    assert sorted(names(plain)) == ["b1", "r1", "r2"]
    assert [d.redelivered for d in plain.deliveries if d.message.payload.name != "b1"] \
        == [True, True]


def test_queue_returns_to_plain_dispatch_after_last_selector_consumer():
    """S2.8: once the last selector consumer closes, the queue dispatches to its plain
    consumers as before (round-robin over everything)."""
    broker, _ = make_broker()
    picky, _ = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    picky.close()
    _, a = consume(broker, "queue://q", credit=10)
    _, b = consume(broker, "queue://q", credit=10)
    publish(broker, "queue://q", ("m0", BLUE), ("m1", RED), ("m2", BLUE), ("m3", RED))
    assert (names(a), names(b)) == (["m0", "m2"], ["m1", "m3"])


def test_queue_released_delivery_goes_back_for_matching_consumers():
    """S2.8, S8.1: a delivery a selector consumer releases goes back to the head and is
    delivered again to a consumer that accepts it."""
    broker, _ = make_broker()
    picky, target = consume(broker, "queue://q", credit=1, selector="color = 'red'")
    publish(broker, "queue://q", ("r1", RED), ("r2", RED))
    picky.settle(target.deliveries[0], RELEASED)
    picky.set_credit(5)
    assert names(target) == ["r1", "r1", "r2"]


def test_queue_undeliverable_here_goes_to_another_matching_consumer():
    """S2.8: MODIFIED(undeliverable-here) from a selector consumer waits for another
    consumer whose selector accepts the message."""
    broker, _ = make_broker()
    first, t1 = consume(broker, "queue://q", credit=1, selector="color = 'red'")
    publish(broker, "queue://q", ("r1", RED))
    _, blue = consume(broker, "queue://q", credit=5, selector="color = 'blue'")
    first.set_credit(5)
    first.settle(t1.deliveries[0], MODIFIED, undeliverable_here=True)
    assert names(t1) == ["r1"] and names(blue) == []
    _, t3 = consume(broker, "queue://q", credit=5, selector="color <> 'blue'")
    assert names(t3) == ["r1"]


def test_queue_selector_dispatch_expires_messages():
    """S2.8, S2.9: an expired message is dropped, not delivered, on the selector path."""
    broker, clock = make_broker()
    publish(broker, "queue://q", ("old", RED), expiry=5.0)
    publish(broker, "queue://q", ("new", RED))
    clock.advance(10)
    _, target = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    publish(broker, "queue://q", ("late", RED), expiry=5.0)
    assert names(target) == ["new"]
    assert broker.queue("q").expired == 2


def test_queue_reentrant_settle_and_refill():
    """S2.8: a target that settles and refills credit from inside deliver (like the
    AMQP glue) receives every matching message exactly once, backlog or not."""
    broker, _ = make_broker()
    received = []

    def refill(target, delivery):
        received.append(delivery.message.payload.name)
        target.consumer.settle(delivery)
        target.consumer.set_credit(2)
    specs = [(f"m{i}", RED if i % 2 else BLUE) for i in range(20)]
    publish(broker, "queue://q", *specs[:10])
    target = RecordingTarget(on_deliver=refill)
    target.consumer = broker.open_consumer("queue://q", target, selector="color = 'red'")
    target.consumer.set_credit(2)
    publish(broker, "queue://q", *specs[10:])
    assert received == [n for n, p in specs if p is RED]
    assert broker.queue("q").depth == 10


def test_queue_consumer_closing_during_delivery():
    """S2.8, S8.1: a selector consumer that closes itself while receiving gives back
    what it was about to receive; nothing is lost and the order is kept."""
    broker, _ = make_broker()
    publish(broker, "queue://q", *[(f"r{i}", RED) for i in range(5)])
    target = RecordingTarget(on_deliver=lambda t, d: t.consumer.close())
    target.consumer = broker.open_consumer("queue://q", target, selector="color = 'red'")
    target.consumer.set_credit(5)
    assert names(target) == ["r0"]
    _, plain = consume(broker, "queue://q", credit=10)
    assert names(plain) == [f"r{i}" for i in range(5)]
    assert [d.redelivered for d in plain.deliveries] == [True] + [False] * 4
    assert broker.queue("q").held == 5


def test_queue_credit_given_from_inside_a_delivery_reaches_the_backlog():
    """S2.8: a consumer going from no credit to some while another one receives (a
    glue answering flow frames) gets the waiting messages it accepts."""
    broker, _ = make_broker()
    publish(broker, "queue://q", ("b1", BLUE), ("b2", BLUE))
    blue, blue_target = consume(broker, "queue://q", selector="color = 'blue'")
    red_target = RecordingTarget(on_deliver=lambda t, d: blue.set_credit(5))
    red_target.consumer = broker.open_consumer("queue://q", red_target,
                                               selector="color = 'red'")
    red_target.consumer.set_credit(5)
    publish(broker, "queue://q", ("r1", RED))
    assert names(red_target) == ["r1"]
    assert names(blue_target) == ["b1", "b2"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send-red", "send-blue", "credit-picky",
                                           "credit-plain", "settle", "release"]),
                          st.integers(0, 3)), max_size=40))
def test_queue_random_operations_deliver_each_message_once(operations):
    """S2.8, S8.1: under any mix of sends, credit, accepts and releases, a selector
    consumer only ever gets matching messages, and in the end every message is
    accepted exactly once."""
    broker, _ = make_broker()
    picky, pt = consume(broker, "queue://q", selector="color = 'red'")
    plain, qt = consume(broker, "queue://q")
    producer = broker.open_producer("queue://q")
    sent = []
    accepted = []

    def settle_some(consumer, target, count, outcome):
        for delivery in list(target.deliveries):
            if count and delivery in consumer._unsettled:
                consumer.settle(delivery, outcome)
                if outcome == "accepted":
                    accepted.append(delivery.message.payload.name)
                count -= 1
    for operation, number in operations:
        if operation.startswith("send"):
            name = f"m{len(sent)}"
            sent.append(name)
            producer.send(BrokerMessage(Payload(name, color=operation[5:])))
        elif operation == "credit-picky":
            picky.set_credit(number)
        elif operation == "credit-plain":
            plain.set_credit(number)
        else:
            outcome = "accepted" if operation == "settle" else RELEASED
            settle_some(picky, pt, number, outcome)
            settle_some(plain, qt, number, outcome)
    assert all(d.message.payload.application_properties["color"] == "red"
               for d in pt.deliveries)
    plain.set_credit(10_000)
    picky.set_credit(10_000)
    settle_some(picky, pt, 10_000, "accepted")
    settle_some(plain, qt, 10_000, "accepted")
    assert sorted(accepted) == sorted(sent)
    assert broker.queue("q").held == 0


# -- topics ----------------------------------------------------------------------------

def test_topic_selector_subscription_gets_only_matching():
    """S2.8: a selector subscriber on a topic gets only matching messages, a plain
    subscriber gets all of them."""
    broker, _ = make_broker()
    _, picky = consume(broker, "topic://t", credit=10, selector="color = 'red'")
    _, plain = consume(broker, "topic://t", credit=10)
    publish(broker, "topic://t", ("r1", RED), ("b1", BLUE), ("r2", RED))
    assert names(picky) == ["r1", "r2"]
    assert names(plain) == ["r1", "b1", "r2"]


def test_topic_non_matching_messages_are_never_enqueued():
    """S2.8: on a topic, a message a subscription's selector refuses is not enqueued
    on that subscription at all; one no subscription accepts is counted dropped."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", selector="color = 'red'")
    publish(broker, "topic://t", ("r1", RED), ("b1", BLUE), ("b2", BLUE))
    subscription = consumer.queue
    assert (subscription.messages_in, subscription.depth) == (1, 1)
    topic = broker.topic("t")
    assert (topic.messages_in, topic.messages_out, topic.dropped) == (3, 1, 2)


def test_topic_pattern_subscription_with_selector():
    """S2.8: a selector applies together with a wildcard subscription."""
    broker, _ = make_broker()
    _, target = consume(broker, "topic://prices.#", credit=10, selector="qty > 10")
    publish(broker, "topic://prices.eu", ("small", {"qty": 5}), ("big", {"qty": 50}))
    publish(broker, "topic://prices.us", ("huge", {"qty": 500}))
    assert names(target) == ["big", "huge"]


def test_durable_subscription_keeps_selector_and_backlog():
    """S2.8: a durable subscription filters while detached; reattaching with the same
    selector resumes its (filtered) backlog."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", durable_name="sub", container_id="c",
                          selector="color = 'red'")
    consumer.close()
    publish(broker, "topic://t", ("r1", RED), ("b1", BLUE), ("r2", RED))
    _, target = consume(broker, "topic://t", credit=10, durable_name="sub",
                        container_id="c", selector="color = 'red'")
    assert names(target) == ["r1", "r2"]


def test_durable_subscription_with_another_selector_is_replaced():
    """S2.8: reattaching a durable subscription with a different selector replaces
    it, and drops its backlog (JMS)."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", durable_name="sub", container_id="c",
                          selector="color = 'red'")
    consumer.close()
    publish(broker, "topic://t", ("r1", RED))
    _, target = consume(broker, "topic://t", credit=10, durable_name="sub",
                        container_id="c", selector="color = 'blue'")
    assert names(target) == []
    publish(broker, "topic://t", ("b1", BLUE), ("r2", RED))
    assert names(target) == ["b1"]
    assert broker.subscription("c", "sub").selector.text == "color = 'blue'"


# -- attaching -------------------------------------------------------------------------

@pytest.mark.parametrize("address, kwargs", [
    ("queue://new", {}),
    ("topic://new", {}),
    ("topic://t", {"durable_name": "sub", "container_id": "c"}),
    (None, {"dynamic": True}),
])
def test_invalid_selector_refused_before_anything_is_created(address, kwargs):
    """S2.8: an invalid selector raises SelectorError from open_consumer and creates
    no destination, subscription or temporary queue."""
    broker, _ = make_broker()
    with pytest.raises(SelectorError) as caught:
        broker.open_consumer(address, RecordingTarget(), selector="color = ", **kwargs)
    assert caught.value.kind is ErrorKind.INVALID
    assert caught.value.position == 8
    assert (broker.queues(), broker.topics(), broker.subscriptions()) == ([], [], [])


def test_blank_selector_means_none():
    """S2.8: an empty or blank selector is no selector (JMS)."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=10, selector="  ")
    assert consumer.selector is None
    publish(broker, "queue://q", ("b1", BLUE))
    assert names(target) == ["b1"]


def test_precompiled_selector_accepted():
    """S2.8: open_consumer also takes a compiled Selector (a glue may compile it
    first to answer the attach)."""
    broker, _ = make_broker()
    selector = compile_selector("color = 'blue'")
    consumer, target = consume(broker, "queue://q", credit=10, selector=selector)
    assert consumer.selector is selector
    publish(broker, "queue://q", ("r1", RED), ("b1", BLUE))
    assert names(target) == ["b1"]


def test_selector_consumer_arriving_during_plain_dispatch():
    """S2.8: a selector consumer attached and given credit from inside a delivery of
    a running plain dispatch never receives a message its selector refuses."""
    broker, _ = make_broker()
    publish(broker, "queue://q", *[(f"b{i}", BLUE) for i in range(6)])
    late = RecordingTarget()

    def attach_picky(target, delivery):
        if late.consumer is None:
            late.consumer = broker.open_consumer("queue://q", late,
                                                 selector="color = 'red'")
            late.consumer.set_credit(10)
    plain = RecordingTarget(on_deliver=attach_picky)
    plain.consumer = broker.open_consumer("queue://q", plain)
    plain.consumer.set_credit(6)
    publish(broker, "queue://q", ("r1", RED), ("b6", BLUE))
    assert names(late) == ["r1"]
    assert names(plain) == [f"b{i}" for i in range(6)]


def test_selector_consumer_arriving_during_fast_path_delivery():
    """S2.8: a selector consumer attached and given credit from inside a delivery
    made straight from publish receives the next message it accepts, and only that."""
    broker, _ = make_broker()
    late = RecordingTarget()

    def attach_picky(target, delivery):
        if late.consumer is None:
            late.consumer = broker.open_consumer("queue://q", late,
                                                 selector="color = 'red'")
            late.consumer.set_credit(5)
    plain = RecordingTarget(on_deliver=attach_picky)
    plain.consumer = broker.open_consumer("queue://q", plain)
    plain.consumer.set_credit(1)
    publish(broker, "queue://q", ("b0", BLUE), ("r1", RED), ("b1", BLUE))
    assert names(plain) == ["b0"] and names(late) == ["r1"]
    assert broker.queue("q").depth == 1


def test_selector_consumer_and_publish_during_plain_dispatch():
    """S2.8: a selector consumer that arrives inside a plain run, followed there by a
    new message, still only receives what it accepts, once the run is over."""
    broker, _ = make_broker()
    publish(broker, "queue://q", *[(f"b{i}", BLUE) for i in range(4)])
    late = RecordingTarget()
    producer = broker.open_producer("queue://q")

    def attach_picky_and_send(target, delivery):
        if late.consumer is None:
            late.consumer = broker.open_consumer("queue://q", late,
                                                 selector="color = 'red'")
            late.consumer.set_credit(10)
            producer.send(BrokerMessage(Payload("r1", **RED)))
    plain = RecordingTarget(on_deliver=attach_picky_and_send)
    plain.consumer = broker.open_consumer("queue://q", plain)
    plain.consumer.set_credit(4)
    assert names(late) == ["r1"]
    assert names(plain) == ["b0", "b1", "b2", "b3"]
