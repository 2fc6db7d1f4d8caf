"""The WebSocket carrier of the gateway services (S10.3), in memory: a handshake, the
broker connection it carries, frames out, and flow control both ways."""

import base64
import os

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import capturedLogs

from mqgate.stomp.frames import encode_frame
from mqgate.ws.server import BrokerWebSocketFactory


class Carried(Protocol):
    """The broker connection's stand-in: records, and is the transport's producer."""

    def __init__(self):
        self.received = bytearray()
        self.paused = self.resumed = 0
        self.lost = False

    def connectionMade(self):
        self.transport.registerProducer(self, True)

    def dataReceived(self, data):
        self.received += data

    def connectionLost(self, reason):
        self.lost = True

    def pauseProducing(self):
        self.paused += 1

    def resumeProducing(self):
        self.resumed += 1

    def stopProducing(self):
        pass


class Idle:
    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass

    def stopProducing(self):
        pass


def handshake(ws, protocols, origin=None):
    key = base64.b64encode(os.urandom(16))
    ws.dataReceived(b"GET /ws HTTP/1.1\r\nHost: broker:8080\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
                    + (b"Origin: " + origin + b"\r\n" if origin else b"")
                    + b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: "
                    + protocols + b"\r\n\r\n")


def open_ws(protocols):
    """A WebSocket through the handshake; C{(websocket, tcp transport, carried)}."""
    carried = []
    factory = Factory()
    factory.buildProtocol = lambda addr: carried.append(Carried()) or carried[-1]
    ws_factory = BrokerWebSocketFactory(factory, service="httpjms",
                                        reactor=MemoryReactorClock(), secure=False,
                                        ping_interval=0)
    ws = ws_factory.buildProtocol(IPv4Address("TCP", "192.0.2.1", 5000))
    tcp = StringTransport(peerAddress=IPv4Address("TCP", "192.0.2.1", 5000))
    tcp.registerProducer(Idle(), True)   # twisted.web's channel, before the upgrade
    ws.makeConnection(tcp)
    handshake(ws, protocols)
    assert tcp.value().startswith(b"HTTP/1.1 101"), tcp.value()
    tcp.clear()
    return ws, tcp, carried[0]


def frames(data):
    """Unmasked server frames: C{[(opcode, payload)]}."""
    out = []
    while data:
        opcode, length, at = data[0] & 0x0F, data[1] & 0x7F, 2
        if length == 126:
            length, at = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, at = int.from_bytes(data[2:10], "big"), 10
        out.append((opcode, data[at:at + length]))
        data = data[at + length:]
    return out


def masked(opcode, payload, fin=True):
    """A client frame (masked, as RFC 6455 requires of clients), payload < 126 bytes."""
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | len(payload)]) + mask + body


def test_messages_in_are_one_byte_stream():
    """Text and binary messages alike reach the carried connection as one stream, from
    the client's address."""
    ws, _tcp, carried = open_ws(b"amqp")
    ws.dataReceived(masked(2, b"AMQP\x03") + masked(1, b"\x01\x00\x00"))
    assert bytes(carried.received) == b"AMQP\x03\x01\x00\x00"
    assert carried.transport.getPeer().host == "192.0.2.1"


def test_a_fragmented_message_is_passed_on_as_it_comes():
    """A message in several frames is passed on frame by frame, not held until its
    last frame (a connection holds one read, not a whole message)."""
    ws, _tcp, carried = open_ws(b"amqp")
    ws.dataReceived(masked(2, b"AMQP", fin=False))
    assert bytes(carried.received) == b"AMQP"
    ws.dataReceived(masked(0, b"\x00\x01\x00\x00"))
    assert bytes(carried.received) == b"AMQP\x00\x01\x00\x00"


def test_stomp_frames_out_one_per_message():
    """A batch the STOMP engine writes at once goes out as one message per frame, text
    or binary as the body allows."""
    ws, tcp, carried = open_ws(b"v10.stomp, v12.stomp")
    one = encode_frame("MESSAGE", [("destination", "/queue/a")], b"one")
    two = encode_frame("MESSAGE", [("destination", "/queue/a")], b"\xff")
    carried.transport.write(one + two)
    assert frames(tcp.value()) == [(1, one), (2, two)]


def test_amqp_out_is_binary():
    """AMQP output goes out as binary messages."""
    ws, tcp, carried = open_ws(b"binary, AMQPWSB10, amqp")
    carried.transport.write(b"AMQP\x00\x01\x00\x00")
    assert frames(tcp.value()) == [(2, b"AMQP\x00\x01\x00\x00")]


def test_flow_control_both_ways():
    """A full TCP send buffer pauses the carried connection's output; the carried
    connection pausing its reading pauses the TCP connection."""
    ws, tcp, carried = open_ws(b"amqp")
    assert tcp.producer is ws
    ws.pauseProducing()
    assert carried.paused == 1
    ws.resumeProducing()
    assert carried.resumed == 1
    carried.transport.pauseProducing()
    assert tcp.producerState == "paused"
    carried.transport.resumeProducing()
    assert tcp.producerState == "producing"


def test_tcp_loss_is_the_connections_loss():
    """When the TCP connection goes, the carried connection hears connectionLost."""
    ws, tcp, carried = open_ws(b"amqp")
    ws.connectionLost(Failure(ConnectionLost("gone")))
    assert carried.lost


def test_refusals_are_answered_and_logged_within_a_budget():
    """A flood of refused handshakes is answered 403 each time, in at most ten log
    lines a minute (the rest counted), autobahn's own lines included."""
    factory = BrokerWebSocketFactory(Factory(), service="httpjms",
                                     reactor=MemoryReactorClock(), secure=False)
    answers = []
    with capturedLogs() as events:
        for _ in range(30):
            ws = factory.buildProtocol(IPv4Address("TCP", "192.0.2.1", 5000))
            tcp = StringTransport()
            tcp.registerProducer(Idle(), True)   # twisted.web's channel
            ws.makeConnection(tcp)
            handshake(ws, b"amqp", origin=b"http://evil.example")
            answers.append(tcp.value().split(b" ")[1])
    assert answers == [b"403"] * 30
    assert factory.refused == 30
    assert 1 <= len(events) <= 10
