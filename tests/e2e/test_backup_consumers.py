"""Active and backup consumers through the real broker (S2.3; FACTS 1.6): a queue made
with `mqgate cmd create dst -o maxNumActiveConsumers=1 -o maxNumBackupConsumers=1`
delivers to its first consumer only; the backup takes over when it goes (its unsettled
message first, redelivered); a third consumer is refused. With Proton and stomp.py."""

import pytest
from proton import Message
from proton.utils import LinkDetached

from tests.e2e.admin_cmd import cmd_json, cmd_text
from tests.e2e.proton_client import connect, drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique


def failover_queue(broker, passfile, prefix):
    """A new queue with one active consumer and one backup; its name."""
    name = unique(prefix).replace("-", "_")
    cmd_text(broker, passfile, "create", "dst", "-t", "q", "-n", name,
             "-o", "maxNumActiveConsumers=1", "-o", "maxNumBackupConsumers=1")
    return name


def send(broker, address, *bodies):
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body))


def test_proton_backup_takes_over_when_the_active_one_goes(module_broker, passfile):
    """The backup receives nothing (its drain completes empty) while the active
    consumer is there; when that connection closes, the backup gets the message it
    left unsettled (redelivered) and then the new ones; a third receiver is refused
    with amqp:resource-limit-exceeded naming the limits."""
    name = failover_queue(module_broker, passfile, "failover")
    address = f"queue://{name}"
    with opened(module_broker) as backup_conn:
        active_conn = connect(module_broker)
        active = active_conn.create_receiver(address, credit=10)
        backup = backup_conn.create_receiver(address, credit=None)
        send(module_broker, address, "m1", "m2", "m3")
        taken = receive_all(active, 2)
        assert [m.body for m in taken] == ["m1", "m2"]
        assert active.receive(timeout=10).body == "m3"     # left unsettled
        assert drain(backup_conn, backup) == []
        with pytest.raises(LinkDetached) as refused:
            backup_conn.create_receiver(address, name="third")
        condition = refused.value.link.remote_condition
        assert condition.name == "amqp:resource-limit-exceeded"
        assert "maxNumBackupConsumers=1" in condition.description
        query = cmd_json(module_broker, passfile, "query", "dst", "-t", "q", "-n", name)
        assert query["consumers"] == 2 and query["backup_consumers"] == 1
        active_conn.close()
        backup.flow(10)
        again = receive_all(backup, 1)
        assert again[0].body == "m3" and again[0].delivery_count == 1
        send(module_broker, address, "m4")
        assert [m.body for m in receive_all(backup, 1)] == ["m4"]


def test_stomp_backup_takes_over_and_a_third_gets_an_error(module_broker, passfile):
    """stomp.py: the second subscriber waits while the first receives; a third gets
    an ERROR naming the limit; once the first disconnects the second receives."""
    name = failover_queue(module_broker, passfile, "stompfail")
    destination = f"/queue/{name}"
    address = module_broker.address("stomp")
    with clients() as open_client:
        first = open_client(address)
        second = open_client(address)
        first.subscribe(destination)
        second.subscribe(destination)
        third = open_client(address)
        third.connection.subscribe(destination, id="third", ack="auto")
        error = third.collector.wait_for_error()
        assert "maxNumActiveConsumers=1" in error.headers.get("message", "") + \
            error.body.decode("utf-8", "replace")
        first.send(destination, "s1")
        first.collector.wait_for_messages(1)
        assert second.collector.bodies() == []
        first.disconnect()
        second.send(destination, "s2")
        second.collector.wait_for_messages(1)
        assert second.collector.bodies() == [b"s2"]
