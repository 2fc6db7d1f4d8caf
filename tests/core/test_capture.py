"""Capture subscriptions in the core: what install makes, the bounds, the refusals,
removal, capture:write and the audit (S7.2-S7.4, S7.8, S7.9). Time is a Clock."""

import pytest
from zope.interface.verify import verifyObject

from mqgate.core import BrokerMessage
from mqgate.core.broker import Requester, Unauthorized
from mqgate.core.browse import open_browser
from mqgate.core.capture import (
    CAPTURE_MATCH, DRAIN_INTERVAL, CaptureBounds, CaptureConfig, CaptureForbidden,
    CaptureRefused, Captures)
from mqgate.core.capture_sinks import CountingSink
from mqgate.core.ring import is_ring
from mqgate.core.settings import SecuritySetting
from mqgate.core.taps import ICaptureSink

from tests.core import consume, make_broker, send

ADMIN = Requester("ann", True, groups=("admin",))
BOB = Requester("bob", False, groups=("user",))


class RecordingSink(CountingSink):
    def __init__(self):
        super().__init__()
        self.copies = []
        self.drops = []

    def ingest(self, copy):
        self.copies.append(copy)
        super().ingest(copy)

    def dropped(self, subscription, reason, count):
        self.drops.append((subscription, reason, count))
        super().dropped(subscription, reason, count)


class Audit:
    def __init__(self):
        self.records = []

    def record(self, kind, outcome, **details):
        self.records.append((kind, outcome, details.get("user"), details.get("why")))


def setup(**bounds):
    broker, clock = make_broker()
    broker.audit = Audit()
    sink = RecordingSink()
    captures = Captures(broker, clock, CaptureConfig(node="n1",
                                                     bounds=CaptureBounds(**bounds)), sink)
    return broker, clock, captures, sink


def test_install_makes_divert_ring_and_settings():
    """S7.2: install makes the copying divert, the non-stored ring queue named
    mqgate.capture.<node>.<address>.<sub>, and the address and security settings."""
    broker, _, captures, _ = setup(ring_size=50)
    sub = captures.install("s1", "queue://orders", requester=ADMIN)
    assert sub.queue_name == "mqgate.capture.n1.orders.s1"
    queue = broker.queue(sub.queue_name)
    assert is_ring(queue) and queue.limits.max_count == 50 and queue.store is None
    divert = broker.diverts.table.get(sub.divert_name)
    assert not divert.exclusive and divert.target == f"queue://{sub.queue_name}"
    assert broker.settings.address[CAPTURE_MATCH].full_policy == "DROP"
    assert broker.settings.security[CAPTURE_MATCH].permissions == {"consume": ("amq",)}


def test_capture_sees_every_message_and_production_is_untouched():
    """S7.2: the sink gets one copy per routed message, in order, while the
    production consumer gets exactly what it would have."""
    broker, clock, captures, sink = setup()
    captures.install("s1", "queue://orders", requester=ADMIN)
    _, production = consume(broker, "queue://orders", credit=100)
    send(broker, "queue://orders", *[b"%d" % i for i in range(20)], message_id="m")
    assert production.payloads == [b"%d" % i for i in range(20)]
    assert sink.copies == []             # copies wait in the ring until the drain runs
    clock.advance(DRAIN_INTERVAL)
    assert [c.message.payload for c in sink.copies] == production.payloads
    copy = sink.copies[0]
    assert (copy.subscription, copy.node, copy.address, copy.kind, copy.routed_to) == \
        ("s1", "n1", "queue://orders", "queue", ("orders",))
    assert copy.original_id == "m" and copy.verify_reason is None
    assert copy.message is not production.deliveries[0].message


def test_topic_capture_is_per_address():
    """S7.7: one copy per routed message on a topic, whatever the subscriptions;
    routed_to is unknown."""
    broker, clock, captures, sink = setup()
    captures.install("t", "topic://prices", requester=ADMIN)
    consume(broker, "topic://prices", credit=10)
    consume(broker, "topic://prices", credit=10)
    send(broker, "topic://prices", b"p")
    clock.advance(DRAIN_INTERVAL)
    assert len(sink.copies) == 1 and sink.copies[0].routed_to is None


def test_copy_without_message_id_says_why_it_cannot_be_verified():
    broker, clock, captures, sink = setup()
    captures.install("s", "queue://q", requester=ADMIN)
    send(broker, "queue://q", b"x")
    clock.advance(DRAIN_INTERVAL)
    assert sink.copies[0].original_id is None
    assert "no message-id" in sink.copies[0].verify_reason


def test_ring_drops_oldest_and_reports():
    """S7.4: between drains the ring holds at most its size; the oldest copies go,
    counted and reported to the sink as 'ring'."""
    broker, clock, captures, sink = setup(ring_size=5)
    captures.install("s", "queue://q", requester=ADMIN)
    send(broker, "queue://q", *[b"%d" % i for i in range(12)])
    clock.advance(DRAIN_INTERVAL)
    assert [c.message.payload for c in sink.copies] == [b"7", b"8", b"9", b"10", b"11"]
    assert sink.drops == [("s", "ring", 7)]
    assert broker.queue("q").depth == 12
    assert captures.get("s").describe()["dropped_ring"] == 7


def test_rate_bound_drops_beyond_and_refills_with_time():
    """S7.4: beyond the ingest rate copies are not made, counted as 'rate'; a
    second later the bucket has refilled."""
    broker, clock, captures, sink = setup(rate=10)
    captures.install("s", "queue://q", requester=ADMIN)
    send(broker, "queue://q", *[b"x"] * 25)
    clock.advance(DRAIN_INTERVAL)
    assert len(sink.copies) == 10 and ("s", "rate", 15) in sink.drops
    clock.advance(1.0)
    send(broker, "queue://q", *[b"y"] * 10)
    clock.advance(DRAIN_INTERVAL)
    assert len(sink.copies) == 20
    assert broker.queue("q").depth == 35       # production lost nothing


def test_expiry_delay_bounds_copies_in_time():
    """S7.4: a copy without expiry gets the capture's expiry delay; the reaper
    removes it from the ring when nobody drains it."""
    broker, clock, captures, _ = setup(expiry_delay=60)
    sub = captures.install("s", "queue://q", requester=ADMIN)
    sub.consumer.close()                      # as if the drain had stopped
    send(broker, "queue://q", b"1")
    ring = broker.queue(sub.queue_name)
    assert ring.depth == 1
    clock.advance(61)
    assert ring.reap(clock.seconds()) == 1


def test_filter_narrows_what_is_copied():
    """S7.4: a capture filter (selector) narrows what the broker copies."""
    broker, clock, captures, sink = setup()
    captures.install("s", "queue://q", selector="JMSPriority > 5", requester=ADMIN)
    send(broker, "queue://q", b"low", priority=1)
    send(broker, "queue://q", b"high", priority=8)
    clock.advance(DRAIN_INTERVAL)
    assert [c.message.payload for c in sink.copies] == [b"high"]


def test_refused_behind_an_exclusive_divert():
    """S7.3: an exclusive divert on the address: refused, naming the divert and
    where the traffic goes; nothing installed."""
    broker, _, captures, _ = setup()
    broker.create_divert("away", "queue://q", "queue://elsewhere", exclusive=True)
    with pytest.raises(CaptureRefused,
                       match="exclusive divert 'away'.*queue://elsewhere.*Capture"):
        captures.install("s", "queue://q", requester=ADMIN)
    assert not list(captures) and not broker.settings.address
    assert len(broker.diverts.table) == 1


def test_refused_without_authority_to_restrict():
    """S7.3: an operator's security setting letting others consume the capture
    queues: refused, naming the setting needed."""
    broker, _, captures, _ = setup()
    broker.settings.security["mqgate.capture.#"] = SecuritySetting(
        "mqgate.capture.#", {"consume": ("user",)})
    with pytest.raises(CaptureRefused, match="security setting on mqgate.capture.# with"
                       " consume=amq only"):
        captures.install("s", "queue://q", requester=ADMIN)
    assert not list(captures)


def test_only_the_capture_role_consumes_the_capture_queue():
    """S7.2: a client outside the capture role may not read the copies."""
    broker, _, captures, _ = setup()
    sub = captures.install("s", "queue://q", requester=ADMIN)
    with pytest.raises(Unauthorized, match="only group.s. amq consume"):
        consume(broker, f"queue://{sub.queue_name}",
                requester=Requester("eve", False, groups=("user",)))
    consume(broker, f"queue://{sub.queue_name}",
            requester=Requester("studio", False, groups=("amq",)))


def test_capture_write_needed_and_audited():
    """S7.9: without capture:write the install is refused and nothing made; each
    install and removal is audited before and with its outcome."""
    broker, _, captures, _ = setup()
    with pytest.raises(CaptureForbidden, match="needs capture:write.*mqgate.capture.writers"):
        captures.install("s", "queue://q", requester=BOB)
    assert not list(captures) and len(broker.diverts.table) == 0
    captures.install("s", "queue://q", requester=ADMIN)
    with pytest.raises(CaptureForbidden):
        captures.remove("s", requester=BOB)
    captures.remove("s", requester=ADMIN)
    kinds = [(k, o, u) for k, o, u, _ in broker.audit.records if k.startswith("capture")]
    assert kinds == [
        ("capture.install", "requested", "bob"), ("capture.install", "failed", "bob"),
        ("capture.install", "requested", "ann"), ("capture.install", "ok", "ann"),
        ("capture.remove", "requested", "bob"), ("capture.remove", "failed", "bob"),
        ("capture.remove", "requested", "ann"), ("capture.remove", "ok", "ann")]


def test_remove_leaves_no_trace():
    """S7.8: removal takes away the divert, the queue and (with the last capture) the
    settings; production goes on, nothing more is copied."""
    broker, clock, captures, sink = setup()
    sub = captures.install("a", "queue://q", requester=ADMIN)
    captures.install("b", "queue://r", requester=ADMIN)
    captures.remove("a", requester=ADMIN)
    assert broker.would_create("queue", sub.queue_name)
    assert CAPTURE_MATCH in broker.settings.security     # b still relies on it
    captures.remove("b", requester=ADMIN)
    assert not broker.settings.address and not broker.settings.security
    assert len(broker.diverts.table) == 0
    assert not [q for q in broker.queues() if q.name.startswith("mqgate.capture.")]
    send(broker, "queue://q", b"after")
    clock.advance(1)
    assert sink.copies == [] and not clock.getDelayedCalls()


def test_bad_names_and_duplicates_refused():
    broker, _, captures, _ = setup()
    captures.install("s", "queue://q", requester=ADMIN)
    with pytest.raises(CaptureRefused, match="already exists .on queue://q"):
        captures.install("s", "queue://r", requester=ADMIN)
    with pytest.raises(CaptureRefused, match="1 to 64 letters"):
        captures.install("no spaces", "queue://r", requester=ADMIN)
    with pytest.raises(CaptureRefused, match="cannot capture itself"):
        captures.install("t", "queue://mqgate.capture.n1.q.s", requester=ADMIN)


@pytest.mark.parametrize("bound", ["ring_size", "rate", "expiry_delay", "body_bytes"])
def test_bounds_must_be_positive(bound):
    with pytest.raises(ValueError, match=f"{bound}=0 must be"):
        CaptureBounds(**{bound: 0})


def test_counting_sink_truncates_and_degrades():
    """S7.4: the counting sink counts over-long bodies as truncated and degrades
    past the stored size."""
    bounds = CaptureBounds(body_bytes=4, stored_bytes=9)
    sink = CountingSink(lambda name: bounds)
    verifyObject(ICaptureSink, sink)
    broker, clock, captures, _ = setup()
    captures.sink = sink
    sub = captures.install("s", "queue://q", requester=ADMIN)
    sub.sink = sink
    send(broker, "queue://q", b"123456789", b"12", b"1234567")
    clock.advance(DRAIN_INTERVAL)
    figures = sink.figures("s")
    assert figures["truncated"] == 2 and figures["stored_bytes"] == 6
    assert figures["degraded"] and figures["dropped"] == {"stored": 1}


def test_producer_to_a_flooded_capture_never_blocks():
    """S7.4: however many copies, the production producer is never blocked."""
    broker, _, captures, _ = setup(ring_size=2, rate=1)
    captures.install("s", "queue://q", requester=ADMIN)
    producer = broker.open_producer("queue://q")
    for _ in range(200):
        producer.send(BrokerMessage(b"x"))
        assert not producer.blocked


def test_use_sink_moves_every_subscription():
    """The index taking over (use_sink) gets the copies of subscriptions made before,
    those restored at start among them."""
    broker, clock, captures, first = setup()
    captures.install("s", "queue://q", requester=ADMIN)
    second = RecordingSink()
    captures.use_sink(second)
    send(broker, "queue://q", b"x")
    clock.advance(DRAIN_INTERVAL)
    assert first.copies == [] and len(second.copies) == 1


def test_anonymous_producer_is_captured():
    """A message sent through an anonymous producer (routed by its to) is copied."""
    broker, clock, captures, sink = setup()
    captures.install("s", "queue://q", requester=ADMIN)
    producer = broker.open_producer(None)
    producer.send(BrokerMessage(b"anon", to="queue://q"))
    clock.advance(DRAIN_INTERVAL)
    assert [c.message.payload for c in sink.copies] == [b"anon"]


def test_browsing_the_capture_queue_needs_the_capture_role():
    """S7.2: a queue browser reads the copies too: refused outside the capture role."""
    broker, _, captures, _ = setup()
    sub = captures.install("s", "queue://q", requester=ADMIN)
    with pytest.raises(Unauthorized, match="security setting on mqgate.capture.#"):
        open_browser(broker, f"queue://{sub.queue_name}", object(), requester=BOB)
    assert open_browser(broker, f"queue://{sub.queue_name}", object(),
                        requester=Requester("studio", groups=("amq",))) is not None
