"""Hostile clients against the broker core's limits, on the real broker (S2.1, S2.2, S2.5).

- nested wildcard subscriptions and deep topic names: matching is linear and names are
  bounded (S2.1), so a guest's pathological pattern and a message to a deep topic leave
  every other client's round trip under 100 ms;
- the broker-wide limits (S2.2): a producer past C{mqgate.system.max_count} or
  C{mqgate.system.max_size} gets amqp:resource-limit-exceeded naming the setting,
  nothing accepted is lost, and sending works again once a consumer has drained;
- C{mqgate.system.max_destinations} (S2.5): auto-creation past it is refused;
- a producer flooding a FLOW_CONTROL queue with the default credit passes its limit by
  at most one message, over AMQP or with a burst of STOMP frames (S2.7).

Clients: Proton (tests/e2e/proton_client.py) and stomp.py (tests/e2e/stomp_client.py);
the probe of tests/hostile/probe.py round-trips on its own connection meanwhile.
"""

import pytest
from proton import Delivery, Message
from proton.reactor import DurableSubscription
from proton.utils import LinkDetached

from tests.e2e.broker import BrokerProcess
from tests.e2e.proton_client import drain, opened, run_container
from tests.e2e.stomp_client import RawStomp, clients, unique
from tests.e2e.test_flow_control import StalledProducer
from tests.e2e.users import seed_default_users
from tests.hostile.probe import wait_until

#: The subscription of the report: exponential for the old matcher.
NESTED = "topic://" + "#.a." * 8 + "b"
LIMIT_SETTING = "mqgate.topic.max_levels"


def deep(levels, last="a", prefix="topic://"):
    """A topic address of C{levels} levels, all 'a' but the last."""
    return prefix + ".".join(["a"] * (levels - 1) + [last])


def refused_attach(conn, address, receiver=False):
    """Attach a link the broker must refuse; return the refusal's condition."""
    with pytest.raises(LinkDetached) as caught:
        if receiver:
            conn.create_receiver(address)
        else:
            conn.create_sender(address)
    return caught.value.link.remote_condition


def sent_with_outcome(sender, body):
    """Send C{body} unsettled and return the delivery once the broker settled it."""
    return sender.send(Message(body=body), error_states=[])


def settled(conn, address):
    """Return once the broker has processed every frame C{conn} sent so far (the
    dispositions of an accept): it answers a later attach only after them."""
    conn.create_sender(address).close()


def test_nested_wildcards_and_a_deep_topic_do_not_stall_others(broker, probe):
    """A guest subscribes to the nested pattern and sends to topics as deep as the
    limit allows (the old matcher took hours for one); the probe's round trip stays
    under 100 ms, the matching message arrives, and a 100-level topic is refused
    naming the setting."""
    watcher = probe(broker)
    wait_until(lambda: len(watcher.samples) >= 5, 10, "5 probe round trips")
    with opened(broker, user="guest", password="guest") as conn:
        receiver = conn.create_receiver(NESTED, credit=10)
        for levels in (17, 24, 32):
            sender = conn.create_sender(deep(levels))
            sender.send(Message(body=f"miss-{levels}"))
            sender = conn.create_sender(deep(levels, last="b"))
            sender.send(Message(body=f"hit-{levels}"))
        bodies = [receiver.receive(timeout=10).body for _ in range(3)]
        receiver.accept()
        assert bodies == ["hit-17", "hit-24", "hit-32"]
        assert drain(conn, receiver) == []
        condition = refused_attach(conn, deep(100, last="b"))
        assert condition.name == "amqp:resource-limit-exceeded"
        assert LIMIT_SETTING in condition.description
        condition = refused_attach(conn, "topic://" + "#." * 40 + "b", receiver=True)
        assert LIMIT_SETTING in condition.description
    count = len(watcher.samples)
    wait_until(lambda: len(watcher.samples) >= count + 5, 10, "5 more round trips")
    watcher.assert_responsive(limit=0.1)


def test_stomp_nested_subscription_and_deep_send(broker, probe):
    """The same over STOMP: the nested pattern subscribes, deep sends are routed
    while the probe stays under 100 ms, and a send to a 100-level topic gets an ERROR
    whose message names the setting."""
    watcher = probe(broker, protocol="amqp")
    address = broker.address("stomp")
    with clients() as open_client:
        subscriber = open_client(address, user="guest", passcode="guest")
        subscriber.subscribe("/topic/" + NESTED[len("topic://"):])
        for levels in (17, 32):
            subscriber.send(deep(levels, prefix="/topic/"), f"miss-{levels}")
            subscriber.send(deep(levels, "b", prefix="/topic/"), f"hit-{levels}")
        subscriber.collector.wait_for_messages(2)
        assert subscriber.collector.bodies() == [b"hit-17", b"hit-32"]
        offender = open_client(address, user="guest", passcode="guest")
        offender.send(deep(100, "b", prefix="/topic/"), "deep", receipt=False)
        error = offender.collector.wait_for_error()
        assert LIMIT_SETTING in error.headers["message"] + error.body.decode()
    watcher.assert_responsive(limit=0.1)


def test_stored_pathological_durable_survives_lower_limits(tmp_path, probe):
    """A durable subscription to the nested pattern, stored and then restored by a
    broker whose level limit is lower than the pattern: the broker starts, says in its
    log that it kept the subscription, keeps its backlog, and answers the probe."""
    varhome = tmp_path / "varhome"
    seed_default_users(varhome)
    first = BrokerProcess(varhome).start()
    try:
        with opened(first, container_id="pathological") as conn:
            receiver = conn.create_receiver(NESTED, name="nested",
                                            options=DurableSubscription())
            receiver.link.detach()   # closed=false: the subscription stays
            conn.create_sender(deep(17, "b")).send(Message(body="kept", durable=True))
        assert first.terminate() == 0
        second = BrokerProcess(varhome, defines={LIMIT_SETTING: "8"}).start()
        try:
            second.wait_for_line(r"durable subscription 'nested'.*kept although")
            watcher = probe(second)
            wait_until(lambda: len(watcher.samples) >= 10, 10, "10 probe round trips")
            watcher.assert_responsive(limit=0.1)
            with opened(second, container_id="pathological") as conn:
                receiver = conn.create_receiver(NESTED, name="nested",
                                                options=DurableSubscription())
                assert [m.body for m in drain(conn, receiver)] == ["kept"]
        finally:
            second.kill()
    finally:
        first.kill()


def test_system_max_count_refuses_then_resumes(broker_factory):
    """S2.2: with mqgate.system.max_count=20, the 21st message is Rejected with
    amqp:resource-limit-exceeded naming the setting, on its own link only; after a
    consumer on another connection drains a queue, the same link sends again; no
    accepted message is lost."""
    broker = broker_factory({"mqgate.system.max_count": "20"})
    with opened(broker) as conn, opened(broker) as other:
        sender = conn.create_sender("queue://full-a")
        for n in range(20):
            assert sent_with_outcome(sender, n).remote_state == Delivery.ACCEPTED
        refused = sent_with_outcome(sender, "over")
        assert refused.remote_state == Delivery.REJECTED
        assert refused.remote.condition.name == "amqp:resource-limit-exceeded"
        assert "mqgate.system.max_count" in refused.remote.condition.description
        receiver = other.create_receiver("queue://full-a", credit=None)
        taken = drain(other, receiver, limit=5)
        for _ in taken:
            receiver.accept()
        settled(other, "queue://full-a")
        assert [m.body for m in taken] == list(range(5))
        for n in range(20, 25):
            assert sent_with_outcome(sender, n).remote_state == Delivery.ACCEPTED
        rest = drain(other, receiver)
        for _ in rest:
            receiver.accept()
        assert [m.body for m in rest] == list(range(5, 25))


def test_system_max_size_refuses_stomp_with_an_error(broker_factory):
    """S2.2: past mqgate.system.max_size a STOMP SEND gets an ERROR frame naming the
    setting; AMQP clients go on consuming what was accepted, and a new STOMP producer
    is accepted once that is drained."""
    broker = broker_factory({"mqgate.system.max_size": "64k"})
    address = broker.address("stomp")
    body = "x" * 8192
    with clients() as open_client:
        producer = open_client(address)
        for _ in range(8):
            producer.send("/queue/big", body)
        producer.send("/queue/big", body, receipt=False)
        error = producer.collector.wait_for_error()
        assert "mqgate.system.max_size" in error.headers["message"] + error.body.decode()
        with opened(broker) as conn:
            receiver = conn.create_receiver("queue://big", credit=None)
            taken = drain(conn, receiver)
            for _ in taken:
                receiver.accept()
        assert len(taken) == 8
        again = open_client(address)
        again.send("/queue/big", body)


def test_message_max_size(broker_factory):
    """S2.2: a message over mqgate.message.max_size ends its AMQP link with
    amqp:link:message-size-exceeded (the size was offered in the attach, Part 2
    section 2.7.3) and a STOMP SEND of it gets an ERROR naming the setting; the AMQP
    connection goes on with a new link."""
    broker = broker_factory({"mqgate.message.max_size": "4k"})
    with opened(broker) as conn:
        sender = conn.create_sender("queue://sized")
        with pytest.raises(LinkDetached) as caught:
            sent_with_outcome(sender, "x" * 8192)
        condition = caught.value.link.remote_condition
        assert condition.name == "amqp:link:message-size-exceeded"
        sender = conn.create_sender("queue://sized")
        assert sent_with_outcome(sender, "x" * 1024).remote_state == Delivery.ACCEPTED
    with clients() as open_client:
        client = open_client(broker.address("stomp"))
        client.send("/queue/sized", "x" * 8192, receipt=False)
        error = client.collector.wait_for_error()
        assert "mqgate.message.max_size" in error.headers["message"] + error.body.decode()


def test_max_destinations_refuses_auto_creation(broker_factory):
    """S2.5: past mqgate.system.max_destinations, attaching to a new queue (AMQP) or
    sending to one (STOMP) is refused naming the setting; existing destinations still
    work."""
    broker = broker_factory({"mqgate.system.max_destinations": "10"})
    names = [unique("dest") for _ in range(12)]
    with opened(broker) as conn:
        made, refusals = [], []
        for name in names:
            try:
                made.append(conn.create_sender(f"queue://{name}"))
            except LinkDetached as error:
                refusals.append(error.link.remote_condition)
        assert 1 <= len(made) <= 10 and len(made) + len(refusals) == 12
        assert {c.name for c in refusals} == {"amqp:resource-limit-exceeded"}
        assert all("mqgate.system.max_destinations" in c.description for c in refusals)
        made[0].send(Message(body="still works"))
    with clients() as open_client:
        client = open_client(broker.address("stomp"))
        client.send("/queue/" + unique("new"), "x", receipt=False)
        error = client.collector.wait_for_error()
        assert "mqgate.system.max_destinations" in \
            error.headers["message"] + error.body.decode()


def test_flooding_producer_passes_a_flow_control_limit_by_at_most_one(broker_factory):
    """S2.7: a Proton producer sending as fast as its credit allows (the default
    1,000) into a queue limited to 100 stalls at 100 or 101 messages, not 1,100, and
    every message arrives once, in order, after a consumer drains."""
    broker = broker_factory({"mqgate.autocreate.destination.maxNumMsgs": "100"})
    scenario = run_container(StalledProducer(broker))
    assert scenario.errors == []
    assert 100 <= scenario.sent_when_stalled <= 101, scenario.sent_when_stalled
    assert scenario.bodies == list(range(1000))


def test_stomp_burst_stops_at_the_flow_control_limit(broker_factory):
    """S2.7: 2,000 small SENDs written at once (about 100 KB, a read or two) into a
    queue limited to 100: the queue holds 100, not the whole first read; once a
    consumer settles them the rest go on, and all 2,001 arrive once, in order."""
    broker = broker_factory({"mqgate.autocreate.destination.maxNumMsgs": "100"})
    raw = RawStomp(broker.address("stomp"))
    try:
        assert raw.connect().command == "CONNECTED"
        frames = [b"SEND\ndestination:/queue/burst\n\n%d\x00" % n for n in range(2000)]
        frames.append(b"SEND\ndestination:/queue/burst\nreceipt:r-last\n\nlast\x00")
        raw.send(b"".join(frames))
        with opened(broker) as conn:
            receiver = conn.create_receiver("queue://burst", credit=None)
            held = []
            wait_until(lambda: held.extend(bodies_of(drain(conn, receiver))) or
                       len(held) >= 100, 10, "the first 100 messages")
            held.extend(bodies_of(drain(conn, receiver)))
            assert len(held) == 100, len(held)
            for _ in held:
                receiver.accept()
            rest = []
            wait_until(lambda: rest.extend(receive_some(conn, receiver)) or
                       len(rest) >= 1901, 30, "the other 1,901 messages")
        assert held + rest == [b"%d" % n for n in range(2000)] + [b"last"]
        assert raw.read_frame().headers[0] == ("receipt-id", "r-last")
    finally:
        raw.close()


def bodies_of(messages):
    """The bodies as bytes, copied (Proton's views over its buffers do not last)."""
    return [bytes(m.body) for m in messages]


def receive_some(conn, receiver):
    """The bodies of what the receiver's source holds now, accepted (so more may
    come)."""
    messages = drain(conn, receiver)
    bodies = bodies_of(messages)
    for _ in messages:
        receiver.accept()
    return bodies
