"""AMQP 1.0 queue throughput: one producer, one consumer, one queue, through mqgate.

One scenario runs like this:

1. start a broker (``twistd -n mqgate`` on the shipped configuration, OS-chosen
   ports: the same ``BrokerProcess`` the end-to-end tests use), unless ``--url``
   names a running one;
2. start the consumer in its own process and wait for it to print ``ready``, which
   it does once the broker has answered its attach (so no message can arrive before
   the consumer is there to count it);
3. start the producer in its own process;
4. wait for both, each under a deadline, and print one JSON line::

     {"scenario": "amqp-queue-presettled", "messages": 200000, "size": 256,
      "msgs_per_s": ..., "seconds": ..., "producer_msgs_per_s": ...}

``msgs_per_s`` and ``seconds`` are the consumer's: from the first message received to
the last. ``producer_msgs_per_s`` is the producer's own rate: from its first send to
its last send (presettled) or to the last outcome from the broker (unsettled).

Both clients use python-qpid-proton's event-driven ``Container`` with a
``MessagingHandler`` (BlockingConnection does a round trip per call, far too slow to
measure a broker with), each in a subprocess so that the producer, the consumer and
the broker each get a core-sized share of the machine and never share a GIL.

Scenarios:
- ``presettled``: both links at-most-once (sender settle mode ``settled``), so no
  dispositions flow at all;
- ``unsettled``: at-least-once; the consumer accepts every message and the producer
  counts the broker's outcomes.

Run ``python bench/amqp_throughput.py --help``; ``bench/run.py`` runs every scenario.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

SCENARIOS = ("presettled", "unsettled")
DEFAULT_MESSAGES = 200_000
DEFAULT_SIZE = 256
#: The consumer's credit window (proton's FlowController tops it up per delivery).
DEFAULT_PREFETCH = 1000
#: A bare name resolves to a queue by default (S2.1) and is auto-created.
DEFAULT_ADDRESS = "bench.throughput"
#: Per scenario, for everything after the broker is up. Generous: 200,000 messages
#: at 1,000 msgs/s would be 200 s; anything slower than that is a failure to look at.
DEFAULT_TIMEOUT = 600.0
#: How long the consumer may take to connect and attach.
READY_TIMEOUT = 30.0
#: How long a client that has reported may take to close its connection.
CLOSE_GRACE = 5.0
#: The producer starts right after the consumer attaches; a first message later
#: than this is a broker stall, reported on stderr.
FIRST_MESSAGE_WARNING = 5.0


class BenchError(Exception):
    """A scenario could not be measured; the message says which part failed and why."""


# --- the two clients (run in subprocesses) ---------------------------------------

def _proton():
    """Import proton lazily: the coordinating process never needs it."""
    try:
        import proton
        import proton.handlers
        import proton.reactor
    except ImportError as e:
        raise SystemExit(
            f"python-qpid-proton is not installed ({e}); run `make bench`, which "
            "installs the test extra") from None
    return proton, proton.handlers, proton.reactor


def _connect(container, options):
    """Open the connection of a client role, never reconnecting (fail, don't hang)."""
    kwargs = {"reconnect": False}
    if options.user:
        kwargs.update(user=options.user, password=options.password,
                      allow_insecure_mechs=True)
    return container.connect(options.url, **kwargs)


def _client_base(handlers, options):
    """The error and deadline handling both client roles share.

    Every way a client can end early (socket error, refused SASL, link or connection
    closed by the broker, the deadline) records why and stops the container, so the
    process exits at once with that reason instead of waiting for a timer.
    """

    class Client(handlers.MessagingHandler):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.error = None
            self.finished = False
            self.timer = None

        def open_link(self, event, create):
            conn = _connect(event.container, options)
            proton_reactor = sys.modules["proton.reactor"]
            link_options = (proton_reactor.AtMostOnce() if options.mode == "presettled"
                            else proton_reactor.AtLeastOnce())
            create(conn, options.address, options=link_options)
            self.timer = event.container.schedule(options.timeout, self)

        def finish(self, event):
            """The work is done: close the connection gracefully."""
            self.finished = True
            self.timer.cancel()
            event.connection.close()

        def abort(self, event, why):
            if self.error is None:
                self.error = why
            if self.timer is not None:
                self.timer.cancel()
            event.container.stop()

        def on_transport_error(self, event):
            if not self.finished:
                self.abort(event, _condition_text(event.transport.condition,
                                                  "transport error"))

        def on_link_error(self, event):
            self.abort(event, _condition_text(event.link.remote_condition,
                                              "link closed by the broker"))

        def on_connection_error(self, event):
            self.abort(event, _condition_text(event.connection.remote_condition,
                                              "connection closed by the broker"))

        def on_disconnected(self, event):
            if not self.finished:
                transport = event.transport
                cause = _condition_text(transport and transport.condition, "disconnected")
                self.abort(event, f"{cause} ({self.progress()})")

        def on_timer_task(self, event):
            self.abort(event, f"timeout after {options.timeout} s: " + self.progress())

    return Client


def run_consumer(options):
    """Receive ``options.messages`` messages; print ``ready``, then a JSON result."""
    proton, handlers, reactor = _proton()
    presettled = options.mode == "presettled"

    class Consumer(_client_base(handlers, options)):
        def __init__(self):
            # Unsettled: proton accepts and settles each message after on_message.
            super().__init__(prefetch=options.prefetch, auto_accept=not presettled)
            self.received = 0
            self.attached = self.first = self.last = None

        def progress(self):
            return f"received {self.received} of {options.messages}"

        def on_start(self, event):
            self.open_link(event, event.container.create_receiver)

        def on_link_opened(self, event):
            if event.receiver is not None:
                self.attached = time.perf_counter()
                print("ready", flush=True)

        def on_message(self, event):
            now = time.perf_counter()
            if self.first is None:
                self.first = now
            self.received += 1
            if presettled:
                event.delivery.settle()  # frees proton's record; nothing is sent
            if self.received == options.messages:
                self.last = now
                seconds = self.last - self.first
                # Reported before closing: the measurement is complete, and the
                # coordinator must not depend on how fast the close handshake is.
                _emit(role="consumer", received=self.received, seconds=seconds,
                      msgs_per_s=_rate(self.received, seconds),
                      wait_for_first_s=round(self.first - self.attached, 3))
                self.finish(event)

    handler = Consumer()
    reactor.Container(handler).run()
    if handler.last is None:
        _fail("consumer", handler.error or "connection ended: " + handler.progress())


def run_producer(options):
    """Send ``options.messages`` messages of ``options.size`` bytes; print a JSON result."""
    proton, handlers, reactor = _proton()
    presettled = options.mode == "presettled"
    # Encoded once: the producer's own encoding cost is not what we measure.
    body = proton.Message(body=b"x" * options.size, inferred=True).encode()

    class Producer(_client_base(handlers, options)):
        def __init__(self):
            super().__init__()
            self.sent = 0
            self.outcomes = {"accepted": 0, "rejected": 0, "released": 0}
            self.first = self.done = None

        def progress(self):
            return (f"sent {self.sent} of {options.messages}, "
                    f"outcomes {self.outcomes}")

        def on_start(self, event):
            self.open_link(event, event.container.create_sender)

        def on_sendable(self, event):
            sender = event.sender
            if self.first is None:
                self.first = time.perf_counter()
            while sender.credit > 0 and self.sent < options.messages:
                delivery = sender.delivery(str(self.sent))
                sender.stream(body)
                sender.advance()
                if presettled:
                    delivery.settle()
                self.sent += 1
            if presettled and self.sent == options.messages:
                self._done(event)

        def on_accepted(self, event):
            self._outcome(event, "accepted")

        def on_rejected(self, event):
            self._outcome(event, "rejected")

        def on_released(self, event):
            self._outcome(event, "released")

        def _outcome(self, event, name):
            self.outcomes[name] += 1
            if sum(self.outcomes.values()) == options.messages:
                self._done(event)

        def _done(self, event):
            if self.done is None:
                self.done = time.perf_counter()
                seconds = self.done - self.first
                _emit(role="producer", sent=self.sent, outcomes=self.outcomes,
                      seconds=seconds, msgs_per_s=_rate(self.sent, seconds))
                self.finish(event)

    handler = Producer()
    reactor.Container(handler).run()
    if handler.done is None:
        _fail("producer", handler.error or "connection ended: " + handler.progress())


def _condition_text(condition, default):
    if condition is None:
        return default
    return f"{default}: {condition.name}: {condition.description}"


def _rate(count, seconds):
    return round(count / seconds, 1) if seconds > 0 else None


def _emit(**fields):
    print(json.dumps(fields), flush=True)


def _fail(role, message):
    print(f"{role}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


# --- coordinating one scenario -----------------------------------------------------

class Child:
    """A client subprocess whose stdout is read line by line in a thread."""

    def __init__(self, role, args):
        self.role = role
        self.lines = []
        self._done = False
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), role, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def _read_stderr(self):
        for line in self.process.stderr:
            self._stderr.append(line)

    def wait_for_line(self, text, timeout):
        """Wait for an stdout line equal to C{text}; L{BenchError} on exit or timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while text not in self.lines:
                remaining = deadline - time.monotonic()
                if self._done or remaining <= 0:
                    why = "exited" if self._done else f"timed out after {timeout} s"
                    raise BenchError(f"{self.role} {why} before printing {text!r}"
                                     f"{self.diagnostics()}")
                self._changed.wait(remaining)

    def result(self, timeout):
        """Wait for the JSON result line (printed before the client closes).

        @raise BenchError: the client exited without one (its stderr says why) or
            printed none within C{timeout} seconds.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if line.startswith("{"):
                        return json.loads(line)
                remaining = deadline - time.monotonic()
                if self._done or remaining <= 0:
                    break
                self._changed.wait(remaining)
        if not self._done:
            raise BenchError(f"{self.role} still running after {timeout:.0f} s"
                             f"{self.diagnostics()}")
        code = self.process.wait()
        raise BenchError(f"{self.role} failed (exit code {code}) without a result"
                         f"{self.diagnostics()}")

    def close(self, grace):
        """Let the client finish its close handshake; kill it after C{grace} s.

        A broker that does not answer a close within the grace period is worth
        knowing about, but it does not invalidate the measurement: say so on
        stderr and go on.
        """
        try:
            code = self.process.wait(grace)
        except subprocess.TimeoutExpired:
            print(f"warning: {self.role}'s connection close not completed within "
                  f"{grace} s; killed", file=sys.stderr, flush=True)
            self.kill()
            return
        if code != 0:
            print(f"warning: {self.role} exited with code {code} after reporting"
                  f"{self.diagnostics()}", file=sys.stderr, flush=True)

    def diagnostics(self):
        text = "".join(self._stderr[-30:]).strip()
        return f"\n--- {self.role} stderr ---\n{text}" if text else ""

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _client_args(options, url, mode):
    return ["--url", url, "--address", options.address, "--mode", mode,
            "--messages", str(options.messages), "--size", str(options.size),
            "--prefetch", str(options.prefetch), "--timeout", str(options.timeout),
            "--user", options.user, "--password", options.password]


def broker_cpu(pid):
    """CPU time (user + system) the broker has used so far, from /proc; None without
    a pid or /proc."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_fields(before, after, count, unit="msg", plural="msgs"):
    """``broker_cpu_us_per_<unit>`` and ``broker_one_core_<plural>_per_s``, if known:
    what the broker itself would sustain on one core, whatever the load generator."""
    if before is None or after is None or not count:
        return {}
    each = (after - before) / count
    return {f"broker_cpu_us_per_{unit}": round(each * 1e6, 1),
            f"broker_one_core_{plural}_per_s": round(1 / each) if each else None}


def measure(options, url, mode, broker_pid=None):
    """Run consumer then producer against C{url}; return the scenario's JSON dict.

    With C{broker_pid}, also report the broker's own CPU time per message: the load
    generator (Proton in Python) may be the bottleneck, and this says what the broker
    itself would sustain on one core.
    """
    args = _client_args(options, url, mode)
    children = []
    cpu_before = broker_cpu(broker_pid)
    try:
        consumer = Child("consume", args)
        children.append(consumer)
        consumer.wait_for_line("ready", READY_TIMEOUT)
        producer = Child("produce", args)
        children.append(producer)
        deadline = time.monotonic() + options.timeout + READY_TIMEOUT
        sent = producer.result(max(1.0, deadline - time.monotonic()))
        refused = options.messages - sent["outcomes"]["accepted"]
        if mode == "unsettled" and refused:
            # The consumer would wait for them until its deadline: fail now.
            raise BenchError(f"the broker did not accept {refused} messages: "
                             f"producer outcomes {sent['outcomes']}")
        got = consumer.result(max(1.0, deadline - time.monotonic()))
        if got["wait_for_first_s"] > FIRST_MESSAGE_WARNING:
            # Not part of the rate (first to last), but a broker that sits on a
            # queue's messages for seconds has a problem worth seeing.
            print(f"warning: amqp-queue-{mode}: the first message reached the "
                  f"consumer {got['wait_for_first_s']} s after it attached",
                  file=sys.stderr, flush=True)
        for child in children:
            child.close(CLOSE_GRACE)
    finally:
        for child in children:
            child.kill()
    result = {
        "scenario": f"amqp-queue-{mode}",
        "messages": got["received"],
        "size": options.size,
        "msgs_per_s": got["msgs_per_s"],
        "seconds": round(got["seconds"], 3),
        "producer_msgs_per_s": sent["msgs_per_s"],
    }
    result.update(cpu_fields(cpu_before, broker_cpu(broker_pid), got["received"]))
    return result


def run_scenario(options, mode):
    """One scenario on a new broker (or on ``options.url``); return its JSON dict."""
    if options.url:
        return measure(options, options.url, mode)
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-") as varhome:
        broker = BrokerProcess(varhome, defines=dict(options.define))
        try:
            try:
                host, port = broker.spawn().address("jms")
            except BrokerError as e:
                raise BenchError(f"the broker did not start: {e}") from None
            return measure(options, f"amqp://{host}:{port}", mode, broker.pid)
        finally:
            try:
                broker.terminate()
            except BrokerError:
                pass
            broker.kill()


def scenario_line(options, mode):
    """The scenario's one JSON line: its measurement, or its error."""
    try:
        return run_scenario(options, mode)
    except BenchError as e:
        print(f"amqp-queue-{mode}: {e}", file=sys.stderr, flush=True)
        return {"scenario": f"amqp-queue-{mode}", "messages": options.messages,
                "size": options.size, "error": _one_line(str(e))}


def _one_line(text):
    """The first line of an error and its last detail line (the child's own words)."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith("---")]
    if len(lines) > 1:
        return f"{lines[0]}: {lines[-1]}"
    return lines[0] if lines else "unknown error"


# --- command line ------------------------------------------------------------------

def _define(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_common_arguments(parser):
    """Options shared by the scenario runner, bench/run.py and the client roles."""
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES,
                        help=f"messages per scenario (default {DEFAULT_MESSAGES})")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE,
                        help=f"body size in bytes (default {DEFAULT_SIZE})")
    parser.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH,
                        help=f"consumer credit window (default {DEFAULT_PREFETCH})")
    parser.add_argument("--address", default=DEFAULT_ADDRESS,
                        help=f"queue address (default {DEFAULT_ADDRESS})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per scenario (default {DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--user", default="guest",
                        help="SASL PLAIN user, empty for ANONYMOUS (default guest)")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--url", default=None,
                        help="use the broker at this AMQP URL instead of starting one")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="AMQP queue throughput through mqgate; one JSON line per scenario.")
    parser.add_argument("role", nargs="?", default="bench",
                        choices=("bench", "consume", "produce"),
                        help="bench (default) runs scenarios; consume/produce are "
                             "the client subprocesses")
    add_common_arguments(parser)
    parser.add_argument("--mode", "--scenario", dest="mode", default="all",
                        choices=SCENARIOS + ("all",))
    parser.add_argument("-D", "--define", type=_define, action="append", default=[],
                        metavar="KEY=VALUE", help="extra broker setting (repeatable)")
    options = parser.parse_args(argv)
    if options.role != "bench" and (options.url is None or options.mode == "all"):
        parser.error(f"{options.role} needs --url and --mode presettled|unsettled")
    if options.messages < 1:
        parser.error("--messages must be at least 1")
    return options


def run_roles(options, roles, scenarios, scenario_line):
    """The C{main()} of every benchmark script: a client role (C{consume},
    C{produce} ...) runs that client in this process; C{bench} runs each scenario and
    prints its JSON line. Returns the exit code: 1 when a scenario failed."""
    client = roles.get(options.role)
    if client is not None:
        return client(options)
    failed = False
    for name in scenarios:
        line = scenario_line(options, name)
        failed = failed or "error" in line
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    roles = {"consume": run_consumer, "produce": run_producer}
    scenarios = SCENARIOS if options.mode == "all" else (options.mode,)
    return run_roles(options, roles, scenarios, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
