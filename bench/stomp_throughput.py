"""STOMP 1.2 queue throughput: one producer, one consumer, one queue, through mqgate.

The STOMP twin of ``amqp_throughput.py``, run the same way:

1. start a broker (``twistd -n mqgate``, the same ``BrokerProcess`` the end-to-end
   tests use) and connect to its ``stomp`` service, unless ``--url`` names one;
2. start the consumer in its own process and wait for it to print ``ready``, which it
   does once the broker has sent the RECEIPT of its SUBSCRIBE;
3. start the producer in its own process;
4. wait for both, each under a deadline, and print one JSON line with the same fields
   as the AMQP lines::

     {"scenario": "stomp-queue-auto", "messages": 200000, "size": 256,
      "msgs_per_s": ..., "seconds": ..., "producer_msgs_per_s": ...,
      "broker_cpu_us_per_msg": ..., "broker_one_core_msgs_per_s": ...}

Scenarios:
- ``auto``: ``SUBSCRIBE`` with ``ack:auto`` (at-most-once: the broker settles each
  message when it writes it);
- ``client``: ``ack:client-individual``; the consumer sends one ACK per message,
  and the broker lends it ``activemq.prefetchSize`` (1,000) unacknowledged messages.

The clients are not stomp.py (a receiver thread and a listener call per frame: the
load generator would be what is measured) but a lean STOMP 1.2 client on a blocking
socket: the producer writes pre-encoded SEND frames a thousand at a time, the consumer
splits what it reads at each frame's end with ``bytes.find`` and ``content-length``.

Why the producer asks for a receipt every ``RECEIPT_EVERY`` frames and never runs
more than ``MAX_AHEAD`` frames past the last receipt: STOMP has no flow control of
its own, so a producer that only waits for the socket measures how fast the kernel
and the broker's read buffer swallow bytes, not how fast the broker routes messages;
the broker would also hold an unbounded backlog in memory, and a full queue (an
auto-created one holds 100,000) would stop reading the producer or, set to
REJECT_NEWEST, refuse messages. A receipt is written after the SEND before it has been routed (S10.2), so
a window of two batches keeps the broker busy while bounding the work in flight, and
``producer_msgs_per_s`` (first SEND to the last receipt) is a rate of routed messages.

Run ``python bench/stomp_throughput.py --help``; ``bench/run.py`` runs every scenario.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import amqp_throughput  # noqa: E402
from amqp_throughput import broker_cpu, cpu_fields  # noqa: E402
from amqp_throughput import (  # noqa: E402
    CLOSE_GRACE, FIRST_MESSAGE_WARNING, READY_TIMEOUT, BenchError, _emit, _fail,
    _one_line, _rate,
)
from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

SCENARIOS = ("auto", "client")
#: SUBSCRIBE's ``ack`` header for each scenario.
ACK_MODES = {"auto": "auto", "client": "client-individual"}
DEFAULT_ADDRESS = "/queue/bench.throughput"
#: The producer asks for a RECEIPT on every this many SEND frames...
RECEIPT_EVERY = 1000
#: ... and never writes more than this many frames past the last RECEIPT it has read.
MAX_AHEAD = 2000
#: Once messages flow, this long without a byte from the broker is a stall.
STALL_TIMEOUT = 30.0
RECV_SIZE = 1 << 18


# --- a lean STOMP 1.2 client ---------------------------------------------------------

class StompError(Exception):
    """The broker sent an ERROR frame, closed the connection, or went quiet."""


def encode_frame(command, headers, body=b""):
    """One frame's bytes; the values used here need no STOMP escaping."""
    lines = [command] + [f"{name}:{value}" for name, value in headers]
    if body:
        lines.append(f"content-length:{len(body)}")
    return ("\n".join(lines) + "\n\n").encode("utf-8") + body + b"\x00"


def header(head, name):
    """The value of header C{name} (bytes) in a frame's header block, or None."""
    key = b"\n" + name + b":"
    start = head.find(key)
    if start < 0:
        return None
    start += len(key)
    end = head.find(b"\n", start)
    return head[start:] if end < 0 else head[start:end]


class FrameReader:
    """Splits a byte stream into C{(command, head, body)} frames.

    C{head} is the command and header lines (bytes, no trailing blank line); headers
    are looked up with L{header} only when needed, so counting MESSAGE frames costs two
    C{find}s and a slice each. Heart-beat EOLs between frames are skipped.
    """

    def __init__(self):
        self._buffer = b""

    def feed(self, data):
        """Add received bytes; return the frames they complete, in order."""
        buf = self._buffer + data if self._buffer else data
        frames = []
        pos, size = 0, len(buf)
        while pos < size:
            if buf[pos] in (10, 13):    # a heart-beat (EOL) between frames
                pos += 1
                continue
            end = buf.find(b"\n\n", pos)
            if end < 0:
                break
            head = buf[pos:end]
            start = end + 2
            marker = head.rfind(b"\ncontent-length:")
            if marker >= 0:
                stop = head.find(b"\n", marker + 1)
                length = int(head[marker + 16:stop if stop > 0 else len(head)])
                nul = start + length
                if nul >= size:
                    break
                if buf[nul] != 0:
                    raise StompError(f"frame body not followed by NUL: {head[:200]!r}")
            else:
                nul = buf.find(b"\x00", start)
                if nul < 0:
                    break
            command = head[:head.find(b"\n")] if b"\n" in head else head
            frames.append((command, head, buf[start:nul]))
            pos = nul + 1
        self._buffer = buf[pos:]
        return frames


def _error_text(head, body):
    message = header(head, b"message") or b"(no message header)"
    detail = body.decode("utf-8", "replace").strip()
    text = "ERROR frame from the broker: " + message.decode("utf-8", "replace")
    return f"{text}: {detail}" if detail else text


class StompClient:
    """One blocking STOMP 1.2 connection to the broker.

    @ivar sock: the socket (blocking, with a timeout: every read has a deadline).
    @ivar reader: the connection's L{FrameReader}.
    """

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader()
        self.pending = []          # frames read but not yet asked for

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            # The broker may have sent an ERROR frame and closed: that is the reason.
            raise StompError(f"send failed ({e}){self._last_words()}") from None

    def _last_words(self):
        try:
            self.sock.settimeout(1.0)
            frames = self.reader.feed(self.sock.recv(RECV_SIZE))
        except OSError:
            return ""
        for command, head, body in frames:
            if command == b"ERROR":
                return ": " + _error_text(head, body)
        return ""

    def read_frames(self):
        """Block for the next bytes; return the frames they complete (maybe none).

        @raise StompError: the connection closed, or the socket timeout passed.
        """
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        try:
            data = self.sock.recv(RECV_SIZE)
        except socket.timeout:
            raise StompError(f"nothing from the broker for {self.sock.gettimeout()} s") \
                from None
        except OSError as e:
            raise StompError(f"connection failed: {e}") from None
        if not data:
            raise StompError("the broker closed the connection")
        return self.reader.feed(data)

    def expect(self, command, receipt=None):
        """Read until a C{command} frame (with C{receipt-id} C{receipt}) arrives.

        Frames before it are kept for L{read_frames}; an ERROR frame raises.
        """
        skipped = []
        while True:
            frames = self.read_frames()
            for index, frame in enumerate(frames):
                name, head, body = frame
                if name == b"ERROR":
                    raise StompError(_error_text(head, body))
                if name == command and (receipt is None or
                                        header(head, b"receipt-id") == receipt):
                    self.pending = skipped + frames[index + 1:]
                    return head
                skipped.append(frame)

    def connect(self, user, password):
        headers = [("accept-version", "1.2"), ("host", "/"), ("heart-beat", "0,0")]
        if user:
            headers += [("login", user), ("passcode", password)]
        self.send(encode_frame("CONNECT", headers))
        self.expect(b"CONNECTED")

    def subscribe(self, destination, sub_id, ack, prefetch):
        """SUBSCRIBE and wait for its RECEIPT: then the consumer exists in the broker."""
        receipt = f"subscribed-{sub_id}"
        self.send(encode_frame("SUBSCRIBE", [
            ("id", sub_id), ("destination", destination), ("ack", ack),
            ("activemq.prefetchSize", prefetch), ("receipt", receipt)]))
        self.expect(b"RECEIPT", receipt.encode())

    def disconnect(self, grace):
        """DISCONNECT with a receipt; a broker that does not answer is reported."""
        try:
            self.sock.settimeout(grace)
            self.send(encode_frame("DISCONNECT", [("receipt", "bye")]))
            self.expect(b"RECEIPT", b"bye")
        except StompError as e:
            print(f"warning: DISCONNECT not completed within {grace} s: {e}",
                  file=sys.stderr, flush=True)
        finally:
            self.sock.close()


def open_client(options, host, port, timeout=READY_TIMEOUT):
    """Connect and log in; L{StompError} (refused, ERROR frame) says why not."""
    try:
        client = StompClient(host, port, timeout)
    except OSError as e:
        raise StompError(f"cannot connect to {host}:{port}: {e}") from None
    client.connect(options.user, options.password)
    return client


def parse_url(url):
    """C{stomp://host:port} or C{host:port} -> C{(host, port)}."""
    text = url.split("://", 1)[-1].rstrip("/")
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"expected stomp://HOST:PORT, got {url!r}")
    return host, int(port)


# --- the two clients (run in subprocesses) --------------------------------------------

def send_messages(client, options, deadline):
    """Send C{options.messages} SEND frames with receipts; return (first, done) times."""
    body = b"x" * options.size
    # Encoded once: the producer's own encoding cost is not what we measure.
    frame = encode_frame("SEND", [("destination", options.address)], body)
    full_batch = frame * (RECEIPT_EVERY - 1)
    sent = confirmed = 0
    first = time.perf_counter()
    while sent < options.messages:
        count = min(RECEIPT_EVERY, options.messages - sent)
        target = sent + count
        while target - confirmed > MAX_AHEAD:
            confirmed = _read_receipts(client, confirmed, deadline, sent)
        batch = full_batch if count == RECEIPT_EVERY else frame * (count - 1)
        client.send(batch + encode_frame(
            "SEND", [("destination", options.address), ("receipt", target)], body))
        sent = target
    while confirmed < sent:
        confirmed = _read_receipts(client, confirmed, deadline, sent)
    return first, time.perf_counter()


def _read_receipts(client, confirmed, deadline, sent):
    """Read frames; return the highest count confirmed by a RECEIPT so far."""
    if time.monotonic() > deadline:
        raise StompError(f"deadline passed: sent {sent}, {confirmed} confirmed")
    try:
        frames = client.read_frames()
    except StompError as e:
        raise StompError(f"{e} (sent {sent}, {confirmed} confirmed)") from None
    for command, head, body in frames:
        if command == b"RECEIPT":
            confirmed = max(confirmed, int(header(head, b"receipt-id")))
        elif command == b"ERROR":
            raise StompError(f"{_error_text(head, body)} (sent {sent}, "
                             f"{confirmed} confirmed)")
    return confirmed


def run_producer(options):
    """Send the messages; print a JSON result line, then disconnect."""
    host, port = parse_url(options.url)
    deadline = time.monotonic() + options.timeout
    try:
        client = open_client(options, host, port)
        client.sock.settimeout(STALL_TIMEOUT)
        first, done = send_messages(client, options, deadline)
    except StompError as e:
        _fail("producer", str(e))
    seconds = done - first
    _emit(role="producer", sent=options.messages, seconds=seconds,
          msgs_per_s=_rate(options.messages, seconds))
    client.disconnect(CLOSE_GRACE)


def run_consumer(options):
    """Subscribe, print ``ready``, count the messages; print a JSON result line."""
    host, port = parse_url(options.url)
    deadline = time.monotonic() + options.timeout
    client_ack = ACK_MODES[options.mode] != "auto"
    try:
        client = open_client(options, host, port)
        client.subscribe(options.address, "0", ACK_MODES[options.mode], options.prefetch)
        attached = time.perf_counter()
        print("ready", flush=True)
        client.sock.settimeout(min(options.timeout, STALL_TIMEOUT))
        received, first, last = _receive(client, options, client_ack, deadline)
    except StompError as e:
        _fail("consumer", str(e))
    seconds = last - first
    _emit(role="consumer", received=received, seconds=seconds,
          msgs_per_s=_rate(received, seconds), wait_for_first_s=round(first - attached, 3))
    client.disconnect(CLOSE_GRACE)


def _receive(client, options, client_ack, deadline):
    """Count MESSAGE frames (ACKing each one in client mode) up to C{options.messages}."""
    received, first, now = 0, None, None
    wanted = options.messages
    acks = []
    while received < wanted:
        if time.monotonic() > deadline:
            raise StompError(f"timeout after {options.timeout} s: received {received} "
                             f"of {wanted}")
        try:
            frames = client.read_frames()
        except StompError as e:
            raise StompError(f"{e} (received {received} of {wanted})") from None
        now = time.perf_counter()
        for command, head, body in frames:
            if command == b"MESSAGE":
                received += 1
                if client_ack:
                    acks.append(b"ACK\nid:" + header(head, b"ack") + b"\n\n\x00")
            elif command == b"ERROR":
                raise StompError(f"{_error_text(head, body)} (received {received})")
        if first is None and received:
            first = now
        if acks:
            client.send(b"".join(acks))
            acks.clear()
    return received, first, now


# --- coordinating one scenario ------------------------------------------------------

class ScriptChild(amqp_throughput.Child):
    """L{amqp_throughput.Child} for a role of another bench script."""

    def __init__(self, script, role, args, label=None):
        self.role = label or role
        self.lines = []
        self._done = False
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, str(script), role, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()


def client_args(options, url, mode, address=None, messages=None):
    """The command line of a client role of this script."""
    return ["--url", url, "--address", address or options.address, "--mode", mode,
            "--messages", str(messages or options.messages), "--size", str(options.size),
            "--prefetch", str(options.prefetch), "--timeout", str(options.timeout),
            "--user", options.user, "--password", options.password]


def run_pair(script, args, options):
    """Run C{script}'s consumer role, once it is ready its producer role, both with
    C{args}; wait for both results within the scenario's time-out, close both (or
    kill them on a failure). @return: C{(producer result, consumer result)}."""
    children = []
    try:
        consumer = ScriptChild(script, "consume", args)
        children.append(consumer)
        consumer.wait_for_line("ready", READY_TIMEOUT)
        producer = ScriptChild(script, "produce", args)
        children.append(producer)
        deadline = time.monotonic() + options.timeout + READY_TIMEOUT
        sent = producer.result(max(1.0, deadline - time.monotonic()))
        got = consumer.result(max(1.0, deadline - time.monotonic()))
        for child in children:
            child.close(CLOSE_GRACE)
    finally:
        for child in children:
            child.kill()
    return sent, got


def measure(options, url, mode, broker_pid=None):
    """Run consumer then producer against C{url}; return the scenario's JSON dict."""
    args = client_args(options, url, mode)
    cpu_before = broker_cpu(broker_pid)
    sent, got = run_pair(__file__, args, options)
    if got["wait_for_first_s"] > FIRST_MESSAGE_WARNING:
        print(f"warning: stomp-queue-{mode}: the first message reached the "
              f"consumer {got['wait_for_first_s']} s after it subscribed",
              file=sys.stderr, flush=True)
    result = {
        "scenario": f"stomp-queue-{mode}",
        "messages": got["received"],
        "size": options.size,
        "msgs_per_s": got["msgs_per_s"],
        "seconds": round(got["seconds"], 3),
        "producer_msgs_per_s": sent["msgs_per_s"],
    }
    result.update(cpu_fields(cpu_before, broker_cpu(broker_pid), got["received"]))
    return result


def with_broker(options, service, run):
    """Start a broker, call C{run(host, port, pid)} with C{service}'s address, stop it.

    On failure the broker's last lines go to stderr: a stall or a traceback there is
    usually the reason a client gave up.
    """
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-") as varhome:
        broker = BrokerProcess(varhome, defines=dict(options.define))
        try:
            try:
                host, port = broker.spawn().address(service)
            except BrokerError as e:
                raise BenchError(f"the broker did not start: {e}") from None
            try:
                return run(host, port, broker.pid)
            except BenchError:
                tail = "".join(broker.output[-20:]).rstrip()
                print(f"--- broker output (last lines) ---\n{tail}\n--- end ---",
                      file=sys.stderr, flush=True)
                raise
        finally:
            try:
                code = broker.terminate()
                if code != 0:
                    print(f"warning: the broker exited with code {code} on SIGTERM",
                          file=sys.stderr, flush=True)
            except BrokerError as e:
                print(f"warning: the broker did not stop on SIGTERM: "
                      f"{str(e).splitlines()[0]}", file=sys.stderr, flush=True)
            broker.kill()


def run_scenario(options, mode):
    """One scenario on a new broker (or on ``options.url``); return its JSON dict."""
    if options.url:
        return measure(options, options.url, mode)
    return with_broker(options, "stomp", lambda host, port, pid: measure(
        options, f"stomp://{host}:{port}", mode, pid))


def failure_line(scenario, options, error):
    """Print the error on stderr; return the scenario's JSON line with ``error``."""
    print(f"{scenario}: {error}", file=sys.stderr, flush=True)
    return {"scenario": scenario, "messages": options.messages, "size": options.size,
            "error": _one_line(str(error))}


def scenario_line(options, mode):
    """The scenario's one JSON line: its measurement, or its error."""
    try:
        return run_scenario(options, mode)
    except BenchError as e:
        return failure_line(f"stomp-queue-{mode}", options, e)


def options_from(run_options):
    """This script's options from bench/run.py's (its own address, ``--stomp-url``)."""
    options = argparse.Namespace(**vars(run_options))
    options.address = DEFAULT_ADDRESS
    options.url = getattr(run_options, "stomp_url", None)
    return options


# --- command line ------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="STOMP queue throughput through mqgate; one JSON line per scenario.")
    parser.add_argument("role", nargs="?", default="bench",
                        choices=("bench", "consume", "produce"),
                        help="bench (default) runs scenarios; consume/produce are "
                             "the client subprocesses")
    amqp_throughput.add_common_arguments(parser)
    parser.set_defaults(address=DEFAULT_ADDRESS)
    parser.add_argument("--mode", "--scenario", dest="mode", default="all",
                        choices=SCENARIOS + ("all",))
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="extra broker setting (repeatable)")
    options = parser.parse_args(argv)
    if options.role != "bench" and (options.url is None or options.mode == "all"):
        parser.error(f"{options.role} needs --url and --mode auto|client")
    if options.messages < 1:
        parser.error("--messages must be at least 1")
    return options


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    roles = {"consume": run_consumer, "produce": run_producer}
    scenarios = SCENARIOS if options.mode == "all" else (options.mode,)
    return amqp_throughput.run_roles(options, roles, scenarios, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
