"""The client's port mapper question (FACTS 1.1): it says its version first, reads
the table up to the terminator, and a reply that is not a table is a named failure."""

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.client.endpoints import LookupFailed, PortMapperLookup
from tests.deferreds import result

TABLE = (b"101 mqgate 301\n"
         b"portmapper tcp PORTMAPPER 7676 [brokerid=b1]\n"
         b"jms tcp NORMAL 40001\n"
         b"ssljms tls NORMAL 40002\n"
         b".\n")


def asked():
    protocol, transport = PortMapperLookup(), StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def test_sends_its_version_and_stops_at_the_terminator():
    """The client writes '101\\n' at once, closes once the '.' line came (however the
    table was cut), and reads every service."""
    protocol, transport = asked()
    assert transport.value() == b"101\n"
    protocol.dataReceived(TABLE[:30])
    assert not transport.disconnecting
    protocol.dataReceived(TABLE[30:])
    assert transport.disconnecting
    protocol.connectionLost(Failure(ConnectionDone()))
    name, _version, entries = result(protocol.result)
    assert name == "mqgate"
    assert [(e.name, e.protocol, e.port) for e in entries][1:] == [
        ("jms", "tcp", 40001), ("ssljms", "tls", 40002)]


def test_a_reply_that_is_not_a_table_fails_by_name():
    """Anything but a port mapper table (an HTTP server, say) fails the lookup with
    LookupFailed saying the answer cannot be read."""
    protocol, _transport = asked()
    protocol.dataReceived(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    protocol.connectionLost(Failure(ConnectionDone()))
    with pytest.raises(LookupFailed, match="cannot be read"):
        result(protocol.result)
