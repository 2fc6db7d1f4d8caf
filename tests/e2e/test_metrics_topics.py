"""The metrics topics on the real broker (S5.3), read with stomp.py and Proton.

One broker serves the module, on the shipped configuration and access rules (only
group admin may subscribe to mq.metrics.#) with a user repository the test writes:
admin in group admin, bob in group user, each password the user's name. The interval is
the default 60 s except where a test says otherwise, so a sample arriving within the
client's 10 s deadline is the one a new subscriber gets at once.
"""

import json
import time

import pytest
from proton import Message, int32
from proton.reactor import DurableSubscription
from proton.utils import LinkDetached

from tests.e2e.proton_client import connect, opened, receive_all
from tests.e2e.stomp_client import clients, unique
from tests.e2e.users import write_users

UNAUTHORIZED = "amqp:unauthorized-access"
NOT_FOUND = "amqp:not-found"
BROKER_FIELDS = {"numConnections", "numMsgsIn", "numMsgsOut", "numMsgs",
                 "totalMsgBytes", "numDestinations", "msgBytesIn", "msgBytesOut",
                 "pktBytesIn", "pktBytesOut"}
QUEUE_FIELDS = {"numActiveConsumers", "numConsumers", "numBackupConsumers", "numMsgsIn",
                "numMsgsOut", "numAckedMsgs", "numMsgs", "totalMsgBytes",
                "numExpiredMsgs", "numRejectedMsgs", "numDiscardedMsgs", "msgBytesIn",
                "msgBytesOut", "peakNumMsgs"}


def _start(start, directory, **defines):
    """With C{start} (a broker factory fixture), a broker on the users admin (group
    admin) and bob (group user) under C{directory}, its stomp and port mapper
    services listening; the same C{directory} again is a restart."""
    users = write_users(directory / "users", (("admin", "admin"), ("bob", "user")))
    return start({**users, **defines}, varhome=directory / "varhome",
                 listening=("stomp", "portmapper"))


@pytest.fixture(scope="module")
def broker(module_broker_factory, tmp_path_factory):
    """One broker for the module (shipped rules, default interval of 60 s)."""
    return _start(module_broker_factory, tmp_path_factory.mktemp("metrics-topics"))


@pytest.fixture
def open_client():
    with clients() as open_:
        yield open_


def test_stomp_subscriber_gets_queue_metrics_at_once(broker, open_client):
    """A STOMP subscriber of /topic/mq.metrics.destination.queue.X receives a sample
    at once: the documented header properties, priority 5, an expiry 300 s after the
    sample, and a JSON map whose figures match the three messages sent to X."""
    address = broker.address("stomp")
    client = open_client(address)
    name = unique("metered")
    bodies = [b"a" * 100, b"b" * 200, b"c" * 300]
    for body in bodies:
        client.send(f"/queue/{name}", body)
    started = time.time()
    client.subscribe(f"/topic/mq.metrics.destination.queue.{name}")
    [frame] = client.collector.wait_for_messages(1, timeout=10)
    waited = time.time() - started
    headers = frame.headers
    assert headers["type"] == f"mq.metrics.destination.queue.{name}"
    assert headers["brokerHost"]
    assert int(headers["brokerPort"]) == broker.port("portmapper")
    assert headers["brokerAddress"] == f"{headers['brokerHost']}:{headers['brokerPort']}"
    timestamp = int(headers["timestamp"])
    assert abs(timestamp / 1000 - started) < 10
    assert int(headers["expires"]) == timestamp + 300_000
    assert headers["priority"] == "5"
    assert "persistent" not in headers
    assert headers["content-type"] == "application/json"
    body = json.loads(bytes(frame.body))
    assert set(body) == QUEUE_FIELDS
    assert body["numMsgsIn"] == 3
    assert body["numMsgs"] == 3
    assert body["numMsgsOut"] == 0 and body["numActiveConsumers"] == 0
    assert body["peakNumMsgs"] == 3 and body["msgBytesOut"] == 0
    assert body["msgBytesIn"] == body["totalMsgBytes"]      # all still held
    # Each message is held as AMQP bytes: its body plus the sections STOMP headers
    # became, a few dozen bytes each.
    assert sum(map(len, bodies)) < body["totalMsgBytes"] < sum(map(len, bodies)) + 3 * 300
    print(f"first sample after {waited * 1000:.0f} ms; totalMsgBytes "
          f"{body['totalMsgBytes']} for {sum(map(len, bodies))} body bytes")


def test_proton_receiver_of_the_broker_topic(broker):
    """A Proton receiver of topic://mq.metrics.broker gets a map message with the
    header properties typed as the source system's (timestamp a long, brokerPort an
    int), priority 5, a 300 s ttl and the JMS MapMessage annotation."""
    conn = connect(broker)
    try:
        receiver = conn.create_receiver("topic://mq.metrics.broker")
        [message] = receive_all(receiver, 1)
    finally:
        conn.close()
    props = message.properties
    assert props["type"] == "mq.metrics.broker"
    assert type(props["brokerPort"]) is int32
    assert props["brokerPort"] == broker.port("portmapper")
    assert type(props["timestamp"]) is int
    assert abs(props["timestamp"] / 1000 - time.time()) < 10
    assert {"brokerHost", "brokerAddress"} <= set(props)
    assert message.priority == 5
    assert message.ttl == 300
    assert not message.durable
    assert message.annotations["x-opt-jms-msg-type"] == 2
    assert set(message.body) == BROKER_FIELDS
    assert message.body["numConnections"] >= 1
    assert message.body["numDestinations"] >= 0


def test_jvm_and_destination_list(broker, open_client):
    """mq.metrics.jvm carries the process's memory under the Java names, and the
    destination list names a queue just made by its metrics topic."""
    client = open_client(broker.address("stomp"))
    name = unique("listed")
    client.send(f"/queue/{name}", b"x")
    client.subscribe("/topic/mq.metrics.jvm", sub_id="jvm")
    client.subscribe("/topic/mq.metrics.destination_list", sub_id="list")
    frames = client.collector.wait_for_messages(2, timeout=10)
    by_type = {f.headers["type"]: json.loads(bytes(f.body)) for f in frames}
    jvm = by_type["mq.metrics.jvm"]
    assert 0 < jvm["totalMemory"] <= jvm["maxMemory"]
    assert jvm["freeMemory"] == jvm["maxMemory"] - jvm["totalMemory"]
    assert jvm["numThreads"] >= 1
    listed = by_type["mq.metrics.destination_list"]
    assert listed[f"mq.metrics.destination.queue.{name}"] == {
        "name": name, "type": "queue", "isTemporary": False}
    assert not any(key.startswith("mq.metrics.destination.topic.mq.") for key in listed)


def test_clients_cannot_publish_metrics(broker, open_client):
    """A STOMP SEND to a metrics topic gets an ERROR frame, a Proton sender is
    refused with unauthorized-access; only the broker publishes there."""
    client = open_client(broker.address("stomp"))
    client.send("/topic/mq.metrics.broker", b"fake", receipt=False)
    error = client.collector.wait_for_error()
    assert error.headers["message"] == "access refused"
    assert "only the broker publishes" in bytes(error.body).decode()
    conn = connect(broker)
    try:
        with pytest.raises(LinkDetached) as info:
            conn.create_sender("topic://mq.metrics.jvm")
        condition = info.value.link.remote_condition
        assert condition.name == UNAUTHORIZED
        # The anonymous relay too: the message is rejected, the link stays.
        sender = conn.create_sender(None)
        delivery = sender.send(Message(address="topic://mq.metrics.jvm", body="fake"),
                               error_states=[])
        assert delivery.remote_state == delivery.REJECTED
        assert delivery.remote.condition.name == UNAUTHORIZED
        sender.send(Message(address=f"topic://{unique('relayed')}", body="fine"))
    finally:
        conn.close()


def test_other_names_under_mq_metrics_are_refused(broker, open_client):
    """Subscribing to a name under mq.metrics. that is no metrics topic gets an ERROR
    saying which names exist; so does a queue's metrics topic before the queue."""
    client = open_client(broker.address("stomp"))
    client.connection.subscribe("/topic/mq.metrics.everything", id="s1")
    error = client.collector.wait_for_error()
    assert error.headers["message"] == "not found"
    assert "only the metrics topics exist under mq.metrics." in bytes(error.body).decode()
    other = open_client(broker.address("stomp"))
    other.connection.subscribe(f"/topic/mq.metrics.destination.queue.{unique('none')}",
                               id="s1")
    error = other.collector.wait_for_error()
    assert error.headers["message"] == "not found"
    assert "no queue" in bytes(error.body).decode()


def test_only_the_admin_group_may_subscribe(broker, open_client):
    """The shipped rules keep the metrics topics to group admin: bob (group user) is
    refused by access control, over STOMP and AMQP, and may still use other topics."""
    client = open_client(broker.address("stomp"), user="bob", passcode="bob")
    client.connection.subscribe("/topic/mq.metrics.broker", id="s1")
    error = client.collector.wait_for_error()
    assert error.headers["message"] == (
        "user bob may not consume from topic mq.metrics.broker"
        " (rule topic.mq.metrics.#.consume)")
    conn = connect(broker, user="bob", password="bob")
    try:
        with pytest.raises(LinkDetached) as info:
            conn.create_receiver("topic://mq.metrics.jvm")
        assert info.value.link.remote_condition.name == UNAUTHORIZED
        conn.create_receiver(f"topic://{unique('news')}")
    finally:
        conn.close()


def test_broker_sample_counts_the_bytes_the_client_sent_and_took(broker_factory, tmp_path):
    """On a fresh broker, the first mq.metrics.broker sample carries msgBytesIn equal
    to the encoded bytes of the messages a Proton client sent, msgBytesOut those of
    the ones it accepted, the client's one connection, and at least as many bytes
    read from the sockets as the messages hold."""
    process = _start(broker_factory, tmp_path)
    messages = [Message(id=f"m-{i}", body="x" * 500) for i in range(5)]
    size = len(messages[0].encode())
    with opened(process) as conn:
        sender = conn.create_sender("queue://metered")
        for message in messages:
            sender.send(message)
        reader = conn.create_receiver("queue://metered", credit=2)
        receive_all(reader, 2)
        reader.close()      # the accepts go out with the detach
        [sample] = receive_all(conn.create_receiver("topic://mq.metrics.broker"), 1)
    body = sample.body
    assert set(body) == BROKER_FIELDS
    assert (body["numMsgsIn"], body["msgBytesIn"]) == (5, 5 * size)
    assert (body["numMsgsOut"], body["msgBytesOut"]) == (2, 2 * size)
    assert (body["numMsgs"], body["totalMsgBytes"]) == (3, 3 * size)
    assert body["numConnections"] == 1
    assert body["pktBytesIn"] > 5 * size and body["pktBytesOut"] > 2 * size
    print(f"msgBytesIn {body['msgBytesIn']} for 5 messages of {size} bytes; "
          f"pktBytesIn {body['pktBytesIn']}, pktBytesOut {body['pktBytesOut']}")


def test_samples_follow_the_interval(broker_factory, tmp_path):
    """With mqgate.metrics.topic.interval=1 a subscriber gets a sample a second, each
    with a later timestamp."""
    process = _start(broker_factory, tmp_path, **{"mqgate.metrics.topic.interval": "1",
                                                  "mqgate.metrics.topic.timetolive": "0"})
    with opened(process) as conn:
        receiver = conn.create_receiver("topic://mq.metrics.broker")
        messages = receive_all(receiver, 4, timeout=10)
    stamps = [m.properties["timestamp"] for m in messages]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    # The first at once, then on the broker's 1 s ticks (late on a busy machine).
    assert 1500 <= stamps[3] - stamps[1] <= 4000
    assert all(m.ttl == 0 and m.expiry_time == 0 for m in messages)


def test_persistent_samples_survive_a_restart(broker_factory, tmp_path):
    """With mqgate.metrics.topic.persist=true the samples a durable subscriber missed
    are stored and come back after a restart, marked durable."""
    defines = {"mqgate.metrics.topic.interval": "1", "mqgate.metrics.topic.persist":
               "true", "mqgate.metrics.topic.timetolive": "0"}
    identity = {"container_id": "metrics-keeper"}
    process = _start(broker_factory, tmp_path, **defines)
    with opened(process, **identity) as conn:
        durable = conn.create_receiver("topic://mq.metrics.broker", name="kept",
                                       options=DurableSubscription())
        [first] = receive_all(durable, 1)
        durable.link.detach()
        # Another subscriber sees two ticks go by: the durable one missed them.
        watcher = conn.create_receiver("topic://mq.metrics.broker")
        receive_all(watcher, 3)
    process.terminate()
    restarted_at = time.time()
    process = _start(broker_factory, tmp_path, **defines)
    with opened(process, **identity) as conn:
        durable = conn.create_receiver("topic://mq.metrics.broker", name="kept",
                                       options=DurableSubscription())
        got = receive_all(durable, 3)
    assert first.durable and all(m.durable for m in got)
    missed = [m for m in got if m.properties["timestamp"] / 1000 < restarted_at]
    assert len(missed) >= 2
    assert missed[0].properties["timestamp"] > first.properties["timestamp"]
