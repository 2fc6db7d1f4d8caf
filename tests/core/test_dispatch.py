"""The queue's dispatch loop (S2.1, S2.8, S2.9, S8.1, S11.1): it plans, then hands
over, and what a target does from inside its hand-over only adds work for the loop."""

from mqgate.core import BrokerMessage
from mqgate.core.broker import MODIFIED, RELEASED

from tests.core import consume, make_broker, send
from tests.core.test_selector_dispatch import Payload


class NestingWatch:
    """Wraps targets' C{deliver} and records whether a hand-over ever started while
    another was still going on (a second dispatch loop inside the first)."""

    def __init__(self):
        self.depth = 0
        self.nested = False

    def watch(self, target):
        inner = target.deliver

        def deliver(delivery):
            self.nested = self.nested or self.depth > 0
            self.depth += 1
            try:
                inner(delivery)
            finally:
                self.depth -= 1
        target.deliver = deliver


def test_backlog_goes_by_priority_then_round_robin():
    """S2.9, S2.1: waiting messages go highest priority first, FIFO within a
    priority, in turn to the consumers with credit."""
    broker, _ = make_broker()
    for payload, priority in [(b"a", 1), (b"b", 7), (b"c", 1), (b"d", 7)]:
        send(broker, "queue://q", payload, priority=priority)
    (a, ta), (b, tb) = consume(broker, "queue://q"), consume(broker, "queue://q")
    b.set_credit(10)
    a.set_credit(10)
    assert tb.payloads == [b"b", b"d", b"a", b"c"] and ta.payloads == []
    send(broker, "queue://q", b"e", b"f")
    assert tb.payloads[4:] == [b"e"] and ta.payloads == [b"f"]   # in turn


def test_a_message_no_selector_accepts_waits_while_later_ones_pass():
    """S2.8: a message no ready consumer's selector accepts keeps its place; later
    messages pass it; a consumer that accepts it gets it first."""
    broker, _ = make_broker()
    _, red = consume(broker, "queue://q", credit=10, selector="color = 'red'")
    producer = broker.open_producer("queue://q")
    for name, color in [("blue1", "blue"), ("red1", "red"), ("blue2", "blue"),
                        ("red2", "red")]:
        producer.send(BrokerMessage(Payload(name, color=color)))
    assert [d.message.payload.name for d in red.deliveries] == ["red1", "red2"]
    assert broker.queue("q").depth == 2
    _, any_color = consume(broker, "queue://q", credit=10)
    assert [d.message.payload.name for d in any_color.deliveries] == ["blue1", "blue2"]


def test_expired_messages_are_never_handed_and_go_to_the_dmq():
    """S2.9, S2.4: a message that expired while waiting is counted as expired and
    dead-lettered when the loop reaches it, never handed over; a fresh one published
    already expired goes the same way on the fast path."""
    broker, clock = make_broker()
    send(broker, "queue://q", b"old", expiry=5)
    send(broker, "queue://q", b"new", expiry=50)
    clock.advance(10)
    _, target = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"late", expiry=1)
    queue = broker.queue("q")
    assert target.payloads == [b"new"]
    assert (queue.expired, queue.held, broker.dmq.held) == (2, 1, 2)


def test_a_parked_delivery_goes_to_another_consumer_and_waits_for_one():
    """A delivery settled MODIFIED(undeliverable-here) waits for any consumer but the
    one that refused it, while the refusing one goes on with later messages."""
    broker, _ = make_broker()
    a, ta = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"m1")
    a.settle(ta.deliveries[0], MODIFIED, undeliverable_here=True)
    send(broker, "queue://q", b"m2")
    assert ta.payloads == [b"m1", b"m2"] and broker.queue("q").depth == 1
    _, tb = consume(broker, "queue://q", credit=10)
    assert tb.payloads == [b"m1"] and tb.deliveries[0].delivery_count == 1
    assert broker.queue("q").depth == 0


def test_a_target_that_settles_and_publishes_inside_its_hand_over():
    """Re-entrancy: a target that releases a delivery and publishes from inside
    deliver() starts no second loop; the running loop hands on what it added in its
    next round: the released one at the head, after what the round had planned
    already, then what was published, in order."""
    broker, _ = make_broker()
    watch = NestingWatch()
    producer = broker.open_producer("queue://q")
    released = []

    def on_deliver(target, delivery):
        payload = delivery.message.payload
        if payload == b"1" and not released:
            released.append(delivery)
            target.consumer.settle(delivery, RELEASED)
        elif len(payload) == 1:
            producer.send(BrokerMessage(payload + b"'"))
    consumer, target = consume(broker, "queue://q")
    target.on_deliver = on_deliver
    watch.watch(target)
    send(broker, "queue://q", b"0", b"1", b"2")
    consumer.set_credit(20)
    assert not watch.nested
    assert target.payloads == [b"0", b"1", b"2", b"1", b"0'", b"2'", b"1'"]
    assert target.deliveries[3].delivery_count == 0 and broker.queue("q").depth == 0


def test_a_target_that_detaches_inside_its_hand_over():
    """Re-entrancy: a consumer closed from inside its hand-over gets nothing more of
    what was planned for it; that goes to the other consumer, in order, and is not
    counted as a delivery attempt."""
    broker, _ = make_broker()
    send(broker, "queue://q", *[b"%d" % i for i in range(6)])
    a, ta = consume(broker, "queue://q")
    b, tb = consume(broker, "queue://q")
    ta.on_deliver = lambda target, delivery: a.close()
    b.set_credit(1)
    a.set_credit(10)    # the round plans 0 for b, the rest for a
    assert ta.payloads == [b"1"]
    assert tb.payloads == [b"0"]
    b.set_credit(10)
    assert tb.payloads == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert [d.delivery_count for d in tb.deliveries] == [0, 1, 0, 0, 0, 0]


def test_a_target_that_takes_its_credit_back_inside_its_hand_over():
    """Re-entrancy: credit set to zero from inside a hand-over stops the deliveries
    planned for that consumer; they wait, in order, and go when credit comes."""
    broker, _ = make_broker()
    send(broker, "queue://q", *[b"%d" % i for i in range(5)])
    consumer, target = consume(broker, "queue://q")
    target.on_deliver = (lambda t, d: consumer.set_credit(0)
                         if d.message.payload == b"1" else None)
    consumer.set_credit(5)
    assert target.payloads == [b"0", b"1"] and broker.queue("q").depth == 3
    target.on_deliver = None
    consumer.set_credit(5)
    assert target.payloads == [b"0", b"1", b"2", b"3", b"4"]


def test_credit_given_inside_a_hand_over_is_used_by_the_running_loop():
    """Re-entrancy: a target that tops its credit up from inside deliver() (as a glue
    answering a flow) gets the rest of the backlog from the same loop."""
    broker, _ = make_broker()
    send(broker, "queue://q", *[b"%d" % i for i in range(10)])
    consumer, target = consume(broker, "queue://q")
    target.on_deliver = lambda t, d: consumer.set_credit(2) if consumer.credit == 0 else None
    watch = NestingWatch()
    watch.watch(target)
    consumer.set_credit(2)
    assert target.payloads == [b"%d" % i for i in range(10)] and not watch.nested


def test_pause_holds_deliveries_and_resume_hands_them_in_order():
    """S11.1: while an operator pauses the consumers nothing is handed over, the fast
    path included; resuming hands over what waited, in order."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=10)
    queue = broker.queue("q")
    queue.pause_consumers()
    send(broker, "queue://q", b"1", b"2")
    consumer.set_credit(10)
    assert target.payloads == [] and queue.consumers_paused and queue.depth == 2
    queue.resume_consumers()
    send(broker, "queue://q", b"3")
    assert target.payloads == [b"1", b"2", b"3"] and not queue.consumers_paused


def test_pause_from_inside_a_hand_over_stops_the_loop_after_its_round():
    """S11.1: a pause that comes while a loop runs holds back what arrives after."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    queue = broker.queue("q")
    target.on_deliver = lambda t, d: queue.pause_consumers()
    send(broker, "queue://q", b"1", b"2")
    consumer.set_credit(5)
    assert target.payloads == [b"1"] and queue.depth == 1
    queue.resume_consumers()
    assert target.payloads == [b"1", b"2"]


def test_purge_drops_what_waits_and_nothing_in_flight():
    """S11.1: purging drops the waiting messages, parked ones included; deliveries in
    flight stay with their consumer."""
    broker, _ = make_broker()
    a, ta = consume(broker, "queue://q", credit=2)
    send(broker, "queue://q", b"1", b"2", b"3", b"4")
    a.settle(ta.deliveries[0], MODIFIED, undeliverable_here=True)
    queue = broker.queue("q")
    assert (queue.depth, queue.in_flight) == (3, 1)
    assert queue.purge() == 3
    assert (queue.depth, queue.in_flight, queue.dropped) == (0, 1, 3)
    a.set_credit(5)
    send(broker, "queue://q", b"5")
    assert ta.payloads == [b"1", b"2", b"5"]


def test_a_queue_deleted_inside_a_hand_over_drops_what_was_planned():
    """Re-entrancy: a queue deleted by an operator while its loop hands over drops
    what the round had planned but not handed yet; the broker's totals go back to
    what the consumer still holds (S2.2)."""
    broker, _ = make_broker()
    send(broker, "queue://q", b"1", b"2", b"3")
    consumer, target = consume(broker, "queue://q")
    target.on_deliver = lambda t, d: broker.destroy_destination("queue", "q", "gone")
    consumer.set_credit(5)
    assert target.payloads == [b"1"]
    stats = broker.stats
    assert (stats["system_count"], stats["system_bytes"]) == (0, 0)
