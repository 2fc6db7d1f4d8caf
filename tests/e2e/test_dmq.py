"""The dead message queue and the limit behaviours end to end (S2.3, S2.4): Proton and
stomp.py clients on a real `twistd -n mqgate`, and `mqgate cmd` to set limits.

Every test uses destinations of its own and looks on mq.sys.dmq only for the dead
messages whose x-opt-original-address is one of them, so the tests share one broker.
"""

import time

import pytest
from proton import Delivery, Message
from proton.utils import LinkDetached, SendException

from tests.e2e.admin_cmd import cmd_json
from tests.e2e.proton_client import DEFAULT_TIMEOUT, drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique

DMQ = "queue://mq.sys.dmq"
REASON, TIME, ORIGIN = "x-opt-dead-reason", "x-opt-dead-time", "x-opt-original-address"


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker: a message is dead after 3 failed deliveries; the reaper runs every
    second."""
    return module_broker_factory(
        {"mqgate.destination.max_delivery_count": "3",
         "mqgate.message.expiration.interval": "1"},
        listening=("jms", "stomp", "admin"))


def admin_name(prefix):
    """A unique destination name create dst accepts (no dashes)."""
    return unique(prefix).replace("-", "_")


def dead_from(broker, address, count, timeout=DEFAULT_TIMEOUT):
    """The C{count} dead messages that left C{address}, read off mq.sys.dmq (others'
    are accepted and passed over), within C{timeout} seconds."""
    found = []
    deadline = time.monotonic() + timeout
    with opened(broker) as conn:
        receiver = conn.create_receiver(DMQ, credit=50)
        while len(found) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{len(found)} of {count} dead messages of {address}"
            message = receiver.receive(timeout=left)
            receiver.accept()
            if (message.annotations or {}).get(ORIGIN) == address:
                found.append(message)
    return found


def test_a_rejected_message_arrives_on_the_dmq_with_its_annotations(broker):
    """AMQP rejected: the message is on mq.sys.dmq, body and id intact, annotated with
    REJECTED, the time (ms) and queue://NAME."""
    address = f"queue://{unique('rej')}"
    before = int(time.time() * 1000)
    with opened(broker) as conn:
        conn.create_sender(address).send(Message(id="r1", body="refuse me", durable=True))
        receive_all(conn.create_receiver(address, credit=1), 1, settle="reject")
    [dead] = dead_from(broker, address, 1)
    assert (dead.id, dead.body, dead.durable) == ("r1", "refuse me", True)
    assert dead.annotations[REASON] == "REJECTED"
    assert before <= dead.annotations[TIME] <= int(time.time() * 1000)


def test_redelivered_past_the_maximum_goes_to_the_dmq(broker):
    """modified(delivery-failed) three times: delivered three times, then dead with
    reason MAX_DELIVERY_COUNT; nothing is left on the queue."""
    address = f"queue://{unique('poison')}"
    with opened(broker) as conn:
        conn.create_sender(address).send(Message(id="p1", body="poison"))
        receiver = conn.create_receiver(address, credit=1)
        counts = []
        for _ in range(3):
            message = receiver.receive(timeout=DEFAULT_TIMEOUT)
            counts.append(message.delivery_count)
            receiver.fetcher.unsettled[0].local.failed = True
            receiver.release(delivered=True)
        assert counts == [0, 1, 2]
    [dead] = dead_from(broker, address, 1)
    assert dead.annotations[REASON] == "MAX_DELIVERY_COUNT" and dead.id == "p1"
    with opened(broker) as conn:
        assert drain(conn, conn.create_receiver(address)) == []


def test_an_expired_message_is_reaped_to_the_dmq(broker):
    """A message with a 200 ms ttl that nobody consumes is on the DMQ within the
    reaper's interval, reason EXPIRED; it was never delivered."""
    address = f"queue://{unique('ttl')}"
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        sender.send(Message(id="t1", body="short", ttl=0.2))
        sender.send(Message(id="t2", body="long"))
    [dead] = dead_from(broker, address, 1)
    assert dead.annotations[REASON] == "EXPIRED" and dead.id == "t1"
    with opened(broker) as conn:
        assert [m.id for m in drain(conn, conn.create_receiver(address))] == ["t2"]


def test_update_to_remove_oldest_takes_effect_and_removes_to_the_dmq(broker, passfile):
    """update dst -o limitBehavior=REMOVE_OLDEST on a queue of maxNumMsgs=2: five sends
    all accepted, the queue keeps the last two, the three oldest are on the DMQ."""
    name = admin_name("ring")
    cmd_json(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "maxNumMsgs=2")
    cmd_json(broker, passfile, "update", "dst", "-t", "q", "-n", name,
             "-o", "limitBehavior=REMOVE_OLDEST")
    limits = cmd_json(broker, passfile, "query", "dst", "-t", "q", "-n", name)["limits"]
    assert limits["limitBehavior"] == "REMOVE_OLDEST"
    address = f"queue://{name}"
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for i in range(5):
            sender.send(Message(id=f"m{i}", body=i))
        assert [m.id for m in drain(conn, conn.create_receiver(address))] == ["m3", "m4"]
    dead = dead_from(broker, address, 3)
    assert [(m.id, m.annotations[REASON]) for m in dead] == [
        (f"m{i}", "REMOVED_OLDEST") for i in range(3)]


def test_remove_low_priority_removes_the_lowest_first(broker, passfile):
    """REMOVE_LOW_PRIORITY, maxNumMsgs=3: of five messages the two of priority 1 go to
    the DMQ (oldest first); 9, 5 and 3 stay."""
    name = admin_name("lowprio")
    cmd_json(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "maxNumMsgs=3", "-o", "limitBehavior=REMOVE_LOW_PRIORITY")
    address = f"queue://{name}"
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for message_id, priority in (("p5", 5), ("p1-old", 1), ("p9", 9), ("p1-new", 1),
                                     ("p3", 3)):
            sender.send(Message(id=message_id, body=message_id, priority=priority))
        assert [m.id for m in drain(conn, conn.create_receiver(address))] == [
            "p9", "p5", "p3"]
    assert [(m.id, m.annotations[REASON]) for m in dead_from(broker, address, 2)] == [
        ("p1-old", "REMOVED_LOW_PRIORITY"), ("p1-new", "REMOVED_LOW_PRIORITY")]


def test_use_dmq_false_drops_the_dead(broker, passfile):
    """useDMQ=false: a rejected message goes nowhere; query dst counts it dropped."""
    name = admin_name("nodmq")
    cmd_json(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "useDMQ=false")
    with opened(broker) as conn:
        conn.create_sender(f"queue://{name}").send(Message(id="d1", body="x"))
        receive_all(conn.create_receiver(f"queue://{name}", credit=1), 1,
                    settle="reject")
        marker = f"queue://{unique('marker')}"
        conn.create_sender(marker).send(Message(id="mark", body="x"))
        receive_all(conn.create_receiver(marker, credit=1), 1, settle="reject")
    # The marker rejected after it is on the DMQ: had d1 gone there, it would be first.
    found = []
    with opened(broker) as conn:
        receiver = conn.create_receiver(DMQ, credit=50)
        while True:
            message = receiver.receive(timeout=DEFAULT_TIMEOUT)
            receiver.accept()
            found.append(message.annotations[ORIGIN])
            if found[-1] == marker:
                break
    assert f"queue://{name}" not in found
    data = cmd_json(broker, passfile, "query", "dst", "-t", "q", "-n", name)
    assert data["dropped"] == 1 and data["limits"]["useDMQ"] is False


def test_a_stomp_nack_past_the_maximum_goes_to_the_dmq_and_a_stomp_consumer_reads_it(
        broker):
    """STOMP: three NACKs make the message dead; a STOMP subscriber of mq.sys.dmq gets
    it with its body."""
    destination = f"/queue/{unique('nack')}"
    with clients() as open_client:
        client = open_client(broker.address("stomp"))
        client.send(destination, b"nacked body")
        client.subscribe(destination, ack="client-individual")
        for n in range(3):
            client.collector.wait_for_messages(n + 1)
            client.nack(client.messages[-1])
        reader_sub = client.subscribe("/queue/mq.sys.dmq", ack="auto")
        client.collector.wait_for(
            lambda: any(m.body == b"nacked body" and
                        m.headers.get("subscription") == reader_sub
                        for m in client.messages), "the dead message over STOMP")
    assert len([m for m in client.messages if m.body == b"nacked body"]) == 4


def test_max_num_producers_refuses_an_amqp_attach_and_a_stomp_send(broker, passfile):
    """maxNumProducers=1: the core refuses a second producer, in each protocol's
    words: an AMQP attach with amqp:resource-limit-exceeded, a STOMP SEND with an ERROR
    whose message says "resource limit exceeded" (no AMQP symbol) and whose body names
    the property."""
    name = admin_name("prod")
    cmd_json(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "maxNumProducers=1")
    with opened(broker) as conn:
        conn.create_sender(f"queue://{name}")
        with opened(broker) as other:
            with pytest.raises(LinkDetached) as caught:
                other.create_sender(f"queue://{name}")
            condition = caught.value.link.remote_condition
            assert condition.name == "amqp:resource-limit-exceeded"
            assert "maxNumProducers=1" in condition.description
        with clients() as open_client:
            client = open_client(broker.address("stomp"))
            client.send(f"/queue/{name}", b"x", receipt=False)
            error = client.collector.wait_for_error()
            assert error.headers.get("message") == "resource limit exceeded"
            assert "maxNumProducers=1" in bytes(error.body).decode()


def test_max_bytes_per_msg_refuses_a_larger_message_naming_the_limit(broker, passfile):
    """maxBytesPerMsg=1k: a 4 KiB message is rejected (the core test checks the error
    names maxBytesPerMsg); a small one is taken."""
    name = admin_name("small")
    cmd_json(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "maxBytesPerMsg=1k")
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        with pytest.raises(SendException) as caught:
            sender.send(Message(body=b"x" * 4096))
        assert caught.value.state == Delivery.REJECTED
        sender.send(Message(body=b"ok"))
        kept = drain(conn, conn.create_receiver(f"queue://{name}"))
        assert [bytes(m.body) for m in kept] == [b"ok"]
