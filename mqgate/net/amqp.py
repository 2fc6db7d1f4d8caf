"""
The Twisted adapter for AMQP 1.0 connections (style P6): feed bytes to the engine, hand
its events to the glue, write what the engine has to say, schedule its ticks.

Twisted calls: C{connectionMade}, C{dataReceived}, C{connectionLost}.
The glue calls: C{request_flush} (via L{Flusher}) when output was produced outside
C{dataReceived} - an authentication result, or deliveries routed here from another
connection's producer.
"""

from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger

from mqgate.amqp import conditions as c
from mqgate.amqp.connection import Connection
from mqgate.glue.amqp import AmqpBrokerSession

__all__ = ["AmqpServerProtocol", "AmqpServerFactory", "Flusher"]


class Flusher:
    """Writes out, once per reactor turn, every connection that has output pending.

    A producer's burst may route messages to many consumers on other connections; rather
    than one write (or one C{callLater}) per message, the consumers are marked and all of
    them flushed together when the reactor comes round.
    """

    def __init__(self, clock):
        self._clock = clock
        self._pending = {}
        self._call = None

    def mark(self, protocol):
        self._pending[protocol] = None
        if self._call is None:
            self._call = self._clock.callLater(0, self._run)

    def _run(self):
        self._call = None
        pending, self._pending = self._pending, {}
        for protocol in pending:
            protocol.flush()

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class AmqpServerProtocol(Protocol):
    """One broker-side AMQP connection."""

    log = Logger()

    def __init__(self, factory):
        self.factory = factory
        self.engine = None
        self.glue = None
        self._tick_call = None

    def connectionMade(self):
        """Set up the engine and the glue for this connection."""
        factory = self.factory
        settings = factory.settings
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self.engine = Connection(
            server=True, container_id=factory.container_id,
            max_frame_size=settings["mqgate.amqp.max_frame_size"],
            channel_max=settings["mqgate.amqp.channel_max"],
            idle_timeout=settings["mqgate.amqp.idle_timeout"],
            sasl_mechanisms=factory.sasl_mechanisms,
            allow_no_sasl=factory.allow_anonymous)
        self.glue = AmqpBrokerSession(self.engine, factory.broker, factory.authenticator,
                                      factory.clock, factory.glue_config,
                                      lambda: factory.flusher.mark(self), peer=self.peer)
        factory.connections.add(self)
        self._setup_deadline = factory.clock.seconds() + factory.header_timeout
        self._awaiting_open = True
        self._schedule_tick(self._setup_deadline)

    def dataReceived(self, data):
        """Bytes from the peer: through the engine to the glue, then write the answer."""
        self.glue.handle(self.engine.receive_data(data))
        self.flush()
        if self._awaiting_open and self.engine.remote_open is not None:
            # The peer's idle timeout is known now: heart-beats start at once, not at
            # the set-up deadline (S1.7).
            self._awaiting_open = False
            if self._tick_call is not None and self._tick_call.active():
                self._tick_call.cancel()
            self._tick()

    def flush(self):
        """Write what the engine has to say; drop the transport when it is finished."""
        engine = self.engine
        if engine is None:
            return
        out = engine.data_to_send()
        if out:
            self.transport.write(out)
        if engine.finished:
            if engine.error is not None:
                self.log.info("closing connection from {peer}: {error}", peer=self.peer,
                              error=engine.error)
            self.transport.loseConnection()

    def connectionLost(self, reason):
        """The transport is gone: everything unsettled goes back to its queue."""
        factory = self.factory
        factory.connections.discard(self)
        if self._tick_call is not None and self._tick_call.active():
            self._tick_call.cancel()
        self._tick_call = None
        if self.engine is not None:
            self.engine.connection_lost()
            self.glue.connection_lost()

    def shutdown(self, description="the broker is shutting down"):
        """Close with a proper close frame (S0.4) and drop the transport."""
        if self.engine is not None and not self.engine.finished:
            self.engine.close(c.CONNECTION_FORCED, description)
            self.engine.finished = True
        self.flush()

    def _tick(self):
        """Run the engine's timers (idle timeout, heart-beats) and the set-up deadline."""
        self._tick_call = None
        engine = self.engine
        if engine is None or engine.finished:
            return
        now = self.factory.clock.seconds()
        deadline = engine.tick(now)
        if engine.remote_open is None and not engine.finished:
            if now >= self._setup_deadline:
                # A peer that never gets as far as open holds a connection for nothing.
                engine.close(c.RESOURCE_LIMIT_EXCEEDED,
                             "no AMQP open within the connection set-up timeout")
                engine.finished = True
            else:
                deadline = min(deadline or self._setup_deadline, self._setup_deadline)
        self.flush()
        if deadline is not None and not engine.finished:
            self._schedule_tick(deadline)

    def _schedule_tick(self, when):
        clock = self.factory.clock
        self._tick_call = clock.callLater(max(0.0, when - clock.seconds()), self._tick)


class AmqpServerFactory(Factory):
    """Builds L{AmqpServerProtocol}s for one connection service.

    @ivar connections: the live protocols, so shutdown can close each properly.
    """

    def __init__(self, *, settings, broker, authenticator, clock, flusher, glue_config,
                 container_id, allow_anonymous=True, header_timeout=None):
        self.settings = settings
        self.broker = broker
        self.authenticator = authenticator
        self.clock = clock
        self.flusher = flusher
        self.glue_config = glue_config
        self.container_id = container_id
        self.allow_anonymous = allow_anonymous
        self.sasl_mechanisms = ("PLAIN", "ANONYMOUS") if allow_anonymous else ("PLAIN",)
        self.header_timeout = header_timeout or \
            settings["mqgate.authentication.client.response.timeout"]
        self.connections = set()
        self.noisy = False  # one line per service at start-up is enough (ConnectionService)

    def buildProtocol(self, addr):
        return AmqpServerProtocol(self)

    def shutdown(self):
        """Close every connection with a close frame."""
        for protocol in list(self.connections):
            protocol.shutdown()
