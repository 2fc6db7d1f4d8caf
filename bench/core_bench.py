"""
Broker core throughput (no I/O): how many messages per second the core moves.

Scenarios, one JSON line each (like every benchmark; they print one JSON line per
scenario and are not part of the test suite):
 - core-queue: 200,000 messages through one queue to one at-least-once consumer; the
   consumer's target settles in batches and refills its credit when it falls below half,
   like the AMQP glue answering a client's flow frames.
 - core-queue-backlog: the same messages enqueued first, then drained by credit refills.
 - core-topic-fanout: 50,000 messages on a topic with 4 pre-settled subscribers
   (msgs_per_s counts published messages).

Run: python bench/core_bench.py [--messages N]
"""

import argparse
import json
import sys
from pathlib import Path
from time import perf_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twisted.internet.task import Clock  # noqa: E402

from mqgate.core import Broker, BrokerMessage  # noqa: E402

CREDIT = 1000
PAYLOAD = b"x" * 256


class RefillingTarget:
    """Accepts in batches of half the credit and tops the credit back up."""

    def __init__(self):
        self.consumer = None
        self.pending = []
        self.received = 0

    def deliver(self, delivery):
        self.received += 1
        pending = self.pending
        pending.append(delivery)
        if len(pending) >= CREDIT // 2:
            settle = self.consumer.settle
            for each in pending:
                settle(each)
            pending.clear()
            self.consumer.set_credit(CREDIT)


class CountingTarget:
    """Counts deliveries (for pre-settled consumers)."""

    def __init__(self):
        self.consumer = None
        self.received = 0

    def deliver(self, delivery):
        self.received += 1
        if self.consumer.credit < CREDIT // 2:
            self.consumer.set_credit(CREDIT)


def _consumer(broker, address, target, **kwargs):
    consumer = broker.open_consumer(address, target, **kwargs)
    target.consumer = consumer
    consumer.set_credit(CREDIT)
    return consumer


def core_queue(count):
    broker = Broker(Clock())
    target = RefillingTarget()
    _consumer(broker, "queue://bench", target)
    producer = broker.open_producer("queue://bench")
    send = producer.send
    started = perf_counter()
    for _ in range(count):
        send(BrokerMessage(PAYLOAD))
    elapsed = perf_counter() - started
    assert target.received == count, target.received
    return count / elapsed


def core_queue_backlog(count):
    broker = Broker(Clock())
    producer = broker.open_producer("queue://bench")
    target = RefillingTarget()
    started = perf_counter()
    for _ in range(count):
        producer.send(BrokerMessage(PAYLOAD))
    _consumer(broker, "queue://bench", target)
    elapsed = perf_counter() - started
    assert target.received == count, target.received
    return count / elapsed


def core_topic_fanout(count, subscribers=4):
    broker = Broker(Clock())
    targets = [CountingTarget() for _ in range(subscribers)]
    for target in targets:
        _consumer(broker, "topic://bench.#", target, presettled=True)
    producer = broker.open_producer("topic://bench.prices")
    send = producer.send
    started = perf_counter()
    for _ in range(count):
        send(BrokerMessage(PAYLOAD))
    elapsed = perf_counter() - started
    assert all(t.received == count for t in targets)
    return count / elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args(argv)
    results = [
        ("core-queue", core_queue(args.messages)),
        ("core-queue-backlog", core_queue_backlog(args.messages)),
        ("core-topic-fanout", core_topic_fanout(args.messages // 4)),
    ]
    for scenario, rate in results:
        print(json.dumps({"scenario": scenario, "msgs_per_s": round(rate)}))


if __name__ == "__main__":
    main()
