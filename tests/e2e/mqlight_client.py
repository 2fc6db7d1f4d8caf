"""The real MQ Light Node client (the ``mqlight`` npm package, version 2) for e2e tests.

L{MQLightClient} runs ``tests/e2e/mqlight/driver.js`` under node: one client per
process, commands written to its stdin and events read from its stdout, one JSON
object a line each way (driver.js lists them). A test waits on events with a deadline
(L{MQLightClient.wait}), never on time.

The client's packages come from ``tests/e2e/mqlight/package-lock.json``; ``make
node-mqlight`` (which ``make install-test`` runs) installs them with npm. Without node
or those packages the tests are skipped, except under ``make test`` or CI
(C{MQGATE_REQUIRE_NODE=1}), where they fail: there the Makefile has installed them.
"""

import itertools
import json
import os
import queue
import shutil
import subprocess
import threading
import time

from tests.e2e.broker import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "tests" / "e2e" / "mqlight"
DRIVER = PACKAGE_DIR / "driver.js"
MQLIGHT = PACKAGE_DIR / "node_modules" / "mqlight"

# Generous: two cores shared by several brokers and test runs.
DEADLINE = 20.0

_counter = itertools.count(1)


def client_id(prefix):
    """A client id no other test of this run uses, in the client's alphabet
    (letters, digits, C{%/._}: no hyphen)."""
    return f"{prefix}_{next(_counter)}_{time.monotonic_ns() % 1000000}"


def node_required():
    """Whether missing node or mqlight packages must fail the tests, not skip them."""
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("MQGATE_REQUIRE_NODE", "") not in ("", "0"))


def missing():
    """Why the client cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (install Node.js 18+ and npm, then make node-mqlight)"
    if not MQLIGHT.is_dir():
        return (f"{MQLIGHT.relative_to(REPO_ROOT)} is missing: run make node-mqlight "
                "(npm ci in tests/e2e/mqlight)")
    return None


def require_client():
    """Skip the calling test when the client cannot run, or fail it where it must."""
    import pytest
    reason = missing()
    if reason is None:
        return
    if node_required():
        pytest.fail(f"the MQ Light client is required here but unavailable: {reason}",
                    pytrace=False)
    pytest.skip(f"the MQ Light client is unavailable: {reason}")


class ClientEventTimeout(AssertionError):
    """An awaited event did not arrive in time; the message says which, and what did."""


class MQLightClient:
    """One mqlight client in a node process, started with C{service} and C{id}."""

    def __init__(self, service, id):
        self.id = id
        self.events = queue.Queue()
        self.seen = []  # every event read, for failure messages
        self._pending = []  # events read but not yet waited for
        self._refs = itertools.count(1)
        self.process = subprocess.Popen(
            [shutil.which("node"), str(DRIVER), service, id],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, cwd=PACKAGE_DIR)
        self._stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))
        self.events.put({"event": "exit"})

    def _read_stderr(self):
        for line in self.process.stderr:
            self._stderr.append(line)

    def command(self, op, **fields):
        """Send a command; return its ref (its answer carries it)."""
        ref = next(self._refs)
        self.process.stdin.write(json.dumps({"op": op, "ref": ref, **fields}) + "\n")
        self.process.stdin.flush()
        return ref

    def wait(self, event, deadline=DEADLINE, **match):
        """The first event named C{event} whose fields equal C{match}, whether it came
        before (events passed over by earlier waits are kept, in order) or comes
        within C{deadline} seconds. An "error" answering a command waited on (its ref)
        is raised at once rather than timing out."""
        def wanted(got):
            return got["event"] == event and all(got.get(k) == v for k, v in match.items())

        for got in self._pending:
            if wanted(got):
                self._pending.remove(got)
                return got
        end = time.monotonic() + deadline
        while True:
            try:
                got = self.events.get(timeout=max(end - time.monotonic(), 0))
            except queue.Empty:
                raise ClientEventTimeout(
                    f"client {self.id}: no {event} {match or ''} within {deadline} s"
                    f"{self._context()}") from None
            self.seen.append(got)
            if wanted(got):
                return got
            if (got["event"] == "error" and "ref" in match
                    and got.get("ref") == match["ref"]):
                raise ClientEventTimeout(f"client {self.id}: {event} failed: {got}")
            if got["event"] == "exit" and event != "exit":
                raise ClientEventTimeout(
                    f"client {self.id} exited waiting for {event}{self._context()}")
            self._pending.append(got)

    def _context(self):
        """The last events and the end of node's stderr, for a failure message."""
        return f"; last seen {self.seen[-20:]}; stderr {''.join(self._stderr)[-2000:]}"

    def messages(self, count, deadline=DEADLINE):
        """The next C{count} "message" events."""
        return [self.wait("message", deadline) for _ in range(count)]

    def no_message(self, within):
        """Assert that no message arrives within C{within} seconds (used only after an
        event proves the broker has had the chance to deliver one)."""
        try:
            got = self.wait("message", within)
        except ClientEventTimeout:
            return
        raise AssertionError(f"client {self.id}: unexpected message {got}")

    # The commands, each waiting for its answer.

    def started(self):
        return self.wait("started")

    def subscribe(self, pattern, share=None, **options):
        ref = self.command("subscribe", pattern=pattern, share=share, **options)
        return self.wait("subscribed", ref=ref)

    def unsubscribe(self, pattern, share=None, **options):
        ref = self.command("unsubscribe", pattern=pattern, share=share, **options)
        return self.wait("unsubscribed", ref=ref)

    def send(self, topic, body, **options):
        ref = self.command("send", topic=topic, body=body, **options)
        return self.wait("sent", ref=ref)

    def confirm(self, seq):
        ref = self.command("confirm", seq=seq)
        return self.wait("confirmed", ref=ref)

    def stop(self):
        """Stop the client cleanly (it detaches and closes) and wait for the exit."""
        if self.process.poll() is None:
            ref = self.command("stop")
            self.wait("stopped", ref=ref)
        self.process.wait(DEADLINE)

    def kill(self):
        """End the process at once: the broker sees the socket drop, no detach."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
