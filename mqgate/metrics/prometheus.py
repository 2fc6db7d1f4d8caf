"""
The broker's figures in Prometheus's text format (S5.4), for the HTTP API's C{/metrics}.

A custom prometheus_client collector (L{BrokerCollector}) reads the snapshots of
L{mqgate.metrics.snapshot} when Prometheus scrapes, and only then: the broker keeps
plain counters, nothing per message knows about labels or series. Names follow
prometheus_client's conventions (units in the name, C{_total} on counters) and
RabbitMQ's (FACTS 7.3): C{mqgate_queue_messages_ready}, C{mqgate_connections}, ...;
docs/metrics.md lists them all.

Per-destination series carry a C{queue} or C{topic} label; temporary destinations
(reply queues, named at random and gone with their connection) have none of their
own, so that request/reply traffic does not leave a trail of dead series: they count
in the broker's totals.

    body, content_type = exposition(context)

Why L{exposition} writes the text itself rather than with prometheus_client's
C{generate_latest}: with 10,000 queues a scrape is some 120,000 samples, and
C{generate_latest}'s checks and formatting per sample took 1.3-1.9 s of the broker's
reactor thread on a busy two-core machine; writing the same families (those the
collectors yield, parsed back by prometheus_client's parser in the tests) took
0.09-0.18 s there. L{registry} still serves anyone who wants prometheus_client's own
writer.
"""

import functools

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily)

from mqgate.metrics import snapshot

__all__ = ["BrokerCollector", "registry", "exposition", "exposition_of", "render",
           "CONTENT_TYPE"]

#: The content type of L{exposition}'s body: Prometheus's text format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (suffix, snapshot key, kind, help) of the per-queue and per-topic families; a
# counter's name gets its _total from prometheus_client.
_G, _C = "gauge", "counter"
_QUEUE_FAMILIES = (
    ("messages_ready", "messages_ready", _G,
     "Messages waiting in the queue to be delivered."),
    ("messages_unacked", "messages_unacked", _G,
     "Messages delivered from the queue and not acknowledged yet."),
    ("messages", "messages", _G,
     "Messages the queue holds: ready plus unacknowledged."),
    ("messages_bytes", "messages_bytes", _G,
     "Bytes of the messages the queue holds."),
    ("oldest_message_age_seconds", "oldest_message_age_seconds", _G,
     "How long the oldest ready message has waited (0 when none waits)."),
    ("consumers", "consumers", _G, "Consumers attached to the queue."),
    ("producers", "producers", _G, "Producers attached to the queue by name."),
    ("messages_published", "messages_in", _C, "Messages published to the queue."),
    ("published_bytes", "bytes_in", _C, "Bytes of the messages published to the queue."),
    ("messages_delivered", "delivered", _C,
     "Deliveries from the queue to consumers, redeliveries included."),
    ("messages_acknowledged", "messages_out", _C,
     "Messages that left the queue for good: acknowledged, or sent pre-settled."),
    ("messages_dropped", "dropped", _C,
     "Messages the queue discarded: rejected by a consumer, or held when it was purged "
     "or deleted."),
)
_TOPIC_FAMILIES = (
    ("messages", "messages", _G,
     "Messages the topic's subscriptions hold: ready plus unacknowledged."),
    ("messages_bytes", "messages_bytes", _G,
     "Bytes of the messages the topic's subscriptions hold."),
    ("subscriptions", "subscriptions", _G,
     "Subscriptions the topic feeds (wildcard ones included)."),
    ("consumers", "consumers", _G, "Consumers of the topic's subscriptions."),
    ("producers", "producers", _G, "Producers attached to the topic by name."),
    ("messages_published", "messages_in", _C, "Messages published to the topic."),
    ("published_bytes", "bytes_in", _C, "Bytes of the messages published to the topic."),
    ("messages_routed", "messages_out", _C,
     "Copies of published messages handed to the topic's subscriptions."),
    ("messages_unroutable", "dropped", _C,
     "Messages published while no subscription took them."),
)
_BROKER_FAMILIES = (
    ("messages_published", "messages_in", _C,
     "Messages published to the broker's queues and topics."),
    ("published_bytes", "bytes_in", _C, "Bytes of the messages published to the broker."),
    ("messages_delivered", "delivered", _C,
     "Deliveries to consumers, redeliveries included."),
    ("messages_acknowledged", "messages_out", _C,
     "Messages that left the broker's queues for good (acknowledged, or pre-settled)."),
    ("acknowledged_bytes", "bytes_out", _C, "Bytes of the acknowledged messages."),
    ("messages_dropped", "dropped", _C, "Messages discarded or unroutable."),
    ("messages_expired", "expired", _C, "Messages that expired before delivery."),
    ("messages", "messages", _G,
     "Messages the broker holds: ready plus unacknowledged, on every queue and "
     "subscription."),
    ("messages_bytes", "messages_bytes", _G, "Bytes of the messages the broker holds."),
    ("messages_unacked", "messages_unacked", _G,
     "Messages delivered and not acknowledged yet."),
    ("queues", "queues", _G, "Queues, temporary ones included."),
    ("topics", "topics", _G, "Topics, temporary ones included."),
    ("subscriptions", "subscriptions", _G, "Topic subscriptions, durable or not."),
    ("memory_state", "memory_level", _G,
     "The memory state: 0 GREEN, 1 YELLOW, 2 ORANGE, 3 RED (new messages refused)."),
    ("memory_used_bytes", "memory_used_bytes", _G,
     "Bytes the memory states count: the messages held plus an overhead each."),
    ("memory_limit_bytes", "memory_limit_bytes", _G,
     "The memory budget the states are reckoned against (mqgate.memory.limit)."),
    ("memory_state_changes", "memory_state_changes", _C,
     "Changes of the memory state since the broker started."),
    ("memory_paged_messages", "memory_paged_messages", _G,
     "Persistent messages whose bodies are paged out to the store (ORANGE and RED)."),
    ("memory_paged_bytes", "memory_paged_bytes", _G,
     "Bytes of the bodies paged out to the store, not counted in the memory used."),
)
_SERVICE_FAMILIES = (
    ("connections", "connections", _G, "Open connections, by connection service."),
    ("connections_opened", "connections_opened", _C,
     "Connections accepted, by connection service."),
    ("connections_closed", "connections_closed", _C,
     "Connections closed, by connection service."),
    ("connection_incoming_bytes", "bytes_in", _C,
     "Bytes read from the connections of a service."),
    ("connection_outgoing_bytes", "bytes_out", _C,
     "Bytes written to the connections of a service."),
    ("service_workers_in_use", "workers_in_use", _G,
     "Workers of a service's thread pool lent to connections."),
    ("service_connections_refused", "connections_refused", _C,
     "Connections a service refused because its thread pool was full."),
)


def _family(kind, name, help_text, labels):
    if kind == _C:
        return CounterMetricFamily(name, help_text, labels=labels)
    return GaugeMetricFamily(name, help_text, labels=labels)


def _families(prefix, table, rows, label):
    """One family per row of C{table}, with a sample per snapshot in C{rows}."""
    labels = [label] if label else []
    for suffix, key, kind, help_text in table:
        family = _family(kind, f"{prefix}_{suffix}", help_text, labels)
        for row in rows:
            value = row.get(key)
            if value is not None:
                family.add_metric([row["name"]] if label else [], value)
        yield family


class BrokerCollector:
    """Reads the broker's snapshots on each scrape (a prometheus_client collector).

    @param context: the admin L{mqgate.admin.requests.AdminContext}.
    """

    def __init__(self, context):
        self.context = context

    def collect(self):
        queues, topics = _destinations(self.context)
        yield from _families("mqgate_queue", _QUEUE_FAMILIES, queues, "queue")
        yield from _families("mqgate_topic", _TOPIC_FAMILIES, topics, "topic")
        yield from _broker_wide(self.context)


def _destinations(context):
    """The snapshots of the queues and of the topics that get series of their own."""
    queues = [q for q in snapshot.destinations(context.broker, "queue")
              if not q["temporary"]]
    topics = [t for t in snapshot.destinations(context.broker, "topic")
              if not t["temporary"]]
    return queues, topics


def _broker_wide(context):
    """Every family but the per-destination ones."""
    yield from _families("mqgate", _BROKER_FAMILIES,
                         [{"name": "", **snapshot.broker_snapshot(context)}], None)
    services = [snapshot.service_snapshot(context, name)
                for name in snapshot.service_names(context)]
    yield from _families("mqgate", _SERVICE_FAMILIES, services, "service")
    yield from _egress(snapshot.egress_snapshot(context))
    store = snapshot.store_snapshot(context)
    if store is not None:
        yield from _store(store)
    yield from _capture(context)
    index = getattr(context, "capture_index", None)
    if index is not None:
        yield from _capture_index(index.status())
    yield from _process()


def _capture(context):
    """The capture subscriptions' figures (S7.4): copies, drops by reason, ring
    depth; one series per subscription (and node: capture is per node, S7.7)."""
    captures = getattr(context.broker, "captures", None)
    if captures is None:
        return
    labels = ["subscription", "node"]
    copied = CounterMetricFamily(
        "mqgate_capture_copies", "Copies a capture subscription's divert made.",
        labels=labels)
    ingested = CounterMetricFamily(
        "mqgate_capture_ingested", "Copies handed on to the capture index.",
        labels=labels)
    dropped = CounterMetricFamily(
        "mqgate_capture_dropped", "Copies dropped before the index kept them, by reason:"
        " rate (beyond the subscription's ingest rate), ring (its ring queue was full),"
        " backlog and write-failed (the capture index could not keep up).",
        labels=[*labels, "reason"])
    depth = GaugeMetricFamily(
        "mqgate_capture_ring_messages", "Copies waiting in the capture's ring queue.",
        labels=labels)
    for sub in captures:
        figures = sub.describe()
        key = [figures["name"], figures["node"]]
        copied.add_metric(key, figures["copied"])
        ingested.add_metric(key, figures["ingested"])
        dropped.add_metric([*key, "rate"], figures["dropped_rate"])
        dropped.add_metric([*key, "ring"], figures["dropped_ring"])
        depth.add_metric(key, figures["depth"])
    index = getattr(context, "capture_index", None)
    if index is not None:
        # The index's own drops; rate and ring it only heard of, counted above.
        node = captures.config.node
        for subscription, reasons in index.status()["dropped"].items():
            for reason, count in reasons.items():
                if reason not in ("rate", "ring"):
                    dropped.add_metric([subscription, node, reason], count)
    yield from (copied, ingested, dropped, depth)


def _egress(egress):
    clients = GaugeMetricFamily("mqgate_egress_clients",
                                "Connected clients, each with its own egress queues.")
    clients.add_metric([], egress["clients"])
    yield clients
    messages = GaugeMetricFamily(
        "mqgate_egress_queued_messages",
        "Messages waiting in the clients' egress queues to be written, by queue "
        "(C-1 control, D-3..D-1 direct, G-1 guaranteed).", labels=["queue"])
    queued_bytes = GaugeMetricFamily(
        "mqgate_egress_queued_bytes",
        "Bytes waiting in the clients' egress queues, by queue.", labels=["queue"])
    for name in snapshot.EGRESS_QUEUES:
        messages.add_metric([name], egress["queued_messages"].get(name, 0))
        queued_bytes.add_metric([name], egress["queued_bytes"].get(name, 0))
    yield messages
    yield queued_bytes
    discards = CounterMetricFamily(
        "mqgate_egress_discarded_messages",
        "Direct messages the egress queues discarded because a client could not keep "
        "up.")
    discards.add_metric([], egress["discards"])
    yield discards


def _store(store):
    writes = CounterMetricFamily("mqgate_store_writes",
                                 "Records written to the message store.")
    writes.add_metric([], store["writes"])
    yield writes
    written = CounterMetricFamily("mqgate_store_written_bytes",
                                  "Bytes written to the message store.")
    written.add_metric([], store["bytes_written"])
    yield written
    fsync = SummaryMetricFamily(
        "mqgate_store_fsync_seconds",
        "Time spent making the store's writes durable: fsyncs of the file journal, "
        "COMMITs of the SQL store (count and total seconds).",
        count_value=store["fsyncs"], sum_value=store["fsync_seconds"])
    yield fsync


def _capture_index(status):
    """The capture index's figures (S7.5): what it wrote, what waits, what it holds,
    what retention removed (its drops are in L{_capture}'s family)."""
    written = CounterMetricFamily("mqgate_capture_index_written_messages",
                                  "Captured messages written to the capture index.")
    written.add_metric([], status["written"])
    yield written
    pending = GaugeMetricFamily(
        "mqgate_capture_index_pending_messages",
        "Captured messages waiting to be written to the capture index.")
    pending.add_metric([], status["pending"])
    yield pending
    stored = GaugeMetricFamily(
        "mqgate_capture_index_stored_bytes",
        "Bytes the capture index holds, by capture subscription.",
        labels=["subscription"])
    for subscription, size in status["stored_bytes"].items():
        stored.add_metric([subscription], size)
    yield stored
    pruned = CounterMetricFamily(
        "mqgate_capture_index_removed_messages",
        "Captured messages removed from the index by retention: age (older than "
        "the retention) or size (the subscription held more than its stored size).",
        labels=["reason"])
    for reason, count in status["pruned"].items():
        pruned.add_metric([reason], count)
    yield pruned


def _process():
    sample = snapshot.process_snapshot()
    threads = GaugeMetricFamily("mqgate_process_threads",
                                "Threads of the broker process.")
    threads.add_metric([], sample["threads"])
    yield threads


def registry(context):
    """A prometheus_client registry with the broker's collector and the process's
    (C{process_*}: CPU seconds, resident and virtual memory, open files)."""
    result = CollectorRegistry(auto_describe=False)
    result.register(BrokerCollector(context))
    ProcessCollector(registry=result)
    return result


def exposition(context):
    """The Prometheus text of the broker now: C{(body bytes, content type)}.

    The same families as L{registry}'s, written straight from the snapshots: each
    destination's label is escaped once for all its series, not once per sample."""
    queues, topics = _destinations(context)
    out = []
    _render_rows(out, "mqgate_queue", _QUEUE_FAMILIES, queues, "queue")
    _render_rows(out, "mqgate_topic", _TOPIC_FAMILIES, topics, "topic")
    out.append(render(_broker_wide(context)))
    out.append(render(ProcessCollector(registry=None).collect()))
    return "".join(out).encode("utf-8"), CONTENT_TYPE


def _render_rows(out, prefix, table, rows, label):
    labelled = [(f'{{{label}="{_escape_label(row["name"])}"}} ', row) for row in rows]
    for suffix, key, kind, help_text in table:
        name = f"{prefix}_{suffix}"
        if kind == _C:
            name += "_total"
        out.append(f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} {kind}\n")
        out.extend(f"{name}{labels}{_value(row[key])}\n" for labels, row in labelled
                   if row[key] is not None)


def render(families):
    """The text format (0.0.4) of prometheus_client metric families."""
    out = []
    append = out.append
    for family in families:
        name = family.name
        if family.type == "counter":
            name += "_total"    # as prometheus_client names a counter's lines
        append(f"# HELP {name} {_escape_help(family.documentation)}\n"
               f"# TYPE {name} {family.type}\n")
        for sample in family.samples:
            labels = sample.labels
            if labels:
                pairs = ",".join(f'{key}="{_escape_label(value)}"'
                                 for key, value in labels.items())
                append(f"{sample.name}{{{pairs}}} {_value(sample.value)}\n")
            else:
                append(f"{sample.name} {_value(sample.value)}\n")
    return "".join(out)


def _escape_help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value):
    if "\\" in value or "\n" in value or '"' in value:
        value = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _value(value):
    if type(value) is int:
        return str(value)
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


_INF = float("inf")


def exposition_of(context):
    """C{exposition} bound to C{context}: what C{AdminContext.metrics_exposition}
    holds (each call reads everything afresh; nothing stays between scrapes)."""
    return functools.partial(exposition, context)
