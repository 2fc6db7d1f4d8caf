"""
The capture views (S7.5, S7.6) of a real `twistd -n mqgate` broker: its capture index
opened under the instance directory, the HTTP routes behind the admin login, the
live tail's stream, and the `mqgate capture` command line (search, tail) with its
errors.

Capture subscriptions (what feeds the index on a real broker) are another piece of
work (issue 16 item 2); until they land this module checks everything up to the
index: an empty index answers, streams and refuses as an operator would see.
"""

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.broker import REPO_ROOT, BrokerProcess, broker_environment
from tests.e2e.test_http_api import write_users

pytestmark = pytest.mark.e2e

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with httpadmin for the module, users admin/admin and alice/alice."""
    root = tmp_path_factory.mktemp("capture-views")
    write_users(root / "users")
    process = BrokerProcess(root / "varhome", defines={
        "mqgate.user_repository.file.dirpath": str(root / "users"),
        "mqgate.capture.tail.heartbeat": "1"})
    try:
        process.start("httpadmin")
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def passfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("capture-cli") / "passfile"
    path.write_text("mqgate.imqcmd.password=admin\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def url(broker):
    return f"http://127.0.0.1:{broker.port('httpadmin')}"


def request(broker, path, user="admin"):
    auth = base64.b64encode(f"{user}:{user}".encode()).decode()
    return urllib.request.Request(url(broker) + path,
                                  headers={"Authorization": f"Basic {auth}"})


def get_json(broker, path, user="admin"):
    with urllib.request.urlopen(request(broker, path, user), timeout=TIMEOUT) as r:
        return json.loads(r.read())


def capture_cli(broker, passfile, *words, timeout=30, url_=None):
    args = ["capture", *words[:1], "--url", url_ or url(broker), "--passfile",
            str(passfile), *words[1:]]
    return subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", *args], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=timeout)


def test_the_index_is_open_under_the_instance_directory(broker):
    # The index opens on the database thread as the broker starts: wait for it.
    deadline = time.monotonic() + TIMEOUT
    while not (status := get_json(broker, "/api/capture/status"))["open"]:
        assert time.monotonic() < deadline, "".join(broker.output)
        time.sleep(0.1)
    assert any("capture index open" in line for line in broker.output)
    index = broker.varhome / "instances" / "mqgate" / "capture" / "index.sqlite"
    assert str(index) in status["database"] and index.exists()
    assert status["dropped"] == {} and status["written"] == 0


def test_the_views_need_an_admin(broker):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request(broker, "/api/capture/messages", "alice"),
                               timeout=TIMEOUT)
    assert refused.value.code == 403


def test_the_tail_streams_heartbeats_until_the_reader_goes(broker):
    """S7.6: the tail is one long NDJSON response; a quiet one carries heartbeats,
    and a reader that goes is forgotten (the status counts readers)."""
    response = urllib.request.urlopen(request(broker, "/api/capture/tail"),
                                      timeout=TIMEOUT)
    assert response.headers["content-type"].startswith("application/x-ndjson")
    beats = [json.loads(response.readline()) for _ in range(2)]
    assert [b["type"] for b in beats] == ["heartbeat", "heartbeat"]
    assert get_json(broker, "/api/capture/status")["tail_readers"] == 1
    response.close()
    deadline = time.monotonic() + TIMEOUT
    while get_json(broker, "/api/capture/status")["tail_readers"] != 0:
        assert time.monotonic() < deadline, "the tail reader was never forgotten"
        time.sleep(0.1)


def test_the_cli_searches_and_says_what_is_wrong(broker, passfile, tmp_path):
    done = capture_cli(broker, passfile, "search", "--address", "orders", "--json")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    bad = capture_cli(broker, passfile, "search", "--from", "yesterday")
    assert bad.returncode == 2
    assert "400" in bad.stderr and "ISO 8601" in bad.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("mqgate.imqcmd.password=nope\n", encoding="utf-8")
    wrong.chmod(0o600)
    denied = capture_cli(broker, wrong, "search")
    assert denied.returncode == 2 and "401" in denied.stderr
    gone = capture_cli(broker, passfile, "search", url_="http://127.0.0.1:1")
    assert gone.returncode == 2 and "cannot reach the broker's HTTP admin API" in \
        gone.stderr


def test_the_cli_tail_connects_and_stops_when_the_broker_does(broker, passfile):
    """`mqgate capture tail` holds the stream open; run here with a deadline, it is
    still reading when stopped (no error, nothing printed without captures)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mqgate.admin.cli", "capture", "tail", "--url",
         url(broker), "--passfile", str(passfile)], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while get_json(broker, "/api/capture/status")["tail_readers"] != 1:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the CLI tail never connected"
            time.sleep(0.1)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=TIMEOUT)
    assert out == "" and "Traceback" not in err


def test_the_readme_examples_run_as_written(broker, passfile):
    """The README's capture section: its curl lines answer 200 with JSON, its
    `mqgate capture search` line exits 0 (the tail line runs until Ctrl-C: the test
    above runs it)."""
    import shlex
    import shutil

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Message capture", 1)[1].split("\n### ", 1)[0]
    lines = [l for l in section.splitlines() if l.startswith(("curl ", ".venv/"))]
    assert len(lines) == 5
    port = str(broker.port("httpadmin"))
    for line in lines:
        line = line.replace("8161", port).replace("var/cmd-passfile", str(passfile))
        argv = shlex.split(line, comments=True)
        if argv[0] == "curl":
            if shutil.which("curl") is None:
                continue
            argv += ["-sS", "-f"]
        elif "tail" in argv:
            continue
        else:
            argv = [sys.executable, "-m", "mqgate.admin.cli", *argv[1:],
                    "--url", f"http://127.0.0.1:{port}"]
        done = subprocess.run(argv, cwd=str(REPO_ROOT), env=broker_environment(),
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (line, done.stderr)
        if argv[0] == "curl":
            json.loads(done.stdout)
