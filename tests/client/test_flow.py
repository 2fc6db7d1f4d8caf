"""Consumer flow control accounting (S6.2): a consumer never holds and asks for more
than its limit, asks for the next batch at the threshold, and a connection-wide cap
bounds all consumers together."""

import random

import pytest

from mqgate.client.flow import ConnectionFlow, ConsumerFlow


def test_first_batch_is_the_limit():
    """A new consumer asks for its whole limit."""
    flow = ConsumerFlow(100, 50)
    assert flow.top_up() == 100 and flow.top_up() is None


def test_next_batch_at_the_threshold_is_the_limit_minus_what_is_held():
    """No batch while held + credit is above the threshold; at it, the credit becomes
    the limit minus what is held."""
    flow = ConsumerFlow(100, 50)
    flow.top_up()
    for _ in range(100):
        flow.received()
    flow.settled(49)
    assert flow.top_up() is None            # 51 held
    flow.settled(1)
    assert flow.top_up() == 50              # 50 held: 100 - 50


def test_threshold_zero_waits_for_everything_to_be_settled():
    """Threshold 0 %: the next batch only when nothing is held or asked for."""
    flow = ConsumerFlow(10, 0)
    flow.top_up()
    for _ in range(10):
        flow.received()
    flow.settled(9)
    assert flow.top_up() is None
    flow.settled(1)
    assert flow.top_up() == 10


def test_limit_holds_under_any_order_of_events():
    """Whatever arrives and is settled in whatever order, held + credit never passes
    the limit, and a consumer that settles everything is never left without credit."""
    rng = random.Random(7)
    for limit, threshold in [(1, 50), (7, 30), (100, 50), (10, 100)]:
        flow = ConsumerFlow(limit, threshold)
        flow.top_up()
        for _ in range(2000):
            if flow.credit and rng.random() < 0.6:
                flow.received()
            elif flow.held:
                flow.settled(rng.randint(1, flow.held))
            flow.top_up()
            assert flow.held + flow.credit <= limit
        flow.settled(flow.held)
        flow.top_up()
        assert flow.credit > 0


def test_connection_cap_shares_and_frees():
    """Two consumers under a cap of 150 get 100 and 50; once the first settles what it
    had, the second gets the rest of its batch; a closed consumer frees its share."""
    cap = ConnectionFlow(150)
    first, second = ConsumerFlow(100, 50, cap), ConsumerFlow(100, 50, cap)
    assert (first.top_up(), second.top_up()) == (100, 50)
    for _ in range(100):
        first.received()
    assert second.top_up() is None
    first.settled(100)
    assert second.top_up() == 100 and cap.committed <= 150
    second.close()
    assert cap.room() == 150


def test_bad_limit_is_refused():
    """A limit below 1 is refused, naming it."""
    with pytest.raises(ValueError, match="flow limit 0"):
        ConsumerFlow(0)
