"""Memory states as producers feel them (S2.6): AMQP credit batches per state and none
at RED, STOMP reading paced per batch and held at RED; through the real adapters and
glues on StringTransports with a Clock."""

from mqgate.amqp.message import encode_message
from mqgate.amqp.events import DeliveriesSettled
from mqgate.amqp.performatives import SENDER, Rejected
from mqgate.core import BrokerMessage
from mqgate.core.memory import MemoryConfig, MemoryStates

from tests.glue.test_store_backlog import StoreHarness, frame
from tests.net.test_amqp_adapter import attach

LIMIT = 10_000


def harness_with_memory(tmp_path, limit=LIMIT):
    """A harness whose broker has memory states over C{limit} bytes (no overhead)."""
    harness = StoreHarness(tmp_path)
    harness.broker.memory = MemoryStates(MemoryConfig(limit=limit, overhead=0),
                                         harness.broker.holdings)
    return harness


def hold(harness, size, address="queue://ballast"):
    """Make the broker hold C{size} more bytes."""
    harness.broker.open_producer(address).send(BrokerMessage(b"x" * size))


def take_all(harness, address="queue://ballast"):
    """A consumer takes and accepts everything C{address} holds."""
    class Accept:
        consumer = None

        def deliver(self, delivery):
            self.consumer.settle(delivery)
    target = Accept()
    target.consumer = harness.broker.open_consumer(address, target)
    target.consumer.set_credit(10_000)
    target.consumer.close()


def test_amqp_credit_batches_shrink_with_the_state(tmp_path):
    """A producer attaching at GREEN gets the full producer credit (1000), at YELLOW
    500, at ORANGE 50 (mqgate.STATE.count)."""
    harness = harness_with_memory(tmp_path)
    peer = harness.opened()
    credits = []
    for name, size in (("green", 0), ("yellow", 8_500), ("orange", 700)):
        hold(harness, size)
        credits.append(attach(peer, SENDER, "q", name=name).credit)
    assert credits == [1000, 500, 50]


def test_amqp_red_rejects_transfers_and_withholds_credit_until_it_falls(tmp_path):
    """At RED a transfer sent on earlier credit is rejected with
    amqp:resource-limit-exceeded, a new producer gets no credit; once consumers take
    the messages and the sampler looks, its credit comes without asking."""
    harness = harness_with_memory(tmp_path)
    peer = harness.opened()
    early = attach(peer, SENDER, "q", name="early")
    hold(harness, 9_900)
    early.send(encode_message(b"late"), settled=False)
    peer.pump()
    [settled] = [e for e in peer.events if isinstance(e, DeliveriesSettled)]
    assert isinstance(settled.state, Rejected)
    assert str(settled.state.error.condition) == "amqp:resource-limit-exceeded"
    assert "RED" in settled.state.error.description
    late = attach(peer, SENDER, "q", name="late")
    assert late.credit == 0
    take_all(harness)
    harness.broker.memory.check()      # the sampler's look
    harness.clock.advance(0)
    peer.pump()
    assert late.credit == 1000
    assert harness.broker.queue("q").held == 0


def sends(count, destination="/queue/q", receipt=None):
    extra = {} if receipt is None else {"receipt": receipt}
    return b"".join(frame("SEND", b"m", destination=destination, **extra)
                    for _ in range(count))


def test_stomp_reading_pauses_a_turn_after_each_batch(tmp_path):
    """At ORANGE (batch 50) a burst of 120 SENDs read at once stops after 50 with the
    socket paused until the reactor's next turn (other connections are served in
    between); then the rest go on, all of them."""
    harness = harness_with_memory(tmp_path, limit=100 * LIMIT)
    hold(harness, 900_000)
    protocol, transport = harness.stomp()
    protocol.dataReceived(sends(120))
    queue = harness.broker.queue("q")
    assert queue.depth == 50 and transport.producerState == "paused"
    harness.clock.advance(0)    # a Clock runs the later turns at once
    assert queue.depth == 120 and transport.producerState == "producing"


def test_stomp_send_at_red_waits_for_its_receipt(tmp_path):
    """At RED a SEND is neither refused nor routed: the socket is not read, and once
    the state falls the SEND is routed and its receipt written."""
    harness = harness_with_memory(tmp_path)
    hold(harness, 9_900)
    protocol, transport = harness.stomp()
    protocol.dataReceived(sends(1, receipt="r1"))
    harness.clock.advance(0)
    assert transport.producerState == "paused"
    assert b"RECEIPT" not in transport.value() and b"ERROR" not in transport.value()
    take_all(harness)
    harness.broker.memory.check()
    harness.clock.advance(0)
    assert b"receipt-id:r1" in transport.value()
    assert harness.broker.queue("q").depth == 1
    assert transport.producerState == "producing"
