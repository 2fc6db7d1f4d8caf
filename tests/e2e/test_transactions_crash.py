"""A broker killed with SIGKILL between a transaction's declare and its discharge
(S3.1, S6.3), on the file store and on SQLite: after the restart, a committed
transaction is all there (its messages stored, its acknowledged messages gone) and an
open one left nothing (none of its messages, all of its acknowledged messages back).

The client is Proton's transaction API in a Container on a thread of its own; the kill
comes when the client has seen the broker answer every transfer of the open
transaction (an event, not a delay).
"""

import threading

import pytest
from proton import Message
from proton.handlers import TransactionHandler

from tests.e2e.broker import BrokerProcess
from tests.e2e.proton_client import Scenario, drain, opened, run_container

STORES = {
    "file": {},
    "sqlite": {"mqgate.persist.store": "jdbc", "mqgate.persist.jdbc.dbVendor": "sqlite"},
}
DEADLINE = 20.0
SENT, TAKEN = 5, 3
IN, OUT = "queue://txn-crash-in", "queue://txn-crash-out"


class CommitThenHold(Scenario, TransactionHandler):
    """Transaction 1: send L{SENT} messages to L{OUT}, accept L{TAKEN} from L{IN},
    commit. Transaction 2: the same with other messages, then one more transfer whose
    answer says the broker has read everything before it; then C{held} is set and the
    client waits (for the kill) without discharging."""

    timeout = DEADLINE * 2

    def __init__(self, broker):
        super().__init__(auto_accept=False, prefetch=0)
        self.broker = broker
        self.held = threading.Event()
        self.committed = False
        self.round = 0

    def begin(self, container):
        self.container = container
        self.conn = self.connect_to(container, self.broker, reconnect=False)
        self.sender = container.create_sender(self.conn, OUT)
        self.receiver = container.create_receiver(self.conn, IN)
        self._declare()

    def _declare(self):
        self.round += 1
        self.answered = self.accepted = 0
        self.progress = f"declaring transaction {self.round}"
        self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.progress = f"sending in transaction {self.round}"
        for n in range(SENT):
            self.txn.send(self.sender, Message(body=f"t{self.round}-{n}", durable=True))

    def on_settled(self, event):
        if event.link.name != self.sender.name:
            return
        self.answered += 1
        if self.answered == SENT:
            self.progress = f"receiving in transaction {self.round}"
            self.receiver.flow(TAKEN)
        elif self.answered == SENT + 1:
            self.progress = "holding transaction 2 open"
            self.held.set()

    def on_message(self, event):
        self.txn.accept(event.delivery)
        self.accepted += 1
        if self.accepted < TAKEN:
            return
        if self.round == 1:
            self.txn.commit()
        else:
            # Answered only after the broker read the accepts sent before it.
            self.txn.send(self.sender, Message(body="t2-last", durable=True))

    def on_transaction_committed(self, event):
        self.committed = True
        self._declare()

    def on_transport_error(self, event):
        if self.held.is_set():
            self.finish()   # the kill we waited for
        else:
            super().on_transport_error(event)


def _fill(broker, address, bodies):
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body, durable=True))


def _bodies(broker, address):
    with opened(broker) as conn:
        receiver = conn.create_receiver(address)
        messages = drain(conn, receiver, limit=100)
        for _ in messages:
            receiver.accept()
        return [m.body for m in messages]


@pytest.mark.parametrize("store", sorted(STORES))
def test_sigkill_between_declare_and_discharge(tmp_path, store):
    """After SIGKILL and a restart on the same store: the committed transaction's
    messages are there and what it accepted is gone; the open transaction published
    nothing and what it accepted is back on its queue."""
    started = []

    def start():
        broker = BrokerProcess(tmp_path / "varhome", defines=STORES[store])
        started.append(broker)
        return broker.start(timeout=DEADLINE)

    try:
        broker = start()
        _fill(broker, IN, [f"in-{n}" for n in range(2 * TAKEN)])
        scenario = CommitThenHold(broker)
        client = threading.Thread(target=run_container, args=(scenario,), daemon=True)
        client.start()
        assert scenario.held.wait(DEADLINE), scenario.progress
        assert scenario.committed and scenario.errors == []
        broker.kill()
        client.join(DEADLINE)
        assert not client.is_alive(), "the client did not notice the kill"
        broker = start()
        assert _bodies(broker, OUT) == [f"t1-{n}" for n in range(SENT)]
        assert _bodies(broker, IN) == [f"in-{n}" for n in range(TAKEN, 2 * TAKEN)]
    finally:
        for broker in started:
            broker.kill()
