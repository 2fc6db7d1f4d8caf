"""Every broker connection turns Nagle's algorithm off (TCP_NODELAY): a small frame
written while the previous one is unacknowledged must not wait for the peer's delayed
ACK (up to 40 ms), which a client sending at a light, steady rate sees as latency."""

from twisted.internet.testing import StringTransport

from tests.net.test_close_grace import PEER, connect


class TcpTransport(StringTransport):
    """A StringTransport with the TCP transport's Nagle switch."""

    no_delay = False

    def setTcpNoDelay(self, enabled):
        self.no_delay = enabled


def test_a_connection_turns_nagle_off():
    """The broker's side of a new TCP connection has TCP_NODELAY set."""
    transport = TcpTransport(peerAddress=PEER)
    connect(transport)
    assert transport.no_delay is True


def test_a_transport_without_the_switch_is_left_alone():
    """A transport that is not TCP (a test's, a tunnel's) is used as it is."""
    transport = StringTransport(peerAddress=PEER)
    _clock, protocol = connect(transport)
    assert protocol.engine is not None
