"""Client profiles: keys, validation, assignment, and the show tables (S9.7)."""

import pytest

from mqgate.egress.profiles import (
    DEFAULT_PROFILE, ClientProfile, ProfileTable, TcpKeepAlive, profiles_from_settings,
    render_client_queue_stats, render_profile, render_slow_subscribers,
)
from mqgate.egress.scheduler import (
    C1, D1, D2, D3, G1, EgressScheduler, QueueLimits,
)
from mqgate.egress.slowness import ClientLoad
from mqgate.errors import ConfigError

P = "mqgate.client_profile."


def config_error(mapping):
    with pytest.raises(ConfigError) as info:
        profiles_from_settings(mapping)
    return info.value


# -- defaults and parsing --------------------------------------------------------------


def test_default_profile_always_exists_with_the_source_defaults():
    """S9.7, S9.2: without any key, profile default has max-depth 20000 everywhere,
    min-msg-burst 4 (255 for G-1), and the source's connection limits."""
    table = profiles_from_settings({})
    profile = table[DEFAULT_PROFILE]
    assert {q: profile.queues[q].max_depth for q in (C1, D3, D2, D1, G1)} == \
        dict.fromkeys((C1, D3, D2, D1, G1), 20000)
    assert [profile.queues[q].min_msg_burst for q in (C1, D3, D2, D1, G1)] == \
        [4, 4, 4, 4, 255]
    assert (profile.max_connections_per_user, profile.max_subscriptions,
            profile.max_egress_flows, profile.max_ingress_flows) == \
        (6000, 5000000, 16000, 16000)
    assert profile.tcp_keepalive == TcpKeepAlive(True, 5, 3, 1)


def test_profile_keys_and_assignment():
    """S9.7: a named profile takes per-queue limits and connection limits from its keys
    and is used by the users assigned to it."""
    table = profiles_from_settings({
        P + "web_1.d1.max_depth": "100",
        P + "web_1.g1.min_msg_burst": " 64 ",
        P + "web_1.max_connections_per_user": "10",
        P + "web_1.max_subscriptions": "500",
        P + "web_1.tcp_keepalive": "false",
        P + "web_1.tcp_keepalive.idle": "30",
        P + "assign.alice": "web_1",
        P + "assign.svc.reports": "web_1",
    })
    web = table.for_user("alice")
    assert web.name == "web_1" and table.for_user("svc.reports") is web
    assert web.queues[D1] == QueueLimits(100, 4)
    assert web.queues[G1] == QueueLimits(20000, 64)
    assert (web.max_connections_per_user, web.max_subscriptions) == (10, 500)
    assert web.tcp_keepalive == TcpKeepAlive(False, 5, 30, 1)
    assert table.users_of("web_1") == ["alice", "svc.reports"]
    assert table.names() == ["default", "web_1"]


def test_unassigned_user_gets_default():
    """S9.7: a user without an assignment uses profile default."""
    table = profiles_from_settings({P + "other.d1.max_depth": "50"})
    assert table.for_user("bob").name == DEFAULT_PROFILE


def test_default_profile_can_be_changed():
    """S9.7: the keys of profile default change it."""
    table = profiles_from_settings({P + "default.d3.max_depth": "300"})
    assert table.for_user("anyone").queues[D3].max_depth == 300


def test_typed_values_are_accepted():
    """S9.7: already-typed ints and bools (from -D or a typed mapping) are taken too."""
    table = profiles_from_settings({P + "p.c1.max_depth": 7, P + "p.tcp_keepalive": False})
    assert table["p"].queues[C1].max_depth == 7
    assert table["p"].tcp_keepalive.enabled is False


def test_other_keys_are_ignored():
    """S9.7: keys outside mqgate.client_profile. are not the profile parser's."""
    table = profiles_from_settings({"mqgate.jms.tcp.port": "5672"})
    assert table.names() == [DEFAULT_PROFILE]


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a" * 33, "has-dash", "sp ace", "été"])
def test_bad_profile_names_are_refused(name):
    """S9.7: profile names are 1 to 32 letters, digits or _; the error names the key."""
    key = P + name + ".max_subscriptions"
    error = config_error({key: "1"})
    assert error.key == key and "32" in error.allowed


def test_longest_name_is_accepted():
    """S9.7: a 32-character name of letters, digits and _ is valid."""
    name = "A_1" + "b" * 29
    assert profiles_from_settings({P + name + ".max_subscriptions": "1"})[name].name == name


@pytest.mark.parametrize("setting, value, allowed", [
    ("d1.max_depth", "1", "an integer from 2 to 262144"),
    ("g1.max_depth", "262145", "an integer from 2 to 262144"),
    ("d2.min_msg_burst", "-1", "an integer from 0 to 262144"),
    ("c1.min_msg_burst", "262145", "an integer from 0 to 262144"),
    ("d3.max_depth", "lots", "an integer from 2 to 262144"),
    ("d3.max_depth", "1_000", "an integer from 2 to 262144"),
    ("max_connections_per_user", "0", "an integer from 1 to 1000000"),
    ("tcp_keepalive.count", "300", "an integer from 1 to 255"),
    ("tcp_keepalive", "yes", "true or false"),
])
def test_out_of_range_values_name_key_and_range(setting, value, allowed):
    """S9.2, S9.7: a bad value is a ConfigError with the key, the value and the range."""
    error = config_error({P + "p." + setting: value})
    assert (error.key, error.value, error.allowed) == (P + "p." + setting, value, allowed)


def test_range_limits_are_inclusive():
    """S9.2: max-depth 2 and 262144 and min-msg-burst 0 and 262144 are valid."""
    table = profiles_from_settings({
        P + "p.d1.max_depth": "2", P + "p.d3.max_depth": "262144",
        P + "p.d1.min_msg_burst": "0", P + "p.g1.min_msg_burst": "262144"})
    assert table["p"].queues[D1] == QueueLimits(2, 0)


@pytest.mark.parametrize("setting",
                         ["d4.max_depth", "d1.depth", "colour", "tcp_keepalive.x"])
def test_unknown_setting_lists_the_known_ones(setting):
    """S9.7: an unknown profile setting is a ConfigError listing the valid settings."""
    error = config_error({P + "p." + setting: "1"})
    assert error.key == P + "p." + setting and "d1.max_depth" in error.allowed


def test_assignment_to_undefined_profile_is_refused():
    """S9.7: assigning a user to a profile that does not exist names the defined ones."""
    error = config_error({P + "gold.max_subscriptions": "5", P + "assign.bob": "silver"})
    assert (error.key, error.value) == (P + "assign.bob", "silver")
    assert "default, gold" in error.allowed


def test_profile_constructor_validates():
    """S9.7: building a ClientProfile directly checks the name and every range."""
    with pytest.raises(ConfigError):
        ClientProfile("bad name")
    with pytest.raises(ConfigError):
        ClientProfile("assign")     # reserved for the assignment keys
    with pytest.raises(ConfigError) as info:
        ClientProfile("p", {D1: QueueLimits(1, 4)})
    assert info.value.key == P + "p.d1.max_depth"
    with pytest.raises(ConfigError):
        ClientProfile("p", max_subscriptions=-1)
    with pytest.raises(ConfigError):
        ProfileTable([ClientProfile("p")], {"bob": "q"})


def test_scheduler_uses_the_profile_limits():
    """S9.2, S9.7: a scheduler built with a profile applies its queue limits."""
    table = profiles_from_settings({P + "tiny.d1.max_depth": "2",
                                    P + "tiny.d1.min_msg_burst": "0"})
    scheduler = EgressScheduler(table["tiny"])
    scheduler.offer_direct("a", 4096)
    assert scheduler.offer_direct("b", 4096) == ["a"]


# -- show tables -----------------------------------------------------------------------


def test_render_profile_summary_and_detail():
    """S9.7: show client-profile gives the name and limits; detail adds every queue's
    max-depth and min-msg-burst, lowest priority first, and the assigned users."""
    profile = ClientProfile("gold", {D1: QueueLimits(100, 8)}, max_subscriptions=42)
    summary = render_profile(profile)
    assert "gold" in summary and "42" in summary and "work units" not in summary
    detail = render_profile(profile, detail=True, users=["alice"]).splitlines()
    depth = detail.index("Queue Max Depth")
    assert [line.split(":")[0].strip() for line in detail[depth + 1:depth + 6]] == \
        [G1, D1, D2, D3, C1]
    assert detail[depth + 2].split(":")[1].strip() == "100 work units"
    burst = detail.index("Priority Queue Minimum Burst")
    assert [line.split(":")[1].strip() for line in detail[burst + 1:burst + 6]] == \
        ["255 messages", "8 messages", "4 messages", "4 messages", "4 messages"]
    assert "  alice" in detail


def _table_rows(text):
    """The data rows of a rendered table: cells split on '|' and stripped."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    rows = []
    for line in lines[rule + 1:]:
        if "|" not in line:
            break
        rows.append([cell.strip() for cell in line.split("|")])
    return rows


def test_render_client_queue_stats_table():
    """S9.7: show client NAME stats queue lists, per queue from G-1 to C-1, length in
    messages and work units, high-water mark, max, discards and deliveries."""
    profile = ClientProfile("gold", {D1: QueueLimits(4, 0)})
    scheduler = EgressScheduler(profile)
    for i in range(3):
        scheduler.offer_direct(i, 4096)
    scheduler.offer_control("flow")
    scheduler.next()
    scheduler.next()
    text = render_client_queue_stats("consumer-7", scheduler, slow=True)
    assert "consumer-7" in text and "gold" in text and "Yes" in text
    assert _table_rows(text) == [
        [G1, "0", "0", "0", "20000", "0", "0"],
        [D1, "1", "2", "4", "4", "1", "1"],
        [D2, "0", "0", "0", "20000", "0", "0"],
        [D3, "0", "0", "0", "20000", "0", "0"],
        [C1, "0", "0", "1", "20000", "0", "1"],
    ]
    header = text.splitlines()
    assert any("HWMark" in line and "Deliveries" in line for line in header)


def test_render_slow_subscribers_lists_slow_ones_slowest_first():
    """S9.4: show client * slow-subscriber lists the slow clients, slowest first, with
    their blocked percentage."""
    rows = [ClientLoad("a", 10, 0.6, True), ClientLoad("b", 20, 0.9, True),
            ClientLoad("c", 30, 0.1, False)]
    text = render_slow_subscribers(rows)
    assert [row[:3] for row in _table_rows(text)] == [["b", "Yes", "90"],
                                                      ["a", "Yes", "60"]]
    assert "2 slow subscriber(s) among 3 client(s)" in text
    assert len(_table_rows(render_slow_subscribers(rows, include_all=True))) == 3


def test_render_slow_subscribers_when_none():
    """S9.4: with no slow subscriber the command says so."""
    text = render_slow_subscribers([ClientLoad("c", 30, 0.1, False)])
    assert text == "0 slow subscriber(s) among 1 client(s)\n"
