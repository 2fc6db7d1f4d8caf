"""The transaction coordinator of the AMQP glue (Part 4; S6.3, S10.1): control messages
from a client engine through the real adapter and core on a StringTransport and a Clock
(L{tests.net.test_amqp_adapter.Harness}), and the Part 4 types in the engine."""

import pytest

from mqgate.amqp.events import DeliveriesSettled, MessageReceived
from mqgate.amqp.message import AMQP_VALUE, encode_message
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Accepted, Coordinator, Declare, Declared, Discharge, Rejected, Source,
    TransactionalState, encode_composite, from_described)
from mqgate.amqp.codec import decode
from mqgate.amqp.types import Described, Symbol
from mqgate.core.transactions import TransactionLimits

from tests.net.test_amqp_adapter import Harness, attach

LOCAL = Symbol("amqp:local-transactions")


def _control(body):
    """A control message: C{body} (a Part 4 composite, or anything else) as the
    amqp-value section."""
    if isinstance(body, (Declare, Discharge)):
        body, _ = decode(encode_composite(body), 0)
    return encode_message(body, body_type=AMQP_VALUE)


class Controller:
    """A client's coordinator link: send control messages, read their outcomes."""

    def __init__(self, harness, **limits):
        harness.broker.transaction_limits = TransactionLimits(**limits)
        self.harness = harness
        self.peer = harness.opened()
        self.link = attach(self.peer, SENDER, None, name="txn-ctrl", source=Source(),
                           target=Coordinator(capabilities=(LOCAL,)))

    def send(self, body):
        """Send one control message; return the broker's outcome for it."""
        token = object()
        self.link.send(_control(body), settled=False, context=token)
        self.peer.pump()
        self.harness.clock.advance(0)
        self.peer.pump()
        (answer,) = [e for e in self.peer.events
                     if isinstance(e, DeliveriesSettled) and e.deliveries[0] is token]
        return answer.state

    def declare(self):
        state = self.send(Declare())
        assert isinstance(state, Declared), state
        return state.txn_id


@pytest.fixture
def harness(tmp_path):
    return Harness(tmp_path)


def _condition(state):
    assert isinstance(state, Rejected), state
    return state.error.condition


def test_coordinator_attach_offers_local_transactions(harness):
    """The broker answers a coordinator attach with a coordinator target whose
    capabilities include amqp:local-transactions (no longer amqp:not-implemented)."""
    controller = Controller(harness)
    answer = controller.link.remote.target
    assert isinstance(answer, Coordinator) and LOCAL in answer.capabilities
    assert controller.link.remote.source is not None


def test_declare_and_discharge(harness):
    """A declare is answered with declared and a txn-id; discharging it (commit, then
    a fresh one rolled back) is accepted; discharging it again is unknown-id."""
    controller = Controller(harness)
    first = controller.declare()
    second = controller.declare()
    assert first != second
    assert isinstance(controller.send(Discharge(txn_id=first, fail=False)), Accepted)
    assert isinstance(controller.send(Discharge(txn_id=second, fail=True)), Accepted)
    assert _condition(controller.send(Discharge(txn_id=first, fail=False))) == \
        Symbol("amqp:transaction:unknown-id")


def test_distributed_and_malformed_control_messages_are_rejected(harness):
    """A declare with a global-id (distributed) is rejected not-implemented, a body
    that is no control message decode-error; the link stays usable."""
    controller = Controller(harness)
    assert _condition(controller.send(Declare(global_id=b"xa"))) == \
        Symbol("amqp:not-implemented")
    assert _condition(controller.send("hello")) == Symbol("amqp:decode-error")
    controller.declare()


def test_idle_transaction_times_out(harness):
    """A transaction unused for mqgate.transaction.timeout seconds is rolled back;
    discharging it then is rejected with amqp:transaction:timeout."""
    controller = Controller(harness, timeout=5)
    txn_id = controller.declare()
    harness.clock.advance(6)
    state = controller.send(Discharge(txn_id=txn_id, fail=False))
    assert _condition(state) == Symbol("amqp:transaction:timeout")
    assert "mqgate.transaction.timeout" in state.error.description


def test_open_transactions_per_connection_are_limited(harness):
    """One declare more than mqgate.transaction.max_per_connection is rejected with
    amqp:resource-limit-exceeded naming the setting."""
    controller = Controller(harness, max_per_connection=2)
    controller.declare()
    controller.declare()
    state = controller.send(Declare())
    assert _condition(state) == Symbol("amqp:resource-limit-exceeded")
    assert "mqgate.transaction.max_per_connection" in state.error.description


@pytest.mark.parametrize("value", [
    Declare(), Declare(global_id=b"g"), Discharge(txn_id=b"7", fail=True),
    Declared(txn_id=b"7"), TransactionalState(txn_id=b"7", outcome=Accepted()),
    TransactionalState(txn_id=b"7"),
])
def test_part4_types_round_trip(value):
    """Each Part 4 composite decodes back to an equal value from its encoding."""
    decoded, _ = decode(encode_composite(value), 0)
    assert isinstance(decoded, Described)
    assert from_described(decoded) == value


@pytest.mark.parametrize("fail", [False, True], ids=["commit", "rollback"])
def test_transactional_acceptance_applies_at_discharge(harness, fail):
    """A receiver's unsettled disposition with transactional-state(txn, accepted)
    leaves the message in flight (the broker does not settle it back); a commit then
    removes it from the queue, a rollback redelivers it with its count raised."""
    controller = Controller(harness)
    sender = attach(controller.peer, SENDER, "queue://work", name="snd")
    sender.send(encode_message(b"job"), settled=True)
    controller.peer.pump()
    txn_id = controller.declare()
    receiver = attach(controller.peer, RECEIVER, "queue://work", credit=2, name="rcv")
    (message,) = [e for e in controller.peer.events if isinstance(e, MessageReceived)]
    written = len(controller.peer.written)
    receiver.settle(message.delivery_id,
                    TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=False)
    controller.peer.pump()
    assert len(controller.peer.written) == written   # nothing settled back
    queue = harness.broker.queue("work")
    assert queue.in_flight == 1
    assert isinstance(controller.send(Discharge(txn_id=txn_id, fail=fail)), Accepted)
    controller.peer.pump()
    deliveries = [e for e in controller.peer.events if isinstance(e, MessageReceived)]
    if fail:
        assert len(deliveries) == 2 and queue.in_flight == 1
        assert b"job" in deliveries[1].payload
    else:
        assert len(deliveries) == 1 and queue.in_flight == 0 and queue.depth == 0
