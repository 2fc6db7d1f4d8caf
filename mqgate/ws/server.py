# -*- test-case-name: tests.ws.test_server -*-
"""
WebSocket on the gateway services (S10.3): autobahn's twisted.web resource, whose
connections carry broker connections.

Each WebSocket, once open, is a L{VirtualTransport} into the service's own protocol
factory: the broker sees an AMQP or STOMP connection like a socket's, with the
WebSocket's TCP peer as its address. The payload of every message (text or binary)
is the next piece of that connection's byte stream, passed on as it is read: a message
may hold part of a frame or several (the engines parse a stream). Outbound, AMQP bytes go as binary messages,
STOMP as one frame per message (L{mqgate.ws.framing}).

The handshake is refused before any broker work: an Origin not allowed (403) or an
offer of subprotocols none of which is served (400) (L{mqgate.ws.policy}). A message
larger than C{max_message_size} closes the WebSocket with 1009; a peer that answers no
ping within C{ping_interval} seconds is dropped, its connection then lost as a
socket's would be (deliveries back to their queues).

Flow control both ways: the TCP connection's full send buffer pauses the broker
connection's output (its egress queues hold the deliveries, S9.3), and a broker
connection that stops reading (its pool, flow control, a paused service) stops the
TCP connection being read.
"""

from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import (
    WebSocketServerFactory, WebSocketServerProtocol)
from autobahn.websocket.types import ConnectionDeny
from twisted.internet.interfaces import ISSLTransport
from twisted.logger import Logger
from twisted.protocols.policies import ThrottlingProtocol

from mqgate.net.virtual import VirtualTransport
from mqgate.ws.carrier import CarrierMixin
from mqgate.security.guard import LogBudget
from mqgate.ws.framing import StompSplitter
from mqgate.ws.policy import (
    AMQP, STOMP, Refused, choose_subprotocol, origin_allowed, parse_origins)

__all__ = ["ws_resource", "BrokerWebSocketFactory", "BrokerWebSocket"]

_TEXT, _BINARY = 1, 2


class _AutobahnLog:
    """What autobahn logs about one WebSocket: its debug and info lines dropped (one
    per read, per handshake refused: a client could make a flood of them), its
    warnings (a connection failed: a message too big) within the factory's budget."""

    def __init__(self, factory):
        self._factory = factory

    def _drop(self, *args, **kwargs):
        pass

    debug = trace = info = _drop

    def warn(self, text, **fields):
        self._factory.log_budgeted("WebSocket: " + text, **fields)

    error = critical = warning = warn

    def failure(self, text, failure=None, **fields):
        self._factory._log.failure("WebSocket: " + text, failure=failure, **fields)


class BrokerWebSocket(CarrierMixin, WebSocketServerProtocol):
    """One WebSocket carrying one broker connection."""

    _choice = None
    _splitter = None

    def dataReceived(self, data):
        # autobahn's own formats a debug line per read, even when it is not logged.
        self._dataReceived(data)

    def makeConnection(self, transport):
        # twisted.web hands over the site's connection wrapper (which counts the
        # service's connections and still passes us the bytes and the loss); we write
        # to what it wraps, the TCP or TLS transport, which autobahn must see itself
        # to know the connection is TLS.
        if isinstance(transport, ThrottlingProtocol):
            transport = transport.transport
        super().makeConnection(transport)

    # -- the handshake -------------------------------------------------------------

    def onConnect(self, request):
        """Check the Origin and choose the subprotocol (L{mqgate.ws.policy})."""
        factory = self.factory
        headers = request.headers
        try:
            if not origin_allowed(headers.get("origin"), headers.get("host"),
                                  factory.allowed_origins, factory.secure):
                raise Refused(403, f"origin {headers.get('origin', '')[:200]!r} is not "
                                   f"allowed (mqgate.{factory.service}.ws.allowed_origins)")
            self._choice = choose_subprotocol(request.protocols)
        except Refused as refused:
            factory.log_refusal(self.transport.getPeer(), refused)
            raise ConnectionDeny(refused.status, _status_text(refused.reason)) from None
        return self._choice.subprotocol

    def onOpen(self):
        """The WebSocket is open: connect a broker connection through it."""
        transport = self.transport
        # twisted.web's channel was the TCP (or TLS) connection's producer; the
        # WebSocket is now (unregistering none is nothing, for both).
        transport.unregisterProducer()
        transport.registerProducer(self, True)
        if self._choice.family == STOMP:
            self._splitter = StompSplitter()
        self._virtual = VirtualTransport(
            send=self._send, close=self._close, peer=transport.getPeer(),
            host=transport.getHost(), pause_reading=transport.pauseProducing,
            resume_reading=transport.resumeProducing,
            tls=transport if ISSLTransport.providedBy(transport) else None)
        self._virtual.connect(self.factory.connections)

    # -- the byte stream -------------------------------------------------------------

    # Messages are not gathered whole (autobahn's default): each piece of a frame's
    # payload goes on as it is read, so a connection holds one read, not a message of
    # up to max_message_size (whose bound autobahn still checks at each frame's start).

    def onMessageFrameData(self, payload):
        """The next piece of the connection's byte stream, text or binary alike."""
        if self._virtual is not None and not self.failedByMe:
            self._virtual.receive(payload)

    def onMessageFrameEnd(self):
        pass

    def onMessageEnd(self):
        pass

    def _send(self, data):
        if self.state != self.STATE_OPEN:
            return
        splitter = self._splitter
        if splitter is None and self._choice.family is None:
            splitter = self._sniffed_splitter()
        if splitter is None:
            # Below autobahn's sendMessage, whose size check is meant for what we
            # receive: the broker's own output is bounded by its own settings.
            self.sendFrame(_BINARY, data)
            return
        for frame, is_text in splitter.split(data):
            self.sendFrame(_TEXT if is_text else _BINARY, frame)

    def _sniffed_splitter(self):
        """Without a subprotocol: STOMP framing once the stream was sniffed as STOMP."""
        protocol = self._virtual.protocol if self._virtual is not None else None
        inner = getattr(protocol, "inner", protocol)
        label = getattr(getattr(inner, "factory", None), "protocol_label", None)
        if label == "STOMP":
            self._splitter = StompSplitter()
            self._choice = type(self._choice)(None, STOMP)
        elif label is not None:
            self._choice = type(self._choice)(None, AMQP)
        return self._splitter


def _status_text(reason):
    """A reason fit for an HTTP status line (autobahn puts it there)."""
    return "".join(c if " " <= c <= "~" else "?" for c in reason)


class BrokerWebSocketFactory(WebSocketServerFactory):
    """The WebSocket endpoint of one gateway service.

    @ivar connections: the service's protocol factory.
    @ivar allowed_origins: from L{parse_origins}.
    """

    protocol = BrokerWebSocket
    _log = Logger()

    def __init__(self, connections, *, service, reactor, secure, allowed_origins=(),
                 max_message_size=1 << 20, ping_interval=30):
        super().__init__(reactor=reactor, server="mqgate")
        self.connections = connections
        self.service = service
        self.secure = secure
        self.allowed_origins = parse_origins(allowed_origins)
        self.setProtocolOptions(
            # Our own origin rule (onConnect) answers 403; autobahn's would say 400.
            allowedOrigins=["*"], webStatus=False,
            maxMessagePayloadSize=max_message_size,
            maxFramePayloadSize=max_message_size,
            autoPingInterval=ping_interval or 0, autoPingTimeout=ping_interval or 0,
            # A failure (a message too big) is said with a close frame (1009), not by
            # dropping the connection with the reason unsaid.
            failByDrop=False,
            openHandshakeTimeout=10, closeHandshakeTimeout=5, tcpNoDelay=True)
        self.refused = 0
        # A flood of refused handshakes must not become a flood of log lines.
        self._log_budget = LogBudget(reactor, lines=10, interval=60.0)

    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.log = _AutobahnLog(self)
        return protocol

    def log_refusal(self, peer, refused):
        """Count a refused handshake and log it, within the budget of lines."""
        self.refused += 1
        self.log_budgeted(
            "WebSocket from {peer} refused ({status}): {reason}",
            peer=f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}",
            status=refused.status, reason=refused.reason)

    def log_budgeted(self, text, **fields):
        """Log at info level, at most ten lines a minute (the rest counted)."""
        held = self._log_budget.take()
        if held is not None:
            self._log.info(text + "{more}", more=(f" ({held} similar lines not logged)"
                                                 if held else ""), **fields)


def ws_resource(connections, *, service, reactor, secure, allowed_origins=(),
                max_message_size=1 << 20, ping_interval=30):
    """The twisted.web resource of a gateway service's WebSocket endpoint.

    @param connections: the service's protocol factory.
    @param secure: the service is HTTPS (same-origin checks default to port 443).
    @param allowed_origins: C{mqgate.SERVICE.ws.allowed_origins}'s items.
    """
    return WebSocketResource(BrokerWebSocketFactory(
        connections, service=service, reactor=reactor, secure=secure,
        allowed_origins=allowed_origins, max_message_size=max_message_size,
        ping_interval=ping_interval))
