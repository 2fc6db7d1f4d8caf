"""
What the AMQP and STOMP glues share: their collaborators, the asynchronous login, and
turning a parsed message into the core's L{BrokerMessage}.
"""

from twisted.logger import Logger

from mqgate.core.message import BrokerMessage

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
    """

    log = Logger()

    def __init__(self, engine, broker, authenticator, clock, config, request_flush,
                 peer="?", *, pause_reading=None, resume_reading=None):
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
