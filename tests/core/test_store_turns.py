"""
The core hands the store a reactor turn's adds and removals as one call (see
mqgate/core/persistence.py, "Writes of a reactor turn"): with a Clock and a store that
answers when the test says, what is written when, and who hears what.
"""

from twisted.internet import defer
from twisted.internet.task import Clock

from mqgate.core import Broker, BrokerMessage, CoreConfig
from mqgate.core.errors import ErrorKind
from mqgate.core.persistence import Persistence, StorageFailed
from mqgate.store import DuplicateMessage, MemoryStore, StoreClosed, StoreFailed

from tests.core import consume


class _BatchStore:
    """A MemoryStore that records every write_batch call and answers it when told;
    every other call is recorded and goes to the memory store."""

    def __init__(self):
        self.inner = MemoryStore()
        self.inner.recover()
        self.calls = []      # ("batch", ops) or (method name, args), in call order
        self.pending = []    # Deferreds of write_batch calls not answered yet

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def call(*args, **kwargs):
            self.calls.append((name, args))
            return method(*args, **kwargs)
        return call

    def write_batch(self, ops):
        self.calls.append(("batch", list(ops)))
        d = defer.Deferred()
        self.pending.append(d)
        return d

    def answer(self, refused=None):
        """The oldest write is durable (C{refused}: index -> error of those refused)."""
        self.pending.pop(0).callback(refused or {})

    def batches(self):
        return [args for name, args in self.calls if name == "batch"]


def broker_on(store):
    clock = Clock()
    persistence = Persistence(store, encode=lambda m: m.payload,
                              decode=lambda data: BrokerMessage(data), clock=clock)
    return Broker(clock, CoreConfig(), persistence=persistence), clock


def send(producer, payload):
    return producer.send(BrokerMessage(payload, durable=True))


def outcomes(ds):
    box = []
    for d in ds:
        d.addBoth(box.append)
    return box


def _turn_of_two():
    """A consumer on queue q, and a turn that sent two persistent messages to it and
    ended: its write is with the store, not answered yet."""
    store = _BatchStore()
    broker, clock = broker_on(store)
    consumer, target = consume(broker, "queue://q", credit=10)
    producer = broker.open_producer("queue://q")
    answered = outcomes([send(producer, b"a"), send(producer, b"b")])
    clock.advance(0)
    return store, broker, target, answered


def test_a_turns_adds_and_removals_are_one_store_call_at_its_end():
    """Everything a turn stores and removes reaches the store as one write_batch
    call, in call order, once the turn is over (clock.advance(0))."""
    store = _BatchStore()
    broker, clock = broker_on(store)
    consumer, target = consume(broker, "queue://q", credit=10)
    producer = broker.open_producer("queue://q")
    send(producer, b"m1")
    clock.advance(0)
    store.answer()
    [delivery] = target.deliveries
    send(producer, b"m2")
    target.settle_all()
    send(producer, b"m3")
    assert len(store.batches()) == 1     # nothing yet: the turn is not over
    clock.advance(0)
    assert store.batches()[1] == [("queue://q", 2, b"m2"), ("queue://q", 1, None),
                                  ("queue://q", 3, b"m3")]
    clock.advance(0)
    assert len(store.batches()) == 2


def test_answers_and_deliveries_wait_for_the_write():
    """S3.4, S3.6: a turn's producers hear nothing and its messages reach no consumer
    until the store says the write is durable; then all, in order."""
    store, broker, target, answered = _turn_of_two()
    assert answered == [] and target.payloads == []
    store.answer()
    assert answered == [None, None]
    assert target.payloads == [b"a", b"b"]


def test_a_failed_write_fails_every_message_of_its_turn_as_one_add_would():
    """S3.6: when the store refuses a turn's write (a full disk), each of its producers
    is refused with what a single refused add gave: a resource limit exceeded and
    the cause; nothing is delivered."""
    store, broker, target, answered = _turn_of_two()
    full = StoreFailed(OSError(28, "No space left on device"))
    store.answer({0: full, 1: full})
    assert [f.check(StorageFailed) for f in answered] == [StorageFailed] * 2
    for failure in answered:
        assert failure.value.kind is ErrorKind.LIMIT_EXCEEDED
        assert failure.value.description == (
            "the message store cannot write: No space left on device; persistent "
            "messages are refused until it recovers")
    assert target.payloads == [] and broker.queue("q").depth == 0
    assert broker.persistence.failures == {"StoreFailed": 2}


def test_a_refusal_is_its_own_messages_alone():
    """One add refused by the store (a bug: a duplicate id) fails its producer with
    an internal error; the other messages of the turn are stored and delivered."""
    store, broker, target, answered = _turn_of_two()
    store.answer({0: DuplicateMessage("queue://q", 1)})
    assert answered[0].value.kind is ErrorKind.INTERNAL
    assert answered[1] is None and target.payloads == [b"b"]


def test_a_call_the_store_refuses_whole_fails_every_add():
    """A store that errbacks the call itself (closed) refuses every add of it."""
    store = _BatchStore()
    broker, clock = broker_on(store)
    producer = broker.open_producer("queue://q")
    answered = outcomes([send(producer, b"a"), send(producer, b"b")])
    clock.advance(0)
    store.pending.pop(0).errback(StoreClosed("the store is closed"))
    assert [f.check(StorageFailed) for f in answered] == [StorageFailed] * 2


def test_any_other_store_call_writes_the_turn_first():
    """The store sees calls in call order: the turn's adds go before a destination's
    deletion, which would otherwise drop them first and leave them behind."""
    store = _BatchStore()
    broker, clock = broker_on(store)
    broker.create_queue("q")
    send(broker.open_producer("queue://q"), b"a")
    broker.destroy_destination("queue", "q", "gone")
    names = [name for name, _ in store.calls]
    assert names.index("batch") < names.index("remove_destination")
    clock.advance(0)
    assert len(store.batches()) == 1


def test_a_store_without_write_batch_gets_one_call_per_operation():
    """A store that has no write_batch (a test's fake, an older store) is called per
    add and removal, with the same answers."""
    store = MemoryStore()
    store.recover()
    broker, clock = broker_on(store)
    consumer, target = consume(broker, "queue://q", credit=10)
    producer = broker.open_producer("queue://q")
    answered = outcomes([send(producer, b"a")])
    clock.advance(0)
    assert answered == [None] and target.payloads == [b"a"]
    target.settle_all()
    clock.advance(0)
    assert store._ledger.messages == {}


def test_whoever_calls_the_store_directly_comes_after_the_turns_writes():
    """A dead-letter move, a paged body read back or an operator's compaction calls
    the store itself: the turn's pending writes reach the store before that call."""
    store = _BatchStore()
    broker, clock = broker_on(store)
    broker.create_queue("q")
    send(broker.open_producer("queue://q"), b"a")
    assert store.batches() == []
    broker.persistence.store.begin("move-1")
    names = [name for name, _ in store.calls]
    assert names.index("batch") < names.index("begin")
    clock.advance(0)
    assert len(store.batches()) == 1
