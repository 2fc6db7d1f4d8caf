"""IntervalService (mqgate/net/timers.py): the timer behind the settings whose 0
means off (mqgate.ping.interval, mqgate.metrics.interval), on a fake clock."""

import pytest
from twisted.internet.task import Clock

from mqgate.net.timers import IntervalService


def _running(interval, enabled=True):
    clock, calls = Clock(), []
    service = IntervalService("tick", interval, lambda: calls.append(clock.seconds()),
                              clock, enabled=enabled)
    service.startService()
    return clock, calls, service


def test_calls_at_once_then_every_interval_until_stopped():
    """An interval of 2 s calls at the start, then at 2 s and 4 s, and not after the
    stop."""
    clock, calls, service = _running(2)
    clock.pump([1, 1, 1, 1])
    assert calls == [0, 2, 4]
    service.stopService()
    clock.pump([2, 2])
    assert calls == [0, 2, 4]
    assert service.name == "tick" and service.enabled


@pytest.mark.parametrize("interval, enabled", [(0, True), (None, True), (-1, True),
                                               (5, False)])
def test_off_when_zero_or_disabled_calls_nothing_and_stops_quietly(interval, enabled):
    """A 0 (or missing, or negative) interval, or enabled=False: never called, no
    call pending on the clock, and stopping it is no error."""
    clock, calls, service = _running(interval, enabled)
    clock.pump([10, 10])
    assert calls == [] and clock.getDelayedCalls() == []
    assert not service.enabled
    assert service.stopService() is None
