"""Message capture end to end (S7.1-S7.4, S7.8): `mqgate cmd` against a real broker,
production traffic from Proton and stomp.py.

A capture on a busy address sees every routed message (within its bounds) while the
production consumers receive exactly what they would without it; a flooded capture
drops and counts and the producers get everything through; install, restart and
remove leave no trace; the refusals of S7.3 name their cause.
"""

import base64
import json
import urllib.error
import urllib.request

import pytest
from proton import Message
from proton.utils import LinkDetached

from tests.e2e.admin_cmd import cmd_json, cmd_text, mqgate_cmd
from tests.e2e.proton_client import drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique
from tests.hostile.probe import wait_until


pytestmark = pytest.mark.e2e


def api(broker, method, path, body=None):
    """One request to the HTTP admin API as admin: C{(status, JSON answer)}. Quicker
    than a `mqgate cmd` process per call, and the API's own routes get used."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.port('httpadmin')}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Basic " + base64.b64encode(b"admin:admin").decode(),
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def install(broker, name, address, **bounds):
    status, data = api(broker, "PUT", f"/api/captures/{name}",
                       {"address": address, **({"bounds": bounds} if bounds else {})})
    assert status == 200, data
    return data


def remove(broker, name):
    status, data = api(broker, "DELETE", f"/api/captures/{name}")
    assert status == 200, data


def capture(broker, passfile, name):
    status, data = api(broker, "GET", f"/api/captures/{name}")
    assert status == 200, data
    return data


def wait_ingested(broker, passfile, name, count):
    """Wait (with a deadline) until the capture has handed C{count} copies on."""
    wait_until(lambda: capture(broker, passfile, name)["ingested"] >= count,
               30, f"capture {name} to take {count} copies", interval=0.05)
    return capture(broker, passfile, name)


def test_capture_sees_every_message_and_production_is_untouched(module_broker, passfile):
    """S7.2: with Proton and STOMP producers on a queue that a Proton consumer
    drains, the capture has one copy per message; the consumer gets all of them,
    once, intact."""
    address = unique("orders")
    name = unique("tap").replace("-", "_")
    install(module_broker, name, f"queue://{address}")
    sent = [f"amqp-{i}" for i in range(100)]
    with opened(module_broker) as conn, clients() as open_stomp:
        receiver = conn.create_receiver(f"queue://{address}")
        sender = conn.create_sender(f"queue://{address}")
        for body in sent:
            sender.send(Message(body=body, id=body))
        stomp = open_stomp(("127.0.0.1", module_broker.port("stomp")))
        for i in range(20):
            body = f"stomp-{i}"
            stomp.send(f"/queue/{address}", body, receipt=(i == 19))
            sent.append(body)
        got = [m.body for m in receive_all(receiver, len(sent))]
    assert sorted(b if isinstance(b, str) else b.decode() for b in got) == sorted(sent)
    figures = wait_ingested(module_broker, passfile, name, len(sent))
    assert (figures["copied"], figures["ingested"], figures["dropped_rate"],
            figures["dropped_ring"]) == (120, 120, 0, 0)
    assert figures["sink"]["copies"] == 120
    listed = {row["name"]: row for row in cmd_json(module_broker, passfile, "list", "dst")}
    assert listed[f"mqgate.capture.{figures['node']}.{address}.{name}"]["ring"] == 10000
    remove(module_broker, name)


def test_only_the_capture_role_reads_the_capture_queue(module_broker, passfile):
    """S7.2: the admin user (not in group amq) is refused the capture queue, and
    told which setting restricts it."""
    name = unique("guarded").replace("-", "_")
    data = install(module_broker, name, "queue://guarded")
    with opened(module_broker) as conn:
        with pytest.raises(LinkDetached, match="security setting on mqgate.capture.#"):
            conn.create_receiver(f"queue://{data['queue']}")
    remove(module_broker, name)


def test_flooded_capture_drops_and_counts_producer_unhindered(module_broker, passfile):
    """S7.4: a capture of 20 copies a second and a ring of 10, flooded with 1,000
    messages: copies beyond the rate are dropped and counted; the producer's
    messages all reach the consumer."""
    address = unique("flood")
    name = unique("flooded").replace("-", "_")
    install(module_broker, name, f"queue://{address}", rate=20, ringSize=10)
    with opened(module_broker) as conn:
        sender = conn.create_sender(f"queue://{address}")
        for i in range(1000):
            sender.send(Message(body=i))
        receiver = conn.create_receiver(f"queue://{address}")
        assert len(receive_all(receiver, 1000)) == 1000
        assert drain(conn, receiver, limit=10) == []
    figures = capture(module_broker, passfile, name)
    assert figures["dropped_rate"] + figures["copied"] == 1000
    assert figures["dropped_rate"] >= 900
    status, listed = api(module_broker, "GET", "/api/captures")
    assert status == 200 and name in [c["name"] for c in listed]
    remove(module_broker, name)


def test_refused_behind_an_exclusive_divert(module_broker, passfile):
    """S7.3: an exclusive divert on the address: the install fails (exit 1) naming
    the divert and where the traffic goes; nothing is installed."""
    address = unique("moved")
    divert = unique("away").replace("-", "_")
    cmd_text(module_broker, passfile, "create", "divert", "-n", divert,
             "-d", f"queue://{address}", "-target", f"queue://{address}.elsewhere",
             "-exclusive")
    result = mqgate_cmd(module_broker, passfile, "create", "capture", "-n", "behind",
                        "-d", f"queue://{address}")
    assert result.returncode == 1
    assert f"exclusive divert '{divert}'" in result.stderr
    assert f"queue://{address}.elsewhere" in result.stderr
    assert api(module_broker, "GET", "/api/captures/behind")[0] == 404
    cmd_text(module_broker, passfile, "destroy", "divert", "-n", divert)


def test_install_restart_remove_leave_no_trace(broker_factory, tmp_path, passfile):
    """S7.1, S7.8: a capture and an operator's divert survive a restart and go on
    working; removing them and restarting leaves nothing: no divert, queue,
    setting or catalog entry."""
    varhome = tmp_path / "varhome"
    broker = broker_factory(varhome=varhome, listening=("jms", "httpadmin"))
    install(broker, "kept", "queue://kept", ringSize=50)
    cmd_text(broker, passfile, "create", "divert", "-n", "copy", "-d", "queue://kept",
             "-target", "queue://kept.copy")
    assert broker.terminate() == 0
    # S7.9: the install was audited before it was made, then with its outcome.
    audit = [json.loads(line) for line in (
        varhome / "instances" / "mqgate" / "log" / "audit.log").read_text().splitlines()]
    assert [(r["outcome"], r.get("user")) for r in audit
            if r["kind"] == "capture.install"] == [("requested", "admin"),
                                                    ("ok", "admin")]

    broker = broker_factory(varhome=varhome, listening=("jms", "httpadmin"))
    figures = capture(broker, passfile, "kept")
    assert figures["ring_size"] == 50
    with opened(broker) as conn:
        conn.create_sender("queue://kept").send(Message(body="after restart"))
        copy = conn.create_receiver("queue://kept.copy")
        assert [m.body for m in receive_all(copy, 1)] == ["after restart"]
    wait_ingested(broker, passfile, "kept", 1)
    remove(broker, "kept")
    cmd_text(broker, passfile, "destroy", "divert", "-n", "copy")
    assert broker.terminate() == 0

    broker = broker_factory(varhome=varhome, listening=("jms", "httpadmin"))
    assert api(broker, "GET", "/api/captures") == (200, [])
    status, destinations = api(broker, "GET", "/api/destinations")
    assert status == 200
    assert not [d for d in destinations if d["name"].startswith("mqgate.capture.")]
    catalogs = list(varhome.glob("**/runtime/catalog.json"))
    assert len(catalogs) == 1
    document = json.loads(catalogs[0].read_text())
    assert (document["captures"], document["diverts"], document["address_settings"],
            document["security_settings"]) == ([], [], [], [])
