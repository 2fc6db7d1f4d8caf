"""EngineProtocol.flush keeps a connection's failure to itself whoever calls it (S10.4):
the Flusher's turn, a timer (heart-beats, deadlines), the transport's resume."""

import pytest
from twisted.logger import globalLogPublisher

from tests.net.test_amqp_adapter import Harness, run_for


@pytest.fixture
def harness(tmp_path):
    return Harness(tmp_path)


@pytest.fixture
def failures():
    """The failures logged while the test runs, as C{(text, peer)}."""
    seen = []

    def observe(event):
        if "log_failure" in event:
            seen.append((event.get("log_format", ""), event.get("peer")))

    globalLogPublisher.addObserver(observe)
    yield seen
    globalLogPublisher.removeObserver(observe)


def _break(peer):
    """Make every later write of the connection fail inside the engine."""
    def fail():
        raise RuntimeError("engine state broken")
    peer.protocol.engine.data_to_send = fail


def test_a_failing_flush_from_a_timer_drops_only_that_connection(harness, failures):
    """A flush that fails in a heart-beat tick is logged with the peer and drops that
    connection; nothing escapes into the reactor, and the other connection's
    heart-beats go on."""
    broken = harness.opened(idle_timeout=2.0, port=40001)
    healthy = harness.opened(idle_timeout=2.0, port=40002)
    _break(broken)
    run_for(harness.clock, 3)     # raised out of the clock before the guard
    assert broken.transport.disconnected
    assert not healthy.transport.disconnecting
    assert healthy.transport.value()          # its heart-beats were written
    assert [peer for _text, peer in failures] == ["127.0.0.1:40001"]
    failures.clear()
    run_for(harness.clock, 3)     # the dropped connection's timers log nothing more
    assert failures == []


def test_a_failing_flush_on_resume_producing_drops_the_connection(harness, failures):
    """The transport's resumeProducing (its send buffer drained) flushes; a failure
    there is logged with the peer and drops the connection instead of escaping into
    the transport."""
    peer = harness.opened()
    peer.protocol.pauseProducing()
    _break(peer)
    peer.protocol.resumeProducing()
    assert peer.transport.disconnected
    assert [p for _text, p in failures] == ["127.0.0.1:40000"]


def test_a_failing_flush_in_the_flushers_turn_spares_the_others(harness, failures):
    """In the Flusher's turn one connection's failing flush does not cost the next
    connection its write."""
    broken, healthy = harness.opened(port=40001), harness.opened(port=40002)
    _break(broken)
    healthy.protocol.engine.ping()     # something for the healthy one to write
    harness.flusher.mark(broken.protocol)
    harness.flusher.mark(healthy.protocol)
    harness.clock.advance(0)
    assert broken.transport.disconnected
    assert healthy.transport.value() and not healthy.transport.disconnecting
    assert len(failures) == 1
