"""
What capture costs a producer (S7.4): core throughput of one queue with one consumer,
without a capture, with a capture that keeps up, and with a flooded one.

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

Run: python bench/capture.py [--messages N]
"""

import argparse
import json
import sys
from pathlib import Path
from time import perf_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twisted.internet.task import Clock  # noqa: E402

from mqgate.core import Broker, BrokerMessage  # noqa: E402
from mqgate.core.capture import (  # noqa: E402
    DRAIN_INTERVAL, CaptureBounds, CaptureConfig, Captures)
from mqgate.core.capture_sinks import CountingSink  # noqa: E402

from bench.core_bench import PAYLOAD, RefillingTarget, _consumer  # noqa: E402

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
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
        print(json.dumps(line))


if __name__ == "__main__":
    main()
