"""Hostile end-to-end tests: what a client that never logs in can cost the real broker
(S4.2, S10.4). Raw sockets against a twistd broker, with a probe client round-tripping a
message every 50 ms on a connection of its own."""

import socket
import threading
import time

import pytest

from tests.e2e.engine_client import EngineClient
from tests.hostile.probe import broker_rss, wait_until
from tests.hostile.sockets import read_until_closed as read_until_end

MB = 1024 * 1024
BODY = 32 * MB
CHUNK = 256 * 1024
# What the broker may grow by while 8 clients try to send 32 MB each before logging in:
# a constant (buffers, 8 connections), not the 256 MiB it grew by before.
RSS_ALLOWANCE = 24 * MB


def read_until_closed(sock, timeout):
    """Everything the broker writes until it closes the socket (or C{timeout} passes).

    @return: C{(data, closed)}; a reset counts as closed."""
    data, how = read_until_end(sock, timeout)
    return data, how != "timeout"


def error_message(data):
    """The message header of the first STOMP ERROR frame in C{data}, or None."""
    if not data.startswith(b"ERROR\n"):
        return None
    head = data.split(b"\n\n", 1)[0].decode("utf-8", "replace")
    for line in head.split("\n")[1:]:
        name, _, value = line.partition(":")
        if name == "message":
            return value
    return None


def send_before_login(address, head, results):
    """Send C{head} and then up to 32 MB more before any login; record what happened:
    the ERROR's message, whether the broker closed, and how much the kernel took."""
    sock = socket.create_connection(address, timeout=10)
    try:
        sock.sendall(head + b"x" * CHUNK)
        data = read_until_closed_or_error(sock)
        sent = len(head) + CHUNK
        filler = b"x" * CHUNK
        try:
            sock.settimeout(5)
            while sent < BODY:
                sock.sendall(filler)
                sent += CHUNK
        except OSError:
            pass
        results.append((error_message(data), sent))
    finally:
        sock.close()


def read_until_closed_or_error(sock, timeout=10):
    """Read until an ERROR frame is complete or the socket closes."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline and b"\x00" not in data:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionError:
            break
        if not chunk:
            break
        data += chunk
    return data


def run_all(target, count, *args):
    results, threads = [], []
    for _ in range(count):
        thread = threading.Thread(target=target, args=(*args, results), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(120)
    return results


@pytest.mark.parametrize("service, head, message", [
    ("stomp", b"SEND\ndestination:/queue/a\ncontent-length:33554432\n\n", "not connected"),
    ("stomp", b"CONNECT\naccept-version:1.2\nhost:h\ncontent-length:33554432\n\n",
     "too much data before CONNECTED"),
    ("jms", b"CONNECT\naccept-version:1.2\nhost:h\nx-huge:",
     "header line longer than 8192 bytes"),
])
def test_big_frames_before_login_are_cut_off(broker, probe, service, head, message):
    """8 sockets each trying to send a 32 MB frame before logging in are each answered
    with an ERROR after their first read and closed; the broker's memory grows by a
    small constant, not by the 256 MiB it used to, and the probe stays under 100 ms."""
    watcher = probe(broker)
    wait_until(lambda: len(watcher.samples) >= 5, 10, "the probe's first round trips")
    before = broker_rss(broker)
    results = run_all(send_before_login, 8, broker.address(service), head)
    grown = broker_rss(broker) - before
    watcher.assert_responsive(limit=0.1)
    assert [m for m, _ in results] == [message] * 8, results
    assert all(sent < BODY for _, sent in results), results
    assert grown < RSS_ALLOWANCE, f"the broker grew by {grown / MB:.1f} MiB"


def test_idle_sockets_are_closed_at_the_deadline_and_refused_past_the_limit(broker_factory):
    """With a 2 s login deadline and 8 slots per service: 8 idle STOMP sockets are each
    closed with an ERROR at about 2 s; a 9th is refused at once with an ERROR; the admin
    service still takes a login meanwhile; once the idle ones are gone, the slots are
    free again."""
    broker = broker_factory({"mqgate.authentication.client.response.timeout": "2",
                             "mqgate.authentication.max_unauthenticated": "8"})
    address = broker.address("stomp")
    idle = [socket.create_connection(address, timeout=5) for _ in range(8)]
    opened = time.monotonic()
    # No wait needed: the kernel queues connections in order and the broker accepts
    # them in that order, so the sockets above hold their slots before the next one.
    extra = socket.create_connection(address, timeout=5)
    data, closed = read_until_closed(extra, 1.5)
    assert closed and error_message(data) == "resource limit exceeded", data
    assert b"not logged in yet" in data

    admin = EngineClient(broker.address("admin"), "admin-check",
                         credentials=("admin", "admin"), timeout=5)
    admin.wait_for(lambda _: admin.engine.ready, "the admin service's open")
    admin.close()

    for sock in idle:
        data, closed = read_until_closed(sock, 6)
        took = time.monotonic() - opened
        assert closed and error_message(data) == "timeout", data
        assert 1.5 < took < 5.0, took
        sock.close()
    late = socket.create_connection(address, timeout=5)
    late.sendall(b"CONNECT\naccept-version:1.2\nhost:h\nlogin:admin\npasscode:admin\n\n\x00")
    data = read_until_closed_or_error(late, 10)
    assert data.startswith(b"CONNECTED"), data
    late.close()


def test_idle_sockets_on_the_sniffing_port_are_bounded_too(broker_factory):
    """On the port shared by AMQP and STOMP, sockets that send nothing take the same
    slots: past the limit a new one is closed at once, and the idle ones are closed
    within the deadline."""
    broker = broker_factory({"mqgate.authentication.client.response.timeout": "2",
                             "mqgate.authentication.max_unauthenticated": "4"})
    address = broker.address("jms")
    idle = [socket.create_connection(address, timeout=5) for _ in range(4)]
    opened = time.monotonic()
    # No wait needed: the kernel queues connections in order and the broker accepts
    # them in that order, so the sockets above hold their slots before the next one.
    extra = socket.create_connection(address, timeout=5)
    _, closed = read_until_closed(extra, 1.0)
    assert closed and time.monotonic() - opened < 1.5
    for sock in idle:
        _, closed = read_until_closed(sock, 6)
        assert closed and time.monotonic() - opened < 5.0
        sock.close()


def test_an_amqp_socket_stalled_in_sasl_is_closed_at_the_deadline(broker_factory):
    """An AMQP client that sends its SASL header and then nothing is closed at the login
    deadline (2 s here), not after OpenMQ's 180 s."""
    broker = broker_factory({"mqgate.authentication.client.response.timeout": "2"})
    sock = socket.create_connection(broker.address("jms"), timeout=5)
    opened = time.monotonic()
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    data, closed = read_until_closed(sock, 6)
    took = time.monotonic() - opened
    assert data.startswith(b"AMQP\x03\x01\x00\x00")   # the broker's SASL header
    assert closed and 1.5 < took < 4.0, took
    sock.close()


def test_sockets_the_pool_refuses_are_closed_at_once(broker_factory):
    """With the stomp service's pool full (two connections), a third STOMP socket is
    told why in an ERROR frame and closed at once, before it sends anything, instead of
    being held until a deadline."""
    broker = broker_factory({"mqgate.stomp.max_threads": "4",
                             "mqgate.stomp.min_threads": "4"})
    address = broker.address("stomp")
    held = [socket.create_connection(address, timeout=5) for _ in range(2)]
    # No wait needed: the kernel queues connections in order and the broker accepts
    # them in that order, so the sockets above hold their slots before the next one.
    start = time.monotonic()
    refused = socket.create_connection(address, timeout=5)
    data, closed = read_until_closed(refused, 3)
    assert closed and time.monotonic() - start < 1.0
    assert error_message(data) == "resource limit exceeded"
    assert b"mqgate.stomp.max_threads=4" in data
    for sock in held + [refused]:
        sock.close()
