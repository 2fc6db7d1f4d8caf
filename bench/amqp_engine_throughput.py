"""AMQP 1.0 queue throughput with a lean load generator: mqgate's own AMQP engine.

The scenarios of bench/amqp_throughput.py drive the broker with Python Proton, whose
per-message cost in the client (building and encoding a Message, decoding it again)
saturates a core before the broker does: those figures measure Proton as much as
mqgate. These drive the same broker, over real sockets, with a client made of
mqgate's sans-IO engine (the engine the client library will use) that sends one
pre-encoded message again and again and only counts what it receives. Same shape as the
other scenarios: one producer process, one consumer process, one queue, 200,000
messages of 256 bytes; ``presettled`` and ``unsettled`` (the consumer accepts each
delivery; the producer counts the broker's outcomes).

    python bench/amqp_engine_throughput.py [--messages N] [--mode presettled|unsettled]
"""

import argparse
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

import amqp_throughput  # noqa: E402
import stomp_throughput  # noqa: E402
from amqp_throughput import BenchError, _emit, _fail, _rate  # noqa: E402
from tests.e2e.engine_client import EngineClient  # noqa: E402

from mqgate.amqp.events import DeliveriesSettled, MessageReceived  # noqa: E402
from mqgate.amqp.message import encode_message  # noqa: E402
from mqgate.amqp.performatives import (  # noqa: E402
    RECEIVER, SENDER, SND_SETTLED, SND_UNSETTLED, Accepted,
)

SCENARIOS = ("presettled", "unsettled")
READY_TIMEOUT = amqp_throughput.READY_TIMEOUT
CLOSE_GRACE = 5.0
# The producer writes in batches of this many transfers per socket write.
BATCH = 200
# A client that hears nothing from the broker for this long gives up (a stall).
STALL_TIMEOUT = 30.0


def _client(options, timeout):
    """The lean client (tests/e2e/engine_client.py) on C{options.url}."""
    host, port = options.url.rsplit("//", 1)[1].rsplit(":", 1)
    credentials = (options.user, options.password) if options.user else "ANONYMOUS"
    return EngineClient((host, int(port)), f"bench-{options.mode}",
                        credentials=credentials, timeout=timeout)


def run_producer(options):
    """Send the messages as credit allows; print a JSON result line."""
    presettled = options.mode == "presettled"
    payload = encode_message(b"x" * options.size)
    try:
        client = _client(options, STALL_TIMEOUT)
        link = client.open_link(SENDER, options.address,
                                SND_SETTLED if presettled else SND_UNSETTLED)
        sent = settled = 0
        first = None
        while settled < options.messages:
            batch = 0
            while link.credit and sent < options.messages and batch < BATCH:
                link.send(payload, settled=presettled)
                sent += 1
                batch += 1
            if first is None and sent:
                first = time.perf_counter()
            if presettled:
                settled = sent
            client.flush()
            if settled >= options.messages:
                break
            if not link.credit or not presettled or batch < BATCH:
                for event in client.read():
                    if isinstance(event, DeliveriesSettled):
                        settled += len(event.deliveries)
        done = time.perf_counter()
    except (OSError, BenchError) as e:
        _fail("producer", str(e))
    _emit(role="producer", sent=sent, seconds=done - first,
          msgs_per_s=_rate(sent, done - first), outcomes={"accepted": settled})
    client.close(CLOSE_GRACE)


def run_consumer(options):
    """Attach, print ``ready``, count the messages; print a JSON result line."""
    presettled = options.mode == "presettled"
    try:
        client = _client(options, READY_TIMEOUT)
        link = client.open_link(RECEIVER, options.address,
                                SND_SETTLED if presettled else SND_UNSETTLED)
        link.flow(options.prefetch)
        client.flush()
        attached = time.perf_counter()
        print("ready", flush=True)
        client.sock.settimeout(options.timeout)
        received = 0
        first = last = None
        accepted = Accepted()
        while received < options.messages:
            for event in client.read():
                if isinstance(event, MessageReceived):
                    received += 1
                    if not event.settled:
                        link.settle(event.delivery_id, accepted)
            now = time.perf_counter()
            first = first or now
            last = now
            if link.credit < options.prefetch // 2:
                link.flow(options.prefetch)
            client.flush()
    except (OSError, BenchError) as e:
        _fail("consumer", str(e))
    _emit(role="consumer", received=received, seconds=last - first,
          msgs_per_s=_rate(received, last - first),
          wait_for_first_s=round(first - attached, 3))
    client.close(CLOSE_GRACE)


def measure(options, url, mode, broker_pid=None):
    """Consumer first, then producer; the scenario's JSON dict."""
    args = ["--url", url, "--mode", mode, "--messages", str(options.messages),
            "--size", str(options.size), "--prefetch", str(options.prefetch),
            "--timeout", str(options.timeout), "--address", options.address,
            "--user", options.user, "--password", options.password]
    cpu_before = amqp_throughput.broker_cpu(broker_pid)
    sent, got = stomp_throughput.run_pair(__file__, args, options)
    result = {
        "scenario": f"amqp-engine-queue-{mode}",
        "messages": got["received"],
        "size": options.size,
        "msgs_per_s": got["msgs_per_s"],
        "seconds": round(got["seconds"], 3),
        "producer_msgs_per_s": sent["msgs_per_s"],
    }
    result.update(amqp_throughput.cpu_fields(
        cpu_before, amqp_throughput.broker_cpu(broker_pid), got["received"]))
    return result


def scenario_line(options, mode):
    """The scenario's one JSON line: its measurement, or its error."""
    try:
        if options.url:
            return measure(options, options.url, mode)
        return stomp_throughput.with_broker(options, "jms", lambda host, port, pid: measure(
            options, f"amqp://{host}:{port}", mode, pid))
    except BenchError as e:
        return stomp_throughput.failure_line(f"amqp-engine-queue-{mode}", options, e)


def options_from(run_options):
    """This script's options from bench/run.py's."""
    options = argparse.Namespace(**vars(run_options))
    options.address = amqp_throughput.DEFAULT_ADDRESS
    options.url = getattr(run_options, "url", None)
    return options


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="AMQP queue throughput through mqgate driven by mqgate's own AMQP "
                    "engine as the load generator; one JSON line per scenario.")
    parser.add_argument("role", nargs="?", default="bench",
                        choices=("bench", "consume", "produce"))
    amqp_throughput.add_common_arguments(parser)
    parser.add_argument("--mode", "--scenario", dest="mode", default="all",
                        choices=SCENARIOS + ("all",))
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE")
    options = parser.parse_args(argv)
    if options.role != "bench" and (options.url is None or options.mode == "all"):
        parser.error(f"{options.role} needs --url and --mode presettled|unsettled")
    return options


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    roles = {"consume": run_consumer, "produce": run_producer}
    scenarios = SCENARIOS if options.mode == "all" else (options.mode,)
    return amqp_throughput.run_roles(options, roles, scenarios, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
