"""The tunnel benchmark still runs (bench/tunnel_throughput.py), with tiny counts."""

import json
import subprocess
import sys

from tests.e2e.broker import REPO_ROOT


def test_tunnel_bench_runs():
    """The direct tunnel scenario prints its line with a rate, every message once."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "tunnel_throughput.py"),
         "--messages", "300", "--scenario", "tunnel-queue-unsettled"],
        cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=90)
    lines = [json.loads(t) for t in done.stdout.splitlines() if t.startswith("{")]
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = lines
    assert line["scenario"] == "tunnel-queue-unsettled" and line["messages"] == 300
    assert line["msgs_per_s"] > 0
