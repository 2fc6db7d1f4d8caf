"""Address settings that apply (S7.1) end to end: `mqgate cmd create setting` bounds
the queues it matches; with FAIL a Proton sender past the bound is refused with the
queue named, removing the setting lets sends through, and a restart keeps the setting
in force; with DROP a STOMP sender is never refused and what is past the bound goes."""

import pytest
from proton import Message

from tests.e2e.admin_cmd import cmd_json, cmd_text
from tests.e2e.proton_client import opened
from tests.e2e.stomp_client import clients, unique


pytestmark = pytest.mark.e2e


def send_three(broker, address):
    """Send three messages; return the third's delivery (settled by the broker)."""
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        sender.send(Message(body="1"))
        sender.send(Message(body="2"))
        return sender.send(Message(body="3"), error_states=[])


def assert_refused(delivery, queue):
    assert delivery.remote_state == delivery.REJECTED
    condition = delivery.remote.condition
    assert condition.name == "amqp:resource-limit-exceeded"
    assert queue in condition.description


def test_fail_setting_refuses_past_its_bound_until_removed_and_survives_restart(
        broker_factory, tmp_path, passfile):
    varhome = tmp_path / "varhome"
    broker = broker_factory(varhome=varhome)
    out = cmd_text(broker, passfile, "create", "setting", "-t", "address",
                   "-m", "orders.#", "-o", "fullPolicy=FAIL", "-o", "maxSizeMessages=2")
    assert "address setting on orders.# in force" in out
    assert_refused(send_three(broker, "queue://orders.eu"), "orders.eu")
    listed = cmd_json(broker, passfile, "list", "setting")
    assert [(s["match"], s["max_messages"]) for s in listed] == [("orders.#", 2)]

    cmd_text(broker, passfile, "destroy", "setting", "-t", "address", "-m", "orders.#")
    with opened(broker) as conn:
        accepted = conn.create_sender("queue://orders.eu").send(Message(body="3"),
                                                                 error_states=[])
        assert accepted.remote_state == accepted.ACCEPTED

    cmd_text(broker, passfile, "create", "setting", "-t", "address",
             "-m", "orders.#", "-o", "fullPolicy=FAIL", "-o", "maxSizeMessages=2")
    assert broker.terminate() == 0
    broker = broker_factory(varhome=varhome)
    # the queue the store gave back (its messages were not persistent) and a new one
    assert_refused(send_three(broker, "queue://orders.eu"), "orders.eu")
    assert_refused(send_three(broker, "queue://orders.new"), "orders.new")
    unmatched = send_three(broker, "queue://elsewhere")
    assert unmatched.remote_state == unmatched.ACCEPTED


def test_drop_setting_takes_stomp_sends_and_drops_past_its_bound(module_broker, passfile):
    """DROP: every SEND past the bound still gets its RECEIPT (no ERROR); the queue
    keeps the first two, a subscriber gets those, query dst counts the three dropped
    and says where the limits come from."""
    name = unique("feed")
    cmd_text(module_broker, passfile, "create", "setting", "-t", "address", "-m", name,
             "-o", "fullPolicy=DROP", "-o", "maxSizeMessages=2")
    try:
        with clients() as open_stomp:
            stomp = open_stomp(("127.0.0.1", module_broker.port("stomp")))
            for n in range(5):
                stomp.send(f"/queue/{name}", f"m{n}")     # waits for the RECEIPT
            assert stomp.collector.errors == []
            queried = cmd_json(module_broker, passfile, "query", "dst", "-t", "q",
                               "-n", name)
            assert (queried["dropped"], queried["waiting"]) == (3, 2)
            assert queried["limits_from"] == f"address setting {name}"
            stomp.subscribe(f"/queue/{name}")
            stomp.collector.wait_for_messages(2)
            assert stomp.collector.bodies() == [b"m0", b"m1"]
    finally:
        cmd_text(module_broker, passfile, "destroy", "setting", "-t", "address",
                 "-m", name)
