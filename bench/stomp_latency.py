"""STOMP 1.2 latency at a steady rate: one producer, one consumer, one queue.

A throughput run measures how much the broker moves when it is saturated; this one
measures how long one message takes when it is not. The producer sends SEND frames at
a fixed rate (``--rate``, 2,000 a second by default), each carrying its send time; the
consumer, subscribed with ``ack:auto`` on its own connection in the same process, notes
when each MESSAGE arrives. Both use the lean blocking client of
``stomp_throughput.py`` (TCP_NODELAY on), so the figures are the broker's plus two
loopback hops. The first second is a warm-up and is left out. One JSON line::

    {"scenario": "stomp-latency-2000", "messages": 20000, "size": 256, "rate": 2000,
     "p50_ms": ..., "p99_ms": ..., "max_ms": ..., "achieved_rate": ...}

``bench/run.py`` runs it as the scenario ``stomp-latency-2000``. The load generator is our own (not comparable with other brokers' figures measured with
another generator). Run ``python bench/stomp_latency.py --help``.
"""

import argparse
import json
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stomp_throughput import (  # noqa: E402
    BenchError, StompError, encode_frame, open_client, parse_url, with_broker)

#: Seconds at the start whose messages are not counted (imports, first allocations).
WARM_UP = 1.0
#: Seconds the consumer waits for the last message before giving up.
DRAIN_TIMEOUT = 10.0
#: The steady rate and how long it lasts: the light load the issue's peers were
#: measured at (2,000 messages a second).
DEFAULT_RATE = 2000
DEFAULT_SECONDS = 10.0
DEFAULT_ADDRESS = "/queue/bench.latency"


def percentile(sorted_values, fraction):
    """The value below which C{fraction} of C{sorted_values} lie (nearest rank)."""
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def run(options, host, port):
    """Send at the rate for the duration; return the latencies in seconds."""
    consumer = open_client(options, host, port)
    producer = open_client(options, host, port)
    consumer.subscribe(options.address, "lat", "auto", 1000)
    total = int(options.rate * options.seconds)
    padding = b"x" * max(0, options.size - 12)
    arrivals = {}
    done = threading.Event()

    def consume():
        try:
            while len(arrivals) < total:
                for command, _head, body in consumer.read_frames():
                    if command == b"MESSAGE":
                        number, _sent = struct.unpack_from("!Id", body)
                        arrivals[number] = time.monotonic()
        except StompError as e:
            print(f"consumer: {e}", file=sys.stderr, flush=True)
        finally:
            done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    sent_at = []
    start = time.monotonic()
    for number in range(total):
        due = start + number / options.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic()
        sent_at.append(now)
        body = struct.pack("!Id", number, now) + padding
        producer.send(encode_frame("SEND", [("destination", options.address),
                                            ("content-length", str(len(body)))], body))
    finished = time.monotonic()
    consumer.sock.settimeout(DRAIN_TIMEOUT)
    done.wait(DRAIN_TIMEOUT + 1)
    producer.disconnect(5)
    missing = total - len(arrivals)
    if missing:
        raise BenchError(f"{missing} of {total} messages did not arrive")
    first = int(WARM_UP * options.rate)
    latencies = sorted(arrivals[n] - sent_at[n] for n in range(first, total))
    return latencies, total / (finished - start)


def scenario_line(options, mode=None):
    """Run the scenario on a new broker (or on ``options.url``); return its JSON dict."""
    name = f"stomp-latency-{options.rate}"
    try:
        if options.url:
            host, port = parse_url(options.url)
            latencies, achieved = run(options, host, port)
        else:
            latencies, achieved = with_broker(
                options, "stomp", lambda host, port, _pid: run(options, host, port))
    except (BenchError, StompError) as e:
        print(f"{name}: {e}", file=sys.stderr, flush=True)
        return {"scenario": name, "error": str(e)}
    return {
        "scenario": name, "messages": len(latencies), "size": options.size,
        "rate": options.rate,
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
        "achieved_rate": round(achieved, 1)}


def options_from(run_options):
    """This script's options from bench/run.py's (a fixed rate and duration)."""
    return argparse.Namespace(
        rate=DEFAULT_RATE, seconds=DEFAULT_SECONDS, size=max(12, run_options.size),
        address=DEFAULT_ADDRESS, user=run_options.user, password=run_options.password,
        url=getattr(run_options, "stomp_url", None), define=run_options.define)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE, help="messages a second")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                        help="how long to send")
    parser.add_argument("--size", type=int, default=256, help="body bytes (at least 12)")
    parser.add_argument("--address", default=DEFAULT_ADDRESS)
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--url", help="stomp://HOST:PORT of a running broker")
    parser.add_argument("-D", dest="define", action="append", default=[],
                        type=lambda text: tuple(text.split("=", 1)), metavar="KEY=VALUE",
                        help="broker setting (repeatable)")
    line = scenario_line(parser.parse_args(argv))
    print(json.dumps(line))
    return 1 if "error" in line else 0


if __name__ == "__main__":
    sys.exit(main())
