"""
The journal on disk: record format, torn tails, checksums, segments, compaction (S3.3).
"""

import shutil
import zlib

import pytest

from mqgate.store import CorruptStore, FileStore, destination_key
from mqgate.store import journal as j
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")


def open_store(directory, **kwargs):
    """A recovered FileStore on C{directory} and what it recovered."""
    kwargs.setdefault("compact_threshold", None)
    store = FileStore(directory, run_now, **kwargs)
    return store, result(store.recover())


def segments(directory):
    """The journal's segment files, in order."""
    return sorted((directory / "journal").glob("*.seg"))


def records(path):
    """C{[(offset, type, size)]} of a segment's good records."""
    return [(off, rtype, size) for off, rtype, _, size in j.scan(path.read_bytes())
            if rtype is not None]


def ids(recovered, destination=Q):
    """Recovered message ids of C{destination}, in order."""
    return [m.message_id for m in recovered.messages.get(destination, [])]


# -- record format ---------------------------------------------------------------------------

def test_record_header_layout_and_checksum():
    """S3.3: a record is magic, type, length and a CRC32 over header and payload."""
    buffers = j.encode_record(j.ADD, j.pack_add(Q, 7, 0, b"hello"))
    raw = b"".join(buffers)
    assert raw[:4] == b"MQJR" and raw[4] == j.ADD
    length = int.from_bytes(raw[8:12], "big")
    assert length == len(raw) - j.HEADER_SIZE
    crc = int.from_bytes(raw[12:16], "big")
    assert crc == zlib.crc32(raw[16:], zlib.crc32(raw[:12]))
    [(offset, rtype, payload, size)] = list(j.scan(raw))
    add = j.decode(rtype, payload)
    assert (offset, size, add.destination, add.message_id, add.data) == (
        0, len(raw), Q, 7, b"hello")


def test_whole_record_bytes_are_the_encoded_record():
    """A record encoded whole on the reactor is byte for byte the record the writer
    thread would have encoded from its parts."""
    for rtype, parts in ((j.ADD, j.pack_add(Q, 7, 0, b"m" * 300)),
                         (j.REMOVE, j.pack_remove(Q, 7)), (j.ADD, j.pack_add(Q, 8, 0, b""))):
        assert j.record_bytes(rtype, parts) == b"".join(j.encode_record(rtype, parts))


@pytest.mark.parametrize("join_limit", [j._JOIN_LIMIT, 100])
def test_append_mixes_whole_records_and_parts_across_a_segment_roll(tmp_path, monkeypatch,
                                                                    join_limit):
    """Whole records and records given as parts are written in order, with their
    locations, and a segment rolls between them as it does for parts alone; whether a
    chunk is joined into one write or handed to writev as it is (over the limit)."""
    monkeypatch.setattr(j, "_JOIN_LIMIT", join_limit)
    journal = j.Journal(tmp_path, segment_size=600)
    journal.recover(load_data=True)
    given = []
    for mid in range(1, 7):
        parts = j.pack_add(Q, mid, 0, b"d" * 150)
        given.append(j.record_bytes(j.ADD, parts) if mid % 2 else (j.ADD, parts))
    locations = journal.append(given)
    journal.close()
    assert len({segno for segno, _, _ in locations}) > 1
    assert journal.bytes_written == sum(size for _, _, size in locations)
    replay, _ = j.Journal(tmp_path, segment_size=600).recover(load_data=True)
    assert [(mid, e.data) for mid, e in replay.live[Q].items()] == [
        (mid, b"d" * 150) for mid in range(1, 7)]


def test_transaction_record_round_trip():
    """S3.3: a PREPARE record carries its operations as sub-records."""
    add_parts = j.pack_add(Q, 1, 2, b"x")
    remove_parts = j.pack_remove(Q, 9)
    ops = [(j.ADD, add_parts, sum(map(len, add_parts))),
           (j.REMOVE, remove_parts, sum(map(len, remove_parts)))]
    raw = b"".join(j.encode_record(j.PREPARE, j.pack_ops("t1", ops)))
    [(_, rtype, payload, _)] = list(j.scan(raw))
    txn_id, decoded = j.decode(rtype, payload)
    assert txn_id == "t1"
    assert [t for t, _, _ in decoded] == [j.ADD, j.REMOVE]
    assert decoded[0][2].count == 2 and decoded[1][2] == (Q, 9)


# -- torn tails ---------------------------------------------------------------------------

def _three_messages_then_tail(directory, tail):
    store, _ = open_store(directory, sync=True)
    for mid in (1, 2, 3):
        result(store.add_message(Q, mid, b"m%d" % mid * 20))
    tail(store)
    result(store.close())
    [path] = segments(directory)
    start = records(path)[-1][0]
    return path, start, path.stat().st_size


@pytest.mark.parametrize("kind", ["add", "txn"])
def test_torn_tail_at_every_offset_is_cut(tmp_path, kind):
    """S3.3: a last record cut at any byte is dropped whole, everything before it is
    kept, the file is cut back to the record's start and appending works again."""
    def tail(store):
        if kind == "add":
            result(store.add_message(Q, 4, b"last" * 30))
        else:       # a one-phase commit: all of it or nothing
            result(store.begin("t"))
            result(store.add_message(Q, 4, b"t4", txn="t"))
            result(store.add_message(Q, 5, b"t5", txn="t"))
            result(store.remove_message(Q, 1, txn="t"))
            result(store.commit("t"))
    original = tmp_path / "original"
    path, start, end = _three_messages_then_tail(original, tail)
    full = path.read_bytes()
    work = tmp_path / "work"
    shutil.copytree(original, work)
    seg = segments(work)[-1]
    for cut in range(start, end):
        seg.write_bytes(full[:cut])
        store, recovered = open_store(work)
        assert ids(recovered) == [1, 2, 3], cut
        assert (len(recovered.warnings) == 1) == (cut > start)
        assert seg.stat().st_size == start
        result(store.add_message(Q, 6, b"after"))
        result(store.close())
        store, recovered = open_store(work)
        assert ids(recovered) == [1, 2, 3, 6]
        result(store.close())
    _, recovered = open_store(original)
    assert ids(recovered) == ([1, 2, 3, 4] if kind == "add" else [2, 3, 4, 5])


def test_crc_mismatch_at_the_tail_is_cut(tmp_path):
    """S3.3: a last record whose payload is damaged is cut, never replayed."""
    path, start, end = _three_messages_then_tail(
        tmp_path, lambda s: result(s.add_message(Q, 4, b"z" * 50)))
    raw = bytearray(path.read_bytes())
    raw[end - 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [1, 2, 3]
    assert "checksum mismatch" in recovered.warnings[0]
    assert path.stat().st_size == start


def test_damaged_length_at_the_tail_is_cut(tmp_path):
    """S3.3: a length running past the end of the file starts a torn tail."""
    path, start, _ = _three_messages_then_tail(
        tmp_path, lambda s: result(s.add_message(Q, 4, b"z" * 50)))
    raw = bytearray(path.read_bytes())
    raw[start + 8:start + 12] = (1 << 30).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [1, 2, 3] and "runs past the end" in recovered.warnings[0]


def test_zeroed_tail_is_cut(tmp_path):
    """S3.3: zeros after the last record (a machine crash) are cut as a torn tail."""
    path, _, end = _three_messages_then_tail(
        tmp_path, lambda s: result(s.add_message(Q, 4, b"z" * 50)))
    with open(path, "ab") as f:
        f.write(bytes(300))
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [1, 2, 3, 4] and path.stat().st_size == end


def test_bad_record_inside_last_segment_cuts_from_there(tmp_path):
    """S3.3: a damaged record in the last segment cuts it and all that follows, and the
    warning says how many bytes went."""
    path, _, _ = _three_messages_then_tail(
        tmp_path, lambda s: result(s.add_message(Q, 4, b"z" * 50)))
    second = records(path)[1]
    raw = bytearray(path.read_bytes())
    raw[second[0] + j.HEADER_SIZE + 2] ^= 0x01
    path.write_bytes(bytes(raw))
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [1]
    assert f"offset {second[0]}" in recovered.warnings[0]
    assert f"{len(raw) - second[0]} bytes dropped" in recovered.warnings[0]


def test_bad_record_in_an_older_segment_is_an_error(tmp_path):
    """S3.3: damage before the last segment is not a torn tail: recovery fails and
    names the file and offset."""
    store, _ = open_store(tmp_path, segment_size=400)
    for mid in range(1, 20):
        result(store.add_message(Q, mid, b"y" * 60))
    result(store.close())
    first = segments(tmp_path)[0]
    assert len(segments(tmp_path)) > 2
    second_record = records(first)[1][0]
    raw = bytearray(first.read_bytes())
    raw[second_record + 20] ^= 0x10
    first.write_bytes(bytes(raw))
    store = FileStore(tmp_path, run_now)
    with pytest.raises(CorruptStore) as caught:
        result(store.recover())
    assert caught.value.path == str(first) and caught.value.offset == second_record
    assert "checksum" in caught.value.reason


def test_segments_roll_and_recover_in_order(tmp_path):
    """S3.3: records spread over many segments come back in order; a record larger
    than a segment gets a segment of its own."""
    store, _ = open_store(tmp_path, segment_size=300, max_record_size=10_000)
    for mid in range(1, 30):
        result(store.add_message(Q, mid, b"s" * (2000 if mid == 10 else 40)))
    assert len(segments(tmp_path)) > 5
    assert all(p.stat().st_size <= 300 for p in segments(tmp_path)
               if len(records(p)) > 1)
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == list(range(1, 30))
    assert len(recovered.messages[Q][9].data) == 2000


# -- large messages ---------------------------------------------------------------------------

def test_large_message_lives_in_its_own_file(tmp_path):
    """S3.3: a message over max_record_size goes to an own file in its destination's
    pool; the journal record only points at it."""
    store, _ = open_store(tmp_path, max_record_size=100)
    result(store.add_message(Q, 1, b"L" * 5000))
    [own] = list((tmp_path / "large").glob("*/*.msg"))
    assert own.read_bytes() == b"L" * 5000
    assert segments(tmp_path)[0].stat().st_size < 200
    _, recovered = open_store(tmp_path)
    assert recovered.messages[Q][0].data == b"L" * 5000


def test_damaged_own_file_is_an_error(tmp_path):
    """S3.3: an own file that does not match its record's length and CRC is reported."""
    store, _ = open_store(tmp_path, max_record_size=100)
    result(store.add_message(Q, 1, b"L" * 5000))
    [own] = list((tmp_path / "large").glob("*/*.msg"))
    own.write_bytes(b"L" * 4999 + b"X")
    with pytest.raises(CorruptStore) as caught:
        open_store(tmp_path)
    assert caught.value.path == str(own)


def test_file_pool_reuses_and_limits_free_files(tmp_path):
    """S3.3: removed own files are kept for reuse up to filepool.limit per
    destination; the rest are deleted; cleanratio zeroes that share of them."""
    store, _ = open_store(tmp_path, max_record_size=100, filepool_limit=2,
                          cleanratio=50)
    for mid in range(1, 6):
        result(store.add_message(Q, mid, b"P" * 1000))
    for mid in range(1, 6):
        result(store.remove_message(Q, mid))
    pool = store.stats["pool"]
    assert pool["free"] == 2 and pool["deleted"] == 3 and pool["zeroed"] == 1
    free = sorted((tmp_path / "large").glob("*/free-*"))
    assert len(free) == 2
    assert sorted(f.read_bytes() == bytes(1000) for f in free) == [False, True]
    result(store.add_message(Q, 9, b"R" * 300))
    assert store.stats["pool"]["reused"] == 1
    assert len(list((tmp_path / "large").glob("*/free-*"))) == 1
    _, recovered = open_store(tmp_path, max_record_size=100)
    assert recovered.messages[Q][0].data == b"R" * 300


def test_pool_cleanup_on_close_and_orphans_at_recovery(tmp_path):
    """FACTS 1.7 cleanup=true deletes free files on close; an own file whose record
    never reached the journal becomes a free file at recovery."""
    store, _ = open_store(tmp_path, max_record_size=100, cleanup=True)
    result(store.add_message(Q, 1, b"P" * 1000))
    result(store.add_message(Q, 2, b"P" * 1000))
    result(store.remove_message(Q, 1))
    pool_dir = next((tmp_path / "large").iterdir())
    (pool_dir / "orphan.msg").write_bytes(b"never recorded")
    result(store.close())
    assert sorted(p.name.split("-")[0] for p in pool_dir.iterdir()) == ["2", "orphan.msg"]
    store, recovered = open_store(tmp_path, max_record_size=100)
    assert ids(recovered) == [2] and store.stats["pool"]["free"] == 1


# -- compaction ---------------------------------------------------------------------------

def _fill(store, count, size=60):
    for mid in range(1, count + 1):
        result(store.add_message(Q, mid, b"c" * size))


def test_compaction_drops_dead_records_and_keeps_live_ones(tmp_path):
    """S3.3: compaction rewrites segments, keeping live records only; a restart
    recovers the same messages in the same order."""
    store, _ = open_store(tmp_path, segment_size=500)
    _fill(store, 60)
    for mid in range(1, 61):
        if mid % 5:
            result(store.remove_message(Q, mid))
    result(store.update_delivery_count(Q, 5, 2))
    result(store.update_delivery_count(Q, 5, 3))
    before = sum(p.stat().st_size for p in segments(tmp_path))
    figures = result(store.compact())
    after = sum(p.stat().st_size for p in segments(tmp_path))
    assert figures["segments_compacted"] > 0 and after < before / 3
    live = [r for p in segments(tmp_path) for r in records(p)]
    assert sorted(t for _, t, _ in live) == [j.ADD] * 12 + [j.COUNT]
    result(store.add_message(Q, 99, b"new"))
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == list(range(5, 61, 5)) + [99]
    assert recovered.messages[Q][0].delivery_count == 3


def test_compaction_keeps_removes_of_adds_still_on_disk(tmp_path):
    """S3.3: a remove is kept while its add survives in a segment not rewritten, so
    compaction never brings a removed message back."""
    store, _ = open_store(tmp_path, segment_size=500)
    _fill(store, 4)                    # exactly the first segment, to stay 3/4 live
    first = segments(tmp_path)[0]
    first_bytes = first.read_bytes()
    assert len(records(first)) == 4
    for mid in range(100, 130):        # later segments, then all removed
        result(store.add_message(Q, mid, b"d" * 60))
    result(store.remove_message(Q, 1))
    for mid in range(100, 130):
        result(store.remove_message(Q, mid))
    result(store._compact(0.5, roll=True))
    assert first.read_bytes() == first_bytes
    kinds = [t for p in segments(tmp_path)[1:] for _, t, _ in records(p)]
    assert kinds == [j.REMOVE]
    assert len(segments(tmp_path)) == 3      # first, the remove, the empty active one
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [2, 3, 4]


def test_compaction_of_transactions(tmp_path):
    """S3.3: committed transactions shrink to their live operations, rolled-back and
    resolved ones vanish, a pending prepared one is kept whole."""
    store, _ = open_store(tmp_path, segment_size=600)
    _fill(store, 4)
    for txn, mids in (("commit", (10, 11, 12)), ("rollback", (20,)), ("pending", (30,))):
        result(store.begin(txn))
        for mid in mids:
            result(store.add_message(Q, mid, b"t" * 40, txn=txn))
        result(store.remove_message(Q, mids[0] // 10, txn=txn))
        result(store.prepare(txn))
    result(store.commit("commit"))
    result(store.rollback("rollback"))
    result(store.remove_message(Q, 11))
    for mid in range(40, 50):
        result(store.add_message(Q, mid, b"f" * 60))
    result(store.compact())
    kinds = sorted(t for p in segments(tmp_path) for _, t, _ in records(p))
    assert kinds.count(j.ROLLBACK) == 0 and kinds.count(j.PREPARE) == 2
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == [2, 3, 4, 10, 12] + list(range(40, 50))
    assert list(recovered.prepared) == ["pending"]
    assert [m.message_id for m in recovered.prepared["pending"].adds] == [30]
    assert list(recovered.prepared["pending"].removes) == [(Q, 3)]


def test_interrupted_compaction_leaves_the_segment(tmp_path):
    """S3.3: a temporary file left by a compaction cut short is removed at recovery
    and the original segment is used."""
    store, _ = open_store(tmp_path, segment_size=500)
    _fill(store, 20)
    result(store.close())
    seg = segments(tmp_path)[0]
    seg.with_suffix(".compact").write_bytes(b"half a rewrite")
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == list(range(1, 21))
    assert not seg.with_suffix(".compact").exists()


def test_automatic_compaction_bounds_the_journal(tmp_path):
    """S3.3: with messages flowing through, online compaction keeps the journal small."""
    store, _ = open_store(tmp_path, segment_size=2000, compact_threshold=0.5)
    for mid in range(1, 2001):
        result(store.add_message(Q, mid, b"a" * 50))
        if mid > 10:
            result(store.remove_message(Q, mid - 10))
    assert store.stats["compactions"] > 0
    assert sum(p.stat().st_size for p in segments(tmp_path)) < 20_000
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == list(range(1991, 2001))


def test_automatic_compaction_does_not_repeat_without_new_dead_bytes(tmp_path):
    """S3.3: what compaction cannot reclaim (removes whose adds sit in mostly live
    segments) does not make every later batch compact again."""
    store, _ = open_store(tmp_path, segment_size=1000, compact_threshold=0.5)
    for mid in range(1, 400):
        result(store.add_message(Q, mid, b"a"))
    for mid in range(1, 400):
        if mid % 2:                 # half removed: no segment of adds drops below half
            result(store.remove_message(Q, mid))
    first = store.stats["compactions"]
    for mid in range(1000, 1050):
        result(store.add_message(Q, mid, b"b"))
    assert first >= 1 and store.stats["compactions"] == first
    _, recovered = open_store(tmp_path)
    assert ids(recovered) == list(range(2, 400, 2)) + list(range(1000, 1050))


def test_recover_first_and_only_once(tmp_path):
    """The file store refuses work before recover() and a second recover()."""
    store = FileStore(tmp_path, run_now)
    box = []
    store.add_message(Q, 1, b"a").addErrback(box.append)
    assert "recover() first" in str(box[0].value)
    result(store.recover())
    store.recover().addErrback(box.append)
    assert "called already" in str(box[1].value)
