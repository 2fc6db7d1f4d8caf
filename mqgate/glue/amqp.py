"""
Between the AMQP engine's events and the broker core (docs/design.md: "a thin session glue
per protocol"). One L{AmqpBrokerSession} per connection; one small method per event type,
dispatched through a table built at import time (docs/design.md).

What the glue decides:

- who the peer is (SASL through the injected authenticator, S4.2);
- what an attach means: a receiving link of the peer is a consumer on a destination, a
  sending link a producer (S2.1, S2.5); refusals follow Part 2 figure 2.33;
- credit: a producer gets C{producer_credit} and is topped up at half, unless the core
  says it is blocked by a full destination (S2.3, S2.7): then the top-up waits until the
  destination drains (L{mqgate.core.broker.Producer.when_unblocked}). Near a
  FLOW_CONTROL limit a producer's top-ups are only half its share of the room left
  (L{mqgate.core.broker.Producer.room}), so that its credit cannot carry the
  destination past its limit (credit is only ever raised: a peer may have sent all it
  had); a consumer's core credit is its link's credit less what waits for it in the
  egress (L{mqgate.glue.egress.Egress.core_credit});
  A connection's producers together have at most its L{StoreBacklog} waiting for the
  store: past it, their top-ups wait for the store too;
  memory states (S2.6, L{mqgate.core.memory}): a grant is at most the state's batch,
  and at RED a transfer is rejected with C{amqp:resource-limit-exceeded} and top-ups
  wait until the state falls (an ADMIN service's connections are exempt: operators
  must be able to purge);
- settlement: pre-settled consumers are at-most-once, the others at-least-once (S8.1);
  what a peer leaves unsettled when its link or connection goes goes back to the queue
  (design rule 3);
- a pre-settled send that a limit or the store refuses: see L{_PresettledRefusals};
- MQ Light clients (S8.5, docs/mqlight.md): a receiver on C{private:}/C{share:} is an
  MQ Light subscription with the time-to-live of its source; a connection that shows
  itself as the client's publishes bare names to topics and may take over another's
  container-id (L{mqgate.glue.client_ids}).

No I/O here: the adapter feeds events in and writes what the engine has to say.
"""

import functools

from zope.interface import implementer

from mqgate import __version__
from mqgate.amqp import conditions as c
from mqgate.amqp.events import (
    AuthenticationRequested, ConnectionClosed, ConnectionOpened, CreditGranted,
    DeliveriesSettled, IngressRefused, LinkAttached, LinkDetached, MessageReceived,
    SaslCompleted, SessionBegun, SessionEnded, TransferAborted, WindowOpened,
)
from mqgate.amqp.connection import ConnectionState
from mqgate.amqp.link import LinkState
from mqgate.amqp.message import parse_message
from mqgate.amqp.performatives import (
    SND_SETTLED, SND_UNSETTLED, Accepted, Coordinator, Error, Modified,
    Rejected, Released, Source, TransactionalState,
)
from mqgate.amqp.session import SessionState
from mqgate.amqp.types import Described, Symbol
from mqgate.core.broker import (
    ACCEPTED, MODIFIED, REJECTED, RELEASED, Requester, StoreBacklog)
from mqgate.core import mqlight
from mqgate.core.browse import open_browser
from mqgate.core.memory import RED_LEVEL
from mqgate.glue.amqp_errors import CONDITIONS, REFUSALS, condition_of
from mqgate.glue.amqp_transactions import AmqpTransactions, Controller
from mqgate.glue.client_ids import MQLIGHT
from mqgate.glue.egress import PRESETTLED_REFUSED, IEgressTarget, files_as_routed
from mqgate.glue.mqlight_delivery import for_client, is_mqlight_link, pattern_of, service_url
from mqgate.glue.session import ADMIN_ADDRESS, BrokerSession, is_admin_address
from mqgate.errors import ProtocolError
from mqgate.security.access import BROWSE, CONSUME, PRODUCE

__all__ = ["ADMIN_ADDRESS", "AmqpBrokerSession", "GlueConfig"]

ANONYMOUS_RELAY = Symbol("ANONYMOUS-RELAY")
_NEVER = Symbol("never")
_TOPIC = Symbol("topic")

# Outcome classes to the core's outcome names.
_OUTCOMES = {Accepted: ACCEPTED, Rejected: REJECTED, Released: RELEASED, Modified: MODIFIED}




class GlueConfig:
    """The settings the glue needs, read once from Settings.

    @ivar admin_requests: on an ADMIN service, the
        L{mqgate.admin.requests.AdminRequests} that serves producers of
        L{ADMIN_ADDRESS} (S11.1); None elsewhere, where that address is refused.
    @ivar store_backlog: C{(messages, bytes)} a connection may have waiting for the
        store before its producers' credit is withheld (L{StoreBacklog}).
    @ivar max_presettled_refusals: pre-settled messages a producer link may have
        refused in a row before it is detached (0: never detached).
    @ivar access: the service's L{mqgate.security.access_control.ServiceAccess}, or
        None (then C{admin_only} alone keeps non-admins off, S4.5).
    @ivar client_id_takeover: C{mqgate.amqp.client_id_takeover}: when a connection
        takes over the container-id of another (L{mqgate.glue.client_ids}).
    """

    __slots__ = ("producer_credit", "max_message_size", "admin_only", "service",
                 "admin_requests", "store_backlog", "max_presettled_refusals", "access",
                 "client_id_takeover")

    def __init__(self, producer_credit=1000, max_message_size=70 << 20, admin_only=False,
                 service="jms", admin_requests=None, store_backlog=(1000, 16 << 20),
                 max_presettled_refusals=100, access=None, client_id_takeover=MQLIGHT):
        self.access = access
        self.client_id_takeover = client_id_takeover
        self.producer_credit = producer_credit
        self.max_message_size = max_message_size
        self.admin_only = admin_only
        self.service = service
        self.admin_requests = admin_requests
        self.store_backlog = store_backlog
        self.max_presettled_refusals = max_presettled_refusals


@implementer(IEgressTarget)
class _ConsumerTarget:
    """One of our sending links as the core's target and the egress's key (S9.1).

    The core's deliveries are filed in the connection's egress queues; the egress
    writes them to the link as its credit and the transport allow. Its protocol credit
    is the link's, kept by the engine.
    """

    __slots__ = ("link", "consumer", "egress", "unbounded", "revoked", "readdress")

    def __init__(self, link, egress):
        self.link = link
        self.consumer = None
        self.egress = egress
        self.unbounded = False
        self.revoked = None   # the core's call when an operator destroys the queue
        # On an MQ Light subscription: message -> the payload that client can take
        # (mqlight_delivery.for_client); None elsewhere.
        self.readdress = None

    def deliver(self, delivery):
        self.egress.file(self, delivery)

    def protocol_credit(self):
        return self.link.credit

    def write(self, delivery, discarded):
        message = delivery.message
        payload = message.payload if self.readdress is None else self.readdress(message)
        chunks = payload.for_delivery(delivery.delivery_count,
                                      _DISCARDED if discarded else None)
        link = self.link
        link.send(chunks, settled=self.consumer.presettled, context=delivery)
        if not link.writable:
            # Out of credit, or the peer's session window is shut: what comes next
            # waits in the egress queues (bounded), not in the engine (S9.1, S9.2).
            self.egress.block(self, True)
        return message.size


# S9.2: the annotation flagging the first message after egress discards.
_DISCARDED = {Symbol("x-opt-discard-indication"): True}


class AmqpBrokerSession(BrokerSession):
    """The broker side of one AMQP connection (collaborators: see L{BrokerSession})."""

    #: The L{mqgate.core.memory.MemoryStates} this connection's producers are held to
    #: (S2.6), or C{None}.
    memory = None

    def __init__(self, *args, local=None, **kwargs):
        super().__init__(*args, **kwargs)
        # Where the client reached us (host, port, tls), for the address the MQ Light
        # client needs on its deliveries (mqlight_delivery).
        self._service_url = service_url(*(local or ("localhost", 5672)))
        self.container_id = None
        # S8.5: whether the peer showed itself as the MQ Light client (its open frame,
        # an MQ Light subscription or sender): its bare targets are topics, and its
        # container-id is taken over (mqgate.glue.client_ids).
        self.mqlight = False
        self._links = set()   # links with a producer or consumer to clean up
        # How many of _links are consumers ("egress"), producers ("ingress") and topic
        # subscriptions, kept as links come and go: a client profile's limits are then
        # checked in O(1) per attach, not by walking every link (S9.7).
        self._held = {"egress": 0, "ingress": 0, "subscription": 0}
        # Producer links waiting for a full destination or the store (S2.7).
        self._withheld = set()
        self._credit_due = set()   # producer links that received messages (S2.7)
        self.backlog = StoreBacklog(*self.config.store_backlog)
        self._refusals = _PresettledRefusals(self)
        self._unauthorized = None   # why the logged-in user may not use this service
        self._refused_before_login = None   # why it was turned away before its login
        # S2.6: the broker's memory states, which admin connections are not held to,
        # and the producer links waiting for the state to fall below RED.
        self.memory = None if self.config.admin_requests is not None else \
            self.broker.memory
        self._memory_links = set()
        # Local transactions (S6.3).
        self.transactions = AmqpTransactions(self, self._refusals.refused)

    def handle(self, events):
        """Act on a list of engine events, in order."""
        try:
            for event in events:
                _DISPATCH[type(event)](self, event)
            if self._credit_due:
                self._grant_due_credit()
        except Exception:
            # A bug of ours must not take the broker down or leave the peer guessing
            # (S10.4): log it, and close this connection with a condition that says so.
            self.log.failure("internal error handling a frame from {peer}", peer=self.peer)
            if not self.engine.finished:
                self.engine.abort(c.INTERNAL_ERROR,
                                  "the broker failed to process a frame; see its log")

    # -- connection ----------------------------------------------------------------------

    def _authentication_requested(self, event):
        if event.mechanism == "EXTERNAL":   # the certificate's user (S4.7)
            self._login(event.username, None, certified=True)
            return
        anonymous = event.mechanism in ("ANONYMOUS", "NONE")
        self._login(None if anonymous else event.username, event.password)

    def _authenticated(self, principal):
        # S4.5: the login is good, but the user may not be allowed on this service: SASL
        # succeeds, and the open is answered with a close saying so (an authorization
        # error, which clients report as such, not a failed login).
        self._unauthorized = _connection_refusal(self.config, principal, self.peer)
        self.principal = principal
        self._answer_sasl(True)

    def refuse_before_login(self, why):
        # SASL has no capacity outcome: the login goes through unchecked and the
        # connection is closed at its open with amqp:resource-limit-exceeded.
        self._refused_before_login = why
        self._answer_sasl(True)

    def _not_authenticated(self, failure):
        # The login guard logs failed logins within a budget; a flood must not
        # flood the log from here too.
        self.log.debug("authentication failed from {peer}: {why}", peer=self.peer,
                      why=failure.getErrorMessage())
        self._answer_sasl(False, failure.getErrorMessage())

    def _answer_sasl(self, ok, description=None):
        if self.engine.finished:
            return
        self.handle(self.engine.sasl_outcome(ok, description))
        self.request_flush()

    def _connection_opened(self, event):
        if self.engine.state is not ConnectionState.OPEN_RCVD:
            return  # the peer closed in the same read, and the engine already answered
        self.container_id = event.open.container_id
        self.mqlight = mqlight.open_looks_like_mqlight(event.open)
        if self._unauthorized is not None:
            self.engine.open()
            self.engine.abort(c.UNAUTHORIZED_ACCESS, self._unauthorized)
            return
        refused = (self._refused_before_login
                   or self.register_client(self.container_id, "amqp", self.config.service))
        if refused is not None:
            self.log.info("refused {peer}: {why}", peer=self.peer, why=refused)
            self.engine.open()
            self.engine.abort(c.RESOURCE_LIMIT_EXCEEDED, refused)
            return
        self.engine.offered_capabilities = (ANONYMOUS_RELAY,)
        self.engine.properties = {Symbol("product"): "mqgate",
                                  Symbol("version"): __version__}
        self.engine.open()
        self._take_client_id()

    @property
    def user(self):
        """The logged-in user's name (C{None}: anonymous), whose connections alone
        this one may replace."""
        return None if self.principal is None else self.principal.name

    def _take_client_id(self):
        # S8.5: one connection per MQ Light client id; the one it replaces is told
        # why, and lets go of its subscriptions before this one resumes them.
        ids = getattr(self.context, "container_ids", None)
        if ids is None:
            return
        old = ids.claim(self, self.config.client_id_takeover)
        if old is not None:
            self.log.info("{peer} took over client id {id!r} from {old}",
                          peer=self.peer, id=self.container_id, old=old.peer)
            old.replace(f"another connection ({self.peer}) with client id"
                        f" {self.container_id!r} replaced this one")

    def replace(self, why):
        """Close this connection with C{amqp:link:stolen}: another took its client id."""
        self.connection_lost()
        if not self.engine.finished:
            self.engine.abort(c.STOLEN, why)
            self.request_flush()

    def _connection_closed(self, event):
        if event.error is not None:
            self.log.info("{peer} closed its connection: {condition} {description}",
                          peer=self.peer, condition=event.error.condition,
                          description=event.error.description)
        self.connection_lost()

    def connection_lost(self):
        """The connection is gone: give back every unsettled delivery (rule 3)."""
        self.unregister_client()
        ids = getattr(self.context, "container_ids", None)
        if ids is not None:
            ids.release(self)
        links, self._links = self._links, set()
        for link in links:
            self._release(link, remove=False)
        self._held = dict.fromkeys(self._held, 0)
        if self.memory is not None:
            self.memory.forget(self._memory_fell)
        self.transactions.close()

    def disconnect(self, reason):
        """Close the connection with C{reason} (S9.6: a slow subscriber let go)."""
        if not self.engine.finished:
            self.engine.abort(c.RESOURCE_LIMIT_EXCEEDED, reason)
            self.request_flush()

    def _ingress_refused(self, event):
        self.ingress_refused(event.size, event.limit, event.guaranteed)

    def _sasl_completed(self, event):
        pass  # client side only

    def _session_begun(self, event):
        if event.session.state is SessionState.BEGIN_RCVD:
            event.session.begin()

    def _session_ended(self, event):
        for link in event.links:
            if link in self._links:
                self._forget(link)
                self._release(link, remove=False)

    # -- links ---------------------------------------------------------------------------

    def _link_attached(self, event):
        link = event.link
        if link.state is not LinkState.ATTACH_RCVD:
            return
        kind = "egress" if link.is_sender else "ingress"
        try:
            self.check_flows(kind, self._held[kind])
            if link.is_sender:
                self._attach_consumer(link)
            else:
                self._attach_producer(link)
                link.ingress_limits = self.context.ingress_limits   # S9.5
        except REFUSALS as error:
            link.refuse(condition_of(error), error.description)
            return
        self._links.add(link)
        self._held[kind] += 1
        if _is_subscription(link):
            self._held["subscription"] += 1

    def flows(self):
        """See L{BrokerSession.flows}: the links counted as they come and go."""
        held = self._held
        return {"consumers": held["egress"], "producers": held["ingress"],
                "subscriptions": held["subscription"]}

    def _forget(self, link):
        """C{link} no longer counts against the client profile's limits."""
        self._links.discard(link)
        self._held["egress" if link.is_sender else "ingress"] -= 1
        if _is_subscription(link):
            self._held["subscription"] -= 1

    def _attach_consumer(self, link):
        source = link.remote.source
        if source is None:
            raise _refusal(c.INVALID_FIELD, "a receiving link needs a source")
        if is_admin_address(source.address):
            raise _refusal(c.UNAUTHORIZED_ACCESS,
                           f"{source.address} takes admin requests; nothing can be "
                           "received from it (admin replies go to your reply-to)")
        subscription = None if source.dynamic else mqlight.parse(source.address)
        if subscription is not None:
            # Access rules name the topic pattern, not the MQ Light address.
            _check(self.authorize(f"topic://{subscription.pattern}", (), CONSUME))
        elif not source.dynamic:
            for operation in _consume_operations(source):
                _check(self.authorize(source.address, source.capabilities or (),
                                      operation))
        target = _ConsumerTarget(link, self.egress)
        target.revoked = functools.partial(self._revoke, link)
        if is_mqlight_link(link.name):
            target.readdress = functools.partial(
                for_client, service=self._service_url, pattern=pattern_of(link.name))
        durable = bool(source.durable) or source.expiry_policy == _NEVER
        selector, filters = _selector_filter(source.filter)
        requester = Requester.of(self.principal, self, self.peer, self.config.service)
        consumer = None
        if subscription is not None:
            # S8.3, S8.5: an MQ Light subscription, for as long as its source says;
            # the client profile is asked first, so that a refusal makes nothing.
            self.check_flows("subscription", self._held["subscription"])
            self.mqlight = True
            consumer = self.broker.open_mqlight(
                subscription, target, client_id=self.container_id,
                ttl=mqlight.ttl_of_source(source.expiry_policy, source.timeout),
                presettled=link.presettled, requester=requester)
        elif source.distribution_mode == _COPY and not source.dynamic:
            # Browsing a queue (None for a topic, whose subscribers get copies anyway).
            consumer = open_browser(
                self.broker, _address(source.address), target,
                capabilities=source.capabilities or (), presettled=link.presettled,
                selector=selector, requester=requester)
        if consumer is None:
            consumer = self.broker.open_consumer(
                None if source.dynamic else _address(source.address), target,
                capabilities=source.capabilities or (), presettled=link.presettled,
                durable_name=link.name if durable and not source.dynamic else None,
                container_id=self.container_id, dynamic=bool(source.dynamic),
                selector=selector, requester=requester)
        if consumer.queue.pattern is not None and subscription is None:
            try:
                self.check_flows("subscription", self._held["subscription"])
            except REFUSALS:
                consumer.close()   # a durable subscription stays
                raise
        target.consumer = consumer
        # A non-durable topic subscription settled on hand-over files its messages as
        # they are routed, credit or not: the D queues bound them (S9.1, S9.2).
        target.unbounded = files_as_routed(consumer)
        link.context = consumer
        self.egress.block(target, True)   # no credit until the peer's first flow
        mode = SND_SETTLED if link.presettled else SND_UNSETTLED
        # Echo the address as asked (clients such as Proton's BlockingConnection compare
        # it); only a dynamic source learns its broker-made address here.
        address = consumer.address if source.dynamic else source.address
        reply = Source(address=address, durable=source.durable,
                       expiry_policy=source.expiry_policy, timeout=source.timeout,
                       dynamic=source.dynamic, distribution_mode=source.distribution_mode,
                       filter=filters,
                       default_outcome=source.default_outcome, outcomes=source.outcomes,
                       capabilities=source.capabilities)
        link.attach(source=reply, target=link.remote.target, snd_settle_mode=mode)

    def _attach_producer(self, link):
        target = link.remote.target
        if isinstance(target, Coordinator):
            self.transactions.attach(link)   # Part 4: local transactions (S6.3)
            return
        if target is not None and target.dynamic:
            raise _refusal(c.NOT_IMPLEMENTED, "dynamic targets are not supported")
        # No target at all (rhea's open_sender()) or a target without an address: the
        # anonymous relay, routing each message by its `to` (ANONYMOUS-RELAY).
        address = None if target is None else _address(target.address)
        capabilities = () if target is None else (target.capabilities or ())
        admin = self.config.admin_requests
        if is_admin_address(address):
            # S11.1: admin requests go to the admin service's handler, never the core.
            producer = _admin_producer(admin, self.principal, address)
        elif address is None:
            producer = _RelayGuard(self.broker.open_producer(None, backlog=self.backlog),
                                   admin, self.principal, self.produce_decisions())
        else:
            if not capabilities and self._publishes_to_topics(link, address):
                capabilities = (_TOPIC,)
            _check(self.authorize(address, capabilities, PRODUCE))
            producer = self.broker.open_producer(address, capabilities,
                                                 backlog=self.backlog)
            producer.on_revoked = functools.partial(self._revoke, link)
        link.context = producer
        link.attach(source=link.remote.source, target=target,
                    snd_settle_mode=link.remote.snd_settle_mode,
                    max_message_size=self.config.max_message_size)
        credit = self._grant_for(producer)
        if credit:
            link.flow(credit)
        else:
            self._wait_for_memory(link)   # RED (S2.6): credit once it falls

    def _publishes_to_topics(self, link, address):
        # S8.5: the MQ Light client sends to a bare topic name (sports/football). Its
        # sender links are named <topic>_<uuid>, and its open frame is its own: such a
        # link's bare target is a topic whatever mqgate.destination.default_type says.
        # Other clients' bare names keep that setting's meaning.
        if mqlight.is_mqlight_sender(link.name, address):
            self.mqlight = True
        return self.mqlight

    def _link_detached(self, event):
        link = event.link
        if link in self._links:
            self._forget(link)
            self._release(link, remove=event.closed)

    def _revoke(self, link, kind, description):
        """The core let go of the link's consumer or producer (an operator destroyed
        its destination, S11.1): detach the link, closed, saying why (C{kind}, an
        L{mqgate.core.errors.ErrorKind}, in AMQP's words)."""
        if link not in self._links or link.state is not LinkState.ATTACHED:
            return
        self._forget(link)
        self._release(link, remove=False)
        link.detach(closed=True, condition=CONDITIONS[kind], description=description)
        self.request_flush()

    def _release(self, link, remove):
        self._withheld.discard(link)
        self._memory_links.discard(link)
        self._refusals.forget(link)
        context, link.context = link.context, None
        if context is None:
            return
        if link.is_sender:
            self.egress.withdraw(context.target)
            context.close(remove=remove)
        else:
            context.close()

    # -- messages ------------------------------------------------------------------------

    def _credit_granted(self, event):
        link = event.link
        consumer = link.context
        if consumer is None:
            return
        target = consumer.target
        egress = self.egress
        egress.block(target, not link.writable)
        egress.refresh(target)
        if link.drain and link.state is LinkState.ATTACHED:
            # Section 2.6.7: send what is available, then give up the rest of the
            # credit; "available" includes what waits in the egress queues, so the
            # drain completes once they have been served.
            consumer.drain()
            egress.when_served(functools.partial(self._drained, link))

    def _drained(self, link):
        consumer = link.context
        if consumer is None or link.state is not LinkState.ATTACHED:
            return
        link.drained()
        self.egress.block(consumer.target, True)
        self.egress.refresh(consumer.target)

    def _message_received(self, event):
        link = event.link
        producer = link.context
        if producer is None:
            return
        if type(producer) is Controller:
            self.transactions.control(link, event)   # declare or discharge
            return
        if event.state is not None and self.transactions.publish(link, producer, event):
            self._credit_due.add(link)   # a transactional transfer (S6.3)
            return
        try:
            if self.memory is not None and self.memory.check() == RED_LEVEL:
                raise self.memory.refusal()   # S2.6: sent on credit from before RED
            message = self.broker_message(parse_message(event.payload))
            stored = producer.send(message)
        except REFUSALS as error:
            if event.settled:
                self._refusals.refused(link, error)
            else:
                link.settle(event.delivery_id, _rejected(error))
        else:
            if event.settled and self._refusals.runs:
                self._refusals.accepted(link)
            if stored is not None:
                # S3.4, S8.1: a persistent message is acknowledged once stored.
                self._settle_when_stored(link, event.delivery_id, event.settled, stored)
            elif not event.settled:
                link.settle(event.delivery_id, _ACCEPTED)
        self._credit_due.add(link)

    def _grant_due_credit(self):
        # After the whole batch of events: the engine counted every transfer of the
        # batch against the credit already, so granting from the room left is only
        # right once the core has routed them all too (S2.7).
        due, self._credit_due = self._credit_due, set()
        for link in due:
            producer = link.context
            if producer is not None and link.state is LinkState.ATTACHED and \
                    link not in self._withheld:
                self._adjust_credit(link, producer)

    def _adjust_credit(self, link, producer):
        """After a message: withhold or top up the producer's credit (S2.7)."""
        if link.credit > self.config.producer_credit // 2:
            return   # no top-up can be due: the cheap test of every message
        if self._withhold(link, producer):
            return
        grant = self._grant_for(producer)
        if link.credit <= grant // 2:
            link.flow(grant)

    def _withhold(self, link, producer):
        """Withhold the producer's top-ups while a full destination or the store's
        backlog holds it back (S2.7); C{True} if it does."""
        if producer.blocked:
            # A full destination withholds the producer's credit; what it has left
            # (little near the limit: see _credit_for) bounds the overshoot.
            self._withheld.add(link)
            producer.when_unblocked(functools.partial(self._restore_credit, link))
            return True
        if self.backlog.over:
            # The connection has as much waiting for the store as it may: the link
            # sends what credit it has left, then waits for the store.
            self._withheld.add(link)
            self.backlog.when_eased(functools.partial(self._restore_credit, link))
            return True
        if self.memory is not None and self.memory.check() == RED_LEVEL:
            self._wait_for_memory(link)
            return True
        return False

    def _wait_for_memory(self, link):
        """S2.6: no credit while the memory state is RED; restored when it falls."""
        self._withheld.add(link)
        self._memory_links.add(link)
        self.memory.when_accepting(self._memory_fell)

    def _memory_fell(self):
        links, self._memory_links = self._memory_links, set()
        for link in links:
            self._restore_credit(link)

    def _grant_for(self, producer):
        """L{_credit_for}, at most the memory state's batch: 0 at RED (S2.6)."""
        credit = self._credit_for(producer)
        if self.memory is None:
            return credit
        return self.memory.credit(credit)

    def _credit_for(self, producer):
        """The credit to grant: C{producer_credit}, or near a FLOW_CONTROL limit half
        the producer's share of the room left, at least one (S2.7).

        Credit counts from the deliveries the broker has seen (Part 2 section 2.6.7),
        so a grant of half the room lets a producer reach at most half way to the limit
        from where it was, whatever it has on the wire: a lone producer overshoots by
        at most the one message that fills the queue. Credit is never lowered below
        what the peer holds: it may have sent it all already.
        """
        credit = self.config.producer_credit
        room = producer.room
        if room is None or room >= 2 * credit:
            return credit
        return max(1, room // 2)

    def _settle_when_stored(self, link, delivery_id, presettled, stored):
        """Settle a producer's delivery with the outcome of its storage: Accepted, or
        Rejected with the store's condition (never Accepted unless stored, S3.6). The
        link may be gone by then: the peer will send it again."""
        if presettled:
            # At-most-once: nobody to answer, but the refusal counts (and is logged)
            # like any other of a pre-settled send.
            self.when_stored(stored, functools.partial(self._refusals.accepted, link),
                             functools.partial(self._refusals.refused, link))
            return

        def settle(state):
            if link.state is LinkState.ATTACHED:
                link.settle(delivery_id, state)

        self.when_stored(stored, lambda: settle(_ACCEPTED),
                         lambda error: settle(_rejected(error)))

    def _restore_credit(self, link):
        """The destination drained or the store caught up (called from the core,
        perhaps while another connection is being served): top the producer's credit
        up again, unless something else holds it back now."""
        if link not in self._withheld:
            return   # let go of meanwhile, or already restored
        self._withheld.discard(link)
        producer = link.context
        if producer is None or link.state is not LinkState.ATTACHED or \
                self._withhold(link, producer):
            return
        link.flow(max(link.credit, self._grant_for(producer)))
        self.request_flush()

    def _deliveries_settled(self, event):
        consumer = event.link.context
        if consumer is None:
            return
        state = event.state
        if type(state) is TransactionalState:
            self.transactions.settle(consumer, event)   # applied at the commit (S6.3)
            return
        outcome = _OUTCOMES.get(type(state), ACCEPTED if state is None else RELEASED)
        if outcome == MODIFIED:
            failed = bool(state.delivery_failed)
            here = bool(state.undeliverable_here)
            for delivery in event.deliveries:
                consumer.settle(delivery, MODIFIED, delivery_failed=failed,
                                undeliverable_here=here)
        else:
            for delivery in event.deliveries:
                consumer.settle(delivery, outcome)

    def _transfer_aborted(self, event):
        pass  # nothing was routed: the partial message is simply gone

    def _window_opened(self, event):
        """The peer's session window has room again: serve the links it held back."""
        for link in event.links:
            consumer = link.context
            if consumer is not None:
                self.egress.block(consumer.target, not link.writable)
        self.request_flush()


_ACCEPTED = Accepted()

# A connection logs refused pre-settled messages at most once in this many seconds.
_REFUSAL_LOG_INTERVAL = 10.0


class _PresettledRefusals:
    """What the broker does when a limit (REJECT_NEWEST, C{mqgate.system.max_count} or
    C{max_size}, C{mqgate.message.max_size}), a failing store, or anything else that
    refuses a message (a deleted destination, a message that does not parse) refuses a
    pre-settled (at-most-once) one.

    AMQP has no way to reject a transfer the sender settled (Part 2 section 2.6.12):
    the message is lost, which at-most-once allows, but the producer must not go on
    sending into a refusing destination unaware. ActiveMQ Artemis drops such messages
    without a word (AMQPSessionCallback: "We drop pre-settled messages"); we do three
    things instead:

     - count each one in the broker-wide event C{CLIENT_PRESETTLED_REFUSED};
     - log, at most once every L{_REFUSAL_LOG_INTERVAL} seconds per connection, how
       many were refused, from whom (peer, client, link, address) and why (the
       description names the setting to change);
     - detach the link with the refusal's condition (amqp:resource-limit-exceeded for
       a limit or a full disk) once C{max_presettled_refusals} in a row were refused
       on it: the one signal AMQP gives a pre-settled producer. A message accepted in
       between starts the run again, so a producer that only brushes a limit is not
       cut off.
    """

    __slots__ = ("_session", "runs", "_unlogged", "_logged_at")

    def __init__(self, session):
        self._session = session
        self.runs = {}           # link -> refusals in a row (empty: the cheap test)
        self._unlogged = 0       # refusals since the last log line
        self._logged_at = None

    def refused(self, link, error):
        """C{error} (one of L{REFUSALS}) refused a pre-settled message on C{link}."""
        description = error.description
        session = self._session
        session.context.count(PRESETTLED_REFUSED)
        run = self.runs[link] = self.runs.get(link, 0) + 1
        self._unlogged += 1
        now = session.clock.seconds()
        if self._logged_at is None or now - self._logged_at >= _REFUSAL_LOG_INTERVAL:
            self._log(link, description)
            self._logged_at = now
        limit = session.config.max_presettled_refusals
        if limit and run >= limit and link.context is not None and \
                link.state is LinkState.ATTACHED:
            self._detach(link, condition_of(error), description, run)

    def accepted(self, link):
        self.runs.pop(link, None)

    def forget(self, link):
        self.runs.pop(link, None)

    def _log(self, link, description):
        session = self._session
        session.log.warn(
            "{count} pre-settled message(s) from {peer} ({client}) refused and lost, the"
            " latest on link {link!r} to {address}: {why}", count=self._unlogged,
            peer=session.peer, client=session.client.name if session.client else "-",
            link=link.name, address=_target_address(link), why=description)
        self._unlogged = 0

    def _detach(self, link, condition, description, run):
        session = self._session
        session.log.warn(
            "detached link {link!r} of {peer} ({client}): {run} pre-settled messages in a"
            " row refused (mqgate.amqp.max_presettled_refusals); the latest: {why}",
            link=link.name, peer=session.peer,
            client=session.client.name if session.client else "-", run=run,
            why=description)
        session._forget(link)
        session._release(link, remove=False)
        link.detach(closed=True, condition=condition,
                    description=f"{run} pre-settled messages in a row were refused and "
                                f"lost; the latest: {description}")
        session.request_flush()


def _target_address(link):
    # A producer link's target is a Target or None (a Coordinator has no address).
    target = link.remote.target if link.remote is not None else None
    if getattr(target, "address", None) is None:
        return "the anonymous relay"
    return str(target.address)


def _admin_producer(admin, principal, address):
    """The admin requests' producer, or the refusal a non-ADMIN service gives (S11.1)."""
    if admin is None:
        raise _refusal(c.UNAUTHORIZED_ACCESS,
                       f"{address} takes admin requests on the admin service only")
    return admin.open_producer(principal)


class _RelayGuard:
    """An anonymous (ANONYMOUS-RELAY) producer that keeps messages addressed C{to}
    L{ADMIN_ADDRESS} away from the core: the admin requests take them on an ADMIN
    service, other services refuse them (S11.1). Everything else goes to the core,
    once access control allows it (S4.5: per message by its C{to}, through the
    connection's cached C{decisions}; a refused message is rejected, the link stays)."""

    __slots__ = ("_core", "_admin", "_principal", "_decisions")

    def __init__(self, core, admin, principal, decisions=None):
        self._core = core
        self._admin = admin
        self._principal = principal
        self._decisions = decisions

    def send(self, message):
        if is_admin_address(message.to):
            return _admin_producer(self._admin, self._principal, message.to).send(message)
        self._check_access(message)
        return self._core.send(message)

    def admit(self, message):
        """A transactional send's checks (S6.3): those of L{send}, admin requests
        refused (they are answered at once, never part of a transaction)."""
        if is_admin_address(message.to):
            raise _refusal(c.NOT_IMPLEMENTED, "admin requests cannot be part of a "
                           "transaction")
        self._check_access(message)
        return self._core.admit(message)

    def _check_access(self, message):
        if self._decisions is not None and isinstance(message.to, str):
            _check(self._decisions.check(message.to))

    def enqueue_committed(self, destination, targets, message):
        self._core.enqueue_committed(destination, targets, message)

    @property
    def blocked(self):
        return self._core.blocked

    @property
    def room(self):
        return self._core.room

    def when_unblocked(self, callback):
        self._core.when_unblocked(callback)

    def close(self):
        self._core.close()


# The JMS selector filter of the AMQP JMS mapping (FACTS section 5), by symbol or code.
_SELECTOR_FILTER = (Symbol("apache.org:selector-filter:string"), 0x0000468C00000004)


def _selector_filter(filters):
    """The selector text of a source's filter set, and the filters we honour (echoed in
    the attach reply, as Qpid JMS expects); other filters are left out of the reply,
    which tells the client they are not applied (Part 3 section 3.5.3)."""
    if not filters:
        return None, None
    for key, value in filters.items():
        if isinstance(value, Described) and value.descriptor in _SELECTOR_FILTER:
            if not isinstance(value.value, str):
                raise _refusal(c.INVALID_FIELD, "the selector filter must hold a string")
            return value.value, {key: value}
    return None, None


def _address(value):
    return None if value is None else str(value)


def _is_subscription(link):
    """Whether C{link} sends a topic subscription's messages (counted against the
    client profile's max_subscriptions)."""
    return link.is_sender and link.context is not None and \
        link.context.queue.pattern is not None


def _refusal(condition, description):
    return ProtocolError(description, str(condition))


def _rejected(error):
    """The Rejected outcome of a transfer that C{error} (one of L{REFUSALS}) refused."""
    return Rejected(error=Error(condition_of(error), error.description))


def _check(denied):
    """Raise the AMQP refusal of an access control denial (S4.5), if there is one."""
    if denied is not None:
        raise _refusal(c.UNAUTHORIZED_ACCESS, denied.description)


# A source asking for copies (Part 3 section 3.5.3) is browsing; a queue's browse rule
# applies. The core has no browsing consumer yet: a copying consumer takes the messages
# like any other, so it needs the consume rule as well.
_COPY = Symbol("copy")


def _consume_operations(source):
    # A copying receiver browses (a queue; on a topic the browse rule is the consume
    # rule, L{BrokerSession.authorize}): it takes nothing away.
    return (BROWSE,) if source.distribution_mode == _COPY else (CONSUME,)


def _connection_refusal(config, principal, peer):
    """Why C{principal} may not use this service (S4.5), or None."""
    if config.access is not None:
        denied = config.access.check_connection(principal, peer)
        return None if denied is None else denied.description
    if config.admin_only and "admin" not in principal.groups:
        return (f"user {principal.name} may not connect to the {config.service} "
                "service: it is for the admin group")
    return None


_DISPATCH = {
    AuthenticationRequested: AmqpBrokerSession._authentication_requested,
    SaslCompleted: AmqpBrokerSession._sasl_completed,
    ConnectionOpened: AmqpBrokerSession._connection_opened,
    ConnectionClosed: AmqpBrokerSession._connection_closed,
    SessionBegun: AmqpBrokerSession._session_begun,
    SessionEnded: AmqpBrokerSession._session_ended,
    LinkAttached: AmqpBrokerSession._link_attached,
    LinkDetached: AmqpBrokerSession._link_detached,
    CreditGranted: AmqpBrokerSession._credit_granted,
    MessageReceived: AmqpBrokerSession._message_received,
    DeliveriesSettled: AmqpBrokerSession._deliveries_settled,
    TransferAborted: AmqpBrokerSession._transfer_aborted,
    IngressRefused: AmqpBrokerSession._ingress_refused,
    WindowOpened: AmqpBrokerSession._window_opened,
}
