"""Tests for the port mapper protocol: write the table, linger, close (S1.3, FACTS 1.1)."""

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.net.portmapper import DEFAULT_TIMEOUT, PortMapperFactory
from mqgate.portmap.table import ServiceEntry, parse_table, render_table

TABLE = b"101 mqgate 301\njms tcp NORMAL 40001\n.\n"


class RecordingTransport(StringTransport):
    """A StringTransport that also records an abort."""

    aborted = False

    def abortConnection(self):
        self.aborted = True
        super().abortConnection()


def connect(source=lambda: TABLE, timeout=DEFAULT_TIMEOUT):
    """A connected port mapper protocol, its transport and its clock."""
    clock = Clock()
    factory = PortMapperFactory(source, clock, timeout=timeout)
    proto = factory.buildProtocol(None)
    transport = RecordingTransport()
    proto.makeConnection(transport)
    return proto, transport, clock


def lose(proto):
    proto.connectionLost(Failure(ConnectionDone()))


def test_table_written_on_connect_before_client_speaks():
    """The table is written at once, without waiting for the client's '101' (FACTS 1.1)."""
    proto, transport, clock = connect()
    assert transport.value() == TABLE
    assert not transport.disconnecting


def test_table_source_read_per_connection():
    """Each client gets the table as it is when it connects: services register (S1.3)."""
    services = [ServiceEntry("portmapper", "tcp", "PORTMAPPER", 7676)]
    source = lambda: render_table("mqgate", services)          # noqa: E731
    first = connect(source)[1].value()
    services.append(ServiceEntry("jms", "tcp", "NORMAL", 40001))
    second = connect(source)[1].value()
    assert [e.name for e in parse_table(first)[2]] == ["portmapper"]
    assert [e.name for e in parse_table(second)[2]] == ["portmapper", "jms"]


def test_client_line_discarded_then_close_on_client_close():
    """The client's '101' line is read and discarded; its close leaves no timer (S1.3)."""
    proto, transport, clock = connect()
    proto.dataReceived(b"101\n")
    assert transport.value() == TABLE and not transport.disconnecting
    lose(proto)
    assert clock.getDelayedCalls() == []


def test_silent_client_closed_after_timeout():
    """A client that neither speaks nor closes is closed after the read timeout."""
    proto, transport, clock = connect(timeout=0.5)
    clock.advance(0.49)
    assert not transport.disconnecting
    clock.advance(0.01)
    assert transport.disconnecting and not transport.aborted
    lose(proto)
    assert clock.getDelayedCalls() == []


def test_client_that_never_goes_is_aborted_after_second_timeout():
    """If our close cannot complete within another timeout, the connection is aborted."""
    proto, transport, clock = connect(timeout=0.5)
    proto.dataReceived(b"101\n")
    clock.advance(0.5)
    assert transport.disconnecting and not transport.aborted
    clock.advance(0.5)
    assert transport.aborted
    assert clock.getDelayedCalls() == []


def test_half_close_closes_at_once():
    """A client that shuts down its sending side is closed at once, table flushed first."""
    proto, transport, clock = connect()
    assert IHalfCloseableProtocol.providedBy(proto)
    proto.dataReceived(b"101\n")
    proto.readConnectionLost()
    assert transport.disconnecting and transport.value() == TABLE
    proto.readConnectionLost()                  # a second end changes nothing
    lose(proto)
    assert clock.getDelayedCalls() == []


def test_too_many_lines_close_at_once():
    """After the version line and five more, the broker stops listening (FACTS 1.1)."""
    proto, transport, clock = connect()
    proto.dataReceived(b"101\n" + b"x\n" * 4)
    assert not transport.disconnecting
    proto.dataReceived(b"x\n")
    assert transport.disconnecting


def test_too_many_bytes_close_at_once():
    """A client streaming bytes without line ends is closed once it passes the budget."""
    proto, transport, clock = connect()
    proto.dataReceived(b"9" * 768)
    assert not transport.disconnecting
    proto.dataReceived(b"9")
    assert transport.disconnecting


def test_write_connection_lost_waits_for_read_side_or_timer():
    """When the client stops reading we keep the timer; it closes the connection."""
    proto, transport, clock = connect(timeout=0.5)
    proto.writeConnectionLost()
    assert not transport.disconnecting
    clock.advance(0.5)
    assert transport.disconnecting


def test_client_reads_what_the_protocol_wrote():
    """The bytes written parse back with the client's reader (S1.3 end to end in memory)."""
    entries = [ServiceEntry("portmapper", "tcp", "PORTMAPPER", 7676, {"brokerid": "b"}),
               ServiceEntry("jms", "tcp", "NORMAL", 40001)]
    proto, transport, clock = connect(lambda: render_table("mqgate", entries))
    assert parse_table(transport.value()) == ("mqgate", "301", entries)
