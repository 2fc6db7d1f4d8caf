"""The metrics topics publisher (S5.3, FACTS 1.5) on a real core and a task.Clock."""

import dataclasses

import pytest
from twisted.logger import capturedLogs, formatEvent

from mqgate.amqp.message import AMQP_VALUE, parse_message
from mqgate.core import BrokerMessage
from mqgate.core.addresses import NotFound
from mqgate.core.broker import Unauthorized
from mqgate.admin.requests import AdminContext
from mqgate.egress.clients import ClientRegistry
from mqgate.metrics import topics
from mqgate.metrics.process import ProcessSample
from mqgate.metrics.snapshot import MetricsSources
from mqgate.metrics.topics import MetricsTopics, TopicSettings
from tests.core import consume, make_broker, send

_SAMPLE = ProcessSample(rss_bytes=50 << 20, peak_rss_bytes=60 << 20,
                        virtual_bytes=300 << 20, threads=7, cpu_user_seconds=1.5,
                        cpu_system_seconds=0.25, open_files=12, max_open_files=1024,
                        physical_memory=8 << 30)


def _publisher(settings=TopicSettings(), **config):
    broker, clock = make_broker(**config)
    clock.advance(1_700_000_000)     # an epoch time, as the reactor's clock gives
    context = AdminContext(broker, ClientRegistry(), None,
                           metrics=MetricsSources(clock, clock.seconds()))
    metrics = MetricsTopics(context, clock, settings,
                            identity=lambda: ("broker.example", 7676),
                            sample=lambda: _SAMPLE)
    metrics.startService()
    return metrics, broker, clock


def _decoded(delivery):
    """(application properties, body map, message) of a delivered sample, parsed
    back from its bytes as a client would."""
    message = parse_message(delivery.message.payload.data)
    [(code, body)] = message.body_sections()
    assert code == AMQP_VALUE
    return message.application_properties, body, message


def test_new_subscriber_gets_a_sample_at_once():
    """A subscriber of mq.metrics.broker gets one sample on the next reactor turn,
    without waiting for the interval."""
    metrics, broker, clock = _publisher()
    _, target = consume(broker, "topic://mq.metrics.broker", credit=10)
    assert target.deliveries == []      # not inside the attach
    clock.advance(0)
    assert len(target.deliveries) == 1
    props, body, message = _decoded(target.deliveries[0])
    assert props["type"] == "mq.metrics.broker"
    assert props["timestamp"] == 1_700_000_000_000
    assert props["brokerHost"] == "broker.example"
    assert props["brokerPort"] == 7676
    assert props["brokerAddress"] == "broker.example:7676"
    assert message.header.priority == 5
    assert not message.header.durable
    assert message.header.ttl == 300_000
    assert message.properties.absolute_expiry_time == 1_700_000_300_000
    assert message.message_annotations["x-opt-jms-msg-type"] == 2
    assert set(body) >= {"numConnections", "numMsgsIn", "numMsgsOut", "numMsgs",
                         "totalMsgBytes", "numDestinations"}


def test_samples_every_interval_only_while_subscribed():
    """Each interval brings one sample per subscribed topic; after the subscriber
    leaves, nothing is built or published."""
    settings = TopicSettings(interval=10)
    metrics, broker, clock = _publisher(settings)
    consumer, target = consume(broker, "topic://mq.metrics.jvm", credit=100)
    clock.advance(0)
    clock.advance(10)
    clock.advance(10)
    assert len(target.deliveries) == 3
    consumer.close()
    built = []
    metrics._sample = lambda: built.append(1) or _SAMPLE
    clock.advance(30)
    assert built == []
    topic = broker.topic("mq.metrics.jvm")
    assert topic.messages_in == 3


def test_destination_metrics_match_what_was_sent():
    """mq.metrics.destination.queue.X reports the messages held by queue X and their
    bytes; a topic's reports what was published to it."""
    metrics, broker, clock = _publisher()
    send(broker, "queue://X", b"a" * 100, b"b" * 50, b"c")
    _, target = consume(broker, "topic://mq.metrics.destination.queue.X", credit=5)
    clock.advance(0)
    _, body, _ = _decoded(target.deliveries[0])
    assert body["numMsgsIn"] == 3
    assert body["numMsgs"] == 3
    assert body["totalMsgBytes"] == 151
    assert body["numMsgsOut"] == 0
    assert body["numActiveConsumers"] == 0
    assert body["numBackupConsumers"] == 0
    assert (body["msgBytesIn"], body["msgBytesOut"], body["peakNumMsgs"]) == (151, 0, 3)
    assert "avgNumMsgs" not in body      # not kept: left out, not made up

    _, reader = consume(broker, "queue://X", credit=2, settle="accepted")
    consume(broker, "topic://news")
    send(broker, "topic://news", b"1", b"2")
    _, ttarget = consume(broker, "topic://mq.metrics.destination.topic.news", credit=5)
    clock.advance(60)
    _, body, _ = _decoded(target.deliveries[1])
    assert (body["numMsgsIn"], body["numMsgsOut"], body["numAckedMsgs"],
            body["numMsgs"], body["numActiveConsumers"]) == (3, 2, 2, 1, 1)
    _, tbody, _ = _decoded(ttarget.deliveries[-1])
    assert tbody["numMsgsIn"] == 2 and tbody["numMsgs"] == 2


def test_destination_list_and_broker_totals():
    """The destination list names each destination's metrics topic with name, type
    and isTemporary, and leaves the broker's own mq.* ones out, as numDestinations
    does."""
    metrics, broker, clock = _publisher()
    send(broker, "queue://orders", b"x" * 10)
    broker.create_topic("prices")
    _, temp_target = consume(broker, None, dynamic=True)
    # The broker's sample first: the samples themselves count in its totals.
    _, btarget = consume(broker, "topic://mq.metrics.broker", credit=5)
    _, target = consume(broker, "topic://mq.metrics.destination_list", credit=5)
    clock.advance(0)
    _, body, _ = _decoded(target.deliveries[0])
    temp = temp_target.consumer.queue.name
    assert body == {
        "mq.metrics.destination.queue.orders":
            {"name": "orders", "type": "queue", "isTemporary": False},
        f"mq.metrics.destination.queue.{temp}":
            {"name": temp, "type": "queue", "isTemporary": True},
        "mq.metrics.destination.topic.prices":
            {"name": "prices", "type": "topic", "isTemporary": False},
    }
    _, bbody, _ = _decoded(btarget.deliveries[0])
    assert bbody["numDestinations"] == 3
    assert bbody["numMsgsIn"] == 1 and bbody["numMsgs"] == 1
    assert bbody["totalMsgBytes"] == 10


def test_jvm_fields_from_the_process_sample():
    """mq.metrics.jvm maps the process's memory onto the Java names and adds threads
    and CPU time."""
    fields = topics.jvm_fields(dataclasses.asdict(_SAMPLE))
    assert fields["totalMemory"] == 50 << 20
    assert fields["maxMemory"] == 8 << 30
    assert fields["freeMemory"] == (8 << 30) - (50 << 20)
    assert fields["numThreads"] == 7
    assert fields["cpuUserMillis"] == 1500 and fields["cpuSystemMillis"] == 250


def test_jvm_fields_leave_out_what_the_platform_cannot_say():
    """Without the machine's memory, maxMemory and freeMemory are absent, not 0."""
    sample = ProcessSample(1, 1, None, 1, 0.0, 0.0, None, 1, None)
    fields = topics.jvm_fields(dataclasses.asdict(sample))
    assert "maxMemory" not in fields and "freeMemory" not in fields
    assert "openFiles" not in fields and "virtualMemory" not in fields


def test_clients_may_not_produce_under_mq_metrics():
    """A producer to a metrics topic, by attach or by an anonymous producer's `to`,
    is refused with unauthorized-access."""
    metrics, broker, clock = _publisher()
    with pytest.raises(Unauthorized) as error:
        broker.open_producer("topic://mq.metrics.broker")
    assert "only the broker publishes" in error.value.description
    anonymous = broker.open_producer(None)
    with pytest.raises(Unauthorized):
        anonymous.send(BrokerMessage(b"x", to="topic://mq.metrics.anything"))


@pytest.mark.parametrize("address", [
    "topic://mq.metrics.nonsense", "topic://mq.metrics.#",
    "topic://mq.metrics.destination.queue.",
    "queue://mq.metrics.broker",
])
def test_other_names_under_mq_metrics_are_refused(address):
    """Only the metrics topics exist under mq.metrics.: other names, patterns and
    queues are refused as not found, and nothing is created."""
    metrics, broker, clock = _publisher()
    with pytest.raises(NotFound) as error:
        consume(broker, address)
    assert "mq.metrics" in error.value.description
    assert broker.topics() == [] and broker.queues() == []


def test_metrics_of_a_missing_destination_are_refused():
    """A destination's metrics topic exists only while the destination does."""
    metrics, broker, clock = _publisher()
    with pytest.raises(NotFound):
        consume(broker, "topic://mq.metrics.destination.queue.nowhere")
    assert broker.topics() == []


def test_metrics_topics_have_no_metrics_topics():
    """The broker's own mq.* destinations have no metrics topic: a client cannot
    stack mq.metrics.destination.topic.mq.metrics... names."""
    metrics, broker, clock = _publisher()
    consume(broker, "topic://mq.metrics.broker")
    with pytest.raises(NotFound) as error:
        consume(broker, "topic://mq.metrics.destination.topic.mq.metrics.broker")
    assert "broker's own" in error.value.description
    assert broker.topics() == ["mq.metrics.broker"]


def test_disabled_refuses_subscriptions_and_publishes_nothing():
    """With mqgate.metrics.topic.enabled=false a subscription is refused naming the
    setting."""
    metrics, broker, clock = _publisher(TopicSettings(enabled=False))
    with pytest.raises(NotFound) as error:
        consume(broker, "topic://mq.metrics.broker")
    assert "mqgate.metrics.topic.enabled" in error.value.description


def test_metrics_topics_exist_with_auto_creation_off():
    """The broker makes its metrics topics itself, auto-creation or not."""
    metrics, broker, clock = _publisher(autocreate_topic=False)
    _, target = consume(broker, "topic://mq.metrics.broker", credit=1)
    clock.advance(0)
    assert len(target.deliveries) == 1


def test_wildcard_subscriptions_get_no_samples():
    """A subscription to # never receives the broker's samples, only those naming the
    topic do."""
    metrics, broker, clock = _publisher()
    _, everything = consume(broker, "topic://#", credit=10)
    _, target = consume(broker, "topic://mq.metrics.broker", credit=10)
    clock.advance(60)
    assert len(target.deliveries) == 2
    assert everything.deliveries == []


def test_first_sample_goes_to_the_new_subscriber_only():
    """A second subscriber's immediate sample is not sent again to the first one."""
    metrics, broker, clock = _publisher()
    _, first = consume(broker, "topic://mq.metrics.broker", credit=10)
    clock.advance(0)
    _, second = consume(broker, "topic://mq.metrics.broker", credit=10)
    clock.advance(0)
    assert (len(first.deliveries), len(second.deliveries)) == (1, 1)


def test_ttl_zero_and_persist():
    """timetolive 0 means no expiry at all; persist makes samples durable."""
    metrics, broker, clock = _publisher(TopicSettings(timetolive=0, persist=True))
    _, target = consume(broker, "topic://mq.metrics.jvm", credit=1)
    clock.advance(0)
    delivered = target.deliveries[0].message
    assert delivered.expiry is None and delivered.durable
    _, _, message = _decoded(target.deliveries[0])
    assert message.header.ttl is None and message.header.durable
    assert message.properties.absolute_expiry_time is None


def test_samples_expire_unread():
    """A sample nobody reads expires after its time-to-live."""
    metrics, broker, clock = _publisher(TopicSettings(timetolive=30, interval=600))
    consumer, target = consume(broker, "topic://mq.metrics.broker")   # no credit
    clock.advance(0)
    queue = consumer.queue
    assert queue.held == 1
    clock.advance(31)
    consumer.set_credit(5)
    assert target.deliveries == []
    assert queue.expired == 1


def test_a_full_subscription_gets_no_more_samples():
    """A subscriber that reads nothing holds at most its subscription's limit of
    samples, even when they never expire."""
    metrics, broker, clock = _publisher(TopicSettings(timetolive=0, interval=1),
                                        max_num_msgs=3)
    consumer, _ = consume(broker, "topic://mq.metrics.broker")
    clock.advance(0)
    for _ in range(10):
        clock.advance(1)
    assert consumer.queue.held == 3


def test_a_failing_sample_is_logged_and_the_others_go_on():
    """A topic whose sample fails is logged; the other topics and the next interval
    are published all the same."""
    metrics, broker, clock = _publisher(TopicSettings(interval=10))
    _, jvm = consume(broker, "topic://mq.metrics.jvm", credit=10)
    _, totals = consume(broker, "topic://mq.metrics.broker", credit=10)
    clock.advance(0)

    def broken():
        raise OSError("no /proc")
    metrics._sample = broken
    with capturedLogs() as events:
        clock.advance(10)
    assert any("mq.metrics.jvm" in formatEvent(e) for e in events
               if e.get("log_failure") is not None)
    metrics._sample = lambda: _SAMPLE
    clock.advance(10)
    assert (len(jvm.deliveries), len(totals.deliveries)) == (2, 3)


def test_rejected_messages_show_in_both_queue_and_topic_samples():
    """A message a consumer rejects counts in numRejectedMsgs (and numDiscardedMsgs)
    of its queue's sample, and of its topic's when it came through a subscription."""
    metrics, broker, clock = _publisher()
    send(broker, "queue://R", b"bad", b"good")
    consumer, reader = consume(broker, "queue://R", credit=1)
    consumer.settle(reader.deliveries[0], "rejected")
    sub, sub_reader = consume(broker, "topic://T", credit=1)
    send(broker, "topic://T", b"nope")
    sub.settle(sub_reader.deliveries[0], "rejected")
    _, qtarget = consume(broker, "topic://mq.metrics.destination.queue.R", credit=5)
    _, ttarget = consume(broker, "topic://mq.metrics.destination.topic.T", credit=5)
    clock.advance(0)
    _, qbody, _ = _decoded(qtarget.deliveries[0])
    _, tbody, _ = _decoded(ttarget.deliveries[0])
    assert (qbody["numRejectedMsgs"], qbody["numDiscardedMsgs"], qbody["numMsgs"]) == (
        1, 1, 1)
    assert (tbody["numRejectedMsgs"], tbody["numMsgs"]) == (1, 0)
