"""
The file store's C{write_batch} (a reactor turn's adds and removals as one
store call): one record and one write, all or nothing on disk; refusals one by one;
under a disk fault its adds are refused as a single add is and its removals kept
(S3.4, S3.6).
"""

import pytest
from twisted.internet.task import Clock

from mqgate.store import DuplicateMessage, FileStore, StoreFailed, UnknownMessage
from mqgate.store import destination_key
from mqgate.store.health import FAILING

from tests.store.faults import ENOSPC, WRITES, faulty_disk  # noqa: F401
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")
#: Over the store's max_record_size below: goes to an own file.
BIG = bytes(range(256)) * 8


def open_store(directory, *, sync=False, clock=None):
    store = FileStore(directory, run_now, sync=sync, clock=clock or Clock(),
                      max_record_size=1024)
    return store, result(store.recover())


def restarted(directory):
    """What a new store on the same directory recovers (the old one abandoned, as
    after kill -9)."""
    return result(FileStore(directory, run_now, max_record_size=1024).recover())


def stored(recovered, key=Q):
    return [(m.message_id, bytes(m.data)) for m in recovered.messages.get(key, [])]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "nosync"])
def test_one_call_is_one_record_and_one_write(tmp_path, sync):
    """A turn's adds and removals cost one journal record, one write and (sync on)
    one fsync; what they leave comes back after a kill, in order."""
    store, _ = open_store(tmp_path, sync=sync)
    assert result(store.write_batch([(Q, 1, b"a"), (Q, 2, b"b"), (Q, 3, BIG)])) == {}
    before = dict(store.stats)
    ops = [(Q, 1, None), (Q, 4, b"d"), (Q, 3, None), (Q, 5, b"e")]
    assert result(store.write_batch(ops)) == {}
    after = store.stats
    assert after["records"] == before["records"] + 1
    assert after["batches"] == before["batches"] + 1
    assert after["fsyncs"] == before["fsyncs"] + (1 if sync else 0)
    assert stored(restarted(tmp_path)) == [(2, b"b"), (4, b"d"), (5, b"e")]
    assert result(store.read_message(Q, 4)) == b"d"


def test_refusals_are_one_by_one(tmp_path):
    """A duplicate id or an unknown message is refused alone (by its index); the rest
    of the call is written."""
    store, _ = open_store(tmp_path)
    result(store.write_batch([(Q, 1, b"a")]))
    refused = result(store.write_batch([(Q, 2, b"b"), (Q, 1, b"again"), (Q, 9, None)]))
    assert sorted(refused) == [1, 2]
    assert isinstance(refused[1], DuplicateMessage)
    assert isinstance(refused[2], UnknownMessage)
    assert stored(restarted(tmp_path)) == [(1, b"a"), (2, b"b")]


def test_an_add_removed_by_the_same_call_is_not_written(tmp_path):
    """Added then removed in one call: neither reaches the journal (a TXN record
    applies its removals before its adds), and the message does not come back."""
    store, _ = open_store(tmp_path)
    assert result(store.write_batch([(Q, 1, b"a"), (Q, 2, b"b"), (Q, 1, None)])) == {}
    assert stored(restarted(tmp_path)) == [(2, b"b")]


def test_a_failed_write_refuses_all_its_adds_and_keeps_its_removals(tmp_path,
                                                                     faulty_disk):
    """S3.6: when the record cannot be written, every add of the call is refused with
    the StoreFailed a single add gets and none comes back after a restart; its removals
    are kept and written once the store recovers."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock)
    result(store.write_batch([(Q, 1, b"a"), (Q, 2, b"b")]))
    faulty_disk.fail(ENOSPC, *WRITES)
    refused = result(store.write_batch([(Q, 3, b"c"), (Q, 1, None), (Q, 4, BIG)]))
    assert sorted(refused) == [0, 2]
    assert all(isinstance(e, StoreFailed) and e.exhausted for e in refused.values())
    assert store.health.state == FAILING and store.health.status()["pending"] == 1
    assert stored(restarted(tmp_path)) == [(1, b"a"), (2, b"b")]
    # While failing, adds are refused at once; removals wait in order.
    refused = result(store.write_batch([(Q, 5, b"e"), (Q, 2, None)]))
    assert list(refused) == [0] and isinstance(refused[0], StoreFailed)
    faulty_disk.heal()
    clock.advance(1)
    assert store.health.status()["pending"] == 0
    assert stored(restarted(tmp_path)) == []
    assert result(store.write_batch([(Q, 3, b"c")])) == {}
    assert stored(restarted(tmp_path)) == [(3, b"c")]


def test_compaction_keeps_what_batches_left(tmp_path):
    """S3.3: compaction rewrites batch records down to their live adds."""
    store, _ = open_store(tmp_path)
    result(store.write_batch([(Q, mid, b"m%d" % mid) for mid in range(1, 9)]))
    result(store.write_batch([(Q, mid, None) for mid in range(1, 8)]
                             + [(Q, 9, b"m9")]))
    result(store.compact())
    assert stored(restarted(tmp_path)) == [(8, b"m8"), (9, b"m9")]
    assert result(store.read_message(Q, 8)) == b"m8"
