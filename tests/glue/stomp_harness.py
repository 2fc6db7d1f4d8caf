"""A STOMP connection to the real core through the real adapter, on a StringTransport.

The broker side is L{mqgate.net.stomp.StompServerFactory} with the core L{Broker}, the
shared L{Flusher} and one Clock; the client side is raw frames in, frames parsed out.
AMQP producers and consumers join through L{tests.net.test_amqp_adapter.Harness}'s
factory, which shares the same broker, flusher and clock.
"""

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.stomp import StompServerFactory
from mqgate.stomp.frames import HEARTBEAT, FrameParser, encode_frame

from tests.net.test_amqp_adapter import Harness


class StompPeer:
    """One STOMP 1.2 connection: a protocol on a StringTransport.

    @ivar frames: every frame the broker wrote, parsed, in order.
    """

    def __init__(self, factory, clock, authenticator, port):
        self.clock = clock
        self.authenticator = authenticator
        self.protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        self.protocol.makeConnection(self.transport)
        self.parser = FrameParser("1.2")
        self.frames = []

    def send(self, command, *headers, body=b""):
        """Write one client frame; headers as C{"name:value"} strings."""
        pairs = [tuple(h.split(":", 1)) for h in headers]
        self.protocol.dataReceived(encode_frame(command, pairs, body, "1.2"))
        self.clock.advance(0)

    def read(self):
        """The frames written since the last read (the Flusher's turn run first)."""
        self.clock.advance(0)
        data = self.transport.value()
        self.transport.clear()
        new = [f for f in self.parser.feed(data) if f is not HEARTBEAT]
        while self.parser.paused:
            new += [f for f in self.parser.resume("1.2") if f is not HEARTBEAT]
        self.frames += new
        return new

    def connect(self):
        self.protocol.dataReceived(encode_frame(
            "CONNECT", [("accept-version", "1.2"), ("host", "h"), ("login", "admin"),
                        ("passcode", "admin")], b"", "1.0"))
        self.authenticator.succeed_all()
        self.clock.advance(0)
        assert [f.command for f in self.read()] == ["CONNECTED"]
        return self

    def subscribe(self, destination, ack="auto", sub_id="s"):
        self.send("SUBSCRIBE", f"destination:{destination}", f"id:{sub_id}", f"ack:{ack}",
                  "receipt:sub")
        assert self.read()[-1].command == "RECEIPT"

    def messages(self):
        self.read()
        return [f for f in self.frames if f.command == "MESSAGE"]

    def errors(self):
        self.read()
        return [f for f in self.frames if f.command == "ERROR"]

    @property
    def closed(self):
        return self.transport.disconnecting

    def lose(self):
        self.protocol.connectionLost(Failure(ConnectionDone()))


class Gateway(Harness):
    """The AMQP harness plus a STOMP factory on the same broker, flusher and clock."""

    def __init__(self, tmp_path, glue_config=None, **kwargs):
        super().__init__(tmp_path, **kwargs)
        self.stomp_factory = StompServerFactory(
            broker=self.broker, authenticator=self.authenticator, clock=self.clock,
            flusher=self.flusher, glue_config=glue_config or StompGlueConfig(),
            setup_timeout=60, egress=self.factory.egress)
        self._ports = iter(range(41000, 42000))

    def stomp(self):
        """A STOMP peer past CONNECT."""
        return StompPeer(self.stomp_factory, self.clock, self.authenticator,
                         next(self._ports)).connect()
