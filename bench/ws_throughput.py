"""AMQP over WebSocket against AMQP over TCP, one generator, one broker.

The WebSocket of S10.3. One producer process, one consumer process, one queue, 256-byte
bodies, presettled, as bench/amqp_engine_throughput.py; the clients are
tests/ws/engine_peer.py, mqgate's own AMQP engine on Twisted, connected once through a
TCP endpoint to the jms service and once through
mqgate.ws.client.WebSocketClientEndpoint to httpjms's /ws. Only the endpoint differs, so
the ratio is what the WebSocket costs (framing, masking, the virtual transport); the
target is at least 70 % of TCP.

    python bench/ws_throughput.py [--messages N] [--size B]
"""

import argparse
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

import amqp_throughput  # noqa: E402
import stomp_throughput  # noqa: E402
from amqp_throughput import BenchError  # noqa: E402
from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

PEER = BENCH_DIR.parent / "tests" / "ws" / "engine_peer.py"
SCENARIOS = ("presettled",)
NAME = "ws-amqp-queue-presettled"


def measure_one(options, url, pid, address):
    """Consumer first, then producer, over C{url}; C{(consumer, producer, cpu)}."""
    args = [url, "--address", address, "--messages", str(options.messages),
            "--size", str(options.size), "--prefetch", str(options.prefetch),
            "--timeout", str(options.timeout), "--user", options.user,
            "--password", options.password]
    cpu_before = amqp_throughput.broker_cpu(pid)
    sent, got = stomp_throughput.run_pair(PEER, args, options)
    for outcome in (sent, got):
        if "error" in outcome:
            raise BenchError(f"{outcome['role']} over {url}: {outcome['error']}")
    cpu = amqp_throughput.cpu_fields(cpu_before, amqp_throughput.broker_cpu(pid),
                                     got["received"])
    return got, sent, cpu


def measure(options, broker):
    """TCP, then WebSocket, on one broker; the scenario's JSON dict."""
    host, jms = broker.address("jms")
    ws = broker.port("httpjms")
    tcp_got, tcp_sent, tcp_cpu = measure_one(options, f"amqp://{host}:{jms}",
                                             broker.pid, "bench.ws.tcp")
    ws_got, ws_sent, ws_cpu = measure_one(options, f"ws://{host}:{ws}/ws", broker.pid,
                                          "bench.ws.ws")
    ratio = (ws_got["msgs_per_s"] / tcp_got["msgs_per_s"]
             if ws_got["msgs_per_s"] and tcp_got["msgs_per_s"] else None)
    result = {
        "scenario": NAME,
        "messages": ws_got["received"],
        "size": options.size,
        "msgs_per_s": ws_got["msgs_per_s"],
        "seconds": ws_got["seconds"],
        "producer_msgs_per_s": ws_sent["msgs_per_s"],
        "tcp_msgs_per_s": tcp_got["msgs_per_s"],
        "tcp_producer_msgs_per_s": tcp_sent["msgs_per_s"],
        "ws_vs_tcp": round(ratio, 3) if ratio is not None else None,
    }
    result.update(ws_cpu)
    result.update({f"tcp_{key}": value for key, value in tcp_cpu.items()})
    return result


def scenario_line(options, mode):
    """The scenario's one JSON line: its measurement, or its error."""
    defines = dict(options.define)
    defines["mqgate.service.activelist"] = "jms,admin,httpjms"
    try:
        with tempfile.TemporaryDirectory(prefix="mqgate-bench-") as varhome:
            broker = BrokerProcess(varhome, defines=defines)
            try:
                try:
                    broker.spawn()
                    broker.port("jms")
                    broker.port("httpjms")
                except BrokerError as e:
                    raise BenchError(f"the broker did not start: {e}") from None
                return measure(options, broker)
            finally:
                try:
                    broker.terminate()
                except BrokerError:
                    pass
                broker.kill()
    except BenchError as e:
        return stomp_throughput.failure_line(NAME, options, e)


def options_from(run_options):
    """This script's options from bench/run.py's."""
    return argparse.Namespace(**vars(run_options))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="AMQP over WebSocket vs over TCP through mqgate, one generator "
                    "(mqgate's own engine); one JSON line.")
    parser.add_argument("role", nargs="?", default="bench", choices=("bench",))
    amqp_throughput.add_common_arguments(parser)
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    return amqp_throughput.run_roles(options, {}, SCENARIOS, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
