"""A broker made of the server-side AMQP engine, for unit tests of the client library.

L{FakeBroker} answers what a client does the way the real broker would at the protocol
level (login, open, begin, attach with the terminus echoed, a dynamic address for a
dynamic source) and records the rest (transfers, flows, dispositions) for the test to
look at or answer. L{FakeEndpoint} hands the client a C{StringTransport} joined to a
new L{FakeBroker} per connection; L{pump} moves bytes both ways until both are quiet.
Time is a C{task.Clock}, so reconnect schedules and time-outs run without sleeping.
"""

from twisted.internet import defer
from twisted.internet.error import ConnectionLost, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.amqp.connection import Connection as Engine
from mqgate.amqp.events import (
    AuthenticationRequested, ConnectionOpened, DeliveriesSettled, LinkAttached,
    LinkDetached, MessageReceived, SessionBegun,
)
from mqgate.amqp.performatives import Source

__all__ = ["FakeBroker", "FakeEndpoint", "NodelayTransport", "pump", "Clock"]


class NodelayTransport(StringTransport):
    """A StringTransport that remembers whether TCP_NODELAY was asked for."""

    nodelay = False

    def setTcpNoDelay(self, enabled):
        self.nodelay = enabled

    def abortConnection(self):
        self.loseConnection()


class FakeBroker:
    """The server end of one connection.

    @ivar allow: whether logins succeed.
    @ivar links: the server's links, by name.
    @ivar received: C{(link name, delivery id, payload)} of every message a client sent.
    @ivar outcomes: C{(n, state)} per delivery the client settled (C{n}: its
        position in its L{deliver} call).
    """

    def __init__(self, allow=True, refuse=()):
        self.engine = Engine(server=True, container_id="fake-broker")
        self.allow = allow
        self.refuse = set(refuse)   # addresses whose links are refused
        self.links = {}
        self.received = []
        self.detached = []   # (link name, closed) per detach the client sent
        self.outcomes = []   # (context given to deliver, the client's outcome)
        self.transport = None
        self.protocol = None

    def feed(self, data):
        for event in self.engine.receive_data(data):
            self.on_event(event)

    def on_event(self, event):
        if isinstance(event, AuthenticationRequested):
            for more in self.engine.sasl_outcome(self.allow):
                self.on_event(more)
        elif isinstance(event, ConnectionOpened):
            self.engine.open()
        elif isinstance(event, SessionBegun):
            event.session.begin()
        elif isinstance(event, LinkAttached):
            link = event.link
            self.links[link.name] = link
            remote = link.remote
            address = (remote.target.address if not link.is_sender
                       else remote.source.address)
            if address in self.refuse:
                link.refuse("amqp:not-found", f"no such node {address}")
                return
            source = remote.source
            if link.is_sender and source.dynamic:
                source = Source(address="tmp.reply.1", dynamic=True,
                                filter=source.filter)
            link.attach(source=source, target=remote.target)
        elif isinstance(event, MessageReceived):
            self.received.append((event.link.name, event.delivery_id, event.payload))
        elif isinstance(event, LinkDetached):
            self.detached.append((event.link.name, event.closed))
        elif isinstance(event, DeliveriesSettled):
            self.outcomes += [(context, event.state) for context in event.deliveries]

    def deliver(self, name, payload, count=1):
        """Send C{count} copies of C{payload} on the sending link C{name}, as far as
        the client's credit allows; returns how many went."""
        link = self.links[name]
        sent = 0
        while sent < count and link.credit > 0:
            link.send(payload, settled=False, context=sent)
            sent += 1
        return sent

    def output(self):
        return self.engine.data_to_send()


class FakeEndpoint:
    """Each C{connect} makes a new L{FakeBroker} (kept in C{brokers}) unless the next
    entry of C{refusals} says to refuse it."""

    def __init__(self, refusals=(), **broker_kwargs):
        self.brokers = []
        self.refusals = list(refusals)
        self.broker_kwargs = broker_kwargs

    def factory(self, reactor, url, **options):
        """The C{endpoint_factory} for L{mqgate.client.connect}."""
        self.last_url = url
        return defer.succeed(self)

    def connect(self, protocol_factory):
        if self.refusals and self.refusals.pop(0):
            return defer.fail(ConnectionRefusedError("refused by the test"))
        broker = FakeBroker(**self.broker_kwargs)
        protocol = protocol_factory.buildProtocol(None)
        broker.transport = NodelayTransport()
        broker.protocol = protocol
        self.brokers.append(broker)
        protocol.makeConnection(broker.transport)
        return defer.succeed(protocol)

    @property
    def broker(self):
        return self.brokers[-1]


def pump(broker, rounds=50):
    """Move bytes between the client and C{broker} until both are quiet."""
    for _ in range(rounds):
        moved = False
        data = broker.transport.value()
        if data:
            broker.transport.clear()
            broker.feed(data)
            moved = True
        data = broker.output()
        if data and not broker.protocol.lost:
            broker.protocol.dataReceived(data)
            moved = True
        if broker.transport.disconnecting and not broker.protocol.lost:
            broker.protocol.connectionLost(Failure(ConnectionLost("closed")))
            moved = True
        if not moved:
            return
    raise AssertionError("the client and the fake broker never went quiet")


def break_connection(broker):
    """The transport dies under the client (the broker went away)."""
    broker.protocol.connectionLost(Failure(ConnectionLost("the test cut the line")))
