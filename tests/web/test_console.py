"""The web console's server side: one page of destinations (filtered by name before any
figure is read, with rates for queues and topics), the overview and its NDJSON stream,
the console's files, and the audit rules that keep a polling console out of the trail.
A real core broker and a real twisted.web site in memory; time is a task.Clock."""

import json

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from mqgate.admin.pages import LatestReading, RateBook, destination_page, page_arguments
from mqgate.admin.requests import AdminContext, AdminRequests, BadRequest
from mqgate.admin.commands import admin_commands
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable
from mqgate.egress.slowness import LoadFactor
from mqgate.metrics.snapshot import MetricsSources
from mqgate.security.audit import AuditingAuthenticator
from mqgate.security.auth import AuthenticationFailed
from mqgate.web.admin import STREAM_MAX_SECONDS, AdminApi
from mqgate.web.site import make_site
from tests.core import consume, make_broker, send as core_send
from tests.web.test_admin import ADMIN, Audit, FakeAuthenticator
from tests.web.wire import Response, basic, exchange, send


class CountingBroker:
    """The core broker, counting the destinations looked up by name (each one a
    destination whose figures are read)."""

    def __init__(self, broker):
        self._broker = broker
        self.looked_up = 0

    def __getattr__(self, name):
        return getattr(self._broker, name)

    def destination(self, kind, name):
        self.looked_up += 1
        return self._broker.destination(kind, name)


@pytest.fixture
def core():
    broker, clock = make_broker()
    return broker, clock


def console_site(broker, clock, audit=None, metrics=None):
    context = AdminContext(broker, ClientRegistry(), ProfileTable(), metrics=metrics)
    api = AdminApi(AdminRequests(context, admin_commands()), FakeAuthenticator(),
                   audit=audit or Audit(), clock=clock)
    return make_site(api.resource())


# -- a page of destinations ------------------------------------------------------------


def test_only_the_page_is_measured_at_ten_thousand_destinations(core):
    """10,000 queues: a page of 50 filtered by name looks up 50 destinations, not
    10,000; the total counts every name that passed the filter."""
    broker, clock = core
    for n in range(10_000):
        broker.create_queue(f"orders.{n:05d}" if n % 2 else f"prices.{n:05d}")
    counting = CountingBroker(broker)
    page = destination_page(counting, RateBook(), clock.seconds(), text="ORDERS",
                            offset=100, limit=50)
    assert page["total"] == 5000
    names = [d["name"] for d in page["destinations"]]
    assert names[:2] == ["orders.00201", "orders.00203"]
    assert len(page["destinations"]) == 50
    assert counting.looked_up == 50


def test_queues_come_before_topics_and_broker_names_are_left_out(core):
    """Both kinds, queues first, each by name; the broker's own (mq*) and temporary
    destinations are not listed; type= keeps one kind."""
    broker, clock = core
    broker.create_topic("b.topic")
    broker.create_queue("a.queue")
    broker.create_queue("mq.sys.dmq")
    broker.create_queue("z.queue")
    page = destination_page(broker, RateBook(), 0.0)
    assert [(d["type"], d["name"]) for d in page["destinations"]] == [
        ("queue", "a.queue"), ("queue", "z.queue"), ("topic", "b.topic")]
    page = destination_page(broker, RateBook(), 0.0, kind="topic")
    assert [d["name"] for d in page["destinations"]] == ["b.topic"]


def test_rates_of_queues_and_topics_come_from_two_readings(core):
    """The first reading has no rate; the next, two seconds later, has the messages
    in and out per second of each destination, a topic's too."""
    broker, clock = core
    broker.create_queue("q")
    broker.create_topic("t")
    consume(broker, "topic://t", credit=100)
    rates = RateBook()
    first = destination_page(broker, rates, clock.seconds())["destinations"]
    assert [d["messages_in_per_second"] for d in first] == [None, None]
    core_send(broker, "queue://q", *[b"x"] * 10)
    core_send(broker, "topic://t", *[b"y"] * 4)
    clock.advance(2)
    second = {d["name"]: d for d in
              destination_page(broker, rates, clock.seconds())["destinations"]}
    assert second["q"]["messages_in_per_second"] == 5.0
    assert second["q"]["messages"] == 10
    assert second["t"]["messages_in_per_second"] == 2.0
    assert second["t"]["messages_out_per_second"] == 2.0


def test_a_reading_soon_after_another_shows_the_last_rate(core):
    """Two consoles polling the same page do not make each other's rates jumpy: a
    reading within half a second of the last shows the rate made then."""
    broker, clock = core
    broker.create_queue("q")
    rates = RateBook()
    destination_page(broker, rates, 0.0)
    core_send(broker, "queue://q", *[b"x"] * 4)
    assert destination_page(broker, rates, 1.0)["destinations"][0][
        "messages_in_per_second"] == 4.0
    core_send(broker, "queue://q", *[b"x"] * 100)
    assert destination_page(broker, rates, 1.2)["destinations"][0][
        "messages_in_per_second"] == 4.0


def test_readings_nobody_asks_for_again_are_forgotten(core):
    broker, clock = core
    for name in ("a", "b"):
        broker.create_queue(name)
    rates = RateBook()
    destination_page(broker, rates, 0.0)
    assert len(rates) == 2
    destination_page(broker, rates, rates.forget_after + 1, text="a")
    assert len(rates) == 1


@pytest.mark.parametrize("args, named", [
    ({"limit": "0"}, "limit=0"), ({"limit": "501"}, "limit=501"),
    ({"offset": "-1"}, "offset=-1"), ({"offset": "ten"}, "offset=ten"),
    ({"type": "exchange"}, "type=exchange")])
def test_bad_page_arguments_are_refused_naming_the_value(args, named):
    with pytest.raises(BadRequest, match=named):
        page_arguments(args)


def test_a_page_over_http(core):
    """GET /api/destinations with offset, limit or filter answers one page; without
    them it is still the whole list of list dst; a bad value is a JSON 400."""
    broker, clock = core
    for name in ("alpha", "beta", "alphabet"):
        broker.create_queue(name)
    site = console_site(broker, clock)
    response = send(site, "GET", "/api/destinations?filter=alpha&limit=1", auth=ADMIN)
    assert response.status == 200
    page = response.json()
    assert (page["total"], page["limit"]) == (2, 1)
    assert [d["name"] for d in page["destinations"]] == ["alpha"]
    whole = send(site, "GET", "/api/destinations", auth=ADMIN).json()
    assert sorted(d["name"] for d in whole) == ["alpha", "alphabet", "beta"]
    bad = send(site, "GET", "/api/destinations?limit=100000", auth=ADMIN)
    assert bad.status == 400 and "limit=100000" in bad.json()["error"]
    assert send(site, "GET", "/api/destinations?limit=5").status == 401


# -- the overview and its stream ---------------------------------------------------


def test_overview_has_memory_state_load_factor_and_egress(core):
    broker, clock = core
    factor = LoadFactor(1000)
    factor.update(850)
    metrics = MetricsSources(clock, load_factor=factor)
    site = console_site(broker, clock, metrics=metrics)
    data = send(site, "GET", "/api/overview", auth=ADMIN).json()
    assert data["load_factor"]["percent"] == 85.0 and data["load_factor"]["raised"]
    assert set(data["egress"]["queued_messages"]) == {"C-1", "D-3", "D-2", "D-1", "G-1"}
    assert "messages" in data["broker"]


def stream(site, path, auth=ADMIN):
    raw = (f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n").encode()
    return exchange(site, raw)


def lines(transport):
    body = Response(transport.value()).body
    return [json.loads(line) for line in body.decode().splitlines() if line]


def test_the_metrics_stream_writes_a_line_each_interval_with_rates(core):
    """One JSON line at once and one each interval; the second has the messages in
    per second since the first; the stream stops when the client goes."""
    broker, clock = core
    site = console_site(broker, clock)
    transport, protocol = stream(site, "/api/stream/metrics?interval=2")
    head = Response(transport.value())
    assert head.status == 200
    assert head.headers["content-type"].startswith("application/x-ndjson")
    core_send(broker, "queue://q", *[b"x"] * 6)
    clock.advance(2)
    first, second = lines(transport)
    assert first["messages_in_per_second"] is None
    assert second["messages_in_per_second"] == 3.0
    assert second["broker"]["messages"] == 6
    protocol.connectionLost(Failure(ConnectionDone()))
    assert clock.getDelayedCalls() == []


class ReadCounting(CountingBroker):
    """The core broker, counting the readings of its totals (one per overview)."""

    reads = 0

    @property
    def stats(self):
        self.reads += 1
        return self._broker.stats


def test_consoles_share_one_reading_of_the_broker(core):
    """Each reading walks every destination: two consoles streaming at once read the
    broker once a second between them, each with rates of its own."""
    broker, clock = core
    counted = ReadCounting(broker)
    site = console_site(counted, clock)
    first, _ = stream(site, "/api/stream/metrics")
    second, _ = stream(site, "/api/stream/metrics")
    core_send(broker, "queue://q", b"x")
    clock.advance(1)
    assert [line["broker"]["messages_in"] for line in lines(first)] == [0, 1]
    assert [line["broker"]["messages_in"] for line in lines(second)] == [0, 1]
    assert lines(second)[1]["messages_in_per_second"] == 1.0
    assert counted.reads == 2


def test_a_reading_is_shared_while_fresh():
    reads = []
    latest = LatestReading(lambda: reads.append(1) or len(reads), fresh=0.5)
    assert [latest(0.0), latest(0.4), latest(0.5), latest(0.7), latest(0.2)] == [
        1, 1, 2, 2, 3]


def test_the_metrics_stream_ends_after_its_time_and_refuses_bad_intervals(core):
    broker, clock = core
    site = console_site(broker, clock)
    transport, _ = stream(site, "/api/stream/metrics?interval=60")
    clock.advance(STREAM_MAX_SECONDS)
    assert transport.value().endswith(b"0\r\n\r\n")   # the chunked body's end
    assert clock.getDelayedCalls() == []
    for bad in ("0.1", "61", "soon"):
        transport, _ = stream(site, f"/api/stream/metrics?interval={bad}")
        response = Response(transport.value())
        assert response.status == 400 and f"interval={bad}" in response.json()["error"]
    transport, _ = stream(site, "/api/stream/metrics", auth=basic("admin", "wrong"))
    assert Response(transport.value()).status == 401


def test_polling_the_console_reads_writes_no_audit_record(core):
    broker, clock = core
    audit = Audit()
    site = console_site(broker, clock, audit=audit)
    for path in ("/api/overview", "/api/destinations?limit=5", "/api/durables"):
        assert send(site, "GET", path, auth=ADMIN).status == 200
    stream(site, "/api/stream/metrics")
    assert audit.records == []
    send(site, "PUT", "/api/destinations/queue/made", body={}, auth=ADMIN)
    assert [r[2]["command"] for r in audit.records] == ["create dst -t q -n made"]


# -- the console's files ---------------------------------------------------------------


def fetch(site, path):
    """GET C{path} without a login, pulling a static file's producer to its end (a
    StringTransport never pulls it)."""
    transport, channel = exchange(site, f"GET {path} HTTP/1.1\r\nHost: x\r\n"
                                        "Connection: close\r\n\r\n".encode())
    http = channel._channel
    for _ in range(1000):
        # What the reactor's cooperator does for a file's pull producer (twisted.web
        # wraps it to push): ask it for more, until the response is done.
        if http._requestProducer is None:
            break
        http._requestProducer._producer.resumeProducing()
    return Response(transport.value())


def test_the_console_is_served_without_login_with_a_strict_policy(core):
    """Its files hold no data: no login; the page may load only its own files."""
    broker, clock = core
    site = console_site(broker, clock)
    page = fetch(site, "/console/")
    assert page.status == 200 and b"<title>mqgate console</title>" in page.body
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    script = fetch(site, "/console/api.js")
    assert script.status == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert fetch(site, "/console").headers["location"] == "/console/"


@pytest.mark.parametrize("path", ["/console/nosuch.js", "/console/../admin.py",
                                  "/console/%2e%2e/admin.py", "/console/api.js/x"])
def test_nothing_but_the_console_files_is_served(core, path):
    broker, clock = core
    response = fetch(console_site(broker, clock), path)
    assert response.status == 404
    assert b"import" not in response.body


# -- logins over HTTP in the audit trail -------------------------------------------


class Succeeding:
    def __init__(self):
        self.fail = False

    def authenticate(self, username, password, source=None, service=None):
        from twisted.internet import defer
        from mqgate.security.auth import Principal
        if self.fail:
            return defer.fail(AuthenticationFailed(username, "wrong password"))
        return defer.succeed(Principal(username, {"admin"}))


def test_a_repeated_http_login_is_recorded_once_per_quiet_time():
    """Every HTTP request logs in: the first login of a user from an address is in the
    trail, the repeats within the quiet time are not, a failure always is and the next
    success is recorded again."""
    clock, audit, inner = Clock(), Audit(), Succeeding()
    auth = AuditingAuthenticator(inner, audit).quiet_repeats(clock, 300)
    login = lambda address="10.0.0.1": auth.authenticate(  # noqa: E731
        "admin", "pw", address, "httpadmin")
    for _ in range(3):
        login()
    login("10.0.0.2")
    assert [(r[1], r[2]["address"]) for r in audit.records] == [
        ("ok", "10.0.0.1"), ("ok", "10.0.0.2")]
    clock.advance(301)
    login()
    inner.fail = True
    login().addErrback(lambda _: None)
    inner.fail = False
    login()
    assert [r[1] for r in audit.records] == ["ok", "ok", "ok", "failed", "ok"]


def test_other_services_record_every_login():
    clock, audit = Clock(), Audit()
    auth = AuditingAuthenticator(Succeeding(), audit)
    for _ in range(3):
        auth.authenticate("admin", "pw", "10.0.0.1", "jms")
    assert len(audit.records) == 3
