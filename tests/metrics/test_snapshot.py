"""The metrics snapshots (S5.1) read from a real broker core on a task.Clock."""

from twisted.internet.task import Clock

from mqgate.admin.requests import AdminContext
from mqgate.core import Broker, BrokerMessage
from mqgate.egress.clients import ClientRegistry, EgressClient
from mqgate.egress.scheduler import EgressScheduler, QueueLimits
from mqgate.metrics.snapshot import (
    MetricsSources, broker_snapshot, destination_snapshot, egress_snapshot,
    process_snapshot, store_snapshot)
from mqgate.store.filestore import FileStore
from mqgate.store.memory import MemoryStore

from tests.core import consume
from tests.deferreds import result, run_now


def _broker():
    clock = Clock()
    return Broker(clock), clock


def _send(broker, address, *sizes):
    producer = broker.open_producer(address)
    for size in sizes:
        producer.send(BrokerMessage(b"x" * size))
    return producer


def test_queue_counts_messages_and_bytes_in_out_and_held():
    """A queue's snapshot counts what was sent and acknowledged, in messages and bytes,
    what it holds (ready and unacked), its peak, producers and consumers."""
    broker, _ = _broker()
    producer = _send(broker, "queue://orders", 100, 200, 300)
    consumer, target = consume(broker, "queue://orders", credit=2)
    target.consumer.settle(target.deliveries[0], "accepted")
    figures = destination_snapshot(broker.queue("orders"))
    assert figures["name"] == "orders" and figures["type"] == "queue"
    assert (figures["messages_in"], figures["bytes_in"]) == (3, 600)
    assert (figures["messages_out"], figures["bytes_out"]) == (1, 100)
    assert (figures["messages"], figures["messages_ready"],
            figures["messages_unacked"]) == (2, 1, 1)
    assert figures["messages_bytes"] == 500
    assert figures["peak_messages"] == 3
    assert (figures["producers"], figures["consumers"]) == (1, 1)
    assert figures["delivered"] == 2
    producer.close()
    consumer.close()
    figures = destination_snapshot(broker.queue("orders"))
    assert (figures["producers"], figures["consumers"], figures["messages_ready"]) == (
        0, 0, 2)


def test_presettled_delivery_counts_out_at_once():
    """A message handed to a pre-settled consumer has left: counted out, not held."""
    broker, _ = _broker()
    consume(broker, "queue://fast", credit=5, presettled=True)
    _send(broker, "queue://fast", 50, 70)
    figures = destination_snapshot(broker.queue("fast"))
    assert (figures["messages_out"], figures["bytes_out"], figures["messages"]) == (
        2, 120, 0)
    assert figures["oldest_message_age_seconds"] == 0.0


def test_oldest_message_age_follows_the_head():
    """The oldest age is how long the head has waited; once it is consumed, the next
    message's wait."""
    broker, clock = _broker()
    _send(broker, "queue://slow", 10)
    clock.advance(5)
    _send(broker, "queue://slow", 10)
    clock.advance(5)
    assert destination_snapshot(broker.queue("slow"))["oldest_message_age_seconds"] \
        == 10.0
    consumer, target = consume(broker, "queue://slow", credit=1)
    consumer.settle(target.deliveries[0], "accepted")
    assert destination_snapshot(broker.queue("slow"))["oldest_message_age_seconds"] \
        == 5.0


def test_oldest_age_counts_a_higher_priority_newcomer_not_the_oldest():
    """The oldest waiting message is found whatever its priority: a newer message of
    higher priority does not hide an older one below it."""
    broker, clock = _broker()
    producer = broker.open_producer("queue://p")
    producer.send(BrokerMessage(b"low", priority=1))
    clock.advance(8)
    producer.send(BrokerMessage(b"high", priority=9))
    clock.advance(1)
    assert destination_snapshot(broker.queue("p"))["oldest_message_age_seconds"] == 9.0


def test_released_message_waits_again_from_its_first_arrival_or_from_its_return():
    """A message delivered at once and then released waits from its return; one that
    waited before keeps its first arrival."""
    broker, clock = _broker()
    consumer, target = consume(broker, "queue://r", credit=1)
    _send(broker, "queue://r", 10)          # handed over at once: no wait yet
    clock.advance(3)
    consumer.settle(target.deliveries[0], "released")
    clock.advance(2)
    assert destination_snapshot(broker.queue("r"))["oldest_message_age_seconds"] == 2.0


def test_topic_counts_published_and_copies_and_subscription_figures():
    """A topic counts what was published and the copies its subscriptions got, and
    adds up what they hold and their consumers (a wildcard subscription's backlog,
    prices.us's message included, counts whole in each topic it feeds)."""
    broker, _ = _broker()
    consume(broker, "topic://prices.eu", credit=10)
    consume(broker, "topic://prices.*")
    _send(broker, "topic://prices.eu", 40, 60)
    _send(broker, "topic://prices.us", 5)       # only the wildcard one takes it
    _send(broker, "topic://news", 9)            # no subscription takes it
    eu = destination_snapshot(broker.topic("prices.eu"))
    assert (eu["messages_in"], eu["bytes_in"]) == (2, 100)
    assert (eu["messages_out"], eu["bytes_out"]) == (4, 200)
    assert (eu["subscriptions"], eu["consumers"]) == (2, 2)
    assert (eu["messages"], eu["messages_ready"], eu["messages_unacked"]) == (5, 3, 2)
    assert eu["messages_bytes"] == 205
    us = destination_snapshot(broker.topic("prices.us"))
    assert (us["messages_in"], us["messages_out"], us["subscriptions"]) == (1, 1, 1)
    news = destination_snapshot(broker.topic("news"))
    assert (news["messages_in"], news["dropped"], news["messages_out"]) == (1, 1, 0)


def test_broker_totals_add_up_and_outlive_a_deleted_destination():
    """The broker's totals count every destination, and a temporary queue deleted
    with its consumer still counts in them."""
    broker, _ = _broker()
    _send(broker, "queue://a", 10, 20)
    _send(broker, "topic://t", 7)
    consumer, target = consume(broker, None, credit=5, dynamic=True)
    reply_to = consumer.queue.name
    _send(broker, f"queue://{reply_to}", 1000)
    consumer.settle(target.deliveries[0], "accepted")
    consumer.close()
    figures = broker_snapshot(AdminContext(broker, ClientRegistry(), None))
    assert (figures["messages_in"], figures["bytes_in"]) == (4, 1037)
    assert (figures["messages_out"], figures["bytes_out"]) == (1, 1000)
    assert (figures["messages"], figures["messages_bytes"]) == (2, 30)
    assert (figures["queues"], figures["topics"], figures["destinations"]) == (1, 1, 2)
    assert (figures["producers"], figures["consumers"]) == (2, 0)   # still attached
    assert "connections" not in figures    # a core alone: no services to count


def test_broker_snapshot_with_sources_has_uptime_and_no_connections():
    """With the sources wired, the broker snapshot says how long it has run and
    counts the connections of its services (none here)."""
    broker, clock = _broker()
    sources = MetricsSources(clock, started=clock.seconds())
    clock.advance(42)
    figures = broker_snapshot(AdminContext(broker, ClientRegistry(), None,
                                           metrics=sources))
    assert figures["uptime_seconds"] == 42.0
    assert (figures["connections"], figures["connections_opened"]) == (0, 0)


def test_store_snapshot_reads_the_store_and_none_without_one():
    """The store's figures come from its stats; no store, no figures."""
    broker, clock = _broker()
    context = AdminContext(broker, ClientRegistry(), None,
                           metrics=MetricsSources(clock, store=MemoryStore()))
    figures = store_snapshot(context)
    assert set(figures) == {"writes", "fsyncs", "fsync_seconds", "bytes_written"}
    assert figures["fsyncs"] == 0
    assert store_snapshot(AdminContext(broker, ClientRegistry(), None)) is None


def test_egress_snapshot_with_no_clients_and_process_snapshot():
    """No client: every egress queue is empty; the process snapshot has its memory
    and threads."""
    broker, _ = _broker()
    figures = egress_snapshot(AdminContext(broker, ClientRegistry(), None))
    assert figures["clients"] == 0 and figures["discards"] == 0
    assert set(figures["queued_messages"]) == {"C-1", "D-3", "D-2", "D-1", "G-1"}
    process = process_snapshot()
    assert process["rss_bytes"] > 0 and process["threads"] >= 1


def test_store_snapshot_of_a_file_store_with_sync_counts_fsyncs_and_their_time(tmp_path):
    """A file store with sync on: each batch of writes is one fsync, and the snapshot
    counts the records, the fsyncs and the time they took."""
    clock = Clock()
    store = FileStore(tmp_path / "filestore", run_now, sync=True)
    result(store.recover())
    result(store.add_destination("queue", "orders", {}))
    for message_id in range(1, 6):
        result(store.add_message("queue://orders", message_id, b"d" * 100))
    context = AdminContext(Broker(clock), ClientRegistry(), None,
                           metrics=MetricsSources(clock, store=store))
    figures = store_snapshot(context)
    assert figures["writes"] >= 5
    assert figures["fsyncs"] >= 5
    assert figures["fsync_seconds"] > 0.0
    assert figures["bytes_written"] >= 5 * 100
    result(store.close())


class _Profile:
    """A client profile whose D-1 queue holds 2 work units (min burst 1)."""

    queues = {"D-1": QueueLimits(max_depth=2, min_msg_burst=1)}


def test_egress_snapshot_adds_up_queued_messages_and_keeps_discards_of_gone_clients():
    """Queued messages and bytes are added up by egress queue over the clients; the
    discards of a client that went stay in the total."""
    broker, _ = _broker()
    registry = ClientRegistry()
    schedulers = [EgressScheduler(_Profile()) for _ in range(2)]
    for number, scheduler in enumerate(schedulers):
        registry.add(EgressClient(f"c{number}", user="u", peer="127.0.0.1:1",
                                  protocol="amqp", service="jms", profile=None,
                                  scheduler=scheduler, meter=None, disconnect=None))
    first, second = schedulers
    for item in ("a", "b", "c"):           # the third discards the oldest
        first.offer_direct(item, 100, cos=1)
    second.offer_guaranteed("g", 700)
    context = AdminContext(broker, registry, None)
    figures = egress_snapshot(context)
    assert figures["clients"] == 2
    assert (figures["queued_messages"]["D-1"], figures["queued_bytes"]["D-1"]) == (2, 200)
    assert (figures["queued_messages"]["G-1"], figures["queued_bytes"]["G-1"]) == (1, 700)
    assert figures["discards"] == 1
    registry.remove(registry.get("c0"))
    figures = egress_snapshot(context)
    assert (figures["clients"], figures["discards"]) == (1, 1)
    assert figures["queued_messages"]["D-1"] == 0
