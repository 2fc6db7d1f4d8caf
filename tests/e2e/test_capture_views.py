"""
The capture views (S7.5, S7.6) of a real `twistd -n mqgate` broker, fed by real
capture subscriptions and real Proton clients: the index under the instance directory,
search by address and property, verify on broker, request/reply traces, the live tail
over HTTP and through `mqgate capture tail`, `mqgate capture search`, their errors,
and the README's examples.

The capture subscriptions are made the way a restart makes them: from the runtime
catalog (runtime/catalog.json) written before the broker starts, one on each of the
module's addresses, so that one broker serves every test.
"""

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from proton import Message

from tests.e2e.broker import REPO_ROOT, BrokerProcess, broker_environment
from tests.e2e.proton_client import opened, receive_all
from tests.e2e.test_http_api import write_users
from tests.hostile.probe import wait_until

pytestmark = pytest.mark.e2e

TIMEOUT = 10.0


#: The addresses the module's broker captures (one capture subscription each).
CAPTURED = ("orders", "svc", "replies", "tailed")
BOUNDS = {"ring_size": 10000, "expiry_delay": 86400.0, "rate": 500.0,
          "body_bytes": 64, "retention": 604800.0, "stored_bytes": 1 << 30}


def write_catalog(varhome):
    path = varhome / "instances" / "mqgate" / "runtime" / "catalog.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "version": 1, "diverts": [], "address_settings": [], "security_settings": [],
        "captures": [{"name": f"cap-{a}", "address": a, "filter": None,
                      "created_by": "admin", "bounds": BOUNDS} for a in CAPTURED]}))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with httpadmin for the module, users admin/admin and alice/alice,
    capturing L{CAPTURED}."""
    root = tmp_path_factory.mktemp("capture-views")
    write_users(root / "users")
    write_catalog(root / "varhome")
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
    status = wait_for(broker, "/api/capture/status", lambda s: s["open"],
                      "the capture index never opened")
    assert any("capture index open" in line for line in broker.output)
    index = broker.varhome / "instances" / "mqgate" / "capture" / "index.sqlite"
    assert str(index) in status["database"] and index.exists()
    assert status["dropped"] == {}
    assert sorted(s["name"] for s in status["subscriptions"]) == sorted(
        f"cap-{a}" for a in CAPTURED)


def send(broker, address, messages):
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for message in messages:
            sender.send(message)


def wait_for(broker, path, predicate, what):
    """The answer to GET C{path} once C{predicate} holds of it."""
    answer = None

    def holds():
        nonlocal answer
        answer = get_json(broker, path)
        return predicate(answer)
    try:
        wait_until(holds, TIMEOUT, what, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; last answer: {answer}") from None
    return answer


def test_every_routed_message_is_found_and_consumers_get_theirs(broker):
    """S7.5: each message sent to a captured queue is one row, found by address and
    by property, its long body cut and marked; the queue's consumer still receives
    every message, whole; verify on broker says whether the original still waits."""
    send(broker, "orders", [
        Message(id=f"o-{n}", body="x" * 100 if n == 2 else f"order {n}",
                properties={"region": "emea" if n % 2 else "apac"}) for n in range(4)])
    page = wait_for(broker, "/api/capture/messages?address=orders",
                    lambda p: len(p["messages"]) == 4, "four rows")
    assert [m["message_id"] for m in page["messages"]] == ["o-3", "o-2", "o-1", "o-0"]
    long_ = page["messages"][1]
    assert long_["truncated"] and long_["body_size"] > 64
    emea = get_json(broker, "/api/capture/messages?address=orders&property=region=emea")
    assert [m["message_id"] for m in emea["messages"]] == ["o-3", "o-1"]
    newest = page["messages"][0]
    verify = get_json(broker, f"/api/capture/messages/{newest['id']}/verify")
    assert verify["offered"] and verify["found_in"] == ["orders"]
    with opened(broker) as conn:
        receiver = conn.create_receiver("orders")
        got = receive_all(receiver, 4)
    assert [m.body for m in got] == ["order 0", "order 1", "x" * 100, "order 3"]
    verify = get_json(broker, f"/api/capture/messages/{newest['id']}/verify")
    assert verify["found_in"] == [] and "not waiting there" in verify["missing"]["orders"]


def test_a_request_and_its_reply_are_traced(broker):
    """S7.6: a request to svc with reply-to replies, answered on replies with its
    message id as correlation id: one answered pair with its latency; a request
    nobody answers is unanswered."""
    send(broker, "svc", [Message(id="req-1", reply_to="replies", body="ping"),
                         Message(id="req-2", reply_to="replies", body="lost")])
    send(broker, "replies", [Message(correlation_id="req-1", body="pong")])
    trace = wait_for(broker, "/api/capture/traces?address=svc",
                     lambda t: t["answered"] == 1 and len(t["pairs"]) == 2, "a pair")
    by_id = {p["request"]["message_id"]: p for p in trace["pairs"]}
    assert by_id["req-1"]["reply"]["body_text"] == "pong"
    assert by_id["req-1"]["latency"] >= 0
    assert by_id["req-2"]["status"] == "unanswered"


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
    wait_for(broker, "/api/capture/status", lambda s: s["tail_readers"] == 0,
             "the tail reader was never forgotten")


def test_the_cli_searches_and_says_what_is_wrong(broker, passfile):
    send(broker, "orders", [Message(id="cli-1", body="cli", properties={"cli": 1})])
    wait_for(broker, "/api/capture/messages?property=cli=1",
             lambda p: len(p["messages"]) == 1, "the row")
    done = capture_cli(broker, passfile, "search", "--address", "orders",
                       "--property", "cli=1")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert "queue://orders" in line and "id=cli-1" in line and "'cli'" in line
    bad = capture_cli(broker, passfile, "search", "--from", "yesterday")
    assert bad.returncode == 2
    assert "400" in bad.stderr and "ISO 8601" in bad.stderr


def test_the_cli_tail_shows_messages_as_they_are_sent(broker, passfile):
    """`mqgate capture tail` prints each message sent to the captured address once it
    is connected, one JSON line each with --json, and stops after --count."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mqgate.admin.cli", "capture", "tail", "--url",
         url(broker), "--passfile", str(passfile), "--address", "tailed", "--json",
         "--count", "3"], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while get_json(broker, "/api/capture/status")["tail_readers"] != 1:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the CLI tail never connected"
            time.sleep(0.1)
        send(broker, "orders", [Message(body="not tailed")])
        send(broker, "tailed", [Message(id=f"t-{n}", body=f"tail {n}")
                                for n in range(3)])
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(l["type"], l["body_text"]) for l in lines] == [
        ("message", f"tail {n}") for n in range(3)]


def test_the_readme_examples_run_as_written(broker, passfile):
    """The README's capture section: its curl lines answer 200 with JSON, its
    `mqgate capture search` line exits 0 (the tail line runs until Ctrl-C: the test
    above runs it)."""
    import shlex
    import shutil

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### The capture index and its views", 1)[1].split("\n### ", 1)[0]
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
