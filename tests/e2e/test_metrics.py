"""`mqgate cmd metrics bkr|svc|dst` against a real `twistd -n mqgate` broker, after
real Proton and stomp.py clients sent messages of known sizes (S5.1, S11.1)."""

import json
import subprocess
import sys

import pytest
from proton import Message

from tests.e2e.admin_cmd import cmd_json, mqgate_cmd
from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import opened, receive_all
from tests.e2e.stomp_client import open_client, unique


@pytest.fixture(scope="module")
def broker(module_broker):
    """One broker for the module, with its jms and stomp services listening."""
    return module_broker


def metrics(broker, passfile, *words):
    """`mqgate cmd --json metrics WORDS` -> the answer's data (exit status 0)."""
    return cmd_json(broker, passfile, "metrics", *words)


def _message(i):
    # Every property fixed, so each encodes to the same bytes the broker receives.
    return Message(id=f"m-{i:04d}", body="x" * 200)


def test_metrics_dst_counts_what_proton_sent_and_took(broker, passfile):
    """25 messages of a known encoded size sent, 10 received and accepted: metrics
    dst says so in messages and bytes, in JSON and in its table."""
    name = unique("metrics.q")
    size = len(_message(0).encode())
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for i in range(25):
            sender.send(_message(i))
        receiver = conn.create_receiver(f"queue://{name}", credit=10)
        receive_all(receiver, 10)
        attached = metrics(broker, passfile, "dst", "-t", "q", "-n", name)
        assert (attached["producers"], attached["consumers"]) == (1, 1)
        # Proton sends the accepts with its next I/O: closing the link, which the
        # broker has done once close() returns.
        receiver.close()
        figures = metrics(broker, passfile, "dst", "-t", "q", "-n", name)
        assert (figures["messages_in"], figures["bytes_in"]) == (25, 25 * size)
        assert (figures["messages_out"], figures["bytes_out"]) == (10, 10 * size)
        assert (figures["messages"], figures["messages_ready"]) == (15, 15)
        assert figures["messages_bytes"] == 15 * size
        assert (figures["producers"], figures["consumers"]) == (1, 0)
        assert figures["peak_messages"] == 25
        assert figures["oldest_message_age_seconds"] > 0
        table = mqgate_cmd(broker, passfile, "metrics", "dst", "-t", "q", "-n", name)
        assert table.returncode == 0, table.stderr
        assert f"Metrics of queue {name}" in table.stdout
        row = table.stdout.splitlines()[4].split()
        assert row[:4] == ["25", "10", str(25 * size), str(10 * size)]
        consumers = mqgate_cmd(broker, passfile, "metrics", "dst", "-t", "q", "-n", name,
                               "-m", "con")
        assert "Consumers" in consumers.stdout, consumers.stderr


def test_metrics_dst_counts_stomp_messages_and_svc_counts_its_connection(
        broker, passfile):
    """Messages sent with stomp.py count on their queue; metrics svc -n stomp counts
    the connection open now and the bytes it sent."""
    name = unique("metrics.s")
    before = metrics(broker, passfile, "svc", "-n", "stomp")
    client = open_client(("127.0.0.1", broker.port("stomp")))
    try:
        for i in range(5):
            client.send(f"/queue/{name}", "y" * 300)
        figures = metrics(broker, passfile, "dst", "-t", "q", "-n", name)
        assert figures["messages_in"] == 5 and figures["messages"] == 5
        assert 5 * 300 <= figures["bytes_in"] < 5 * 1300
        service = metrics(broker, passfile, "svc", "-n", "stomp")
        assert service["connections"] == before["connections"] + 1
        assert service["connections_opened"] == before["connections_opened"] + 1
        assert service["bytes_in"] >= before["bytes_in"] + 5 * 300
        assert service["bytes_out"] > before["bytes_out"]     # CONNECTED, RECEIPTs
        assert service["workers_in_use"] >= 1
    finally:
        client.disconnect()


def test_metrics_bkr_totals_cover_the_destinations(broker, passfile):
    """metrics bkr adds up every destination and counts the admin connection asking;
    metrics svc -n jms counts the Proton connection on the sniffing jms port."""
    name = unique("metrics.b")
    before = metrics(broker, passfile, "svc", "-n", "jms")
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        for i in range(3):
            sender.send(_message(i))
        figures = metrics(broker, passfile, "bkr")
        jms = metrics(broker, passfile, "svc", "-n", "jms")
    # jms sniffs AMQP from STOMP on one port: its AMQP connection counts all the same.
    assert jms["connections"] == before["connections"] + 1
    assert jms["bytes_in"] >= before["bytes_in"] + 3 * 200
    assert figures["messages_in"] >= 3 and figures["bytes_in"] >= 3 * 200
    assert figures["messages"] >= 3 and figures["queues"] >= 1
    assert figures["connections"] >= 1 and figures["uptime_seconds"] > 0
    table = mqgate_cmd(broker, passfile, "metrics", "bkr")
    assert table.returncode == 0 and table.stdout.startswith("Broker metrics")


def test_sampled_metrics_print_a_line_per_reading_with_rates(broker, passfile):
    """-int 2 -msp 3: three readings two seconds apart, one JSON line each; the
    messages sent after the first reading show in the later ones and in their
    rates."""
    name = unique("metrics.r")
    with opened(broker) as conn:
        sender = conn.create_sender(f"queue://{name}")
        sender.send(_message(0))
        command = subprocess.Popen(
            [sys.executable, "-m", "mqgate.admin.cli", "cmd", "-b",
             f"127.0.0.1:{broker.port('portmapper')}", "--passfile", str(passfile),
             "--json", "metrics", "dst", "-t", "q", "-n", name, "-int", "2", "-msp", "3"],
            cwd=str(REPO_ROOT), env=broker_environment(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = json.loads(command.stdout.readline())   # waits for the reading
            for i in range(1, 21):
                sender.send(_message(i))
            rest, errors = command.communicate(timeout=60)
        finally:
            command.kill()
    assert command.returncode == 0, errors
    lines = [first] + [json.loads(line) for line in rest.splitlines()]
    assert len(lines) == 3
    assert first["messages_in"] == 1 and first["rates"] == {}
    assert lines[-1]["messages_in"] == 21
    assert all(line["rates"]["messages_in"] >= 0 for line in lines[1:])
    assert max(line["rates"]["messages_in"] for line in lines[1:]) > 0
    assert max(line["rates"]["bytes_in"] for line in lines[1:]) > 0


def test_sampled_table_and_rts(broker, passfile):
    """Without --json a sampled command prints its head once and a line per reading;
    -m rts reads once more so that its one line has rates."""
    result = mqgate_cmd(broker, passfile, "metrics", "bkr", "-int", "0.2", "-msp", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Msgs/s in" in lines[1] and len(lines) == 5
    rts = mqgate_cmd(broker, passfile, "--json", "metrics", "bkr", "-m", "rts",
                     "-int", "0.2")
    assert rts.returncode == 0, rts.stderr
    [line] = rts.stdout.splitlines()
    assert set(json.loads(line)["rates"]) == {"messages_in", "messages_out", "bytes_in",
                                              "bytes_out"}


def test_metrics_errors_and_exit_codes(broker, passfile):
    """An unknown destination or service: exit 1 naming it (-n is the command's, not
    mqgate's --instance); --json may follow the command; -msp 0: exit 2, nothing
    sent."""
    missing = mqgate_cmd(broker, passfile, "metrics", "dst", "-t", "q", "-n", "nosuch")
    assert missing.returncode == 1 and "no queue 'nosuch'" in missing.stderr
    service = mqgate_cmd(broker, passfile, "metrics", "svc", "-n", "httpjms")
    assert service.returncode == 1 and "no service 'httpjms'" in service.stderr
    trailing = mqgate_cmd(broker, passfile, "metrics", "dst", "-t", "q", "-n", "nosuch",
                          "--json")
    assert trailing.returncode == 1 and "no queue 'nosuch'" in trailing.stderr
    as_json = mqgate_cmd(broker, passfile, "metrics", "bkr", "--json")
    assert json.loads(as_json.stdout)["destinations"] >= 0, as_json.stderr
    bad = mqgate_cmd(broker, passfile, "metrics", "bkr", "-msp", "0")
    assert bad.returncode == 2 and "-msp" in bad.stderr
