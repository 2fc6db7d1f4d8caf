"""Start-up, shutdown and command line of ``twistd mqgate`` as a real process (S0.3, S0.4).

These run the broker the way the README does, as a ``twistd -n mqgate`` child
(tests/e2e/broker.py), and only look at what an operator sees: ports, exit codes,
log lines and ``--help`` text.
"""

import importlib.metadata
import os
import re
import socket
import subprocess

import pytest

from tests.e2e.broker import REPO_ROOT, broker_environment, twistd_command

#: Running ``twistd --help`` imports every plugin; generous for a loaded CI machine.
HELP_TIMEOUT = 60


def run_twistd(*args, cwd=REPO_ROOT, env=None):
    """Run ``twistd ARGS`` (this interpreter) to completion; return the CompletedProcess."""
    return subprocess.run(
        twistd_command(*args), cwd=str(cwd),
        env=broker_environment() if env is None else env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=HELP_TIMEOUT)


def lists_mqgate(help_text):
    """Whether ``twistd --help`` output has mqgate among its commands."""
    return re.search(r"^\s+mqgate\s", help_text, re.MULTILINE) is not None


def test_broker_starts_and_jms_port_accepts_connections(broker):
    """S0.3/S1.4: the broker starts on the shipped config and its jms port accepts TCP."""
    host, port = broker.address("jms")
    assert port != 0
    with socket.create_connection((host, port), timeout=10):
        pass
    assert broker.returncode is None




def test_sigterm_stops_cleanly(broker):
    """S0.4: SIGTERM shuts the broker down in order, logs that it stopped and exits with
    code 0 (the broker replaces twistd's habit of re-raising the signal on itself)."""
    before = len(broker.output)
    code = broker.terminate()
    after = "".join(broker.output[before:])
    assert code == 0, f"exit code {code}\n{after}"
    assert re.search(r"stopped", after, re.IGNORECASE), after
    assert "Traceback" not in after, after


def test_bad_config_value_fails_naming_key_and_value(broker_factory):
    """S0.4 + rule 7: a bad -D value exits non-zero with a message naming key and value."""
    broker = broker_factory({"mqgate.jms.tcp.port": "abc"}, wait=False)
    code, output = broker.exit_output()
    assert code != 0, output
    assert "mqgate.jms.tcp.port" in output, output
    assert "abc" in output, output


def test_twistd_help_lists_mqgate_from_the_checkout():
    """S0.4: ``twistd --help`` run in the checkout lists the mqgate plugin."""
    result = run_twistd("--help")
    assert result.returncode == 0, result.stderr
    assert lists_mqgate(result.stdout), result.stdout + result.stderr


def test_twistd_help_lists_mqgate_when_installed(tmp_path):
    """S0.3: where mqgate is installed (make install), twistd finds it from any directory.

    This is the packaging pitfall of docs/design.md: an install that does not put
    the plugin on twisted.plugins.__path__ passes every other test but leaves
    ``twistd mqgate`` unknown. So: no checkout on PYTHONPATH, another working
    directory.
    """
    try:
        importlib.metadata.distribution("mqgate")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("mqgate is not installed in this interpreter (run `make test`)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = run_twistd("--help", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert lists_mqgate(result.stdout), result.stdout + result.stderr


def test_mqgate_help_lists_its_options():
    """S0.4: ``twistd mqgate --help`` shows --config, --instance, --varhome and -D."""
    result = run_twistd("mqgate", "--help")
    text = result.stdout + result.stderr
    assert result.returncode == 0, text
    for option in ("--config", "--instance", "--varhome"):
        assert option in text, f"{option} missing from:\n{text}"
    assert re.search(r"(^|\s)-D\b", text), f"-D missing from:\n{text}"
