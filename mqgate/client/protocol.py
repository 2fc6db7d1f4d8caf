"""
The client's Twisted adapter for the sans-IO AMQP engine: the mirror image of the
broker's L{mqgate.net.engine.EngineProtocol}, and as thin.

It feeds what the transport received to the engine, hands the engine's events to its
owner (the L{mqgate.client.connection.Connection}), writes what the engine has to say,
and runs the engine's timers (idle time-out, heart-beats). The owner calls L{flush}
after acting on events outside C{dataReceived} (a send, a settlement).

Any stream transport will do: TCP, TLS, the HTTP tunnel's or WebSocket's
byte stream. Where the transport is a TCP socket, Nagle's algorithm is turned off
(TCP_NODELAY): a client waits for each small frame's answer, and 40 ms of delayed
acknowledgement per round trip is what Nagle would cost it.
"""

from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger

__all__ = ["AmqpClientProtocol", "AmqpClientFactory"]

log = Logger()


class AmqpClientProtocol(Protocol):
    """One transport, one engine.

    @param engine: a client-side L{mqgate.amqp.connection.Connection}.
    @param owner: has C{_engine_events(protocol, events)} and
        C{_transport_lost(protocol, reason)}.
    @param clock: the reactor (C{seconds}, C{callLater}).
    """

    def __init__(self, engine, owner, clock):
        self.engine = engine
        self.owner = owner
        self.clock = clock
        self._timer = None
        self.lost = False

    def connectionMade(self):
        set_nodelay = getattr(self.transport, "setTcpNoDelay", None)
        if set_nodelay is not None:
            try:
                set_nodelay(True)
            except OSError:   # not a TCP socket after all: nothing to turn off
                pass
        self.flush()
        self._tick()

    def dataReceived(self, data):
        events = self.engine.receive_data(data)
        while self.engine.backlogged:
            events += self.engine.receive_data(b"")
        if events:
            self.owner._engine_events(self, events)
        self.flush()

    def flush(self):
        """Write what the engine has to say; drop the transport once it is finished."""
        if self.lost:
            return
        data = self.engine.data_to_send()
        if data:
            self.transport.write(data)
        if self.engine.finished:
            self.transport.loseConnection()

    def _tick(self):
        self._timer = None
        if self.lost:
            return
        when = self.engine.tick(self.clock.seconds())
        self.flush()
        if when is not None:
            delay = max(0.0, when - self.clock.seconds())
            self._timer = self.clock.callLater(delay, self._tick)

    def connectionLost(self, reason):
        self.lost = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self.engine.connection_lost()
        self.owner._transport_lost(self, reason)


class AmqpClientFactory(Factory):
    """Builds the one L{AmqpClientProtocol} of a connection attempt."""

    def __init__(self, engine, owner, clock):
        self.engine = engine
        self.owner = owner
        self.clock = clock

    def buildProtocol(self, addr):
        protocol = AmqpClientProtocol(self.engine, self.owner, self.clock)
        protocol.factory = self
        return protocol
