"""Topic fan-out: one producer, one topic, ten consumers, through mqgate (AMQP and STOMP).

One scenario runs like this:

1. start a broker (the same ``BrokerProcess`` as the other benchmarks), unless
   ``--amqp-url``/``--stomp-url`` names one;
2. start the consumers: *one* process holding all ten (the machine has two cores,
   shared with the broker and the producer: ten consumer processes would measure the
   scheduler), each consumer on its own connection with its own subscription; the
   process prints ``ready`` once every subscription is attached, so no message is
   published to a topic with fewer than ten subscribers (a topic drops what nobody is
   subscribed to);
3. start the producer (the queue benchmarks' own: ``amqp_throughput.py produce``
   presettled, ``stomp_throughput.py produce`` with its receipt window) on the topic;
4. wait for both under deadlines and print one JSON line::

     {"scenario": "amqp-fanout-10", "messages": 20000, "consumers": 10, "size": 256,
      "deliveries": 200000, "deliveries_per_s": ..., "seconds": ...,
      "per_consumer_min": 20000, "per_consumer_max": 20000,
      "producer_msgs_per_s": ..., "broker_cpu_us_per_delivery": ...,
      "broker_one_core_deliveries_per_s": ...}

``deliveries_per_s`` is every message received by every consumer, divided by the time
from the first receive to the last over all consumers. Every consumer must receive
every message: a consumer short of ``messages`` fails the scenario (with the counts).

Consumers: AMQP, one Proton ``Container`` with ten receivers on ten connections,
at-most-once (presettled); STOMP, ten lean clients (``stomp_throughput.StompClient``)
with ``ack:auto`` in one ``selectors`` loop.

Run ``python bench/fanout.py --help``; ``bench/run.py`` runs both scenarios.
"""

import argparse
import selectors
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import amqp_throughput  # noqa: E402
import stomp_throughput  # noqa: E402
from amqp_throughput import (  # noqa: E402
    CLOSE_GRACE, FIRST_MESSAGE_WARNING, READY_TIMEOUT, BenchError, _emit, _fail, _rate,
    broker_cpu, cpu_fields,
)
from stomp_throughput import (  # noqa: E402
    RECV_SIZE, STALL_TIMEOUT, ScriptChild, StompError,
)

SCENARIOS = ("amqp", "stomp")
DEFAULT_MESSAGES = 20_000
DEFAULT_CONSUMERS = 10
ADDRESSES = {"amqp": "topic://bench.fanout", "stomp": "/topic/bench.fanout"}
#: How long the consumer process may take to connect and subscribe all consumers.
CONSUMERS_READY_TIMEOUT = READY_TIMEOUT * 2


def scenario_name(protocol, consumers):
    return f"{protocol}-fanout-{consumers}"


# --- the consumer processes -----------------------------------------------------------

class Tally:
    """Per-consumer counts and the first and last receive time over all of them."""

    def __init__(self, consumers, wanted):
        self.counts = [0] * consumers
        self.wanted = wanted
        self.complete = 0              # consumers that have all their messages
        self.first = self.last = None
        self.attached = None

    def add(self, index, count, now):
        if self.first is None:
            self.first = now
        self.last = now
        before = self.counts[index]
        self.counts[index] = before + count
        if before < self.wanted <= before + count:
            self.complete += 1

    @property
    def done(self):
        return self.complete == len(self.counts)

    def progress(self):
        return f"received {sum(self.counts)}, per consumer {self.counts}"

    def report(self, stalled=None):
        """Print the JSON result (also for a stall: the coordinator judges the counts)."""
        first = self.first if self.first is not None else self.attached
        last = self.last if self.last is not None else first
        total = sum(self.counts)
        seconds = last - first
        _emit(role="consumers", counts=self.counts, received=total, seconds=seconds,
              deliveries_per_s=_rate(total, seconds), stalled=stalled,
              wait_for_first_s=round(first - self.attached, 3))


def run_amqp_consumers(options):
    """Ten presettled receivers on ten connections in one Proton Container."""
    proton, handlers, reactor = amqp_throughput._proton()
    tally = Tally(options.consumers, options.messages)

    class Consumers(handlers.MessagingHandler):
        def __init__(self):
            super().__init__(prefetch=options.prefetch, auto_accept=False)
            self.connections = []
            self.opened = 0
            self.error = None
            self.reported = False
            self.deadline = time.monotonic() + options.timeout

        def on_start(self, event):
            for index in range(options.consumers):
                conn = amqp_throughput._connect(event.container, options)
                self.connections.append(conn)
                event.container.create_receiver(
                    conn, options.address, name=f"fanout-{index}",
                    options=reactor.AtMostOnce())
            event.container.schedule(1.0, self)

        def on_link_opened(self, event):
            if event.receiver is not None:
                self.opened += 1
                if self.opened == options.consumers:
                    tally.attached = time.perf_counter()
                    print("ready", flush=True)

        def on_message(self, event):
            event.delivery.settle()
            index = int(event.receiver.name.rsplit("-", 1)[1])
            tally.add(index, 1, time.perf_counter())
            if tally.done:
                self.finish()

        def finish(self, stalled=None):
            if not self.reported:
                self.reported = True
                tally.report(stalled)
                for conn in self.connections:
                    conn.close()

        def on_timer_task(self, event):
            # Once a second: the deadline, and a stall once messages flow.
            if self.reported:
                return
            if time.monotonic() > self.deadline:
                self.abort(event, f"timeout after {options.timeout} s: "
                                  + tally.progress())
            elif tally.last is not None and \
                    time.perf_counter() - tally.last > STALL_TIMEOUT:
                self.finish(stalled=f"no message for {STALL_TIMEOUT} s")
                event.container.schedule(CLOSE_GRACE, self)
            else:
                event.container.schedule(1.0, self)

        def abort(self, event, why):
            self.error = self.error or why
            event.container.stop()

        def on_transport_error(self, event):
            if not self.reported:
                self.abort(event, amqp_throughput._condition_text(
                    event.transport.condition, "transport error"))

        def on_link_error(self, event):
            self.abort(event, amqp_throughput._condition_text(
                event.link.remote_condition, "link closed by the broker"))

        def on_connection_error(self, event):
            self.abort(event, amqp_throughput._condition_text(
                event.connection.remote_condition, "connection closed by the broker"))

    handler = Consumers()
    reactor.Container(handler).run()
    if not handler.reported:
        _fail("consumers", (handler.error or "connections ended") + ": "
              + tally.progress())


def run_stomp_consumers(options):
    """Ten ``ack:auto`` subscriptions on ten connections in one selector loop."""
    host, port = stomp_throughput.parse_url(options.url)
    tally = Tally(options.consumers, options.messages)
    clients = []
    try:
        for index in range(options.consumers):
            client = stomp_throughput.open_client(options, host, port)
            client.subscribe(options.address, str(index), "auto", options.prefetch)
            clients.append(client)
        tally.attached = time.perf_counter()
        print("ready", flush=True)
        stalled = _select_loop(clients, tally, options)
    except StompError as e:
        _fail("consumers", f"{e}: {tally.progress()}")
    tally.report(stalled)
    for client in clients:
        client.disconnect(CLOSE_GRACE)


def _select_loop(clients, tally, options):
    """Read every socket as data comes; return None, or why the loop gave up early."""
    deadline = time.monotonic() + options.timeout
    selector = selectors.DefaultSelector()
    for index, client in enumerate(clients):
        selector.register(client.sock, selectors.EVENT_READ, (index, client))
        if client.pending:      # frames read along with the RECEIPT of SUBSCRIBE
            tally.add(index, _count(client.pending), time.perf_counter())
            client.pending = []
    while not tally.done:
        events = selector.select(1.0)
        now = time.perf_counter()
        if time.monotonic() > deadline:
            raise StompError(f"timeout after {options.timeout} s")
        if not events:
            if tally.last is not None and now - tally.last > STALL_TIMEOUT:
                return f"no message for {STALL_TIMEOUT} s"
            continue
        for key, _mask in events:
            index, client = key.data
            data = client.sock.recv(RECV_SIZE)
            if not data:
                raise StompError(f"the broker closed consumer {index}'s connection")
            tally.add(index, _count(client.reader.feed(data)), now)
    selector.close()
    return None


def _count(frames):
    count = 0
    for command, head, body in frames:
        if command == b"MESSAGE":
            count += 1
        elif command == b"ERROR":
            raise StompError(stomp_throughput._error_text(head, body))
    return count


# --- coordinating one scenario ------------------------------------------------------

def _producer(options, protocol, url):
    """The queue benchmark's own producer, pointed at the topic."""
    if protocol == "amqp":
        script = amqp_throughput.__file__
        args = amqp_throughput._client_args(options, url, "presettled")
    else:
        script = stomp_throughput.__file__
        args = stomp_throughput.client_args(options, url, "auto")
    return ScriptChild(script, "produce", args, label="producer")


def _consumer_args(options, url):
    return stomp_throughput.client_args(options, url, "auto") + [
        "--consumers", str(options.consumers)]


def measure(options, protocol, url, broker_pid=None):
    """Run the consumers, then the producer, against C{url}; return the JSON dict."""
    name = scenario_name(protocol, options.consumers)
    children = []
    try:
        consumers = ScriptChild(__file__, f"consume-{protocol}",
                                _consumer_args(options, url), label="consumers")
        children.append(consumers)
        consumers.wait_for_line("ready", CONSUMERS_READY_TIMEOUT)
        # From here: ten logins (a PBKDF2 hash each, ~50 ms of broker CPU) would add
        # about 3 us to every one of 200,000 deliveries (the producer's one, 0.3 us,
        # stays in, as in the queue scenarios).
        cpu_before = broker_cpu(broker_pid)
        producer = _producer(options, protocol, url)
        children.append(producer)
        deadline = time.monotonic() + options.timeout + READY_TIMEOUT
        sent = producer.result(max(1.0, deadline - time.monotonic()))
        got = consumers.result(max(1.0, deadline - time.monotonic()))
        for child in children:
            child.close(CLOSE_GRACE)
    finally:
        for child in children:
            child.kill()
    counts = got["counts"]
    if min(counts) != options.messages or max(counts) != options.messages:
        raise BenchError(f"consumers received {counts} of {options.messages} each"
                         f" ({got['stalled'] or 'more than sent'})")
    if got["wait_for_first_s"] > FIRST_MESSAGE_WARNING:
        print(f"warning: {name}: the first message reached a consumer "
              f"{got['wait_for_first_s']} s after they subscribed",
              file=sys.stderr, flush=True)
    result = {
        "scenario": name,
        "messages": options.messages,
        "consumers": options.consumers,
        "size": options.size,
        "deliveries": got["received"],
        "deliveries_per_s": got["deliveries_per_s"],
        "seconds": round(got["seconds"], 3),
        "per_consumer_min": min(counts),
        "per_consumer_max": max(counts),
        "producer_msgs_per_s": sent["msgs_per_s"],
    }
    result.update(cpu_fields(cpu_before, broker_cpu(broker_pid), got["received"],
                             "delivery", "deliveries"))
    return result


def run_scenario(options, protocol):
    """One scenario on a new broker (or on the URL given); return its JSON dict."""
    options = argparse.Namespace(**vars(options))
    options.address = ADDRESSES[protocol]
    url = options.amqp_url if protocol == "amqp" else options.stomp_url
    if url:
        return measure(options, protocol, url)
    service, scheme = ("jms", "amqp") if protocol == "amqp" else ("stomp", "stomp")
    return stomp_throughput.with_broker(options, service, lambda host, port, pid: measure(
        options, protocol, f"{scheme}://{host}:{port}", pid))


def scenario_line(options, protocol):
    """The scenario's one JSON line: its measurement, or its error."""
    try:
        return run_scenario(options, protocol)
    except BenchError as e:
        return stomp_throughput.failure_line(
            scenario_name(protocol, options.consumers), options, e)


def options_from(run_options):
    """This script's options from bench/run.py's: ``--messages`` counts *deliveries*.

    So that ``run.py --messages N`` moves N messages in every scenario, a fan-out to
    C consumers publishes N // C messages (200,000 -> 20,000 for ten consumers).
    """
    options = argparse.Namespace(**vars(run_options))
    options.consumers = getattr(run_options, "consumers", DEFAULT_CONSUMERS)
    options.messages = max(1, run_options.messages // options.consumers)
    options.amqp_url = run_options.url
    options.stomp_url = getattr(run_options, "stomp_url", None)
    return options


# --- command line ------------------------------------------------------------------

def add_fanout_arguments(parser):
    parser.add_argument("--consumers", type=int, default=DEFAULT_CONSUMERS,
                        help=f"subscribers on the topic (default {DEFAULT_CONSUMERS})")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Topic fan-out through mqgate; one JSON line per scenario.")
    parser.add_argument("role", nargs="?", default="bench",
                        choices=("bench", "consume-amqp", "consume-stomp"),
                        help="bench (default) runs scenarios; consume-* are the "
                             "consumer subprocesses")
    amqp_throughput.add_common_arguments(parser)
    parser.set_defaults(messages=DEFAULT_MESSAGES)
    add_fanout_arguments(parser)
    parser.add_argument("--protocol", "--scenario", dest="protocol", default="all",
                        choices=SCENARIOS + ("all",))
    parser.add_argument("--mode", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--amqp-url", default=None,
                        help="use the broker at this AMQP URL instead of starting one")
    parser.add_argument("--stomp-url", default=None,
                        help="use the broker at stomp://HOST:PORT instead of starting one")
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="extra broker setting (repeatable)")
    options = parser.parse_args(argv)
    if options.role != "bench" and options.url is None:
        parser.error(f"{options.role} needs --url")
    if options.messages < 1 or options.consumers < 1:
        parser.error("--messages and --consumers must be at least 1")
    return options


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    roles = {"consume-amqp": run_amqp_consumers, "consume-stomp": run_stomp_consumers}
    scenarios = SCENARIOS if options.protocol == "all" else (options.protocol,)
    return amqp_throughput.run_roles(options, roles, scenarios, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
