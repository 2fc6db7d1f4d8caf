"""Ping and idle timeout on the real broker (S1.7).

The broker runs with C{mqgate.amqp.idle_timeout=2} (it gives up on an AMQP peer silent
for two seconds) and C{mqgate.ping.interval=1} (it probes every connection every
second). A consumer in a child process that is frozen with SIGSTOP is the silent peer:
its socket stays open, so only the idle timeout can notice it. A Proton client that
keeps running its event loop sends heart-beats and must not be closed.

Every wait has a deadline and ends on an event (a message, a log line, a byte); the
one fixed span, "stay connected for 6 s", is the behaviour under test, and the client
keeps its event loop running through it, as a real idle client does.
"""

import queue
import socket
import signal
import subprocess
import sys
import threading
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import (
    DEFAULT_TIMEOUT, DeadlineExceeded, broker_url, receive_all,
)
from tests.e2e.stomp_client import RawStomp, unique

IDLE_TIMEOUT = 2
PING_INTERVAL = 1
#: How long the broker may take to notice a silent peer and give its deliveries back:
#: the idle timeout, plus a quarter of it for the check, plus slack for a slow CI box.
RETURN_DEADLINE = 10.0

#: A consumer that takes COUNT messages without settling them, says "held", and keeps
#: its event loop running (so it heart-beats) until the broker closes the connection.
HOLDER = r"""
import sys
from proton.utils import BlockingConnection
url, address, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = BlockingConnection(url, timeout=10, allowed_mechs="PLAIN")
receiver = conn.create_receiver(address, credit=count)
for _ in range(count):
    message = receiver.receive(timeout=10)
    print("got", message.id, message.delivery_count, flush=True)
print("held", flush=True)
try:
    conn.wait(lambda: False, timeout=120)
except Exception as error:
    print("closed", error, flush=True)
"""


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """A broker that closes AMQP peers silent for 2 s and pings every 1 s."""
    return module_broker_factory({
        "mqgate.amqp.idle_timeout": str(IDLE_TIMEOUT),
        "mqgate.ping.interval": str(PING_INTERVAL),
    }, listening=("jms", "stomp"))


class Holder:
    """The L{HOLDER} script in a child process, its output lines on a queue."""

    def __init__(self, url, address, count):
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url, address, str(count)],
            cwd=str(REPO_ROOT), env=broker_environment(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        self.said = []
        threading.Thread(target=self._read, daemon=True, name="holder-output").start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, word, timeout=DEFAULT_TIMEOUT * 2):
        """Wait for a line starting with C{word}; return it.

        @raise DeadlineExceeded: no such line within C{timeout}, or the child exited.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise DeadlineExceeded(f"holder did not say {word!r} within {timeout} s;"
                                       f" said {''.join(self.said)}") from None
            if line is None:
                raise DeadlineExceeded(f"holder exited before {word!r}: "
                                       f"{''.join(self.said)}")
            self.said.append(line)
            if line.split()[:1] == [word]:
                return line

    def signal(self, signum):
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self):
        """Wake and kill the child, and reap it. Safe to call twice."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.process.wait(DEFAULT_TIMEOUT)
        self.process.stdout.close()


def test_frozen_consumer_is_closed_and_its_deliveries_are_redelivered(broker):
    """S1.7: a consumer frozen (SIGSTOP) while holding unsettled messages goes silent;
    the broker closes it with amqp:resource-limit-exceeded after the idle timeout, and
    another consumer receives those messages with delivery-count raised."""
    count = 3
    address = f"queue://{unique('frozen')}"
    url = broker_url(broker, user="admin", password="admin")
    sent_ids = {f"frozen-{i}" for i in range(count)}
    producer = BlockingConnection(url, timeout=DEFAULT_TIMEOUT, allowed_mechs="PLAIN")
    try:
        sender = producer.create_sender(address)
        for message_id in sorted(sent_ids):
            sender.send(Message(id=message_id, body=message_id))
    finally:
        producer.close()

    holder = Holder(url, address, count)
    try:
        holder.wait_for("held")
        holder.signal(signal.SIGSTOP)
        deadline = time.monotonic() + RETURN_DEADLINE
        consumer = BlockingConnection(url, timeout=DEFAULT_TIMEOUT, allowed_mechs="PLAIN")
        try:
            receiver = consumer.create_receiver(address)
            redelivered = [receiver.receive(timeout=max(0.1, deadline - time.monotonic()))
                           for _ in range(count)]
            receiver.accept()
        finally:
            consumer.close()
        assert {m.id for m in redelivered} == sent_ids
        assert all(m.delivery_count >= 1 for m in redelivered), \
            [(m.id, m.delivery_count) for m in redelivered]
        broker.wait_for_line(r"closing connection from .*idle", timeout=DEFAULT_TIMEOUT)
        # Thawed, the holder reads the close the broker sent while it was frozen.
        holder.signal(signal.SIGCONT)
        closed = holder.wait_for("closed")
        assert "amqp:resource-limit-exceeded" in closed, closed
    finally:
        holder.kill()


def test_heart_beating_idle_connection_stays_open(broker):
    """S1.7: a Proton connection that sends nothing but heart-beats outlives the 2 s
    idle timeout threefold (6 s) and still does a round trip afterwards."""
    conn = BlockingConnection(broker_url(broker, user="admin", password="admin"),
                              timeout=DEFAULT_TIMEOUT, allowed_mechs="PLAIN")
    try:
        # The broker advertised the idle timeout the test relies on.
        assert conn.conn.transport.remote_idle_timeout == IDLE_TIMEOUT
        # Not Event.wait(6): the client must run its event loop meanwhile to send its
        # heart-beats, as any idle client does. A close by the broker raises here.
        until = time.monotonic() + 3 * IDLE_TIMEOUT
        conn.wait(lambda: time.monotonic() >= until, timeout=3 * IDLE_TIMEOUT + 5)
        address = f"queue://{unique('idle')}"
        conn.create_sender(address).send(Message(body="still here"))
        [got] = receive_all(conn.create_receiver(address), 1)
        assert got.body == "still here"
    finally:
        conn.close()


def test_ping_reaches_a_stomp_connection_without_heart_beats(broker):
    """S1.7: a STOMP 1.2 client that negotiated no heart-beats (0,0) still receives the
    broker's ping, an EOL, every ping interval."""
    client = RawStomp(broker.address("stomp"))
    try:
        frame = client.connect("1.2", "heart-beat:0,0")
        assert frame.command == "CONNECTED", frame
        within = 4 * PING_INTERVAL + 5
        deadline = time.monotonic() + within
        eols = client.heartbeats    # any read together with CONNECTED
        while eols < 2:
            client.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = client.sock.recv(4096)
            except socket.timeout:
                raise DeadlineExceeded(f"{eols} pings within {within} s") from None
            assert data, "the broker closed the STOMP connection"
            assert set(data) <= set(b"\r\n"), f"not a heart-beat: {data!r}"
            eols += data.count(b"\n")
    finally:
        client.close()
