"""
The file store under disk faults (S3.6): ENOSPC and EIO on add, remove, the catalogs,
snapshots and compaction, injected by a fault layer under the journal (faults.py);
then the fault cleared, and restarts. What must hold: an add is acknowledged only if
stored, a refused add never comes back, a removal is never forgotten while the broker
runs, the files stay readable, and the store recovers by itself.
"""

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.python.failure import Failure

from mqgate.store import FileStore, StoreClosed, StoreFailed, destination_key
from mqgate.store.catalog import MIN_LOG_LINES, Catalog
from mqgate.store.health import BROKEN, FAILING, HEALTHY
from mqgate.store.interfaces import CorruptStore

from tests.store.faults import EIO, ENOSPC, SYNCS, WRITES, faulty_disk  # noqa: F401
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")


def refused(d):
    """The StoreFailed a Deferred failed with."""
    box = []
    d.addBoth(box.append)
    assert box and isinstance(box[0], Failure), f"expected a failure, got {box}"
    assert box[0].check(StoreFailed), box[0]
    return box[0].value


def open_store(directory, *, sync=True, clock=None, **kwargs):
    """A recovered file store (disk work inline) and what it recovered."""
    store = FileStore(directory, run_now, sync=sync, clock=clock or Clock(),
                      max_record_size=1024, **kwargs)
    return store, result(store.recover())


def restarted(directory):
    """What a new store on the same directory recovers (the old one abandoned, as
    after kill -9)."""
    return result(FileStore(directory, run_now).recover())


def ids(recovered, key=Q):
    return [m.message_id for m in recovered.messages.get(key, [])]


@pytest.mark.parametrize("sync, code, calls", [
    (True, ENOSPC, WRITES), (True, EIO, WRITES), (True, EIO, SYNCS),
    (False, ENOSPC, WRITES), (False, EIO, WRITES)])
def test_a_failed_add_is_refused_and_never_comes_back(tmp_path, faulty_disk, sync, code,
                                                      calls):
    """S3.6: an add whose write (or, with sync on, fsync) fails is refused with the
    cause, is cut off the journal, and is not there after a restart; the store fails
    until the disk works again."""
    store, _ = open_store(tmp_path, sync=sync)
    result(store.add_message(Q, 1, b"kept"))
    faulty_disk.fail(code, *calls)
    error = refused(store.add_message(Q, 2, b"lost" * 100))
    assert error.exhausted is (code == ENOSPC)
    assert store.health.state == FAILING
    faulty_disk.heal()
    recovered = restarted(tmp_path)
    assert ids(recovered) == [1] and recovered.warnings == []


def test_while_failing_adds_are_refused_without_touching_the_disk(tmp_path, faulty_disk):
    """S3.6: while the store fails, an add is refused at once (no write, nothing
    waiting), and so are delivery counts and transactions."""
    store, _ = open_store(tmp_path)
    result(store.add_message(Q, 1, b"m"))
    faulty_disk.fail(ENOSPC, *WRITES)
    refused(store.add_message(Q, 2, b"x"))
    writes = dict(faulty_disk.calls)
    for mid in range(3, 103):
        d = store.add_message(Q, mid, b"x")
        assert d.called
        refused(d)
    refused(store.update_delivery_count(Q, 1, 2))
    result(store.begin("t"))
    refused(store.commit("t"))
    assert faulty_disk.calls == writes
    assert store.health.refused == 102 and store.health.status()["pending"] == 0


def test_the_store_recovers_by_itself_once_the_disk_works(tmp_path, faulty_disk):
    """S3.6: probes every retry interval fail while the disk is full and succeed once
    space is freed; then adds are acknowledged and stored again, no restart needed."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock, retry_interval=1)
    faulty_disk.fail(ENOSPC, *WRITES)
    refused(store.add_message(Q, 1, b"x"))
    clock.advance(1)
    clock.advance(1)
    assert store.health.state == FAILING
    faulty_disk.heal()
    clock.advance(1)
    assert store.health.state == HEALTHY and not clock.getDelayedCalls()
    result(store.add_message(Q, 2, b"y"))
    assert ids(restarted(tmp_path)) == [2]


def test_a_failed_removal_is_kept_and_written_once_the_store_recovers(tmp_path,
                                                                     faulty_disk):
    """S3.6: a removal that cannot be written waits (counted) and is written first
    when the store recovers; until then a restart brings the message back (at least
    once), afterwards it is gone."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock)
    for mid in (1, 2):
        result(store.add_message(Q, mid, b"m%d" % mid))
    faulty_disk.fail(EIO, *WRITES)
    removal = store.remove_message(Q, 1)
    assert not removal.called and store.health.state == FAILING
    assert store.health.status()["pending"] == 1
    assert ids(restarted(tmp_path)) == [1, 2]
    faulty_disk.heal()
    clock.advance(1)
    assert result(removal) is None and store.health.status()["pending"] == 0
    assert ids(restarted(tmp_path)) == [2]


def test_removals_made_while_failing_wait_in_order(tmp_path, faulty_disk):
    """S3.6: removals (a pre-settled consumer's too) made while the store fails are
    accepted, kept in order and all written on recovery; adds stay refused meanwhile."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock)
    for mid in range(1, 6):
        result(store.add_message(Q, mid, b"m"))
    faulty_disk.fail(ENOSPC, *WRITES)
    removals = [store.remove_message(Q, mid) for mid in (1, 2, 3)]
    refused(store.add_message(Q, 6, b"n"))
    assert store.health.status()["pending"] == 3
    faulty_disk.heal()
    clock.advance(1)
    assert [result(d) for d in removals] == [None] * 3
    assert ids(restarted(tmp_path)) == [4, 5]


def test_a_batch_cut_across_a_segment_keeps_what_was_sealed(tmp_path, faulty_disk):
    """S3.6: when a batch fills one segment, seals it and then fails in the next, the
    sealed records stay acknowledged and the rest is refused; recovery agrees."""
    store = FileStore(tmp_path, _Deferring(), sync=True, segment_size=250,
                      clock=Clock())
    store._run.now = True
    result(store.recover())
    store._run.now = False
    adds = [store.add_message(Q, mid, b"x" * 60) for mid in range(1, 7)]
    store._run.run_one()                  # batch [1]
    original_open = faulty_disk.__getattr__("open")
    opened = []

    def open_then_fail(path, flags, *args):
        # The next segment opens; the write after it fails.
        fd = original_open(path, flags, *args)
        opened.append(path)
        faulty_disk.fail(ENOSPC, "writev")
        return fd
    faulty_disk.__dict__["open"] = open_then_fail
    store._run.run_one()                  # batch [2..6]: 2 fits, then a new segment
    del faulty_disk.__dict__["open"]
    outcomes = []
    for d in adds:
        d.addBoth(outcomes.append)
    assert opened
    done = [o is None for o in outcomes]
    assert done[0] and not all(done) and done == sorted(done, reverse=True)
    kept = [mid for mid, ok in zip(range(1, 7), done) if ok]
    # Where the kept ones were written is known, so that compaction, which deletes
    # segments it counts dead without reading them, counts theirs live.
    assert sum(store._disk.use.live.values()) == len(kept)
    faulty_disk.heal()
    assert ids(restarted(tmp_path)) == kept


class _Deferring:
    """run_in_thread whose calls run when the test says (or at once with C{now})."""

    def __init__(self):
        self.calls = []
        self.now = False

    def __call__(self, f, *args):
        if self.now:
            return defer.maybeDeferred(f, *args)
        d = defer.Deferred()
        self.calls.append((f, args, d))
        return d

    def run_one(self):
        f, args, d = self.calls.pop(0)
        defer.maybeDeferred(f, *args).chainDeferred(d)


def test_destinations_and_durables_are_kept_while_failing(tmp_path, faulty_disk):
    """S3.6: a destination or durable subscription made while the store fails is
    written once it recovers, and a deletion too; the catalogs stay readable."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock)
    result(store.add_destination("queue", "old", {}))
    faulty_disk.fail(ENOSPC, *WRITES)
    made = store.add_destination("queue", "new", {})
    durable = store.add_durable("c", "s", "t", None)
    gone = store.remove_destination("queue", "old")
    assert not (made.called or durable.called or gone.called)
    interim = restarted(tmp_path)
    assert [d.name for d in interim.destinations] == ["old"] and interim.durables == []
    faulty_disk.heal()
    clock.advance(1)
    for d in (made, durable, gone):
        result(d)
    recovered = restarted(tmp_path)
    assert [d.name for d in recovered.destinations] == ["new"]
    assert [(d.container_id, d.name) for d in recovered.durables] == [("c", "s")]


def test_a_snapshot_that_cannot_be_written_leaves_the_old_files_and_is_retried(
        tmp_path, faulty_disk):
    """S3.6: when rewriting the destinations snapshot fails (ENOSPC on its temporary
    file), the old snapshot and the log stay as they were, nothing is lost, and the
    snapshot is written on a later try."""
    store, _ = open_store(tmp_path)
    for n in range(MIN_LOG_LINES - 1):
        result(store.add_destination("queue", f"q{n}", {}))
    before = (tmp_path / "destinations.log").read_bytes()
    faulty_disk.fail(ENOSPC, "replace")
    result(store.add_destination("queue", "last", {}))   # compaction due: fails
    assert store.health.state == HEALTHY
    assert not (tmp_path / "destinations.tmp").exists()
    assert (tmp_path / "destinations.log").read_bytes().startswith(before)
    names = [d.name for d in restarted(tmp_path).destinations]
    assert names == [f"q{n}" for n in range(MIN_LOG_LINES - 1)] + ["last"]
    faulty_disk.heal()
    for n in range(MIN_LOG_LINES):
        result(store.add_destination("topic", f"t{n}", {}))
    assert (tmp_path / "destinations.json").exists()
    assert len(restarted(tmp_path).destinations) == 2 * MIN_LOG_LINES


def test_creating_destinations_costs_constant_bytes_each(tmp_path):
    """Creating N destinations writes O(N) bytes in all (append, compact now and
    then), not O(N^2) as rewriting the whole file each time did."""
    store, _ = open_store(tmp_path, sync=False)
    written = []
    for count in (500, 1000):
        catalog = store._disk.catalogs["destinations"]
        start = _catalog_bytes(catalog)
        for n in range(count):
            result(store.add_destination("queue", f"{count}-{n:05d}", {}))
        written.append(_catalog_bytes(catalog) - start)
    # Twice the destinations (over more that exist already) cost about twice the bytes.
    assert written[1] < 3 * written[0]
    assert len(restarted(tmp_path).destinations) == 1500


def _catalog_bytes(catalog):
    # Bytes the catalog has written: its log lines and its snapshots so far.
    return catalog.bytes_written


def test_compaction_that_runs_out_of_room_fails_alone(tmp_path, faulty_disk):
    """S3.6: a compaction pass that cannot write its new segment (ENOSPC) leaves the
    old segments intact, fails alone (the store stays healthy) and works later."""
    store, _ = open_store(tmp_path, segment_size=4096, compact_threshold=None)
    for mid in range(1, 101):
        result(store.add_message(Q, mid, b"z" * 100))
    for mid in range(1, 91):
        result(store.remove_message(Q, mid))
    faulty_disk.fail(ENOSPC, "writev")
    with pytest.raises(Exception, match="compaction failed"):
        result(store.compact())
    faulty_disk.heal()
    assert store.health.state == HEALTHY
    assert not list((tmp_path / "journal").glob("*.compact"))
    assert ids(restarted(tmp_path)) == list(range(91, 101))
    figures = result(store.compact())
    assert figures["bytes_after"] < figures["bytes_before"]
    assert ids(restarted(tmp_path)) == list(range(91, 101))


def test_the_log_says_it_at_most_once_a_second(tmp_path, faulty_disk):
    """S3.6: the failure is logged when it starts (with what to do), then at most once
    a second while adds are refused, not once per message; and when it is over."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock, retry_interval=5)
    faulty_disk.fail(ENOSPC, *WRITES)
    with capturedLogs() as events:
        for _ in range(3):
            for mid in range(100):
                refused(store.add_message(Q, mid, b"x"))
                clock.advance(0.005)
            clock.advance(0.5)
        faulty_disk.heal()
        clock.advance(5)
    lines = [e for e in events if e.get("store_state")]
    states = [e["store_state"] for e in lines]
    assert states[0] == FAILING and states[-1] == HEALTHY
    assert 2 <= len(lines) - 1 <= 4
    assert "free disk space" in lines[0]["log_format"].format(**lines[0])
    times = [e["log_time"] for e in lines]
    assert all(b - a >= 0 for a, b in zip(times, times[1:]))


def test_closing_while_failing_loses_only_kept_removals(tmp_path, faulty_disk):
    """A store closed while it cannot write says how many removals it could not write;
    those messages come back after the restart (at least once, never lost)."""
    store, _ = open_store(tmp_path)
    result(store.add_message(Q, 1, b"m"))
    faulty_disk.fail(EIO, *WRITES)
    removal = store.remove_message(Q, 1)
    with capturedLogs() as events:
        result(store.close())
    box = []
    removal.addErrback(box.append)
    assert box[0].check(StoreClosed)
    assert any("1 kept writes" in e["log_format"].format(**e) for e in events
               if "kept" in e)
    faulty_disk.heal()
    assert ids(restarted(tmp_path)) == [1]


def test_a_journal_changed_behind_the_stores_back_is_reported_not_repaired(
        tmp_path, faulty_disk):
    """S3.6: when the probe finds the active segment shorter than what was written to
    it, the store says it cannot recover by itself and stops probing."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock)
    result(store.add_message(Q, 1, b"m" * 100))
    faulty_disk.fail(EIO, *WRITES)
    refused(store.add_message(Q, 2, b"n"))
    segment = sorted((tmp_path / "journal").glob("*.seg"))[-1]
    segment.write_bytes(b"")
    faulty_disk.heal()
    with capturedLogs() as events:
        clock.advance(1)
    assert store.health.state == BROKEN and not clock.getDelayedCalls()
    assert any(e.get("store_state") == BROKEN for e in events)
    refused(store.add_message(Q, 3, b"o"))


# -- the catalog alone -------------------------------------------------------------------

def _key(item):
    return (item["kind"], item["name"])


def test_catalog_drops_a_torn_last_line_and_refuses_a_damaged_middle(tmp_path):
    """S3.3: a crash during an append leaves a torn last line, dropped at load; a
    damaged line followed by good ones is corruption."""
    catalog = Catalog(tmp_path, "destinations", _key, sync=False)
    catalog.load()
    for name in ("a", "b", "c"):
        catalog.set({"kind": "queue", "name": name})
    catalog.close()
    log = tmp_path / "destinations.log"
    data = log.read_bytes()
    log.write_bytes(data[:-5])
    again = Catalog(tmp_path, "destinations", _key, sync=False)
    assert [i["name"] for i in again.load()] == ["a", "b"]
    again.set({"kind": "queue", "name": "d"})
    again.close()
    lines = log.read_bytes().split(b"\n")
    lines[0] = lines[0][:-1] + b"X"
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptStore):
        Catalog(tmp_path, "destinations", _key, sync=False).load()


def test_catalog_log_replays_harmlessly_over_its_new_snapshot(tmp_path):
    """S3.3: a crash after the new snapshot's rename but before the log is emptied
    replays the log over it, which changes nothing."""
    catalog = Catalog(tmp_path, "destinations", _key, sync=True)
    catalog.load()
    catalog.set({"kind": "queue", "name": "a"})
    catalog.set({"kind": "queue", "name": "b"})
    catalog.delete({"kind": "queue", "name": "a"})
    log = (tmp_path / "destinations.log").read_bytes()
    catalog._write_snapshot()                 # the crash comes before the truncation
    catalog.close()
    assert (tmp_path / "destinations.log").read_bytes() == log
    again = Catalog(tmp_path, "destinations", _key, sync=True)
    assert again.load() == [{"kind": "queue", "name": "b"}]


def test_the_broker_reads_the_stores_state_for_the_admin(tmp_path, faulty_disk):
    """S3.6: the core hands the admin the store's state: healthy, or failing with the
    reason, what to do, how many were refused and how many writes wait."""
    from mqgate.core import BrokerMessage
    from mqgate.core.persistence import Persistence
    store, _ = open_store(tmp_path)
    persistence = Persistence(store, lambda m: m.payload, BrokerMessage)
    assert persistence.store_status() == {"state": HEALTHY, "outages": 0, "pending": 0}
    result(store.add_message(Q, 1, b"m"))
    faulty_disk.fail(ENOSPC, *WRITES)
    store.remove_message(Q, 1)
    refused(store.add_message(Q, 2, b"n"))
    status = persistence.store_status()
    assert status["state"] == FAILING and status["reason"] == "No space left on device"
    assert status["refused"] == 1 and status["pending"] == 1
    assert status["advice"].startswith("free disk space")


def test_a_store_that_flaps_probes_less_and_less_often(tmp_path, faulty_disk):
    """S3.6: when the probe's small write works but the next real write fails again
    (nearly full disk), each new outage right after a recovery doubles the time to the
    next probe, so the store does not fail, recover and log every second."""
    clock = Clock()
    store, _ = open_store(tmp_path, clock=clock, retry_interval=1)
    gaps = []
    for _ in range(4):
        faulty_disk.fail(ENOSPC, *WRITES)
        refused(store.add_message(Q, 1, b"x"))
        faulty_disk.heal()
        (call,) = clock.getDelayedCalls()
        gaps.append(call.getTime() - clock.seconds())
        clock.advance(gaps[-1])
        assert store.health.state == HEALTHY
    assert gaps == [1, 2, 4, 8]
    clock.advance(60)
    faulty_disk.fail(ENOSPC, *WRITES)
    refused(store.add_message(Q, 2, b"y"))
    (call,) = clock.getDelayedCalls()
    assert call.getTime() - clock.seconds() == 1
