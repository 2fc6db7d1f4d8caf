"""Local transactions in the core (S6.3, S3.1; mqgate/core/transactions.py), with a
Clock and the in-memory store."""

import pytest
from twisted.internet import defer

from mqgate.core import BrokerMessage
from mqgate.core.addresses import NotFound
from mqgate.core.transactions import (
    TransactionLimitExceeded, TransactionLimits, TransactionRolledBack, Transactions,
    TransactionTimedOut, UnknownTransaction)
from mqgate.store import StoreFailed

from tests.core import consume
from tests.core.test_persistence import held, restart, stored_broker


def _broker(store=None, **limits):
    broker, store, clock, _ = stored_broker(store, autocreate_queue=True)
    broker.transaction_limits = TransactionLimits(**limits)
    return broker, store, clock


def _persistent(body):
    return BrokerMessage(body, durable=True)


def test_commit_publishes_all_and_stores_them_together():
    """Nothing a transaction publishes is visible before the commit; after it every
    message is delivered and every persistent one is in the store."""
    broker, store, clock = _broker()
    txn = Transactions(broker, clock).declare()
    producer = broker.open_producer("queue://q")
    _, target = consume(broker, "queue://q", credit=10)
    txn.publish(producer, _persistent(b"a"))
    txn.publish(producer, BrokerMessage(b"b"))
    assert target.payloads == [] and held(store, "queue://q") == []
    d = txn.commit()
    assert d.called and d.result is None
    assert target.payloads == [b"a", b"b"]
    assert [data for _, data, _ in held(store, "queue://q")] == [b"a"]


def test_rollback_publishes_nothing_and_stores_nothing():
    """A rolled back transaction's messages are never delivered nor stored."""
    broker, store, clock = _broker()
    txn = Transactions(broker, clock).declare()
    producer = broker.open_producer("queue://q")
    _, target = consume(broker, "queue://q", credit=10)
    txn.publish(producer, _persistent(b"a"))
    txn.rollback()
    assert target.payloads == [] and held(store, "queue://q") == []
    assert broker.queue("q").depth == 0


def test_a_bad_publish_is_refused_when_added_not_at_commit():
    """A message to a destination that may not be made is refused by publish itself,
    and the transaction stays open for the rest."""
    broker, store, clock = _broker()
    broker.config = broker.config.__class__(autocreate_queue=False)
    txn = Transactions(broker, clock).declare()
    relay = broker.open_producer(None)
    with pytest.raises(NotFound):
        txn.publish(relay, BrokerMessage(b"x", to="queue://nowhere"))
    broker.create_queue("q")
    txn.publish(relay, BrokerMessage(b"y", to="queue://q"))
    txn.commit()
    assert broker.queue("q").depth == 1


def test_acknowledgements_apply_at_commit_and_remove_from_the_store_at_once():
    """An acknowledgement in a transaction leaves the delivery in flight until the
    commit, which removes the message from the store in the same store transaction
    as the transaction's publishes."""
    broker, store, clock = _broker()
    broker.open_producer("queue://in").send(_persistent(b"work"))
    consumer, target = consume(broker, "queue://in", credit=1)
    txn = Transactions(broker, clock).declare()
    txn.settle(consumer, target.deliveries[0])
    txn.publish(broker.open_producer("queue://out"), _persistent(b"result"))
    assert consumer.unsettled == 1
    commits = []
    real_commit = store.commit
    store.commit = lambda txn_id: commits.append(txn_id) or real_commit(txn_id)
    txn.commit()
    assert len(commits) == 1
    assert consumer.unsettled == 0
    assert held(store, "queue://in") == []
    assert [data for _, data, _ in held(store, "queue://out")] == [b"result"]
    assert broker.persistence.failures == {}   # the settle did not remove it twice


def test_rollback_gives_deliveries_back_with_their_count_raised():
    """A rolled back acknowledgement puts the message back on its queue, redelivered
    with its delivery count raised."""
    broker, store, clock = _broker()
    producer = broker.open_producer("queue://in")
    producer.send(BrokerMessage(b"one"))
    producer.send(BrokerMessage(b"two"))
    consumer, target = consume(broker, "queue://in", credit=2)
    txn = Transactions(broker, clock).declare()
    txn.settle(consumer, target.deliveries[0])
    txn.settle(consumer, target.deliveries[1])
    txn.rollback()
    consumer.set_credit(2)
    assert target.payloads == [b"one", b"two", b"one", b"two"]
    assert [d.delivery_count for d in target.deliveries[2:]] == [1, 1]


def test_idle_transaction_times_out_and_its_next_use_says_so():
    """An idle transaction is rolled back after the timeout; its next use fails with
    the timeout error naming the setting, and a later lookup says timed out too."""
    broker, store, clock = _broker(timeout=30)
    transactions = Transactions(broker, clock)
    txn = transactions.declare()
    producer = broker.open_producer("queue://q")
    txn.publish(producer, BrokerMessage(b"a"))
    clock.advance(20)
    txn.publish(producer, BrokerMessage(b"b"))   # use pushes the deadline back
    clock.advance(20)
    assert len(transactions) == 1
    clock.advance(11)
    assert len(transactions) == 0
    with pytest.raises(TransactionTimedOut, match="mqgate.transaction.timeout"):
        txn.publish(producer, BrokerMessage(b"c"))
    with pytest.raises(TransactionTimedOut):
        transactions.get(txn.txn_id)
    assert broker.queue("q").depth == 0
    assert clock.getDelayedCalls() == []


def test_limits_on_messages_bytes_and_open_transactions():
    """Past max_messages, max_bytes or max_per_connection the call is refused naming
    the setting; what the transaction holds stays committable."""
    broker, store, clock = _broker(max_messages=2, max_bytes=10, max_per_connection=1)
    transactions = Transactions(broker, clock)
    txn = transactions.declare()
    with pytest.raises(TransactionLimitExceeded, match="max_per_connection"):
        transactions.declare()
    producer = broker.open_producer("queue://q")
    with pytest.raises(TransactionLimitExceeded, match="mqgate.transaction.max_bytes"):
        txn.publish(producer, BrokerMessage(b"x" * 11))
    txn.publish(producer, BrokerMessage(b"1"))
    txn.publish(producer, BrokerMessage(b"2"))
    with pytest.raises(TransactionLimitExceeded, match="mqgate.transaction.max_messages"):
        txn.publish(producer, BrokerMessage(b"3"))
    txn.commit()
    assert broker.queue("q").depth == 2
    transactions.declare()   # the committed one no longer counts


def test_connection_loss_rolls_back_open_transactions():
    """Closing the connection's transactions rolls back each open one."""
    broker, store, clock = _broker()
    transactions = Transactions(broker, clock)
    producer = broker.open_producer("queue://q")
    for _ in range(3):
        transactions.declare().publish(producer, _persistent(b"x"))
    transactions.close()
    assert len(transactions) == 0
    assert broker.queue("q").depth == 0 and held(store, "queue://q") == []
    assert clock.getDelayedCalls() == []


def test_unknown_and_ended_transactions_are_refused():
    """A transaction id never declared, or one already committed, is unknown."""
    broker, store, clock = _broker()
    transactions = Transactions(broker, clock)
    with pytest.raises(UnknownTransaction):
        transactions.get(b"42")
    txn = transactions.declare()
    txn.commit()
    with pytest.raises(UnknownTransaction):
        transactions.get(txn.txn_id)
    failed = txn.commit()
    assert isinstance(failed.result.value, UnknownTransaction)
    failed.addErrback(lambda _: None)


def test_a_store_that_refuses_the_commit_rolls_the_transaction_back():
    """When the store fails the commit, nothing is published, the acknowledged
    delivery goes back to its queue and the commit fails with the rollback error."""
    broker, store, clock = _broker()
    broker.open_producer("queue://in").send(_persistent(b"work"))
    consumer, target = consume(broker, "queue://in", credit=2)
    txn = Transactions(broker, clock).declare()
    txn.settle(consumer, target.deliveries[0])
    txn.publish(broker.open_producer("queue://out"), _persistent(b"result"))
    store.commit = lambda txn_id: defer.fail(StoreFailed(OSError(28, "No space left")))
    d = txn.commit()
    failure = d.result
    d.addErrback(lambda _: None)
    assert isinstance(failure.value, TransactionRolledBack)
    assert broker.queue("out").depth == 0
    assert len(target.deliveries) == 2 and target.deliveries[1].redelivered
    assert store._ledger.txns == {}   # the store transaction was rolled back


def test_a_restart_keeps_a_committed_transaction_and_drops_an_open_one():
    """S3.1: after a restart a committed transaction's messages are back, an open
    one's are not."""
    broker, store, clock = _broker()
    producer = broker.open_producer("queue://q")
    transactions = Transactions(broker, clock)
    committed = transactions.declare()
    committed.publish(producer, _persistent(b"kept"))
    committed.commit()
    transactions.declare().publish(producer, _persistent(b"lost"))
    again, again_store, summary = restart(store)
    assert summary.messages == 1
    assert [data for _, data, _ in held(again_store, "queue://q")] == [b"kept"]
    assert again.queue("q").depth == 1


def test_topic_publish_routes_at_commit_to_its_subscriptions():
    """A transactional message to a topic reaches the subscriptions there at the
    commit."""
    broker, store, clock = _broker()
    broker.create_topic("t")
    producer = broker.open_producer("topic://t")
    txn = Transactions(broker, clock).declare()
    txn.publish(producer, BrokerMessage(b"news"))
    _, target = consume(broker, "topic://t", credit=5)
    txn.commit()
    assert target.payloads == [b"news"]
