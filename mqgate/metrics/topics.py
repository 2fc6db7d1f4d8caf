# -*- test-case-name: tests.metrics.test_topics -*-
"""
The metrics topics (S5.3): samples the broker publishes as messages, in the source
system's format (FACTS 1.5), so that a monitoring client written for it keeps working.

    mq.metrics.broker                       the broker's totals
    mq.metrics.jvm                          the broker process (memory, threads, CPU)
    mq.metrics.destination_list             every destination, by its metrics topic
    mq.metrics.destination.queue.NAME       one queue
    mq.metrics.destination.topic.NAME       one topic

Each sample is a map message (a JMS MapMessage as Qpid JMS writes one: an amqp-value
map body, message annotation C{x-opt-jms-msg-type} = 2) of priority 5, with the
application properties C{type} (the topic's name), C{timestamp} (ms), C{brokerAddress},
C{brokerHost} and C{brokerPort}; it expires C{mqgate.metrics.topic.timetolive}
seconds after it was taken and is persistent only with C{mqgate.metrics.topic.persist}.

What it costs: nothing for a topic nobody subscribes to. A metrics topic exists once
someone subscribed to it; every C{mqgate.metrics.topic.interval} seconds each one that
has subscribers gets a sample, and a new subscriber gets one of its own at once (on the
next reactor turn, once its attach is complete). Only subscriptions naming the topic
exactly receive samples: a wildcard subscription (C{#}) never does.

Only the broker publishes under C{mq.metrics.}: a client's producer is refused, and so
is a subscription to any other name under it (L{MetricsTopics.reserved}, asked by the
core before every attach and anonymous route). Who may consume them is access control's
business (the shipped rules: group admin only).

Each topic's fields come from one function (L{broker_fields}, L{jvm_fields},
L{destination_list_fields}, L{destination_fields}) that renames the figures of
L{mqgate.metrics.snapshot}, the same ones C{metrics bkr|dst}, the metrics log and
Prometheus show; a figure the broker does not keep is left out of the map rather
than made up (the README's "Metrics topics" lists them).
"""

import functools
import itertools
from dataclasses import dataclass

from twisted.application import service
from twisted.internet import task
from twisted.logger import Logger

from mqgate.amqp.message import Header, Properties, build_message
from mqgate.amqp.types import Byte, Int, Symbol, Timestamp
from mqgate.core.addresses import QUEUE, TOPIC, NotFound
from mqgate.core.broker import Unauthorized
from mqgate.core.message import BrokerMessage
from mqgate.core.persistence import stored_on
from mqgate.core.selectors import message_field
from mqgate.metrics import process, snapshot

__all__ = [
    "PREFIX", "BROKER", "JVM", "DESTINATION_LIST", "QUEUE_PREFIX", "TOPIC_PREFIX",
    "PRIORITY", "TopicSettings", "MetricsTopics", "broker_fields", "jvm_fields",
    "destination_list_fields", "destination_fields", "metrics_topic_of",
    "metrics_message",
]

PREFIX = "mq.metrics."
BROKER = PREFIX + "broker"
JVM = PREFIX + "jvm"
DESTINATION_LIST = PREFIX + "destination_list"
QUEUE_PREFIX = PREFIX + "destination.queue."
TOPIC_PREFIX = PREFIX + "destination.topic."
_FIXED = (BROKER, JVM, DESTINATION_LIST)

#: The source system's metrics messages all have this priority (FACTS 1.5).
PRIORITY = 5

# Names starting so are the broker's own (metrics, the DMQ, admin): left out of
# numDestinations and the destination list, as the source system leaves out its
# internal destinations.
_INTERNAL = "mq."

# Qpid JMS's marking of a MapMessage, and of a topic as its destination (the
# AMQP JMS mapping): without them a JMS client reads the map as an ObjectMessage.
_JMS_MSG_TYPE = Symbol("x-opt-jms-msg-type")
_JMS_MAP_MESSAGE = Byte(2)
_JMS_DEST = Symbol("x-opt-jms-dest")
_JMS_TOPIC = Byte(1)


@dataclass(frozen=True)
class TopicSettings:
    """The C{mqgate.metrics.topic.*} settings.

    @ivar enabled: publish at all; when false, subscribing is refused with a reason.
    @ivar interval: seconds between two samples of a topic with subscribers.
    @ivar timetolive: seconds a sample lives; 0 means it never expires.
    @ivar persist: samples are persistent messages.
    """

    enabled: bool = True
    interval: int = 60
    timetolive: int = 300
    persist: bool = False

    @classmethod
    def from_settings(cls, settings):
        prefix = "mqgate.metrics.topic."
        return cls(settings[prefix + "enabled"], settings[prefix + "interval"],
                   settings[prefix + "timetolive"], settings[prefix + "persist"])


# -- the fields of each topic: one function each, from the snapshots --------------------
#
# The figures are those of mqgate.metrics.snapshot, the ones `metrics bkr|dst`, the
# metrics log and Prometheus show: these functions only rename them to OpenMQ's keys.

def broker_fields(figures, broker):
    """C{mq.metrics.broker} (longs) from L{snapshot.broker_snapshot}'s C{figures}.

    numConnections counts the open connections, logged in or not (the connection
    registry, as C{query bkr}); numMsgsOut counts hand-overs to consumers
    (redeliveries too); msgBytesIn the bytes of the published messages, msgBytesOut
    those of the messages that left for good (acknowledged, or sent pre-settled);
    numMsgs and totalMsgBytes what the queues and subscriptions hold, waiting or in
    flight; pktBytesIn and pktBytesOut what the connections read and wrote, protocol
    framing included. Left out (not kept): numPktsIn, numPktsOut. Without the
    services (a core alone) the connection figures are left out too.
    """
    fields = {
        "numMsgsIn": figures["messages_in"],
        "numMsgsOut": figures["delivered"],
        "msgBytesIn": figures["bytes_in"],
        "msgBytesOut": figures["bytes_out"],
        "numMsgs": figures["messages"],
        "totalMsgBytes": figures["messages_bytes"],
        # The broker's own mq.* destinations are left out, as OpenMQ leaves out its
        # internal ones (FACTS 1.5); the snapshot's `destinations` counts them.
        "numDestinations": sum(1 for _ in _public(broker.queues()))
        + sum(1 for _ in _public(broker.topics())),
    }
    for key, name in (("numConnections", "connections"),
                      ("pktBytesIn", "connection_bytes_in"),
                      ("pktBytesOut", "connection_bytes_out")):
        if name in figures:
            fields[key] = figures[name]
    return fields


def jvm_fields(figures):
    """C{mq.metrics.jvm}, for a Python process, from L{snapshot.process_snapshot}.

    The Java names map onto the process's memory: totalMemory is what it holds now
    (resident), maxMemory what it could grow to (the machine's memory), freeMemory
    the difference. Beside them: peakMemory, virtualMemory, numThreads,
    cpuUserMillis, cpuSystemMillis, openFiles, maxOpenFiles. A figure the platform
    cannot give is left out.
    """
    rss = figures["rss_bytes"]
    fields = {"totalMemory": rss, "peakMemory": figures["peak_rss_bytes"],
              "numThreads": figures["threads"],
              "cpuUserMillis": int(figures["cpu_user_seconds"] * 1000),
              "cpuSystemMillis": int(figures["cpu_system_seconds"] * 1000),
              "maxOpenFiles": figures["max_open_files"]}
    physical = figures["physical_memory"]
    if physical is not None:
        fields["maxMemory"] = physical
        fields["freeMemory"] = max(physical - rss, 0)
    if figures["virtual_bytes"] is not None:
        fields["virtualMemory"] = figures["virtual_bytes"]
    if figures["open_files"] is not None:
        fields["openFiles"] = figures["open_files"]
    return fields


def destination_list_fields(destinations):
    """C{mq.metrics.destination_list} from L{snapshot.destinations}: for every queue
    and topic (the broker's own C{mq.*} ones aside), its metrics topic's name ->
    {name, type, isTemporary}."""
    prefixes = {QUEUE: QUEUE_PREFIX, TOPIC: TOPIC_PREFIX}
    return {prefixes[d["type"]] + d["name"]:
            {"name": d["name"], "type": d["type"], "isTemporary": bool(d["temporary"])}
            for d in destinations if not d["name"].startswith(_INTERNAL)}


def destination_fields(figures):
    """C{mq.metrics.destination.queue.NAME} or C{.topic.NAME} (longs), from
    L{snapshot.destination_snapshot}'s C{figures}.

    A topic's figures are summed over its subscriptions (numMsgsIn: published to
    the topic; numDiscardedMsgs: published while no subscription took them).
    numMsgsOut counts hand-overs (redeliveries too), numAckedMsgs messages that left
    for good and msgBytesOut their bytes; msgBytesIn the bytes of numMsgsIn; numMsgs
    and totalMsgBytes what is held, waiting or in flight, and peakNumMsgs the most
    held at once (a topic: its fullest subscription's); numDiscardedMsgs those
    dropped (rejected ones included). mqgate has no backup consumers (always 0).
    Left out (not kept): the averages, the peaks of consumers and of bytes,
    numPurgedMsgs, numRolledbackMsgs and the disk figures.
    """
    consumers = figures["consumers"]
    return {
        "numActiveConsumers": consumers,
        "numConsumers": consumers,
        "numBackupConsumers": 0,
        "numMsgsIn": figures["messages_in"],
        "numMsgsOut": figures["delivered"],
        "numAckedMsgs": figures["messages_out"],
        "msgBytesIn": figures["bytes_in"],
        "msgBytesOut": figures["bytes_out"],
        "numMsgs": figures["messages"],
        "peakNumMsgs": figures["peak_messages"],
        "totalMsgBytes": figures["messages_bytes"],
        "numExpiredMsgs": figures["expired"],
        "numRejectedMsgs": figures["rejected"],
        "numDiscardedMsgs": figures["dropped"],
    }


def _public(names):
    return (name for name in names if not name.startswith(_INTERNAL))


def metrics_topic_of(name):
    """What the metrics topic C{name} samples: C{(None, None)} for the broker, jvm and
    destination list topics, C{(kind, destination name)} for a destination's.

    @raise ValueError: C{name} is no metrics topic.
    """
    if name in _FIXED:
        return None, None
    for kind, prefix in ((QUEUE, QUEUE_PREFIX), (TOPIC, TOPIC_PREFIX)):
        if name.startswith(prefix) and len(name) > len(prefix):
            return kind, name[len(prefix):]
    raise ValueError(name)


# -- the message ------------------------------------------------------------------------

def metrics_message(name, fields, *, now, host, port, settings, message_id=None):
    """A sample of topic C{name} as the core holds a message.

    @param now: the sample's time, in seconds on the broker's clock (epoch).
    @param host: the broker's host name; C{port} its port mapper's port.
    """
    millis = int(now * 1000)
    ttl = settings.timetolive
    expiry_ms = millis + ttl * 1000 if ttl > 0 else None
    encoded = build_message(
        fields,
        # Plain ints: the header's field types say how they are encoded, and the
        # STOMP mapping renders the values as they are here.
        header=Header(durable=settings.persist, priority=PRIORITY,
                      ttl=ttl * 1000 if ttl > 0 else None),
        message_annotations={_JMS_MSG_TYPE: _JMS_MAP_MESSAGE, _JMS_DEST: _JMS_TOPIC},
        properties=Properties(message_id=message_id, to=name,
                              creation_time=Timestamp(millis),
                              absolute_expiry_time=None if expiry_ms is None
                              else Timestamp(expiry_ms)),
        application_properties={"type": name, "timestamp": millis,
                                "brokerAddress": f"{host}:{port}",
                                "brokerHost": host, "brokerPort": Int(port)})
    return BrokerMessage(encoded, durable=settings.persist, priority=PRIORITY,
                         expiry=None if ttl <= 0 else now + ttl, to=name,
                         message_id=message_id)


# -- the publisher ----------------------------------------------------------------------

class MetricsTopics(service.Service):
    """Publishes the metrics topics of one broker (S5.3).

    @param context: the admin L{mqgate.admin.requests.AdminContext} the snapshots
        read (L{mqgate.metrics.snapshot}); the hooks C{reserved} and C{on_subscribe}
        of its C{broker} are this object's while it runs.
    @param clock: an C{IReactorTime} (task.Clock in tests).
    @param settings: the L{TopicSettings}.
    @param identity: C{identity() -> (host, port)}: what the header properties say
        the broker is (asked for each sample: the port mapper's port is known once it
        listens).
    @param sample: C{sample() -> ProcessSample} (L{process.sample}).
    """

    log = Logger(namespace="mqgate.metrics")

    def __init__(self, context, clock, settings=TopicSettings(),
                 identity=lambda: ("localhost", 0), sample=process.sample):
        self.context = context
        self.broker = context.broker
        self.clock = clock
        self.settings = settings
        self.identity = identity
        self._sample = sample
        self._topics = {}    # metrics topic name -> its Topic, once subscribed to
        self._ids = itertools.count(1)
        self._loop = None

    def startService(self):
        super().startService()
        self.broker.reserved = self.reserved
        self.broker.on_subscribe = self.subscribed
        if self.settings.enabled:
            self._loop = task.LoopingCall(self.publish)
            self._loop.clock = self.clock
            self._loop.start(self.settings.interval, now=False).addErrback(
                lambda failure: self.log.failure("metrics topics stopped", failure))

    def stopService(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        self.broker.on_subscribe = None
        return super().stopService()

    # -- the core's hooks -------------------------------------------------------------

    def reserved(self, kind, name, operation):
        """The core's C{reserved} hook: refuse what clients may not do under
        C{mq.metrics.}, and make a metrics topic the first time it is subscribed to.

        @raise Unauthorized: a producer (only the broker publishes there).
        @raise NotFound: a queue, a name that is no metrics topic, a destination's
            metrics topic while the destination does not exist, or any of them while
            the metrics topics are off.
        """
        if not name.startswith(PREFIX):
            return
        if operation != "consume":
            raise Unauthorized(f"{name}: only the broker publishes under {PREFIX}")
        if kind != TOPIC:
            raise NotFound(f"no queue {name}: the metrics destinations are topics"
                           f" (subscribe to topic://{name}, or /topic/{name} over STOMP)")
        try:
            sampled = metrics_topic_of(name)
        except ValueError:
            raise NotFound(f"no topic {name}: only the metrics topics exist under "
                           f"{PREFIX} ({BROKER}, {JVM}, {DESTINATION_LIST}, "
                           f"{QUEUE_PREFIX}NAME, {TOPIC_PREFIX}NAME)") from None
        if not self.settings.enabled:
            raise NotFound(f"no topic {name}: the metrics topics are off on this broker "
                           "(mqgate.metrics.topic.enabled=false)")
        if name in self._topics and not self._topics[name].deleted:
            return
        kind, destination = sampled
        if kind is not None:
            # Bounded by the destinations that exist: a client cannot make one metrics
            # topic after another for names that name nothing, nor for the metrics
            # topics themselves (the broker's own mq.* ones are not listed either).
            if destination.startswith(_INTERNAL):
                raise NotFound(f"no topic {name}: the broker's own {_INTERNAL}* "
                               "destinations have no metrics topics")
            self._destination(kind, destination)
        self._topics[name] = self.broker.create_topic(name)

    def subscribed(self, name, queue):
        """The core's C{on_subscribe} hook: a new subscriber of a metrics topic gets a
        sample of its own, on the next reactor turn (its attach is finished then)."""
        if name in self._topics and self._loop is not None:
            self.clock.callLater(0, self._first_sample, name, queue)

    # -- publishing --------------------------------------------------------------------

    def publish(self):
        """Publish one sample on every metrics topic that has subscribers."""
        for name, topic in list(self._topics.items()):
            if topic.deleted:
                del self._topics[name]
                continue
            subscriptions = _exact(topic, name)
            if subscriptions:
                self._publish(name, topic, subscriptions)

    def _first_sample(self, name, queue):
        topic = self._topics.get(name)
        if topic is None or queue.deleted or not queue.consumers:
            return
        self._publish(name, topic, (queue,))

    def _publish(self, name, topic, subscriptions):
        try:
            self._sample_and_send(name, topic, subscriptions)
        except Exception:
            # One topic's failure must not stop the others, nor the next interval.
            self.log.failure("publishing a sample on {name} failed", name=name)

    def _sample_and_send(self, name, topic, subscriptions):
        try:
            fields = self._fields(name)
        except NotFound:
            return      # the destination went away: nothing to sample
        host, port = self.identity()
        message = metrics_message(
            name, fields, now=self.clock.seconds(), host=host, port=port,
            settings=self.settings, message_id=f"ID:mqgate-metrics-{next(self._ids)}")
        message.seq = self.broker.next_seq()
        subscriptions = _selected(subscriptions, message)
        if not subscriptions:
            return
        stored = stored_on(subscriptions, message) if message.durable else None
        if stored is None:
            topic.publish_to(subscriptions, message)
            return
        # Persistent (mqgate.metrics.topic.persist): enqueued once stored, as the
        # core does for a producer's message (S3.6).
        stored.addCallbacks(
            lambda _: topic.publish_to(subscriptions, message),
            lambda failure: self.log.failure(
                "a metrics sample of {name} was not stored", failure, name=name))

    def _fields(self, name):
        if name == BROKER:
            return broker_fields(snapshot.broker_snapshot(self.context), self.broker)
        if name == JVM:
            return jvm_fields(snapshot.process_snapshot(self._sample))
        if name == DESTINATION_LIST:
            return destination_list_fields(snapshot.destinations(self.broker))
        kind, destination = metrics_topic_of(name)
        return destination_fields(
            snapshot.destination_snapshot(self._destination(kind, destination)))

    def _destination(self, kind, name):
        return self.broker.queue(name) if kind == QUEUE else self.broker.topic(name)


def _exact(topic, name):
    # Only subscriptions naming the topic itself: a wildcard (# or mq.*.broker)
    # never receives the broker's samples.
    return tuple(q for q in topic.subscriptions if q.pattern == name)


def _selected(subscriptions, message):
    # A subscription that is full (its subscriber reads no samples) gets none more:
    # with a time-to-live of 0 they would pile up without end. One with a selector
    # takes only what it accepts (S2.8), as a topic's own publish would apply it.
    lookup = functools.partial(message_field, message)
    return tuple(q for q in subscriptions
                 if not q.full and (q.selector is None or q.selector.matches(lookup)))
