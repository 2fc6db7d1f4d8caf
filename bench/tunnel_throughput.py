"""AMQP queue throughput over the HTTP tunnel: one producer, one consumer, 256 B
messages, at-least-once (S10.3; the consumer accepts each message, the broker settles each
transfer), both clients on mqgate's own AMQP engine over TunnelClientEndpoint
(tests/tunnel/driver.py), each in its own process, on the httpjms service.

Scenarios:

- ``tunnel-queue-unsettled``: the clients talk to the broker's tunnel directly;
- ``tunnel-proxy-queue-unsettled``: through a throw-away tinyproxy (tests/e2e/proxy.py),
  skipped with a note when tinyproxy is not installed.

    python bench/tunnel_throughput.py [--messages N] [--scenario NAME]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

import amqp_throughput  # noqa: E402
import stomp_throughput  # noqa: E402
from amqp_throughput import BenchError  # noqa: E402
from tests.e2e.broker import REPO_ROOT, broker_environment  # noqa: E402
from tests.e2e.proxy import ProxyUnavailable, TinyProxy  # noqa: E402

SCENARIOS = ("tunnel-queue-unsettled", "tunnel-proxy-queue-unsettled")
ADDRESS = "bench.tunnel"
READY_TIMEOUT = 30.0
#: The httpjms service on an OS-chosen port, with the tunnel's defaults.
DEFINES = {"mqgate.service.activelist": "jms,admin,httpjms",
           "mqgate.httpjms.http.port": "0"}


class Child:
    """One driver process; its JSON lines."""

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.tunnel.driver", *args], cwd=str(REPO_ROOT),
            env=broker_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    def next_event(self, timeout):
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            event = json.loads(line)
            if event["event"] == "error":
                raise BenchError(f"tunnel client: {event['message']}")
            if event["event"] in ("ready", "done"):
                return event
            if time.monotonic() > deadline:
                break
        raise BenchError(f"tunnel client stopped: {self.process.stderr.read()[-500:]}")

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def measure(options, url, scenario, proxy, pid):
    common = ["--url", url, "--proxy", proxy or "", "--address", ADDRESS,
              "--size", str(options.size), "--timeout", str(options.timeout)]
    children = []
    cpu_before = amqp_throughput.broker_cpu(pid)
    try:
        consumer = Child(*common, "--receive", str(options.messages), "--credit", "1000")
        children.append(consumer)
        consumer.next_event(READY_TIMEOUT)
        producer = Child(*common, "--send", str(options.messages), "--credit", "1000")
        children.append(producer)
        sent = producer.next_event(options.timeout + READY_TIMEOUT)   # ready
        sent = producer.next_event(options.timeout + READY_TIMEOUT)
        got = consumer.next_event(options.timeout + READY_TIMEOUT)
    finally:
        for child in children:
            child.kill()
    if got["missing"] or got["duplicates"]:
        raise BenchError(f"lost or duplicated messages: {got}")
    result = {"scenario": scenario, "messages": got["distinct"], "size": options.size,
              "msgs_per_s": got["receive_per_s"],
              "producer_msgs_per_s": sent["send_per_s"]}
    result.update(amqp_throughput.cpu_fields(
        cpu_before, amqp_throughput.broker_cpu(pid), got["distinct"]))
    return result


def scenario_line(options, scenario):
    """The scenario's JSON line: its measurement, or its error (or why it was skipped)."""
    proxy = None
    try:
        if scenario == "tunnel-proxy-queue-unsettled":
            try:
                proxy = TinyProxy(tempfile.mkdtemp(prefix="mqgate-bench-proxy-")).start()
            except ProxyUnavailable as e:
                return {"scenario": scenario, "skipped": str(e)}
        options.define = list(options.define) + list(DEFINES.items())
        return stomp_throughput.with_broker(
            options, "httpjms", lambda host, port, pid: measure(
                options, f"http://{host}:{port}/tunnel", scenario,
                proxy.url if proxy else None, pid))
    except BenchError as e:
        return stomp_throughput.failure_line(scenario, options, e)
    finally:
        if proxy is not None:
            proxy.stop()


def options_from(run_options):
    """This script's options from bench/run.py's."""
    return argparse.Namespace(**vars(run_options))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    amqp_throughput.add_common_arguments(parser)
    parser.add_argument("--scenario", choices=SCENARIOS + ("all",), default="all")
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE")
    options = parser.parse_args(argv)
    failed = False
    for scenario in SCENARIOS if options.scenario == "all" else (options.scenario,):
        line = scenario_line(argparse.Namespace(**vars(options)), scenario)
        failed = failed or "error" in line
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
