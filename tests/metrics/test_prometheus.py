"""Prometheus exposition (S5.4) of a real broker core, parsed back with
prometheus_client's own parser."""

import time

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.task import Clock

from mqgate.admin.requests import AdminContext
from mqgate.core import Broker, BrokerMessage
from mqgate.core.capture import DRAIN_INTERVAL, CaptureBounds, CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink
from mqgate.egress.clients import ClientRegistry
from mqgate.metrics.prometheus import CONTENT_TYPE, exposition, exposition_of, registry
from mqgate.metrics.snapshot import MetricsSources
from mqgate.store.memory import MemoryStore

from tests.core import consume, send

DESTINATIONS = 10_000


def _parse(body):
    """{(sample name, sorted labels): value} and {family name: (type, help)}."""
    samples, families = {}, {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        families[family.name] = (family.type, family.documentation)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def _context(broker, clock):
    return AdminContext(broker, ClientRegistry(), None,
                        metrics=MetricsSources(clock, clock.seconds(), store=MemoryStore()))


def test_ten_thousand_queues_scraped_in_under_a_second_with_the_figures_sent():
    """10,000 queues, each sent a known number of messages of a known size and some
    consumed: the exposition takes under a second and says exactly that."""
    clock = Clock()
    broker = Broker(clock)
    for i in range(DESTINATIONS):
        producer = broker.open_producer(f"queue://q{i}")
        for _ in range(i % 3 + 1):
            producer.send(BrokerMessage(b"m" * (10 + i % 50)))
        producer.close()
    consumer, target = consume(broker, "queue://q7", credit=2)
    consumer.settle(target.deliveries[0], "accepted")
    context = _context(broker, clock)
    started = time.perf_counter()
    body, content_type = exposition(context)
    took = time.perf_counter() - started
    assert took < 1.0, f"{DESTINATIONS} queues took {took:.3f} s"
    assert content_type == CONTENT_TYPE
    samples, _ = _parse(body)
    ready = {labels[0][1]: value for (name, labels), value in samples.items()
             if name == "mqgate_queue_messages_ready"}
    assert len(ready) == DESTINATIONS
    for i in (0, 1, 2, 4321, DESTINATIONS - 1):
        queue = (("queue", f"q{i}"),)
        assert samples[("mqgate_queue_messages_published_total", queue)] == i % 3 + 1
        assert samples[("mqgate_queue_published_bytes_total", queue)] == \
            (i % 3 + 1) * (10 + i % 50)
        assert ready[f"q{i}"] == i % 3 + 1
    q7 = (("queue", "q7"),)     # 2 sent, 2 delivered, 1 accepted
    assert (samples[("mqgate_queue_messages_ready", q7)],
            samples[("mqgate_queue_messages_unacked", q7)],
            samples[("mqgate_queue_messages", q7)],
            samples[("mqgate_queue_consumers", q7)],
            samples[("mqgate_queue_messages_delivered_total", q7)],
            samples[("mqgate_queue_messages_acknowledged_total", q7)]) == (0, 1, 1, 1, 2, 1)
    sent = sum(i % 3 + 1 for i in range(DESTINATIONS))
    assert samples[("mqgate_messages_published_total", ())] == sent
    assert samples[("mqgate_messages", ())] == sent - 1
    assert samples[("mqgate_queues", ())] == DESTINATIONS


def test_families_have_help_types_and_units_and_process_figures():
    """Every family says what it counts (HELP) and its type; counters end in _total,
    the store's fsync time is a summary in seconds, process_* figures are there."""
    clock = Clock()
    broker = Broker(clock)
    consume(broker, "topic://prices.eu", credit=1)
    producer = broker.open_producer("topic://prices.eu")
    producer.send(BrokerMessage(b"p" * 33))
    samples, families = _parse(exposition(_context(broker, clock))[0])
    for name, (kind, help_text) in families.items():
        assert help_text and len(help_text) > 10, name
    assert families["mqgate_topic_messages_published"][0] == "counter"
    assert families["mqgate_queue_messages_ready"][0] == "gauge"
    assert families["mqgate_connections"][0] == "gauge"
    assert families["mqgate_store_fsync_seconds"][0] == "summary"
    assert ("mqgate_store_fsync_seconds_count", ()) in samples
    topic = (("topic", "prices.eu"),)
    assert samples[("mqgate_topic_messages_published_total", topic)] == 1
    assert samples[("mqgate_topic_published_bytes_total", topic)] == 33
    assert samples[("mqgate_topic_consumers", topic)] == 1
    assert samples[("mqgate_topic_producers", topic)] == 1
    assert samples[("process_resident_memory_bytes", ())] > 0
    assert samples[("mqgate_process_threads", ())] >= 1
    assert ("mqgate_egress_queued_messages", (("queue", "G-1"),)) in samples


def test_names_needing_escapes_and_temporary_queues():
    """A queue name with a quote, a backslash and a newline comes back intact; a
    temporary queue has no series of its own but counts in the totals."""
    clock = Clock()
    broker = Broker(clock)
    odd = 'say "hi"\\now\nthen'
    broker.create_queue(odd)
    broker.open_producer(f"queue://{odd}").send(BrokerMessage(b"1234"))
    consumer, _ = consume(broker, None, dynamic=True)
    broker.open_producer(f"queue://{consumer.queue.name}").send(BrokerMessage(b"12"))
    samples, _ = _parse(exposition(_context(broker, clock))[0])
    assert samples[("mqgate_queue_published_bytes_total", (("queue", odd),))] == 4
    queues = {dict(labels)["queue"] for name, labels in samples
              if name == "mqgate_queue_messages"}
    assert queues == {odd}
    assert samples[("mqgate_published_bytes_total", ())] == 6


def test_registry_with_prometheus_clients_writer_says_the_same():
    """The collector in a prometheus_client registry, written by generate_latest, gives
    the same series and values as exposition."""
    clock = Clock()
    broker = Broker(clock)
    for i in range(20):
        broker.open_producer(f"queue://r{i}").send(BrokerMessage(b"x" * i))
    consume(broker, "topic://t", credit=1)
    broker.open_producer("topic://t").send(BrokerMessage(b"y"))
    context = _context(broker, clock)
    ours, _ = _parse(exposition(context)[0])
    theirs, _ = _parse(generate_latest(registry(context)))
    volatile = ("process_", "mqgate_process_")
    assert {k: v for k, v in ours.items() if not k[0].startswith(volatile)} == \
        {k: v for k, v in theirs.items() if not k[0].startswith(volatile)}
    assert exposition_of(context)()[0].startswith(b"# HELP mqgate_queue_")


def test_capture_figures_exposed():
    """S7.4: each capture subscription's copies and drops (by reason) are exposed,
    labelled with the subscription and the node."""
    clock = Clock()
    broker = Broker(clock)
    broker.captures = Captures(broker, clock, CaptureConfig(
        node="n1", bounds=CaptureBounds(ring_size=3, rate=5)), CountingSink())
    broker.captures.install("tap", "queue://orders")
    send(broker, "queue://orders", *[b"x"] * 9)
    clock.advance(DRAIN_INTERVAL)
    samples, families = _parse(exposition(_context(broker, clock))[0])
    key = (("node", "n1"), ("subscription", "tap"))
    assert samples[("mqgate_capture_copies_total", key)] == 5
    assert samples[("mqgate_capture_ingested_total", key)] == 3
    assert samples[("mqgate_capture_dropped_total", (*key[:1], ("reason", "rate"),
                                                       key[1]))] == 4
    assert samples[("mqgate_capture_dropped_total", (*key[:1], ("reason", "ring"),
                                                       key[1]))] == 2
    assert families["mqgate_capture_dropped"][0] == "counter"
