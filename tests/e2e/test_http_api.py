"""The HTTP admin API (S11.2) of a real `twistd -n mqgate` broker, with a real HTTP
client (urllib, http.client) and Proton and stomp.py clients as the traffic: every
resource (broker, services, destinations with purge/pause/resume, connections,
durables, clients, client profiles, reload), /metrics parsed with prometheus_client's
parser against what was sent, /healthz, HTTP Basic logins (wrong password, a user
outside the admin group), JSON errors, the audit trail, the port mapper's table, TLS
on httpsadmin, bounded bodies, the README's curl examples, and the answer time while
a benchmark floods a queue."""

import base64
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from proton import Endpoint, Message
from proton.utils import ConnectionClosed

from mqgate.security.users import User, format_entry, hash_password
from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.broker import REPO_ROOT, BrokerProcess, broker_environment
from tests.e2e.proton_client import connect, drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique
from tests.e2e.test_admin_dst import wait_remote_closed
from tests.e2e.test_portmapper import read_port_mapper
from tests.e2e.test_tls import keytool
from tests.hostile.probe import wait_until

pytestmark = pytest.mark.e2e

#: name, group; each password is the name (admin and alice log in over HTTP, guest
#: is the benchmark's user).
USERS = (("admin", "admin"), ("alice", "user"), ("guest", "anonymous"))
TIMEOUT = 10.0


def write_users(directory):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "passwd"
    path.write_text("".join(
        format_entry(User(name, hash_password(name, iterations=1000), group)) + "\n"
        for name, group in USERS), encoding="utf-8")
    os.chmod(path, 0o600)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker on the shipped configuration (httpadmin on a free port) and L{USERS}."""
    root = tmp_path_factory.mktemp("http-api")
    write_users(root / "users")
    process = BrokerProcess(root / "varhome", defines={
        "mqgate.user_repository.file.dirpath": str(root / "users")})
    try:
        process.start("httpadmin")
        process.wait_until_catching_sigterm()
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def passfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("http-api-cmd") / "passfile"
    path.write_text("imq.imqcmd.password=admin\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def auth(user, password=None):
    token = f"{user}:{user if password is None else password}".encode()
    return "Basic " + base64.b64encode(token).decode()


def call(broker, method, path, body=None, user="admin", password=None,
         scheme="http", context=None, service="httpadmin", host="127.0.0.1"):
    """One request with urllib; C{(status, headers, decoded JSON or raw bytes)}."""
    url = f"{scheme}://{host}:{broker.port(service)}{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if user is not None:
        request.add_header("Authorization", auth(user, password))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as r:
            status, headers, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers, e.read()
    if headers.get("Content-Type", "").startswith("application/json"):
        return status, headers, json.loads(raw)
    return status, headers, raw


def test_client_profiles_over_http(broker):
    """GET /api/client-profiles[/NAME] answers the show command's data as JSON."""
    status, headers, data = call(broker, "GET", "/api/client-profiles/default")
    assert status == 200
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert data[0]["name"] == "default"
    assert data[0]["queues"]["D-1"]["max_depth"] == 20000
    status, _, data = call(broker, "GET", "/api/client-profiles/nosuch")
    assert status == 404
    assert data["status"] == 404 and "no client profile 'nosuch'" in data["error"]


def test_clients_lists_connected_clients_by_quoted_name(broker):
    """GET /api/clients lists a connected AMQP client's egress queues; its container
    id, slash and dot included, names it in /api/clients/NAME when URL-quoted."""
    conn = connect(broker, user="admin", password="admin", container_id="app/1.x")
    try:
        conn.create_receiver("http.api.clients")
        status, _, data = call(broker, "GET", "/api/clients")
        assert status == 200
        assert [c["client"] for c in data] == ["app/1.x"]
        status, _, data = call(broker, "GET", "/api/clients/app%2F1.x")
        assert status == 200
        assert data[0]["user"] == "admin"
        assert {q["queue"] for q in data[0]["queues"]} >= {"C-1", "D-1", "G-1"}
    finally:
        conn.close()
    wait_until(lambda: call(broker, "GET", "/api/clients")[2] == [], TIMEOUT,
               "the closed client left /api/clients")


def test_a_client_id_starting_with_a_slash_is_found_by_its_quoted_name(broker):
    """A Proton client whose container id starts with a slash (/app//7) is found at
    /api/clients/%2Fapp%2F%2F7, not redirected to a name with the slashes merged."""
    container = "/app//" + unique("x")
    quoted = urllib.parse.quote(container, safe="")
    with opened(broker, container_id=container) as conn:
        conn.create_receiver(queue_name("slash"))
        status, _, data = call(broker, "GET", f"/api/clients/{quoted}")
        assert status == 200, data
        assert [c["client"] for c in data] == [container]


def test_reload_over_http(broker):
    """POST /api/reload/rules re-reads the access control file and says so."""
    status, _, data = call(broker, "POST", "/api/reload/rules")
    assert status == 200
    assert data[0]["name"] == "rules" and data[0]["ok"] is True
    assert call(broker, "GET", "/api/reload")[0] == 405


def queue_name(prefix):
    """A fresh queue name the broker accepts (letters, digits, _ and dots)."""
    return unique(prefix).replace("-", "_")


def test_broker_and_services(broker):
    """GET /api/broker says the broker runs with its services, httpadmin included;
    GET /api/services lists each with its port, GET /api/services/jms its settings."""
    status, _, data = call(broker, "GET", "/api/broker")
    assert status == 200
    assert data["state"] == "RUNNING" and data["instance"] == "mqgate"
    assert data["services"]["jms"] == data["services"]["httpadmin"] == "RUNNING"
    status, _, rows = call(broker, "GET", "/api/services")
    assert status == 200
    ports = {r["name"]: (r["port"], r["type"]) for r in rows}
    assert ports["jms"] == (broker.port("jms"), "NORMAL")
    assert ports["httpadmin"] == (broker.port("httpadmin"), "ADMIN")
    status, _, data = call(broker, "GET", "/api/services/jms")
    assert status == 200
    assert (data["port"], data["host"]) == (broker.port("jms"), "127.0.0.1")
    assert data["protocols"] == "amqp,stomp"
    status, _, data = call(broker, "GET", "/api/services/nosuch")
    assert status == 404 and "no service 'nosuch'" in data["error"]


def test_put_creates_a_queue_then_updates_its_limits(broker):
    """PUT of a new queue creates it with the body's limits (GET shows them); PUT
    again updates them, and the new limit acts on a Proton producer."""
    name = queue_name("put")
    path = f"/api/destinations/queue/{name}"
    status, _, data = call(broker, "PUT", path, {"maxNumMsgs": 1000})
    assert status == 200 and data["created"]["name"] == name
    status, _, data = call(broker, "GET", path)
    assert status == 200
    assert data["limits"]["maxNumMsgs"] == 1000
    assert data["limits"]["limitBehavior"] == "FLOW_CONTROL"
    status, _, data = call(broker, "PUT", path,
                           {"maxNumMsgs": 1, "limitBehavior": "REJECT_NEWEST"})
    assert status == 200 and data["updated"]["limits"]["maxNumMsgs"] == 1
    limits = call(broker, "GET", path)[2]["limits"]
    assert {key: limits[key] for key in ("maxNumMsgs", "maxTotalMsgBytes",
                                         "limitBehavior")} == {
        "maxNumMsgs": 1, "maxTotalMsgBytes": data["updated"]["limits"][
            "maxTotalMsgBytes"], "limitBehavior": "REJECT_NEWEST"}
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        sender.send(Message(body="1"))
        refused = sender.send(Message(body="2"), error_states=[])
        assert refused.remote_state == refused.REJECTED
    assert call(broker, "DELETE", path)[0] == 200


def test_paused_consumers_get_nothing_until_resumed(broker):
    """POST .../pause {"what": "CONSUMERS"}: a Proton receiver's drain brings nothing
    of the three messages sent; POST .../resume: the three arrive in order."""
    name = queue_name("pause")
    path = f"/api/destinations/queue/{name}"
    with opened(broker) as conn:
        receiver = conn.create_receiver(f"queue://{name}", credit=None)
        status, _, data = call(broker, "POST", path + "/pause", {"what": "CONSUMERS"})
        assert status == 200 and data["state"] == "CONSUMERS_PAUSED"
        sender = conn.create_sender(f"queue://{name}")
        for i in range(3):
            sender.send(Message(body=f"m{i}"))
        assert drain(conn, receiver) == []
        assert call(broker, "GET", path)[2]["messages"] == 3
        status, _, data = call(broker, "POST", path + "/resume")
        assert status == 200 and data["state"] == "RUNNING"
        receiver.flow(3)
        assert [m.body for m in receive_all(receiver, 3)] == ["m0", "m1", "m2"]
    status, _, data = call(broker, "POST", path + "/pause", {"what": "EVERYONE"})
    assert status == 400 and "EVERYONE" in data["error"]


def test_purge_says_how_many_and_delete_detaches_a_receiver(broker):
    """POST .../purge answers the number of messages removed (4) and the queue is
    empty; DELETE destroys it: the attached Proton receiver sees its link closed with
    amqp:resource-deleted, and the queue is a 404 with a JSON message afterwards."""
    name = queue_name("purge")
    path = f"/api/destinations/queue/{name}"
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for i in range(4):
            sender.send(Message(body=f"m{i}"))
        status, _, data = call(broker, "POST", path + "/purge")
        assert (status, data["purged"]) == (200, 4)
        assert call(broker, "GET", path)[2]["messages"] == 0
        receiver = conn.create_receiver(f"queue://{name}", credit=None)
        status, _, data = call(broker, "DELETE", path)
        assert status == 200 and data["destroyed"]["name"] == name
        wait_remote_closed(conn, receiver.link)
        condition = receiver.link.remote_condition
        assert condition.name == "amqp:resource-deleted"
        assert "destroyed by an administrator" in condition.description
    status, headers, data = call(broker, "GET", path)
    assert status == 404
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert data == {"error": f"no queue '{name}'", "status": 404}


def test_connections_list_users_and_delete_closes_one(broker):
    """GET /api/connections lists a Proton connection (admin) and a stomp.py one
    (alice) with their users; DELETE /api/connections/ID closes the Proton one with
    amqp:connection:forced, and the STOMP one stays listed."""
    container = unique("http-cxn")
    with opened(broker, container_id=container) as conn, clients() as open_client:
        stomp = open_client(broker.address("jms"), user="alice", passcode="alice",
                            **{"client-id": container + "-stomp"})
        status, _, rows = call(broker, "GET", "/api/connections")
        assert status == 200
        mine = {r["client_id"]: r for r in rows if r["client_id"] and
                r["client_id"].startswith(container)}
        amqp, stomp_row = mine[container], mine[container + "-stomp"]
        assert (amqp["protocol"], amqp["user"], amqp["service"]) == \
            ("AMQP", "admin", "jms")
        assert (stomp_row["protocol"], stomp_row["user"]) == ("STOMP", "alice")
        assert call(broker, "GET", "/api/connections?service=jms")[0] == 200
        status, _, data = call(broker, "GET", f"/api/connections/{amqp['id']}")
        assert status == 200 and data["client_id"] == container
        status, _, data = call(broker, "DELETE", f"/api/connections/{amqp['id']}")
        assert status == 200 and data["destroyed"] == amqp["id"]
        with pytest.raises(ConnectionClosed):
            conn.wait(lambda: conn.conn.state & Endpoint.REMOTE_CLOSED,
                      msg="the broker closing the connection")
        condition = conn.conn.remote_condition
        assert condition.name == "amqp:connection:forced"
        wait_until(lambda: all(r["id"] != amqp["id"] for r in call(
            broker, "GET", "/api/connections")[2]), TIMEOUT, "the connection gone")
        ids = [r["id"] for r in call(broker, "GET", "/api/connections")[2]]
        assert stomp_row["id"] in ids
        assert stomp.connection.is_connected()
    status, _, data = call(broker, "GET", "/api/connections/abc")
    assert status == 400 and "a connection id is a number" in data["error"]


def test_durables_list_destroy_and_purge(broker):
    """GET /api/durables lists a stomp.py durable subscription; DELETE is refused
    while it is attached; once detached, POST .../purge removes the three messages
    published meanwhile and DELETE removes it."""
    topic = queue_name("news").replace("_", ".")
    client_id = unique("durable")
    with clients() as open_client:
        subscriber = open_client(broker.address("jms"), **{"client-id": client_id})
        subscriber.subscribe(f"/topic/{topic}", ack="client",
                             **{"activemq.subscriptionName": "sub"})
        status, _, rows = call(broker, "GET", f"/api/durables?topic={topic}")
        assert status == 200
        assert [(r["name"], r["client_id"], r["state"]) for r in rows] == \
            [("sub", client_id, "ACTIVE")]
        status, _, data = call(broker, "DELETE", f"/api/durables/{client_id}/sub")
        assert status == 400 and "consumer attached" in data["error"]
        subscriber.disconnect()
        producer = open_client(broker.address("jms"))
        for i in range(3):
            producer.send(f"/topic/{topic}", f"m{i}", persistent="true")
    status, _, data = call(broker, "POST", f"/api/durables/{client_id}/sub/purge")
    assert (status, data["purged"]) == (200, 3)
    status, _, data = call(broker, "DELETE", f"/api/durables/{client_id}/sub")
    assert status == 200 and data["destroyed"] == {"name": "sub", "client_id": client_id}
    assert call(broker, "GET", f"/api/durables?topic={topic}")[2] == []
    status, _, data = call(broker, "DELETE", f"/api/durables/{client_id}/sub")
    assert status == 404 and "no durable subscription 'sub'" in data["error"]


def scrape(broker):
    """GET /metrics parsed: C{{(sample name, labels as a sorted tuple): value}}."""
    status, headers, text = call(broker, "GET", "/metrics")
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode("utf-8"))
            for sample in family.samples}


def test_metrics_match_what_was_sent(broker):
    """After 7 messages of 113 encoded bytes each to a new queue, /metrics (parsed by
    prometheus_client) shows 7 ready and 7 published, 791 bytes; after a Proton
    receiver takes 3, 4 ready, 3 delivered and acknowledged; the connection counts."""
    name = queue_name("metrics")
    label = (("queue", name),)
    message = Message(body=b"x" * 100)
    size = len(message.encode())
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for _ in range(7):
            sender.send(message)
        samples = scrape(broker)
        assert samples[("mqgate_queue_messages_ready", label)] == 7
        assert samples[("mqgate_queue_messages_published_total", label)] == 7
        assert samples[("mqgate_queue_published_bytes_total", label)] == 7 * size
        assert samples[("mqgate_queue_messages_bytes", label)] == 7 * size
        assert samples[("mqgate_queue_producers", label)] == 1
        assert samples[("mqgate_connections", (("service", "jms"),))] >= 1
        receiver = conn.create_receiver(f"queue://{name}", credit=3)
        receive_all(receiver, 3)
        receiver.close()
        wait_until(lambda: scrape(broker)[
            ("mqgate_queue_messages_acknowledged_total", label)] == 3, TIMEOUT,
            "the three acknowledgements counted")
        samples = scrape(broker)
        assert samples[("mqgate_queue_messages_ready", label)] == 4
        assert samples[("mqgate_queue_messages_delivered_total", label)] == 3
    assert size == 113


def test_metrics_count_a_stomp_topic(broker):
    """Four stomp.py SENDs to a topic with one stomp.py subscriber: /metrics shows the
    topic's one subscription, four published and four routed, and the messages
    received are the four sent."""
    topic = queue_name("prices").replace("_", ".")
    label = (("topic", topic),)
    with clients() as open_client:
        subscriber = open_client(broker.address("jms"))
        subscriber.subscribe(f"/topic/{topic}")
        producer = open_client(broker.address("jms"))
        for i in range(4):
            producer.send(f"/topic/{topic}", f"p{i}")
        got = subscriber.collector.wait_for_messages(4)
        assert [bytes(m.body) for m in got] == [b"p0", b"p1", b"p2", b"p3"]
        samples = scrape(broker)
        assert samples[("mqgate_topic_subscriptions", label)] == 1
        assert samples[("mqgate_topic_consumers", label)] == 1
        assert samples[("mqgate_topic_messages_published_total", label)] == 4
        assert samples[("mqgate_topic_messages_routed_total", label)] == 4
        assert samples[("mqgate_connections", (("service", "jms"),))] >= 2


#: Queues of the scrape test: the issue's "10,000 destinations scraped in under a second".
MANY_QUEUES = 10_000


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_metrics_of_ten_thousand_queues_over_http_in_under_a_second(broker_factory):
    """With 10,000 queues made by one message each (a Proton anonymous-relay sender),
    GET /metrics over HTTP answers in under a second (the best of three scrapes) with
    a ready and a published series for every one of them."""
    broker = broker_factory()
    port = broker.port("httpadmin")
    timed_get(port, "/healthz")
    status, _, _ = call(broker, "GET", "/api/broker")   # the login is cached now
    assert status == 200
    with opened(broker) as conn:
        sender = conn.create_sender(None)
        deliveries = [sender.link.send(Message(address=f"queue://many.q{i}", body=i))
                      for i in range(MANY_QUEUES)]
        conn.wait(lambda: all(d.remote_state for d in deliveries), timeout=120,
                  msg="the broker settling 10,000 messages")
        assert {d.remote_state for d in deliveries} == {deliveries[0].ACCEPTED}
    times = []
    for _ in range(3):
        seconds, status = timed_get(port, "/metrics")
        assert status == 200
        times.append(seconds)
    start = time.perf_counter()
    samples = scrape(broker)
    parse = time.perf_counter() - start
    ready = [key for key in samples if key[0] == "mqgate_queue_messages_ready"
             and key[1][0][1].startswith("many.q")]
    published = [key for key, value in samples.items()
                 if key[0] == "mqgate_queue_messages_published_total" and value == 1
                 and key[1][0][1].startswith("many.q")]
    assert len(ready) == len(published) == MANY_QUEUES
    print(f"\n/metrics of {MANY_QUEUES} queues over HTTP: "
          + ", ".join(f"{t * 1000:.0f} ms" for t in times)
          + f"; {len(samples)} samples, fetched and parsed by prometheus_client in "
            f"{parse * 1000:.0f} ms")
    assert min(times) < 1.0, times


def test_unknown_destinations_and_bad_types_are_json_errors(broker):
    """An unknown queue is a 404 and a bad type a 400, each a JSON message saying
    what was wrong; a missing name is a 404 naming the path."""
    status, _, data = call(broker, "GET", "/api/destinations/queue/nowhere")
    assert (status, data) == (404, {"error": "no queue 'nowhere'", "status": 404})
    status, _, data = call(broker, "DELETE", "/api/destinations/topic/nowhere")
    assert (status, data["error"]) == (404, "no topic 'nowhere'")
    status, _, data = call(broker, "GET", "/api/destinations/bucket/x")
    assert (status, data["error"]) == (400, "destination type 'bucket': use queue or topic")
    status, _, data = call(broker, "GET", "/api/destinations?type=bucket")
    assert status == 400 and "use queue or topic" in data["error"]
    status, _, data = call(broker, "PUT", "/api/destinations/queue/x", {"bogus": 1})
    assert status == 400 and "unknown property 'bogus'" in data["error"]
    status, _, data = call(broker, "GET", "/api/destinations/queue")
    assert (status, data["error"]) == (
        404, "no such resource: GET /api/destinations/queue")


@pytest.mark.parametrize("path, words", [
    ("/api/broker", ["query", "bkr"]),
    ("/api/services", ["list", "svc"]),
    ("/api/destinations?type=queue", ["list", "dst", "-t", "q"]),
    ("/api/connections", ["list", "cxn"]),
    ("/api/durables", ["list", "dur"]),
])
def test_routes_answer_as_the_admin_service_does(broker, passfile, path, words):
    """A route answers the data `mqgate cmd --json` prints for the same words from
    the admin service: rows with the same keys (`mqgate cmd`'s own connection is in
    its list of connections, and the figures move)."""
    with opened(broker, container_id=unique("routes")):   # a connection to list
        status, _, data = call(broker, "GET", path)
        result = mqgate_cmd(broker, passfile, "--json", *words)
    assert result.returncode == 0, result.stderr
    if words[1] in ("svc", "cxn"):
        assert data, "nothing listed to compare"
    assert status == 200
    expected = json.loads(result.stdout)
    assert type(data) is type(expected)
    if isinstance(data, dict):
        assert set(data) == set(expected)
    else:
        assert {tuple(sorted(row)) for row in data} <= \
            {tuple(sorted(row)) for row in expected}


def test_no_or_wrong_credentials_are_a_401(broker):
    """No credentials or a wrong password: 401 with a Basic challenge, JSON error."""
    status, headers, data = call(broker, "GET", "/api/client-profiles", user=None)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Basic ")
    assert data["status"] == 401
    status, headers, data = call(broker, "GET", "/api/client-profiles",
                                 password="wrong")
    assert status == 401
    assert data["error"] == "authentication failed for user 'admin'"


def test_failed_http_logins_are_slowed_like_any_other(broker_factory):
    """The login guard slows an address down once its free failures are spent, HTTP
    Basic logins included: with one free failure, the second wrong password waits
    about half a second and the third about a second."""
    broker = broker_factory({"mqgate.authentication.failures.free": "1"})
    times = []
    for _ in range(3):
        start = time.monotonic()
        assert call(broker, "GET", "/api/clients", password="wrong")[0] == 401
        times.append(time.monotonic() - start)
    assert times[1] >= 0.45, times
    assert times[2] >= 0.9, times


def test_a_user_outside_the_admin_group_is_a_403(broker):
    """alice (group user) logs in but may not use the admin API."""
    status, _, data = call(broker, "GET", "/api/client-profiles", user="alice")
    assert status == 403
    assert "alice" in data["error"]


def test_no_route_but_healthz_serves_a_stranger_or_a_non_admin(broker):
    """Without credentials every route is a 401, and for alice (group user) a 403:
    her DELETE of a queue and purge of it change nothing, /metrics tells her nothing."""
    name = queue_name("guarded")
    path = f"/api/destinations/queue/{name}"
    assert call(broker, "PUT", path, {"maxNumMsgs": 5})[0] == 200
    routes = [("GET", "/api/broker"), ("GET", "/api/services"), ("GET", path),
              ("DELETE", path), ("POST", path + "/purge"), ("GET", "/api/connections"),
              ("DELETE", "/api/connections/1"), ("GET", "/api/durables"),
              ("GET", "/api/clients"), ("GET", "/metrics")]
    for method, route in routes:
        status, _, data = call(broker, method, route, user=None)
        assert (status, data["status"]) == (401, 401), route
        status, _, data = call(broker, method, route, user="alice")
        assert status == 403 and "alice" in data["error"], route
    status, _, data = call(broker, "GET", path)
    assert status == 200 and data["limits"]["maxNumMsgs"] == 5
    assert call(broker, "DELETE", path)[0] == 200


def test_changes_and_logins_are_audited_reads_are_not(broker):
    """A change over HTTP is an admin record and a failed login an authentication
    record in the audit file, both naming the httpadmin service; a read is none, so
    polling the API does not fill the trail."""
    call(broker, "GET", "/api/client-profiles/default")
    call(broker, "PUT", "/api/destinations/queue/audited.here", {})
    call(broker, "GET", "/api/client-profiles/default", password="nope")
    path = broker.varhome / "instances" / "mqgate" / "log" / "audit.log"

    def records():
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def kinds():
        return {(r.get("kind", r.get("event")), r.get("outcome"), r.get("command"))
                for r in records() if r.get("service") == "httpadmin"}

    def found():
        return (("admin", "ok", "create dst -t q -n audited.here") in kinds() and
                ("authentication", "failed", None) in kinds())
    wait_until(found, TIMEOUT, f"the audit records in {path}")
    assert ("admin", "ok", "show client-profile default") not in kinds()
    assert call(broker, "DELETE", "/api/destinations/queue/audited.here")[0] == 200


def test_healthz_needs_no_login_and_metrics_does(broker):
    """/healthz answers 200 ok to anyone; /metrics asks for a login."""
    status, _, data = call(broker, "GET", "/healthz", user=None)
    assert (status, data) == (200, {"status": "ok"})
    assert call(broker, "GET", "/metrics", user=None)[0] == 401


def test_errors_are_json(broker):
    """An unknown path, a wrong method and a body that is not JSON: 4xx JSON errors."""
    status, _, data = call(broker, "GET", "/api/nothing")
    assert (status, data["status"]) == (404, 404)
    status, headers, data = call(broker, "PATCH", "/api/broker")
    assert (status, data["status"]) == (405, 405)
    url = f"http://127.0.0.1:{broker.port('httpadmin')}/api/destinations/queue/q"
    request = urllib.request.Request(url, data=b"{oops", method="PUT",
                                     headers={"Authorization": auth("admin")})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=TIMEOUT)
    assert info.value.code == 400
    assert "not JSON" in json.loads(info.value.read())["error"]


def test_a_large_body_is_refused_before_it_is_sent(broker):
    """A 100 MB Content-Length is answered 413 at once and the connection closed."""
    with socket.create_connection(("127.0.0.1", broker.port("httpadmin")),
                                  timeout=TIMEOUT) as sock:
        sock.sendall(b"PUT /api/destinations/queue/q HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: " + auth("admin").encode() +
                     b"\r\nContent-Length: 100000000\r\n\r\n{")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["status"] == 413


def test_port_mapper_lists_httpadmin(broker):
    """The port mapper publishes httpadmin with transport http and type ADMIN."""
    table = read_port_mapper(broker.address("portmapper")).decode()
    port = broker.port("httpadmin")
    assert f"httpadmin http ADMIN {port}" in table, table


@pytest.fixture
def tls_broker(tmp_path):
    """A broker with httpsadmin on the key pair made by `mqgate keytool`."""
    varhome = tmp_path / "varhome"
    result = keytool(varhome, "--nopassword")
    assert result.returncode == 0, result.stderr
    process = BrokerProcess(varhome, defines={
        "mqgate.service.activelist": "jms,httpsadmin",
        "mqgate.httpsadmin.https.port": "0"})
    try:
        process.start("httpsadmin")
        yield process
    finally:
        process.kill()


def test_httpsadmin_over_verified_tls(tls_broker):
    """httpsadmin serves the API over TLS with the broker's certificate, which a client
    trusting it verifies (host name included); it is listed as https."""
    cert = (tls_broker.varhome / "instances" / "mqgate" / "etc" / "keystore"
            / "cert.pem")
    context = ssl.create_default_context(cafile=str(cert))
    status, _, data = call(tls_broker, "GET", "/api/client-profiles/default",
                           scheme="https", context=context, service="httpsadmin",
                           host="localhost")
    assert status == 200 and data[0]["name"] == "default"
    # A client offering HTTP/2 and HTTP/1.1 over ALPN, as curl does, gets HTTP/1.1.
    context.set_alpn_protocols(["h2", "http/1.1"])
    conn = http.client.HTTPSConnection("localhost", tls_broker.port("httpsadmin"),
                                       context=context, timeout=TIMEOUT)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        assert conn.sock.selected_alpn_protocol() == "http/1.1"
    finally:
        conn.close()
    with pytest.raises(urllib.error.URLError) as info:
        call(tls_broker, "GET", "/healthz", scheme="https", service="httpsadmin",
             context=ssl.create_default_context(), host="localhost")
    assert isinstance(info.value.reason, ssl.SSLCertVerificationError)
    table = read_port_mapper(tls_broker.address("portmapper")).decode()
    assert f"httpsadmin https ADMIN {tls_broker.port('httpsadmin')}" in table


# -- the README's examples ----------------------------------------------------------------


def readme_curls():
    """The curl command lines of the README's "HTTP admin API" section, in order."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### HTTP admin API", 1)[1].split("\n### ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("curl ")]


def run_curl(line, replacements):
    """Run one README curl line (its comment dropped, its addresses replaced) with
    -sS and the status written last; C{(status, body)}."""
    for old, new in replacements.items():
        line = line.replace(old, new)
    argv = shlex.split(line, comments=True) + ["-sS", "-w", "\\n%{http_code}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, (argv, result.stderr)
    body, _, status = result.stdout.rpartition("\n")
    return int(status), body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_curl_examples_work(broker):
    """Every plain-HTTP curl line of the README's HTTP admin API section, run as
    written against the broker's port, answers 200 with JSON (Prometheus text for
    /metrics)."""
    lines = [line for line in readme_curls() if "http://127.0.0.1:8161" in line]
    assert len(lines) >= 10
    for line in lines:
        status, body = run_curl(line, {"127.0.0.1:8161":
                                       f"127.0.0.1:{broker.port('httpadmin')}"})
        assert status == 200, (line, body)
        if line.rstrip().endswith("/metrics"):
            assert "mqgate_connections" in body
        else:
            json.loads(body)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_tls_curl_example_works(tls_broker):
    """The README's httpsadmin curl line, with the broker's VARHOME for var/ and its
    port for 8443, verifies the certificate and answers 200."""
    [line] = [line for line in readme_curls() if "https://" in line]
    status, body = run_curl(line, {
        "var/": f"{tls_broker.varhome}/",
        ":8443": f":{tls_broker.port('httpsadmin')}"})
    assert (status, json.loads(body)) == (200, [])


# -- under load ---------------------------------------------------------------------------

#: The bound of S11.2's "answers within 100 ms while a benchmark runs".
LOAD_BOUND = 0.100
#: What an operator's tools read while the broker is busy.
LOAD_PATHS = ("/api/broker", "/api/clients", "/api/destinations", "/api/connections",
              "/metrics")


def timed_get(port, path):
    """Seconds for one GET on a new connection, as curl would do it."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", path, headers={"Authorization": auth("admin")})
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    return time.perf_counter() - start, response.status


def delivered(broker):
    """Messages the broker has delivered to the connected clients so far, and how many
    clients there are (from /api/clients)."""
    clients = call(broker, "GET", "/api/clients")[2]
    return sum(q["deliveries"] for c in clients for q in c["queues"]), len(clients)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_api_answers_within_100_ms_while_a_queue_is_flooded(broker):
    """While the AMQP throughput benchmark (a producer and a consumer, each its own
    process, started from a client thread) floods a queue, the API's reading routes
    and /metrics answer in under 100 ms (the 95th percentile of 50 requests, each on
    a new connection as curl makes them; logins come from the cache, as a scraper's
    do after its first)."""
    port = broker.port("httpadmin")
    timed_get(port, "/api/broker")   # the first login pays the password hash
    url = f"amqp://127.0.0.1:{broker.port('jms')}"
    # Its own process group, so that the benchmark's two clients stop with it.
    bench = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "bench" / "amqp_throughput.py"),
         "--url", url, "--mode", "presettled", "--messages", "5000000",
         "--address", "http.api.flood", "--timeout", "200"],
        cwd=str(REPO_ROOT), env=broker_environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # Measure only while both benchmark clients are connected and moving messages.
        wait_until(lambda: delivered(broker) >= (10_000, 2), 60,
                   "the benchmark's consumer receiving")
        before, started = delivered(broker)[0], time.monotonic()
        times = []
        worst = {}
        for index in range(50):
            path = LOAD_PATHS[index % len(LOAD_PATHS)]
            seconds, status = timed_get(port, path)
            assert status == 200, path
            times.append(seconds)
            worst[path] = max(worst.get(path, 0), seconds)
        after, count = delivered(broker)
        rate = (after - before) / (time.monotonic() - started)
        assert bench.poll() is None, bench.stderr.read()
        assert count == 2, "a benchmark client left before the measurements ended"
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGTERM)
        bench.wait(30)
    times.sort()
    p95 = times[int(len(times) * 0.95) - 1]
    print(f"\nHTTP admin API under load: median {statistics.median(times) * 1000:.1f} "
          f"ms, p95 {p95 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms, while the "
          f"broker delivered {rate:.0f} msg/s; slowest per route: "
          + ", ".join(f"{p} {t * 1000:.1f} ms" for p, t in worst.items()))
    assert rate > 200, "the benchmark was not flooding the queue"
    assert p95 < LOAD_BOUND, times
