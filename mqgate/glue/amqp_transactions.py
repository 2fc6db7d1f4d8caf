"""
AMQP 1.0 local transactions (Part 4) between the AMQP engine and the core's
L{mqgate.core.transactions} (S6.3, S10.1).

The client attaches a sending link whose target is the coordinator
(C{amqp:coordinator:list}); we answer with the capabilities we have
(C{amqp:local-transactions}, and several transactions at once per session). On that
link it sends control messages, each an amqp-value body:

 - C{declare}: a new transaction; the delivery is settled with the C{declared} outcome
   carrying its id (a C{global-id}, asking for a distributed transaction, is rejected:
   only local transactions exist here);
 - C{discharge}: the end of one; C{fail=false} commits, C{fail=true} rolls back. The
   delivery is settled C{accepted} once done, or rejected with the transaction error
   (C{amqp:transaction:unknown-id}, C{...:rollback} when the store refused the commit,
   C{...:timeout} when it was rolled back for being idle).

Work joins a transaction through the C{transactional-state} delivery state: a transfer
carrying it is published at the commit (checked now: a refused one is answered now with
the refusal), a disposition carrying it gives the outcome inside it to deliveries we sent,
at the commit. Transactions belong to the connection; those declared through a
coordinator link are rolled back when that link goes, and every open one when the
connection goes.

No I/O: the AMQP glue calls in with engine events and the engine writes the answers.
"""

from mqgate.amqp import conditions as c
from mqgate.amqp.link import LinkState
from mqgate.amqp.message import AMQP_VALUE, parse_message
from mqgate.amqp.performatives import (
    Accepted, Coordinator, Declare, Declared, Discharge, Error, Modified, Rejected,
    Released, TransactionalState, from_described)
from mqgate.amqp.types import Described, Symbol
from mqgate.core.deliveries import ACCEPTED, MODIFIED, REJECTED, RELEASED
from mqgate.core.transactions import Transactions
from mqgate.errors import ProtocolError
from mqgate.glue.amqp_errors import REFUSALS, condition_of

__all__ = ["AmqpTransactions", "Controller"]

LOCAL_TRANSACTIONS = Symbol("amqp:local-transactions")
MULTI_TXNS_PER_SSN = Symbol("amqp:multi-txns-per-ssn")
_CAPABILITIES = (LOCAL_TRANSACTIONS, MULTI_TXNS_PER_SSN)

# Credit of a coordinator link: control messages are few and answered at once; topped
# up when half is used.
_CONTROL_CREDIT = 100

_OUTCOMES = {Accepted: ACCEPTED, Rejected: REJECTED, Released: RELEASED,
             Modified: MODIFIED}
_ACCEPTED = Accepted()


class Controller:
    """A coordinator link's context (in C{link.context}): the transactions declared
    through it, rolled back when the link goes (L{close})."""

    __slots__ = ("link", "declared")

    def __init__(self, link):
        self.link = link
        self.declared = []

    def close(self):
        declared, self.declared = self.declared, []
        for transaction in declared:
            transaction.rollback()


class AmqpTransactions:
    """The transactions of one AMQP connection.

    @param session: the L{mqgate.glue.amqp.AmqpBrokerSession}.
    @param refused: C{refused(link, error)}: what the session does
        with a pre-settled message it refuses (it cannot be answered).
    """

    def __init__(self, session, refused):
        self._session = session
        self._refused = refused
        self.core = Transactions(session.broker, session.clock, session.peer)

    # -- the coordinator link -----------------------------------------------------------

    def attach(self, link):
        """Answer the attach of a link to the coordinator."""
        link.context = Controller(link)
        link.attach(source=link.remote.source,
                    target=Coordinator(capabilities=_CAPABILITIES),
                    snd_settle_mode=link.remote.snd_settle_mode)
        link.flow(_CONTROL_CREDIT)

    def control(self, link, event):
        """A control message (declare or discharge) arrived on a coordinator link."""
        controller = link.context
        try:
            body = _control_body(event.payload)
            if type(body) is Declare:
                self._declare(controller, event, body)
            else:
                self._discharge(controller, event, body)
        except REFUSALS as error:
            self._answer(link, event, _rejected(error))
        if link.credit <= _CONTROL_CREDIT // 2 and link.state is LinkState.ATTACHED:
            link.flow(_CONTROL_CREDIT)

    def _declare(self, controller, event, declare):
        if declare.global_id is not None:
            raise ProtocolError("this broker coordinates local transactions only "
                                "(amqp:local-transactions); a declare with a global-id "
                                "asks for a distributed one", str(c.NOT_IMPLEMENTED))
        transaction = self.core.declare()
        controller.declared.append(transaction)
        self._answer(controller.link, event, Declared(txn_id=transaction.txn_id))

    def _discharge(self, controller, event, discharge):
        transaction = self.core.get(discharge.txn_id)
        if transaction in controller.declared:
            controller.declared.remove(transaction)
        if discharge.fail:
            transaction.rollback()
            self._answer(controller.link, event, _ACCEPTED)
            return
        link = controller.link
        self._session.when_stored(
            transaction.commit(), lambda: self._answer(link, event, _ACCEPTED),
            lambda error: self._answer(link, event, _rejected(error)))

    def _answer(self, link, event, state):
        if not event.settled and link.state is LinkState.ATTACHED:
            link.settle(event.delivery_id, state)

    # -- work joining a transaction -----------------------------------------------------

    def publish(self, link, producer, event):
        """A transfer carrying C{transactional-state}: add its message to the
        transaction, answering with the transactional outcome, or refuse it now.
        Returns C{False} when the transfer's state is not transactional (the glue
        then sends it as usual)."""
        state = event.state
        if type(state) is not TransactionalState:
            return False
        session = self._session
        try:
            transaction = self.core.get(state.txn_id)
            if not hasattr(producer, "admit"):
                raise ProtocolError("admin requests cannot be part of a transaction",
                                    str(c.NOT_IMPLEMENTED))
            message = session.broker_message(parse_message(event.payload))
            transaction.publish(producer, message)
        except REFUSALS as error:
            if event.settled:
                self._refused(link, error)
            else:
                link.settle(event.delivery_id, _rejected(error))
            return True
        if not event.settled:
            link.settle(event.delivery_id,
                        TransactionalState(txn_id=state.txn_id, outcome=_ACCEPTED))
        return True

    def settle(self, consumer, event):
        """A disposition carrying C{transactional-state} for deliveries we sent: their
        outcome is given at the commit. A transaction that is gone (unknown, or timed
        out) cannot take them: they go back to their queue as failed deliveries."""
        state = event.state
        outcome = _OUTCOMES.get(type(state.outcome))
        try:
            transaction = self.core.get(state.txn_id)
        except REFUSALS as error:
            self._session.log.info(
                "{peer} settled deliveries in a transaction it cannot use: {why}",
                peer=self._session.peer, why=error.description)
            transaction = None
        for delivery in event.deliveries:
            if transaction is None:
                consumer.settle(delivery, MODIFIED, delivery_failed=True)
            elif outcome is MODIFIED:
                transaction.settle(
                    consumer, delivery, MODIFIED,
                    delivery_failed=bool(state.outcome.delivery_failed),
                    undeliverable_here=bool(state.outcome.undeliverable_here))
            elif outcome is not None:
                transaction.settle(consumer, delivery, outcome)
            # No outcome: acquired in the transaction, settled later by the client.

    def close(self):
        """The connection is gone: roll back every open transaction."""
        self.core.close()


def _control_body(payload):
    """The L{Declare} or L{Discharge} a control message carries as its amqp-value."""
    try:
        sections = parse_message(payload).body_sections()
        (code, value), = sections
        if code != AMQP_VALUE or not isinstance(value, Described):
            raise ValueError
        body = from_described(value)
    except Exception:
        raise ProtocolError("a coordinator takes declare and discharge messages (an "
                            "amqp-value body) only", str(c.DECODE_ERROR)) from None
    if type(body) not in (Declare, Discharge):
        raise ProtocolError(f"a coordinator takes declare and discharge messages, not "
                            f"{type(body).__name__}", str(c.DECODE_ERROR))
    if type(body) is Discharge and body.txn_id is None:
        raise ProtocolError("a discharge must name its transaction (txn-id)",
                            str(c.INVALID_FIELD))
    return body


def _rejected(error):
    return Rejected(error=Error(condition_of(error), error.description))
