"""The mqgate client library and `mqgate send`/`receive` against the real broker (S6).

The tests use the blocking API (L{mqgate.client.blocking}), which runs the Twisted API
on a reactor in a daemon thread, so both layers are exercised. What the broker counts
(messages delivered and not acknowledged: `mqgate cmd query dst`) is the judge of flow
control and acknowledgement, not the client's own bookkeeping.
"""

import json
import re
import subprocess
import sys
import threading

import pytest

from mqgate.client import CLIENT, DUPS_OK, AuthenticationError, ConnectError, LinkError
from mqgate.client.blocking import connect
from tests.e2e.admin_cmd import cmd_json
from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.stomp_client import clients, unique
from tests.hostile.probe import wait_until

ADMIN = ("admin", "admin")
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker for the module: jms, stomp, admin (for `query dst`) and the port
    mapper."""
    return module_broker_factory(listening=("jms", "stomp", "admin", "portmapper"))


def url(broker):
    return f"amqp://127.0.0.1:{broker.port('jms')}"


def unacked(broker, passfile, name):
    """Messages of queue C{name} delivered and not settled, as the broker counts them."""
    return cmd_json(broker, passfile, "query", "dst", "-t", "q", "-n", name)["unacked"]


def test_send_and_receive_with_properties_and_outcomes(broker):
    """Messages sent at-least-once are accepted and received in order with their
    properties and fields; a bytes body stays bytes."""
    name = unique("client-basic")
    with connect(url(broker), credentials=ADMIN) as connection:
        sender = connection.sender(f"queue://{name}")
        for i in range(3):
            sender.send(f"text {i}", {"n": i, "colour": "red"}, correlation_id=f"c{i}")
        sender.send(b"\x00\xffraw", durable=True)
        receiver = connection.receiver(f"queue://{name}")
        got = [receiver.receive(timeout=TIMEOUT) for _ in range(4)]
    assert [m.body for m in got] == ["text 0", "text 1", "text 2", b"\x00\xffraw"]
    assert got[1].properties == {"n": 1, "colour": "red"}
    assert got[2].correlation_id == "c2" and got[3].durable


def test_refusals_carry_the_brokers_condition(broker):
    """A receiver on the admin address is refused with the broker's condition and
    description (LinkError); a bad login is refused before anything else."""
    with connect(url(broker), credentials=ADMIN) as connection:
        with pytest.raises(LinkError) as info:
            connection.receiver("mqgate.admin")
    assert info.value.condition == "amqp:unauthorized-access"
    assert "admin requests" in info.value.description
    with pytest.raises(AuthenticationError, match="'admin'"):
        connect(url(broker), credentials=("admin", "wrong"))


def test_mq_url_finds_the_service_through_the_port_mapper(broker):
    """mq://HOST:PORTMAPPER/jms connects to the jms service's port; an unknown service
    is named with those that run."""
    portmapper = broker.port("portmapper")
    with connect(f"mq://127.0.0.1:{portmapper}/jms", credentials=ADMIN) as connection:
        name = unique("client-mq")
        connection.sender(name).send("via the port mapper")
        assert connection.receiver(name).receive(timeout=TIMEOUT).body == \
            "via the port mapper"
    with pytest.raises(ConnectError, match="no service 'nosuch'.*jms"):
        connect(f"mq://127.0.0.1:{portmapper}/nosuch", credentials=ADMIN)


def test_flow_limit_100_and_threshold_counted_at_the_broker(broker, passfile):
    """A CLIENT-mode consumer with flow limit 100 (threshold 50 %) holds 100 of 300
    messages, as the broker counts them, and no more; acknowledging 49 asks for
    nothing; the 50th brings held plus credit to the threshold and the next batch
    fills it to 100 again."""
    name = unique("client-flow")
    with connect(url(broker), credentials=ADMIN) as connection:
        connection.sender(name).send_many([f"m{i}" for i in range(300)])
        receiver = connection.receiver(name, flow_limit=100, threshold=50,
                                       ack_mode=CLIENT)
        got = [receiver.receive(timeout=TIMEOUT) for _ in range(100)]
        assert unacked(broker, passfile, name) == 100
        assert receiver.receive(timeout=0.5) is None        # the 101st is not sent
        assert unacked(broker, passfile, name) == 100 and receiver.receiver.received == 100
        got[48].acknowledge()                                # 49 settled: 51 + 0 > 50
        wait_until(lambda: unacked(broker, passfile, name) == 51, TIMEOUT,
                   "the broker counting 49 acknowledged")
        assert receiver.receiver.received == 100
        got[49].acknowledge()                                # 50 + 0 = 50: next batch
        wait_until(lambda: receiver.receiver.received == 150, TIMEOUT,
                   "the next batch of 50")
        assert unacked(broker, passfile, name) == 100
        more = [receiver.receive(timeout=TIMEOUT) for _ in range(50)]
        more[-1].acknowledge()
        wait_until(lambda: unacked(broker, passfile, name) == 100, TIMEOUT,
                   "the third batch")
        assert receiver.receiver.flow.held <= 100


def test_client_ack_and_dups_ok_as_the_broker_sees_them(broker, passfile):
    """CLIENT: acknowledging the second of three settles two, and the third comes back
    (redelivered) after the connection closes unacknowledged; DUPS_OK: everything
    consumed is settled, lazily."""
    name = unique("client-ack")
    with connect(url(broker), credentials=ADMIN) as connection:
        connection.sender(name).send_many(["a", "b", "c"])
        receiver = connection.receiver(name, ack_mode=CLIENT)
        got = [receiver.receive(timeout=TIMEOUT) for _ in range(3)]
        got[1].acknowledge()
        wait_until(lambda: unacked(broker, passfile, name) == 1, TIMEOUT,
                   "two of three settled")
    with connect(url(broker), credentials=ADMIN) as connection:
        again = connection.receiver(name).receive(timeout=TIMEOUT)
        assert again.body == "c" and again.redelivered
        lazy = unique("client-dups")
        connection.sender(lazy).send_many([str(i) for i in range(20)])
        receiver = connection.receiver(lazy, ack_mode=DUPS_OK, flow_limit=8)
        bodies = [receiver.receive(timeout=TIMEOUT).body for _ in range(20)]
        assert bodies == [str(i) for i in range(20)]
        wait_until(lambda: unacked(broker, passfile, lazy) == 0, TIMEOUT,
                   "DUPS_OK settling its last batch")


def test_durable_subscription_and_selector(broker):
    """A durable subscription (same client_id and name) keeps what was published while
    its receiver was closed, and nothing once unsubscribed; a selector lets through
    only the matching messages."""
    topic = f"topic://{unique('client-news')}"
    client_id = unique("client-durable")
    with connect(url(broker), credentials=ADMIN, client_id=client_id) as connection:
        connection.receiver(topic, durable_name="news").close()
    with connect(url(broker), credentials=ADMIN) as publisher:
        publisher.sender(topic).send_many(["while away"])
    with connect(url(broker), credentials=ADMIN, client_id=client_id) as connection:
        again = connection.receiver(topic, durable_name="news")
        assert again.receive(timeout=TIMEOUT).body == "while away"
        again.unsubscribe()
    with connect(url(broker), credentials=ADMIN) as publisher:
        publisher.sender(topic).send_many(["after the end"])
    with connect(url(broker), credentials=ADMIN, client_id=client_id) as connection:
        fresh = connection.receiver(topic, durable_name="news")
        assert fresh.receive(timeout=0.5) is None    # a new subscription: nothing kept
        name = unique("client-selector")
        red = connection.receiver(name, selector="colour = 'red'")
        sender = connection.sender(name)
        sender.send("blue", {"colour": "blue"})
        sender.send("red", {"colour": "red"})
        assert red.receive(timeout=TIMEOUT).body == "red"


def test_request_reply_over_a_dynamic_queue(broker):
    """request() gets the reply a responder sent to its reply-to with the request's
    message-id as correlation-id."""
    service = unique("client-service")
    with connect(url(broker), credentials=ADMIN) as responder, \
            connect(url(broker), credentials=ADMIN) as requester:
        requests = responder.receiver(service)
        replies = {}

        def answer():
            request = requests.receive(timeout=TIMEOUT)
            responder.sender(request.reply_to).send(request.body.upper(),
                                                    correlation_id=request.message_id)
            replies["to"] = request.reply_to

        thread = threading.Thread(target=answer)
        thread.start()
        reply = requester.request(service, "ping", timeout=TIMEOUT)
        thread.join(TIMEOUT)
    assert reply.body == "PING" and "mqgate.tmp." in replies["to"]


def test_library_to_stomp(broker):
    """A message the library sends reaches a stomp.py subscriber with its body and
    properties as headers."""
    name = unique("client-to-stomp")
    with clients() as open_client:
        stomp = open_client(broker.address("jms"), "1.2")
        stomp.subscribe(f"/queue/{name}")
        with connect(url(broker), credentials=ADMIN) as connection:
            connection.sender(f"queue://{name}").send("to stomp", {"colour": "blue"})
        [message] = stomp.collector.wait_for_messages(1)
    assert message.body in ("to stomp", b"to stomp")
    assert message.headers["colour"] == "blue"


# -- the command-line tools ---------------------------------------------------------------


def mqgate(*words, password="admin", stdin=None):
    """Run `mqgate WORDS` as an operator would (password in the environment)."""
    env = broker_environment({"MQGATE_PASSWORD": password} if password else None)
    return subprocess.run([sys.executable, "-m", "mqgate.admin.cli", *words],
                          cwd=str(REPO_ROOT), env=env, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_cli_send_then_receive_json(broker):
    """`mqgate send` then `mqgate receive --json` round-trip bodies and typed
    properties; exit 0."""
    name = f"queue://{unique('cli')}"
    sent = mqgate("send", "-u", "admin", url(broker), name, "--body", "hello",
                  "--count", "2", "--property", "n=7", "--property", "colour=red",
                  "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {"sent": 2, "address": name, "url": url(broker),
                                       "at_least_once": True}
    got = mqgate("receive", "-u", "admin", url(broker), name, "--count", "2", "--json")
    assert got.returncode == 0, got.stderr
    records = [json.loads(line) for line in got.stdout.splitlines()]
    assert [r["body"] for r in records] == ["hello", "hello"]
    assert records[0]["properties"] == {"n": 7, "colour": "red"}
    text = mqgate("send", "-u", "admin", url(broker), name, "--body", "plain")
    assert text.returncode == 0 and "sent 1 message(s)" in text.stdout
    assert mqgate("receive", "-u", "admin", url(broker), name).stdout == "plain\n"


def test_cli_errors_name_the_bad_value_with_exit_codes(broker):
    """A bad URL exits 2 naming it, a password in the URL is refused, a wrong password
    exits 1 naming the user, and receive without enough messages exits 3."""
    bad = mqgate("send", "amqp://127.0.0.1:99999", "q", "--body", "x")
    assert bad.returncode == 2 and "amqp://127.0.0.1:99999" in bad.stderr
    secret = mqgate("send", f"amqp://admin:pw@127.0.0.1:{broker.port('jms')}", "q",
                    "--body", "x")
    assert secret.returncode == 2 and "MQGATE_PASSWORD" in secret.stderr
    assert "pw@" not in secret.stderr
    wrong = mqgate("send", "-u", "admin", url(broker), "q", "--body", "x",
                   password="nope")
    assert wrong.returncode == 1 and "'admin'" in wrong.stderr
    empty = mqgate("receive", "-u", "admin", url(broker), unique("cli-empty"),
                   "--timeout", "0.5")
    assert empty.returncode == 3 and "received 0 of 1" in empty.stderr


# -- the guide's examples -----------------------------------------------------------------


def guide_examples():
    """The Python examples of docs/client.md, in order."""
    text = (REPO_ROOT / "docs" / "client.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_guides_examples_run(broker, tmp_path):
    """Every Python example of docs/client.md runs to completion against a broker (its
    port put in place of 5672) and prints what the guide says."""
    examples = guide_examples()
    assert len(examples) >= 5
    outputs = []
    for number, source in enumerate(examples):
        path = tmp_path / f"example{number}.py"
        path.write_text(source.replace("127.0.0.1:5672", f"127.0.0.1:{broker.port('jms')}"))
        run = subprocess.run([sys.executable, str(path)], cwd=str(tmp_path),
                             env=broker_environment(), capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, f"example {number}:\n{source}\n{run.stderr}"
        outputs.append(run.stdout)
    assert outputs[0] == "Hello, mqgate! {'colour': 'red'}\n"
    assert outputs[1] == "received 100 messages, the last: message 99\n"
    assert outputs[2] == "HELLO\n"
