"""Tests for port unification: sniff, hand over, replay, reject, time out (S1.1)."""

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IHandshakeListener
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport, StringTransportWithDisconnection
from twisted.python.failure import Failure
from zope.interface import implementer

from mqgate.net.unify import AMQP_HEADER, PortUnificationFactory, reject_with_amqp_header
from mqgate.sniff import AMQP, AMQP_SASL, HTTP, NEED_MORE, SNIFF_BUDGET, STOMP, UNKNOWN

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
ADDR = IPv4Address("TCP", "127.0.0.1", 50000)


class Recorder(Protocol):
    """Records what happens to it."""

    def __init__(self, name):
        self.name = name
        self.data = []
        self.made_with = None
        self.lost = []

    def connectionMade(self):
        self.made_with = self.transport

    def dataReceived(self, data):
        self.data.append(data)

    def connectionLost(self, reason):
        self.lost.append(reason)

    @property
    def received(self):
        return b"".join(self.data)


@implementer(IHalfCloseableProtocol, IHandshakeListener)
class HalfCloseRecorder(Recorder):
    """A Recorder that also wants half-close and handshake notifications."""

    def readConnectionLost(self):
        self.lost.append("read")

    def writeConnectionLost(self):
        self.lost.append("write")

    def handshakeCompleted(self):
        self.lost.append("handshake")


class RecordingFactory(Factory):
    """Builds Recorders (or nothing, when C{decline}), keeping each one and the addr."""

    def __init__(self, name, protocol_class=Recorder, decline=False):
        self.name = name
        self.protocol_class = protocol_class
        self.decline = decline
        self.built = []
        self.addrs = []
        self.shut_down = 0

    def buildProtocol(self, addr):
        self.addrs.append(addr)
        if self.decline:
            return None
        proto = self.protocol_class(self.name)
        proto.factory = self
        self.built.append(proto)
        return proto

    def shutdown(self):
        self.shut_down += 1


class Rejections:
    """A rejection callable that records its calls and closes the transport."""

    def __init__(self):
        self.calls = []

    def __call__(self, transport, kind):
        self.calls.append(kind)
        transport.loseConnection()


def setup(factories=None, timeout=5.0, transport_class=StringTransport, **kwargs):
    """A connected unification protocol, its transport, clock and inner factories."""
    clock = Clock()
    if factories is None:
        amqp, stomp = RecordingFactory("amqp"), RecordingFactory("stomp")
        factories = {AMQP: amqp, AMQP_SASL: amqp, STOMP: stomp}
    unified = PortUnificationFactory(factories, clock, timeout=timeout, **kwargs)
    proto = unified.buildProtocol(ADDR)
    transport = transport_class()
    transport.protocol = proto
    proto.makeConnection(transport)
    return proto, transport, clock, factories


def test_whole_header_in_one_read_hands_over_and_replays():
    """An AMQP SASL header goes to the AMQP factory's protocol, bytes replayed (S1.1)."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(SASL_HEADER + b"\x00\x00\x00\x10")
    inner = factories[AMQP].built[0]
    assert proto.inner is inner and proto.kind is AMQP_SASL
    assert inner.made_with is transport
    assert inner.received == SASL_HEADER + b"\x00\x00\x00\x10"
    assert factories[AMQP].addrs == [ADDR]


def test_byte_at_a_time_arrival():
    """Fed byte by byte, nothing is built until the pattern is whole; all bytes replayed."""
    proto, transport, clock, factories = setup()
    frame = b"\n\nCONNECT\naccept-version:1.2\n\n\x00"
    for n, byte in enumerate(frame):
        proto.dataReceived(bytes((byte,)))
        if n < len(b"\n\nCONNECT\n") - 1:
            assert factories[STOMP].built == [], n
    inner = factories[STOMP].built[0]
    assert inner.received == frame
    assert factories[AMQP].built == [] and transport.value() == b""


def test_after_handoff_data_is_forwarded_unchanged():
    """After the handoff every read goes straight to the inner protocol."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(SASL_HEADER)
    proto.dataReceived(b"more")
    proto.dataReceived(b"and more")
    assert factories[AMQP].built[0].data == [SASL_HEADER, b"more", b"and more"]


def test_connection_lost_forwarded():
    """connectionLost reaches the inner protocol with the same reason, once."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(SASL_HEADER)
    reason = Failure(ConnectionDone())
    proto.connectionLost(reason)
    assert factories[AMQP].built[0].lost == [reason]
    assert proto.inner is None


def test_no_delayed_calls_left_after_handoff():
    """Handing over cancels the sniffing timeout."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(b"STOMP\r\n")
    assert clock.getDelayedCalls() == []
    clock.advance(60)
    assert not transport.disconnecting


def test_timeout_rejects_with_need_more():
    """Nothing recognisable within the timeout: rejected, kind NEED_MORE (S1.1)."""
    rejections = Rejections()
    proto, transport, clock, factories = setup(timeout=5.0, rejection=rejections)
    proto.dataReceived(b"AMQ")
    clock.advance(4.99)
    assert rejections.calls == []
    clock.advance(0.01)
    assert rejections.calls == [NEED_MORE] and transport.disconnecting
    assert clock.getDelayedCalls() == []
    assert factories[AMQP].built == []


def test_silent_client_times_out_with_default_rejection():
    """A client that sends nothing gets the AMQP 1.0 header and is closed."""
    proto, transport, clock, factories = setup(timeout=2.0)
    clock.advance(2.0)
    assert transport.value() == AMQP_HEADER and transport.disconnecting


def test_unknown_bytes_rejected_at_once_with_amqp_header():
    """Unrecognisable bytes get the AMQP 1.0 header and a close, at once (AMQP s2.2)."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(b"AMQP\x00\x00\x09\x01")
    assert transport.value() == AMQP_HEADER and transport.disconnecting
    assert proto.kind is UNKNOWN and proto.inner is None
    assert clock.getDelayedCalls() == []


def test_kind_without_factory_rejected_with_that_kind():
    """A recognised protocol this port does not serve is rejected, naming the kind."""
    rejections = Rejections()
    proto, transport, clock, factories = setup(rejection=rejections)
    proto.dataReceived(b"GET / HTTP/1.1\r\n")
    assert rejections.calls == [HTTP]


def test_declining_factory_rejected():
    """A factory whose buildProtocol returns None (e.g. a full pool) means rejection."""
    rejections = Rejections()
    declining = RecordingFactory("amqp", decline=True)
    proto, transport, clock, _ = setup({AMQP_SASL: declining}, rejection=rejections)
    proto.dataReceived(SASL_HEADER)
    assert rejections.calls == [AMQP_SASL] and declining.addrs == [ADDR]


def test_bytes_after_rejection_are_dropped():
    """Once rejected, further reads are ignored and nothing is built."""
    rejections = Rejections()
    proto, transport, clock, factories = setup(rejection=rejections)
    proto.dataReceived(b"\x00")
    proto.dataReceived(SASL_HEADER)
    assert rejections.calls == [UNKNOWN] and factories[AMQP].built == []
    proto.connectionLost(Failure(ConnectionDone()))


def test_connection_lost_before_decision_cancels_timer():
    """A client that leaves while being sniffed leaves no timer and no protocol behind."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(b"CONN")
    proto.connectionLost(Failure(ConnectionDone()))
    assert clock.getDelayedCalls() == []
    assert factories[STOMP].built == []


def test_buffer_bounded_by_sniff_budget():
    """Endless heart-beat EOLs are rejected once the sniff budget is spent (docs/design.md)."""
    rejections = Rejections()
    proto, transport, clock, factories = setup(rejection=rejections)
    for _ in range(SNIFF_BUDGET - 1):
        proto.dataReceived(b"\n")
    assert rejections.calls == []
    proto.dataReceived(b"\n")
    assert rejections.calls == [UNKNOWN]


def test_inner_closing_in_connection_made_gets_no_replay():
    """An inner protocol that closes in connectionMade is not fed the buffered bytes."""

    class Closer(Recorder):
        def connectionMade(self):
            self.transport.loseConnection()

    closer = RecordingFactory("amqp", protocol_class=Closer)
    proto, transport, clock, _ = setup(
        {AMQP_SASL: closer}, transport_class=StringTransportWithDisconnection)
    proto.dataReceived(SASL_HEADER)
    inner = closer.built[0]
    assert inner.data == [] and len(inner.lost) == 1


def test_half_close_and_handshake_forwarded_when_inner_provides_them():
    """The wrapper provides IHalfCloseableProtocol/IHandshakeListener iff the inner does."""
    half = RecordingFactory("amqp", protocol_class=HalfCloseRecorder)
    proto, transport, clock, _ = setup({AMQP_SASL: half, STOMP: RecordingFactory("s")})
    assert not IHalfCloseableProtocol.providedBy(proto)
    proto.dataReceived(SASL_HEADER)
    assert IHalfCloseableProtocol.providedBy(proto) and IHandshakeListener.providedBy(proto)
    proto.handshakeCompleted()
    proto.readConnectionLost()
    proto.writeConnectionLost()
    assert half.built[0].lost == ["handshake", "read", "write"]

    plain, _, _, _ = setup({STOMP: RecordingFactory("s")})
    plain.dataReceived(b"STOMP\n")
    assert not IHalfCloseableProtocol.providedBy(plain)


def test_inner_writes_go_to_the_real_transport():
    """The inner protocol writes to the transport itself, not through the wrapper."""
    proto, transport, clock, factories = setup()
    proto.dataReceived(SASL_HEADER)
    factories[AMQP].built[0].transport.write(b"reply")
    assert transport.value() == b"reply"


def test_factory_starts_stops_and_shuts_down_each_inner_factory_once():
    """Start, stop and shutdown reach each inner factory once, even if shared by kinds."""
    started = []

    class Tracking(RecordingFactory):
        def startFactory(self):
            started.append(("start", self.name))

        def stopFactory(self):
            started.append(("stop", self.name))

    amqp, stomp = Tracking("amqp"), Tracking("stomp")
    unified = PortUnificationFactory({AMQP: amqp, AMQP_SASL: amqp, STOMP: stomp}, Clock())
    unified.doStart()
    unified.shutdown()
    unified.doStop()
    assert started == [("start", "amqp"), ("start", "stomp"),
                       ("stop", "amqp"), ("stop", "stomp")]
    assert (amqp.shut_down, stomp.shut_down) == (1, 1)


def test_factories_may_be_keyed_by_kind_names():
    """Factory keys may be the configuration names of the kinds ("stomp", ...)."""
    stomp = RecordingFactory("stomp")
    proto, transport, clock, _ = setup({"stomp": stomp})
    proto.dataReceived(b"CONNECT\n")
    assert len(stomp.built) == 1


@pytest.mark.parametrize("key", ["stmp", UNKNOWN, NEED_MORE, "need-more"])
def test_factories_keyed_by_non_protocol_kinds_refused(key):
    """A key that is not a protocol kind is refused, naming it and the allowed kinds."""
    with pytest.raises(ValueError, match="allowed: amqp, amqp-sasl"):
        PortUnificationFactory({key: RecordingFactory("x")}, Clock())


def test_default_rejection_writes_header_then_closes():
    """The default rejection writes AMQP\\x00\\x01\\x00\\x00 and closes (AMQP s2.2)."""
    transport = StringTransport()
    reject_with_amqp_header(transport, UNKNOWN)
    assert transport.value() == b"AMQP\x00\x01\x00\x00" and transport.disconnecting


def test_log_prefix_names_the_inner_protocol():
    """Log lines of a handed-over connection carry the inner protocol's prefix."""
    proto, transport, clock, factories = setup()
    assert proto.logPrefix() == "PortUnificationProtocol"
    proto.dataReceived(b"STOMP\n")
    assert proto.logPrefix() == "Recorder (unified)"
