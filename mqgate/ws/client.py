# -*- test-case-name: tests.e2e.test_ws -*-
"""
A WebSocket client endpoint (S10.3, S6): mqgate's own clients reach a broker over
C{ws://} and C{wss://} with it as they reach one over TCP with a TCP endpoint.

    endpoint = WebSocketClientEndpoint(reactor, "wss://broker:8443/ws")
    d = endpoint.connect(factory)     # fires with factory's protocol, once open

The protocol sees a plain byte stream (C{dataReceived}, C{connectionLost}; C{write},
C{loseConnection} on its transport, a L{VirtualTransport}): the payload of every
message received is the next piece of the stream, and every write goes out as one
message (binary for AMQP; for a STOMP subprotocol, one frame per message, text when it
is UTF-8, as the server does).

C{wss://} verifies the server's certificate and host name by default (Twisted's
C{optionsForClientTLS} with the system's trust roots); C{tls_context} replaces that
(an C{IOpenSSLClientConnectionCreator}, e.g. C{optionsForClientTLS(host,
trustRoot=...)}). A refused handshake (a rejected Origin, 403; a subprotocol not
served, 400) fails the Deferred with L{WebSocketHandshakeError} naming the status.
"""

from autobahn.twisted.websocket import (
    WebSocketClientFactory, WebSocketClientProtocol)
from autobahn.websocket.util import parse_url
from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import defer, endpoints, error, ssl
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.python.failure import Failure
from zope.interface import implementer

from mqgate.net.virtual import VirtualTransport
from mqgate.ws.carrier import CarrierMixin
from mqgate.ws.framing import StompSplitter

__all__ = ["WebSocketClientEndpoint", "WebSocketHandshakeError"]

_TEXT, _BINARY = 1, 2


class WebSocketHandshakeError(error.ConnectError):
    """The server did not open the WebSocket (an HTTP error status, a subprotocol not
    answered); the message says what it answered."""


class _ClientWebSocket(CarrierMixin, WebSocketClientProtocol):
    """The WebSocket under one client connection."""

    _splitter = None

    def onOpen(self):
        transport = self.transport
        if self.factory.subprotocol.endswith(".stomp"):
            self._splitter = StompSplitter()
        transport.registerProducer(self, True)
        virtual = self._virtual = VirtualTransport(
            send=self._send, close=self._close, peer=transport.getPeer(),
            host=transport.getHost(), pause_reading=transport.pauseProducing,
            resume_reading=transport.resumeProducing)
        protocol = virtual.connect(self.factory.wrapped)
        self.factory.opened(protocol)

    def onMessage(self, payload, isBinary):
        if self._virtual is not None:
            self._virtual.receive(payload)

    def _send(self, data):
        if self.state != self.STATE_OPEN:
            return
        if self._splitter is None:
            self.sendFrame(_BINARY, data)
            return
        for frame, is_text in self._splitter.split(data):
            self.sendFrame(_TEXT if is_text else _BINARY, frame)

    def _never_opened(self, reason):
        if reason.check(SSL.Error, VerificationError):
            self.factory.failed(reason)    # the TLS refusal itself says what to do
            return
        why = self.wasNotCleanReason or reason.getErrorMessage()
        self.factory.failed(Failure(WebSocketHandshakeError(
            string=f"WebSocket to {self.factory.url} not opened: {why}")))


class _ClientFactory(WebSocketClientFactory):
    protocol = _ClientWebSocket

    def __init__(self, wrapped, deferred, *, url, subprotocol, origin, reactor):
        super().__init__(url, reactor=reactor, protocols=[subprotocol], origin=origin)
        self.wrapped = wrapped
        self.subprotocol = subprotocol
        self._deferred = deferred
        # What a client's connection sends is bounded by the broker, not by us.
        self.setProtocolOptions(maxMessagePayloadSize=0, maxFramePayloadSize=0,
                                tcpNoDelay=True, openHandshakeTimeout=30)

    def opened(self, protocol):
        d, self._deferred = self._deferred, None
        if d is not None:
            if protocol is None:
                d.errback(error.ConnectError(string="the protocol factory declined"))
            else:
                d.callback(protocol)

    def failed(self, failure):
        d, self._deferred = self._deferred, None
        if d is not None:
            d.errback(failure)


@implementer(IStreamClientEndpoint)
class WebSocketClientEndpoint:
    """Connect to a C{ws://} or C{wss://} URL; the protocol gets a byte stream.

    @param url: C{ws://host[:port]/path} or C{wss://...}.
    @param subprotocol: the one offered (C{amqp}, or C{v12.stomp} ...).
    @param tls_context: for C{wss://}: an C{IOpenSSLClientConnectionCreator}; None:
        verify the server's certificate and name against the system's trust roots.
    @param origin: an C{Origin} header to send (browsers do; None: none).
    """

    def __init__(self, reactor, url, *, subprotocol="amqp", tls_context=None,
                 origin=None):
        secure, host, port, _resource, _path, _params = parse_url(url)
        self._reactor = reactor
        self._url = url
        self._secure = secure
        self._host = host
        self._port = port
        self._subprotocol = subprotocol
        self._tls_context = tls_context
        self._origin = origin

    def connect(self, protocolFactory):
        """Open the WebSocket; fire with C{protocolFactory}'s protocol once it is open."""
        opened = defer.Deferred()
        factory = _ClientFactory(protocolFactory, opened, url=self._url,
                                 subprotocol=self._subprotocol, origin=self._origin,
                                 reactor=self._reactor)
        endpoint = endpoints.HostnameEndpoint(self._reactor, self._host, self._port)
        if self._secure:
            context = self._tls_context or ssl.optionsForClientTLS(self._host)
            endpoint = endpoints.wrapClientTLS(context, endpoint)
        d = endpoint.connect(factory)
        d.addErrback(factory.failed)
        return opened
