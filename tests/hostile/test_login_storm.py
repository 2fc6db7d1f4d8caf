"""Hostile end-to-end test: a connection storm (S4.2, S1.6). After a broker restart
every client reconnects at once; with the slow password hash and the login bounds, each
of them must still get in, quickly, while the clients already there keep working.

The storm comes from a child process (this module run as a script: asyncio, one
non-blocking socket per client), so that its ten thousand sockets share no GIL with the
probe measuring the broker's answers. The test raises its file-descriptor limit, and so
the broker's (a child inherits it), as a service manager would (systemd's LimitNOFILE).
"""

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqgate.amqp.connection import Connection
from mqgate.amqp.events import ConnectionClosed, SaslCompleted
from tests.hostile.probe import broker_rss

# The storm is measured against the production hash: the login bounds and the
# authentication cache are what keep ten thousand of them within the limits below.
pytestmark = pytest.mark.production_hashes

REPO_ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024

CLIENTS = 10_000
#: Every this many clients, one speaks AMQP (SASL PLAIN and open) to the jms service
#: instead of STOMP to the stomp service: a thousand of the ten thousand.
AMQP_EVERY = 10
#: Clients the storm starts per turn of its event loop (all of them within a second).
START_CHUNK = 100
#: What the issue asks: every client logged in within 30 s of the storm's start.
STORM_LIMIT = 30.0
#: Descriptors each process needs beyond one per client (the broker's files, the probe).
SPARE_FDS = 512
#: The probe's worst round trip while the storm lasts. Reactor turns stay short (a
#: service accepts 32 sockets a turn), so the probe waits behind one turn at a time,
#: never behind the storm; what sets its worst round trip is the interpreter's full
#: garbage collections, which walk the objects of thousands of connections (80-123 ms
#: on an idle 2-core machine with the broker's collector settings, 240-300 ms with
#: Python's defaults; a busy machine takes several times as long, see docs/limits.md).
PROBE_LIMIT = 1.0
#: What one logged-in STOMP connection may cost the broker (engine, glue, egress
#: scheduler, client registration, the socket's buffers in user space).
RSS_PER_CONNECTION = 64 * 1024


def connect_frame(user, password):
    return (f"CONNECT\naccept-version:1.2\nhost:mqgate\nlogin:{user}\npasscode:{password}\n"
            "heart-beat:0,0\n\n\x00").encode()


# -- the storm client (runs in a child process) -------------------------------------------

async def _one_client(host, port, frame, started, results, sockets, timeout):
    """Connect, send CONNECT, read the first frame; record (what, seconds, detail).

    Plain non-blocking sockets on the loop (no streams, no name lookup in a thread):
    ten thousand clients in one process must not be slower to speak than ten thousand
    processes would be."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sockets.append(sock)
    data = b""
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout)
        await loop.sock_sendall(sock, frame)
        while b"\x00" not in data:
            remaining = max(0.1, timeout - (time.monotonic() - started))
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), remaining)
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
    except asyncio.TimeoutError:
        results.append(("no-answer", time.monotonic() - started, repr(data[:100])))
        return
    except OSError as e:
        results.append(("closed", time.monotonic() - started, repr(e)[:200]))
        return
    command, _, rest = data.partition(b"\n")
    detail = ""
    if command != b"CONNECTED":
        detail = rest.replace(b"\n", b" ").decode("utf-8", "replace")[:300]
    results.append((command.decode("utf-8", "replace"), time.monotonic() - started,
                    detail))


async def _one_amqp_client(host, port, number, user, password, started, results,
                           sockets, timeout):
    """The same with AMQP (mqgate's own client engine): SASL PLAIN, then the open
    exchange; CONNECTED stands for the broker's open."""
    loop = asyncio.get_running_loop()
    engine = Connection(server=False, container_id=f"storm-{number}",
                        credentials=(user, password), idle_timeout=None)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sockets.append(sock)
    outcome, detail = None, ""
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout)
        while outcome is None:
            out = engine.data_to_send()
            if out:
                await loop.sock_sendall(sock, out)
            remaining = max(0.1, timeout - (time.monotonic() - started))
            data = await asyncio.wait_for(loop.sock_recv(sock, 65536), remaining)
            if not data:
                raise ConnectionError("closed by the broker")
            for event in engine.receive_data(data):
                if isinstance(event, SaslCompleted) and not event.ok:
                    outcome, detail = "SASL-FAILED", repr(event)[:300]
                elif isinstance(event, ConnectionClosed):
                    outcome, detail = "CLOSE", repr(event.error)[:300]
            if outcome is None and engine.ready:
                outcome = "CONNECTED"
    except asyncio.TimeoutError:
        outcome = "no-answer"
    except OSError as e:
        outcome, detail = "closed", repr(e)[:200]
    results.append((f"AMQP {outcome}", time.monotonic() - started, detail))


async def _storm(host, port, count, user, password, timeout, amqp_port, amqp_every):
    frame = connect_frame(user, password)
    results, sockets, clients = [], [], []
    started = time.monotonic()
    for i in range(count):
        if amqp_every and i % amqp_every == amqp_every - 1:
            client = _one_amqp_client(host, amqp_port, i, user, password, started,
                                      results, sockets, timeout)
        else:
            client = _one_client(host, port, frame, started, results, sockets, timeout)
        clients.append(asyncio.ensure_future(client))
        if i % START_CHUNK == START_CHUNK - 1:
            # Let the clients already connected speak before starting more: in one
            # process, starting ten thousand at one go would hold back the CONNECT of
            # the first ones for a second, which ten thousand processes would not.
            await asyncio.sleep(0)
    await asyncio.gather(*clients)
    summary_opened = time.monotonic() - started
    summary = {"count": count, "outcomes": {}, "last_connected": 0.0, "examples": {},
               "first": {}, "all_answered": round(summary_opened, 3)}
    for what, seconds, detail in results:
        summary["outcomes"][what] = summary["outcomes"].get(what, 0) + 1
        summary["first"][what] = round(min(summary["first"].get(what, 1e9), seconds), 3)
        if what.endswith("CONNECTED"):
            summary["last_connected"] = max(summary["last_connected"], seconds)
        else:
            summary["examples"].setdefault(what, detail)
    print(json.dumps(summary), flush=True)
    # Hold every connection until told to let go, so the broker can be measured full.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for sock in sockets:
        sock.close()


def main():
    parser = argparse.ArgumentParser(description="open COUNT STOMP logins at once")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=CLIENTS)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="admin")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--amqp-port", type=int, default=0)
    parser.add_argument("--amqp-every", type=int, default=0,
                        help="every Nth client speaks AMQP to --amqp-port (0: none)")
    args = parser.parse_args()
    asyncio.run(_storm(args.host, args.port, args.count, args.user, args.password,
                       args.timeout, args.amqp_port, args.amqp_every))


# -- the test --------------------------------------------------------------------------

@pytest.fixture
def descriptors():
    """Raise this process's descriptor limit (inherited by the broker and the storm
    client it starts) for the test; skip when the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = CLIENTS + SPARE_FDS
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard limit of open files is {hard}, below the {needed} this "
                    f"storm needs (raise it: ulimit -Hn, or LimitNOFILE under systemd)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY
                                                else hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_ten_thousand_clients_log_in_at_once(descriptors, broker_factory, probe):
    """10,000 clients connecting at once (9,000 STOMP to the stomp service, 1,000 AMQP
    to the jms service, both in the shared thread-pool model) all log in within 30 s,
    while a probe on the stomp service keeps round-tripping, and each connection costs
    the broker a bounded amount of memory."""
    # One user name for all (one password check, the rest from the cache or waiting on
    # it); the default client profile allows a user 6,000 connections, raised here as
    # an operator expecting this many clients of one user would.
    broker = broker_factory({"mqgate.stomp.threadpool_model": "shared",
                             "mqgate.jms.threadpool_model": "shared",
                             "mqgate.client_profile.default.max_connections_per_user":
                             str(2 * CLIENTS)})
    host, port = broker.address("stomp")
    _, amqp_port = broker.address("jms")
    watcher = probe(broker, interval=0.05)
    rss_before = broker_rss(broker)
    storm = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile.test_login_storm", "--host", host,
         "--port", str(port), "--count", str(CLIENTS), "--timeout", "60",
         "--amqp-port", str(amqp_port), "--amqp-every", str(AMQP_EVERY)],
        cwd=str(REPO_ROOT), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = storm.stdout.readline()
        assert line, f"the storm client died (exit code {storm.poll()})"
        summary = json.loads(line)
        rss_full = broker_rss(broker)
        watcher.stop()
        storm.stdin.write("done\n")
        storm.stdin.flush()
        storm.wait(timeout=30)
    finally:
        if storm.poll() is None:
            storm.kill()
            storm.wait()
    per_connection = (rss_full - rss_before) / CLIENTS
    slowest = ", ".join(f"{s.at:.1f}: {s.seconds * 1000:.0f}" for s in sorted(
        watcher.samples, key=lambda s: -s.seconds)[:5])
    figures = (f"{summary['outcomes']}, the last CONNECTED after "
               f"{summary['last_connected']:.1f} s; probe worst round trip "
               f"{watcher.worst * 1000:.0f} ms over {len(watcher.samples)} round trips; "
               f"broker RSS {rss_before / MB:.0f} -> {rss_full / MB:.0f} MiB, "
               f"{per_connection / 1024:.1f} KiB per connection; "
               f"slowest round trips (sent at s: ms) {slowest}; "
               f"examples of other outcomes: {summary['examples']}; first of each "
               f"outcome after (s): {summary['first']}")
    print(figures)
    amqp = CLIENTS // AMQP_EVERY
    assert summary["outcomes"] == {"CONNECTED": CLIENTS - amqp, "AMQP CONNECTED": amqp}, (
        figures)
    assert summary["last_connected"] < STORM_LIMIT, figures
    # It kept working: at least one round trip a second, none slower than the limit.
    watcher.assert_responsive(limit=PROBE_LIMIT,
                              min_samples=max(5, int(summary["last_connected"])))
    assert per_connection < RSS_PER_CONNECTION, figures


if __name__ == "__main__":
    main()
