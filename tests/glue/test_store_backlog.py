"""What a connection may have waiting for the store (S2.7, design rule 4), and
what becomes of a pre-settled AMQP send a limit refuses: through the real adapters and
glues on StringTransports, with a store whose writes finish when the test says."""

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs

from mqgate.amqp.events import LinkDetached
from mqgate.amqp.message import Header, encode_message
from mqgate.amqp.performatives import SENDER
from mqgate.core import Broker, BrokerMessage, CoreConfig
from mqgate.core.persistence import Persistence
from mqgate.glue.amqp import GlueConfig
from mqgate.glue.egress import PRESETTLED_REFUSED
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.amqp import AmqpServerFactory
from mqgate.net.stomp import StompServerFactory

from tests.core.test_persistence import _RefusingStore
from tests.net.test_amqp_adapter import Harness, attach


class StoreHarness(Harness):
    """The AMQP adapter harness on a broker whose store answers when told, plus a STOMP
    factory on the same broker, clock and egress."""

    def __init__(self, tmp_path, *, glue=None, stomp=None, **core):
        super().__init__(tmp_path)
        self.store = _RefusingStore()
        self.store.recover()
        persistence = Persistence(self.store, encode=lambda m: m.payload.data,
                                  decode=lambda data: BrokerMessage(data))
        self.broker = Broker(self.clock, CoreConfig(**core), persistence=persistence)
        self.factory = AmqpServerFactory(
            settings=self.settings, broker=self.broker, authenticator=self.authenticator,
            clock=self.clock, flusher=self.flusher, container_id="mqgate:test",
            glue_config=glue or GlueConfig())
        self.stomp_factory = StompServerFactory(
            broker=self.broker, authenticator=self.authenticator, clock=self.clock,
            flusher=self.flusher, glue_config=stomp or StompGlueConfig(),
            setup_timeout=30, egress=self.factory.egress)

    def stomp(self):
        """A STOMP connection past CONNECT: C{(protocol, transport)}."""
        address = IPv4Address("TCP", "127.0.0.1", 5)
        protocol = self.stomp_factory.buildProtocol(address)
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        protocol.dataReceived(frame("CONNECT", accept_version="1.2", host="h",
                                    login="admin", passcode="admin"))
        self.authenticator.succeed_all()
        self.clock.advance(0)
        assert transport.value().startswith(b"CONNECTED")
        transport.clear()
        return protocol, transport


def frame(command, body=b"", **headers):
    lines = [command] + [f"{k.replace('_', '-')}:{v}" for k, v in headers.items()]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


def persistent_sends(count, destination="/queue/q", size=10):
    return b"".join(frame("SEND", b"x" * size, destination=destination,
                          persistent="true") for _ in range(count))


# -- STOMP: the socket is no longer read while the store is behind ---------------------


def test_stomp_persistent_sends_without_receipts_stop_at_the_backlog(tmp_path):
    """S2.7: a STOMP client writing persistent SENDs without receipts faster than the
    store writes them: past the connection's backlog bound its socket is no longer
    read, the frames already read wait, and all go on, in order, once the store has
    caught up; nothing is refused or lost."""
    harness = StoreHarness(tmp_path, stomp=StompGlueConfig(store_backlog=(10, 1 << 20)))
    protocol, transport = harness.stomp()
    protocol.dataReceived(persistent_sends(50))
    harness.clock.advance(0)
    assert transport.producerState == "paused"
    assert len(harness.store.pending) == 10          # the rest wait, unread or held
    harness.store.release()                          # the store catches up
    harness.clock.advance(0)
    assert len(harness.store.pending) == 10          # the next ten, no more
    while harness.store.pending:
        harness.store.release()
        harness.clock.advance(0)
    assert transport.producerState == "producing"
    assert harness.broker.queue("q").depth == 50
    assert b"ERROR" not in transport.value()


def test_stomp_backlog_counts_bytes(tmp_path):
    """S2.7: the bound holds by bytes too: large persistent SENDs stop the reading
    once the bytes waiting for the store reach mqgate.persist.max_unstored_bytes."""
    harness = StoreHarness(tmp_path, stomp=StompGlueConfig(store_backlog=(1000, 4000)))
    protocol, transport = harness.stomp()
    protocol.dataReceived(persistent_sends(20, size=1000))
    harness.clock.advance(0)
    assert transport.producerState == "paused"
    assert len(harness.store.pending) == 4
    while harness.store.pending:
        harness.store.release()
        harness.clock.advance(0)
    assert harness.broker.queue("q").depth == 20
    assert transport.producerState == "producing"


# -- AMQP: credit waits for the store ---------------------------------------------------


def durable(body):
    return encode_message(body, header=Header(durable=True))


def send_while_credit(peer, sender, count, settled):
    sent = 0
    while sent < count and sender.credit > 0:
        sender.send(durable(b"m%d" % sent), settled=settled)
        sent += 1
        peer.pump()
    return sent


@pytest.mark.parametrize("settled", [True, False])
def test_amqp_credit_withheld_while_the_store_is_behind(tmp_path, settled):
    """S2.7: an AMQP producer of persistent messages (settled or not) gets no more
    credit while its connection has its backlog bound waiting for the store; the
    credit comes back once the store has written them."""
    harness = StoreHarness(tmp_path, glue=GlueConfig(producer_credit=10,
                                                     store_backlog=(20, 1 << 20)))
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    sent = send_while_credit(peer, sender, 1000, settled)
    # Topped up at half credit until the backlog is over its bound; no more after.
    assert 20 <= sent <= 30 and sender.credit == 0
    assert len(harness.store.pending) == sent
    harness.store.release()
    harness.clock.advance(0)                       # the flusher's turn
    peer.pump()
    assert sender.credit > 0
    sent += send_while_credit(peer, sender, 1000 - sent, settled)
    assert len(harness.store.pending) <= 30
    harness.store.release()
    assert harness.broker.queue("q").depth == sent


# -- AMQP: pre-settled sends a limit refuses ---------------------------------------------


def presettled_sends(peer, sender, count, body=b"m"):
    for _ in range(count):
        sender.send(encode_message(body), settled=True)
    peer.pump()


def test_refused_presettled_sends_are_counted_logged_and_end_in_a_detach(tmp_path):
    """A pre-settled send refused by mqgate.system.max_count is lost (AMQP cannot
    reject it) but counted, logged once naming the producer and the setting, and after
    max_presettled_refusals in a row the link is detached with
    amqp:resource-limit-exceeded saying why."""
    harness = StoreHarness(tmp_path, glue=GlueConfig(max_presettled_refusals=5),
                           max_count=3)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q", name="telemetry")
    with capturedLogs() as events:
        presettled_sends(peer, sender, 7)
    assert harness.broker.queue("q").held == 3
    assert harness.factory.egress.events[PRESETTLED_REFUSED] == 4
    warnings = [e for e in events if "pre-settled" in e.get("log_format", "")]
    assert len(warnings) == 1                      # rate-limited: one line
    assert warnings[0]["link"] == "telemetry" and warnings[0]["address"] == "q"
    assert "mqgate.system.max_count" in warnings[0]["why"]
    assert not any(isinstance(e, LinkDetached) for e in peer.events)
    with capturedLogs() as events:
        presettled_sends(peer, sender, 1)          # the fifth in a row
    [detached] = [e for e in peer.events if isinstance(e, LinkDetached)]
    assert detached.link is sender and detached.closed
    assert str(detached.error.condition) == "amqp:resource-limit-exceeded"
    assert "mqgate.system.max_count" in detached.error.description
    assert any("max_presettled_refusals" in e.get("log_format", "") for e in events)


def test_an_accepted_presettled_send_starts_the_run_again(tmp_path):
    """A producer that only brushes a limit is not cut off: a pre-settled message
    accepted between refusals starts the count of refusals in a row again."""
    harness = StoreHarness(tmp_path, glue=GlueConfig(max_presettled_refusals=3),
                           max_count=1)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    queue = harness.broker.queue("q")
    for _ in range(4):
        presettled_sends(peer, sender, 3)          # one accepted, two refused
        harness.broker.open_consumer("queue://q", _Discard(), presettled=True) \
            .set_credit(1)
        assert queue.held == 0
    assert not any(isinstance(e, LinkDetached) for e in peer.events)
    assert harness.factory.egress.events[PRESETTLED_REFUSED] == 8


def test_presettled_persistent_sends_the_store_refuses_count_as_refused(tmp_path):
    """S3.6: pre-settled persistent messages the store refuses (a full disk) are
    counted and logged like any refusal, and end in a detach naming the store's
    condition once they keep coming."""
    harness = StoreHarness(tmp_path, glue=GlueConfig(max_presettled_refusals=3))
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    with capturedLogs() as events:
        for _ in range(3):
            sender.send(durable(b"lost"), settled=True)
        peer.pump()
        harness.store.refuse()
        harness.clock.advance(0)
        peer.pump()
    assert harness.factory.egress.events[PRESETTLED_REFUSED] == 3
    assert any("No space left on device" in str(e.get("why")) for e in events)
    [detached] = [e for e in peer.events if isinstance(e, LinkDetached)]
    assert str(detached.error.condition) == "amqp:resource-limit-exceeded"
    assert harness.broker.queue("q").held == 0


class _Discard:
    def deliver(self, delivery):
        pass
