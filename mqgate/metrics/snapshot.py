"""
The broker's figures as plain dicts (S5.1): what the C{metrics} admin commands print,
what Prometheus scrapes (L{mqgate.metrics.prometheus}) and what the metrics topics
publish.

Everything here reads counters that the broker keeps as plain integers on the paths
that run anyway (the core's queues and topics, the connection factories, the store,
the egress schedulers) and adds them up only when asked: a reading costs a walk over
the destinations, never anything per message.

    destination_snapshot(queue_or_topic)   one destination
    broker_snapshot(context)               the broker's totals
    service_snapshot(context, name)        one connection service
    egress_snapshot(context)               every client's egress queues
    store_snapshot(context)                the message store
    process_snapshot()                     the broker process (memory, CPU, threads)

C{context} is the admin L{mqgate.admin.requests.AdminContext}; its C{metrics} field,
a L{MetricsSources}, says where the services, the connections and the store are
(C{None}: a broker core alone, as in unit tests: only the core's figures).

Every figure has one source, which the admin commands, Prometheus, the metrics log
and the metrics topics all read through these functions: the open connections are
the broker's L{mqgate.net.connections.ConnectionRegistry} (the one C{list cxn},
C{list svc} and C{query bkr} read too); the totals of connections opened and closed
and of bytes read and written are the engine factories' counters; the messages are
the core's counters.

Names are snake_case English. Totals count since the broker started; C{messages} is
what a destination holds now (waiting plus delivered and not yet acknowledged), of
which C{messages_ready} wait and C{messages_unacked} are in flight (RabbitMQ's words,
FACTS 7.3).
"""

import dataclasses
from dataclasses import dataclass, field

from mqgate.core.destinations import Queue
from mqgate.metrics import process
from mqgate.net.connections import ConnectionRegistry

__all__ = [
    "MetricsSources", "destination_snapshot", "destinations", "broker_snapshot",
    "service_snapshot", "service_names", "egress_snapshot", "store_snapshot",
    "process_snapshot", "EGRESS_QUEUES",
]

#: The egress queues of a client connection, in service order (S9.1).
EGRESS_QUEUES = ("C-1", "D-3", "D-2", "D-1", "G-1")


@dataclass
class MetricsSources:
    """Where the figures beyond the core's are (wired in L{mqgate.service}).

    @ivar clock: an C{IReactorTime}: the time of a reading and the broker's uptime.
    @ivar started: the clock's C{seconds()} when the broker was built.
    @ivar services: service name -> its L{mqgate.net.services.ConnectionService}, in
        start order.
    @ivar pools: service name -> its L{mqgate.net.pool.ServicePool} (workers).
    @ivar store: the message store (anything with a C{stats} dict), or C{None}.
    @ivar connections: the broker's L{ConnectionRegistry}, the same object as
        L{mqgate.net.control.BrokerControl}'s: the one count of open connections.
    @ivar load_factor: the egress buffer's L{mqgate.egress.slowness.LoadFactor}
        (S9.6), as its watch last updated it, or C{None}.
    """

    clock: object
    started: float = 0.0
    services: dict = field(default_factory=dict)
    pools: dict = field(default_factory=dict)
    store: object = None
    connections: ConnectionRegistry = field(default_factory=ConnectionRegistry)
    load_factor: object = None


# -- destinations --------------------------------------------------------------------


def destination_snapshot(dest):
    """The figures of one queue or topic (L{mqgate.core.destinations}) as a dict.

    Keys: C{name}, C{type} (C{queue}/C{topic}), C{temporary}; totals C{messages_in},
    C{messages_out} (a queue: acknowledged or handed to a pre-settled consumer; a
    topic: copies handed to its subscriptions), C{bytes_in}, C{bytes_out},
    C{delivered}, C{dropped}, C{rejected} (refused by a consumer), C{expired};
    now: C{messages}, C{messages_ready},
    C{messages_unacked}, C{messages_bytes}, C{producers}, C{consumers},
    C{oldest_message_age_seconds}; C{peak_messages} (the most held at once; a topic:
    its fullest subscription's); a topic also C{subscriptions}.

    A topic's held figures add up its subscriptions': a wildcard subscription
    (C{prices.*}) is one queue for every topic it matches, so its whole backlog counts
    in each of them.
    """
    if isinstance(dest, Queue):
        return _queue_snapshot(dest)
    return _topic_snapshot(dest)


def _queue_snapshot(queue):
    depth = queue.depth
    return {
        "name": queue.name, "type": "queue", "temporary": queue.temporary,
        "messages_in": queue.messages_in, "messages_out": queue.messages_out,
        "bytes_in": queue.bytes_in, "bytes_out": queue.bytes_out,
        "delivered": queue.delivered, "dropped": queue.dropped,
        "rejected": queue.rejected, "expired": queue.expired,
        "messages": queue.held, "messages_ready": depth,
        "messages_unacked": queue.in_flight, "messages_bytes": queue.held_bytes,
        "peak_messages": queue.peak_held,
        "producers": queue.producers, "consumers": len(queue.consumers),
        "oldest_message_age_seconds": queue.oldest_age() if depth else 0.0,
    }


def _topic_snapshot(topic):
    subs = topic.subscriptions
    held = ready = unacked = held_bytes = consumers = peak = expired = rejected = 0
    age = 0.0
    for sub in subs:
        held += sub.held
        ready += sub.depth
        unacked += sub.in_flight
        held_bytes += sub.held_bytes
        consumers += len(sub.consumers)
        expired += sub.expired
        rejected += sub.rejected
        peak = max(peak, sub.peak_held)
        if sub.depth:
            age = max(age, sub.oldest_age())
    return {
        "name": topic.name, "type": "topic", "temporary": topic.temporary,
        "messages_in": topic.messages_in, "messages_out": topic.messages_out,
        "bytes_in": topic.bytes_in, "bytes_out": topic.bytes_out,
        "delivered": sum(sub.delivered for sub in subs), "dropped": topic.dropped,
        "rejected": rejected, "expired": expired,
        "messages": held, "messages_ready": ready, "messages_unacked": unacked,
        "messages_bytes": held_bytes, "peak_messages": peak,
        "producers": topic.producers, "consumers": consumers,
        "oldest_message_age_seconds": age, "subscriptions": len(subs),
    }


def destinations(broker, kind=None):
    """The snapshots of every queue and topic (C{kind}: only C{"queue"} or
    C{"topic"}), sorted by type then name; subscription queues are counted in
    their topics."""
    result = []
    if kind in (None, "queue"):
        result.extend(_queue_snapshot(broker.queue(name)) for name in broker.queues())
    if kind in (None, "topic"):
        result.extend(_topic_snapshot(broker.topic(name)) for name in broker.topics())
    return result


# -- the broker ----------------------------------------------------------------------


def broker_snapshot(context):
    """The broker's totals as a dict.

    Keys: C{messages_in}, C{messages_out}, C{bytes_in}, C{bytes_out} (messages
    published to the broker and acknowledged by its consumers, since it started),
    C{delivered}, C{dropped}, C{expired}; now: C{messages}, C{messages_bytes},
    C{messages_unacked}, C{queues}, C{topics}, C{subscriptions}, C{destinations},
    C{producers} and C{consumers} (attached anywhere);
    with L{MetricsSources}: C{connections} (open now: the connection registry's
    count, as C{query bkr}'s), C{connections_opened}/C{_closed} and
    C{connection_bytes_in}/C{_out} (what every service read from and wrote to its
    sockets, protocol framing included), C{uptime_seconds}, C{timestamp} (the clock's
    seconds); with memory states (S2.6), those of
    L{mqgate.core.memory.MemoryStates.snapshot} (C{memory_state}, C{memory_level},
    C{memory_used_bytes}, C{memory_limit_bytes}, C{memory_percent},
    C{memory_state_changes}, C{memory_paged_messages}, C{memory_paged_bytes}).
    """
    stats = context.broker.stats
    result = {
        "messages_in": stats["published"], "messages_out": stats["acknowledged"],
        "bytes_in": stats["bytes_in"], "bytes_out": stats["bytes_out"],
        "delivered": stats["delivered"], "dropped": stats["dropped"],
        "expired": stats["expired"],
        "messages": stats["held"], "messages_bytes": stats["held_bytes"],
        "messages_unacked": stats["in_flight"],
        "queues": stats["queues"], "topics": stats["topics"],
        "subscriptions": stats["subscriptions"],
        "destinations": stats["queues"] + stats["topics"],
    }
    result.update(_attached(context.broker))
    memory = context.broker.memory
    if memory is not None:
        result.update(memory.snapshot())   # S2.6: the memory state and its figures
    sources = _sources(context)
    if sources is not None:
        services = [service_snapshot(context, name) for name in service_names(context)]
        for key in ("connections_opened", "connections_closed"):
            result[key] = sum(s[key] for s in services)
        result["connection_bytes_in"] = sum(s["bytes_in"] for s in services)
        result["connection_bytes_out"] = sum(s["bytes_out"] for s in services)
        result["connections"] = len(sources.connections)
        now = sources.clock.seconds()
        result["uptime_seconds"] = max(0.0, now - sources.started)
        result["timestamp"] = now
    return result


def _attached(broker):
    # Producers attached by name (anonymous ones route per message and are counted
    # nowhere) and consumers of every queue and subscription.
    producers = consumers = 0
    for name in broker.queues():
        queue = broker.queue(name)
        producers += queue.producers
        consumers += len(queue.consumers)
    for name in broker.topics():
        producers += broker.topic(name).producers
    for sub in broker.subscriptions():
        consumers += len(sub.consumers)
    return {"producers": producers, "consumers": consumers}


# -- services ------------------------------------------------------------------------


def service_names(context):
    """The names of the running connection services, in start order."""
    sources = _sources(context)
    return [] if sources is None else list(sources.services)


def service_snapshot(context, name):
    """One connection service's figures as a dict.

    Keys: C{name}; C{connections} (now: the connection registry's count, as
    C{list svc}'s), C{connections_opened} and
    C{connections_closed} (so far), C{bytes_in} and C{bytes_out} (read and written on
    its connections so far); from its thread pool, when it has one: C{workers_in_use},
    C{workers_idle}, C{max_workers} (-1: no limit), C{connections_refused}.

    @raise KeyError: no service C{name} runs.
    """
    sources = _sources(context)
    if sources is None:
        raise KeyError(name)
    service = sources.services[name]
    factories = service.engine_factories()
    result = {
        "name": name,
        "connections": sources.connections.count(name),
        "connections_opened": sum(f.opened for f in factories),
        "connections_closed": sum(f.closed for f in factories),
        "bytes_in": sum(f.bytes_in for f in factories),
        "bytes_out": sum(f.bytes_out for f in factories),
    }
    pool = sources.pools.get(name)
    if pool is not None:
        stats = pool.stats()
        result.update(workers_in_use=stats["in_use"], workers_idle=stats["idle"],
                      max_workers=stats["max_threads"],
                      connections_refused=stats["refused"])
    return result


# -- egress, store, process ----------------------------------------------------------


def egress_snapshot(context):
    """Every connected client's egress queues added up (S9).

    Keys: C{clients}; C{queued_messages} and C{queued_bytes}, each a dict by queue
    (C{C-1} ... C{G-1}); C{discards} (messages the D queues discarded so far, gone
    clients' included).
    """
    messages = dict.fromkeys(EGRESS_QUEUES, 0)
    queued_bytes = dict.fromkeys(EGRESS_QUEUES, 0)
    registry = context.clients
    discards = getattr(registry, "retired_discards", 0) if registry is not None else 0
    clients = list(registry) if registry is not None else []
    for client in clients:
        scheduler = client.scheduler
        for stats in scheduler.stats():
            messages[stats.name] = messages.get(stats.name, 0) + stats.length_msgs
            queued_bytes[stats.name] = (queued_bytes.get(stats.name, 0)
                                        + stats.length_bytes)
        discards += scheduler.discards
    return {"clients": len(clients), "queued_messages": messages,
            "queued_bytes": queued_bytes, "discards": discards}


def store_snapshot(context):
    """The message store's figures, or C{None} when the broker has none.

    Keys: C{writes} (records written), C{fsyncs} (flushes to disk: fsyncs of the file
    journal, COMMITs of the SQL store), C{fsync_seconds} (time spent in them, summed),
    C{bytes_written}.
    """
    sources = _sources(context)
    store = None if sources is None else sources.store
    if store is None:
        return None
    stats = store.stats
    if callable(stats):
        stats = stats()
    return {"writes": stats.get("records", 0), "fsyncs": stats.get("fsyncs", 0),
            "fsync_seconds": float(stats.get("fsync_seconds", 0.0)),
            "bytes_written": stats.get("bytes_written", 0)}


def process_snapshot(sample=process.sample):
    """The broker process's figures (C{sample()}: L{mqgate.metrics.process.sample})
    as a dict."""
    return dataclasses.asdict(sample())


def _sources(context):
    return getattr(context, "metrics", None)
