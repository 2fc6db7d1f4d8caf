"""MQ Light applications against mqgate, with the real client (S8.1-S8.5).

Every test drives the ``mqlight`` npm package (version 2) under node through
L{tests.e2e.mqlight_client}, against one broker on the shipped configuration: no
setting is changed for the client, as an operator would run it. Each test uses
topics and client ids of its own.

Without node or the client's packages (``make node-mqlight``) the tests are skipped,
or fail under ``make test`` and CI (C{MQGATE_REQUIRE_NODE}).
"""

import time

import pytest
from proton import Message

from tests.e2e.admin_cmd import cmd_json
from tests.e2e.mqlight_client import MQLightClient, client_id, require_client
from tests.e2e.proton_client import opened
from tests.e2e.stomp_client import open_client, unique


@pytest.fixture(scope="module")
def mqgate(module_broker_factory):
    """The module's broker, on the shipped configuration."""
    require_client()
    return module_broker_factory()


@pytest.fixture(scope="module")
def service(mqgate):
    """The client's service URL for the module's broker, as the guest user."""
    host, port = mqgate.address("jms")
    return f"amqp://guest:guest@{host}:{port}"


@pytest.fixture(scope="module")
def publisher(service):
    """One publishing client for the module's tests (each starts in a good part of a
    second)."""
    client = MQLightClient(service, client_id("pub"))
    client.started()
    yield client
    client.kill()


@pytest.fixture
def clients(service):
    """A function C{start(prefix or id=...) -> MQLightClient}, started on the module's
    broker; every client it made is ended after the test."""
    made = []

    def start(prefix="app", id=None):
        client = MQLightClient(service, id or client_id(prefix))
        made.append(client)
        client.started()
        return client

    yield start
    for client in made:
        client.kill()


def topic(prefix):
    """A topic of the test's own, with a level under the prefix."""
    return f"{prefix}/{unique('t').replace('-', '_')}"


def test_qos0_round_trip(clients, publisher):
    """At most once: the publisher's transfers are pre-settled and its callback fires
    on sending; the messages arrive in order with their topic, and the connection goes
    on after the client's dispositions for them. (The Node client's receiving link
    leaves the settle mode mixed, so the broker sends unsettled and the client accepts
    each message as it arrives.)"""
    news = topic("qos0")
    subscriber = clients("sub")
    subscriber.subscribe(news, qos=0)
    for n in range(3):
        publisher.send(news, f"news {n}", qos=0)
    got = subscriber.messages(3)
    assert [m["data"] for m in got] == ["news 0", "news 1", "news 2"]
    assert {m["topic"] for m in got} == {news}
    publisher.send(news, {"after": "dispositions"}, qos=0)
    assert subscriber.wait("message")["data"] == {"after": "dispositions"}


def test_qos1_round_trip(clients, publisher):
    """At least once: the publisher's callback fires once the broker settled the
    message; a body past the client's advertised 10,000-byte max-message-size is
    delivered all the same (the limit is advisory for this client)."""
    orders = topic("qos1")
    subscriber = clients("sub")
    subscriber.subscribe(orders, qos=1)
    publisher.send(orders, "order 1", qos=1, ttl=60000)
    publisher.send(orders, {"bytes": 50000}, qos=1)
    first, second = subscriber.messages(2)
    assert (first["data"], first["topic"]) == ("order 1", orders)
    assert 0 < first["ttl"] <= 60000   # what is left of the message's time to live
    assert second["data"] == {"bytes": 50000}


def test_many_messages_past_credit_and_session_window(clients, publisher):
    """Three hundred messages at each qos, more than the client's credit (50 here) and
    its session window (100) hold at once: every one arrives, in order, as the client
    renews credit and window."""
    tasks, ticks = topic("many"), topic("many")
    subscriber = clients("sub")
    subscriber.subscribe(tasks, qos=1, credit=50)
    subscriber.subscribe(ticks, qos=0)
    for n in range(300):
        publisher.command("send", topic=tasks, body=f"task {n}", qos=1)
        publisher.command("send", topic=ticks, body=f"tick {n}", qos=0)
    got = subscriber.messages(600, deadline=60)
    assert [m["data"] for m in got if m["topic"] == tasks] == [
        f"task {n}" for n in range(300)]
    assert [m["data"] for m in got if m["topic"] == ticks] == [
        f"tick {n}" for n in range(300)]


def test_unsubscribe_with_ttl_0_removes_at_once(clients, publisher, mqgate, passfile):
    """unsubscribe(..., {ttl: 0}) detaches with closed=true: the broker answers in
    kind (the client fails the call otherwise) and the subscription is gone at once,
    whatever its ttl was."""
    news = topic("unsub")
    reader = clients("reader")
    reader.subscribe(news, qos=1, ttl=60000)
    reader.unsubscribe(news, ttl=0)
    assert cmd_json(mqgate, passfile, "list", "dur", "-d", news) == []
    publisher.send(news, "nobody subscribed", qos=1)
    reader.subscribe(news, qos=1)
    publisher.send(news, "marker", qos=1)
    assert reader.wait("message")["data"] == "marker"


def test_qos1_credit_is_the_unconfirmed_limit(clients, publisher):
    """With credit 2 and manual confirmation the client holds at most two unconfirmed
    messages: the third comes only once one is confirmed."""
    work = topic("credit")
    subscriber = clients("sub")
    subscriber.subscribe(work, qos=1, autoConfirm=False, credit=2)
    for n in range(3):
        publisher.send(work, f"job {n}", qos=1)
    first, second = subscriber.messages(2)
    subscriber.no_message(within=1.5)
    subscriber.confirm(first["seq"])
    assert subscriber.wait("message")["data"] == "job 2"


def test_wildcards_with_levels(clients, publisher):
    """C{+} matches one C{/} level, C{#} any number; the client is told each message's
    own topic and the pattern that matched it."""
    root = topic("wild")
    one_level, any_level = clients("plus"), clients("hash")
    one_level.subscribe(f"{root}/+/score", qos=1)
    any_level.subscribe(f"{root}/#", qos=1)
    for where in ("football/score", "football/uk/score", "tennis/news"):
        publisher.send(f"{root}/{where}", where, qos=1)
    assert [(m["topic"], m["topicPattern"]) for m in any_level.messages(3)] == [
        (f"{root}/football/score", f"{root}/#"),
        (f"{root}/football/uk/score", f"{root}/#"),
        (f"{root}/tennis/news", f"{root}/#")]
    got = one_level.wait("message")
    assert (got["topic"], got["topicPattern"]) == (f"{root}/football/score",
                                                   f"{root}/+/score")
    # Sent after the others: it arriving first proves the two others never matched.
    publisher.send(f"{root}/golf/score", "marker", qos=1)
    assert one_level.wait("message")["data"] == "marker"


def test_unconfirmed_message_redelivered_after_reconnect(clients, publisher):
    """A qos 1 message the client received but did not confirm comes again to the
    same client id once it reconnects (the subscription's ttl keeps it meanwhile)."""
    orders, me = topic("redeliver"), client_id("worker")
    worker = clients(id=me)
    worker.subscribe(orders, qos=1, autoConfirm=False, ttl=60000)
    publisher.send(orders, "unconfirmed", qos=1)
    assert worker.wait("message")["data"] == "unconfirmed"
    worker.kill()   # gone without confirming: the connection drops
    again = clients(id=me)
    again.subscribe(orders, qos=1, autoConfirm=False, ttl=60000)
    got = again.wait("message")
    assert got["data"] == "unconfirmed"
    again.confirm(got["seq"])


def test_ttl_keeps_messages_while_away_then_discards_them(clients, publisher, mqgate,
                                                          passfile):
    """Messages published while the subscriber is away are kept for its ttl and
    delivered when it comes back; once the ttl has run out the subscription and what
    it held are gone (as list dur shows), and a new one starts empty."""
    news, me = topic("ttl"), client_id("reader")
    reader = clients(id=me)
    reader.subscribe(news, qos=1, ttl=60000)
    reader.stop()
    publisher.send(news, "while away", qos=1)
    back = clients(id=me)
    back.subscribe(news, qos=1, ttl=1000)   # the last subscriber's ttl counts
    assert back.wait("message")["data"] == "while away"
    back.stop()
    publisher.send(news, "too late", qos=1)
    deadline = time.monotonic() + 30
    while cmd_json(mqgate, passfile, "list", "dur", "-d", news):
        assert time.monotonic() < deadline, "the subscription outlived its ttl of 1 s"
    later = clients(id=me)
    later.subscribe(news, qos=1)
    publisher.send(news, "marker", qos=1)
    assert later.wait("message")["data"] == "marker"


def test_shared_subscription_splits_messages(clients, publisher):
    """Two subscribers of one share get the messages between them, each once; a
    private subscriber of the same topic gets every one."""
    jobs, share = topic("share"), unique("crew").replace("-", "_")
    first, second, watcher = clients("one"), clients("two"), clients("all")
    first.subscribe(jobs, share, qos=1, credit=1, autoConfirm=False)
    second.subscribe(jobs, share, qos=1, credit=1, autoConfirm=False)
    watcher.subscribe(jobs, qos=1)
    bodies = [f"job {n}" for n in range(6)]
    for body in bodies:
        publisher.send(jobs, body, qos=1)
    seen = {}
    deadline = time.monotonic() + 30
    while len(seen.get("first", [])) + len(seen.get("second", [])) < len(bodies):
        assert time.monotonic() < deadline, f"share delivered only {seen}"
        for name, client in (("first", first), ("second", second)):
            try:
                got = client.wait("message", deadline=0.5)
            except AssertionError:
                continue
            assert got["share"] == share
            seen.setdefault(name, []).append(got["data"])
            client.confirm(got["seq"])
    assert seen.get("first") and seen.get("second"), seen
    assert sorted(seen["first"] + seen["second"]) == bodies
    assert sorted(m["data"] for m in watcher.messages(len(bodies))) == bodies


def test_second_client_with_the_same_id_replaces_the_first(clients):
    """One connection per client id: the first is told it was replaced
    (ReplacedError, from amqp:link:stolen) and does not reconnect to take its id
    back; the second is served."""
    me, news = client_id("twin"), topic("twin")
    first = clients(id=me)
    second = clients(id=me)
    error = first.wait("error")
    assert error["name"] == "ReplacedError", error
    second.subscribe(news, qos=1)
    second.send(news, "still here", qos=1)
    assert second.wait("message")["data"] == "still here"
    assert [e for e in second.seen if e["event"] == "error"] == []


def test_message_from_a_proton_sender_has_an_address(clients, mqgate):
    """A Proton sender naming the topic only as its link's target sends no
    properties.to, which the client cannot do without: it is given the
    service and the subscription's pattern."""
    alerts = topic("proton")
    subscriber = clients("sub")
    subscriber.subscribe(alerts, qos=1)
    with opened(mqgate, user="guest", password="guest") as conn:
        conn.create_sender(f"topic://{alerts}").send(Message(body="from proton"))
    got = subscriber.wait("message")
    assert (got["data"], got["topic"]) == ("from proton", alerts)


def test_message_from_a_stomp_sender_has_a_header(clients, mqgate):
    """A STOMP SEND becomes an AMQP message without a header section, which the
    client cannot do without either: it gets an empty one. Its topic is the STOMP
    destination, as the publisher addressed it, and its body a Buffer (STOMP bodies
    are bytes)."""
    scores = topic("stomp")
    subscriber = clients("sub")
    subscriber.subscribe(scores, qos=1)
    stomp = open_client(mqgate.address("jms"), user="guest", passcode="guest")
    try:
        stomp.send(f"/topic/{scores}", "from stomp")
    finally:
        stomp.close()
    got = subscriber.wait("message")
    assert (got["data"], got["topic"]) == ({"bytes": 10}, f"/topic/{scores}")
