"""The comparison's pure parts: the peers' configuration, --broker, and the summary.

No broker is started here (bench/run_node.py --broker does that, by hand or with
`make bench BROKER=...`); these tests check what the comparison tells its user: the
medians, which other broker is best, mqgate's ratio to it, and what was skipped.
"""

import argparse
import json
import xml.etree.ElementTree as ET

import pytest

from bench import run_node
from bench.peers import brokers

AMQ = "{http://activemq.apache.org/schema/core}"


def test_rabbitmq_conf_listens_on_loopback_with_the_user():
    text = brokers.render_rabbitmq_conf(5672, 61613, "bench", "s3cret")
    settings = dict(line.split(" = ", 1) for line in text.splitlines()
                    if line and not line.startswith("#"))
    assert settings["listeners.tcp.1"] == "127.0.0.1:5672"
    assert settings["stomp.listeners.tcp.1"] == "127.0.0.1:61613"
    assert (settings["default_user"], settings["default_pass"]) == ("bench", "s3cret")


@pytest.mark.parametrize("user", ["", "two words"])
def test_rabbitmq_conf_refuses_a_user_it_cannot_write(user):
    with pytest.raises(brokers.PeerError, match="without spaces"):
        brokers.render_rabbitmq_conf(5672, 61613, user, "guest")


def test_activemq_xml_stomp_only_with_the_user_escaped(tmp_path):
    text = brokers.render_activemq_xml(tmp_path / "data", 61613, "guest", 'a"b&<c')
    broker = ET.fromstring(text).find(AMQ + "broker")
    uris = [c.get("uri") for c in broker.iter(AMQ + "transportConnector")]
    assert uris == ["stomp://127.0.0.1:61613"]
    user = broker.find(f".//{AMQ}authenticationUser")
    assert (user.get("username"), user.get("password")) == ("guest", 'a"b&<c')
    assert broker.get("dataDirectory") == str(tmp_path / "data")
    assert broker.find(f".//{AMQ}kahaDB").get("directory") == str(tmp_path / "data" / "kahadb")


def test_activemq_xml_with_amqp(tmp_path):
    text = brokers.render_activemq_xml(tmp_path, 61613, "guest", "guest", amqp_port=5672)
    uris = [c.get("uri") for c in ET.fromstring(text).iter(AMQ + "transportConnector")]
    assert uris == ["stomp://127.0.0.1:61613", "amqp://127.0.0.1:5672"]


def test_broker_list():
    assert run_node.broker_list("all") == ["mqgate", "rabbitmq", "activemq"]
    assert run_node.broker_list("activemq,mqgate") == ["mqgate", "activemq"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown broker kafka"):
        run_node.broker_list("mqgate,kafka")


def test_options_that_need_broker(capsys):
    with pytest.raises(SystemExit):
        run_node.parse_args(["--rounds", "3"])
    assert "go with --broker" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_node.parse_args(["--broker", "all", "--amqp-url", "amqp://h:1",
                             "--stomp-url", "stomp://h:2"])
    assert "leave out --amqp-url" in capsys.readouterr().err


def test_only_takes_the_generators_names():
    options = run_node.parse_args(["--broker", "all", "--rate", "500",
                                   "--only", "stomp-latency-500,amqp-queue-4k"])
    assert run_node.chosen_scenarios(options) == ["amqp-queue-4k", "stomp-latency-500"]
    assert len(run_node.chosen_scenarios(run_node.parse_args(["--broker", "all"]))) == 10


def line(broker, scenario, round_number, **figures):
    generator = "node-rhea" if scenario.startswith("amqp") else "node-stomp"
    return {"broker": broker, "round": round_number, "scenario": scenario,
            "generator": generator, **figures}


LINES = [
    # (a) over STOMP: mqgate's median 20,000 (one failed round), the best other is
    # activemq's 25,000, so the ratio is 0.8.
    line("mqgate", "stomp-queue-auto", 1, msgs_per_s=19000.0),
    line("mqgate", "stomp-queue-auto", 2, error="no progress for 30 s"),
    line("mqgate", "stomp-queue-auto", 3, msgs_per_s=21000.0),
    line("rabbitmq", "stomp-queue-auto", 1, msgs_per_s=9000.0),
    line("rabbitmq", "stomp-queue-auto", 2, msgs_per_s=11000.0),
    line("activemq", "stomp-queue-auto", 1, msgs_per_s=30000.0),
    line("activemq", "stomp-queue-auto", 2, msgs_per_s=25000.0),
    line("activemq", "stomp-queue-auto", 3, msgs_per_s=24000.0),
    # (d) over AMQP: the lowest p99 is the best; activemq has no AMQP.
    line("mqgate", "amqp-latency-2000", 1, p50_ms=0.5, p99_ms=1.5),
    line("rabbitmq", "amqp-latency-2000", 1, p50_ms=0.4, p99_ms=3.0),
    {"broker": "activemq", "round": 1, "scenario": "amqp-latency-2000",
     "skipped": "this ActiveMQ installation has no AMQP module"},
]


def test_summary_medians_best_and_ratio():
    rows = run_node.summarize(LINES, ["mqgate", "rabbitmq", "activemq"], 2000)
    # In the order, (a) to (e), AMQP before STOMP within a row.
    assert [row["scenario"] for row in rows] == ["stomp-queue-auto", "amqp-latency-2000"]
    queue, latency = rows
    assert queue["medians"] == {"mqgate": 20000.0, "rabbitmq": 10000.0, "activemq": 25000.0}
    assert queue["counts"]["mqgate"] == (2, 3)
    assert queue["best"] == "activemq" and queue["ratio"] == pytest.approx(0.8)
    assert latency["best"] == "rabbitmq" and latency["ratio"] == pytest.approx(0.5)
    assert latency["medians"]["activemq"] is None and "activemq" in latency["notes"]


def test_summary_table():
    brokers_run = ["mqgate", "rabbitmq", "activemq"]
    text = run_node.render_summary(run_node.summarize(LINES, brokers_run, 2000),
                                   brokers_run, 3)
    rows = {cells[0]: cells[1:] for cells in (
        [cell.strip() for cell in row.strip("|").split("|")]
        for row in text.splitlines() if row.startswith("| ("))}
    queue = rows["(a) queue 256 B, non-persistent: `stomp-queue-auto`"]
    assert queue == ["node-stomp", "20,000 (2 of 3 runs)", "10,000", "25,000", "activemq", "0.80"]
    latency = rows["(d) 2,000 msg/s, p99 latency (ms): `amqp-latency-2000`"]
    assert latency == ["node-rhea", "1.50 (p50 0.50)", "3.00 (p50 0.40)", "no AMQP",
                       "rabbitmq", "0.50"]
    assert "activemq: this ActiveMQ installation has no AMQP module." in text
    assert "Medians of 3 runs" in text


def test_summary_of_mqgate_alone_has_no_ratio():
    mine = [entry for entry in LINES if entry["broker"] == "mqgate"]
    text = run_node.render_summary(run_node.summarize(mine, ["mqgate"], 2000), ["mqgate"], 1)
    assert text.splitlines()[0] == "| scenario | generator | mqgate |"


def test_a_protocol_the_peer_lacks_is_skipped_without_starting_it(monkeypatch, tmp_path):
    """ActiveMQ without its AMQP module: AMQP scenarios give "skipped" lines and, when
    nothing else is asked for, no ActiveMQ is started at all."""
    monkeypatch.setattr(brokers.ActiveMQ, "has_amqp", staticmethod(lambda: False))
    monkeypatch.setattr(brokers.ActiveMQ, "start",
                        lambda self: pytest.fail("ActiveMQ started for nothing"))
    options = run_node.parse_args(["--broker", "activemq", "--only", "amqp-queue-4k"])
    lines = run_node.on_broker(options, "activemq", (5672, 61613), 1)
    assert lines == [{"broker": "activemq", "round": 1, "scenario": "amqp-queue-4k",
                      "skipped": brokers.ActiveMQ(tmp_path, 1, 2).note}]
    assert "no AMQP module" in lines[0]["skipped"]


def test_summary_of_a_saved_run(tmp_path, capsys):
    """--summary-of turns a saved (possibly cut short) comparison into the same table,
    with the brokers and rounds its lines name."""
    saved = tmp_path / "run.jsonl"
    saved.write_text("".join(json.dumps(entry) + "\n" for entry in LINES), encoding="utf-8")
    assert run_node.main(["--summary-of", str(saved)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == ("| scenario | generator | mqgate | rabbitmq | activemq "
                                    "| best other | mqgate / best |")
    assert "| 20,000 (2 of 3 runs) | 10,000 | 25,000 | activemq | 0.80 |" in text
    assert "Medians of 3 runs" in text
