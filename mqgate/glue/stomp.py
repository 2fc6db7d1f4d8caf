"""
Between the STOMP engine's events and the broker core (S10.2). The STOMP twin of
L{mqgate.glue.amqp}: one small method per event, dispatched through a table.

What STOMP means in broker terms:

- SUBSCRIBE is a consumer: ``ack:auto`` is at-most-once (the delivery is settled when it
  is handed over), ``client`` and ``client-individual`` are at-least-once; the consumer's
  credit is its flow limit (``prefetch-count`` / ``activemq.prefetchSize``) less what
  waits for an ACK or in the egress (L{mqgate.glue.egress.Egress.core_credit}), given
  back as messages are acknowledged;
- ACK settles (``client``: every unacknowledged message of that subscription up to and
  including the one named), NACK gives the message back for redelivery;
- ``browser:true`` on SUBSCRIBE browses a queue (L{mqgate.core.browse}): copies of
  what it holds, nothing taken, then a MESSAGE with ``browser:end`` and no body (as
  ActiveMQ does);
- BEGIN/COMMIT/ABORT: a core transaction (L{mqgate.core.transactions}, the one AMQP
  uses too): a SEND inside one is checked when it arrives (a bad one gets its ERROR
  then, not at COMMIT) and published at COMMIT, ACK and NACK take effect at COMMIT, and
  a COMMIT stores the transaction's persistent messages atomically; ABORT, or the
  connection going, rolls it back (acknowledged messages are redelivered);
- every frame that asks for a receipt gets one after its effect is done;
- a SEND that leaves its producer blocked by a full destination (S2.3, S2.7) stops the
  reading of this client's socket until every blocked producer of the connection may go
  on: STOMP has no credit, so TCP is the back-pressure. Frames already read after that
  SEND wait too, in order (all but ACK and NACK, which only drain destinations), so a
  burst read at once cannot carry the destination past its limit by more than the SEND
  that filled it. Persistent SENDs waiting for the store hold the socket back the same
  way once the connection has as many waiting as its L{StoreBacklog} allows: without
  receipts nothing else would bound them.
- memory states (S2.6, L{mqgate.core.memory}): at RED a SEND is not acted on, and the
  socket is not read, until the state falls (its receipt comes then: nothing is lost,
  nothing refused); below RED, every batch of the state's count of SENDs (5000, 500,
  50) pauses the reading for one reactor turn, so that consumers are served in between.
"""

import collections
import functools
import itertools

from zope.interface import implementer

from mqgate.core.broker import (
    ACCEPTED, MODIFIED, REJECTED, RELEASED, Requester, StoreBacklog)
from mqgate.core.browse import Browser, open_browser
from mqgate.core.dead import UNRENDERABLE
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.core.memory import RED_LEVEL
from mqgate.core.selectors import SelectorError
from mqgate.core.transactions import Transactions
from mqgate.errors import ProtocolError
from mqgate.glue.egress import IEgressTarget, files_as_routed
from mqgate.glue.session import BrokerSession, broker_message, is_admin_address
from mqgate.glue.stomp_mapping import (
    REDELIVERED, UNMAPPED_HEADER, RenderLimits, SectionCache, message_to_headers, send_to_message,
)
from mqgate.security.access import BROWSE, CONSUME
from mqgate.stomp.events import (
    Abort, Ack, Begin, Commit, ConnectRequested, Disconnect, IngressRefused, Nack, Send,
    Subscribe, Unsubscribe,
)
from mqgate.stomp.frames import HeaderBlock

__all__ = ["StompBrokerSession", "StompGlueConfig"]

_session_ids = itertools.count(1)

# Flow limit of a subscription that names none: what ActiveMQ gives STOMP consumers
# (FACTS section 6) and OpenMQ's consumerFlowLimit default (FACTS 1.6).
DEFAULT_PREFETCH = 1000
_DURABLE_HEADERS = ("activemq.subscriptionName", "durable-subscription-name")
_PREFETCH_HEADERS = ("prefetch-count", "activemq.prefetchSize")


class StompGlueConfig:
    """The settings the STOMP glue needs, read once from Settings.

    @ivar render_limits: the L{RenderLimits} of MESSAGE headers mapped from AMQP.
    @ivar tx_limits: the L{TransactionLimits} of one connection.
    @ivar store_backlog: C{(messages, bytes)} a connection may have waiting for the
        store before its socket is no longer read (L{StoreBacklog}).
    """

    __slots__ = ("max_message_size", "service", "render_limits", "tx_limits",
                 "store_backlog", "access")

    def __init__(self, max_message_size=70 << 20, service="jms", render_limits=None,
                 tx_limits=None, store_backlog=(1000, 16 << 20), access=None):
        self.access = access   # the service's ServiceAccess, or None (S4.5)
        self.max_message_size = max_message_size
        self.service = service
        self.render_limits = render_limits or RenderLimits()
        self.tx_limits = tx_limits or TransactionLimits()
        self.store_backlog = store_backlog


class TransactionLimits:
    """What one connection's open transactions may hold (S10.2, design rule 4).

    A transaction holds its SENDs (and ACKs) until COMMIT: without a bound, one client
    could make the broker keep any amount of message data that no queue limit sees.

    @ivar max_open: transactions open at once on a connection.
    @ivar max_frames: SEND, ACK and NACK frames held by one transaction.
    @ivar max_bytes: message bytes (bodies and headers) held by one transaction.
    @ivar max_connection_bytes: message bytes held by all of a connection's open
        transactions together.
    """

    __slots__ = ("max_open", "max_frames", "max_bytes", "max_connection_bytes")

    def __init__(self, max_open=16, max_frames=10000, max_bytes=64 << 20,
                 max_connection_bytes=64 << 20):
        self.max_open = max_open
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.max_connection_bytes = max_connection_bytes


class _Transaction:
    """An open transaction: the core's, and the frames and bytes it holds (counted
    against this connection's and the broker's limits until COMMIT or ABORT)."""

    __slots__ = ("core", "frames", "size")

    def __init__(self, core):
        self.core = core
        self.frames = 0
        self.size = 0


@implementer(IEgressTarget)
class _Subscription:
    """One SUBSCRIBE: the core consumer, the deliveries not yet acknowledged, and the
    connection's egress key (S9.1). Its protocol credit is its own: the prefetch less
    the deliveries not yet acknowledged."""

    __slots__ = ("id", "destination", "ack", "prefetch", "consumer", "unacked", "session",
                 "unbounded", "template", "browse_ended")

    def __init__(self, session, sub_id, destination, ack, prefetch):
        self.session = session
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.prefetch = prefetch
        self.consumer = None
        self.unacked = collections.OrderedDict()   # ack id -> core delivery
        self.unbounded = False   # ack:auto on a non-durable topic subscription
        # The fixed part of every MESSAGE frame of this subscription, encoded once.
        self.template = session.engine.message_template(sub_id, destination)
        self.browse_ended = False   # a browser's browser:end MESSAGE was written

    def deliver(self, delivery):
        """The core's target: file the delivery in the egress queues."""
        self.session.egress.file(self, delivery)

    def revoked(self, kind, description):
        """The core let go of this subscription (an operator destroyed its
        destination, S11.1): an ERROR frame saying so, which ends the connection."""
        self.session.subscription_revoked(self, kind, description)

    def protocol_credit(self):
        """The flow limit (prefetch) less what waits for an ACK."""
        return self.prefetch - len(self.unacked)

    def write(self, delivery, discarded):
        """Write the MESSAGE frame (the egress serves it now); return the bytes."""
        session = self.session
        ack_id = session.next_ack_id()
        written = self._frame(delivery, discarded, ack_id)
        if written is None:
            # Not even an empty frame could be written: STOMP cannot carry it, so it is
            # dead (S2.4), to mq.sys.dmq where an AMQP consumer can read it.
            if self.ack != "auto":
                self.consumer.settle(delivery, REJECTED, reason=UNRENDERABLE)
            return 0
        if not written:
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
        if type(self.consumer) is Browser:
            self.end_browse()
        return delivery.message.size

    def end_browse(self):
        """A browser (C{browser:true}) that has handed out its last message, all of
        it written: the MESSAGE with C{browser:end} that ActiveMQ sends, once."""
        consumer = self.consumer
        if self.browse_ended or not consumer.finished or self.session.egress.queued(self):
            return
        session = self.session
        if session.subscriptions.get(self.id) is not self:
            return
        self.browse_ended = True
        session.engine.write_message(self.template, "0", [("browser", "end")], b"")
        session.request_flush()

    def _frame(self, delivery, discarded, ack_id):
        """Put the MESSAGE frame into the engine: True if written, False if the
        connection takes no more messages, None if it could not be written at all.

        Nothing raises out of here into the egress or the core (S10.4): rendering never
        fails (L{message_to_headers}); should the frame still not be written (a bug of
        ours), it is written again with every mapped part left out, once logged.
        """
        message = delivery.message
        try:
            rendered = message.rendered
            if rendered is None:
                # Once per message, however many subscribers it fans out to.
                headers, body = message_to_headers(
                    message.payload, limits=self.session.config.render_limits)
                rendered = message.rendered = (HeaderBlock(headers), body)
            return self._put(delivery, discarded, ack_id, *rendered)
        except Exception:
            self._failed(message, "sending it with its headers and body left out")
        try:
            return self._put(delivery, discarded, ack_id, [_UNMAPPED_ALL], b"")
        except Exception:
            self._failed(message, "it goes back to its queue")
            return None

    def _put(self, delivery, discarded, ack_id, headers, body):
        extra = ()
        if delivery.delivery_count or discarded:
            extra = []
            if delivery.delivery_count:
                extra.append(REDELIVERED)
            if discarded:
                extra.append(_DISCARDED)
        return self.session.engine.write_message(
            self.template, ack_id, headers, body,
            ack_id=ack_id if self.ack != "auto" else None, extra=extra)

    def _failed(self, message, outcome):
        session = self.session
        session.log.failure(
            "could not write message {id} to STOMP subscription {sub} of {peer}; {outcome}",
            id=message.message_id, sub=self.id, peer=session.peer, outcome=outcome)

    def settle(self, ack_id, outcome, cumulative, transaction=None):
        """Settle one delivery, or (C{cumulative}) every one up to it, now or (with a
        core C{transaction}) at its commit. Returns how many."""
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
            failed = outcome == MODIFIED
            if transaction is not None:
                transaction.settle(self.consumer, delivery, outcome,
                                   delivery_failed=failed)
            else:
                self.consumer.settle(delivery, outcome, delivery_failed=failed)
        # Give back the credit the acknowledged messages held (the flow limit, S6.2),
        # once the frames of this turn are done: a read of many ACKs then dispatches
        # their worth of messages in one go, not one message per ACK.
        self.session.refresh_later(self)
        return len(ids)


# S9.2: the header flagging the first message after egress discards.
_DISCARDED = ("discard-indication", "true")
# The last resort of _Subscription.write: everything of the message left out.
_UNMAPPED_ALL = (UNMAPPED_HEADER, "message")

#: What blocks a connection whose L{StoreBacklog} is over its bound (S2.7).
_STORE = "the store"
#: What blocks a connection while the memory state is RED, and for one turn after a
#: batch of SENDs below it (S2.6).
_MEMORY = "memory"
_PACE = "memory pace"


class StompBrokerSession(BrokerSession):
    """The broker side of one STOMP connection (collaborators: see L{BrokerSession})."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client_id = None
        self.subscriptions = {}
        self.acks = {}           # ack id -> subscription
        self.transactions = {}   # transaction name -> _Transaction
        self.core_transactions = Transactions(self.broker, self.clock, self.peer)
        # Message bytes all of them hold (read it to count them as ingress data).
        self.held_transaction_bytes = 0
        self._producers = {}
        # Producers waiting for a full destination, and _STORE while the backlog is
        # over its bound (S2.7).
        self._blocked = set()
        self.backlog = StoreBacklog(*self.config.store_backlog)
        self._waiting = None     # events read while one was blocked, or None (S2.7)
        self._ack_ids = itertools.count(1)
        self._session_id = f"mqgate-{next(_session_ids)}"
        self._produce = None   # the SENDs' access decisions (S4.5), once logged in
        self._paced = 0        # SENDs since the reading last paused a turn (S2.6)
        self._refresh = set()  # subscriptions whose credit to give back (refresh_later)
        self._sections = SectionCache()   # what this connection's SENDs share, encoded

    def flows(self):
        """See L{BrokerSession.flows}: one consumer per SUBSCRIBE, a producer per
        destination SENT to."""
        return {"consumers": len(self.subscriptions), "producers": len(self._producers),
                "subscriptions": len(self.subscriptions)}

    def next_ack_id(self):
        return f"{self._session_id}-{next(self._ack_ids)}"

    def refresh_later(self, subscription):
        """Give C{subscription} its credit at the end of the events at hand."""
        self._refresh.add(subscription)

    def handle(self, events):
        """Act on a list of engine events, in order; then give the subscriptions
        acknowledged meanwhile their credit back."""
        try:
            self._handle(events)
        finally:
            while self._refresh:
                subscription = self._refresh.pop()
                if self.subscriptions.get(subscription.id) is subscription:
                    self.egress.refresh(subscription)

    def _handle(self, events):
        for event in events:
            if self.engine.finished:
                return
            if self._waiting is not None and self._keep_waiting(event):
                continue
            try:
                _DISPATCH[type(event)](self, event)
            except _REFUSALS as error:
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
        # Without a login, a verified TLS client certificate names the user (S4.7).
        certified = self.certificate_user() if event.login is None else None
        self.client_id = _header(event.headers, "client-id") or event.login or certified
        policy = self.login_policy
        refusal = policy.refusal(event.login, certified is not None) if policy else None
        if refusal is not None:   # S4.2: a guest, or a password over cleartext
            self.audit_login("failed", event.login and event.login[:64],
                             "none" if event.login is None else "password", why=refusal)
            self.engine.refuse(refusal, refusal)
            self.request_flush()
        elif certified is not None:
            self._login(certified, None, certified=True)
        else:
            self._login(event.login, event.passcode)

    def _authenticated(self, principal):
        if self.engine.finished:
            return
        self.principal = principal
        access = self.config.access
        denied = access.check_connection(principal, self.peer) if access else None
        if denied is not None:
            self.engine.refuse(denied.description, denied.description)
            self.request_flush()
            return
        self._produce = self.produce_decisions()
        refused = self.register_client(self.client_id, "stomp", self.config.service)
        if refused is not None:
            self.log.info("refused {peer}: {why}", peer=self.peer, why=refused)
            self.engine.refuse("connection limit reached", refused)
            self.request_flush()
            return
        self.handle(self.engine.accept(self._session_id))
        self.request_flush()

    def refuse_before_login(self, why):
        self.log.info("refused {peer}: {why}", peer=self.peer, why=why)
        self.engine.refuse("connection limit reached", why)
        self.request_flush()

    def _not_authenticated(self, failure):
        # The login guard logs failed logins within a budget; a flood must not
        # flood the log from here too.
        self.log.debug("STOMP authentication failed from {peer}: {why}", peer=self.peer,
                      why=failure.getErrorMessage())
        if not self.engine.finished:
            self.engine.refuse("authentication failed", failure.getErrorMessage())
            self.request_flush()

    def connection_lost(self):
        """Unacknowledged messages go back to their queues, marked redelivered; open
        transactions are rolled back.

        Each subscription and producer is let go on its own: a failure with one is
        logged and does not leave the others attached (no ghost consumers).
        """
        self.unregister_client()
        if self.broker.memory is not None:
            self.broker.memory.forget(self._memory_fell)
        self._forget_transactions()
        subscriptions, self.subscriptions = self.subscriptions, {}
        for subscription in subscriptions.values():
            self._let_go(subscription, self.egress.withdraw, subscription)
            self._let_go(subscription, subscription.consumer.close)
        producers, self._producers = self._producers, {}
        for producer in producers.values():
            self._let_go(producer, producer.close)
        self._blocked.clear()
        self._waiting = None     # never acted on, never receipted
        self.acks = {}

    def _let_go(self, what, close, *args):
        try:
            close(*args)
        except Exception:
            self.log.failure("letting go of {what} of {peer}", what=what, peer=self.peer)

    def _forget_transactions(self):
        self.transactions.clear()
        self.core_transactions.close()   # rolled back (S6.3)
        self.context.ingress_budget.give(self.held_transaction_bytes)
        self.held_transaction_bytes = 0

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
        if self._produce is not None:
            _check(self._produce.check(event.destination))
        if event.transaction is not None:
            transaction = self._transaction(event.transaction)
            self._check_size(event)
            # Checked and routed now, so that a bad SEND gets its ERROR now (S6.3).
            message = self._message_of(event)
            producer = self._producer(event.destination)
            size = _frame_size(event)
            self._hold(event.transaction, size)
            try:
                transaction.core.publish(producer, message)
            except _REFUSALS:
                self._unhold(transaction, size)
                raise
            self._receipt(event)
        elif not self._memory_holds(event):
            self._receipt_when_stored(event, self._publish(event))

    def _memory_fell(self):
        self._unblocked(_MEMORY)   # S2.6: the memory state fell below RED

    def _memory_holds(self, event):
        """S2.6: at RED, keep C{event} (and what follows it) until the state falls
        (C{True}); every batch of SENDs, let the reactor serve others for a turn."""
        memory = self.broker.memory
        if memory is None:
            return False
        if memory.check() == RED_LEVEL:
            if _MEMORY not in self._blocked:
                self._block(_MEMORY)
                memory.when_accepting(self._memory_fell)
            self._waiting.append(event)
            return True
        self._paced += 1
        if self._paced >= memory.batch:
            self._paced = 0
            if _PACE not in self._blocked:
                self._block(_PACE)
                self.clock.callLater(0, self._unblocked, _PACE)
        return False

    def _receipt_when_stored(self, event, stored):
        """The RECEIPT of a frame whose persistent messages (C{stored}: a Deferred or
        C{None}) must be stored first (S3.4); an ERROR frame if they could not be."""
        if stored is None:
            self._receipt(event)
            return
        self.when_stored(
            stored, lambda: self._receipt(event),
            lambda error: self.engine.send_error(
                "message not stored", error.description, receipt_id=event.receipt))
    def _check_size(self, event):
        if len(event.body) > self.config.max_message_size:
            raise _Error("message too large",
                         f"a message of {len(event.body)} bytes exceeds the limit of "
                         f"{self.config.max_message_size} bytes (mqgate.message.max_size)")

    def _message_of(self, event):
        encoded, (headers, body) = send_to_message(
            event.destination, event.headers, event.body, self.config.render_limits,
            self._sections)
        # Encoded here, by us: no arrival check of its sections needed.
        message = broker_message(encoded, self.clock)
        # Its MESSAGE frames' headers, made in the same pass: a message from STOMP to
        # STOMP is not read back from its AMQP form (design rule 2).
        message.rendered = (HeaderBlock(headers), body)
        return message

    def _publish(self, event):
        self._check_size(event)
        message = self._message_of(event)
        producer = self._producer(event.destination)
        stored = producer.send(message)
        if producer.blocked and producer not in self._blocked:
            self._block(producer)
            producer.when_unblocked(functools.partial(self._unblocked, producer))
        if self.backlog.over and _STORE not in self._blocked:
            self._block(_STORE)
            self.backlog.when_eased(functools.partial(self._unblocked, _STORE))
        return stored

    def _block(self, what):
        """Stop reading until C{what} (a producer, or L{_STORE}) is unblocked; frames
        already read wait (S2.7)."""
        if not self._blocked:
            self.pause_reading()
            if self._waiting is None:
                self._waiting = []
        self._blocked.add(what)

    def _keep_waiting(self, event):
        """Keep C{event} for when no producer of this connection is blocked; C{False}
        for the acknowledgements, which go on (they are what drains destinations)."""
        if type(event) in (Ack, Nack):
            return False
        self._waiting.append(event)
        return True

    def _unblocked(self, producer):
        """A destination drained, or the store caught up (C{producer} is then
        L{_STORE}; called from the core): read again once nothing blocks this
        connection, and act on what was held, in the next turn (not inside the core
        call that drained the destination)."""
        if producer not in self._blocked:
            return
        self._blocked.discard(producer)
        if not self._blocked and not self.engine.finished:
            self.resume_reading()
            self.clock.callLater(0, self._release_waiting)

    def _release_waiting(self):
        if self._blocked or self._waiting is None:
            return   # blocked again meanwhile: the next unblocking releases them
        held, self._waiting = self._waiting, None
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
            producer = self._producers[destination] = self.broker.open_producer(
                destination, backlog=self.backlog)
            producer.on_revoked = functools.partial(self._producer_revoked, destination)
        return producer

    def _producer_revoked(self, destination, _kind, _description):
        # An operator destroyed the destination (S11.1): forget its producer, so that
        # the next SEND there makes it again or, when it may not be made, is refused
        # with an ERROR naming it. Nothing to say before that: STOMP has no link to
        # close, and an ERROR would end the connection.
        producer = self._producers.pop(destination, None)
        if producer is not None:
            producer.close()
            self._unblocked(producer)

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
        browser = _header(event.headers, "browser") == "true"
        _check(self.authorize(event.destination, (), BROWSE if browser else CONSUME))
        self.check_flows("egress", len(self.subscriptions))
        subscription = _Subscription(self, event.id, event.destination, event.ack, prefetch)
        requester = Requester.of(self.principal, self, self.peer, self.config.service)
        try:
            if browser:
                # A queue browser (ActiveMQ's header): copies, then browser:end.
                subscription.consumer = open_browser(
                    self.broker, event.destination, subscription,
                    presettled=event.ack == "auto",
                    selector=_header(event.headers, "selector"), requester=requester)
            if subscription.consumer is None:
                subscription.consumer = self.broker.open_consumer(
                    event.destination, subscription, presettled=event.ack == "auto",
                    durable_name=durable_name, container_id=self.client_id,
                    selector=_header(event.headers, "selector"), requester=requester)
        except SelectorError as error:
            raise _Error("invalid selector", error.description) from None
        if subscription.consumer.queue.pattern is not None:
            try:
                self.check_flows("subscription", sum(
                    1 for held in self.subscriptions.values()
                    if held.consumer.queue.pattern is not None))
            except CoreError:
                subscription.consumer.close()   # a durable subscription stays
                raise
        self.subscriptions[event.id] = subscription
        subscription.unbounded = files_as_routed(subscription.consumer)
        if type(subscription.consumer) is Browser:
            subscription.consumer.on_finished = subscription.end_browse
        self._receipt(event)
        self.egress.refresh(subscription)

    def subscription_revoked(self, subscription, kind, description):
        """Drop C{subscription}, whose destination is gone, and tell the client."""
        if self.subscriptions.get(subscription.id) is not subscription:
            return
        del self.subscriptions[subscription.id]
        for ack_id in subscription.unacked:
            self.acks.pop(ack_id, None)
        self.egress.withdraw(subscription)
        subscription.consumer.close()
        self.engine.send_error(MESSAGES[kind],
                               f"subscription {subscription.id}: {description}")
        self.request_flush()

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
        cumulative = subscription.ack == "client"
        if event.transaction is not None:
            # Applied at COMMIT; the subscription's flow limit is given back now, so
            # that a transaction may take more than the prefetch (S6.3).
            transaction = self._transaction(event.transaction)
            transaction.core.check_open()
            self._hold(event.transaction, _HELD_FRAME_COST)
            subscription.settle(event.id, outcome, cumulative, transaction.core)
        else:
            subscription.settle(event.id, outcome, cumulative)
        self._receipt(event)

    # -- transactions --------------------------------------------------------------------

    def _transaction(self, name):
        try:
            return self.transactions[name]
        except KeyError:
            raise _Error("unknown transaction",
                         f"transaction {name} was not begun on this connection") from None

    def _hold(self, name, size):
        """Count a frame in transaction C{name} until COMMIT, within the limits; past
        one, the transaction is aborted and the client gets an ERROR naming it."""
        transaction = self._transaction(name)
        limits = self.config.tx_limits
        if transaction.frames >= limits.max_frames:
            self._over_limit(name, f"{limits.max_frames} frames "
                             "(mqgate.stomp.transaction.max_frames)")
        if transaction.size + size > limits.max_bytes:
            self._over_limit(name, f"{limits.max_bytes} bytes "
                             "(mqgate.stomp.transaction.max_bytes)")
        if self.held_transaction_bytes + size > limits.max_connection_bytes:
            self._over_limit(name, f"{limits.max_connection_bytes} bytes in all the "
                             "open transactions of a connection "
                             "(mqgate.stomp.transaction.max_connection_bytes)")
        budget = self.context.ingress_budget
        if not budget.take(size):
            self._drop(name).core.rollback()
            raise _Error("transaction limit exceeded",
                         f"transaction {name} was aborted: {budget.refusal(size)}; "
                         "nothing of it was delivered")
        transaction.frames += 1
        transaction.size += size
        self.held_transaction_bytes += size

    def _unhold(self, transaction, size):
        """Give back what L{_hold} counted for a frame the transaction refused."""
        transaction.frames -= 1
        transaction.size -= size
        self.held_transaction_bytes -= size
        self.context.ingress_budget.give(size)

    def _over_limit(self, name, limit):
        self._drop(name).core.rollback()
        self.log.info("STOMP transaction {name} of {peer} aborted: over its limit of "
                      "{limit}", name=name, peer=self.peer, limit=limit)
        raise _Error("transaction limit exceeded",
                     f"transaction {name} was aborted: it would hold more than {limit}; "
                     "nothing of it was delivered")

    def _drop(self, name):
        """Forget transaction C{name} and give back what it held; return it."""
        transaction = self.transactions.pop(name)
        self.held_transaction_bytes -= transaction.size
        self.context.ingress_budget.give(transaction.size)
        return transaction

    def _begin(self, event):
        if event.transaction in self.transactions:
            raise _Error("transaction in use", f"transaction {event.transaction} "
                         "is already open on this connection")
        max_open = self.config.tx_limits.max_open
        if len(self.transactions) >= max_open:
            raise _Error("too many transactions",
                         f"this connection already has {len(self.transactions)} open "
                         f"transactions, the most allowed "
                         f"(mqgate.stomp.transaction.max_open is {max_open})")
        core = self.core_transactions.declare(event.transaction)
        self.transactions[event.transaction] = _Transaction(core)
        self._receipt(event)

    def _commit(self, event):
        transaction = self._transaction(event.transaction)
        self._drop(event.transaction)
        transaction.core.check_open()
        # The receipt waits until the store has committed the transaction's persistent
        # messages; if it could not, nothing of the transaction happened (S6.3).
        self.when_stored(
            transaction.core.commit(), lambda: self._receipt(event),
            lambda error: self.engine.send_error(
                "transaction rolled back", error.description, receipt_id=event.receipt))

    def _abort(self, event):
        transaction = self._transaction(event.transaction)
        self._drop(event.transaction).core.rollback()
        self._receipt(event)

    def _disconnect(self, event):
        self._forget_transactions()  # open ones are rolled back (never committed)
        self._receipt(event)      # with a receipt, the engine finishes once it is sent


class _Error(ProtocolError):
    """A frame the broker cannot act on: an ERROR frame with this message and detail."""

    def __init__(self, message, detail):
        super().__init__(detail, message)


# What holding an ACK or NACK in a transaction costs, counted as bytes.
_HELD_FRAME_COST = 64


def _frame_size(event):
    """The message bytes a SEND holds: its body and headers."""
    return len(event.body) + sum(len(name) + len(value) + 2
                                 for name, value in event.headers)


#: The core's errors in STOMP's words: the ERROR frame's C{message} header for each
#: kind (its body is the error's description). AMQP's table is
#: L{mqgate.glue.amqp_errors.CONDITIONS}.
MESSAGES = {
    ErrorKind.INVALID: "invalid request",
    ErrorKind.LIMIT_EXCEEDED: "resource limit exceeded",
    ErrorKind.NOT_FOUND: "not found",
    ErrorKind.NOT_ALLOWED: "not allowed",
    ErrorKind.UNAUTHORIZED: "access refused",
    ErrorKind.INTERNAL: "internal error",
    ErrorKind.ILLEGAL_STATE: "illegal state",
    ErrorKind.DELETED: "destination destroyed",
    ErrorKind.NOT_IMPLEMENTED: "not implemented",
    ErrorKind.TX_UNKNOWN: "unknown transaction",
    ErrorKind.TX_ROLLBACK: "transaction rolled back",
    ErrorKind.TX_TIMEOUT: "transaction timed out",
    ErrorKind.TX_LIMIT_EXCEEDED: "transaction limit exceeded",
}

# What a frame's handling refuses with: the core's errors and the glue's own.
_REFUSALS = (CoreError, ProtocolError)


def _message_of(error):
    """The ERROR frame's C{message} header for C{error}, one of L{_REFUSALS}."""
    if isinstance(error, CoreError):
        return MESSAGES[error.kind]
    return error.condition if isinstance(error, _Error) else \
        f"{error.condition}: {error.description}"


def _refuse_admin_address(destination):
    # S11.1: admin requests are AMQP messages on the admin service; over STOMP the
    # reserved address is neither a destination to send to nor to subscribe to.
    if is_admin_address(destination):
        raise _Error("access refused", f"{destination} is reserved for admin requests "
                     "on the admin service (AMQP)")


def _check(denied):
    """An ERROR frame for an access control denial (S4.5): its C{message} says who may
    not do what, and which rule says so."""
    if denied is not None:
        raise _Error(denied.description, denied.description)


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
