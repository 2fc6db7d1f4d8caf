"""The virtual transport (S10.3): a broker connection carried by something other than
its own socket works as a socket's does: bytes both ways, closing, addresses, flow
control, TLS identity."""

from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import ISSLTransport
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from twisted.internet import error

from mqgate.net.virtual import VirtualTransport

PEER = IPv4Address("TCP", "192.0.2.7", 40000)
HOST = IPv4Address("TCP", "127.0.0.1", 8080)


class Recorder(Protocol):
    """Records what a protocol hears; is its transport's push producer."""

    def __init__(self):
        self.received = []
        self.lost = []
        self.paused = 0
        self.resumed = 0
        self.stopped = 0

    def connectionMade(self):
        self.transport.registerProducer(self, True)

    def dataReceived(self, data):
        self.received.append(data)

    def connectionLost(self, reason):
        self.lost.append(reason)

    def pauseProducing(self):
        self.paused += 1

    def resumeProducing(self):
        self.resumed += 1

    def stopProducing(self):
        self.stopped += 1


class Carrier:
    """The carrier's side: what was sent, closes asked, reading paused."""

    def __init__(self, **kwargs):
        self.sent = []
        self.closes = []
        self.reading = True
        self.transport = VirtualTransport(
            send=self.sent.append, close=self.closes.append, peer=PEER, host=HOST,
            pause_reading=lambda: setattr(self, "reading", False),
            resume_reading=lambda: setattr(self, "reading", True), **kwargs)
        self.addresses = []

        def build(addr):
            self.addresses.append(addr)
            return Recorder()

        factory = Factory()
        factory.buildProtocol = build
        self.protocol = self.transport.connect(factory)


def test_bytes_flow_both_ways_with_the_clients_address():
    """The protocol is built for the client's address, hears the carrier's bytes and its
    writes reach the carrier, in order."""
    carrier = Carrier()
    assert carrier.addresses == [PEER]
    assert carrier.protocol.transport.getPeer() == PEER
    assert carrier.protocol.transport.getHost() == HOST
    carrier.transport.receive(b"AMQP")
    carrier.transport.receive(b"\x00\x01")
    carrier.protocol.transport.write(b"one")
    carrier.protocol.transport.writeSequence([b"tw", b"o"])
    assert carrier.protocol.received == [b"AMQP", b"\x00\x01"]
    assert carrier.sent == [b"one", b"two"]


def test_lose_connection_asks_the_carrier_once_and_loss_is_heard_once():
    """loseConnection asks the carrier to close after what was sent; the protocol hears
    connectionLost once, when the carrier says it is gone, and nothing is written after
    the close was asked."""
    carrier = Carrier()
    transport = carrier.transport
    transport.loseConnection()
    transport.loseConnection()
    transport.write(b"late")
    assert carrier.closes == [False] and transport.disconnecting
    assert carrier.sent == []
    transport.abortConnection()
    assert carrier.closes == [False, True]
    transport.carrier_lost()
    transport.carrier_lost(Failure(error.ConnectionLost()))
    assert len(carrier.protocol.lost) == 1
    assert carrier.protocol.lost[0].check(error.ConnectionDone)
    assert carrier.protocol.stopped == 1


def test_carrier_back_pressure_pauses_the_protocols_output():
    """The carrier's pause_writing and resume_writing pause and resume the registered
    producer (the egress queues hold deliveries meanwhile, S9.3)."""
    carrier = Carrier()
    carrier.transport.pause_writing()
    carrier.transport.pause_writing()
    assert carrier.protocol.paused == 1
    carrier.transport.resume_writing()
    assert carrier.protocol.resumed == 1


def test_paused_reading_holds_bytes_until_resumed():
    """While the protocol has reading paused, the carrier is asked to stop, and bytes it
    still delivers are held and handed over, in order, at the resume."""
    carrier = Carrier()
    transport = carrier.transport
    transport.pauseProducing()
    assert not carrier.reading
    transport.receive(b"a")
    transport.receive(b"b")
    assert carrier.protocol.received == []
    transport.resumeProducing()
    assert carrier.protocol.received == [b"ab"] and carrier.reading


def test_declined_connection_is_closed():
    """A factory that declines the connection (None) gets the carrier closed at once."""
    sent, closes = [], []
    transport = VirtualTransport(send=sent.append, close=closes.append, peer=PEER,
                                 host=HOST)
    factory = Factory()
    factory.buildProtocol = lambda addr: None
    assert transport.connect(factory) is None
    assert closes == [True]


class FakeTls:
    def getPeerCertificate(self):
        return "the certificate"


def test_tls_carrier_gives_the_connection_its_certificate():
    """Over a TLS carrier the transport is an ISSLTransport reporting the TLS
    connection's client certificate (S4.7); over a clear one it is not."""
    assert ISSLTransport.providedBy(Carrier(tls=FakeTls()).transport)
    assert Carrier(tls=FakeTls()).transport.getPeerCertificate() == "the certificate"
    assert not ISSLTransport.providedBy(Carrier().transport)
