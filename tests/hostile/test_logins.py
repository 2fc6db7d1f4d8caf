"""Hostile end-to-end tests: a flood of wrong passwords against the real broker (S4.2).
Raw STOMP sockets from one loopback address guess passwords while a probe client
round-trips a message every 50 ms and a real user logs in from another address."""

import socket
import threading
import time

import pytest

from tests.e2e.engine_client import EngineClient
from tests.hostile.probe import wait_until

# Checks that queue behind each other and a bound on pending checks need a check that
# takes the production hash's time.
pytestmark = pytest.mark.production_hashes

ATTACKER = "127.0.0.1"
HONEST = "127.0.0.2"      # Linux routes all of 127/8 to loopback


def stomp_login(address, login, passcode, source=ATTACKER, timeout=30):
    """One STOMP CONNECT; return C{(the answer frame, seconds it took)}."""
    sock = socket.create_connection(address, timeout=timeout, source_address=(source, 0))
    try:
        start = time.monotonic()
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:h\nlogin:{login}\n"
                     f"passcode:{passcode}\n\n\x00".encode())
        data = b""
        while b"\x00" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data, time.monotonic() - start
    finally:
        sock.close()


def test_a_password_guessing_flood_is_slowed_and_harms_no_one(broker, probe):
    """Wrong passwords from one address: the first few are checked at once; of a dozen
    more sent at once, none is checked at once: they are checked one behind the other
    after growing delays, or (past what the login deadline leaves room for) refused at
    once without a check ("too many failed logins ...; try again later"). Meanwhile the probe keeps its round trip under 100 ms
    and a correct login from another address is answered within a second."""
    watcher = probe(broker)
    wait_until(lambda: len(watcher.samples) >= 5, 10, "the probe's first round trips")
    address = broker.address("stomp")

    first = [stomp_login(address, "admin", f"guess{n}") for n in range(5)]
    assert all(answer.startswith(b"ERROR\n") for answer, _ in first), first
    assert max(took for _, took in first) < 2.0, first

    flood, threads = [], []
    for n in range(12):
        thread = threading.Thread(
            target=lambda n=n: flood.append(stomp_login(address, "admin", f"flood{n}")),
            daemon=True)
        thread.start()
        threads.append(thread)
    time.sleep(0.5)   # the flood is waiting for its turns while the honest user comes
    answer, took = stomp_login(address, "admin", "admin", source=HONEST)
    assert answer.startswith(b"CONNECTED\n") and took < 1.0, (answer, took)
    for thread in threads:
        thread.join(60)

    watcher.assert_responsive(limit=0.1)
    assert len(flood) == 12 and all(a.startswith(b"ERROR\n") for a, _ in flood), flood
    busy = [took for answer, took in flood if b"try again later" in answer]
    checked = sorted(took for answer, took in flood if b"try again later" not in answer)
    assert busy and checked, flood
    assert checked[0] >= 0.4, checked       # even the first of the flood waited
    assert checked[-1] >= 1.4, checked      # and they waited one behind the other


def stomp_answer(address, login, passcode, source):
    """One STOMP CONNECT from C{source}; return the whole answer frame."""
    return stomp_login(address, login, passcode, source)[0]


def test_checks_past_the_bound_are_refused_as_busy(broker_factory, probe):
    """A flood from many addresses at once queues at most max_pending_checks password
    checks; the others are answered at once with "busy, try again later"; an admin
    logging in on the admin service meanwhile is not refused (the bound is per
    service), and the probe keeps its round trip under 100 ms."""
    broker = broker_factory({"mqgate.authentication.max_pending_checks": "2"})
    watcher = probe(broker)
    wait_until(lambda: len(watcher.samples) >= 5, 10, "the probe's first round trips")
    address = broker.address("stomp")
    answers, threads = [], []
    for n in range(30):
        source = f"127.0.1.{n + 1}"
        thread = threading.Thread(
            target=lambda s=source: answers.append(stomp_answer(address, "x", "y", s)),
            daemon=True)
        thread.start()
        threads.append(thread)
    admin = EngineClient(broker.address("admin"), "admin-during-flood",
                         credentials=("admin", "admin"), timeout=10)
    admin.wait_for(lambda _: admin.engine.ready, "the admin service's open")
    admin.close()
    for thread in threads:
        thread.join(60)
    watcher.assert_responsive(limit=0.1)
    assert len(answers) == 30 and all(a.startswith(b"ERROR\n") for a in answers)
    busy = [a for a in answers if b"busy" in a and b"try again later" in a]
    assert 1 <= len(busy) <= 28, [a[-80:] for a in answers]
