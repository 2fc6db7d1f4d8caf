"""The per-client egress scheduler: priority, work units, bursts, discards (S9.1-S9.3)."""

import pytest

from mqgate.egress.scheduler import (
    C1, D1, D2, D3, G1, QUEUE_NAMES, EgressScheduler, QueueLimits, cos_for,
    direct_queue_for, work_units,
)

KB = 1024
MB = 1024 * 1024


class _Profile:
    """Just what the scheduler reads from a profile."""

    def __init__(self, name="test", **queues):
        self.name = name
        self.queues = queues


def limited(queue=D1, max_depth=10, min_msg_burst=0, **kwargs):
    """A scheduler whose C{queue} has the given limits (the others default)."""
    return EgressScheduler(_Profile(**{queue: QueueLimits(max_depth, min_msg_burst)}),
                           **kwargs)


def drain(scheduler):
    """Every C{(queue, item, flag)} the scheduler serves now, in order."""
    served = []
    while (entry := scheduler.next()) is not None:
        served.append(entry)
    return served


def items(served):
    return [item for _, item, _ in served]


# -- work units and class of service -------------------------------------------------


@pytest.mark.parametrize("size, units", [
    (0, 1), (1, 1), (2047, 1), (2048, 1), (2049, 2), (4096, 2), (4097, 3),
    (MB, 512), (30 * 1000 * 1000, 14649),
])
def test_work_units(size, units):
    """S9.2: a message occupies ceil(size / 2048) work units, at least one."""
    assert work_units(size) == units


@pytest.mark.parametrize("priority, cos", [
    (0, 1), (3, 1), (4, 2), (6, 2), (7, 3), (9, 3), (None, 2),
])
def test_cos_from_priority_bands(priority, cos):
    """S9.1: without an annotation, priorities 0-3, 4-6 and 7-9 give COS 1, 2 and 3."""
    assert cos_for(priority) == cos


def test_cos_annotation_wins_over_priority():
    """S9.1: an x-opt-cos annotation of 1..3 decides the class of service."""
    assert cos_for(9, annotation_cos=1) == 1
    assert cos_for(0, annotation_cos=3) == 3


@pytest.mark.parametrize("bad", [0, 4, -1, True, "3", 2.0])
def test_cos_annotation_out_of_range_is_ignored(bad):
    """S9.1: an x-opt-cos that is not an integer 1..3 falls back to the priority band."""
    assert cos_for(8, annotation_cos=bad) == 3


def test_cos_two_is_treated_as_low():
    """S9.1: COS 3 files under D-3; COS 1 and the reserved COS 2 under D-1."""
    assert [direct_queue_for(cos) for cos in (1, 2, 3)] == [D1, D1, D3]
    with pytest.raises(ValueError):
        direct_queue_for(4)


# -- order of service ----------------------------------------------------------------


def test_strict_priority_order():
    """S9.1: C-1 is served first, then D-3, then D-1, and G-1 last, whatever the
    order of arrival."""
    scheduler = EgressScheduler()
    scheduler.offer_guaranteed("g", 10)
    scheduler.offer_direct("low", 10, cos=1)
    scheduler.offer_direct("reserved", 10, cos=2)
    scheduler.offer_direct("high", 10, cos=3)
    scheduler.offer_control("flow")
    assert drain(scheduler) == [(C1, "flow", False), (D3, "high", False),
                                (D1, "low", False), (D1, "reserved", False),
                                (G1, "g", False)]


def test_higher_queue_arriving_later_is_served_first():
    """S9.1: a control frame offered while direct messages wait overtakes them."""
    scheduler = EgressScheduler()
    for i in range(3):
        scheduler.offer_direct(i, 10)
    assert scheduler.next() == (D1, 0, False)
    scheduler.offer_control("disposition")
    assert items(drain(scheduler)) == ["disposition", 1, 2]


def test_fifo_within_a_queue():
    """S9.1: messages of one queue leave in the order they arrived."""
    scheduler = EgressScheduler()
    for i in range(10):
        scheduler.offer_direct(i, 100 * i)
    assert items(drain(scheduler)) == list(range(10))


def test_empty_scheduler_serves_nothing():
    """S9.3: with nothing queued next() returns None and nothing is pending."""
    scheduler = EgressScheduler()
    assert scheduler.next() is None and not scheduler.has_pending()


# -- depth, burst and discards --------------------------------------------------------


def test_depth_counted_in_work_units():
    """S9.2: a queue's length is kept in messages and in work units."""
    scheduler = EgressScheduler()
    scheduler.offer_direct("a", 2048)
    scheduler.offer_direct("b", 2049)
    scheduler.offer_direct("c", 10 * KB)
    stats = scheduler.queue_stats(D1)
    assert (stats.length_msgs, stats.length_units) == (3, 1 + 2 + 5)
    scheduler.next()
    stats = scheduler.queue_stats(D1)
    assert (stats.length_msgs, stats.length_units) == (2, 7)


def test_fits_up_to_max_depth_exactly():
    """S9.2: messages are admitted without loss while the queue stays within
    max-depth."""
    scheduler = limited(max_depth=10, min_msg_burst=0)
    for i in range(5):
        assert not scheduler.offer_direct(i, 4096)
    assert scheduler.queue_stats(D1).length_units == 10
    assert scheduler.discards == 0


def test_min_msg_burst_admits_large_messages_over_max_depth():
    """S9.2: a queue holding fewer than min-msg-burst messages admits the next one
    whatever its size, so a burst of 1 MB messages passes a 2-unit max-depth."""
    scheduler = limited(max_depth=2, min_msg_burst=4)
    for i in range(4):
        assert not scheduler.offer_direct(i, MB)
    stats = scheduler.queue_stats(D1)
    assert (stats.length_msgs, stats.length_units, stats.discards) == (4, 2048, 0)


def test_beyond_the_burst_the_oldest_is_discarded():
    """S9.2: once the burst is used up, a full queue drops its oldest message, then
    admits the new one under the burst rule."""
    scheduler = limited(max_depth=2, min_msg_burst=4)
    for i in range(4):
        scheduler.offer_direct(i, MB)
    assert scheduler.offer_direct(4, MB) == [0]
    assert items(drain(scheduler)) == [1, 2, 3, 4]
    assert scheduler.queue_stats(D1).discards == 1


def test_full_queue_discards_oldest_first():
    """S9.2: a full D queue discards its oldest message to admit the new one and
    counts the discard."""
    scheduler = limited(max_depth=10, min_msg_burst=0)
    for i in range(5):
        scheduler.offer_direct(i, 4096)
    assert scheduler.offer_direct(5, 4096) == [0]
    assert scheduler.offer_direct(6, 4096) == [1]
    assert items(drain(scheduler)) == [2, 3, 4, 5, 6]
    assert scheduler.queue_stats(D1).discards == 2 and scheduler.discards == 2


def test_large_message_discards_as_many_as_needed():
    """S9.2: the oldest messages are dropped until the new one fits, not just one."""
    scheduler = limited(max_depth=10, min_msg_burst=0)
    for i in range(5):
        scheduler.offer_direct(i, 4096)           # 2 units each: full
    assert scheduler.offer_direct("big", 6 * 2048) == [0, 1, 2]
    assert items(drain(scheduler)) == [3, 4, "big"]


def test_message_larger_than_max_depth_without_burst_is_itself_discarded():
    """S9.2: with min-msg-burst 0, a message that cannot fit even in an empty queue is
    discarded (and counted) instead of queued."""
    scheduler = limited(max_depth=2, min_msg_burst=0)
    scheduler.offer_direct("small", 100)
    assert scheduler.offer_direct("huge", 3 * 2048) == ["small", "huge"]
    assert scheduler.next() is None
    assert scheduler.queue_stats(D1).discards == 2


def test_discard_indication_on_next_message_only():
    """S9.2: after a discard, the next message delivered carries the discard
    indication, and the one after it does not."""
    scheduler = limited(max_depth=4, min_msg_burst=0)
    for i in range(3):
        scheduler.offer_direct(i, 4096)
    assert drain(scheduler) == [(D1, 1, True), (D1, 2, False)]
    scheduler.offer_direct(3, 100)
    assert scheduler.next() == (D1, 3, False)


def test_discard_indication_skips_control_frames():
    """S9.2: control frames never carry the indication and do not use it up."""
    scheduler = limited(max_depth=2, min_msg_burst=0)
    scheduler.offer_direct(0, 4096)
    scheduler.offer_direct(1, 4096)
    scheduler.offer_control("flow")
    assert drain(scheduler) == [(C1, "flow", False), (D1, 1, True)]


def test_discard_indication_reaches_a_guaranteed_message_of_the_same_key():
    """S9.2: the indication goes on the key's next message, even a guaranteed one,
    and not on another key's message."""
    scheduler = limited(max_depth=2, min_msg_burst=0)
    scheduler.offer_direct("s0", 4096, key="link")
    assert scheduler.offer_direct("x0", 4096, key="other") == ["s0"]
    scheduler.offer_guaranteed("g", 100, key="link")
    assert drain(scheduler) == [(D1, "x0", False), (G1, "g", True)]


def test_discards_are_per_queue():
    """S9.2: a full D-1 does not make D-3 discard, and each queue counts its own."""
    profile = _Profile(**{D1: QueueLimits(2, 0), D3: QueueLimits(2, 0)})
    scheduler = EgressScheduler(profile)
    scheduler.offer_direct("low0", 4096, cos=1)
    scheduler.offer_direct("high0", 4096, cos=3)
    scheduler.offer_direct("low1", 4096, cos=1)
    assert [s.discards for s in scheduler.stats()] == [0, 0, 0, 1, 0]
    assert items(drain(scheduler)) == ["high0", "low1"]


def test_control_is_never_discarded():
    """S9.1: C-1 admits every control frame, however many and however large."""
    scheduler = EgressScheduler(_Profile(**{C1: QueueLimits(2, 0)}))
    for i in range(100):
        scheduler.offer_control(i, MB)
    assert items(drain(scheduler)) == list(range(100))
    assert scheduler.queue_stats(C1).discards == 0


# -- G-1 -----------------------------------------------------------------------------


def test_guaranteed_never_discards_but_refuses():
    """S9.2: a full G-1 refuses the new message and keeps every queued one."""
    scheduler = limited(G1, max_depth=4, min_msg_burst=0)
    assert scheduler.offer_guaranteed("a", 4096)
    assert scheduler.offer_guaranteed("b", 4096)
    assert scheduler.offer_guaranteed("c", 100) is False
    assert not scheduler.has_room_for_guaranteed()
    stats = scheduler.queue_stats(G1)
    assert (stats.length_msgs, stats.discards) == (2, 0)
    assert items(drain(scheduler)) == ["a", "b"]


def test_guaranteed_default_burst_is_255_messages():
    """S9.2: G-1 admits 255 messages whatever their size (default min-msg-burst),
    then refuses while over max-depth."""
    scheduler = EgressScheduler()
    for i in range(255):
        assert scheduler.offer_guaranteed(i, MB)
    assert scheduler.offer_guaranteed(255, MB) is False
    assert scheduler.queue_stats(G1).length_msgs == 255


def test_has_room_for_guaranteed_follows_size():
    """S9.2: room depends on the size of the message that would be offered."""
    scheduler = limited(G1, max_depth=4, min_msg_burst=0)
    scheduler.offer_guaranteed("a", 4096)
    assert scheduler.has_room_for_guaranteed(4096)
    assert not scheduler.has_room_for_guaranteed(4097)


def test_room_callback_after_refusal():
    """S9.2: after a refusal, serving G-1 calls on_guaranteed_room once so the
    caller can pull from the destination again."""
    calls = []
    scheduler = limited(G1, max_depth=2, min_msg_burst=0,
                        on_guaranteed_room=lambda: calls.append(1))
    scheduler.offer_guaranteed("a", 4096)
    scheduler.next()
    assert calls == []              # nothing was refused: nobody is waiting
    scheduler.offer_guaranteed("b", 4096)
    assert not scheduler.offer_guaranteed("c", 10)
    scheduler.next()
    assert calls == [1]
    scheduler.offer_guaranteed("d", 10)
    scheduler.next()
    assert calls == [1]


# -- keys: credit and links ----------------------------------------------------------


def test_blocked_key_is_held_not_served():
    """S9.1: a key without credit keeps its messages queued while others are served."""
    scheduler = EgressScheduler()
    scheduler.offer_direct("a1", 10, key="a")
    scheduler.offer_direct("b1", 10, key="b")
    scheduler.block("a")
    scheduler.offer_direct("a2", 10, key="a")
    assert drain(scheduler) == [(D1, "b1", False)]
    assert not scheduler.has_pending() and scheduler.queued_messages == 2
    scheduler.unblock("a")
    assert items(drain(scheduler)) == ["a1", "a2"]


def test_keys_take_turns_and_keep_their_order():
    """S9.1: within a queue, ready keys take turns; each key's messages stay in order."""
    scheduler = EgressScheduler()
    for i in range(3):
        scheduler.offer_direct(f"a{i}", 10, key="a")
    for i in range(2):
        scheduler.offer_direct(f"b{i}", 10, key="b")
    assert items(drain(scheduler)) == ["a0", "b0", "a1", "b1", "a2"]


def test_discard_takes_the_oldest_of_any_key_and_flags_that_key():
    """S9.2: the stalled key's old message is discarded, not the newer one of another
    key, and only the stalled key's next message carries the indication."""
    scheduler = limited(max_depth=4, min_msg_burst=0)
    scheduler.block("stalled")
    scheduler.offer_direct("s0", 4096, key="stalled")
    scheduler.offer_direct("f0", 4096, key="fast")
    assert scheduler.offer_direct("f1", 4096, key="fast") == ["s0"]
    assert drain(scheduler) == [(D1, "f0", False), (D1, "f1", False)]
    scheduler.offer_direct("s1", 4096, key="stalled")
    scheduler.unblock("stalled")
    assert drain(scheduler) == [(D1, "s1", True)]


def test_withdraw_removes_a_keys_items_without_counting():
    """S9.1: a departing link takes its queued items back; neither discards nor
    deliveries are counted and the lengths drop."""
    scheduler = EgressScheduler()
    scheduler.offer_direct("d", 3000, key="gone")
    scheduler.offer_guaranteed("g", 100, key="gone")
    scheduler.offer_direct("other", 10, key="stays")
    scheduler.block("gone")
    assert scheduler.withdraw("gone") == [(D1, "d"), (G1, "g")]
    assert not scheduler.is_blocked("gone")
    assert scheduler.queued_messages == 1 and scheduler.queued_units == 1
    assert sum(s.discards + s.deliveries for s in scheduler.stats()) == 0
    assert scheduler.withdraw("gone") == []


# -- statistics -------------------------------------------------------------------------


def test_stats_rows_and_high_water_mark():
    """S9.7: per queue: length in messages and work units, high-water mark, max,
    discards and deliveries."""
    scheduler = limited(D3, max_depth=6, min_msg_burst=0)
    for i in range(3):
        scheduler.offer_direct(i, 4096, cos=3)
    scheduler.offer_direct(3, 4096, cos=3)          # discards 0
    scheduler.next()
    scheduler.next()
    stats = scheduler.queue_stats(D3)
    assert (stats.length_msgs, stats.length_units, stats.high_water_units,
            stats.max_depth, stats.discards, stats.deliveries) == (1, 2, 6, 6, 1, 2)
    assert [s.name for s in scheduler.stats()] == list(QUEUE_NAMES)
    assert scheduler.queue_stats(D2).max_depth == 20000


def test_clear_stats_restarts_counters_and_high_water():
    """S9.7: clearing zeroes discards and deliveries; the high-water mark restarts
    from the current length."""
    scheduler = limited(max_depth=4, min_msg_burst=0)
    for i in range(3):
        scheduler.offer_direct(i, 4096)
    scheduler.next()
    scheduler.clear_stats()
    stats = scheduler.queue_stats(D1)
    assert (stats.high_water_units, stats.discards, stats.deliveries) == (2, 0, 0)


def test_totals_over_all_queues():
    """S9.6: the scheduler reports its messages, work units and bytes in all queues."""
    scheduler = EgressScheduler()
    scheduler.offer_control("flow", 20)
    scheduler.offer_direct("d", 5000, cos=3)
    scheduler.offer_guaranteed("g", 3000)
    assert (scheduler.queued_messages, scheduler.queued_units,
            scheduler.queued_bytes) == (3, 1 + 3 + 2, 8020)
    drain(scheduler)
    assert (scheduler.queued_messages, scheduler.queued_units,
            scheduler.queued_bytes) == (0, 0, 0)


def test_new_profile_keeps_queued_messages():
    """S9.2: lowering max-depth does not discard what is already queued; the next
    offer is judged by the new limit."""
    scheduler = EgressScheduler()
    for i in range(4):
        scheduler.offer_direct(i, 4096)
    scheduler.apply_profile(_Profile(**{D1: QueueLimits(4, 0)}))
    assert scheduler.queue_stats(D1).length_msgs == 4
    assert scheduler.offer_direct(4, 4096) == [0, 1, 2]
    assert scheduler.queue_stats(D1).max_depth == 4


def test_queued_messages_follows_every_way_in_and_out():
    """S9.7: the count of waiting messages (a queue length in the show tables, and what
    the adapter checks per delivery) stays the sum of the queues through discards,
    service and withdrawal."""
    scheduler = limited(max_depth=3, min_msg_burst=0)
    for i in range(5):
        scheduler.offer_direct(i, 100, key="a")          # two of them discarded
    scheduler.offer_control(b"flow", 4)
    scheduler.offer_guaranteed("g", 100, key="b")

    def summed():
        return sum(row.length_msgs for row in scheduler.stats())

    assert scheduler.queued_messages == summed() == 5
    assert scheduler.control_waiting == 1
    scheduler.next()
    assert scheduler.queued_messages == summed() == 4 and scheduler.control_waiting == 0
    scheduler.withdraw("a")
    assert scheduler.queued_messages == summed() == 1
