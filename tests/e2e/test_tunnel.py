"""The HTTP tunnel end to end (S10.3): the real broker's httpjms and httpsjms services,
a real HTTP proxy (tinyproxy, tests/e2e/proxy.py) and an AMQP client on mqgate's own
engine over L{TunnelClientEndpoint} (tests/tunnel/driver.py, in a subprocess)."""

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from mqgate.tunnel import packets as p
from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proxy import start_for_test
from tests.e2e.test_tls import instance_etc, keytool

#: Seconds without a pull after which the broker closes a tunnel connection: short,
#: so that the abandoned-connection test is quick, and still well above a proxy
#: restart (the client retries within a second).
CONNECTION_TIMEOUT = 4

DEFINES = {
    "mqgate.service.activelist": "jms,admin,httpjms,httpsjms",
    "mqgate.httpjms.http.port": "0",
    "mqgate.httpsjms.https.port": "0",
    "mqgate.httpjms.http.connectionTimeout": str(CONNECTION_TIMEOUT),
    "mqgate.httpsjms.https.connectionTimeout": str(CONNECTION_TIMEOUT),
}


@pytest.fixture(scope="module")
def keystore(tmp_path_factory):
    """A VARHOME with the broker's key pair (the keytool's, for localhost)."""
    varhome = tmp_path_factory.mktemp("tunnel-broker")
    result = keytool(varhome, "--nopassword")
    assert result.returncode == 0, result.stderr
    return varhome


@pytest.fixture(scope="module")
def broker(keystore, module_broker_factory):
    """One broker with httpjms and httpsjms for the module."""
    return module_broker_factory(DEFINES, varhome=keystore,
                                 listening=("httpjms", "httpsjms", "jms"))


@pytest.fixture(scope="module")
def cert_path(keystore):
    return instance_etc(keystore) / "keystore" / "cert.pem"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """A throw-away tinyproxy for the module."""
    server = start_for_test(tmp_path_factory.mktemp("tinyproxy"))
    yield server
    server.stop()


def http_url(broker, path="/tunnel"):
    return f"http://127.0.0.1:{broker.port('httpjms')}{path}"


def https_url(broker, path="/tunnel"):
    return f"https://localhost:{broker.port('httpsjms')}{path}"


class Driver:
    """tests/tunnel/driver.py in a subprocess; its JSON lines read as they come."""

    def __init__(self, *args, module="tests.tunnel.driver"):
        env = broker_environment()
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(name, None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=str(REPO_ROOT),
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.events = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"event": "noise", "line": line})
        self.events.put({"event": "exit"})

    def wait_for(self, predicate, timeout=60.0):
        """The first event satisfying C{predicate}; fail on an error, exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"driver: nothing matching within {timeout} s; seen "
                            f"{self.seen[-5:]}")
            self.seen.append(event)
            if predicate(event):
                return event
            if event["event"] in ("error", "exit"):
                pytest.fail(f"driver stopped: {event}; stderr: {self.stderr()}")

    def stderr(self):
        if self.process.poll() is None:
            return "(running)"
        return self.process.stderr.read()[-3000:]

    def done(self, timeout=60.0):
        return self.wait_for(lambda e: e["event"] == "done", timeout)

    def kill(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture
def drivers():
    """Start drivers (C{start(*args)}); each is killed at the end of the test."""
    started = []

    def start(*args, **kwargs):
        started.append(Driver(*args, **kwargs))
        return started[-1]

    yield start
    for driver in started:
        driver.kill()


def assert_exactly_once(result, count):
    assert result["sent"] == result["settled"] == count, result
    assert result["distinct"] == result["received"] == count, result
    assert result["missing"] == [] and result["duplicates"] == [], result


def test_messages_cross_the_tunnel_each_way_through_the_proxy(broker, proxy, drivers):
    """A client given only the proxy and the tunnel URL sends 2,000 at-least-once
    messages and receives them back, each once, and the proxy carried the requests."""
    before = proxy.requests_seen()
    driver = drivers("--url", http_url(broker), "--proxy", proxy.url,
                     "--address", "tunnel.each-way", "--send", "2000", "--receive", "2000")
    assert_exactly_once(driver.done(), 2000)
    assert proxy.requests_seen() > before + 3


def test_a_proxy_restart_mid_stream_loses_and_duplicates_nothing(broker, proxy, drivers):
    """4,000 messages each way on one tunnel connection (pipelined, 300 in flight)
    while the proxy is killed and restarted part-way: every message is settled once and
    received once."""
    driver = drivers("--url", http_url(broker), "--proxy", proxy.url,
                     "--address", "tunnel.restart", "--send", "4000",
                     "--receive", "4000", "--progress", "500", "--credit", "300")
    progress = driver.wait_for(lambda e: e["event"] == "progress"
                               and e["settled"] + e["received"] >= 2000)
    proxy.restart()
    result = driver.done(timeout=120)
    assert progress["received"] < 4000   # the restart fell in the middle
    assert_exactly_once(result, 4000)


def test_the_client_library_moves_10000_messages_through_a_restarting_proxy(
        broker, proxy, drivers):
    """mqgate.client, given only the tunnel URL and the proxy, sends 10,000 at-least-once
    messages and receives them back while the proxy is restarted part-way: each is
    received exactly once."""
    client = drivers(http_url(broker), proxy.url, "tunnel.library", "10000", "1000",
                     module="tests.tunnel.library_client")
    progress = client.wait_for(lambda e: e["event"] == "progress"
                               and e["received"] >= 3000)
    proxy.restart()
    result = client.done(timeout=120)
    assert progress["received"] < 10000
    assert_exactly_once(result, 10000)


def test_an_abandoned_connection_has_its_deliveries_requeued(broker, proxy, drivers):
    """A client that vanishes holding 5 unsettled deliveries (killed: no close) loses
    its tunnel connection after the connection timeout, and another client then
    receives the same 5 messages."""
    address = "tunnel.abandoned"
    filler = drivers("--url", http_url(broker), "--proxy", "", "--address", address,
                     "--send", "5")
    assert filler.done()["settled"] == 5
    taker = drivers("--url", http_url(broker), "--proxy", proxy.url, "--address",
                    address, "--abandon", "5")
    taker.wait_for(lambda e: e["event"] == "abandoned")
    taker.kill()
    broker.wait_for_line(r"tunnel connection \d+ of .* closed: no pull for",
                         timeout=CONNECTION_TIMEOUT * 3)
    again = drivers("--url", http_url(broker), "--proxy", "", "--address", address,
                    "--receive", "5")
    result = again.done()
    assert result["distinct"] == 5 and result["missing"] == []


def test_the_https_tunnel_through_the_proxy(broker, proxy, cert_path, drivers):
    """Over httpsjms through the proxy's CONNECT, verifying the broker's certificate
    and host name, 500 messages go each way exactly once."""
    driver = drivers("--url", https_url(broker), "--proxy", proxy.url, "--ca",
                     str(cert_path), "--address", "tunnel.https", "--send", "500",
                     "--receive", "500")
    assert_exactly_once(driver.done(), 500)
    connects = f"CONNECT localhost:{broker.port('httpsjms')} "
    assert connects in proxy.log.read_text(errors="replace")


def test_the_https_tunnel_refuses_an_untrusted_certificate(broker, drivers):
    """Without the broker's certificate among its trusted roots the client refuses to
    connect, saying why."""
    driver = drivers("--url", https_url(broker), "--proxy", "", "--timeout", "20")
    error = driver.wait_for(lambda e: e["event"] == "error", timeout=30)
    assert "certificate" in error["message"].lower(), error


def test_the_source_systems_path_serves_the_tunnel(broker, drivers):
    """/imqhttp/tunnel is the same tunnel: a client using it moves messages."""
    driver = drivers("--url", http_url(broker, "/imqhttp/tunnel"), "--proxy", "",
                     "--address", "tunnel.imqhttp", "--send", "50", "--receive", "50")
    assert_exactly_once(driver.done(), 50)


def request(url, body=None, method="POST"):
    """C{(status, content-type, body)} of one plain HTTP request, no proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with opener.open(req, timeout=10) as answer:
            return answer.status, answer.headers["content-type"], answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read()


def test_bad_requests_get_clear_http_errors(broker):
    """An unknown type, an unknown connection, malformed packets and a body over the
    limit are answered 400, 404, 400 and 413 with a JSON message; no Type is a status
    line."""
    url = http_url(broker)
    status, kind, body = request(url, method="GET")
    assert status == 200 and b"tunnel ready" in body
    status, kind, body = request(url + "?Type=dance", b"")
    assert status == 400 and "dance" in json.loads(body)["error"]
    status, kind, body = request(url + "?Type=pull&ConnId=12345",
                                 p.encode(p.Packet(p.ACK, 12345)))
    assert status == 404 and "no tunnel connection 12345" in json.loads(body)["error"]
    status, kind, body = request(url + "?Type=push&ConnId=1", b"\x00\x64garbage")
    assert status == 400 and "malformed" in json.loads(body)["error"]
    status, kind, body = request(url + "?Type=push&ConnId=1", b"\0" * (70 * 1024))
    assert status == 413


def test_connect_answers_with_an_id_and_the_options(broker):
    """A connect is answered with CONN_INIT_ACK carrying a fresh id and the pull period
    and connection timeout as CONN_OPTION packets."""
    status, kind, body = request(http_url(broker) + "?Type=connect",
                                 p.encode(p.Packet(p.CONN_INIT)))
    assert status == 200 and kind == "application/octet-stream"
    init, *options = p.parse_all(body)
    assert init.type == p.CONN_INIT_ACK and init.conn_id > 0
    assert dict(p.parse_option(o) for o in options) == {
        p.OPTION_PULL_PERIOD: 30, p.OPTION_CONNECTION_TIMEOUT: CONNECTION_TIMEOUT}


def test_the_readme_stomp_example_runs(broker, tmp_path):
    """The README's tunnel example (STOMP through TunnelClientEndpoint) prints the
    message it sent, against this broker's httpjms port."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## From behind a firewall or proxy", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "tunnel_hello.py"
    script.write_text(code.replace("127.0.0.1:7675", f"127.0.0.1:{broker.port('httpjms')}"),
                      encoding="utf-8")
    env = broker_environment()
    env.pop("http_proxy", None)
    done = subprocess.run([sys.executable, str(script)], cwd=str(REPO_ROOT), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Hello through the tunnel"
