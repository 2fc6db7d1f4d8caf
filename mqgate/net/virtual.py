# -*- test-case-name: tests.ws.test_virtual -*-
"""
A transport for a broker connection that does not come from a socket of its own (S10.3):
a WebSocket, an HTTP tunnel connection. Its bytes arrive in the carrier's messages or
requests and leave the same way.

The broker side cannot tell: L{VirtualTransport.connect} builds the protocol from the
service's own factory (the sniffing one, so AMQP or STOMP is recognised by the first
bytes as on TCP) and makes the connection, and from then on the engine adapter, its
egress queues, pings, thread pool, limits and access control work as they do on a
socket. What they use of a transport is here: C{write}/C{writeSequence},
C{loseConnection}/C{abortConnection}, C{getPeer}/C{getHost} (the real client's
address, as the carrier knows it), C{registerProducer} and C{pauseProducing}/
C{resumeProducing} (reading paused and resumed), C{disconnecting}, and
C{getPeerCertificate} (L{ISSLTransport}) when the carrier runs over TLS.

The carrier's side is three calls and a few callables it hands in:

    transport = VirtualTransport(send=..., close=..., peer=..., host=...)
    protocol = transport.connect(factory)      # None: the factory declined
    transport.receive(data)                     # bytes from the client
    transport.carrier_lost(reason)              # the carrier's connection is gone
    transport.pause_writing() / resume_writing()   # the carrier's own back-pressure

C{send(data)} takes the protocol's bytes (in the order written, never empty);
C{close(abort)} asks the carrier to end its connection (after what was sent, or at once
when C{abort}); the carrier answers with L{carrier_lost} when it is gone, which is when
the protocol hears C{connectionLost}, once.

Flow control both ways, so that a slow client holds deliveries in the broker's bounded
egress queues rather than in the carrier's buffers (S9.3): the carrier calls
L{pause_writing} when it cannot take more (its socket is full, a tunnel's window is
shut) and L{resume_writing} when it can; the protocol, registered as the producer, is
paused and resumed. The other way, the protocol's C{pauseProducing} (its pool, flow
control, a paused service) calls the carrier's C{pause_reading}, and bytes the carrier
still delivers meanwhile (a message already in flight) are held, in order, and handed
over at C{resumeProducing}: the carrier's pause bounds them.
"""

from twisted.internet import error
from twisted.internet.interfaces import (
    IConsumer, IPushProducer, ISSLTransport, ITransport)
from twisted.python.failure import Failure
from zope.interface import alsoProvides, implementer

__all__ = ["VirtualTransport"]


def _nothing():
    pass


@implementer(ITransport, IConsumer, IPushProducer)
class VirtualTransport:
    """A protocol's transport whose bytes go through a carrier (see the module doc).

    @param send: C{send(data)}, the carrier takes bytes written by the protocol.
    @param close: C{close(abort)}, the carrier ends its connection: after the bytes
        already sent (C{abort} false) or at once; it then calls L{carrier_lost}.
    @param peer: the client's C{IAddress} (the carrier's peer, e.g. the WebSocket's
        TCP peer), for logs, the connection list and access control.
    @param host: the broker's C{IAddress} the client reached.
    @param pause_reading: C{pause_reading()}, ask the carrier to stop delivering bytes
        for now; optional (a carrier that cannot pause has what it still delivers held).
    @param resume_reading: the opposite of C{pause_reading}.
    @param tls: the carrier's own TLS transport (an L{ISSLTransport}), when it runs over
        TLS: this transport then provides L{ISSLTransport} too and reports that
        connection's client certificate (S4.7).
    @ivar protocol: the protocol connected by L{connect}, or None.
    @ivar disconnecting: the protocol asked to close (C{loseConnection}).
    @ivar connected: the protocol is connected and the carrier not lost yet.
    """

    def __init__(self, *, send, close, peer, host, pause_reading=_nothing,
                 resume_reading=_nothing, tls=None):
        self._send = send
        self._close = close
        self._peer = peer
        self._host = host
        self._pause_reading = pause_reading
        self._resume_reading = resume_reading
        self._tls = tls
        if tls is not None:
            alsoProvides(self, ISSLTransport)
        self.protocol = None
        self.producer = None
        self.connected = False
        self.disconnecting = False
        self._closed = False          # close() was asked of the carrier
        self._reading_paused = False  # the protocol paused us (pauseProducing)
        self._held = []               # bytes delivered while reading was paused
        self._writing_paused = False  # the carrier paused us (pause_writing)

    # -- the carrier's side ------------------------------------------------------

    def connect(self, factory):
        """Build the protocol of C{factory} for the client at C{peer} and connect it.

        @return: the protocol, or None when the factory declined the connection (the
            carrier is then asked to close).
        """
        protocol = factory.buildProtocol(self._peer)
        if protocol is None:
            self._ask_close(abort=True)
            return None
        self.protocol = protocol
        self.connected = True
        protocol.makeConnection(self)
        return protocol

    def receive(self, data):
        """Bytes from the client, in order; held while the protocol paused reading."""
        if not self.connected or not data:
            return
        if self._reading_paused:
            self._held.append(bytes(data))
            return
        self.protocol.dataReceived(data)

    def carrier_lost(self, reason=None):
        """The carrier's connection is gone: the protocol hears C{connectionLost}
        (once: later calls do nothing).

        @param reason: a L{Failure}; by default a clean close (C{ConnectionDone}).
        """
        if not self.connected:
            return
        self.connected = False
        self._held = []
        if reason is None:
            reason = Failure(error.ConnectionDone())
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.stopProducing()
        protocol = self.protocol
        protocol.connectionLost(reason)

    def pause_writing(self):
        """The carrier cannot take more bytes for now: pause the protocol's output."""
        if self._writing_paused:
            return
        self._writing_paused = True
        if self.producer is not None and self.connected:
            self.producer.pauseProducing()

    def resume_writing(self):
        """The carrier can take bytes again: resume the protocol's output."""
        if not self._writing_paused:
            return
        self._writing_paused = False
        if self.producer is not None and self.connected:
            self.producer.resumeProducing()

    @property
    def writing_paused(self):
        """Whether the carrier has paused the protocol's output."""
        return self._writing_paused

    # -- ITransport --------------------------------------------------------------

    def write(self, data):
        """Hand C{data} to the carrier (nothing after the close was asked)."""
        if data and self.connected and not self._closed:
            self._send(bytes(data))

    def writeSequence(self, data):
        """Hand the pieces to the carrier as one piece."""
        self.write(b"".join(data))

    def loseConnection(self):
        """Close after what was written (the carrier sends it first)."""
        self.disconnecting = True
        self._ask_close(abort=False)

    def abortConnection(self):
        """Close at once."""
        self.disconnecting = True
        self._ask_close(abort=True)

    def getPeer(self):
        """The client's address, as the carrier knows it."""
        return self._peer

    def getHost(self):
        """The broker's address the client reached."""
        return self._host

    def _ask_close(self, abort):
        if self._closed and not abort:
            return
        first = not self._closed
        self._closed = True
        if first or abort:
            self._close(abort)

    # -- ISSLTransport (only provided with a tls carrier) ----------------------------

    def getPeerCertificate(self):
        """The client certificate of the carrier's TLS connection, or None."""
        if self._tls is None:
            return None
        return self._tls.getPeerCertificate()

    # -- IConsumer: the protocol is our streaming producer ----------------------------

    def registerProducer(self, producer, streaming):
        """Register the protocol (a push producer) to be paused while the carrier is."""
        if self.producer is not None:
            raise RuntimeError("a producer is already registered on this transport")
        self.producer = producer
        if self._writing_paused:
            producer.pauseProducing()

    def unregisterProducer(self):
        self.producer = None

    # -- IPushProducer: the protocol pauses and resumes our reading -------------------

    def pauseProducing(self):
        """Deliver no more bytes to the protocol until L{resumeProducing}."""
        if not self._reading_paused:
            self._reading_paused = True
            self._pause_reading()

    def resumeProducing(self):
        """Deliver what was held, then read on."""
        if not self._reading_paused:
            return
        self._reading_paused = False
        held, self._held = self._held, []
        if held and self.connected:
            self.protocol.dataReceived(b"".join(held))
        if not self._reading_paused:
            self._resume_reading()

    def stopProducing(self):
        """Stop for good: abort the connection."""
        self.abortConnection()
