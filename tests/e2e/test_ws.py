"""WebSocket on the httpjms and httpsjms services (S10.3), end to end against the real
broker: STOMP with stomp.py's WebSocket connection and by hand, AMQP with mqgate's own
engine over the WebSocket client endpoint, messages crossing to TCP clients of both
protocols, wss with the broker's key pair, and the refusals: an Origin not allowed
(403), a subprotocol not served (400), a message too large (close 1009), a peer that
answers no ping (dropped)."""

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest
import stomp
import websocket
from proton import Message

from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import opened, receive_all
from tests.e2e.stomp_client import FrameCollector, open_client, unique
from tests.e2e.test_portmapper import read_port_mapper
from tests.e2e.test_tls import keytool
from tests.hostile.probe import wait_until

PEER = REPO_ROOT / "tests" / "ws" / "engine_peer.py"
MAX_MESSAGE = 64 * 1024
PING = 1
ALLOWED = "http://app.example:3000"

SERVICES = {
    "mqgate.service.activelist": "jms,admin,stomp,httpjms,httpsjms",
    "mqgate.httpjms.ws.max_message_size": str(MAX_MESSAGE),
    "mqgate.httpjms.ws.ping_interval": str(PING),
    # The HTTP idle timeout must not cut an open WebSocket (pings watch it instead):
    # the ping test's live client outlives it several times over.
    "mqgate.httpjms.idle_timeout": "1",
    "mqgate.httpsjms.ws.allowed_origins": ALLOWED,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, module_broker_factory):
    """One broker with both gateway services, httpsjms on a key pair of the keytool."""
    varhome = tmp_path_factory.mktemp("ws-broker")
    made = keytool(varhome, "--nopassword")
    assert made.returncode == 0, made.stderr
    process = module_broker_factory(SERVICES, varhome=varhome,
                                    listening=("jms", "stomp", "httpjms", "httpsjms"))
    process.cert = varhome / "instances" / "mqgate" / "etc" / "keystore" / "cert.pem"
    return process


def ws_url(broker, service="httpjms", scheme="ws", host="127.0.0.1"):
    return f"{scheme}://{host}:{broker.port(service)}/ws"


def peer(role, url, *args, timeout=30):
    """Start tests/ws/engine_peer.py in C{role}; a consumer is returned once attached."""
    process = subprocess.Popen(
        [sys.executable, str(PEER), role, url, "--timeout", str(timeout), *args],
        cwd=str(REPO_ROOT), env=broker_environment(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    if role == "consume":
        line = process.stdout.readline()
        if line.strip() != "ready":
            process.kill()
            raise AssertionError(f"consumer not attached: {line}{process.stderr.read()}")
    return process


def result(process, timeout=60):
    out, err = process.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no result: {out}{err}"
    return json.loads(lines[-1])


def handshake(port, *, origin=None, protocols=None, host=None):
    """Send a WebSocket upgrade by hand; return C{(status, headers, socket)}."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET /ws HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}",
             "Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
             "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    if protocols is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocols}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in head and time.monotonic() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    status_line, *header_lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
    return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, sock


def test_stomp_py_over_websocket_crosses_to_tcp_stomp_and_amqp(broker):
    """stomp.py's WebSocket connection sends and receives over ws; its message reaches
    a TCP stomp.py client and a Proton client, and theirs reach it."""
    queue, back = unique("/queue/ws"), unique("/queue/ws-back")
    collector = FrameCollector("ws")
    connection = stomp.WSStompConnection([("127.0.0.1", broker.port("httpjms"))],
                                         ws_path="/ws", auto_decode=False,
                                         reconnect_attempts_max=1, timeout=10)
    connection.set_listener("collector", collector)
    connection.connect("admin", "admin", wait=True)
    try:
        with_receipt = unique("sub")
        connection.subscribe(back, id=1, headers={"receipt": with_receipt})
        collector.wait_for_receipt(with_receipt)
        tcp = open_client(("127.0.0.1", broker.port("stomp")))
        try:
            tcp.subscribe(queue)
            connection.send(queue, "from the browser side")
            tcp.collector.wait_for_messages(1)
            assert tcp.collector.bodies() == [b"from the browser side"]
            tcp.send(back, "from tcp")
            collector.wait_for_messages(1)
            assert collector.bodies() == [b"from tcp"]
        finally:
            tcp.disconnect()
        amqp_queue = unique("ws-amqp")
        connection.send(f"/queue/{amqp_queue}", "to proton")
        with opened(broker) as conn:
            receiver = conn.create_receiver(amqp_queue)
            assert receive_all(receiver, 1)[0].body in (b"to proton", "to proton")
            conn.create_sender(back.split("/")[-1]).send(Message(body="from proton"))
        collector.wait_for_messages(2)
        assert collector.bodies()[1] in (b"from proton", b"\xa1\x0bfrom proton")
    finally:
        connection.disconnect()


def test_stomp_subprotocol_one_frame_per_message_binary_when_not_utf8(broker):
    """With v12.stomp offered the broker answers v12.stomp; several frames in one
    message are all acted on, and every frame out is a message of its own: text, or
    binary when its body is not UTF-8."""
    ws = websocket.create_connection(
        ws_url(broker), subprotocols=["v10.stomp", "v11.stomp", "v12.stomp"], timeout=10)
    try:
        assert ws.getsubprotocol() == "v12.stomp"
        queue = unique("/queue/ws-frames")
        ws.send("CONNECT\naccept-version:1.2\nhost:mqgate\nlogin:admin\npasscode:admin"
                "\n\n\x00")
        opcode, data = ws.recv_data()
        assert data.startswith(b"CONNECTED\n")
        frames = (f"SUBSCRIBE\nid:1\ndestination:{queue}\n\n\x00".encode()
                  + f"SEND\ndestination:{queue}\n\nfirst\x00".encode()
                  + f"SEND\ndestination:{queue}\ncontent-length:2\n\n".encode()
                  + b"\xff\x00\x00"
                  + f"SEND\ndestination:{queue}\nreceipt:r1\n\nthird\x00".encode())
        ws.send_binary(frames)
        received = []
        deadline = time.monotonic() + 10
        while len(received) < 4 and time.monotonic() < deadline:
            opcode, data = ws.recv_data()
            if data.strip(b"\r\n"):
                received.append((opcode, data))
        commands = sorted(data.split(b"\n", 1)[0] for _op, data in received)
        assert commands == [b"MESSAGE", b"MESSAGE", b"MESSAGE", b"RECEIPT"]
        bodies = {data.split(b"\n\n", 1)[1]: opcode for opcode, data in received
                  if data.startswith(b"MESSAGE")}
        assert bodies == {b"first\x00": websocket.ABNF.OPCODE_TEXT,
                          b"\xff\x00\x00": websocket.ABNF.OPCODE_BINARY,
                          b"third\x00": websocket.ABNF.OPCODE_TEXT}
    finally:
        ws.close()


def test_amqp_over_websocket_with_mqgates_engine(broker):
    """mqgate's AMQP engine over the WebSocket client endpoint (subprotocol amqp)
    produces and consumes at-least-once, and a Proton TCP client's message reaches
    it."""
    address = unique("ws-amqp")
    consumer = peer("consume", ws_url(broker), "--address", address, "--messages",
                    "501", "--unsettled", "--show", "1")
    with opened(broker) as conn:
        conn.create_sender(address).send(Message(body=b"from proton over tcp"))
    producer = peer("produce", ws_url(broker), "--address", address, "--messages",
                    "500", "--unsettled")
    sent = result(producer)
    got = result(consumer)
    assert "error" not in sent and sent["settled"] == 500, sent
    assert "error" not in got and got["received"] == 501, got
    assert got["bodies"] == ["from proton over tcp"]


def test_wss_on_httpsjms_verifies_the_broker(broker):
    """wss on httpsjms, the client verifying the broker's certificate from the key
    store: AMQP over it moves messages."""
    address = unique("wss")
    url = ws_url(broker, "httpsjms", "wss", host="localhost")
    tls = ["--cafile", str(broker.cert), "--tls-name", "localhost"]
    consumer = peer("consume", url, "--address", address, "--messages", "50", *tls)
    producer = peer("produce", url, "--address", address, "--messages", "50", *tls)
    assert result(producer).get("sent") == 50
    assert result(consumer).get("received") == 50


def test_wss_refused_without_a_trusted_certificate(broker):
    """A wss client that does not trust the broker's certificate does not connect
    (certificate verified by default)."""
    url = ws_url(broker, "httpsjms", "wss", host="localhost")
    got = result(peer("produce", url, "--messages", "1", timeout=10))
    assert "connect failed" in got.get("error", ""), got


def wss_status(broker, origin):
    """The status of a wss handshake on httpsjms with C{origin} (None: no Origin)."""
    context = ssl.create_default_context(cafile=str(broker.cert))
    ws = None
    try:
        ws = websocket.create_connection(
            ws_url(broker, "httpsjms", "wss", host="localhost"), subprotocols=["amqp"],
            origin=origin, suppress_origin=origin is None,
            sslopt={"context": context}, timeout=10)
        return 101
    except websocket.WebSocketBadStatusException as e:
        return e.status_code
    finally:
        if ws is not None:
            ws.close()


@pytest.mark.parametrize("origin, status", [
    (None, 101),                          # not a browser
    (ALLOWED, 101),                       # on the service's allow-list
    ("http://evil.example", 403),
    ("https://localhost:{port}", 403),    # the list replaces same-origin
])
def test_origin_allow_list(broker, origin, status):
    """An Origin not on httpsjms's allow-list is refused with 403; a listed one, or
    none, opens the WebSocket."""
    if origin is not None:
        origin = origin.format(port=broker.port("httpsjms"))
    assert wss_status(broker, origin) == status


def test_same_origin_only_by_default(broker):
    """With no allow-list (httpjms) a page of another origin is refused with 403, the
    broker's own origin (the Host header's host and port) is let in."""
    port = broker.port("httpjms")
    for origin, host, status in ((f"http://127.0.0.1:{port}", None, 101),
                                 (f"http://localhost:{port}", f"localhost:{port}", 101),
                                 (f"http://localhost:{port}", f"127.0.0.1:{port}", 403),
                                 ("http://elsewhere.example", None, 403)):
        code, _headers, sock = handshake(port, origin=origin, protocols="amqp", host=host)
        sock.close()
        assert code == status, (origin, host)


def test_unserved_subprotocol_refused_with_400(broker):
    """An offer of subprotocols none of which is served is refused with 400; rhea's
    usual offer is answered amqp."""
    code, _headers, sock = handshake(broker.port("httpjms"), protocols="mqtt")
    sock.close()
    assert code == 400
    code, headers, sock = handshake(broker.port("httpjms"),
                                    protocols="binary, AMQPWSB10, amqp")
    sock.close()
    assert code == 101 and headers["sec-websocket-protocol"] == "amqp"


def test_oversize_message_closes_with_1009(broker):
    """A message larger than mqgate.httpjms.ws.max_message_size closes the WebSocket
    with status 1009 (message too big)."""
    ws = websocket.create_connection(ws_url(broker), subprotocols=["amqp"], timeout=10)
    try:
        ws.send_binary(b"\x00" * (MAX_MESSAGE + 1))
        frame = ws.recv_frame()
        while frame.opcode != websocket.ABNF.OPCODE_CLOSE:
            frame = ws.recv_frame()
        assert int.from_bytes(frame.data[:2], "big") == 1009
    finally:
        ws.close()


def test_peer_that_answers_no_ping_is_dropped(broker):
    """A client that completes the handshake and then answers no ping is dropped
    within two ping intervals (dead-peer detection); one that answers stays, past the
    service's HTTP idle timeout too."""
    code, _headers, silent = handshake(broker.port("httpjms"), protocols="amqp")
    assert code == 101
    live = websocket.create_connection(ws_url(broker), subprotocols=["amqp"], timeout=10)
    silent.settimeout(0.05)
    live.settimeout(0.05)

    def answer_pings():
        try:
            live.recv_data(control_frame=True)   # answers a ping with its pong
        except websocket.WebSocketTimeoutException:
            pass

    def silent_closed():
        answer_pings()
        try:
            return silent.recv(65536) == b""   # pings arrive unanswered; EOF: dropped
        except TimeoutError:
            return False
        except OSError:
            return True

    try:
        start = time.monotonic()
        wait_until(silent_closed, 4 * PING + 5, "the silent peer dropped")
        dropped_after = time.monotonic() - start
        deadline = time.monotonic() + 3 * PING
        while time.monotonic() < deadline:
            answer_pings()
        assert live.connected
        assert dropped_after <= 2 * PING + 1.5
    finally:
        silent.close()
        live.close()


def test_client_endpoint_reports_a_refused_handshake(broker):
    """The WebSocket client endpoint fails its connect with the broker's status when
    the handshake is refused (an Origin not allowed: 403), instead of hanging."""
    url = ws_url(broker, "httpsjms", "wss", host="localhost")
    got = result(peer("produce", url, "--messages", "1", "--cafile", str(broker.cert),
                      "--tls-name", "localhost", "--origin", "http://evil.example",
                      timeout=10))
    assert "connect failed" in got.get("error", "") and "403" in got["error"], got


def test_port_mapper_lists_the_gateway_services(broker):
    """The port mapper publishes httpjms over http and httpsjms over https, each with
    the port it listens on (S1.1, S1.3)."""
    table = read_port_mapper(broker.address("portmapper")).decode()
    assert f"httpjms http NORMAL {broker.port('httpjms')}" in table
    assert f"httpsjms https NORMAL {broker.port('httpsjms')}" in table
