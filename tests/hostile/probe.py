"""A liveness probe for hostile end-to-end tests: is the broker still answering others?

A hostile test attacks the real broker (a slow reader, a flood, a malformed stream ...)
and must show that everyone else is still served. L{Probe} measures exactly that: on a
connection of its own, from a background thread, it sends a message to a private queue
every C{interval} seconds and waits for it to come back, recording each round trip::

    from tests.hostile.probe import Probe, broker_rss, wait_until

    def test_flood_does_not_stall_others(broker):
        with Probe(broker) as probe:          # STOMP on the broker's stomp port
            ... attack the broker ...
        probe.assert_responsive(limit=0.1)    # worst round trip <= 100 ms

or, with the C{probe} fixture of tests/hostile/conftest.py (stopped at teardown)::

    def test_something(broker, probe):
        watcher = probe(broker)               # already running
        ... attack ...
        watcher.stop()                        # or let assert_responsive stop it
        watcher.assert_responsive(limit=0.1)

A round trip that has not completed counts too: while a message is out, L{Probe.worst}
includes the time it has been out so far, and L{Probe.stop} records it as a sample
(marked incomplete). A broker whose reactor is stalled therefore shows as a large worst
value, never as a quiet gap in the samples; and L{Probe.assert_responsive} also fails when
there are too few samples (the probe could not connect, or the broker dropped it).

Protocols: C{protocol="stomp"} (the default) speaks STOMP 1.2 over a raw socket with the
standard library only, so it depends on nothing the offender's protocol engine does;
C{protocol="amqp"} uses mqgate's own AMQP engine client (tests/e2e/engine_client.py),
with a sending and a receiving link on the same private queue.

The probe runs in the test's process: a test that also drives many busy threads of its
own shares the GIL with it (a thread switch is at most 5 ms, well under a 100 ms limit).

Also here: L{broker_rss} (the broker's resident memory, from /proc) and L{wait_until}
(poll a condition with a deadline).
"""

import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Probe", "Sample", "ProbeError", "broker_rss", "wait_until"]

#: How long to wait for the probe's own connection to be set up (CONNECTED, attaches).
CONNECT_TIMEOUT = 10.0

#: How long one read blocks before the probe thread looks at its stop flag again.
_POLL = 0.02

#: The fewest round trips that count as having probed at all.
_FEWEST_SAMPLES = 3


class ProbeError(AssertionError):
    """The probe could not do its job (connect, subscribe); the message says why."""


@dataclass(frozen=True)
class Sample:
    """One round trip.

    @ivar at: when the message was sent, in seconds since the probe started.
    @ivar seconds: how long the round trip took (or had taken when the probe stopped).
    @ivar complete: False when the probe stopped before the message came back.
    """
    at: float
    seconds: float
    complete: bool = True


class Probe:
    """Round-trips a message on a private queue every C{interval} seconds, in a thread.

    @param broker: a L{tests.e2e.broker.BrokerProcess} (its C{address()} is used).
    @param interval: seconds between the starts of two round trips (one is out at a time:
        a slow round trip delays the next one, it does not pile them up).
    @param protocol: C{"stomp"} (default, the broker's stomp service) or C{"amqp"}
        (the jms service).
    @param user: login and password; the shipped configuration's admin by default.
    @param service: the broker service to connect to; by default C{"stomp"} for STOMP
        and C{"jms"} for AMQP.
    @param address: C{(host, port)} to use instead of asking C{broker}.

    @ivar samples: the L{Sample}s so far, in order (read it after L{stop}).
    @ivar error: the exception that ended the probe thread early, or None.
    """

    def __init__(self, broker=None, interval=0.05, protocol="stomp", user=("admin", "admin"),
                 service=None, address=None):
        if protocol not in ("stomp", "amqp"):
            raise ValueError(f"protocol must be 'stomp' or 'amqp', not {protocol!r}")
        if address is None:
            service = service or ("stomp" if protocol == "stomp" else "jms")
            address = broker.address(service)
        self.address = address
        self.interval = interval
        self.protocol = protocol
        self.user = user
        self.queue = f"probe-{uuid.uuid4().hex[:12]}"
        self.samples = []
        self.error = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._pending = None        # monotonic send time of the round trip out, if any
        self._started = None
        self._stopped = None
        self._thread = None

    # -- life -------------------------------------------------------------------------

    def start(self):
        """Connect and start probing; return once the first round trip can be sent.

        @raise ProbeError: the connection was not set up within L{CONNECT_TIMEOUT}.
        """
        self._thread = threading.Thread(target=self._run, name=f"probe-{self.queue}",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(CONNECT_TIMEOUT) or self.error is not None:
            self.stop()
            raise ProbeError(f"the probe could not set up its {self.protocol} connection "
                             f"to {self.address}: {self.error or 'timed out'}")
        return self

    def stop(self):
        """Stop probing; a round trip still out is recorded as an incomplete sample.

        Safe to call twice. Returns C{self}.
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(CONNECT_TIMEOUT)
        with self._lock:
            if self._stopped is None:
                self._stopped = time.monotonic()
                if self._pending is not None:
                    self.samples.append(Sample(self._pending - self._started,
                                               self._stopped - self._pending, False))
                    self._pending = None
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
        return False

    # -- results ----------------------------------------------------------------------

    @property
    def worst(self):
        """The longest round trip in seconds, counting one still out as growing."""
        with self._lock:
            values = [s.seconds for s in self.samples]
            if self._pending is not None:
                values.append(time.monotonic() - self._pending)
        return max(values, default=0.0)

    def worst_sample(self):
        """The L{Sample} of the longest round trip (after L{stop}), or None."""
        with self._lock:
            return max(self.samples, key=lambda s: s.seconds, default=None)

    def expected_samples(self):
        """How many round trips an idle broker would have made in the time probed."""
        if self._started is None:
            return 0
        end = self._stopped or time.monotonic()
        return int((end - self._started) / self.interval)

    def assert_responsive(self, limit=0.1, min_samples=None):
        """Stop the probe and assert every round trip took at most C{limit} seconds.

        @param min_samples: the fewest round trips that count as having probed at all;
            by default a quarter of what the time probed allows for, and at least 3.
        @raise AssertionError: a round trip (complete or not) exceeded C{limit}, the
            probe's connection failed, or there were too few samples.
        """
        # An attack that ends quickly (the broker answered it at once) leaves too
        # little time for the fewest samples: the probe goes on until it has them, the
        # broker still busy with whatever the attack left behind.
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while (len(self.samples) < _FEWEST_SAMPLES and self.error is None
               and self._thread is not None and self._thread.is_alive()
               and time.monotonic() < deadline):
            time.sleep(self.interval / 2)
        self.stop()
        count = len(self.samples)
        worst = self.worst_sample()
        if min_samples is None:
            min_samples = max(_FEWEST_SAMPLES, self.expected_samples() // 4)
        where = (f"after {count} round trips over "
                 f"{(self._stopped or 0) - (self._started or 0):.2f} s "
                 f"(interval {self.interval} s, {self.protocol})")
        if self.error is not None:
            raise AssertionError(f"the probe's connection failed {where}: {self.error!r}")
        if worst is not None and worst.seconds > limit:
            state = "" if worst.complete else " and had not come back when the probe stopped"
            slow = sum(1 for s in self.samples if s.seconds > limit)
            raise AssertionError(
                f"worst round trip {worst.seconds * 1000:.0f} ms > limit "
                f"{limit * 1000:.0f} ms: sent {worst.at:.2f} s after the probe started"
                f"{state}; {slow} of {count} round trips over the limit, {where}")
        if count < min_samples:
            raise AssertionError(f"only {count} round trips, fewer than {min_samples}, "
                                 f"{where}")

    # -- the thread -------------------------------------------------------------------

    def _run(self):
        try:
            channel = (_StompChannel if self.protocol == "stomp" else _AmqpChannel)(
                self.address, self.queue, self.user)
        except Exception as e:  # noqa: BLE001 - reported by start() and the assertion
            self.error = e
            self._ready.set()
            return
        try:
            self._started = time.monotonic()
            self._ready.set()
            self._loop(channel)
        except Exception as e:  # noqa: BLE001 - reported by assert_responsive
            self.error = e
        finally:
            channel.close()

    def _loop(self, channel):
        sequence = 0
        next_send = self._started
        while not self._stopping.is_set():
            delay = next_send - time.monotonic()
            if delay > 0 and self._stopping.wait(delay):
                return
            sequence += 1
            body = f"{self.queue}:{sequence}".encode()
            with self._lock:
                self._pending = sent = time.monotonic()
            channel.send(body)
            while not channel.received(body, _POLL):
                if self._stopping.is_set():
                    return      # stop() records the round trip still out
            now = time.monotonic()
            with self._lock:
                self._pending = None
                self.samples.append(Sample(sent - self._started, now - sent))
            next_send = max(now, sent + self.interval)


class _StompChannel:
    """STOMP 1.2 on a raw socket: SUBSCRIBE (auto ack) and SEND to one queue."""

    def __init__(self, address, queue, user):
        self.sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.destination = f"/queue/{queue}"
        login, passcode = user
        self._write("CONNECT", {"accept-version": "1.2", "host": "localhost",
                                "login": login, "passcode": passcode,
                                "heart-beat": "0,0"})
        self._expect("CONNECTED")
        self._write("SUBSCRIBE", {"destination": self.destination, "id": "probe",
                                  "ack": "auto", "receipt": "subscribed"})
        self._expect("RECEIPT")

    def _write(self, command, headers, body=b""):
        head = "".join(f"{k}:{v}\n" for k, v in headers.items())
        self.sock.sendall(f"{command}\n{head}\n".encode() + body + b"\x00")

    def _frame(self, timeout):
        """The next frame as C{(command, headers, body)}, or None within C{timeout}."""
        deadline = time.monotonic() + timeout
        while b"\x00" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not data:
                raise ConnectionError("the broker closed the probe's STOMP connection")
            self.buffer += data
        raw, self.buffer = self.buffer.split(b"\x00", 1)
        head, _, body = raw.lstrip(b"\r\n").partition(b"\n\n")
        command, *lines = head.decode("utf-8", "replace").split("\n")
        headers = dict(line.split(":", 1) for line in lines if ":" in line)
        return command.strip(), headers, body

    def _expect(self, command):
        frame = self._frame(CONNECT_TIMEOUT)
        if frame is None:
            raise ConnectionError(f"no {command} frame within {CONNECT_TIMEOUT} s")
        if frame[0] != command:
            raise ConnectionError(f"expected {command}, got {frame[0]} {frame[1]} "
                                  f"{frame[2][:200]!r}")

    def send(self, body):
        self._write("SEND", {"destination": self.destination,
                             "content-length": str(len(body))}, body)

    def received(self, body, timeout):
        """True once the MESSAGE carrying C{body} arrived; False after C{timeout}."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self._frame(max(0.0, deadline - time.monotonic()))
            if frame is None:
                return False
            command, headers, got = frame
            if command == "ERROR":
                raise ConnectionError(f"ERROR frame: {headers} {got[:200]!r}")
            if command == "MESSAGE" and got == body:
                return True

    def close(self):
        try:
            self._write("DISCONNECT", {})
        except OSError:
            pass
        self.sock.close()


class _AmqpChannel:
    """mqgate's AMQP engine client with a sender and a receiver on one queue."""

    CREDIT = 100

    def __init__(self, address, queue, user):
        from mqgate.amqp.events import MessageReceived
        from mqgate.amqp.message import encode_message, parse_message
        from mqgate.amqp.performatives import RECEIVER, SENDER, SND_SETTLED
        from tests.e2e.engine_client import EngineClient

        self._message_received = MessageReceived
        self._encode = encode_message
        self._parse = parse_message
        self.client = EngineClient(address, f"probe-{queue}", credentials=user,
                                   timeout=CONNECT_TIMEOUT)
        self.receiver = self.client.open_link(RECEIVER, queue)
        self.sender = self.client.open_link(SENDER, queue, settle_mode=SND_SETTLED)
        self.receiver.flow(self.CREDIT)
        self.client.flush()
        self.arrived = set()

    def send(self, body):
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while not self.sender.credit:
            if time.monotonic() > deadline:
                raise ConnectionError(f"no credit to send within {CONNECT_TIMEOUT} s")
            self.received(None, _POLL)
        self.sender.send(self._encode(body), settled=True)
        self.client.flush()

    def received(self, body, timeout):
        if body in self.arrived:
            self.arrived.discard(body)
            return True
        self.client.sock.settimeout(timeout)
        try:
            events = self.client.read()
        except socket.timeout:
            return False
        for event in events:
            if isinstance(event, self._message_received):
                if not event.settled:
                    self.receiver.settle(event.delivery_id)
                for _, value in self._parse(event.payload).body_sections():
                    self.arrived.add(bytes(value))
        if self.receiver.credit < self.CREDIT // 2:
            self.receiver.flow(self.CREDIT)
        self.client.flush()
        if body in self.arrived:
            self.arrived.discard(body)
            return True
        return False

    def close(self):
        self.client.close(grace=1.0)


def broker_rss(broker):
    """The broker process's resident set size in bytes (VmRSS of /proc/PID/status)."""
    status = Path(f"/proc/{broker.pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            assert unit == "kB", line
            return int(value) * 1024
    raise AssertionError(f"no VmRSS line for pid {broker.pid} (has it exited?)")


def wait_until(predicate, timeout, message, interval=0.02):
    """Poll C{predicate()} until it returns something true; return that value.

    @param message: what was awaited, for the error ("queue drained").
    @raise AssertionError: C{timeout} seconds passed first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message}: not within {timeout} s")
        time.sleep(interval)
