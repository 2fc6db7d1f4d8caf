"""Producer flow control through the adapters (S2.3, S2.7, design rule 4): a full
destination withholds an AMQP producer's credit and stops reading a STOMP producer's
socket, until the destination drains.

Engines in memory: the broker side is the real factory and protocol on a
StringTransport with a task.Clock; the AMQP peer is a client engine (the harness of
L{tests.net.test_amqp_adapter}), the STOMP peer writes raw frames.
"""

from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from mqgate.amqp.message import encode_message
from mqgate.amqp.events import DeliveriesSettled
from mqgate.amqp.performatives import RECEIVER, SENDER, Accepted, Flow, Rejected
from mqgate.core.broker import REJECT_NEWEST, Broker, CoreConfig
from mqgate.glue.amqp import GlueConfig
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.amqp import AmqpServerFactory, Flusher
from mqgate.net.stomp import StompServerFactory
from tests.net.test_amqp_adapter import FakeAuthenticator, Harness, attach, received

CREDIT = 10


class LimitedHarness(Harness):
    """The AMQP adapter harness with a bounded broker and a small producer credit."""

    def __init__(self, tmp_path, **core):
        super().__init__(tmp_path)
        self.broker = Broker(self.clock, CoreConfig(**core))
        self.factory = AmqpServerFactory(
            settings=self.settings, broker=self.broker, authenticator=self.authenticator,
            clock=self.clock, flusher=self.flusher, container_id="mqgate:test",
            glue_config=GlueConfig(producer_credit=CREDIT))


def send_all(peer, sender, count, settled=True):
    """Send up to C{count} messages while the client has credit; return how many."""
    sent = 0
    while sent < count and sender.credit > 0:
        sender.send(encode_message(b"m%d" % sent), settled=settled)
        sent += 1
        peer.pump()
    return sent


def test_amqp_credit_withheld_then_restored(tmp_path):
    """S2.7: once a producer fills its queue, its link credit is not topped up; when a
    consumer's dispositions drain the queue below its low-water mark, the credit comes
    back (a flow frame written without the producer saying anything)."""
    harness = LimitedHarness(tmp_path, max_num_msgs=20)
    producer_peer = harness.opened()
    sender = attach(producer_peer, SENDER, "q")
    assert sender.credit == CREDIT
    sent = send_all(producer_peer, sender, 1000)
    queue = harness.broker.queue("q")
    # Topped up at half credit until the queue is full; then the credit runs out.
    assert sender.credit == 0 and queue.full
    assert 20 <= sent <= 20 + CREDIT and queue.held == sent
    consumer_peer = harness.opened(port=40001)
    mark = len(producer_peer.written)
    attach(consumer_peer, RECEIVER, "q", credit=1000)
    harness.clock.advance(0)
    consumer_peer.pump()
    arrived = received(consumer_peer)
    assert len(arrived) == sent and queue.in_flight == sent
    harness.clock.advance(0)
    producer_peer.pump()
    assert sender.credit == 0   # in flight still counts as held
    for event in arrived:
        event.link.settle(event.delivery_id)
    consumer_peer.pump()
    assert queue.held == 0
    harness.clock.advance(0)   # the Flusher writes the producer's flow frame
    producer_peer.pump()
    assert producer_peer.performatives(Flow, since=mark)
    # Granted when the queue fell to its low-water mark, from the room left then
    # (S2.7: 3 of 20, so 1); the producer's next messages get it topped up.
    assert sender.credit == 1
    assert send_all(producer_peer, sender, 5) == 5
    assert queue.messages_in == sent + 5


def test_amqp_detached_producer_gets_no_credit(tmp_path):
    """A producer link that detaches while its credit is withheld is not given any
    when the queue drains (and nothing waits on the queue for it)."""
    harness = LimitedHarness(tmp_path, max_num_msgs=5)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    send_all(peer, sender, 1000)
    sender.detach()
    peer.pump()
    queue = harness.broker.queue("q")
    assert not queue._waiters
    mark = len(peer.written)
    harness.broker.open_consumer("queue://q", _Discard(), presettled=True).set_credit(100)
    harness.clock.advance(0)
    peer.pump()
    assert not peer.performatives(Flow, since=mark)


def test_amqp_credit_topped_up_while_not_full(tmp_path):
    """S2.7: a producer whose queue has room keeps getting credit at half."""
    harness = LimitedHarness(tmp_path, max_num_msgs=-1)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    assert send_all(peer, sender, 100) == 100 and sender.credit > 0


def test_amqp_reject_newest_rejects_with_condition(tmp_path):
    """S2.3 REJECT_NEWEST: an unsettled transfer to a full queue is settled Rejected,
    carrying amqp:resource-limit-exceeded and a description naming the queue."""
    harness = LimitedHarness(tmp_path, max_num_msgs=2, limit_behavior=REJECT_NEWEST)
    peer = harness.opened()
    sender = attach(peer, SENDER, "q")
    for number in range(3):
        sender.send(encode_message(b"x"), settled=False, context=number)
    peer.pump()
    outcomes = {d: e.state for e in peer.events if isinstance(e, DeliveriesSettled)
                for d in e.deliveries}
    assert [type(outcomes[n]) for n in range(3)] == [Accepted, Accepted, Rejected]
    error = outcomes[2].error
    assert str(error.condition) == "amqp:resource-limit-exceeded"
    assert "'q'" in error.description and "maxNumMsgs" in error.description
    assert harness.broker.queue("q").held == 2


# -- STOMP ------------------------------------------------------------------------------


def stomp_frame(command, body=b"", **headers):
    lines = [command] + [f"{k.replace('_', '-')}:{v}" for k, v in headers.items()]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


class StompPeer:
    """A STOMP connection to the broker's factory on a StringTransport."""

    def __init__(self, tmp_path, **core):
        self.clock = task.Clock()
        self.broker = Broker(self.clock, CoreConfig(**core))
        self.authenticator = FakeAuthenticator()
        self.factory = StompServerFactory(
            broker=self.broker, authenticator=self.authenticator, clock=self.clock,
            flusher=Flusher(self.clock), glue_config=StompGlueConfig(), setup_timeout=30)
        self.protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 1))
        self.protocol.makeConnection(self.transport)
        self.protocol.dataReceived(stomp_frame("CONNECT", accept_version="1.2",
                                               host="mqgate", login="admin",
                                               passcode="admin"))
        self.authenticator.succeed_all()
        self.clock.advance(0)
        assert self.transport.value().startswith(b"CONNECTED")
        self.transport.clear()

    def send(self, count, destination="/queue/q", receipt=None):
        data = b"".join(stomp_frame("SEND", b"body", destination=destination)
                        for _ in range(count))
        if receipt is not None:
            data += stomp_frame("SEND", b"body", destination=destination,
                                receipt=receipt)
        self.protocol.dataReceived(data)

    @property
    def paused(self):
        return self.transport.producerState == "paused"


def test_stomp_full_queue_pauses_then_resumes_reading(tmp_path):
    """S2.7: a SEND that fills its queue pauses the client's transport (its receipt is
    still written); draining the queue below the low-water mark resumes it."""
    peer = StompPeer(tmp_path, max_num_msgs=10)
    peer.send(5)
    assert not peer.paused
    peer.send(4, receipt="r-full")
    assert peer.paused
    assert b"RECEIPT\nreceipt-id:r-full" in peer.transport.value()
    queue = peer.broker.queue("q")
    assert queue.held == 10
    peer.broker.open_consumer("queue://q", _Discard(), presettled=True).set_credit(1)
    assert peer.paused   # 9 held: at the low-water mark, not below
    queue.consumers[0].set_credit(1)
    assert not peer.paused and queue.held == 8


def test_stomp_pool_and_flow_control_do_not_fight(tmp_path):
    """S1.6 + S2.7: the socket is read again only when neither the thread pool's
    back-pressure nor flow control holds it, whichever lets go first."""
    peer = StompPeer(tmp_path, max_num_msgs=2)
    peer.protocol.pause_inbound()
    peer.send(2)
    assert peer.paused
    peer.protocol.resume_inbound()
    assert peer.paused    # flow control still holds it
    peer.protocol.pause_inbound()
    peer.broker.open_consumer("queue://q", _Discard(), presettled=True).set_credit(2)
    assert peer.paused    # the pool still holds it
    peer.protocol.resume_inbound()
    assert not peer.paused


def test_stomp_connection_lost_while_blocked(tmp_path):
    """A blocked connection that goes away leaves nothing waiting on the queue, and
    draining later touches no transport."""
    peer = StompPeer(tmp_path, max_num_msgs=2)
    peer.send(2)
    assert peer.paused
    peer.transport.loseConnection()
    peer.protocol.connectionLost(None)
    assert not peer.broker.queue("q")._waiters
    peer.broker.open_consumer("queue://q", _Discard(), presettled=True).set_credit(2)


class _Discard:
    """A consumer target that drops what it is given."""

    def deliver(self, delivery):
        pass
