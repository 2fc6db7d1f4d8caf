"""The adapter as its transport's push producer (S9.3) and the client profile's TCP
keep-alive (S9.7): real engines on StringTransports, the real core, one Clock."""

import socket

from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import RECEIVER, SENDER, Transfer
from mqgate.egress.profiles import TcpKeepAlive
from mqgate.egress.scheduler import G1

from tests.net.test_amqp_adapter import Harness, attach, received


def transfers(peer, since=0):
    return peer.performatives(Transfer, since)


def test_a_paused_transport_gets_nothing_until_it_resumes(tmp_path):
    """S9.3: while the transport says its buffer is full, deliveries wait in the
    egress queues; when it resumes they go out in order, none lost."""
    harness = Harness(tmp_path)
    consumer, producer = harness.opened(port=40001), harness.opened(port=40002)
    attach(consumer, RECEIVER, "topic://prices", credit=100)
    snd = attach(producer, SENDER, "topic://prices")
    consumer.protocol.pauseProducing()          # what a full socket buffer does
    mark = len(consumer.written)
    for n in range(5):
        snd.send(encode_message(f"m{n}".encode()), settled=True)
    producer.pump()
    harness.clock.advance(0)
    consumer.collect()
    assert transfers(consumer, mark) == []
    scheduler = consumer.protocol.glue.egress.scheduler
    assert scheduler.queued_messages == 5
    consumer.protocol.resumeProducing()
    consumer.pump()
    assert [bytes(e.payload)[-2:] for e in received(consumer)] == \
        [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert scheduler.queue_stats(G1).deliveries == 5 and scheduler.queued_messages == 0


def test_control_frames_wait_on_c1_and_go_first(tmp_path):
    """S9.1: what the engine says while the transport is paused (here the answer to a
    detach) waits on C-1 and is written first when it resumes."""
    harness = Harness(tmp_path)
    peer = harness.opened()
    link = attach(peer, RECEIVER, "queue://q", credit=10)
    peer.protocol.pauseProducing()
    link.detach(closed=True)
    peer.protocol.dataReceived(peer.client.data_to_send())
    assert peer.transport.value() == b""
    assert peer.protocol.glue.egress.holding_control
    peer.protocol.resumeProducing()
    peer.collect()
    assert not peer.protocol.glue.egress.holding_control
    assert [d.closed for d in peer.performatives()[-1:]] == [True]


class KeepAliveTransport:
    """Stands for a TCP transport: a real socket for the options."""

    disconnecting = False

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def getHandle(self):
        return self.sock


def test_the_profile_keepalive_reaches_the_socket(tmp_path):
    """S9.7: a profile's TCP keep-alive count, idle and interval are set on the
    client's socket; a profile with keep-alive off turns it off."""
    protocol = Harness(tmp_path).connect().protocol
    transport = KeepAliveTransport()
    protocol.transport = transport
    try:
        protocol.set_keepalive(TcpKeepAlive(enabled=True, count=7, idle=11, interval=2))
        sock = transport.sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 7
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 11
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 2
        protocol.set_keepalive(TcpKeepAlive(enabled=False))
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    finally:
        transport.sock.close()


def test_a_ping_that_cannot_be_written_is_connection_trouble(tmp_path):
    """S9.4: probing a client whose socket is still full adds a penalty to its
    slowness."""
    harness = Harness(tmp_path)
    peer = harness.opened()
    meter = peer.protocol.glue.egress.meter
    before = meter.share()
    peer.protocol.pauseProducing()
    peer.protocol.ping()
    assert meter.share() > before
