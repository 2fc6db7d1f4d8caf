"""
What the AMQP and STOMP glues share: their collaborators, the asynchronous login, and
turning a parsed message into the core's L{BrokerMessage}.
"""

from twisted.logger import Logger

from mqgate.core.message import BrokerMessage
from mqgate.egress.clients import EgressClient
from mqgate.glue.egress import MESSAGE_TOO_BIG, Egress, EgressContext

__all__ = ["BrokerSession"]


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
    @ivar egress: this connection's L{mqgate.glue.egress.Egress} (S9.1-S9.4).
    @ivar client: its L{mqgate.egress.clients.EgressClient} once it is registered.
    """

    log = Logger()

    def __init__(self, engine, broker, authenticator, clock, config, request_flush,
                 peer="?", *, pause_reading=None, resume_reading=None, egress=None):
        self.context = egress if egress is not None else EgressContext(clock)
        self.egress = Egress(engine, self.context.meter(), request_flush)
        self.client = None
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

    def _login(self, username, password):
        """Check credentials off the reactor thread (S4.2); None means anonymous."""
        if username is None:
            d = self.authenticator.authenticate_anonymous()
        else:
            d = self.authenticator.authenticate(username, password or "")
        d.addCallbacks(self._authenticated, self._not_authenticated)
        d.addErrback(lambda f: self.log.failure("authentication outcome", f))

    def _authenticated(self, principal):
        raise NotImplementedError

    def _not_authenticated(self, failure):
        raise NotImplementedError

    # -- the client, as the egress layer and the admin commands see it (S9.7) ---------

    def register_client(self, wanted_name, protocol, service):
        """List this connection in the client registry under its profile (S9.7).

        @return: None, or why the connection may not go on (the profile's limit of
            connections per user name is reached); the caller refuses it then.
        """
        context = self.context
        user = self.principal.name if self.principal is not None else "anonymous"
        profile = context.profiles.for_user(user)
        held = len(context.clients.by_user(user))
        if held >= profile.max_connections_per_user:
            return (f"user {user} already has {held} connections, the most client "
                    f"profile {profile.name} allows (max_connections_per_user)")
        self.egress.scheduler.apply_profile(profile)
        self.client = EgressClient(
            context.clients.unique_name(wanted_name or f"{protocol}/{self.peer}"),
            user=user, peer=self.peer, protocol=protocol, service=service,
            profile=profile, scheduler=self.egress.scheduler, meter=self.egress.meter,
            disconnect=self.disconnect, connected_at=self.clock.seconds())
        context.clients.add(self.client)
        return None

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
        """The core's view of a parsed message: its bytes plus the routing fields
        (ARCHITECTURE rule 2). Expiry is the earlier of the header's ttl and the
        properties' absolute-expiry-time."""
        header = encoded.header
        props = encoded.properties
        expiry = None
        if header.ttl:
            expiry = self.clock.seconds() + header.ttl / 1000.0
        if props.absolute_expiry_time:
            absolute = props.absolute_expiry_time / 1000.0
            expiry = absolute if expiry is None else min(expiry, absolute)
        return BrokerMessage(
            encoded, durable=bool(header.durable), priority=header.priority,
            expiry=expiry, to=props.to, reply_to=props.reply_to,
            message_id=props.message_id, correlation_id=props.correlation_id,
            delivery_count=header.delivery_count or 0)


def _nothing():
    pass
