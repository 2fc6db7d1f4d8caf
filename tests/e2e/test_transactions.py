"""AMQP local transactions end to end (S6.3, S10.1): the real broker driven by
python-qpid-proton's transaction API (Container.declare_transaction and a
TransactionHandler), one broker shared by the module's tests."""

import pytest
from proton import Message
from proton.handlers import TransactionHandler

from tests.e2e.proton_client import Scenario, drain, opened, run_container


@pytest.fixture(scope="module")
def txn_broker(module_broker_factory):
    """One broker (shipped configuration, file store) for the module."""
    return module_broker_factory()


class _Outcome(TransactionHandler):
    """Records how the scenario's transaction ended (C{outcome}) and finishes it."""

    outcome = None

    def _ended(self, outcome):
        self.outcome = outcome
        self.finish()

    def on_transaction_committed(self, event):
        self._ended("committed")

    def on_transaction_aborted(self, event):
        self._ended("aborted")

    def on_transaction_commit_failed(self, event):
        self._ended("commit failed")

    def on_transaction_declare_failed(self, event):
        self._ended("declare failed")


class TransactedSend(Scenario, _Outcome):
    """Declare a transaction, send C{count} messages in it to C{address}, wait until
    the broker has answered each, then commit (C{end="commit"}) or roll back
    (C{"abort"})."""

    def __init__(self, broker, address, count, end):
        super().__init__()
        self.broker, self.address, self.count, self.end = broker, address, count, end
        self.answered = 0
        self.outcome = None
        self.states = set()

    def begin(self, container):
        conn = self.connect_to(container, self.broker)
        self.sender = container.create_sender(conn, self.address)
        self.progress = "declaring"
        container.declare_transaction(conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.progress = "sending"
        for n in range(self.count):
            self.txn.send(self.sender, Message(body=f"txn-{n}"))

    def on_settled(self, event):
        if event.link.name != self.sender.name:
            return
        self.states.add(event.delivery.remote_state)
        self.answered += 1
        if self.answered == self.count:
            self.progress = "discharging"
            self.txn.commit() if self.end == "commit" else self.txn.abort()



class TransactedReceive(Scenario, _Outcome):
    """Declare a transaction, receive C{count} messages from C{address} accepting each
    in it, then commit or roll back."""

    def __init__(self, broker, address, count, end):
        super().__init__(auto_accept=False, prefetch=0)
        self.broker, self.address, self.count, self.end = broker, address, count, end
        self.bodies = []
        self.outcome = None

    def begin(self, container):
        self.conn = self.connect_to(container, self.broker)
        self.container = container
        container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver = self.container.create_receiver(self.conn, self.address)
        self.receiver.flow(self.count)
        self.progress = "receiving"

    def on_message(self, event):
        self.bodies.append(event.message.body)
        self.txn.accept(event.delivery)
        if len(self.bodies) == self.count:
            self.txn.commit() if self.end == "commit" else self.txn.abort()



def _queued(broker, address, expected_most=100):
    """The bodies C{address} holds now (taken and accepted)."""
    with opened(broker) as conn:
        receiver = conn.create_receiver(address)
        messages = drain(conn, receiver, limit=expected_most)
        for _ in messages:
            receiver.accept()
        return [m.body for m in messages]


def _send(broker, address, bodies):
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body, durable=True))


def test_commit_delivers_every_message(txn_broker):
    """Messages sent in a transaction are all on the queue once it commits, and the
    broker answered each transfer with a transactional state."""
    scenario = run_container(TransactedSend(txn_broker, "queue://txn-commit", 5, "commit"))
    assert scenario.errors == [] and scenario.outcome == "committed"
    assert scenario.states == {0x34}   # transactional-state (Part 4 section 4.5.5)
    assert _queued(txn_broker, "queue://txn-commit") == [f"txn-{n}" for n in range(5)]


def test_rollback_delivers_none(txn_broker):
    """Messages sent in a transaction that is rolled back never reach the queue."""
    scenario = run_container(TransactedSend(txn_broker, "queue://txn-abort", 5, "abort"))
    assert scenario.errors == [] and scenario.outcome == "aborted"
    assert _queued(txn_broker, "queue://txn-abort") == []


def test_nothing_is_visible_before_the_commit(txn_broker):
    """While a transaction is open its messages are not on the queue: a consumer
    draining it meanwhile gets nothing."""

    class Peek(TransactedSend):
        def on_settled(self, event):
            if event.link.name == self.sender.name and self.answered == self.count - 1:
                self.seen = _queued(self.broker, self.address)
            super().on_settled(event)

    scenario = run_container(Peek(txn_broker, "queue://txn-peek", 3, "commit"))
    assert scenario.outcome == "committed" and scenario.seen == []
    assert len(_queued(txn_broker, "queue://txn-peek")) == 3


def test_transactional_receive_commit_removes_rollback_redelivers(txn_broker):
    """Messages accepted in a transaction stay on the queue until the commit; a
    rollback gives them back, redelivered; a commit removes them for good."""
    address = "queue://txn-receive"
    _send(txn_broker, address, ["a", "b", "c"])
    aborted = run_container(TransactedReceive(txn_broker, address, 3, "abort"))
    assert aborted.errors == [] and aborted.outcome == "aborted"
    assert aborted.bodies == ["a", "b", "c"]
    committed = run_container(TransactedReceive(txn_broker, address, 3, "commit"))
    assert committed.errors == [] and committed.outcome == "committed"
    assert committed.bodies == ["a", "b", "c"]
    assert _queued(txn_broker, address) == []


def test_discharge_of_an_unknown_transaction_is_rejected(txn_broker):
    """A discharge naming a transaction the broker never declared is rejected with
    amqp:transaction:unknown-id, and the connection goes on."""

    class Unknown(TransactedSend):
        def on_transaction_declared(self, event):
            self.txn = event.transaction
            self.txn.id = b"no-such-transaction"
            self.txn.commit()

    scenario = run_container(Unknown(txn_broker, "queue://txn-unknown", 0, "commit"))
    assert scenario.outcome == "commit failed" and scenario.errors == []
