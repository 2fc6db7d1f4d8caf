"""The WebSocket benchmark still runs (bench/ws_throughput.py, S10.3), with tiny
counts, as `make bench` runs it; its speed is not asserted, only that both transports
moved every message."""

from tests.bench.test_smoke import TINY, python_script, run_bench


def test_ws_bench_runs_both_transports():
    """bench/ws_throughput.py prints one line with the WebSocket and the TCP rates."""
    [line] = run_bench(python_script("ws_throughput.py", *TINY))
    assert line["scenario"] == "ws-amqp-queue-presettled"
    assert line["messages"] == 200
    assert line["msgs_per_s"] > 0 and line["tcp_msgs_per_s"] > 0
