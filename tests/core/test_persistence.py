"""The core with a store (S3.1, S3.4, S8.1): what reaches the store and when, with the
in-memory store and a Clock (mqgate/core/persistence.py)."""

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from zope.interface import implementer

from mqgate.core import Broker, BrokerMessage, CoreConfig
from mqgate.core.limits import StoreBacklog
from mqgate.core.persistence import Persistence, StorageFailed, durable_key
from mqgate.store import (
    DuplicateMessage, IMessageStore, MemoryStore, StoreFailed, destination_key)
from mqgate.store import durable_key as store_durable_key
from mqgate.core.errors import ErrorKind

from tests.core import consume


def stored_broker(store=None, **config):
    """A broker on a Clock with a recovered store; returns C{(broker, store, clock)}."""
    store = store or MemoryStore()
    clock = Clock()
    recovered = store.recover()
    persistence = Persistence(store, encode=lambda m: m.payload,
                              decode=lambda data: BrokerMessage(data))
    broker = Broker(clock, CoreConfig(**config), persistence=persistence)
    return broker, store, clock, recovered


def held(store, key):
    """C{[(message_id, data, count)]} stored under C{key}."""
    messages = store._ledger.messages.get(key, {})
    return [(mid, bytes(value[0]), value[1]) for mid, value in messages.items()]


def restart(store):
    """A new broker rebuilt from what C{store} would keep across a restart."""
    again = store.restarted()
    broker, _, clock, recovered = stored_broker(again)
    summary = broker.persistence.restore(broker, recovered.result)
    return broker, again, summary


def test_store_keys_are_the_stores_own():
    """The core spells keys as mqgate.store.interfaces does (it may not import it)."""
    assert durable_key("client-1", "sub") == store_durable_key("client-1", "sub")
    assert durable_key("a:b/c", "d/e") == store_durable_key("a:b/c", "d/e")
    broker, _, _, _ = stored_broker()
    assert broker.create_queue("q").store.key == destination_key("queue", "q")


def test_persistent_message_is_stored_and_send_returns_its_deferred():
    """S3.4: a persistent message on a queue is stored under the queue's key with its
    seq as id; send returns a Deferred that has fired once the store has it."""
    broker, store, _, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    message = BrokerMessage(b"keep", durable=True)
    d = producer.send(message)
    assert isinstance(d, defer.Deferred) and d.called
    assert held(store, "queue://q") == [(message.seq, b"keep", 0)]


def test_non_persistent_message_never_touches_the_store():
    """S8.4: send returns None for a non-persistent message and stores nothing."""
    broker, store, _, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    assert producer.send(BrokerMessage(b"fleeting")) is None
    assert held(store, "queue://q") == []


def test_a_broker_without_a_store_returns_none_for_persistent_messages():
    """Without persistence the durable flag changes nothing (and costs nothing)."""
    broker = Broker(Clock())
    assert broker.open_producer("queue://q").send(BrokerMessage(b"x", durable=True)) is None


class _SlowStore:
    """A MemoryStore whose adds fire only when told (a disk taking its time)."""

    def __init__(self):
        self.inner = MemoryStore()
        self.pending = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def add_message(self, *args, **kwargs):
        d = defer.Deferred()
        self.pending.append((self.inner.add_message(*args, **kwargs), d))
        return d

    def release(self):
        for done, d in self.pending:
            done.chainDeferred(d)
        self.pending = []


class _RefusingStore(_SlowStore):
    """A slow store whose adds can be refused, as a full disk makes them."""

    def refuse(self):
        for done, d in self.pending:
            d.errback(StoreFailed(OSError(28, "No space left on device")))
        self.pending = []


def test_a_persistent_message_is_delivered_only_once_stored():
    """S3.6: a persistent message reaches no consumer before the store has it; then it
    is delivered, and send's Deferred fires."""
    store = _SlowStore()
    broker, _, _, _ = stored_broker(store)
    consumer, target = consume(broker, "queue://q", credit=5)
    d = broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    assert not d.called and target.payloads == []
    assert broker.queue("q").depth == 0
    store.release()
    assert d.called and d.result is None
    assert target.payloads == [b"m"]
    target.settle_all()
    assert held(store.inner, "queue://q") == []


def test_a_message_the_store_refused_is_never_delivered():
    """S3.6: when the store cannot write, the message is enqueued nowhere and the
    producer is told why (a full disk: amqp:resource-limit-exceeded)."""
    store = _RefusingStore()
    broker, _, _, _ = stored_broker(store)
    consumer, target = consume(broker, "queue://q", credit=5)
    d = broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    failures = []
    d.addErrback(failures.append)
    store.refuse()
    [failure] = failures
    assert failure.check(StorageFailed)
    assert failure.value.kind is ErrorKind.LIMIT_EXCEEDED
    assert failure.value.description == (
        "the message store cannot write: No space left on device; persistent "
        "messages are refused until it recovers")
    assert target.payloads == [] and broker.queue("q").depth == 0


def test_a_producers_messages_keep_their_order_while_the_store_works():
    """S3.6: a non-persistent message sent after a persistent one still being stored
    waits for it; a refused one in between is skipped, the order of the rest holds."""
    store = _SlowStore()
    broker, _, _, _ = stored_broker(store)
    consumer, target = consume(broker, "queue://q", credit=10)
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"p1", durable=True))
    assert producer.send(BrokerMessage(b"n2")) is None
    refused = producer.send(BrokerMessage(b"p3", durable=True))
    producer.send(BrokerMessage(b"n4"))
    assert target.payloads == []
    first, second = store.pending
    store.pending = [first]
    store.release()
    assert target.payloads == [b"p1", b"n2"]
    refused.addErrback(lambda _: None)
    second[1].errback(StoreFailed(OSError(5, "Input/output error")))
    assert target.payloads == [b"p1", b"n2", b"n4"]
    producer.send(BrokerMessage(b"n5"))
    assert target.payloads[-1] == b"n5"


def test_a_topic_delivers_a_persistent_message_to_no_subscriber_unless_stored():
    """S3.6: on a topic with durable and non-durable subscribers, a persistent message
    reaches none of them before it is stored, and none at all when it is refused."""
    store = _RefusingStore()
    broker, _, _, _ = stored_broker(store)
    _, durable = consume(broker, "topic://t", durable_name="d", container_id="c",
                         credit=5)
    _, plain = consume(broker, "topic://t", credit=5)
    producer = broker.open_producer("topic://t")
    kept = producer.send(BrokerMessage(b"kept", durable=True))
    assert durable.payloads == plain.payloads == []
    store.release()
    assert kept.called and durable.payloads == plain.payloads == [b"kept"]
    lost = producer.send(BrokerMessage(b"lost", durable=True))
    lost.addErrback(lambda _: None)
    store.refuse()
    assert durable.payloads == plain.payloads == [b"kept"]


def test_a_topic_counts_a_persistent_message_only_once_stored():
    """S3.6: a persistent message the store refused is not counted as published on its
    topic, nor as copies sent to its subscriptions; one it took is, once it has it."""
    store = _RefusingStore()
    broker, _, _, _ = stored_broker(store)
    consume(broker, "topic://t", durable_name="d", container_id="c", credit=5)
    consume(broker, "topic://t", credit=5)
    producer = broker.open_producer("topic://t")
    producer.send(BrokerMessage(b"lost", durable=True)).addErrback(lambda _: None)
    store.refuse()
    topic = broker.topic("t")
    assert (topic.messages_in, topic.messages_out, topic.dropped) == (0, 0, 0)
    assert broker.stats["published"] == 0
    kept = producer.send(BrokerMessage(b"kept", durable=True))
    assert topic.messages_in == 0          # not yet: the store has not answered
    store.release()
    assert kept.called
    assert (topic.messages_in, topic.messages_out) == (1, 2)
    assert broker.stats["published"] == 1


def test_a_connections_store_backlog_counts_what_waits_for_the_store():
    """S2.7: what a connection's producers have waiting for the store (persistent
    messages, and the others held behind them) counts in its backlog, by number and
    bytes, until the store answers (stored or refused); the backlog is over its bound
    meanwhile and calls back once it is down to three quarters."""
    store = _RefusingStore()
    broker, _, _, _ = stored_broker(store)
    backlog = StoreBacklog(max_count=4, max_bytes=1000)
    first = broker.open_producer("queue://a", backlog=backlog)
    second = broker.open_producer(None, backlog=backlog)
    first.send(BrokerMessage(b"p" * 10, durable=True))
    first.send(BrokerMessage(b"n" * 10))               # held behind the first
    assert (backlog.count, backlog.bytes, backlog.over) == (2, 20, False)
    second.send(BrokerMessage(b"q" * 10, durable=True, to="queue://b"))
    second.send(BrokerMessage(b"r" * 10, durable=True, to="queue://b")).addErrback(
        lambda _: None)
    assert backlog.over
    eased = []
    backlog.when_eased(lambda: eased.append(backlog.count))
    store.refuse()                                     # every pending add refused
    assert eased == [3] and (backlog.count, backlog.bytes) == (0, 0)
    assert broker.queue("a").depth == 1                # the non-persistent one went on
    big = StoreBacklog(max_count=100, max_bytes=1000)
    broker.open_producer("queue://a", backlog=big).send(
        BrokerMessage(b"x" * 1000, durable=True))
    assert big.over                                    # by bytes
    store.release()
    assert (big.count, big.bytes, big.over) == (0, 0, False)


@pytest.mark.parametrize("outcome, kept", [
    ("accepted", False), ("rejected", False), ("released", True)])
def test_settlement_removes_what_leaves_for_good(outcome, kept):
    """S3.1: ACCEPTED and REJECTED remove the stored message; RELEASED keeps it."""
    broker, store, _, _ = stored_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    consumer.settle(target.deliveries[0], outcome)
    assert bool(held(store, "queue://q")) is kept


def test_failed_deliveries_store_the_delivery_count():
    """S2.9: MODIFIED(delivery-failed) and a consumer leaving with the message unsettled
    both raise its delivery count, and the store keeps it."""
    broker, store, _, _ = stored_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    consumer.settle(target.deliveries[0], "modified", delivery_failed=True)
    assert held(store, "queue://q")[0][2] == 1
    consumer.set_credit(1)
    consumer.close()
    assert held(store, "queue://q")[0][2] == 2


def test_presettled_consumer_and_expiry_remove_the_stored_message():
    """S8.1: a pre-settled hand-over is final; S2.9: an expired message is gone."""
    broker, store, clock, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"old", durable=True, expiry=5.0))
    producer.send(BrokerMessage(b"new", durable=True))
    clock.advance(10)
    consumer, target = consume(broker, "queue://q", credit=5, presettled=True)
    assert target.payloads == [b"new"]
    assert held(store, "queue://q") == []


def test_topic_stores_only_on_durable_subscriptions():
    """S8.4, S3.1: a persistent message published to a topic is stored once per durable
    subscription (under its key), never for a non-durable one."""
    broker, store, _, _ = stored_broker()
    consume(broker, "topic://t", durable_name="a", container_id="c1")
    consume(broker, "topic://t", durable_name="b", container_id="c1")
    consume(broker, "topic://t")
    message = BrokerMessage(b"fan", durable=True)
    d = broker.open_producer("topic://t").send(message)
    assert d.called and d.result is None
    assert held(store, durable_key("c1", "a")) == [(message.seq, b"fan", 0)]
    assert held(store, durable_key("c1", "b")) == [(message.seq, b"fan", 0)]
    assert sorted(store._ledger.messages) == [durable_key("c1", "a"), durable_key("c1", "b")]
    assert broker.open_producer("topic://t").send(BrokerMessage(b"x")) is None


def test_destinations_and_durables_are_stored_and_forgotten():
    """S3.1: destinations (auto-created too) and durable subscriptions are stored when
    made and forgotten, with their messages, when deleted; temporary ones never are."""
    broker, store, _, _ = stored_broker()
    broker.open_producer("queue://auto")
    broker.create_topic("news")
    consumer, _ = consume(broker, "topic://news", durable_name="s", container_id="c")
    temporary, _ = consume(broker, None, dynamic=True)
    ledger = store._ledger
    assert list(ledger.destinations) == [("queue", "auto"), ("topic", "news")]
    assert ledger.durables == {("c", "s"): ("news", None, None)}
    broker.open_producer("topic://news").send(BrokerMessage(b"m", durable=True))
    consumer.close(remove=True)   # AMQP detach closed=true: unsubscribe
    assert ledger.durables == {} and durable_key("c", "s") not in ledger.messages
    broker.open_producer("queue://auto").send(BrokerMessage(b"m", durable=True))
    broker._delete_destination(broker.queue("auto"))
    assert ("queue", "auto") not in ledger.destinations
    assert "queue://auto" not in ledger.messages
    temporary.close()
    assert list(ledger.destinations) == [("topic", "news")]


@implementer(IMessageStore)
class _FailingStore(MemoryStore):
    """Every add fails as a broken disk would make it (fail-stop)."""

    def add_message(self, destination, message_id, data, *, txn=None):
        return defer.fail(StoreFailed(OSError(28, "No space left on device")))


def test_a_refused_add_errbacks_with_a_condition_and_is_left_to_the_store_to_log():
    """S3.6: a message the store refused is never acknowledged: send's Deferred
    errbacks with StorageFailed naming the cause; the core counts the failure but does
    not log it per message (the store logs its state at a bounded pace)."""
    broker, _, _, _ = stored_broker(_FailingStore())
    with capturedLogs() as events:
        d = broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
        failure = []
        d.addErrback(failure.append)
    [failure] = failure
    assert failure.check(StorageFailed)
    assert failure.value.kind is ErrorKind.LIMIT_EXCEEDED
    assert "No space left on device" in failure.value.description
    assert not any("log_failure" in e for e in events)
    assert broker.persistence.failures == {"StoreFailed": 1}


@implementer(IMessageStore)
class _BuggyStore(MemoryStore):
    """Every add fails with an error that is not the store's "cannot write now"."""

    def add_message(self, destination, message_id, data, *, txn=None):
        return defer.fail(DuplicateMessage(destination, message_id))


def test_any_other_failed_add_is_an_internal_error_and_is_logged():
    """A store error that is not a fault of the disk (a bug) is refused as
    amqp:internal-error and logged (the first of its kind)."""
    broker, _, _, _ = stored_broker(_BuggyStore())
    with capturedLogs() as events:
        d = broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
        failure = []
        d.addErrback(failure.append)
    assert failure[0].value.kind is ErrorKind.INTERNAL
    assert any("log_failure" in e for e in events)


def test_recovery_rebuilds_destinations_subscriptions_and_messages_in_order():
    """S3.1: after a restart the queues, topics and durable subscriptions are back with
    their pending persistent messages, in order, delivery counts included; new
    messages are numbered above every stored id."""
    broker, store, _, _ = stored_broker()
    consume(broker, "topic://t", durable_name="sub", container_id="c", selector="n IS NULL")
    queue_producer = broker.open_producer("queue://q")
    topic_producer = broker.open_producer("topic://t")
    for n in range(5):
        queue_producer.send(BrokerMessage(b"q%d" % n, durable=True))
        topic_producer.send(BrokerMessage(b"t%d" % n, durable=True))
    queue_producer.send(BrokerMessage(b"transient"))
    consumer, target = consume(broker, "queue://q", credit=1)
    consumer.settle(target.deliveries[0], "accepted")          # q0 is gone
    consumer.set_credit(1)
    consumer.close()                                           # q1 redelivered once
    again, new_store, summary = restart(store)
    assert (summary.messages, summary.holding) == (9, 2)
    assert (summary.destinations, summary.durables) == (2, 1)
    assert again.queues() == ["q"] and again.topics() == ["t"]
    consumer, target = consume(again, "queue://q", credit=10)
    assert target.payloads == [b"q1", b"q2", b"q3", b"q4"]
    assert target.deliveries[0].delivery_count == 1
    subscriber, got = consume(again, "topic://t", durable_name="sub", container_id="c",
                              selector="n IS NULL", credit=10)
    assert got.payloads == [b"t%d" % n for n in range(5)]
    recovered_max = max(d.message.seq for d in target.deliveries + got.deliveries)
    fresh = BrokerMessage(b"later", durable=True)
    again.open_producer("queue://q").send(fresh)
    assert fresh.seq > recovered_max


def test_recovered_messages_are_removed_when_consumed():
    """A recovered message is stored under the same key and id: accepting it after the
    restart removes it from the store."""
    broker, store, _, _ = stored_broker()
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    again, new_store, _ = restart(store)
    consumer, target = consume(again, "queue://q", credit=1)
    target.settle_all()
    assert held(new_store, "queue://q") == []


def test_recovery_does_not_store_what_it_restores():
    """Rebuilding the broker writes nothing back to the store."""
    broker, store, _, _ = stored_broker()
    consume(broker, "topic://t", durable_name="s", container_id="c")
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    again = store.restarted()
    recovered = again.recover().result
    ops_before = again._ops
    fresh = Broker(Clock(), CoreConfig(), persistence=Persistence(
        again, encode=lambda m: m.payload, decode=lambda data: BrokerMessage(data)))
    fresh.persistence.restore(fresh, recovered)
    assert again._ops == ops_before


def test_orphan_messages_recreate_their_queue_with_a_warning():
    """Messages under a queue key with no stored destination bring the queue back
    (and store it); under an unknown durable key they are dropped, with a warning."""
    store = MemoryStore()
    store.recover()
    store.add_message("queue://lost", 7, b"x")
    store.add_message(durable_key("c", "gone"), 8, b"y")
    again, new_store, summary = restart(store)
    assert again.queues() == ["lost"] and again.queue("lost").depth == 1
    assert len(summary.warnings) == 2
    assert durable_key("c", "gone") not in new_store._ledger.messages
    assert ("queue", "lost") in new_store._ledger.destinations


def test_seq_continues_above_the_stored_ids():
    """Broker.continue_seq: message ids continue above the store's max_message_id."""
    broker, _, _, _ = stored_broker()
    broker.continue_seq(41)
    message = BrokerMessage(b"m")
    broker.open_producer("queue://q").send(message)
    assert message.seq == 42
