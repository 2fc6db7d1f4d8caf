"""The S9.7 show commands as admin request handlers (S11.1), with a hand-filled client
registry and a task.Clock: no sockets, no broker."""

import pytest
from twisted.internet import task

from mqgate.admin.requests import AdminContext, BadRequest, NotFoundError, dispatch
from mqgate.admin.requests import AdminRequest
from mqgate.admin.show import COMMANDS
from mqgate.egress.clients import ClientRegistry, EgressClient
from mqgate.egress.profiles import ProfileTable, profiles_from_settings
from mqgate.egress.scheduler import D1, EgressScheduler
from mqgate.egress.slowness import SlowSubscriberMeter


def make_client(registry, clock, name, user="alice", profile=None):
    """Register a client with a real scheduler and meter; return it."""
    client = EgressClient(
        name, user=user, peer="127.0.0.1:40000", protocol="amqp", service="jms",
        profile=profile, scheduler=EgressScheduler(profile), meter=SlowSubscriberMeter(clock),
        disconnect=lambda reason: None)
    registry.add(client)
    return client


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def context():
    profiles = profiles_from_settings({
        "mqgate.client_profile.gold.d1.max_depth": "500",
        "mqgate.client_profile.gold.max_subscriptions": "42",
        "mqgate.client_profile.assign.bob": "gold",
    })
    return AdminContext(broker=None, clients=ClientRegistry(), profiles=profiles)


def run(context, *words):
    return dispatch(COMMANDS, context, AdminRequest(words[0], words[1], tuple(words[2:])))


def test_show_client_profile_detail_shows_queues_and_assigned_users(context):
    """S9.7: `show client-profile gold detail` renders the profile's queue settings and
    lists the users assigned to it; the data carries the same figures."""
    reply = run(context, "show", "client-profile", "gold", "detail")
    assert "Profile Name" in reply.text and "gold" in reply.text
    assert "500 work units" in reply.text
    assert "Users" in reply.text and "  bob" in reply.text
    [data] = reply.data
    assert data["name"] == "gold"
    assert data["queues"][D1] == {"max_depth": 500, "min_msg_burst": 4}
    assert data["max_subscriptions"] == 42
    assert data["users"] == ["bob"]


def test_show_client_profile_without_detail_is_the_short_form(context):
    """S9.7: without `detail` only the name and connection limits are shown."""
    reply = run(context, "show", "client-profile", "default")
    assert "Profile Name" in reply.text
    assert "work units" not in reply.text


def test_default_profile_says_it_serves_every_unassigned_user(context):
    """S9.7: the default profile serves every user without an assignment; its user
    list says so rather than "(none assigned)"."""
    reply = run(context, "show", "client-profile", "default", "detail")
    assert "every user without an assignment" in reply.text


def test_profile_pattern_shows_every_match(context):
    """S9.7: NAME may be a pattern; each matching profile is shown."""
    reply = run(context, "show", "client-profile", "*")
    assert [d["name"] for d in reply.data] == ["default", "gold"]


def test_unknown_profile_is_not_found_and_lists_the_defined_ones(context):
    """S11.1: an unknown profile is a 404 naming the profiles that exist."""
    with pytest.raises(NotFoundError, match="'silver'.*default, gold"):
        run(context, "show", "client-profile", "silver")


@pytest.mark.parametrize("words", [
    ("show", "client-profile"),
    ("show", "client-profile", "gold", "verbose"),
    ("show", "client"),
    ("show", "client", "x"),
    ("show", "client", "x", "stats"),
    ("show", "client", "x", "stats", "queue", "now"),
    ("show", "client", "x", "slow-subscriber", "some"),
    ("show", "nothing"),
    ("list", "dst"),
])
def test_malformed_commands_are_bad_requests_with_the_usage(context, words):
    """S11.1: a malformed or unknown command is a 400 that says what is accepted."""
    with pytest.raises(BadRequest, match="usage|known"):
        run(context, *words)


def test_client_stats_queue_renders_one_table_per_matching_client(context, clock):
    """S9.7: `show client NAME stats queue` shows each matching client's five queues
    with length, work units, high-water mark, max, discards and deliveries."""
    gold = context.profiles["gold"]
    first = make_client(context.clients, clock, "app-1", profile=gold)
    make_client(context.clients, clock, "app-2")
    make_client(context.clients, clock, "other")
    first.scheduler.offer_direct("m1", 5000)
    reply = run(context, "show", "client", "app-*", "stats", "queue")
    assert reply.text.count("Client Transmit Queues") == 2
    for word in ("HWMark", "Discards", "Deliveries", "G-1", "D-1", "C-1"):
        assert word in reply.text
    assert [d["client"] for d in reply.data] == ["app-1", "app-2"]
    d1 = next(q for q in reply.data[0]["queues"] if q["queue"] == D1)
    assert (d1["length_msgs"], d1["length_units"], d1["max_depth"]) == (1, 3, 500)
    assert reply.data[0]["profile"] == "gold"


def test_client_stats_of_an_unknown_client_is_not_found(context, clock):
    """S11.1: a client name (or pattern) matching no connected client is a 404."""
    make_client(context.clients, clock, "app-1")
    with pytest.raises(NotFoundError, match="'ghost'"):
        run(context, "show", "client", "ghost", "stats", "queue")
    with pytest.raises(NotFoundError, match="'zz\\*'"):
        run(context, "show", "client", "zz*", "stats", "queue")


def test_slow_subscriber_lists_only_the_slow_ones_unless_all(context, clock):
    """S9.4/S9.7: `show client '*' slow-subscriber` lists the slow subscribers and
    counts all clients; with `all` every matching client is listed."""
    slow = make_client(context.clients, clock, "slowpoke")
    make_client(context.clients, clock, "fast")
    slow.scheduler.offer_direct("m", 100)
    slow.meter.record(paused=True, queued=True)
    clock.advance(45)
    reply = run(context, "show", "client", "*", "slow-subscriber")
    assert "slowpoke" in reply.text and "fast" not in reply.text
    assert "1 slow subscriber(s) among 2 client(s)" in reply.text
    everyone = run(context, "show", "client", "*", "slow-subscriber", "all")
    assert "slowpoke" in everyone.text and "fast" in everyone.text
    rows = {d["client"]: d for d in everyone.data}
    assert rows["slowpoke"]["slow"] is True and rows["slowpoke"]["blocked_percent"] == 75
    assert rows["fast"]["slow"] is False and rows["fast"]["queued_bytes"] == 0


def test_slow_subscriber_with_no_clients_is_an_empty_answer(context):
    """S9.7: `*` over no clients is an answer (nobody is slow), not an error; a plain
    name that is not connected is a 404."""
    reply = run(context, "show", "client", "*", "slow-subscriber")
    assert "0 slow subscriber(s) among 0 client(s)" in reply.text
    with pytest.raises(NotFoundError):
        run(context, "show", "client", "ghost", "slow-subscriber")


def test_an_empty_profile_table_still_has_default():
    """S9.7: with no profile configured, `default` is there to show."""
    context = AdminContext(None, ClientRegistry(), ProfileTable())
    assert run(context, "show", "client-profile", "default").data[0]["name"] == "default"
