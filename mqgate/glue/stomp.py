"""
Between the STOMP engine's events and the broker core (S10.2). The STOMP twin of
L{mqgate.glue.amqp}: one small method per event, dispatched through a table.

What STOMP means in broker terms:

- SUBSCRIBE is a consumer: ``ack:auto`` is at-most-once (the delivery is settled when it
  is handed over), ``client`` and ``client-individual`` are at-least-once; the consumer's
  credit is its flow limit (``prefetch-count`` / ``activemq.prefetchSize``), given back
  as messages are acknowledged;
- ACK settles (``client``: every unacknowledged message of that subscription up to and
  including the one named), NACK gives the message back for redelivery;
- BEGIN/COMMIT/ABORT: sends and acks inside a transaction are held and take effect on
  COMMIT only;
- every frame that asks for a receipt gets one after its effect is done;
- a SEND that leaves its producer blocked by a full destination (S2.3, S2.7) stops the
  reading of this client's socket until every blocked producer of the connection may go
  on: STOMP has no credit, so TCP is the back-pressure. Frames already read after that
  SEND wait too, in order (all but ACK and NACK, which only drain destinations), so a
  burst read at once cannot carry the destination past its limit by more than the SEND
  that filled it.
"""

import collections
import functools
import itertools

from twisted.internet import defer

from mqgate.core.broker import ACCEPTED, MODIFIED, RELEASED
from mqgate.core.selectors import SelectorError
from mqgate.errors import ProtocolError
from mqgate.glue.egress import files_as_routed
from mqgate.glue.session import BrokerSession, is_admin_address
from mqgate.glue.stomp_mapping import REDELIVERED, frame_to_message, message_to_headers
from mqgate.stomp.events import (
    Abort, Ack, Begin, Commit, ConnectRequested, Disconnect, IngressRefused, Nack, Send,
    Subscribe, Unsubscribe,
)

__all__ = ["StompBrokerSession", "StompGlueConfig"]

_session_ids = itertools.count(1)

# Flow limit of a subscription that names none: what ActiveMQ gives STOMP consumers
# (FACTS section 6) and OpenMQ's consumerFlowLimit default (FACTS 1.6).
DEFAULT_PREFETCH = 1000
_DURABLE_HEADERS = ("activemq.subscriptionName", "durable-subscription-name")
_PREFETCH_HEADERS = ("prefetch-count", "activemq.prefetchSize")


class StompGlueConfig:
    """The settings the STOMP glue needs, read once from Settings."""

    __slots__ = ("max_message_size", "service")

    def __init__(self, max_message_size=70 << 20, service="jms"):
        self.max_message_size = max_message_size
        self.service = service


class _Subscription:
    """One SUBSCRIBE: the core consumer, the deliveries not yet acknowledged, and the
    connection's egress key (S9.1)."""

    __slots__ = ("id", "destination", "ack", "prefetch", "consumer", "unacked", "session",
                 "queued", "unbounded")

    def __init__(self, session, sub_id, destination, ack, prefetch):
        self.session = session
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.prefetch = prefetch
        self.consumer = None
        self.unacked = collections.OrderedDict()   # ack id -> core delivery
        self.queued = 0          # deliveries waiting in the egress queues
        self.unbounded = False   # ack:auto on a non-durable topic subscription

    def deliver(self, delivery):
        """The core's target: file the delivery in the egress queues."""
        self.session.egress.file(self, delivery)

    def protocol_credit(self):
        """The flow limit (prefetch) less what waits for an ACK."""
        return self.prefetch - len(self.unacked)

    def write(self, delivery, discarded):
        """Write the MESSAGE frame (the egress serves it now)."""
        session = self.session
        ack_id = session.next_ack_id()
        message = delivery.message
        rendered = message.rendered
        if rendered is None:
            # Once per message, however many subscribers it fans out to.
            rendered = message.rendered = message_to_headers(message.payload)
        headers, body = rendered
        if delivery.delivery_count or discarded:
            headers = list(headers)
            if delivery.delivery_count:
                headers.append(REDELIVERED)
            if discarded:
                headers.append(_DISCARDED)
        if not session.engine.message(self.id, self.destination, ack_id, headers, body,
                                      ack_id=ack_id if self.ack != "auto" else None):
            # The connection no longer takes messages: hand it back untouched.
            if self.ack != "auto":
                self.consumer.settle(delivery, RELEASED)
            return 0
        if self.ack == "auto":
            # Settled on hand-over (at-most-once); keep the flow limit topped up.
            if self.consumer.credit < self.prefetch // 2:
                session.egress.refresh(self)
        else:
            self.unacked[ack_id] = delivery
            session.acks[ack_id] = self
        return delivery.message.size

    def settle(self, ack_id, outcome, cumulative):
        """Settle one delivery, or (C{cumulative}) every one up to it. Returns how many."""
        if cumulative:
            ids = []
            for candidate in self.unacked:
                ids.append(candidate)
                if candidate == ack_id:
                    break
        else:
            ids = [ack_id]
        for one in ids:
            delivery = self.unacked.pop(one)
            self.session.acks.pop(one, None)
            if outcome == MODIFIED:
                self.consumer.settle(delivery, MODIFIED, delivery_failed=True)
            else:
                self.consumer.settle(delivery, outcome)
        # Give back the credit the acknowledged messages held (the flow limit, S6.2).
        self.session.egress.refresh(self)
        return len(ids)


# S9.2: the header flagging the first message after egress discards.
_DISCARDED = ("discard-indication", "true")


class StompBrokerSession(BrokerSession):
    """The broker side of one STOMP connection (collaborators: see L{BrokerSession})."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client_id = None
        self.subscriptions = {}
        self.acks = {}           # ack id -> subscription
        self.transactions = {}   # transaction name -> [(kind, event)]
        self._producers = {}
        self._blocked = set()    # producers waiting for a full destination (S2.7)
        self._held = None        # events read while one was blocked, or None (S2.7)
        self._ack_ids = itertools.count(1)
        self._session_id = f"mqgate-{next(_session_ids)}"

    def next_ack_id(self):
        return f"{self._session_id}-{next(self._ack_ids)}"

    def handle(self, events):
        """Act on a list of engine events, in order."""
        for event in events:
            if self.engine.finished:
                return
            if self._held is not None and self._hold(event):
                continue
            try:
                _DISPATCH[type(event)](self, event)
            except ProtocolError as error:
                self.engine.send_error(_message_of(error), error.description,
                                       receipt_id=getattr(event, "receipt", None))
            except Exception:
                # A bug of ours must not take the broker down or leave the client
                # guessing (S10.4): log it, and say so in an ERROR frame.
                self.log.failure("internal error handling a frame from {peer}",
                                 peer=self.peer)
                self.engine.send_error("internal error",
                                       "the broker failed to process this frame; see its log",
                                       receipt_id=getattr(event, "receipt", None))

    # -- connection ----------------------------------------------------------------------

    def _connect_requested(self, event):
        self.client_id = _header(event.headers, "client-id") or event.login
        self._login(event.login, event.passcode)

    def _authenticated(self, principal):
        if self.engine.finished:
            return
        self.principal = principal
        refused = self.register_client(self.client_id, "stomp", self.config.service)
        if refused is not None:
            self.log.info("refused {peer}: {why}", peer=self.peer, why=refused)
            self.engine.refuse("connection limit reached", refused)
            self.request_flush()
            return
        self.handle(self.engine.accept(self._session_id))
        self.request_flush()

    def _not_authenticated(self, failure):
        self.log.info("STOMP authentication failed from {peer}: {why}", peer=self.peer,
                      why=failure.getErrorMessage())
        if not self.engine.finished:
            self.engine.refuse("authentication failed", failure.getErrorMessage())
            self.request_flush()

    def connection_lost(self):
        """Unacknowledged messages go back to their queues, marked redelivered."""
        self.unregister_client()
        subscriptions, self.subscriptions = self.subscriptions, {}
        for subscription in subscriptions.values():
            self.egress.withdraw(subscription)
            subscription.consumer.close()
        for producer in self._producers.values():
            producer.close()
        self._producers = {}
        self._blocked.clear()
        self._held = None        # never acted on, never receipted
        self.acks = {}

    def disconnect(self, reason):
        """Close the connection with an ERROR saying C{reason} (S9.6)."""
        if not self.engine.finished:
            self.engine.send_error("disconnected", reason)
            self.request_flush()

    def _ingress_refused(self, event):
        self.ingress_refused(event.size, event.limit, event.guaranteed)

    def _receipt(self, event):
        if event.receipt is not None:
            self.engine.receipt(event.receipt)

    # -- sending -------------------------------------------------------------------------

    def _send(self, event):
        if event.transaction is not None:
            self._transaction(event.transaction).append((self._publish, event))
            self._receipt(event)
        else:
            self._receipt_when_stored(event, self._publish(event))

    def _receipt_when_stored(self, event, stored):
        """The RECEIPT of a frame whose persistent messages (C{stored}: a Deferred or
        C{None}) must be stored first (S3.4); an ERROR frame if they could not be."""
        if stored is None:
            self._receipt(event)
            return
        self.when_stored(
            stored, lambda: self._receipt(event),
            lambda _condition, description: self.engine.send_error(
                "message not stored", description, receipt_id=event.receipt))
    def _publish(self, event):
        if len(event.body) > self.config.max_message_size:
            raise _Error("message too large",
                         f"a message of {len(event.body)} bytes exceeds the limit of "
                         f"{self.config.max_message_size} bytes (mqgate.message.max_size)")
        encoded = frame_to_message(event.destination, event.headers, event.body)
        message = self.broker_message(encoded)
        producer = self._producer(event.destination)
        stored = producer.send(message)
        if producer.blocked and producer not in self._blocked:
            if not self._blocked:
                self.pause_reading()
                if self._held is None:
                    self._held = []
            self._blocked.add(producer)
            producer.when_unblocked(functools.partial(self._unblocked, producer))
        return stored

    def _hold(self, event):
        """Keep C{event} for when no producer of this connection is blocked; C{False}
        for the acknowledgements, which go on (they are what drains destinations)."""
        if type(event) in (Ack, Nack):
            return False
        self._held.append(event)
        return True

    def _unblocked(self, producer):
        """A destination drained (called from the core): read again once no producer
        of this connection is blocked, and act on what was held, in the next turn
        (not inside the core call that drained the destination)."""
        if producer not in self._blocked:
            return
        self._blocked.discard(producer)
        if not self._blocked and not self.engine.finished:
            self.resume_reading()
            self.clock.callLater(0, self._release_held)

    def _release_held(self):
        if self._blocked or self._held is None:
            return   # blocked again meanwhile: the next unblocking releases them
        held, self._held = self._held, None
        if held and not self.engine.finished:
            self.handle(held)   # a SEND blocking again holds what follows it again
            self.request_flush()

    def _producer(self, destination):
        producer = self._producers.get(destination)
        if producer is None:
            _refuse_admin_address(destination)
            if len(self._producers) >= 1024:
                # Bounded: a client naming ever new destinations must not grow this.
                evicted = self._producers.pop(next(iter(self._producers)))
                evicted.close()   # drops its callback: account for it here
                self._unblocked(evicted)
            producer = self._producers[destination] = self.broker.open_producer(destination)
        return producer

    # -- subscriptions -------------------------------------------------------------------

    def _subscribe(self, event):
        if event.id in self.subscriptions:
            raise _Error("subscription id in use",
                         f"this connection already has a subscription with id {event.id}")
        prefetch = DEFAULT_PREFETCH
        for name in _PREFETCH_HEADERS:
            value = _header(event.headers, name)
            if value is not None:
                try:
                    prefetch = int(value)
                except ValueError:
                    raise _Error("invalid header", f"{name}:{value} is not a number") \
                        from None
                if prefetch < 1:
                    raise _Error("invalid header", f"{name} must be at least 1")
                break
        durable_name = None
        for name in _DURABLE_HEADERS:
            durable_name = durable_name or _header(event.headers, name)
        _refuse_admin_address(event.destination)
        self.check_flows("egress", len(self.subscriptions))
        subscription = _Subscription(self, event.id, event.destination, event.ack, prefetch)
        try:
            subscription.consumer = self.broker.open_consumer(
                event.destination, subscription, presettled=event.ack == "auto",
                durable_name=durable_name, container_id=self.client_id,
                selector=_header(event.headers, "selector"))
        except SelectorError as error:
            raise _Error("invalid selector", error.description) from None
        if subscription.consumer.queue.pattern is not None:
            try:
                self.check_flows("subscription", sum(
                    1 for held in self.subscriptions.values()
                    if held.consumer.queue.pattern is not None))
            except ProtocolError:
                subscription.consumer.close()   # a durable subscription stays
                raise
        self.subscriptions[event.id] = subscription
        subscription.unbounded = files_as_routed(subscription.consumer)
        self._receipt(event)
        self.egress.refresh(subscription)

    def _unsubscribe(self, event):
        subscription = self.subscriptions.pop(event.id, None)
        if subscription is None:
            raise _Error("no such subscription",
                         f"there is no subscription with id {event.id} to unsubscribe")
        for ack_id in subscription.unacked:
            self.acks.pop(ack_id, None)
        self.egress.withdraw(subscription)
        subscription.consumer.close()
        self._receipt(event)

    def _ack(self, event):
        self._settle(event, ACCEPTED)

    def _nack(self, event):
        self._settle(event, MODIFIED)

    def _settle(self, event, outcome):
        subscription = self.acks.get(event.id)
        if subscription is None:
            raise _Error("unknown message",
                         f"no unacknowledged message with id {event.id} on this connection")
        if event.transaction is not None:
            self._transaction(event.transaction).append(
                (lambda e: self._apply_settle(e, outcome), event))
        else:
            self._apply_settle(event, outcome)
        self._receipt(event)

    def _apply_settle(self, event, outcome):
        subscription = self.acks.get(event.id)
        if subscription is None:
            return  # acknowledged meanwhile (a cumulative ack covered it)
        subscription.settle(event.id, outcome, cumulative=subscription.ack == "client")

    # -- transactions --------------------------------------------------------------------

    def _transaction(self, name):
        try:
            return self.transactions[name]
        except KeyError:
            raise _Error("unknown transaction",
                         f"transaction {name} was not begun on this connection") from None

    def _begin(self, event):
        if event.transaction in self.transactions:
            raise _Error("transaction in use", f"transaction {event.transaction} "
                         "is already open on this connection")
        self.transactions[event.transaction] = []
        self._receipt(event)

    def _commit(self, event):
        work = self._transaction(event.transaction)
        del self.transactions[event.transaction]
        stored = [d for d in (apply(original) for apply, original in work)
                  if d is not None]
        if stored:
            # The receipt waits for every persistent message of the transaction.
            gathered = defer.DeferredList(stored, fireOnOneErrback=True,
                                          consumeErrors=True)
            gathered.addErrback(lambda failure: failure.value.subFailure)
            self._receipt_when_stored(event, gathered)
        else:
            self._receipt(event)

    def _abort(self, event):
        self._transaction(event.transaction)
        del self.transactions[event.transaction]
        self._receipt(event)

    def _disconnect(self, event):
        self.transactions.clear()  # open transactions are rolled back (never committed)
        self._receipt(event)      # with a receipt, the engine finishes once it is sent


class _Error(ProtocolError):
    """A frame the broker cannot act on: an ERROR frame with this message and detail."""

    def __init__(self, message, detail):
        super().__init__(detail, message)


def _message_of(error):
    return error.condition if isinstance(error, _Error) else \
        f"{error.condition}: {error.description}"


def _refuse_admin_address(destination):
    # S11.1: admin requests are AMQP messages on the admin service; over STOMP the
    # reserved address is neither a destination to send to nor to subscribe to.
    if is_admin_address(destination):
        raise _Error("access refused", f"{destination} is reserved for admin requests "
                     "on the admin service (AMQP)")


def _header(headers, name):
    for key, value in headers:
        if key == name:
            return value
    return None


_DISPATCH = {
    ConnectRequested: StompBrokerSession._connect_requested,
    Send: StompBrokerSession._send,
    Subscribe: StompBrokerSession._subscribe,
    Unsubscribe: StompBrokerSession._unsubscribe,
    Ack: StompBrokerSession._ack,
    Nack: StompBrokerSession._nack,
    Begin: StompBrokerSession._begin,
    Commit: StompBrokerSession._commit,
    Abort: StompBrokerSession._abort,
    Disconnect: StompBrokerSession._disconnect,
    IngressRefused: StompBrokerSession._ingress_refused,
}
