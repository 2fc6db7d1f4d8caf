"""
Port unification (S1.1): several protocols on one port, told apart by their first bytes.

A L{PortUnificationProtocol} buffers what the client sends and asks the pure
L{mqgate.sniff.sniff} what it is. Once it knows, it builds the protocol of the factory
registered for that kind, connects it to the same transport with the public
C{makeConnection} and replays the buffered bytes. From then on it is a thin forwarding
wrapper: the transport keeps calling the wrapper (we do not rewrite the transport's
C{protocol} attribute, which is a transport internal), and the wrapper passes every
call on. The inner protocol writes to the real transport directly, so its writes,
producer registration and C{getPeer} cost nothing extra.

Nothing recognisable, a kind without a factory, a factory that declines the
connection, or no decision within C{timeout} seconds: the I{rejection} callable is
given the transport and the kind. The default writes the AMQP 1.0 protocol header
and closes, which is what AMQP s2.2 asks a server to do with a header it does not
support, and is harmless to anything else.

What a client may cost before the protocol is known is bounded (S4.2): the buffer
holds less than L{mqgate.sniff.SNIFF_BUDGET} bytes between reads (past it, sniff
answers), so at most that plus one read is ever held, and the protocol it is handed to
applies its own budget for clients not logged in to all of it; a client has C{timeout}
seconds to be recognised; and every socket takes a slot of the factory's
C{login_slots} (L{mqgate.net.pool.LoginSlots}) when it connects, handed on with the
connection to a protocol that takes it (C{adopt_login_slot}) and given back otherwise.
A socket that finds no slot left is closed at once: before its first bytes nothing
can be said in its protocol's words.
"""

from twisted.internet.interfaces import IHalfCloseableProtocol, IHandshakeListener
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from zope.interface import alsoProvides

from mqgate.security.guard import LogBudget
from mqgate.sniff import NEED_MORE, UNKNOWN, Kind, sniff

__all__ = [
    "AMQP_HEADER", "DEFAULT_TIMEOUT", "PortUnificationFactory",
    "PortUnificationProtocol", "reject_with_amqp_header",
]

#: The header of the protocol we speak (AMQP 1.0 part 2 s2.2, FACTS 5).
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
#: Seconds a client has to send something recognisable.
DEFAULT_TIMEOUT = 5.0

#: Interfaces the wrapper takes over from the inner protocol, so that the transport
#: calls their methods (it asks C{providedBy(transport.protocol)}).
_FORWARDED_INTERFACES = (IHalfCloseableProtocol, IHandshakeListener)


def reject_with_amqp_header(transport, kind):
    """The default rejection: announce AMQP 1.0 (AMQP s2.2) and close."""
    transport.write(AMQP_HEADER)
    transport.loseConnection()


class PortUnificationProtocol(Protocol):
    """Sniff the first bytes, then forward everything to the chosen protocol.

    @ivar inner: the protocol the connection was handed to, or C{None} before.
    @ivar kind: what L{sniff} decided (C{None} while undecided).

    An inner protocol that wants C{handshakeCompleted} gets it only if the TLS
    handshake completes after the handoff (the transport asks who listens when it
    completes).
    """

    log = Logger()

    def __init__(self, factory, addr):
        self.factory = factory
        self.addr = addr
        self.inner = None
        self.kind = None
        self._buffer = bytearray()
        self._call = None
        self._slot = None

    def logPrefix(self):
        """The inner protocol's prefix once there is one."""
        if self.inner is not None:
            return f"{self.inner.logPrefix()} (unified)"
        return self.__class__.__name__

    def connectionMade(self):
        """Take a slot among the unauthenticated and start the clock on the client's
        first bytes; with no slot left, close at once."""
        slots = self.factory.login_slots
        if slots is not None:
            self._slot = slots.take()
            if self._slot is None:
                self.kind = UNKNOWN   # decided: nothing more is read
                self._buffer = None
                self.transport.abortConnection()
                return
        self._call = self.factory.clock.callLater(self.factory.timeout, self._timed_out)

    def dataReceived(self, data):
        """Buffer and sniff until decided; after the handoff, forward."""
        if self.inner is not None:
            self.inner.dataReceived(data)
        elif self.kind is None:
            self._buffer += data
            kind = sniff(self._buffer)
            if kind is not NEED_MORE:
                self._decide(kind)
        # else: rejected; whatever still arrives is dropped

    def connectionLost(self, reason):
        """Forward to the inner protocol (if any) and forget the timer."""
        self._cancel()
        self._release_slot()
        self._buffer = None
        inner, self.inner = self.inner, None
        if inner is not None:
            inner.connectionLost(reason)

    # -- forwarded only when the inner protocol provides the interface -------------

    def readConnectionLost(self):
        """IHalfCloseableProtocol, forwarded."""
        self.inner.readConnectionLost()

    def writeConnectionLost(self):
        """IHalfCloseableProtocol, forwarded."""
        self.inner.writeConnectionLost()

    def handshakeCompleted(self):
        """IHandshakeListener, forwarded."""
        self.inner.handshakeCompleted()

    # -- deciding ------------------------------------------------------------------

    def _decide(self, kind):
        self._cancel()
        self.kind = kind
        factory = self.factory.factories.get(kind) if kind is not UNKNOWN else None
        inner = factory.buildProtocol(self.addr) if factory is not None else None
        if inner is None:
            self._reject(kind)
        else:
            self._hand_over(inner)

    def _hand_over(self, inner):
        buffered, self._buffer = bytes(self._buffer), None
        self.inner = inner
        slot, self._slot = self._slot, None
        adopt = getattr(inner, "adopt_login_slot", None)
        if adopt is not None and slot is not None:
            adopt(slot)
        elif slot is not None:
            slot.release()
        for interface in _FORWARDED_INTERFACES:
            if interface.providedBy(inner):
                alsoProvides(self, interface)
        inner.makeConnection(self.transport)
        # The inner protocol may have closed (and seen connectionLost) in
        # connectionMade; then there is no one left to give the bytes to.
        if self.inner is not None:
            self.inner.dataReceived(buffered)

    def _reject(self, kind):
        self._release_slot()
        first, self._buffer = bytes(self._buffer or b""), None
        held = self.factory.log_budget.take()
        if held is not None:
            self.log.info("connection from {peer} rejected: {why} (first bytes {first!r})"
                          "{more}", peer=self.transport.getPeer(), first=first[:16],
                          why=("nothing recognisable in time" if kind is NEED_MORE
                               else f"no service for {kind.value}"),
                          more=f" ({held} more rejections not logged)" if held else "")
        self.factory.rejection(self.transport, kind)

    def _timed_out(self):
        self._call = None
        self.kind = NEED_MORE
        self._reject(NEED_MORE)

    def _release_slot(self):
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()

    def _cancel(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class PortUnificationFactory(Factory):
    """Serve several protocols on one port (S1.1).

    @ivar factories: C{{Kind: Factory}}; the keys may also be the kinds' names
        (C{"amqp-sasl"}, C{"stomp"} ...). Several kinds may share a factory (AMQP and
        AMQP_SASL usually do). A kind that is absent is rejected.
    @ivar clock: an C{IReactorTime} for the sniffing timeout.
    @ivar timeout: seconds a client has to send something recognisable.
    @ivar login_slots: the service's L{mqgate.net.pool.LoginSlots}, or None (no limit).
    @ivar rejection: C{rejection(transport, kind)}, called for an unrecognisable
        client (kind L{UNKNOWN}), a kind without a factory or whose factory's
        C{buildProtocol} returned C{None} (that kind), or a timeout (L{NEED_MORE}).
        It must close the transport.
    """

    noisy = False  # the service logs its own line; Twisted's adds an object address

    login_slots = None

    def __init__(self, factories, clock, timeout=DEFAULT_TIMEOUT,
                 rejection=reject_with_amqp_header):
        self.factories = {_as_kind(key): factory for key, factory in factories.items()}
        self.clock = clock
        self.timeout = timeout
        self.rejection = rejection
        # A flood of sockets must not become a flood of log lines.
        self.log_budget = LogBudget(clock, lines=10, interval=60.0)

    def buildProtocol(self, addr):
        """A sniffing L{PortUnificationProtocol}."""
        return PortUnificationProtocol(self, addr)

    def inner_factories(self):
        """Each inner factory once, in registration order."""
        return list({id(f): f for f in self.factories.values()}.values())

    def startFactory(self):
        """Start the inner factories: they listen through us."""
        for factory in self.inner_factories():
            factory.doStart()

    def stopFactory(self):
        """Stop the inner factories."""
        for factory in self.inner_factories():
            factory.doStop()

    def shutdown(self):
        """Call C{shutdown()} on every inner factory that has one (orderly stop, S0.4)."""
        for factory in self.inner_factories():
            shutdown = getattr(factory, "shutdown", None)
            if shutdown is not None:
                shutdown()


def _as_kind(key):
    try:
        kind = Kind(key)
    except ValueError:
        kind = None
    if kind is None or kind in (NEED_MORE, UNKNOWN):
        allowed = ", ".join(k.value for k in Kind if k not in (NEED_MORE, UNKNOWN))
        raise ValueError(f"port unification: {key!r} is not a protocol kind; "
                         f"allowed: {allowed}")
    return kind
