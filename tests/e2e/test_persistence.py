"""Persistent messages across restarts of the real broker (S3.1, S3.4, S8.4, issue 6).

Each test starts a ``twistd -n mqgate`` on a VARHOME, stores something, stops the broker
(an orderly SIGTERM or a SIGKILL), starts a new one on the same VARHOME and looks at
what came back. Only what a producer saw acknowledged counts: a Proton BlockingSender
returns from C{send} once the broker settled the delivery, a STOMP SEND with a receipt
once the RECEIPT arrived.
"""

import signal

import pytest
from proton import Message
from proton.reactor import DurableSubscription

from tests.e2e.proton_client import drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique


@pytest.fixture
def restartable(broker_factory, tmp_path):
    """C{start(defines=None) -> BrokerProcess} on one VARHOME; every broker it started
    is killed at the end."""
    return lambda defines=None: broker_factory(defines, varhome=tmp_path / "varhome")


def stop(broker, how):
    """Stop C{broker} with an orderly SIGTERM or a SIGKILL, and wait for it to exit."""
    if how == "sigterm":
        assert broker.terminate() == 0
    else:
        broker.wait_until_catching_sigterm()
        broker.kill()
        assert broker.returncode == -signal.SIGKILL


def recovery_line(broker):
    return broker.wait_for_line(r"recovered \d+ persistent messages.*").group(0)


def drained(broker, address):
    """Everything C{address} holds, accepted (so it is gone)."""
    with opened(broker) as conn:
        receiver = conn.create_receiver(address, credit=None)
        messages = drain(conn, receiver)
        for _ in messages:
            receiver.accept()
    return messages


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_persistent_messages_survive_a_restart_and_non_persistent_ones_do_not(
        restartable, how):
    """S3.1, S8.4: durable=true messages come back in order with their bodies after a
    restart, whether the broker stopped cleanly or was killed (S3.4, sync off: an
    acknowledged message is with the OS); durable=false ones are gone."""
    broker = restartable()
    with opened(broker) as conn:
        sender = conn.create_sender("queue://keep")
        for i in range(50):
            sender.send(Message(id=f"p{i}", body=f"persistent {i}", durable=True))
            sender.send(Message(id=f"n{i}", body=f"transient {i}", durable=False))
    stop(broker, how)
    broker = restartable()
    assert "recovered 50 persistent messages, held by 1 of the 1 stored destinations" \
        in recovery_line(broker)
    # Recovery is over before any service listens (no client sees a half-built broker).
    order = [i for i, line in enumerate(broker.output)
             if "recovered" in line or "listening on" in line]
    assert "recovered" in broker.output[order[0]]
    messages = drained(broker, "queue://keep")
    assert [m.id for m in messages] == [f"p{i}" for i in range(50)]
    assert [m.body for m in messages] == [f"persistent {i}" for i in range(50)]
    assert all(m.durable for m in messages)


def test_consumed_messages_do_not_come_back(restartable):
    """S3.1: a consumer's ACCEPTED removes the stored message; what a consumer left
    unsettled when it went stays, and its raised delivery count survives (S2.9)."""
    broker = restartable()
    with opened(broker) as conn:
        sender = conn.create_sender("queue://half")
        for i in range(10):
            sender.send(Message(id=f"m{i}", body=i, durable=True))
        receiver = conn.create_receiver("queue://half", credit=None)
        receiver.flow(5)
        receive_all(receiver, 5)            # m0..m4 accepted
        receiver.flow(1)
        receive_all(receiver, 1, settle=None)   # m5 left unsettled: the close
        # requeues it with its delivery count raised, and the count is stored
    with opened(broker) as conn:
        # Events, not timing: m5 coming back redelivered means the close was handled;
        # a later persistent message acknowledged means the store wrote what came
        # before it (the store keeps the order of the calls).
        receiver = conn.create_receiver("queue://half", credit=None)
        receiver.flow(1)
        [again] = receive_all(receiver, 1, settle=None)
        assert (again.id, again.delivery_count) == ("m5", 1)
        conn.create_sender("queue://fence").send(Message(body="fence", durable=True))
    stop(broker, "sigkill")
    broker = restartable()
    messages = drained(broker, "queue://half")
    assert [m.id for m in messages] == [f"m{i}" for i in range(5, 10)]
    assert messages[0].delivery_count >= 1


def test_durable_subscription_and_its_backlog_survive_a_restart(restartable):
    """S3.1, S2.1: a durable subscription made before the restart, and the persistent
    messages published to it while its subscriber was away, come back; the
    subscriber resumes it by container id and link name."""
    identity = {"container_id": "keeper"}
    broker = restartable()
    with opened(broker, **identity) as conn:
        subscription = conn.create_receiver("topic://rates", name="rates-sub",
                                            options=DurableSubscription())
        subscription.link.detach()
    with opened(broker) as conn:
        sender = conn.create_sender("topic://rates")
        for i in range(20):
            sender.send(Message(id=f"r{i}", body=i, durable=True))
        sender.send(Message(id="transient", body=-1, durable=False))
    stop(broker, "sigkill")
    broker = restartable()
    line = recovery_line(broker)
    assert "recovered 20 persistent messages" in line
    with opened(broker, **identity) as conn:
        subscription = conn.create_receiver("topic://rates", name="rates-sub",
                                            options=DurableSubscription())
        got = receive_all(subscription, 20)
        assert drain(conn, subscription) == []
    assert [m.id for m in got] == [f"r{i}" for i in range(20)]


def test_stomp_persistent_messages_survive_and_open_transactions_do_not(restartable):
    """S10.2, S3.1: a STOMP SEND with persistent:true is stored before its RECEIPT;
    persistent:false and the SENDs of a transaction still open at the crash are not
    there after the restart (an open transaction is rolled back)."""
    broker = restartable()
    queue = f"/queue/{unique('stomp')}"
    with clients() as open_client:
        client = open_client(broker.address("jms"))
        for i in range(5):
            client.send(queue, f"kept {i}", persistent="true")
            client.send(queue, f"lost {i}", persistent="false")
        client.frame("begin", "tx1")
        client.send(queue, "in an open transaction", persistent="true", transaction="tx1")
        stop(broker, "sigkill")
    broker = restartable()
    with clients() as open_client:
        client = open_client(broker.address("jms"))
        client.subscribe(queue, ack="client-individual")
        client.collector.wait_for(lambda: len(client.messages) >= 5, "5 messages", 10)
        client.frame("unsubscribe", id=client.messages[0].headers["subscription"])
    bodies = [m.body for m in client.messages]
    assert bodies == [f"kept {i}".encode() for i in range(5)]


def test_a_committed_stomp_transaction_is_acknowledged_once_stored(restartable):
    """S3.4: the RECEIPT of a COMMIT comes once its persistent messages are stored;
    they survive a SIGKILL right after it."""
    broker = restartable()
    queue = f"/queue/{unique('stomptx')}"
    with clients() as open_client:
        client = open_client(broker.address("jms"))
        client.frame("begin", "tx2")
        for i in range(3):
            client.send(queue, f"tx {i}", persistent="true", transaction="tx2")
        client.frame("commit", "tx2")
        stop(broker, "sigkill")
    broker = restartable()
    messages = drained(broker, "queue://" + queue.rsplit("/", 1)[1])
    assert [bytes(m.body) if not isinstance(m.body, str) else m.body.encode()
            for m in messages] == [f"tx {i}".encode() for i in range(3)]
