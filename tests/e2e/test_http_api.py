"""The HTTP admin API (S11.2) of a real `twistd -n mqgate` broker, with a real HTTP
client (urllib, http.client): the routes whose commands exist on this version
(client-profiles, clients, reload), the routes answered as the admin service answers,
HTTP Basic logins (wrong password, a user outside the admin group), the audit trail,
the port mapper's table, TLS on httpsadmin, bounded bodies, and the answer time while
a benchmark floods a queue."""

import base64
import http.client
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from mqgate.security.users import User, format_entry, hash_password
from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.broker import REPO_ROOT, BrokerProcess, broker_environment
from tests.e2e.proton_client import connect
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


def test_reload_over_http(broker):
    """POST /api/reload/rules re-reads the access control file and says so."""
    status, _, data = call(broker, "POST", "/api/reload/rules")
    assert status == 200
    assert data[0]["name"] == "rules" and data[0]["ok"] is True
    assert call(broker, "GET", "/api/reload")[0] == 405


@pytest.mark.parametrize("path, words", [
    ("/api/broker", ["query", "bkr"]),
    ("/api/destinations?type=queue", ["list", "dst", "-t", "q"]),
    ("/api/connections", ["list", "cxn"]),
])
def test_routes_answer_as_the_admin_service_does(broker, passfile, path, words):
    """A route answers what `mqgate cmd` gets for the same words from the admin
    service: an error with the same message while this broker lacks the command,
    the same kind of data once it has it."""
    status, _, data = call(broker, "GET", path)
    result = mqgate_cmd(broker, passfile, "--json", "--", *words)
    if result.returncode == 0:
        assert status == 200
        assert type(data) is type(json.loads(result.stdout))
    else:
        assert status == 400
        assert data["error"].split(";")[0] in result.stderr


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


def test_requests_and_logins_are_audited(broker):
    """A command over HTTP is an admin record and a failed login an authentication
    record in the audit file, both naming the httpadmin service."""
    call(broker, "GET", "/api/client-profiles/default")
    call(broker, "GET", "/api/client-profiles/default", password="nope")
    path = broker.varhome / "instances" / "mqgate" / "log" / "audit.log"

    def records():
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def found():
        kinds = {(r.get("kind", r.get("event")), r.get("outcome"), r.get("command"))
                 for r in records() if r.get("service") == "httpadmin"}
        return (("admin", "ok", "show client-profile default") in kinds and
                ("authentication", "failed", None) in kinds)
    wait_until(found, TIMEOUT, f"the audit records in {path}")


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


# -- under load ---------------------------------------------------------------------------

#: The bound of S11.2's "answers within 100 ms while a benchmark runs".
LOAD_BOUND = 0.100


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
    process, started from a client thread) floods a queue, GET /api/broker and GET
    /api/clients answer in under 100 ms (the 95th percentile of 40 requests)."""
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
        for index in range(40):
            path = "/api/broker" if index % 2 else "/api/clients"
            seconds, status = timed_get(port, path)
            assert status in (200, 400)   # 400: no `query bkr` on this broker yet
            times.append(seconds)
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
          f"broker delivered {rate:.0f} msg/s")
    assert rate > 200, "the benchmark was not flooding the queue"
    assert p95 < LOAD_BOUND, times
