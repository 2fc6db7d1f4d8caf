"""
The capture views over HTTP (S7.6) on a real twisted.web site in memory, over a real
SQLite index: logged in through the admin API, search with its filters and paging,
one message, "verify on broker" against a real core, traces, status, and the live
tail as NDJSON (heartbeats, a paused reader told what it missed).
"""

import json

import pytest
from twisted.internet import task
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from mqgate.admin.requests import AdminContext, AdminRequests
from mqgate.capture.tail import TailHub
from mqgate.core.broker import Broker, CoreConfig
from mqgate.core.message import BrokerMessage
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable
from mqgate.web.admin import AdminApi
from mqgate.web.capture import CaptureResource, parse_time
from mqgate.web.site import make_site
from tests.capture.conftest import IndexOpener, copy
from tests.deferreds import result
from tests.web.test_admin import Audit, FakeAuthenticator
from tests.web.wire import Response, basic, exchange, send

ADMIN = basic("admin", "secret")


@pytest.fixture
def views(tmp_path):
    opener = IndexOpener("sqlite", str(tmp_path / "capture" / "index.sqlite"))
    hub = TailHub()
    index, _ = opener.index(tail=hub, now=lambda: 1100.0)
    clock = task.Clock()
    core = Broker(clock, CoreConfig())
    resource = CaptureResource(index, hub, clock, broker=core, heartbeat=15,
                               max_readers=2, max_backlog=2)
    context = AdminContext(None, ClientRegistry(), ProfileTable())
    audit = Audit()
    api = AdminApi(AdminRequests(context, {}), FakeAuthenticator(), audit=audit,
                   capture=resource)
    site = make_site(api.resource())
    yield site, index, clock, core, audit
    opener.close_all()


def get(site, path, auth=ADMIN):
    return send(site, "GET", path, auth=auth)


def test_the_views_need_an_admin_login_and_are_audited(views):
    site, _, _, _, audit = views
    assert get(site, "/api/capture/status", auth=None).status == 401
    assert get(site, "/api/capture/status", auth=basic("alice", "pw")).status == 403
    response = get(site, "/api/capture/status")
    assert response.status == 200 and response.json()["database"].startswith("SQLite")
    assert audit.records[-1][2]["command"] == "GET /api/capture/status"


def test_search_filters_and_pages(views):
    site, index, _, _, _ = views
    index.ingest(copy("orders", at=1000.0, properties={"region": "emea"}))
    index.ingest(copy("orders", at=1010.0, properties={"region": "apac"},
                      correlation_id="c1"))
    index.ingest(copy("audit", at=1020.0))
    result(index.drained())
    page = get(site, "/api/capture/messages?address=orders&limit=1").json()
    assert [m["id"] for m in page["messages"]] == [2] and page["next"] == 2
    page = get(site, f"/api/capture/messages?address=orders&before={page['next']}").json()
    assert [m["id"] for m in page["messages"]] == [1] and page["next"] is None
    assert [m["id"] for m in get(site, "/api/capture/messages?property=region=emea")
            .json()["messages"]] == [1]
    assert [m["id"] for m in get(site, "/api/capture/messages?correlation_id=c1")
            .json()["messages"]] == [2]
    iso = "/api/capture/messages?from=1970-01-01T00:16:50Z&to=1020"
    assert [m["id"] for m in get(site, iso).json()["messages"]] == [2]


@pytest.mark.parametrize("query, words", [
    ("from=yesterday", "seconds since the epoch or an ISO 8601 time"),
    ("limit=0", "limit '0': 1 or more"),
    ("limit=5000", "from 1 to 1000"),
    ("property=region", "NAME=VALUE"),
    ("colour=red", "unknown query parameter 'colour'"),
    ("address=a&address=b", "given more than once"),
    ("from=20&to=10", "'from' must be before 'to'"),
])
def test_a_bad_search_is_a_400_naming_the_value(views, query, words):
    site = views[0]
    response = get(site, f"/api/capture/messages?{query}")
    assert response.status == 400 and words in response.json()["error"]


def test_one_message_and_an_unknown_one(views):
    site, index, _, _, _ = views
    index.ingest(copy(body=b"the body"))
    result(index.drained())
    assert get(site, "/api/capture/messages/1").json()["body_text"] == "the body"
    missing = get(site, "/api/capture/messages/9")
    assert missing.status == 404 and "no captured message 9" in missing.json()["error"]
    assert get(site, "/api/capture/nothing").status == 404


def test_verify_on_broker_finds_a_waiting_original_and_says_why_not(views):
    """S7.5, S7.7: with the original's id the queues it reached are looked through;
    a consumed original is reported missing there; without an id, or for a topic,
    the action is disabled with the reason."""
    site, index, _, core, _ = views
    core.create_queue("orders")
    waiting = BrokerMessage(b"x", message_id="m-1")
    core.open_producer("orders").send(waiting)
    index.ingest(copy("orders", original_id="m-1"))
    index.ingest(copy("orders", original_id="999"))
    index.ingest(copy("orders"))
    index.ingest(copy("prices", kind="topic", original_id="5"))
    result(index.drained())
    found = get(site, "/api/capture/messages/1/verify").json()
    assert found["offered"] and found["found_in"] == ["orders"]
    gone = get(site, "/api/capture/messages/2/verify").json()
    assert gone["found_in"] == [] and "not waiting there" in gone["missing"]["orders"]
    none = get(site, "/api/capture/messages/3/verify").json()
    assert none["offered"] is False and "carries no id" in none["reason"]
    topic = get(site, "/api/capture/messages/4/verify").json()
    assert topic["offered"] is False and "cannot tell which subscriptions" in topic[
        "reason"]


def test_traces_pair_requests_with_replies(views):
    site, index, _, _, _ = views
    index.ingest(copy("svc", message_id="q1", reply_to="rep", at=1000.0))
    index.ingest(copy("rep", correlation_id="q1", at=1000.5))
    result(index.drained())
    trace = get(site, "/api/capture/traces?address=svc").json()
    assert trace["answered"] == 1 and trace["pairs"][0]["latency"] == 0.5


def tail_lines(transport):
    body = Response(transport.value()).body
    return [json.loads(line) for line in body.splitlines() if line]


def test_the_tail_streams_lines_heartbeats_and_missed_counts(views):
    site, index, clock, _, _ = views
    raw = (b"GET /api/capture/tail?address=orders HTTP/1.1\r\nHost: x\r\n"
           b"Authorization: " + ADMIN.encode() + b"\r\n\r\n")
    transport, protocol = exchange(site, raw)
    head = transport.value()
    assert b"200 OK" in head and b"application/x-ndjson" in head
    index.ingest(copy("orders", body=b"one"))
    index.ingest(copy("other", body=b"not mine"))
    clock.advance(15)
    lines = tail_lines(transport)
    assert [l["type"] for l in lines] == ["heartbeat", "message", "heartbeat"]
    assert lines[1]["body_text"] == "one"
    # The reader's socket is full: two lines are kept, the rest counted.
    transport.producer.pauseProducing()
    for n in range(5):
        index.ingest(copy("orders", body=b"m%d" % n))
    clock.advance(15)                       # no heartbeat while lines wait
    transport.producer.resumeProducing()
    lines = tail_lines(transport)[3:]
    assert [l.get("body_text") for l in lines[:2]] == ["m0", "m1"]
    assert lines[2] == {"type": "dropped", "count": 3, "reason": "slow reader"}
    protocol.connectionLost(Failure(ConnectionDone()))
    assert index.tail.readers == 0


def test_tail_readers_are_bounded(views):
    site = views[0]
    raw = (b"GET /api/capture/tail HTTP/1.1\r\nHost: x\r\n"
           b"Authorization: " + ADMIN.encode() + b"\r\n\r\n")
    exchange(site, raw)
    exchange(site, raw)
    third, _ = exchange(site, raw)
    response = Response(third.value())
    assert response.status == 503 and "try again later" in response.json()["error"]


def test_without_an_index_the_views_say_how_to_turn_it_on():
    context = AdminContext(None, ClientRegistry(), ProfileTable())
    api = AdminApi(AdminRequests(context, {}), FakeAuthenticator(), audit=Audit())
    response = get(make_site(api.resource()), "/api/capture/status")
    assert response.status == 404
    assert "mqgate.capture.index.enabled" in response.json()["error"]


def test_times_are_epoch_seconds_or_iso_8601():
    assert parse_time("1000.5") == 1000.5
    assert parse_time("1970-01-01T00:16:40Z") == 1000.0
    assert parse_time("1970-01-01T00:16:40") == 1000.0
    assert parse_time("1970-01-01T01:16:40+01:00") == 1000.0
    with pytest.raises(ValueError):
        parse_time("noon")


def test_the_views_and_the_capture_subscriptions_routes_are_apart(views):
    """/api/capture/... (these views) and /api/captures/NAME (installing captures)
    are two routes: neither shadows the other."""
    site = views[0]
    assert get(site, "/api/capture/status").status == 200
    response = send(site, "PUT", "/api/captures/tap", body={"address": "orders"},
                    auth=ADMIN)
    assert response.status != 500 and "capture" in response.json()["error"]
