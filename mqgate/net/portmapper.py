"""
The port mapper's Twisted side (S1.3): write the table, let the client go, close.

The source broker (FACTS 1.1) reads the client's optional C{"101\\n"} line under a short
socket timeout, writes the table (even when the read timed out: old clients send
nothing), then reads up to five more lines until end of file or the timeout, so that
the client closes first and the broker's side does not sit in TIME_WAIT.

We write first, at once, and do not wait for the client's line: the table does not
depend on it. Then we discard what the client sends (a bounded amount) until it
closes, or until C{timeout} seconds have passed, and close. A client that does not go
away after a second C{timeout} (it never reads, so our close cannot flush) is aborted.
"""

from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from zope.interface import implementer

__all__ = ["PortMapperFactory", "PortMapperProtocol", "DEFAULT_TIMEOUT"]

#: The source broker's read timeout, C{imq.portmapper.sotimeout} (FACTS 1.1: 500 ms).
DEFAULT_TIMEOUT = 0.5
#: The client's version line plus the five lines the source broker reads after it.
MAX_LINES = 6
#: The source broker's longest version line (PORTMAPPER_VERSION_MAX_LEN), per line.
MAX_LINE_LENGTH = 128


@implementer(IHalfCloseableProtocol)
class PortMapperProtocol(Protocol):
    """One port mapper client: gets the table, then is let go.

    Half-closeable so that a client which shuts down its sending side right after
    C{"101\\n"} still receives the whole table before we close.
    """

    log = Logger()

    def __init__(self, factory):
        self.factory = factory
        self._received = 0
        self._lines = 0
        self._call = None
        self._closing = False

    def connectionMade(self):
        """Write the current table at once and start the linger timer."""
        self.transport.write(self.factory.table_source())
        self._call = self.factory.clock.callLater(self.factory.timeout, self._linger_over)

    def dataReceived(self, data):
        """Discard the client's lines; too many, or too much, and we close now."""
        self._received += len(data)
        self._lines += data.count(b"\n")
        if self._lines >= MAX_LINES or self._received > MAX_LINES * MAX_LINE_LENGTH:
            self._close()

    def readConnectionLost(self):
        """The client has said all it will: close (our writes are flushed first)."""
        self._close()

    def writeConnectionLost(self):
        """The client stopped reading; the read side's end or the timer will close."""

    def connectionLost(self, reason):
        """Forget the timer."""
        self._cancel()

    def _linger_over(self):
        self._call = None
        if self._closing:
            # We asked to close a timeout ago and the table still has not drained.
            self.log.info("port mapper client {peer} did not read the table; dropped",
                          peer=self.transport.getPeer())
            self.transport.abortConnection()
        else:
            self._close()

    def _close(self):
        if self._closing:
            return
        self._closing = True
        self._cancel()
        self.transport.loseConnection()
        self._call = self.factory.clock.callLater(self.factory.timeout, self._linger_over)

    def _cancel(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class PortMapperFactory(Factory):
    """Serve the port mapper table (S1.3).

    @ivar table_source: a callable returning the current table as bytes
        (L{mqgate.portmap.table.render_table} of the running services); called once
        per client, so services that start or stop show up at the next connection.
    @ivar clock: an C{IReactorTime} for the linger timeout.
    @ivar timeout: seconds to wait for the client to close (C{mqgate.portmapper}
        read timeout, FACTS 1.1 default 0.5 s).
    """

    noisy = False  # the service logs its own line; Twisted's adds an object address

    protocol = PortMapperProtocol

    def __init__(self, table_source, clock, timeout=DEFAULT_TIMEOUT):
        self.table_source = table_source
        self.clock = clock
        self.timeout = timeout

    def buildProtocol(self, addr):
        """A L{PortMapperProtocol} for one client."""
        return self.protocol(self)
