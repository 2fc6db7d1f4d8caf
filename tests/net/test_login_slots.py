"""Tests of what a client costs before it logs in (S4.2, S10.4): the slots of a service
for unauthenticated sockets, the login deadline, and the STOMP byte budget, through the
real factories on task.Clock and StringTransport."""

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs
from twisted.python.failure import Failure

from mqgate.core.broker import Broker
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.engine import REFUSAL_GRACE
from mqgate.net.pool import LoginSlots
from mqgate.net.stomp import StompServerFactory
from mqgate.net.unify import PortUnificationFactory
from mqgate.sniff import AMQP, AMQP_SASL, STOMP
from mqgate.stomp.frames import FrameParser
from tests.net.test_pool import AmqpHarness, AnsweringAuthenticator, StepClock
from tests.net.test_unify import RecordingFactory, Rejections

CONNECT = b"CONNECT\naccept-version:1.2\nhost:mqgate\nlogin:admin\npasscode:admin\n\n\x00"


def frames_of(transport):
    """The STOMP frames the broker wrote on C{transport}."""
    parser = FrameParser("1.2")
    frames = parser.feed(transport.value())
    while parser.paused:
        frames += parser.resume("1.2")
    return [f for f in frames if hasattr(f, "command")]


class Stomp:
    """A STOMP factory with a given number of unauthenticated slots."""

    def __init__(self, slots=2, timeout=20, max_bytes=16 * 1024):
        self.clock = StepClock()
        self.authenticator = AnsweringAuthenticator()
        self.factory = StompServerFactory(
            broker=Broker(self.clock), authenticator=self.authenticator,
            clock=self.clock, flusher=_Flusher(), setup_timeout=timeout,
            glue_config=StompGlueConfig(), max_unauthenticated_bytes=max_bytes)
        self.slots = self.factory.login_slots = LoginSlots("stomp", slots, self.clock)
        self.ports = iter(range(30000, 31000))

    def connect(self):
        address = IPv4Address("TCP", "127.0.0.1", next(self.ports))
        protocol = self.factory.buildProtocol(address)
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        return protocol, transport


class _Flusher:
    """Flushes at once: the tests look at what was written right after each step."""

    def mark(self, protocol):
        protocol.flush()


# -- the slots themselves -----------------------------------------------------------------


def test_slots_are_taken_up_to_the_limit_and_given_back_once():
    """A service hands out at most its limit of slots; a released slot is free again,
    and releasing it twice frees it once."""
    slots = LoginSlots("jms", 2, StepClock())
    first, second = slots.take(), slots.take()
    assert slots.take() is None and slots.refused == 1
    first.release()
    first.release()
    assert slots.held == 1 and slots.take() is not None and slots.take() is None


def test_refusals_are_logged_within_a_budget_naming_the_setting():
    """A flood of refused sockets makes a few log lines naming the setting, not one
    line per socket."""
    slots = LoginSlots("jms", 1, StepClock())
    slots.take()
    with capturedLogs() as events:
        for _ in range(100):
            slots.take()
    lines = [e for e in events if "not logged in yet" in e["log_format"]]
    assert 1 <= len(lines) <= 5
    assert "mqgate.authentication.max_unauthenticated" in lines[0]["log_format"]


# -- STOMP: refused at once, given back at login, closed at the deadline ------------------


def test_a_stomp_socket_past_the_slots_gets_an_error_at_once():
    """With every slot taken by sockets that have not logged in, a new STOMP socket gets
    an ERROR frame at once, before it says anything, and is closed."""
    stomp = Stomp(slots=2)
    stomp.connect(), stomp.connect()
    _, transport = stomp.connect()
    (error,) = frames_of(transport)
    assert error.command == "ERROR" and error.get("message") == "resource limit exceeded"
    assert b"not logged in yet" in error.body
    assert transport.disconnecting


def test_a_logged_in_connection_gives_its_slot_back():
    """Once CONNECTED is written the connection no longer counts as unauthenticated: a
    logged-in client never takes the room of the ones still logging in."""
    stomp = Stomp(slots=1)
    protocol, transport = stomp.connect()
    assert stomp.slots.held == 1
    protocol.dataReceived(CONNECT)
    stomp.authenticator.succeed_all()
    assert frames_of(transport)[0].command == "CONNECTED"
    assert stomp.slots.held == 0
    _, other = stomp.connect()
    assert not other.disconnecting


def test_a_lost_socket_gives_its_slot_back():
    """A socket that goes away before logging in frees its slot."""
    stomp = Stomp(slots=1)
    protocol, _ = stomp.connect()
    protocol.connectionLost(Failure(ConnectionDone()))
    assert stomp.slots.held == 0


def test_a_silent_stomp_socket_is_closed_at_the_deadline_with_an_error():
    """A socket that never sends CONNECT is told so in an ERROR frame and closed when the
    login deadline passes, not later; the log names the setting."""
    stomp = Stomp(timeout=7)
    protocol, transport = stomp.connect()
    stomp.clock.advance(6.9)
    assert not transport.disconnecting
    with capturedLogs() as events:
        stomp.clock.advance(0.1)
    (error,) = frames_of(transport)
    assert error.command == "ERROR" and b"not logged in" in error.body
    assert transport.disconnecting
    assert any("client.response.timeout" in e["log_format"] for e in events)


def test_a_stomp_client_waiting_for_its_login_check_is_closed_at_the_deadline():
    """A login whose check has not answered by the deadline ends the connection there;
    the late answer is then ignored."""
    stomp = Stomp(timeout=5)
    protocol, transport = stomp.connect()
    protocol.dataReceived(CONNECT)
    stomp.clock.advance(5)
    assert transport.disconnecting
    written = transport.value()
    stomp.authenticator.succeed_all()
    assert transport.value() == written


def test_a_huge_stomp_body_before_connect_is_cut_off_after_the_budget():
    """A SEND with a 32 MB body before CONNECT gets an ERROR at its first read (S10.4);
    the rest of the body is never waited for."""
    stomp = Stomp()
    protocol, transport = stomp.connect()
    protocol.dataReceived(b"SEND\ndestination:/queue/a\ncontent-length:33554432\n\n"
                          + b"x" * 60000)
    (error,) = frames_of(transport)
    assert error.get("message") in ("not connected", "too much data before CONNECTED")
    assert transport.disconnecting and protocol.engine.finished


def test_a_huge_connect_frame_is_cut_off_after_the_budget():
    """A CONNECT frame larger than the budget (headers or body) gets an ERROR as soon as
    the budget is passed."""
    stomp = Stomp(max_bytes=4096)
    protocol, transport = stomp.connect()
    protocol.dataReceived(b"CONNECT\naccept-version:1.2\nx:" + b"y" * 4000)
    assert not transport.disconnecting
    protocol.dataReceived(b"y" * 4000)
    (error,) = frames_of(transport)
    assert error.get("message") == "too much data before CONNECTED"
    assert transport.disconnecting


# -- AMQP: closed at once past the slots; a pool refusal is quick -------------------------


def test_an_amqp_socket_past_the_slots_is_closed_at_once(tmp_path):
    """With no slot left, an AMQP socket is closed at once: nothing can be said in AMQP
    before the client's header, and waiting for it would hold the socket."""
    amqp = AmqpHarness(tmp_path)
    amqp.factory.pool = None
    amqp.factory.login_slots = LoginSlots("jms", 1, amqp.clock)
    address = IPv4Address("TCP", "127.0.0.1", 40001)
    first = amqp.factory.buildProtocol(address)
    first.makeConnection(StringTransport(peerAddress=address))
    second = amqp.factory.buildProtocol(address)
    transport = StringTransport(peerAddress=address)
    second.makeConnection(transport)
    assert transport.disconnecting and transport.value() == b""


def test_an_amqp_client_refused_by_the_pool_costs_no_password_check(tmp_path):
    """A connection the pool has no room for is answered without a password check (its
    SASL succeeds unchecked and its open gets a close with the reason)."""
    amqp = AmqpHarness(tmp_path)
    amqp.connect(), amqp.connect()
    checks = len(amqp.authenticator.pending)
    third = amqp.connect()
    assert len(amqp.authenticator.pending) == checks
    assert str(third.close_error().condition) == "amqp:resource-limit-exceeded"


def test_an_idle_amqp_socket_refused_by_the_pool_is_dropped_after_the_grace(tmp_path):
    """An AMQP socket the pool refused that never speaks is dropped after a few seconds'
    grace, not after the login deadline."""
    amqp = AmqpHarness(tmp_path)
    amqp.connect(), amqp.connect()
    address = IPv4Address("TCP", "127.0.0.1", 40009)
    protocol = amqp.factory.buildProtocol(address)
    transport = StringTransport(peerAddress=address)
    protocol.makeConnection(transport)
    assert protocol.refused is not None
    amqp.clock.advance(REFUSAL_GRACE)
    assert transport.disconnecting


# -- the sniffer: slots taken first, handed on --------------------------------------------


class SlotTaker(RecordingFactory):
    """Builds recorders that adopt the sniffer's slot."""

    def buildProtocol(self, addr):
        proto = super().buildProtocol(addr)
        proto.slots = []
        proto.adopt_login_slot = proto.slots.append
        return proto


def unified(slots, factories, rejection=None):
    clock = StepClock()
    factory = PortUnificationFactory(factories, clock, timeout=5,
                                     **({"rejection": rejection} if rejection else {}))
    factory.login_slots = slots

    def connect():
        proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
        transport = StringTransport()
        proto.makeConnection(transport)
        return proto, transport
    return clock, connect


def test_the_sniffer_takes_a_slot_and_hands_it_on():
    """A socket takes its slot in the sniffer; the protocol it is handed to gets that
    same slot (it does not take a second one)."""
    slots = LoginSlots("jms", 1, StepClock())
    stomp = SlotTaker("stomp")
    _, connect = unified(slots, {STOMP: stomp})
    proto, _ = connect()
    assert slots.held == 1
    proto.dataReceived(b"CONNECT\n")
    (inner,) = stomp.built
    assert len(inner.slots) == 1 and slots.held == 1
    inner.slots[0].release()
    assert slots.held == 0


def test_the_sniffer_closes_a_socket_past_the_slots_at_once():
    """Past the service's slots, a new socket is closed by the sniffer before it reads
    anything."""
    slots = LoginSlots("jms", 1, StepClock())
    _, connect = unified(slots, {STOMP: SlotTaker("stomp")})
    connect()
    proto, transport = connect()
    assert transport.disconnected or transport.disconnecting
    proto.dataReceived(b"CONNECT\n")
    assert proto.inner is None


def test_a_rejected_or_lost_socket_gives_its_slot_back():
    """A socket rejected by the sniffer (garbage, timeout) or lost before a decision
    frees its slot."""
    slots = LoginSlots("jms", 2, StepClock())
    clock, connect = unified(slots, {STOMP: SlotTaker("stomp")}, Rejections())
    garbage, _ = connect()
    garbage.dataReceived(b"\x00\x01garbage")
    silent, _ = connect()
    clock.advance(5)
    assert slots.held == 0
    lost, _ = connect()
    lost.connectionLost(Failure(ConnectionDone()))
    assert slots.held == 0


def test_a_protocol_without_slots_frees_the_sniffers():
    """A protocol that does not take slots (any but the engines) gets the connection and
    the slot is freed."""
    slots = LoginSlots("jms", 1, StepClock())
    amqp = RecordingFactory("amqp")
    _, connect = unified(slots, {AMQP: amqp, AMQP_SASL: amqp})
    proto, _ = connect()
    proto.dataReceived(b"AMQP\x00\x01\x00\x00")
    assert amqp.built and slots.held == 0


def test_the_guard_learns_the_clients_address_and_service(tmp_path):
    """The glue passes the client's host and its service to the authenticator, so that
    failed logins slow down that address only, and checks are bounded per service."""
    stomp = Stomp()
    seen = []
    original = stomp.authenticator.authenticate

    def authenticate(username, password, source=None, service=None):
        seen.append((source, service))
        return original(username, password, source, service)
    stomp.authenticator.authenticate = authenticate
    protocol, _ = stomp.connect()
    protocol.dataReceived(CONNECT)
    assert seen == [("127.0.0.1", "jms")]
    stomp.authenticator.succeed_all()


