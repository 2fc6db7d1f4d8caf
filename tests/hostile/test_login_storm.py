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

from tests.hostile.probe import broker_rss

REPO_ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024

CLIENTS = 10_000
#: Clients the storm starts per turn of its event loop (all of them within a second).
START_CHUNK = 100
#: What the issue asks: every client logged in within 30 s of the storm's start.
STORM_LIMIT = 30.0
#: Descriptors each process needs beyond one per client (the broker's files, the probe).
SPARE_FDS = 512
#: The probe's worst round trip while the storm lasts. The broker handles thousands of
#: logins a second meanwhile, each reactor turn holding a few hundred of them; the probe
#: waits behind one turn at a time, never behind the storm.
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


async def _storm(host, port, count, user, password, timeout):
    frame = connect_frame(user, password)
    results, sockets, clients = [], [], []
    started = time.monotonic()
    for i in range(count):
        clients.append(asyncio.ensure_future(
            _one_client(host, port, frame, started, results, sockets, timeout)))
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
        if what == "CONNECTED":
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
    args = parser.parse_args()
    asyncio.run(_storm(args.host, args.port, args.count, args.user, args.password,
                       args.timeout))


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


def test_ten_thousand_stomp_clients_log_in_at_once(descriptors, broker_factory, probe):
    """10,000 STOMP clients connecting at once to a service in the shared thread-pool
    model all get CONNECTED within 30 s, while a probe on the same service keeps
    round-tripping, and each connection costs the broker a bounded amount of memory."""
    # One user name for all (one password check, the rest from the cache or waiting on
    # it); the default client profile allows a user 6,000 connections, raised here as
    # an operator expecting this many clients of one user would.
    broker = broker_factory({"mqgate.stomp.threadpool_model": "shared",
                             "mqgate.client_profile.default.max_connections_per_user":
                             str(2 * CLIENTS)})
    host, port = broker.address("stomp")
    watcher = probe(broker, interval=0.05)
    rss_before = broker_rss(broker)
    storm = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile.test_login_storm", "--host", host,
         "--port", str(port), "--count", str(CLIENTS), "--timeout", "60"],
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
    figures = (f"{summary['outcomes']}, the last CONNECTED after "
               f"{summary['last_connected']:.1f} s; probe worst round trip "
               f"{watcher.worst * 1000:.0f} ms over {len(watcher.samples)} round trips; "
               f"broker RSS {rss_before / MB:.0f} -> {rss_full / MB:.0f} MiB, "
               f"{per_connection / 1024:.1f} KiB per connection; "
               f"examples of other outcomes: {summary['examples']}; first of each "
               f"outcome after (s): {summary['first']}")
    print(figures)
    assert summary["outcomes"] == {"CONNECTED": CLIENTS}, figures
    assert summary["last_connected"] < STORM_LIMIT, figures
    watcher.assert_responsive(limit=PROBE_LIMIT)
    assert per_connection < RSS_PER_CONNECTION, figures


if __name__ == "__main__":
    main()
