"""rhea, a client mqgate shares nothing with, over WebSocket (S10.3): its usual
subprotocol offer is answered and AMQP messages go both ways through httpjms.

Runs when node and bench/node's packages are there (`make node-bench` installs them,
as `make test` does), and is skipped with the reason otherwise."""

import json
import shutil
import subprocess

import pytest

from tests.e2e.broker import REPO_ROOT
from tests.e2e.stomp_client import unique

SCRIPT = REPO_ROOT / "tests" / "ws" / "node" / "rhea_ws.js"
RHEA = REPO_ROOT / "bench" / "node" / "node_modules" / "rhea"


def node_command():
    """node, with the flag that gives Node 20 its WebSocket; None without node."""
    node = shutil.which("node")
    if node is None:
        return None
    probe = subprocess.run(
        [node, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)"],
        capture_output=True, timeout=30)
    return [node] if probe.returncode == 0 else [node, "--experimental-websocket",
                                                 "--no-warnings"]


def test_rhea_over_websocket(module_broker_factory):
    """rhea offering binary, AMQPWSB10, amqp sends ten messages over ws://…/ws and
    receives them back, in order."""
    command = node_command()
    if command is None or not RHEA.exists():
        pytest.skip("node or bench/node's rhea not installed (make node-bench)")
    broker = module_broker_factory({"mqgate.service.activelist": "jms,httpjms"},
                                   listening=("jms", "httpjms"))
    url = f"ws://127.0.0.1:{broker.port('httpjms')}/ws"
    done = subprocess.run([*command, str(SCRIPT), url, unique("rhea"), "10"],
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"{done.stdout}\n{done.stderr}"
    result = json.loads(lines[-1])
    assert result["received"] == 10
    assert result["bodies"] == ["rhea 0", "rhea 1", "rhea 2"]
