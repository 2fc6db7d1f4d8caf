"""One connection's egress (S9.1-S9.4): the real core hands deliveries to targets, the
egress files and serves them; a fake engine records what would be written.

The targets here stand for an AMQP link or a STOMP subscription: they say how much
credit their protocol gives and record what they write.
"""

import pytest
from twisted.internet.task import Clock
from zope.interface import implementer

from mqgate.amqp.message import Header, build_message
from mqgate.core.broker import Broker, BrokerMessage
from mqgate.egress.profiles import ClientProfile
from mqgate.egress.scheduler import C1, D1, D3, G1, QueueLimits
from mqgate.egress.slowness import SlowSubscriberMeter
from mqgate.glue.egress import UNBOUNDED, Egress, IEgressTarget


class FakeEngine:
    """What the egress needs of an engine: the bytes it has to say."""

    def __init__(self):
        self.pending = []

    def data_to_send(self):
        out, self.pending = b"".join(self.pending), []
        return out


@implementer(IEgressTarget)
class Target:
    """A consumer's target with C{credit} protocol credit (None: any amount)."""

    revoked = None

    def __init__(self, egress, engine, name, credit=None):
        self.egress = egress
        self.engine = engine
        self.name = name
        self.credit = credit
        self.consumer = None
        self.unbounded = False
        self.written = []   # (seq, discarded)

    def deliver(self, delivery):
        self.egress.file(self, delivery)

    def protocol_credit(self):
        return 1000 if self.credit is None else self.credit

    def write(self, delivery, discarded):
        self.written.append((delivery.message.seq, discarded))
        self.engine.pending.append(f"{self.name}:{delivery.message.seq};".encode())
        if self.credit is not None:
            self.credit -= 1
            if self.credit <= 0:
                self.egress.block(self, True)
        return delivery.message.size


class Transport:
    """Takes writes; L{paused} is what the adapter would say."""

    def __init__(self):
        self.data = b""
        self.paused = False

    def write(self, data):
        self.data += data

    def is_paused(self):
        return self.paused


def message(priority=4, durable=False, size=100):
    return BrokerMessage(build_message(b"x" * size, header=Header(durable=durable,
                                                                    priority=priority)),
                         durable=durable, priority=priority)


@pytest.fixture
def world():
    clock = Clock()
    broker = Broker(clock)
    engine = FakeEngine()
    egress = Egress(engine, SlowSubscriberMeter(clock), lambda: None)
    return broker, engine, egress, Transport()


def attach(broker, egress, engine, address, name, presettled=True, credit=None,
           unbounded=False):
    target = Target(egress, engine, name, credit)
    target.consumer = broker.open_consumer(address, target, presettled=presettled)
    target.unbounded = unbounded
    egress.refresh(target)
    return target


def test_an_idle_egress_writes_at_once_and_counts_the_delivery(world):
    """S9.3: with nothing waiting and the transport free a delivery is written as it
    is routed, and still counted as a delivery of its queue (S9.7 statistics)."""
    broker, engine, egress, _ = world
    target = attach(broker, egress, engine, "topic://t", "a", unbounded=True)
    broker.open_producer("topic://t").send(message())
    assert target.written == [(1, False)]
    assert egress.scheduler.queue_stats(D1).deliveries == 1
    assert egress.scheduler.queued_messages == 0


def test_strict_priority_once_the_transport_resumes(world):
    """S9.1, S9.3: while the transport is paused, everything waits; then C-1 goes
    first, then D-3, D-1 and G-1, whatever the order they were filed in."""
    broker, engine, egress, transport = world
    direct = attach(broker, egress, engine, "topic://t", "d", unbounded=True)
    guaranteed = attach(broker, egress, engine, "queue://q", "g", presettled=False)
    egress.paused()
    producer = broker.open_producer("topic://t")
    broker.open_producer("queue://q").send(message(durable=True))      # seq 1, G-1
    producer.send(message(priority=4))                                 # seq 2, D-1
    producer.send(message(priority=9))                                 # seq 3, D-3
    egress.hold_control(b"flow;")
    assert (guaranteed.written, direct.written) == ([], [])
    egress.resumed()
    assert egress.drain(transport.write, transport.is_paused)
    assert transport.data == b"flow;d:3;d:2;g:1;"
    stats = {s.name: s.deliveries for s in egress.scheduler.stats()}
    assert (stats[C1], stats[D3], stats[D1], stats[G1]) == (1, 1, 1, 1)


def test_a_full_d_queue_drops_the_oldest_and_flags_the_next(world):
    """S9.2: a full D queue discards its oldest message for the new one, counts it,
    and the next message written to that client carries the discard indication."""
    broker, engine, egress, transport = world
    egress.scheduler.apply_profile(
        ClientProfile("small", {D1: QueueLimits(max_depth=3, min_msg_burst=0)}))
    target = attach(broker, egress, engine, "topic://t", "a", unbounded=True)
    egress.paused()
    producer = broker.open_producer("topic://t")
    for _ in range(5):
        producer.send(message())
    assert egress.scheduler.queue_stats(D1).discards == 2
    egress.resumed()
    egress.drain(transport.write, transport.is_paused)
    assert target.written == [(3, True), (4, False), (5, False)]
    assert egress.queued(target) == 0


def test_a_full_g1_withholds_credit_instead_of_discarding(world):
    """S9.2: G-1 never discards. Once it is full the consumer's core credit is held
    back, so the messages wait in their queue; when G-1 drains, credit returns."""
    broker, engine, egress, transport = world
    egress.scheduler.apply_profile(
        ClientProfile("tight", {G1: QueueLimits(max_depth=2, min_msg_burst=0)}))
    target = attach(broker, egress, engine, "queue://q", "g", presettled=False)
    egress.paused()
    producer = broker.open_producer("queue://q")
    for _ in range(6):
        producer.send(message(durable=True))
    queue = broker.queue("q")
    assert egress.scheduler.queue_stats(G1).length_msgs == 2
    assert target.consumer.credit == 0 and queue.depth == 4
    assert egress.scheduler.discards == 0
    egress.resumed()
    egress.drain(transport.write, transport.is_paused)
    assert [seq for seq, _ in target.written] == [1, 2, 3, 4, 5, 6]
    assert queue.depth == 0 and target.consumer.credit > 0


def test_a_target_without_credit_waits(world):
    """S9.1: a blocked key (its AMQP link has no credit) keeps its items queued while
    others are served; credit serves them, never more than it allows."""
    broker, engine, egress, transport = world
    slow = attach(broker, egress, engine, "topic://t", "s", credit=1, unbounded=True)
    fast = attach(broker, egress, engine, "topic://t", "f", unbounded=True)
    producer = broker.open_producer("topic://t")
    for _ in range(3):
        producer.send(message())
    egress.drain(transport.write, transport.is_paused)
    assert [seq for seq, _ in fast.written] == [1, 2, 3]
    assert [seq for seq, _ in slow.written] == [1]
    assert egress.queued(slow) == 2
    slow.credit = 5
    egress.block(slow, False)
    egress.drain(transport.write, transport.is_paused)
    assert [seq for seq, _ in slow.written] == [1, 2, 3]


def test_core_credit_follows_protocol_credit_less_what_waits(world):
    """S9.1: a bounded target gets the core credit its protocol allows minus what
    already waits here; a plain topic subscription settled on hand-over gets all."""
    broker, engine, egress, _ = world
    bounded = attach(broker, egress, engine, "queue://q", "b", credit=5)
    egress.paused()
    producer = broker.open_producer("queue://q")
    for _ in range(2):
        producer.send(message())
    assert egress.queued(bounded) == 2
    assert egress.core_credit(bounded) == 3 and bounded.consumer.credit == 3
    unbounded = attach(broker, egress, engine, "topic://t", "u", credit=0, unbounded=True)
    assert egress.core_credit(unbounded) == UNBOUNDED


def test_withdraw_gives_guaranteed_deliveries_back_in_order(world):
    """design rule 3: a target that goes takes its waiting deliveries back to
    the queue, oldest first, not counted as delivery attempts (never written)."""
    broker, engine, egress, _ = world
    target = attach(broker, egress, engine, "queue://q", "g", presettled=False)
    egress.paused()
    producer = broker.open_producer("queue://q")
    for _ in range(3):
        producer.send(message(durable=True))
    egress.withdraw(target)
    target.consumer.close()
    assert egress.queued(target) == 0 and egress.scheduler.queued_messages == 0
    other = Target(egress, engine, "o")
    other.consumer = broker.open_consumer("queue://q", other)
    egress.resumed()
    egress.refresh(other)
    egress.drain(Transport().write, lambda: False)
    assert other.written == [(1, False), (2, False), (3, False)]
    assert all(d.delivery_count == 0 for d in other.consumer._unsettled)


def test_when_served_runs_once_the_queues_are_empty(world):
    """S9.3 (an AMQP drain): the callback waits for what is queued, its own output
    follows the deliveries on the wire, and it runs even when nothing is queued."""
    broker, engine, egress, transport = world
    calls = []

    def drained():
        calls.append("drained")
        engine.pending.append(b"drained;")

    egress.when_served(drained)
    assert egress.has_pending
    egress.drain(transport.write, transport.is_paused)
    assert calls == ["drained"] and transport.data == b"drained;"
    attach(broker, egress, engine, "topic://t", "a", unbounded=True)
    egress.paused()
    broker.open_producer("topic://t").send(message())
    egress.when_served(drained)
    egress.resumed()
    transport.paused = True
    egress.drain(transport.write, transport.is_paused)
    assert calls == ["drained"]          # still waiting: nothing could be written
    transport.paused = False
    egress.drain(transport.write, transport.is_paused)
    assert transport.data == b"drained;a:1;drained;"


def test_a_paused_transport_makes_the_client_slow(world):
    """S9.4: seconds with data queued and the transport paused count against it."""
    broker, engine, egress, transport = world
    clock = egress.meter._clock
    attach(broker, egress, engine, "topic://t", "a", unbounded=True)
    egress.paused()
    broker.open_producer("topic://t").send(message())
    transport.paused = True
    egress.drain(transport.write, transport.is_paused)   # nothing goes: queued
    clock.advance(45)
    assert egress.meter.is_slow()
    transport.paused = False
    egress.resumed()
    egress.drain(transport.write, transport.is_paused)
    clock.advance(61)
    assert not egress.meter.is_slow()


def test_filing_for_a_paused_transport_counts_as_blocked(world):
    """S9.4: data filed while the transport is paused counts against the client from
    then on, even before the adapter tries to drain."""
    broker, engine, egress, _ = world
    clock = egress.meter._clock
    attach(broker, egress, engine, "topic://t", "a", unbounded=True)
    egress.paused()
    broker.open_producer("topic://t").send(message())
    clock.advance(45)
    assert egress.meter.is_slow()
