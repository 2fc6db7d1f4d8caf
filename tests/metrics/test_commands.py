"""The metrics admin commands (S5.1, S11.1) on a real broker core, and the sampling
that `mqgate cmd` does with -int and -msp."""

import os

import pytest
from twisted.internet.task import Clock

from mqgate.admin.requests import AdminContext, AdminRequests, BadRequest, \
    NotFoundError, dispatch, parse_request, request_body
from mqgate.amqp.message import build_message
from mqgate.core import Broker, BrokerMessage
from mqgate.egress.clients import ClientRegistry
from mqgate.metrics.commands import (
    COMMANDS, SampleTable, metrics_broker, metrics_destination, metrics_service, rates,
    sampling)
from mqgate.metrics.snapshot import MetricsSources

from tests.core import consume


@pytest.fixture
def context():
    clock = Clock()
    broker = Broker(clock)
    producer = broker.open_producer("queue://orders")
    for size in (100, 250):
        producer.send(BrokerMessage(b"x" * size))
    consume(broker, "topic://news", credit=1)
    return AdminContext(broker, ClientRegistry(), None,
                        metrics=MetricsSources(clock, clock.seconds()))


def test_metrics_dst_totals_as_table_and_data(context):
    """metrics dst -t q -n orders: the totals as a table and the same as data."""
    reply = metrics_destination(context, ["-t", "q", "-n", "orders"])
    assert (reply.data["messages_in"], reply.data["bytes_in"]) == (2, 350)
    assert reply.data["producers"] == 1
    lines = reply.text.splitlines()
    assert lines[0] == "Metrics of queue orders"
    assert "Msgs in" in lines[2] and "Bytes held" in lines[2]
    assert lines[4].split()[:3] == ["2", "0", "350"]


def test_metrics_dst_con_shows_producers_and_consumers(context):
    """-m con: the consumer table (producers, consumers, ready, unacked)."""
    reply = metrics_destination(context, ["-t", "t", "-n", "news", "-m", "con"])
    assert "Producers" in reply.text and "Consumers" in reply.text
    assert reply.data["consumers"] == 1 and reply.data["type"] == "topic"


def test_metrics_dst_errors_name_what_is_wrong(context):
    """An unknown destination is a 404 naming it; a bad -m, a missing -n or a bad -t
    a 400 with the usage."""
    with pytest.raises(NotFoundError, match="no queue 'nosuch'"):
        metrics_destination(context, ["-t", "q", "-n", "nosuch"])
    with pytest.raises(BadRequest, match="-m 'dsk'.*usage: metrics dst"):
        metrics_destination(context, ["-t", "q", "-n", "orders", "-m", "dsk"])
    with pytest.raises(BadRequest, match="missing -n"):
        metrics_destination(context, ["-t", "q"])
    with pytest.raises(BadRequest, match="destination type 'x'"):
        metrics_destination(context, ["-t", "x", "-n", "orders"])


def test_metrics_bkr_and_unknown_service(context):
    """metrics bkr answers the broker's totals; metrics svc of a service that is not
    running is a 404 that says how to list them."""
    reply = metrics_broker(context, [])
    assert reply.data["messages_in"] == 2 and reply.data["destinations"] == 2
    assert reply.text.startswith("Broker metrics")
    with pytest.raises(NotFoundError, match="no service 'jms' is running.*list svc"):
        metrics_service(context, ["-n", "jms"])


def test_metrics_bkr_has_the_process_memory_and_cpu(context):
    """metrics bkr carries the broker process's resident memory and CPU time, as the
    kernel reports them, in its data and its table."""
    before = os.times()
    reply = metrics_broker(context, [])
    after = os.times()
    data = reply.data
    with open("/proc/self/status") as status:
        [vm_rss] = [line.split()[1] for line in status if line.startswith("VmRSS:")]
    kernel_rss = int(vm_rss) * 1024
    assert abs(data["rss_bytes"] - kernel_rss) < kernel_rss // 10
    assert data["peak_rss_bytes"] >= data["rss_bytes"] > 0
    assert before.user - 0.01 <= data["cpu_user_seconds"] <= after.user + 0.01
    assert before.system - 0.01 <= data["cpu_system_seconds"] <= after.system + 0.01
    heads, rule, values = reply.text.splitlines()[2:5]
    assert "Memory (MiB)" in heads and "CPU (s)" in heads
    memory, cpu = values.split()[-2:]
    assert float(memory) == pytest.approx(data["rss_bytes"] / (1 << 20), abs=0.01)
    assert float(cpu) == pytest.approx(
        data["cpu_user_seconds"] + data["cpu_system_seconds"], abs=0.01)


def test_commands_run_through_the_admin_table(context):
    """The commands are rows of the admin table: a request's words reach them."""
    request = parse_request(build_message(request_body(
        "metrics", "dst", ["-t", "q", "-n", "orders"])))
    reply = dispatch(COMMANDS, context, request)
    assert reply.data["name"] == "orders"
    assert AdminRequests(context, COMMANDS).commands.keys() >= {
        ("metrics", "bkr"), ("metrics", "svc"), ("metrics", "dst")}


def test_sampling_takes_int_and_msp_out_of_the_words():
    """-int and -msp are the client's: taken out, the rest goes to the broker; -m rts
    asks once more, so that every line has rates."""
    plan = sampling(["metrics", "dst", "-t", "q", "-n", "x", "-int", "2", "-msp", "3"])
    assert plan.words == ("metrics", "dst", "-t", "q", "-n", "x")
    assert (plan.interval, plan.samples, plan.readings, plan.single) == (2.0, 3, 3, False)
    rts = sampling(["metrics", "bkr", "-m", "rts"])
    assert (rts.samples, rts.readings, rts.rates, rts.single) == (1, 2, True, False)
    assert sampling(["metrics", "bkr"]).single


@pytest.mark.parametrize("words", [["-int", "0"], ["-msp", "0"], ["-int", "soon"],
                                   ["-msp"]])
def test_sampling_refuses_bad_values(words):
    """A zero, a word or a missing value for -int/-msp is refused before anything is
    sent."""
    with pytest.raises(BadRequest):
        sampling(["metrics", "bkr", *words])


def test_rates_and_sample_lines():
    """Rates are the differences over the seconds between readings; the first line of
    a sampled table has none."""
    first = {"messages_in": 10, "messages_out": 4, "bytes_in": 1000, "bytes_out": 400,
             "messages": 6}
    second = {"messages_in": 30, "messages_out": 14, "bytes_in": 3000, "bytes_out": 900,
              "messages": 16}
    assert rates(first, second, 2.0) == {"messages_in": 10.0, "messages_out": 5.0,
                                         "bytes_in": 1000.0, "bytes_out": 250.0}
    table = SampleTable(first)
    assert "Msgs/s in" in table.head and "Msgs held" in table.head
    assert "Connections" not in table.head
    assert table.line("12:00:00", first, None).split()[5:9] == ["-"] * 4
    line = table.line("12:00:02", second, rates(first, second, 2.0)).split()
    assert line[5:10] == ["10.00", "5.00", "1000", "250.00", "16"]
