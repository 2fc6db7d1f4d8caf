"""Slow subscribers and the egress buffer load factor (S9.4, S9.6)."""

import pytest
from twisted.internet.task import Clock

from mqgate.egress.slowness import (
    LOAD_CLEAR, LOAD_SET, ClientLoad, LoadFactor, SlowSubscriberMeter,
)
from mqgate.errors import ConfigError


def meter(**kwargs):
    clock = Clock()
    return clock, SlowSubscriberMeter(clock, **kwargs)


# -- slow subscriber meter -------------------------------------------------------------


def test_never_paused_is_not_slow():
    """S9.4: a client whose transport never paused has a share of 0."""
    clock, m = meter()
    m.record(paused=False, queued=True)
    clock.advance(60)
    assert m.share() == 0 and not m.is_slow()


def test_blocked_seconds_make_the_share():
    """S9.4: 40 of the last 60 seconds paused with data queued is a share of 2/3,
    which is slow."""
    clock, m = meter()
    m.record(paused=True, queued=True)
    clock.advance(40)
    m.record(paused=False, queued=True)
    clock.advance(20)
    assert m.blocked_seconds() == 40
    assert m.share() == pytest.approx(40 / 60)
    assert m.percent() == 67 and m.is_slow()


def test_paused_without_data_is_not_blocked():
    """S9.4: a paused transport with nothing to send does not count."""
    clock, m = meter()
    m.record(paused=True, queued=False)
    clock.advance(60)
    assert m.share() == 0


def test_window_slides():
    """S9.4: only the last minute counts: blocked time older than the window fades."""
    clock, m = meter()
    m.record(True, True)
    clock.advance(40)
    m.record(False, True)
    clock.advance(40)          # now 80: seconds 20..39 still inside the window
    assert m.blocked_seconds() == 20
    clock.advance(20)          # now 100: all of it is older than a minute
    assert m.share() == 0


def test_ongoing_block_counts_up_to_now_and_caps_at_the_window():
    """S9.4: a block still in progress counts up to now, at most the whole window."""
    clock, m = meter()
    m.record(True, True)
    clock.advance(30)
    assert m.blocked_seconds() == 30
    clock.advance(1000)
    assert m.blocked_seconds() == 60 and m.share() == 1.0


def test_state_calls_are_equivalent_to_record():
    """S9.4: mark_paused, set_queued and mark_resumed track the same state as record."""
    clock, m = meter()
    m.mark_paused()
    clock.advance(10)           # paused, nothing queued: not blocked
    m.set_queued(True)
    clock.advance(15)
    m.mark_resumed()
    clock.advance(5)
    assert m.paused is False and m.blocked_seconds() == 15


def test_short_pauses_count_their_time_not_whole_seconds():
    """S9.4: a fast consumer paused for 10 ms ten times a second is blocked 10 % of
    the time, not every second."""
    clock, m = meter()
    for _ in range(60 * 10):
        m.record(True, True)
        clock.advance(0.01)
        m.record(False, True)
        clock.advance(0.09)
    assert m.share() == pytest.approx(0.1, abs=0.02)
    assert not m.is_slow()


def test_trouble_adds_a_penalty_for_one_window():
    """S9.4: connection trouble adds its weight in seconds, and it expires with the
    window."""
    clock, m = meter(trouble_weight=6)
    m.trouble()
    m.trouble(weight=12)
    assert m.share() == pytest.approx(18 / 60)
    clock.advance(61)
    assert m.share() == 0


def test_trouble_alone_can_make_a_client_slow():
    """S9.4: enough trouble events make a client slow even without blocked time."""
    clock, m = meter(trouble_weight=10)
    for _ in range(4):
        m.trouble()
        clock.advance(1)
    assert m.is_slow()


def test_threshold_is_exclusive():
    """S9.4: a client is slow only above the threshold share."""
    clock, m = meter(threshold=0.5)
    m.record(True, True)
    clock.advance(30)
    m.record(False, False)
    clock.advance(30)
    assert m.share() == 0.5 and not m.is_slow()


def test_memory_is_bounded_by_the_window():
    """S9.4, P5: hours of frequent pauses keep at most one bucket per second of the
    window."""
    clock, m = meter(window=10)
    for _ in range(5000):
        m.record(True, True)
        clock.advance(0.3)
        m.record(False, True)
        clock.advance(0.4)
    m.trouble()
    assert len(m._buckets) <= 11
    assert 0 < m.share() <= 1


@pytest.mark.parametrize("kwargs, key", [
    ({"window": 0}, "window"), ({"window": 1.5}, "window"),
    ({"threshold": 1.5}, "threshold"), ({"trouble_weight": -1}, "trouble_weight"),
])
def test_meter_rejects_bad_parameters(kwargs, key):
    """S9.4: a bad window, threshold or weight is a ConfigError naming it."""
    with pytest.raises(ConfigError) as info:
        SlowSubscriberMeter(Clock(), **kwargs)
    assert info.value.key == key


# -- load factor -----------------------------------------------------------------------


def test_load_factor_set_and_clear_with_hysteresis():
    """S9.6: "set" fires on reaching 80 %, once; "clear" fires on falling below 60 %,
    once; nothing fires in between."""
    load = LoadFactor(1000)
    assert [load.update(used) for used in (500, 800, 900, 700, 600, 599, 400, 790)] == \
        [None, LOAD_SET, None, None, None, LOAD_CLEAR, None, None]
    assert load.update(850) == LOAD_SET


def test_load_factor_configurable_thresholds():
    """S9.6: the set and clear percentages are configurable."""
    load = LoadFactor(200, set_pct=50, clear_pct=25)
    assert [load.update(used) for used in (99, 100, 50, 49)] == \
        [None, LOAD_SET, None, LOAD_CLEAR]


def test_over_capacity_above_one_hundred_percent():
    """S9.6: the load factor is a percentage of the budget and may exceed 100."""
    load = LoadFactor(1000)
    load.update(1000)
    assert load.percent == 100 and not load.over_capacity
    load.update(1500)
    assert load.percent == 150 and load.over_capacity


def test_victims_slowest_first_until_under_capacity():
    """S9.6: above 100 % the slowest slow subscribers are chosen first, only as many
    as bring the load back under the budget, and fast clients never."""
    load = LoadFactor(1000)
    load.update(1500)
    clients = [
        ClientLoad("fast-big", 900, 0.1, False),
        ClientLoad("slow-a", 300, 0.6, True),
        ClientLoad("slow-b", 300, 0.9, True),
        ClientLoad("slow-c", 300, 0.7, True),
    ]
    assert load.victims(clients) == ["slow-b", "slow-c"]


def test_victims_ties_free_more_bytes_first():
    """S9.6: between equally slow subscribers the one holding more is chosen first."""
    load = LoadFactor(1000)
    load.update(1100)
    clients = [ClientLoad("small", 50, 0.8, True), ClientLoad("large", 200, 0.8, True)]
    assert load.victims(clients) == ["large"]


def test_victims_all_slow_when_not_enough():
    """S9.6: when every slow subscriber together is not enough, all of them are
    chosen, and no fast client."""
    load = LoadFactor(1000)
    load.update(5000)
    clients = [ClientLoad("fast", 4000, 0.0, False), ClientLoad("slow", 100, 0.9, True)]
    assert load.victims(clients) == ["slow"]


def test_no_victims_within_capacity():
    """S9.6: nobody is disconnected while the load factor is at most 100 %."""
    load = LoadFactor(1000)
    load.update(950)
    assert load.victims([ClientLoad("slow", 500, 1.0, True)]) == []


@pytest.mark.parametrize("args, key", [
    ((0,), "budget_bytes"), ((100, 0), "set_pct"), ((100, 120), "set_pct"),
    ((100, 60, 70), "clear_pct"), ((100, 80, -1), "clear_pct"),
])
def test_load_factor_rejects_bad_parameters(args, key):
    """S9.6: a bad budget or threshold is a ConfigError naming it."""
    with pytest.raises(ConfigError) as info:
        LoadFactor(*args)
    assert info.value.key == key
