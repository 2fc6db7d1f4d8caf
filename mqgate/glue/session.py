"""
What the AMQP and STOMP glues share: their collaborators, the asynchronous login, and
turning a parsed message into the core's L{BrokerMessage}.
"""

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.admin.wire import ADMIN_ADDRESS
from mqgate.amqp.message import check_sections
from mqgate.core.addresses import QUEUE, AddressError, resolve
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.core.limits import ResourceLimitExceeded
from mqgate.core.message import BrokerMessage
from mqgate.egress.clients import EgressClient
from mqgate.errors import ProtocolError
from mqgate.glue.egress import MESSAGE_TOO_BIG, Egress, EgressContext
from mqgate.security.access import BROWSE, CONSUME
from mqgate.security.access_control import RelayDecisions

__all__ = ["ADMIN_ADDRESS", "BrokerSession", "broker_message", "is_admin_address"]

# ADMIN_ADDRESS, the reserved address of admin requests (S11.1): only an ADMIN
# service's producers reach it (L{mqgate.glue.amqp.GlueConfig.admin_requests}); the
# core never sees it, and no consumer may attach to it.


def is_admin_address(address):
    """Whether C{address} names L{ADMIN_ADDRESS}, in any spelling (C{queue://...})."""
    if not isinstance(address, str) or not address.endswith(ADMIN_ADDRESS):
        return False   # the cheap test first: this runs per anonymous-relay message
    try:
        return resolve(address)[1] == ADMIN_ADDRESS
    except AddressError:
        return False


class BrokerSession:
    """The broker side of one connection, whatever its protocol.

    @param engine: the connection's protocol engine.
    @param broker: the core L{mqgate.core.broker.Broker}.
    @param authenticator: an L{mqgate.security.auth.IAuthenticator}.
    @param clock: an C{IReactorTime} (message expiry uses it).
    @param config: the protocol glue's settings object.
    @param request_flush: called when something the engine must write was produced
        outside the adapter's own C{dataReceived} (a login result, a delivery routed
        from another connection).
    @param pause_reading: called to stop reading the peer's socket (S2.7: a producer
        of this connection filled a destination); C{resume_reading} undoes it. Both
        default to doing nothing.
    @param egress: the L{mqgate.glue.egress.EgressContext} every connection shares;
        one is made when not given (tests).
    @param keepalive: called with the client profile's
        L{mqgate.egress.profiles.TcpKeepAlive} once the client is known (S9.7).
    @param login_policy: the service's L{mqgate.security.auth.LoginPolicy} (the ways
        in it allows), or None for any way (tests).
    @param certificate_user: called with no arguments, the user name of the peer's
        verified TLS client certificate, or None (S4.7); None: never one.
    @param identities: what maps that name to a principal (C{principal_for}, see
        L{mqgate.security.auth.IPrincipalSource}); the authenticator by default.
    @param audit: an L{mqgate.security.audit.IAuditTrail} for the logins this session
        decides without the login guard (a certificate's user, a CONNECT refused by
        the login policy; the guard records password logins), or None (S4.8).
    @ivar egress: this connection's L{mqgate.glue.egress.Egress} (S9.1-S9.4).
    @ivar client: its L{mqgate.egress.clients.EgressClient} once it is registered.
    """

    log = Logger()

    def __init__(self, engine, broker, authenticator, clock, config, request_flush,
                 peer="?", *, pause_reading=None, resume_reading=None, egress=None,
                 keepalive=None, login_policy=None, certificate_user=None,
                 identities=None, audit=None):
        self.audit = audit
        self.login_policy = login_policy
        self.certificate_user = certificate_user or _no_certificate
        self.identities = identities if identities is not None else authenticator
        self.context = egress if egress is not None else EgressContext(clock)
        self.egress = Egress(engine, self.context.meter(), request_flush)
        self.client = None
        self.keepalive = keepalive or _ignore
        self.engine = engine
        self.broker = broker
        self.authenticator = authenticator
        self.clock = clock
        self.config = config
        self.request_flush = request_flush
        self.pause_reading = pause_reading or _nothing
        self.resume_reading = resume_reading or _nothing
        self.peer = peer
        self.principal = None

    def _login(self, username, password, certified=False):
        """Check credentials off the reactor thread (S4.2); None means anonymous.

        The authenticator is told the client's address and the service: failed logins
        slow down the next attempts from the same address, not from everyone, and a
        flood on one service does not refuse another's logins. C{certified}: the
        client is user C{username} by its verified TLS certificate; no password to
        check, only the user's groups to find (S4.7)."""
        source = self.peer.rpartition(":")[0] or None   # "host:port" -> host
        service = getattr(self.config, "service", None)
        refused = self.login_refusal(username)
        if refused is not None:
            self.refuse_before_login(refused)
            return
        if certified:
            d = defer.maybeDeferred(self.identities.principal_for, username)
            d.addCallbacks(self._certificate_accepted, self._certificate_refused,
                           errbackArgs=(username,))
        elif username is None:
            d = self.authenticator.authenticate_anonymous(source, service)
        else:
            d = self.authenticator.authenticate(username, password or "", source, service)
        d.addCallbacks(self._authenticated, self._not_authenticated)
        d.addErrback(lambda f: self.log.failure("authentication outcome", f))

    def _certificate_accepted(self, principal):
        self.audit_login("ok", principal.name, "certificate")
        return principal

    def _certificate_refused(self, failure, username):
        # Only holders of a certificate the CA signed get here: few, and worth a line.
        why = getattr(failure.value, "reason", failure.getErrorMessage())
        self.log.info("login from {peer} with the TLS certificate of {user!r} refused: "
                      "{why}", peer=self.peer, user=username[:64], why=why)
        self.audit_login("failed", username[:64], "certificate", why=why)
        return failure

    def audit_login(self, outcome, user, mechanism, **details):
        """Record an authentication this session decided itself (S4.8)."""
        if self.audit is not None:
            self.audit.record("authentication", outcome, user=user,
                              address=self.peer.rpartition(":")[0] or None,
                              service=getattr(self.config, "service", None),
                              mechanism=mechanism, **details)

    def _authenticated(self, principal):
        raise NotImplementedError

    # -- access control (S4.5; mqgate.security.access_control) -----------------------

    def locate(self, address, capabilities=()):
        """C{(kind, name)} of an address, as the core resolves it."""
        return resolve(address, capabilities, self.broker.config.default_type)

    def authorize(self, address, capabilities, operation):
        """None if this connection's user may do C{operation} on C{address} (creating
        it too, when it does not exist yet), else the refusal, a
        L{mqgate.security.access_control.Denied}.

        @raise AddressError: the address names nothing.
        """
        access = getattr(self.config, "access", None)
        if access is None or not access.enabled:
            return None
        kind, name = self.locate(address, capabilities)
        if operation == BROWSE and kind != QUEUE:
            operation = CONSUME   # topics have no browse rule (FACTS 1.3)
        return access.check_destination(
            self.principal, kind, name, operation,
            not self.broker.would_create(kind, name), self.peer)

    def produce_decisions(self):
        """A L{mqgate.security.access_control.RelayDecisions} for this connection's
        messages, or None when access control is off for its service."""
        access = getattr(self.config, "access", None)
        if access is None or not access.enabled:
            return None
        return RelayDecisions(access, self.principal, self.locate,
                              self.broker.would_create, self.peer)

    def _not_authenticated(self, failure):
        raise NotImplementedError

    def refuse_before_login(self, why):
        """Refuse the connection for capacity (C{why}) in the protocol's words, its
        password unchecked: it would be refused after the check anyway."""
        raise NotImplementedError

    # -- the client, as the egress layer and the admin commands see it (S9.7) ---------

    def login_refusal(self, username):
        """Why a login as C{username} would be refused for capacity after its password
        check (the client profile's connections per user name are all taken), or None.

        Asked before the check (S4.2): a connection that will be refused costs no
        password hash, and is told at once. L{register_client} asks again after the
        check, for logins that were checked side by side."""
        if username is None:
            return None
        return self._profile_refusal(username)

    def _profile_refusal(self, user):
        context = self.context
        profile = context.profiles.for_user(user)
        held = context.clients.count_user(user)
        if held >= profile.max_connections_per_user:
            return (f"user {user} already has {held} connections, the most client "
                    f"profile {profile.name} allows (max_connections_per_user)")
        return None

    def register_client(self, wanted_name, protocol, service):
        """List this connection in the client registry under its profile (S9.7).

        @return: None, or why the connection may not go on (the profile's limit of
            connections per user name is reached); the caller refuses it then.
        """
        context = self.context
        user = self.principal.name if self.principal is not None else "anonymous"
        refused = self._profile_refusal(user)
        if refused is not None:
            return refused
        profile = context.profiles.for_user(user)
        self.egress.scheduler.apply_profile(profile)
        self.keepalive(profile.tcp_keepalive)
        self.client = EgressClient(
            context.clients.unique_name(wanted_name or f"{protocol}/{self.peer}"),
            user=user, peer=self.peer, protocol=protocol, service=service,
            profile=profile, scheduler=self.egress.scheduler, meter=self.egress.meter,
            disconnect=self.disconnect, connected_at=self.clock.seconds())
        context.clients.add(self.client)
        return None

    def when_stored(self, stored, stored_ok, not_stored):
        """Answer a producer once its persistent messages are stored (S3.4, S8.1).

        @param stored: the Deferred the core returned for them.
        @param stored_ok: called with no arguments when they are stored.
        @param not_stored: called with the error when they are not: a
            L{CoreError} (a failure that is none becomes one of kind INTERNAL), or a
            L{ProtocolError}, which the protocol's glue words as it does elsewhere.
        Neither is called when the connection is finished by then (the peer will send
        again); either is followed by a flush.
        """
        def outcome(result):
            if self.engine.finished:
                return
            if isinstance(result, Failure):
                error = result.value
                if not isinstance(error, (CoreError, ProtocolError)):
                    error = CoreError(result.getErrorMessage(), ErrorKind.INTERNAL)
                not_stored(error)
            else:
                stored_ok()
            self.request_flush()

        stored.addBoth(outcome).addErrback(
            lambda failure: self.log.failure("answering a stored message", failure))

    def flows(self):
        """C{{"consumers": n, "producers": n, "subscriptions": n}}: what the
        connection has open now, for the admin's C{query cxn} (S11.1)."""
        return {}

    def check_flows(self, kind, held):
        """Refuse one more flow when the client profile's limit is reached (S9.7).

        @param kind: C{"egress"} (a consumer), C{"ingress"} (a producer) or
            C{"subscription"} (a consumer of a topic).
        @param held: how many of that kind the connection has now.
        @raise ResourceLimitExceeded: naming the limit.
        """
        profile = self.client.profile if self.client is not None else None
        if profile is None:
            return
        setting, what = _FLOW_LIMITS[kind]
        limit = getattr(profile, setting)
        if held >= limit:
            raise ResourceLimitExceeded(
                f"client profile {profile.name} allows {limit} {what} per client "
                f"({setting}); this connection has {held}")

    def unregister_client(self):
        """The connection is gone: take it off the registry."""
        client, self.client = self.client, None
        if client is not None:
            self.context.clients.remove(client)

    def disconnect(self, reason):
        """Close the connection with C{reason} as the protocol's error (S9.6)."""
        raise NotImplementedError

    def ingress_refused(self, size, limit, guaranteed):
        """S9.5: the engine refused a message over its limit and is closing."""
        self.context.count(MESSAGE_TOO_BIG)
        self.log.warn(
            "{event}: {peer} ({client}) sent a {kind} message of more than {limit} "
            "bytes ({size} received); disconnected", event=MESSAGE_TOO_BIG,
            peer=self.peer, client=self.client.name if self.client else "-",
            kind="guaranteed" if guaranteed else "direct", limit=limit, size=size)

    def broker_message(self, encoded):
        """The core's view of a message arriving from this connection (see
        L{broker_message}).

        Its body and footer are checked for framing first: a message whose sections
        do not parse never enters a queue (it would fail wherever it is read later);
        the producer is refused with amqp:decode-error instead (S10.4).

        @raise DecodeError: the sections are truncated, unknown or out of order.
        """
        check_sections(encoded)
        return broker_message(encoded, self.clock)


def broker_message(encoded, clock):
    """The core's view of a parsed message: its bytes plus the routing fields
    (design rule 2). Expiry is the earlier of the header's ttl and the
    properties' absolute-expiry-time."""
    header = encoded.header
    props = encoded.properties
    expiry = None
    if header.ttl:
        expiry = clock.seconds() + header.ttl / 1000.0
    if props.absolute_expiry_time:
        absolute = props.absolute_expiry_time / 1000.0
        expiry = absolute if expiry is None else min(expiry, absolute)
    return BrokerMessage(
        encoded, durable=bool(header.durable), priority=header.priority,
        expiry=expiry, to=props.to, reply_to=props.reply_to,
        message_id=props.message_id, correlation_id=props.correlation_id,
        delivery_count=header.delivery_count or 0)


_FLOW_LIMITS = {
    "egress": ("max_egress_flows", "consumers"),
    "ingress": ("max_ingress_flows", "producers"),
    "subscription": ("max_subscriptions", "topic subscriptions"),
}


def _ignore(_):
    pass


def _no_certificate():
    return None


def _nothing():
    pass
