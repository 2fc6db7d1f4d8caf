"""The destination and durable subscription commands end to end (S11.1): `mqgate cmd`
against a real `twistd -n mqgate` broker, with Proton and stomp.py clients on it.

`mqgate cmd` gets the command words after `--`: its argument parser would otherwise
take imqcmd's options (`-t q`) for its own.
"""

import pytest
from proton import Endpoint, Message
from proton.utils import LinkDetached, SendException

from tests.e2e.admin_cmd import cmd_json, cmd_text, mqgate_cmd
from tests.e2e.proton_client import drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique
from tests.hostile.probe import wait_until

RESOURCE_DELETED = "amqp:resource-deleted"


def wait_remote_closed(conn, *links):
    """Wait until the broker has closed every one of C{links}; Proton raises
    LinkDetached for each as it happens, which is what is awaited here."""
    while True:
        try:
            conn.wait(lambda: all(link.state & Endpoint.REMOTE_CLOSED for link in links),
                      msg="the broker closing the links")
            return
        except LinkDetached:
            continue


def query(broker, passfile, kind, name):
    return cmd_json(broker, passfile, "query", "dst", "-t", kind, "-n", name)


# -- list, query, errors ----------------------------------------------------------------


def test_list_and_query_show_clients_and_messages(module_broker, passfile):
    """list dst shows a queue with its producer, consumer, messages and unacked count;
    query dst shows its limits; temporary queues only with -tmp."""
    name = unique("listed")
    with opened(module_broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for i in range(3):
            sender.send(Message(body=f"m{i}"))
        receiver = conn.create_receiver(f"queue://{name}", credit=None)
        receiver.flow(1)
        receive_all(receiver, 1, settle=None)
        conn.create_receiver(None, dynamic=True)
        listed = cmd_json(module_broker, passfile, "list", "dst")
        rows = {row["name"]: row for row in listed}
        row = rows[name]
        assert (row["type"], row["state"], row["producers"], row["consumers"],
                row["messages"], row["unacked"]) == ("queue", "RUNNING", 1, 1, 3, 1)
        assert not any(n.startswith("mqgate.tmp.") for n in rows)
        assert any(r["name"].startswith("mqgate.tmp.") for r in
                   cmd_json(module_broker, passfile, "list", "dst", "-tmp"))
        table = cmd_text(module_broker, passfile, "list", "dst", "-t", "q")
        assert "Msgs Count" in table and name in table
        text = cmd_text(module_broker, passfile, "query", "dst", "-t", "q", "-n", name)
        for words in ("maxNumMsgs", "maxTotalMsgBytes", "limitBehavior", "FLOW_CONTROL"):
            assert words in text, text


def test_unknown_destination_exits_1_with_404_naming_it(module_broker, passfile):
    """An unknown destination: exit 1, status 404, the name in the message; a bad
    option: exit 1 naming it."""
    result = mqgate_cmd(module_broker, passfile, "purge", "dst", "-t", "q", "-n",
                        "nowhere")
    assert result.returncode == 1
    assert "no queue 'nowhere'" in result.stderr and "404" in result.stderr
    result = mqgate_cmd(module_broker, passfile, "pause", "dst", "-t", "q", "-n",
                        "nowhere", "-pst", "EVERYONE")
    assert result.returncode == 1 and "-pst EVERYONE" in result.stderr


def test_create_refuses_reserved_names_and_bad_properties(module_broker, passfile):
    """create dst refuses an mq* name and an unsupported property, naming them, and
    creates nothing."""
    result = mqgate_cmd(module_broker, passfile, "create", "dst", "-t", "q",
                        "-n", "mqthing")
    assert result.returncode == 1 and "reserved" in result.stderr
    name = unique("refused").replace("-", "_")
    result = mqgate_cmd(module_broker, passfile, "create", "dst", "-t", "q",
                        "-n", name, "-o", "maxNumMsgs=5", "-o", "isLocalOnly=true")
    assert result.returncode == 1 and "isLocalOnly is not supported" in result.stderr
    names = [row["name"] for row in cmd_json(module_broker, passfile, "list", "dst")]
    assert name not in names


# -- pause / resume ---------------------------------------------------------------------


def test_paused_consumers_receive_nothing_until_resumed(module_broker, passfile):
    """pause -pst CONSUMERS: five messages sent, a drain receives none (the broker says
    so by completing the drain); resume: the five arrive in order."""
    name = unique("pausedc")
    with opened(module_broker) as conn:
        receiver = conn.create_receiver(f"queue://{name}", credit=None)
        cmd_text(module_broker, passfile, "pause", "dst", "-t", "q", "-n", name,
                 "-pst", "CONSUMERS")
        assert query(module_broker, passfile, "q", name)["state"] == "CONSUMERS_PAUSED"
        sender = conn.create_sender(f"queue://{name}")
        for i in range(5):
            sender.send(Message(body=f"m{i}"))
        assert drain(conn, receiver) == []
        cmd_text(module_broker, passfile, "resume", "dst", "-t", "q", "-n", name)
        receiver.flow(5)
        got = receive_all(receiver, 5)
        assert [m.body for m in got] == [f"m{i}" for i in range(5)]


def test_paused_producers_are_held_back_and_nothing_is_lost(module_broker, passfile):
    """pause -pst PRODUCERS: an AMQP producer's five messages are kept by the broker
    (none delivered), a producer attaching now gets no credit beyond its first
    message; resume: all six arrive, and the new producer gets credit again."""
    name = unique("pausedp")
    address = f"queue://{name}"
    with opened(module_broker) as conn:
        receiver = conn.create_receiver(address, credit=None)
        sender = conn.create_sender(address)
        cmd_text(module_broker, passfile, "pause", "dst", "-t", "q", "-n", name,
                 "-pst", "PRODUCERS")
        for i in range(5):
            sender.send(Message(body=f"m{i}"))
        late = conn.create_sender(address, name=unique("late"))
        conn.wait(lambda: late.link.credit > 0, msg="the late producer's first credit")
        assert late.link.credit == 1
        late.send(Message(body="late"))
        assert late.link.credit == 0
        assert drain(conn, receiver) == []
        figures = query(module_broker, passfile, "q", name)
        assert figures["state"] == "PRODUCERS_PAUSED"
        assert figures["kept_by_producers"] == 6 and figures["messages"] == 0
        assert late.link.credit == 0    # still none after that round trip
        cmd_text(module_broker, passfile, "resume", "dst", "-t", "q", "-n", name)
        receiver.flow(6)
        got = receive_all(receiver, 6)
        assert [m.body for m in got] == [f"m{i}" for i in range(5)] + ["late"]
        conn.wait(lambda: late.link.credit > 0, msg="credit after resume")


def test_paused_stomp_producer_gets_its_receipt_after_resume(module_broker, passfile):
    """pause (ALL): a persistent STOMP SEND is kept and its RECEIPT held; resume: the
    receipt comes and a subscriber receives the message."""
    name = unique("pauseds").replace("-", "_")
    cmd_text(module_broker, passfile, "create", "dst", "-t", "q", "-n", name)
    with clients() as open_client:
        producer = open_client(module_broker.address("stomp"))
        cmd_text(module_broker, passfile, "pause", "dst", "-t", "q", "-n", name)
        rid = unique("receipt")
        producer.connection.send(f"/queue/{name}", "kept",
                                 headers={"persistent": "true", "receipt": rid})
        wait_until(lambda: query(module_broker, passfile, "q", name)[
            "kept_by_producers"] == 1, 30, "the SEND kept by the paused queue")
        assert rid not in producer.collector.receipts
        cmd_text(module_broker, passfile, "resume", "dst", "-t", "q", "-n", name)
        producer.collector.wait_for_receipt(rid)
        consumer = open_client(module_broker.address("stomp"))
        consumer.subscribe(f"/queue/{name}")
        [message] = consumer.collector.wait_for_messages(1)
        assert bytes(message.body) == b"kept"


# -- purge / destroy --------------------------------------------------------------------


def test_purge_removes_waiting_messages_and_keeps_the_unacknowledged(module_broker,
                                                                     passfile):
    """purge dst: the four waiting messages go, the one delivered unacknowledged
    stays; the reply says how many."""
    name = unique("purged")
    with opened(module_broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for i in range(5):
            sender.send(Message(body=f"m{i}", durable=True))
        receiver = conn.create_receiver(f"queue://{name}", credit=None)
        receiver.flow(1)
        receive_all(receiver, 1, settle=None)
        out = cmd_text(module_broker, passfile, "purge", "dst", "-t", "q", "-n", name)
        assert "4 waiting message(s) removed" in out
        assert "1 delivered but unacknowledged" in out
        figures = query(module_broker, passfile, "q", name)
        assert (figures["messages"], figures["unacked"]) == (1, 1)
        assert drain(conn, receiver) == []


def test_destroy_detaches_proton_links_and_ends_stomp_subscriptions(module_broker,
                                                                    passfile):
    """destroy dst: an attached Proton receiver and sender see their links closed
    with amqp:resource-deleted and a description; a STOMP subscriber gets an ERROR
    frame; the queue is gone from list dst."""
    name = unique("destroyed")
    address = f"queue://{name}"
    with opened(module_broker) as conn, clients() as open_client:
        receiver = conn.create_receiver(address)
        sender = conn.create_sender(address)
        sender.send(Message(body="soon gone", durable=True))
        stomp = open_client(module_broker.address("stomp"))
        stomp.subscribe(f"/queue/{name}", ack="client")
        out = cmd_text(module_broker, passfile, "destroy", "dst", "-t", "q", "-n", name)
        assert "2 consumer(s) and 1 producer(s) detached" in out
        wait_remote_closed(conn, receiver.link, sender.link)
        for link in (receiver.link, sender.link):
            condition = link.remote_condition
            assert condition.name == RESOURCE_DELETED
            assert f"queue {name} was destroyed by an administrator" in \
                condition.description
        with pytest.raises((LinkDetached, SendException)):
            sender.send(Message(body="after"))
        [error] = stomp.collector.wait_for(lambda: stomp.collector.errors, "ERROR")
        assert error.headers["message"] == "destination destroyed"
        names = [row["name"] for row in cmd_json(module_broker, passfile, "list", "dst")]
        assert name not in names


# -- durable subscriptions --------------------------------------------------------------


def test_durables_list_purge_and_destroy_refused_while_attached(module_broker, passfile):
    """list dur shows a STOMP durable subscription; destroy dur is refused (exit 1,
    saying why) while it is attached; once it is gone, purge dur says how many it
    removed and destroy dur removes it."""
    topic = unique("news").replace("-", ".")
    client_id = unique("client")
    with clients() as open_client:
        subscriber = open_client(module_broker.address("stomp"),
                                 **{"client-id": client_id})
        subscriber.subscribe(f"/topic/{topic}", ack="client",
                             **{"activemq.subscriptionName": "sub"})
        rows = cmd_json(module_broker, passfile, "list", "dur", "-d", topic)
        assert [(r["name"], r["client_id"], r["state"]) for r in rows] == \
            [("sub", client_id, "ACTIVE")]
        result = mqgate_cmd(module_broker, passfile, "destroy", "dur", "-n", "sub",
                            "-c", client_id)
        assert result.returncode == 1 and "consumer attached" in result.stderr
        subscriber.disconnect()
        producer = open_client(module_broker.address("stomp"))
        for i in range(3):
            producer.send(f"/topic/{topic}", f"m{i}", persistent="true")
    out = cmd_text(module_broker, passfile, "purge", "dur", "-n", "sub", "-c", client_id)
    assert "3 waiting message(s) removed" in out
    cmd_text(module_broker, passfile, "destroy", "dur", "-n", "sub", "-c", client_id)
    assert cmd_json(module_broker, passfile, "list", "dur", "-d", topic) == []
    result = mqgate_cmd(module_broker, passfile, "purge", "dur", "-n", "sub",
                        "-c", client_id)
    assert result.returncode == 1 and "404" in result.stderr


# -- across a restart -------------------------------------------------------------------


def test_created_limits_survive_a_restart_destroyed_messages_do_not(broker_factory,
                                                                  tmp_path, passfile):
    """create dst -o / update dst -o: the limits are there after a restart (and act:
    a REJECT_NEWEST queue of 2 refuses the third message); a destroyed queue's
    persistent messages do not come back; compact dst on the paused queue compacts the
    file store (the log gives the figures)."""
    varhome = tmp_path / "varhome"
    broker = broker_factory(varhome=varhome)
    cmd_text(broker, passfile, "create", "dst", "-t", "q", "-n", "limited",
             "-o", "maxNumMsgs=5")
    cmd_text(broker, passfile, "update", "dst", "-t", "q", "-n", "limited",
             "-o", "maxNumMsgs=2", "-o", "limitBehavior=REJECT_NEWEST")
    with opened(broker) as conn:
        sender = conn.create_sender("queue://doomed")
        sender.send(Message(body="gone", durable=True))
    cmd_text(broker, passfile, "destroy", "dst", "-t", "q", "-n", "doomed")
    cmd_text(broker, passfile, "pause", "dst", "-t", "q", "-n", "limited")
    out = cmd_text(broker, passfile, "compact", "dst", "-t", "q", "-n", "limited")
    assert "compaction of the message store started" in out
    broker.wait_for_line(r"compact dst: the message store went from \d+ to \d+ bytes")
    assert broker.terminate() == 0
    broker = broker_factory(varhome=varhome)
    limits = query(broker, passfile, "q", "limited")["limits"]
    assert (limits["maxNumMsgs"], limits["limitBehavior"]) == (2, "REJECT_NEWEST")
    listed = cmd_json(broker, passfile, "list", "dst")
    assert "doomed" not in [r["name"] for r in listed]
    with opened(broker) as conn:
        sender = conn.create_sender("queue://limited")
        sender.send(Message(body="1"))
        sender.send(Message(body="2"))
        refused = sender.send(Message(body="3"), error_states=[])
        assert refused.remote_state == refused.REJECTED
        assert refused.remote.condition.name == "amqp:resource-limit-exceeded"
        assert "(maxNumMsgs)" in refused.remote.condition.description
