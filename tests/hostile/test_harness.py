"""The probe harness itself: it passes on an idle broker and fails on a stalled one.

A probe that cannot fail proves nothing, so these tests stop the real broker with
SIGSTOP and check that the probe reports it.
"""

import os
import signal
import time

import pytest

from tests.hostile.probe import Probe, broker_rss, wait_until


@pytest.fixture(scope="module")
def broker(module_broker):
    """One broker for the module: every test leaves it running as it found it (a
    frozen broker is always sent SIGCONT, a probe closes its connection)."""
    return module_broker


def stall(broker, seconds):
    """Freeze the broker process for C{seconds} (SIGSTOP, then SIGCONT)."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)     # the stall itself is what is measured
    finally:
        os.kill(broker.pid, signal.SIGCONT)


def enough_samples(watcher, count):
    return lambda: len(watcher.samples) >= count


@pytest.mark.parametrize("protocol", ["stomp", "amqp"])
def test_probe_passes_on_an_idle_broker(broker, probe, protocol):
    """An idle broker answers every 50 ms round trip within 100 ms."""
    watcher = probe(broker, protocol=protocol)
    wait_until(enough_samples(watcher, 20), 10, "20 round trips")
    watcher.assert_responsive(limit=0.1)
    assert len(watcher.samples) >= 20
    assert all(s.complete for s in watcher.samples)


@pytest.mark.parametrize("protocol", ["stomp", "amqp"])
def test_probe_fails_when_the_broker_stalls(broker, protocol):
    """A broker frozen for 0.6 s shows as a round trip of at least 0.45 s, and fails.

    The round trip the freeze catches may start up to one probe interval (50 ms) after
    it began, so the bound is the freeze less that interval, with room to spare (a
    0.5 s freeze against the same bound once gave 0.449 s)."""
    with Probe(broker, protocol=protocol) as watcher:
        wait_until(enough_samples(watcher, 5), 10, "5 round trips")
        stall(broker, 0.6)
        count = len(watcher.samples)
        wait_until(enough_samples(watcher, count + 5), 10, "5 round trips after the stall")
    assert watcher.worst >= 0.45
    with pytest.raises(AssertionError, match="worst round trip"):
        watcher.assert_responsive(limit=0.1)


def test_a_round_trip_still_out_counts_as_growing(broker):
    """Stopping the probe while the broker is frozen records the stall, not a gap."""
    watcher = Probe(broker).start()
    wait_until(enough_samples(watcher, 5), 10, "5 round trips")
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: watcher.worst >= 0.3, 5, "the probe to see the stall")
        watcher.stop()
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    last = watcher.samples[-1]
    assert not last.complete and last.seconds >= 0.3
    with pytest.raises(AssertionError, match="had not come back"):
        watcher.assert_responsive(limit=0.1)


def test_too_few_samples_fail(broker):
    """A probe that made too few round trips fails even if each was fast."""
    watcher = Probe(broker).start()
    wait_until(enough_samples(watcher, 2), 10, "2 round trips")
    with pytest.raises(AssertionError, match="only .* round trips"):
        watcher.assert_responsive(limit=10, min_samples=1000)


def test_broker_rss_reads_the_broker_memory(broker):
    """The broker's resident memory is read from /proc: tens of megabytes for Python."""
    assert 10 << 20 < broker_rss(broker) < 2 << 30
