"""Running `mqgate cmd` against a test broker, as an operator's script would (S11.1):
``python -m mqgate.admin.cli cmd ...`` (what the ``mqgate`` console script calls) in a
child process with stdin not a terminal, the admin password from a password file
(S4.6), the admin port from the broker's port mapper (S1.3)."""

import json
import subprocess
import sys

from tests.e2e.broker import REPO_ROOT, broker_environment

__all__ = ["mqgate_cmd", "cmd_text", "cmd_json"]


def mqgate_cmd(broker, passfile, *words, user="admin", direct=False, timeout=60):
    """Run `mqgate cmd -b 127.0.0.1:PORTMAPPER --passfile F WORDS`; return the result."""
    if direct:
        address = f"mqtcp://127.0.0.1:{broker.port('admin')}/admin"
    else:
        address = f"127.0.0.1:{broker.port('portmapper')}"
    args = ["cmd", "-b", address, "-u", user, "--passfile", str(passfile), *words]
    return subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", *args], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=timeout)


def cmd_text(broker, passfile, *words, **kwargs):
    """Run `mqgate cmd WORDS`, which must succeed (exit 0); return what it printed."""
    result = mqgate_cmd(broker, passfile, *words, **kwargs)
    assert result.returncode == 0, result.stderr
    return result.stdout


def cmd_json(broker, passfile, *words, **kwargs):
    """Run `mqgate cmd --json WORDS`, which must succeed; return the reply's data."""
    return json.loads(cmd_text(broker, passfile, "--json", *words, **kwargs))
