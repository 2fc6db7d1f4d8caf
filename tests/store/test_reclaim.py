"""
Compaction that deletes dead journal segments without reading them (S3.3): which
segments may go unread (no live add or latest delivery count, no removal still needed
for an add elsewhere, no two-phase record), and that a restart finds the messages that
were live, however the segments were reclaimed.
"""

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqgate.store import FileStore, destination_key
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")
#: Small segments: a few dozen records each.
SEGMENT = 1500


def open_store(directory, threshold=0.5):
    store = FileStore(directory, run_now, segment_size=SEGMENT,
                      compact_threshold=threshold)
    return store, result(store.recover())


def restarted(directory):
    """What a new store recovers from a copy of C{directory} (the store that wrote it
    abandoned, as after kill -9)."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(directory, copy)
        store = FileStore(copy, run_now, compact_threshold=None)
        return result(store.recover())


def live(recovered, key=Q):
    return {m.message_id: m.delivery_count for m in recovered.messages.get(key, [])}


def segments(directory):
    return sorted(p.name for p in (directory / "journal").glob("*.seg"))


def flow(store, first, count, keep=5, drain=False):
    """Messages C{first}.. added one by one, each removed once C{keep} newer ones are
    in (C{drain}: the last ones too): the journal fills with dead segments. Returns
    the ids left."""
    for mid in range(first, first + count):
        result(store.add_message(Q, mid, b"f" * 40))
        if mid - keep >= first:
            result(store.remove_message(Q, mid - keep))
    left = set(range(first + count - keep, first + count))
    if drain:
        for mid in sorted(left):
            result(store.remove_message(Q, mid))
        return set()
    return left


def fill_first_segment(store, directory, first):
    """Messages C{first}.. until the journal in C{directory} starts its second
    segment; returns the ids in the first one (the last id went to the second)."""
    mid = first
    while True:
        result(store.add_message(Q, mid, b"s" * 40))
        if len(segments(directory)) > 1:
            return list(range(first, mid)), mid
        mid += 1


def test_a_flow_through_is_reclaimed_without_reading_the_journal(tmp_path):
    """Segments whose messages all left are deleted unread: no pass replays the
    journal, and it stays a few segments long."""
    store, _ = open_store(tmp_path)
    left = flow(store, 1, 2000)
    stats = store.stats
    assert stats["compactions"] >= 5 and stats["full_compactions"] == 0
    assert stats["segments_deleted"] >= 5 * 5
    assert len(segments(tmp_path)) <= 3
    assert set(live(restarted(tmp_path))) == left


def test_a_removal_whose_add_stays_on_disk_keeps_its_segment(tmp_path):
    """A removal of a message added in a segment that stays (mostly live) is kept with
    its segment, so the message does not come back after a restart."""
    store, _ = open_store(tmp_path)
    in_first, rolled = fill_first_segment(store, tmp_path, 1)
    first = segments(tmp_path)[0]
    result(store.remove_message(Q, rolled))
    result(store.remove_message(Q, 1))     # in the second segment, which is dead then
    left = flow(store, 100, 1000)
    assert first in segments(tmp_path)
    assert store.stats["segments_deleted"] > 0
    assert set(live(restarted(tmp_path))) == set(in_first[1:]) | left


@pytest.mark.parametrize("restart", [False, True], ids=["running", "restarted"])
def test_a_delivery_count_of_a_live_message_keeps_its_segment(tmp_path, restart):
    """The latest delivery count of a live message is kept wherever it was written,
    also by a store that learnt of it from its recovery."""
    store, _ = open_store(tmp_path)
    result(store.add_message(Q, 1, b"c" * 40))
    flow(store, 100, 300, drain=True)
    result(store.update_delivery_count(Q, 1, 2))
    flow(store, 1000, 300, drain=True)
    result(store.update_delivery_count(Q, 1, 3))
    if restart:
        result(store.close())
        store, _ = open_store(tmp_path)
    flow(store, 2000, 1000, drain=True)
    assert store.stats["segments_deleted"] > 0
    assert live(restarted(tmp_path)) == {1: 3}


def test_after_a_restart_segments_are_known_from_the_replay(tmp_path):
    """A restarted store knows from its recovery which old segments are dead, which
    removals are still needed and where live messages are."""
    store, _ = open_store(tmp_path, threshold=None)
    result(store.add_message(Q, 1, b"o" * 40))
    for mid in range(2, 20):
        result(store.add_message(Q, mid, b"o" * 40))
    result(store.remove_message(Q, 2))       # needed while the first segment stays
    flow(store, 100, 600)
    result(store.close())
    before = len(segments(tmp_path))
    store, recovered = open_store(tmp_path)
    assert live(recovered).keys() == {1} | set(range(3, 20)) | set(range(695, 700))
    result(store.remove_message(Q, 1))
    left = flow(store, 1000, 1000)
    assert store.stats["segments_deleted"] >= before - 2
    assert set(live(restarted(tmp_path))) == set(range(3, 20)) | set(range(695, 700)) | left


def test_two_phase_records_are_left_to_the_full_pass(tmp_path):
    """The segment of a prepared transaction that only removes messages, and that of
    the COMMIT of a transaction prepared segments earlier, are kept however dead they
    look: after a restart the one is still prepared, with its removals, and the other
    committed."""
    store, _ = open_store(tmp_path)
    for mid in range(1, 4):
        result(store.add_message(Q, mid, b"t" * 40))
    flow(store, 100, 200, drain=True)
    result(store.begin("pending"))
    result(store.remove_message(Q, 1, txn="pending"))
    result(store.prepare("pending"))
    result(store.begin("done"))
    for mid in (50, 51):
        result(store.add_message(Q, mid, b"d" * 40, txn="done"))
    result(store.prepare("done"))
    flow(store, 1000, 300, drain=True)
    result(store.commit("done"))
    flow(store, 2000, 1500, drain=True)
    assert store.stats["segments_deleted"] > 0
    recovered = restarted(tmp_path)
    assert set(live(recovered)) == {1, 2, 3, 50, 51}
    assert list(recovered.prepared) == ["pending"]
    assert list(recovered.prepared["pending"].removes) == [(Q, 1)]


# -- a model: whatever the order of writes, compactions and restarts -------------------

_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 30)),         # that many new messages
    st.tuples(st.just("drain"),),                          # every free message removed
    st.tuples(st.just("remove"), st.integers(0, 50)),      # the n-th live one (mod)
    st.tuples(st.just("count"), st.integers(0, 50)),
    st.tuples(st.just("txn"), st.integers(0, 50), st.sampled_from(
        ["commit", "rollback", "prepare-commit", "prepare-rollback", "prepare"])),
    st.tuples(st.just("resolve"), st.booleans()),
    st.tuples(st.just("compact"), st.booleans()),
    st.tuples(st.just("restart"),),
), min_size=5, max_size=80)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_recovery_matches_the_model_however_segments_were_reclaimed(ops):
    """Random adds, removals, delivery counts, transactions (one- and two-phase,
    resolved later or not), compactions and restarts: a restart recovers exactly the
    live messages, their counts and the pending transactions."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        store, _ = open_store(directory)
        model, pending, next_id = {}, {}, 1      # mid -> count; txn -> (adds, removes)
        for op in ops:
            kind = op[0]
            free = sorted(set(model) - {m for _, r in pending.values() for m in r})
            if kind == "add":
                for _ in range(op[1]):
                    result(store.add_message(Q, next_id, b"m" * (20 + next_id % 50)))
                    model[next_id] = 0
                    next_id += 1
            elif kind == "drain":
                for mid in free:
                    result(store.remove_message(Q, mid))
                    del model[mid]
            elif kind in ("remove", "count") and free:
                mid = free[op[1] % len(free)]
                if kind == "remove":
                    result(store.remove_message(Q, mid))
                    del model[mid]
                else:
                    model[mid] += 1
                    result(store.update_delivery_count(Q, mid, model[mid]))
            elif kind == "txn":
                txn = f"t{next_id}"
                removes = [free[op[1] % len(free)]] if free else []
                adds = [next_id, next_id + 1]
                next_id += 2
                result(store.begin(txn))
                for mid in adds:
                    result(store.add_message(Q, mid, b"x" * 30, txn=txn))
                for mid in removes:
                    result(store.remove_message(Q, mid, txn=txn))
                if op[2].startswith("prepare"):
                    result(store.prepare(txn))
                if op[2].endswith("commit"):
                    result(store.commit(txn))
                    model.update(dict.fromkeys(adds, 0))
                    for mid in removes:
                        del model[mid]
                elif op[2].endswith("rollback"):
                    result(store.rollback(txn))
                else:
                    pending[txn] = (adds, removes)
            elif kind == "resolve" and pending:
                txn = sorted(pending)[0]
                adds, removes = pending.pop(txn)
                if op[1]:
                    result(store.commit(txn))
                    model.update(dict.fromkeys(adds, 0))
                    for mid in removes:
                        del model[mid]
                else:
                    result(store.rollback(txn))
            elif kind == "compact":
                result(store._compact(0.5, roll=op[1]))
            elif kind == "restart":
                result(store.close())
                store, _ = open_store(directory)
        recovered = restarted(directory)
        assert live(recovered) == model
        assert {txn: ([m.message_id for m in p.adds], [mid for _, mid in p.removes])
                for txn, p in recovered.prepared.items()} == pending
