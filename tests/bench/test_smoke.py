"""Every benchmark still runs: each bench script, with tiny counts, against a real broker.

Benchmarks are not part of the suite's assertions about speed; these tests only make
sure a refactor cannot break one unnoticed. Each script runs as `make bench` runs it
(a subprocess with this interpreter), on one broker shared by the module where the
script can take a URL, and must exit 0 and print JSON lines, none with an "error".
The Node generator (bench/node) runs when node and its packages are there, and is
skipped with the reason when they are not.
"""

import json
import subprocess
import sys

import pytest

from bench import run_node
from tests.e2e.broker import REPO_ROOT, BrokerProcess

BENCH = REPO_ROOT / "bench"
#: One script with tiny counts takes a few seconds; this is "it hangs".
SCRIPT_TIMEOUT = 60
TINY = ["--messages", "200"]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    """The AMQP and STOMP URLs of one broker (shipped configuration) for the module."""
    broker = BrokerProcess(tmp_path_factory.mktemp("bench-broker"))
    try:
        broker.start()
        yield {"amqp": "amqp://%s:%d" % broker.address("jms"),
               "stomp": "stomp://%s:%d" % broker.address("stomp")}
        broker.terminate()
    finally:
        broker.kill()


def run_bench(argv):
    """Run C{argv} from the checkout; return its JSON lines, failing on any error."""
    done = subprocess.run(argv, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.startswith("{")]
    report = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, report
    assert lines, report
    assert not [line for line in lines if "error" in line], report
    return lines


def python_script(name, *args):
    return [sys.executable, str(BENCH / name), *args]


def test_capture_bench():
    """bench/capture.py prints producer rates without, with and with a flooded
    capture, each with its ratio to the first."""
    lines = run_bench(python_script("capture.py", *TINY))
    assert [line["scenario"] for line in lines] == [
        "capture-none", "capture-on", "capture-flooded", "amqp-capture-none",
        "amqp-capture-on", "amqp-capture-flooded"]
    assert all(line["msgs_per_s"] > 0 and line["ratio"] > 0 for line in lines)
    assert lines[1]["copies"] == 200 and lines[2]["dropped"] == 0
    assert all(line["messages"] == 200 for line in lines[3:])


def test_core_bench():
    """bench/core_bench.py prints a rate for each of its core scenarios."""
    lines = run_bench(python_script("core_bench.py", *TINY))
    assert all(line["msgs_per_s"] > 0 for line in lines)


@pytest.mark.parametrize("script", ["amqp_throughput.py", "amqp_engine_throughput.py"])
def test_amqp_queue(urls, script):
    """The AMQP queue benchmarks move 200 messages in both modes."""
    lines = run_bench(python_script(script, *TINY, "--url", urls["amqp"]))
    assert {line["messages"] for line in lines} == {200} and len(lines) == 2


def test_stomp_queue(urls):
    """bench/stomp_throughput.py moves 200 messages in both modes."""
    lines = run_bench(python_script("stomp_throughput.py", *TINY, "--url", urls["stomp"]))
    assert {line["messages"] for line in lines} == {200} and len(lines) == 2


def test_fanout(urls):
    """bench/fanout.py delivers to ten consumers over AMQP and over STOMP."""
    lines = run_bench(python_script("fanout.py", *TINY, "--amqp-url", urls["amqp"],
                                    "--stomp-url", urls["stomp"]))
    assert [line["scenario"] for line in lines] == ["amqp-fanout-10", "stomp-fanout-10"]


def test_stomp_latency(urls):
    """bench/stomp_latency.py reports percentiles after its warm-up second."""
    lines = run_bench(python_script("stomp_latency.py", "--rate", "500", "--seconds", "2",
                                    "--url", urls["stomp"]))
    assert lines[0]["p99_ms"] >= lines[0]["p50_ms"] > 0


def test_persistent():
    """bench/persistent.py runs one scenario on its own broker (file store, sync off)."""
    lines = run_bench(python_script("persistent.py", *TINY,
                                    "--mode", "persistent-file-sync-off-1p"))
    assert lines[0]["messages"] == 200


def test_run_py(urls):
    """bench/run.py runs a chosen scenario and prints its line."""
    lines = run_bench(python_script("run.py", "--no-save", *TINY, "--only",
                                    "stomp-queue-auto", "--stomp-url", urls["stomp"]))
    assert [line["scenario"] for line in lines] == ["stomp-queue-auto"]


def test_node_generator(urls):
    """bench/run_node.py runs the Node generator's ten scenarios on a running broker."""
    problem = run_node.node_problem()
    if problem:
        pytest.skip(problem)
    lines = run_bench(python_script("run_node.py", "--no-save", *TINY,
                                    "--seconds", "1.5", "--rate", "500", "--timeout", "10",
                                    "--amqp-url", urls["amqp"], "--stomp-url", urls["stomp"]))
    assert len(lines) == 10
    assert {line["generator"] for line in lines} == {"node-rhea", "node-stomp"}


def test_tunnel_throughput():
    """bench/tunnel_throughput.py moves 200 messages through the HTTP tunnel on its own
    broker, directly and through tinyproxy (a "skipped" line where it is missing)."""
    lines = run_bench(python_script("tunnel_throughput.py", *TINY))
    assert [line["scenario"] for line in lines] == ["tunnel-queue-unsettled",
                                                    "tunnel-proxy-queue-unsettled"]
    assert lines[0]["messages"] == 200


def test_ws_throughput():
    """bench/ws_throughput.py moves 200 messages over TCP and over WebSocket and gives
    their ratio."""
    lines = run_bench(python_script("ws_throughput.py", *TINY))
    assert lines[0]["messages"] == 200 and lines[0]["ws_vs_tcp"] > 0
