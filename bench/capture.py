"""
What capture costs a producer: core throughput of one queue with one consumer,
without a capture, with a capture that keeps up, and with a flooded one (the bounds
that keep a flooded capture cheap are S7.4, docs/requirements.md).

Scenarios, one JSON line each:
 - capture-none: 200,000 messages through a queue to an at-least-once consumer (the
   core-queue scenario of core_bench.py);
 - capture-on: the same with a capture subscription on the queue whose bounds never
   bite (a rate above the test's and a ring the drain empties every 1,000 messages,
   the clock moved on as the reactor would): every message is copied and handed on;
 - capture-flooded: the same with the default bounds (500 copies a second, a ring of
   10,000) and the clock standing still: all but the first 500 copies are dropped
   and counted.
Each line has ``ratio``: its rate over capture-none's (1.0: capture costs nothing).
The core alone, no sockets: the cost a capture adds on the broker's reactor thread.

Then the same three over the network (``amqp-capture-none``, ``-on``, ``-flooded``):
one real broker, a Proton producer and consumer per scenario (bench/amqp_throughput.py,
presettled) on a queue of their own, the capture installed through the HTTP admin API.
``ratio`` there compares the producer's rate (``producer_msgs_per_s``), which is what
capture must not slow, and ``broker_cpu_ratio`` the broker's CPU time per message;
``--core-only`` skips them.

Run: python bench/capture.py [--messages N] [--core-only]
"""

import argparse
import base64
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from time import perf_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twisted.internet.task import Clock  # noqa: E402

from mqgate.core import Broker, BrokerMessage  # noqa: E402
from mqgate.core.capture import (  # noqa: E402
    DRAIN_INTERVAL, CaptureBounds, CaptureConfig, Captures)
from mqgate.core.capture_sinks import CountingSink  # noqa: E402

from bench import amqp_throughput  # noqa: E402
from bench.core_bench import PAYLOAD, RefillingTarget, _consumer  # noqa: E402
from tests.e2e.broker import BrokerProcess  # noqa: E402

DRAIN_EVERY = 1000


def run(count, bounds=None, advance=False):
    clock = Clock()
    broker = Broker(clock)
    sink = CountingSink()
    if bounds is not None:
        broker.captures = Captures(broker, clock, CaptureConfig(bounds=bounds), sink)
        broker.captures.install("bench", "queue://bench")
    target = RefillingTarget()
    _consumer(broker, "queue://bench", target)
    producer = broker.open_producer("queue://bench")
    send = producer.send
    started = perf_counter()
    for i in range(count):
        send(BrokerMessage(PAYLOAD))
        if advance and i % DRAIN_EVERY == DRAIN_EVERY - 1:
            clock.advance(DRAIN_INTERVAL)
    clock.advance(DRAIN_INTERVAL)
    elapsed = perf_counter() - started
    assert target.received == count, target.received
    figures = sink.figures("bench")
    return count / elapsed, figures


def _install(broker, name, address, bounds):
    # PUT /api/captures/NAME as the shipped admin user.
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.port('httpadmin')}/api/captures/{name}", method="PUT",
        data=json.dumps({"address": address, "bounds": bounds}).encode(),
        headers={"Authorization": "Basic " + base64.b64encode(b"admin:admin").decode()})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def network(count):
    """The three scenarios over AMQP on one broker; their JSON lines."""
    options = argparse.Namespace(
        messages=count, size=len(PAYLOAD), prefetch=amqp_throughput.DEFAULT_PREFETCH,
        timeout=amqp_throughput.DEFAULT_TIMEOUT, user="guest", password="guest")
    lines = []
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-capture-") as varhome:
        broker = BrokerProcess(varhome)
        try:
            host, port = broker.spawn().address("jms")
            url = f"amqp://{host}:{port}"
            for scenario, bounds in (("amqp-capture-none", None),
                                     ("amqp-capture-on", {"rate": 1000000}),
                                     ("amqp-capture-flooded", {})):
                options.address = f"bench.{scenario}"
                if bounds is not None:
                    _install(broker, scenario.replace("-", "_"),
                             f"queue://{options.address}", bounds)
                result = amqp_throughput.measure(options, url, "presettled", broker.pid)
                result["scenario"] = scenario
                lines.append(result)
            broker.terminate()
        finally:
            broker.kill()
    base = lines[0]["producer_msgs_per_s"]
    cpu = lines[0].get("broker_cpu_us_per_msg")
    for line in lines:
        line["ratio"] = round(line["producer_msgs_per_s"] / base, 3) if base else None
        if cpu and line.get("broker_cpu_us_per_msg"):
            # The broker's own CPU per message over capture-none's: the Python load
            # generator often bounds the producer's rate before the broker does.
            line["broker_cpu_ratio"] = round(line["broker_cpu_us_per_msg"] / cpu, 3)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--core-only", action="store_true",
                        help="skip the scenarios over the network")
    args = parser.parse_args(argv)
    count = args.messages
    base, _ = run(count)
    on, on_figures = run(count, CaptureBounds(rate=1e9, ring_size=10_000), advance=True)
    flooded, flood_figures = run(count, CaptureBounds())
    assert on_figures["copies"] == count, on_figures
    for scenario, rate, figures in (("capture-none", base, None),
                                    ("capture-on", on, on_figures),
                                    ("capture-flooded", flooded, flood_figures)):
        line = {"scenario": scenario, "messages": count, "msgs_per_s": round(rate),
                "ratio": round(rate / base, 3)}
        if figures is not None:
            line.update(copies=figures["copies"],
                        dropped=sum(figures["dropped"].values()))
        print(json.dumps(line), flush=True)
    if not args.core_only:
        try:
            for line in network(count):
                print(json.dumps(line), flush=True)
        except Exception as e:    # one line saying why, as every benchmark does
            print(json.dumps({"scenario": "amqp-capture", "error": str(e)}))


if __name__ == "__main__":
    main()
