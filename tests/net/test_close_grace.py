"""A connection the broker closes keeps reading, and dropping, what its peer still sends
for a grace, its own side closed, so that the peer gets to read why before the socket
goes (S10.4): closing a TCP socket with input unread resets it."""

from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import ISSLTransport
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import directlyProvides

from mqgate.core.broker import Broker
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.engine import CLOSE_DRAIN, CLOSE_GRACE, Flusher
from mqgate.net.pool import LoginSlots
from mqgate.net.stomp import StompServerFactory
from tests.net.test_amqp_adapter import FakeAuthenticator
from tests.net.test_flow_control import stomp_frame

PEER = IPv4Address("TCP", "127.0.0.1", 40100)


class HalfClosingTransport(StringTransport):
    """A StringTransport that can close its writing side, as TCP's can."""

    write_closed = False

    def loseWriteConnection(self):
        self.write_closed = True


def connect(transport):
    clock = task.Clock()
    factory = StompServerFactory(
        broker=Broker(clock), authenticator=FakeAuthenticator(), clock=clock,
        flusher=Flusher(clock), glue_config=StompGlueConfig(), setup_timeout=30)
    protocol = factory.buildProtocol(PEER)
    protocol.makeConnection(transport)
    return clock, protocol


def test_after_an_error_the_writing_side_closes_and_input_is_dropped_for_a_grace():
    """A SEND before CONNECT gets its ERROR, then our side is closed (not the socket);
    what the peer still sends never reaches the engine, and the socket is dropped once
    the grace is over."""
    transport = HalfClosingTransport(peerAddress=PEER)
    clock, protocol = connect(transport)
    protocol.dataReceived(stomp_frame("SEND", b"x", destination="/queue/a"))
    assert transport.value().startswith(b"ERROR\n")
    assert transport.write_closed and not transport.disconnecting
    fed = []
    protocol.engine.receive_data = fed.append
    protocol.dataReceived(b"y" * 65536)
    assert fed == [] and transport.producerState == "producing"
    protocol.dataReceived(b"y" * CLOSE_DRAIN)
    # Past what the grace drops, the socket is left unread: the peer's writes wait.
    assert fed == [] and transport.producerState == "paused"
    clock.advance(CLOSE_GRACE - 0.1)
    assert not transport.disconnecting
    clock.advance(0.1)
    assert transport.disconnected        # aborted
    protocol.connectionLost(Failure(ConnectionDone()))
    assert clock.getDelayedCalls() == []


def test_a_paused_socket_is_read_again_for_the_grace():
    """A socket paused (here by the pool's back-pressure) when the broker closes it is
    read again, so that what the peer sends is drained instead of left to reset it."""
    transport = HalfClosingTransport(peerAddress=PEER)
    clock, protocol = connect(transport)
    protocol.pause_inbound()
    assert transport.producerState == "paused"
    protocol.shutdown()
    assert transport.value().startswith(b"ERROR\n") and transport.write_closed
    assert transport.producerState == "producing"
    protocol.resume_inbound()        # a late resume changes nothing
    protocol.pause_inbound()         # nor a late pause
    assert transport.producerState == "producing"


def test_a_peer_that_closes_ends_the_grace_early():
    """A peer that closes its socket once it has read our goodbye leaves no timer."""
    transport = HalfClosingTransport(peerAddress=PEER)
    clock, protocol = connect(transport)
    protocol.dataReceived(b"BOGUS\n\n\x00")
    assert transport.write_closed
    protocol.connectionLost(Failure(ConnectionDone()))
    assert clock.getDelayedCalls() == []
    assert not transport.disconnected


def test_a_transport_that_cannot_half_close_is_closed_whole():
    """Over a transport without a writing side of its own to close, the goodbye is
    followed by an ordinary close."""
    transport = StringTransport(peerAddress=PEER)
    clock, protocol = connect(transport)
    protocol.dataReceived(stomp_frame("SEND", b"x", destination="/queue/a"))
    assert transport.value().startswith(b"ERROR\n") and transport.disconnecting


def test_tls_is_closed_whole():
    """A TCP transport running TLS has a writing side to close, but closing it would skip
    TLS's own close: the goodbye is followed by an ordinary close."""
    transport = HalfClosingTransport(peerAddress=PEER)
    directlyProvides(transport, ISSLTransport)
    clock, protocol = connect(transport)
    protocol.dataReceived(stomp_frame("SEND", b"x", destination="/queue/a"))
    assert transport.value().startswith(b"ERROR\n") and transport.disconnecting
    assert not transport.write_closed


class AbortableTransport(HalfClosingTransport):
    """Records that the socket was dropped."""

    aborted = False

    def abortConnection(self):
        self.aborted = True


def test_a_tls_peer_that_never_answers_the_close_is_dropped_after_the_grace():
    """TLS closes the socket only once the peer answers our close_notify; a peer that
    never does (it stopped reading after the ERROR) is dropped after the grace, not
    kept for ever."""
    transport = AbortableTransport(peerAddress=PEER)
    directlyProvides(transport, ISSLTransport)
    clock, protocol = connect(transport)
    protocol.dataReceived(stomp_frame("SEND", b"x", destination="/queue/a"))
    assert transport.disconnecting and not transport.aborted
    clock.advance(CLOSE_GRACE)
    assert transport.aborted


def test_a_socket_closed_at_its_login_deadline_gives_its_login_slot_back_at_once():
    """A socket dropped at the login deadline frees its place among the unauthenticated
    when its ERROR is written, not after the grace, so the next client gets in."""
    transport = HalfClosingTransport(peerAddress=PEER)
    clock = task.Clock()
    factory = StompServerFactory(
        broker=Broker(clock), authenticator=FakeAuthenticator(), clock=clock,
        flusher=Flusher(clock), glue_config=StompGlueConfig(), setup_timeout=5)
    factory.login_slots = LoginSlots("stomp", 1, clock)
    protocol = factory.buildProtocol(PEER)
    protocol.makeConnection(transport)
    assert factory.login_slots.held == 1
    clock.advance(5)
    assert transport.value().startswith(b"ERROR\n") and transport.write_closed
    assert factory.login_slots.held == 0


def test_nothing_is_written_or_half_closed_after_the_connection_is_lost():
    """A goodbye produced after the socket went (a late login answer, a slow-subscriber
    verdict) is dropped: half-closing a closed socket would raise in the reactor."""
    transport = HalfClosingTransport(peerAddress=PEER)
    clock, protocol = connect(transport)
    protocol.connectionLost(Failure(ConnectionDone()))
    written = transport.value()
    protocol.glue.disconnect("disconnected as a slow subscriber")
    protocol.flush()
    assert transport.value() == written and not transport.write_closed
