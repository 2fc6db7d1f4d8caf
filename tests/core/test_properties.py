"""Property-based tests: whatever consumers do, no message is lost or accepted twice
(S8.1, design rule 3)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from mqgate.core import BrokerMessage

from tests.core import consume, make_broker

CONSUMERS = 3

_operation = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 9)),
    st.tuples(st.just("credit"), st.integers(0, CONSUMERS - 1), st.integers(0, 5)),
    st.tuples(st.just("drain"), st.integers(0, CONSUMERS - 1)),
    st.tuples(st.just("settle"), st.integers(0, CONSUMERS - 1),
              st.sampled_from(["accepted", "released", "modified", "modified-failed",
                               "undeliverable"])),
    st.tuples(st.just("close"), st.integers(0, CONSUMERS - 1)),
)


class _World:
    def __init__(self, presettled):
        self.broker, _ = make_broker()
        self.presettled = presettled
        self.producer = self.broker.open_producer("queue://q")
        self.sent = 0
        self.accepted = []
        self.pairs = [self._open() for _ in range(CONSUMERS)]

    def _open(self):
        consumer, target = consume(self.broker, "queue://q", presettled=self.presettled)
        target.granted = 0
        if self.presettled:
            # At-most-once: handed over means gone.
            target.on_deliver = lambda _, delivery: self.accepted.append(
                delivery.message.payload)
        return consumer, target

    def apply(self, operation):
        kind = operation[0]
        if kind == "send":
            self.producer.send(BrokerMessage(self.sent, priority=operation[1]))
            self.sent += 1
            return
        consumer, target = self.pairs[operation[1]]
        if kind == "credit":
            # Credit is "this many more from now on": count what the consumer may get.
            target.granted += operation[2] - consumer.credit
            consumer.set_credit(operation[2])
        elif kind == "drain":
            target.granted -= consumer.drain()
        elif kind == "settle":
            self._settle_oldest(consumer, target, operation[2])
        else:
            consumer.close()
            self.pairs[operation[1]] = self._open()

    def _settle_oldest(self, consumer, target, outcome):
        open_ones = [d for d in target.deliveries if d in consumer._unsettled]
        if not open_ones:
            return
        delivery = open_ones[0]
        if outcome == "accepted":
            self.accepted.append(delivery.message.payload)
            consumer.settle(delivery)
        elif outcome == "released":
            consumer.settle(delivery, "released")
        else:
            consumer.settle(delivery, "modified",
                            delivery_failed=outcome != "modified",
                            undeliverable_here=outcome == "undeliverable")

    def finish(self):
        for consumer, _ in self.pairs:
            consumer.close()
        last, target = consume(self.broker, "queue://q", settle="accepted")
        last.set_credit(10 ** 6)
        self.accepted.extend(target.payloads)


@settings(max_examples=300, deadline=None)
@given(st.lists(_operation, max_size=60), st.booleans())
def test_every_message_accepted_exactly_once(operations, presettled):
    """S8.1, rule 3: under any interleaving of sends, credit, drains, settlements and
    closes, each message is finally accepted once, and no consumer ever receives more
    than the credit it was given."""
    world = _World(presettled)
    for operation in operations:
        world.apply(operation)
        for consumer, target in world.pairs:
            assert len(target.deliveries) <= target.granted
            assert consumer.credit >= 0
    queue = world.broker.queue("q")
    assert queue.in_flight == sum(c.unsettled for c, _ in world.pairs)
    world.finish()
    assert sorted(world.accepted) == list(range(world.sent))
    assert queue.held == 0
