"""
One writer, group commit, and when acknowledgements fire (S3.4).
"""

import ast
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from twisted.internet import defer

import mqgate.store
from mqgate.store import FileStore, StoreFailed, destination_key
from mqgate.store.factory import WriterThread
from mqgate.store.filestore import WriteQueue
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")


def fired(d):
    """Whether C{d} has fired (without consuming its result)."""
    return d.called


class SlowThread:
    """A run_in_thread whose calls run only when the test says so: a slow disk."""

    def __init__(self):
        self.calls = []

    def __call__(self, f, *args):
        d = defer.Deferred()
        self.calls.append((f, args, d))
        return d

    def finish_one(self):
        f, args, d = self.calls.pop(0)
        try:
            value = f(*args)
        except Exception:
            d.errback()
        else:
            d.callback(value)


def slow_store(directory, **kwargs):
    slow = SlowThread()
    store = FileStore(directory, slow, **kwargs)
    d = store.recover()
    slow.finish_one()
    result(d)
    return store, slow


def test_hundred_records_during_a_slow_write_share_two_fsyncs(tmp_path):
    """S3.4: records submitted while a write is in progress form the next batch, and
    one fsync covers the whole batch (100 records, 2 fsyncs)."""
    store, slow = slow_store(tmp_path, sync=True)
    acks = [store.add_message(Q, mid, b"g%d" % mid) for mid in range(1, 101)]
    assert len(slow.calls) == 1 and not any(map(fired, acks))
    slow.finish_one()
    assert fired(acks[0]) and not any(map(fired, acks[1:]))
    assert len(slow.calls) == 1
    slow.finish_one()
    assert all(map(fired, acks)) and not slow.calls
    assert store.fsync_count == 2
    stats = store.stats
    assert stats["batches"] == 2 and stats["max_records_per_fsync"] == 99
    assert stats["records_per_fsync"] == 50.0


def test_acknowledgements_fire_after_the_fsync(tmp_path, monkeypatch):
    """S3.4: with sync on, every Deferred of a batch fires after that batch's fsync."""
    store, slow = slow_store(tmp_path, sync=True)
    events = []
    journal = store._disk.journal
    real_sync = journal.sync
    monkeypatch.setattr(journal, "sync", lambda: (events.append("fsync"), real_sync()))
    for mid in (1, 2, 3):
        store.add_message(Q, mid, b"x").addCallback(lambda _, m=mid: events.append(m))
    slow.finish_one()
    slow.finish_one()
    assert events == ["fsync", 1, "fsync", 2, 3]


def test_without_sync_acknowledged_bytes_are_already_written(tmp_path):
    """S3.4: with sync off there is no fsync, and a record is in the file (handed to
    the OS) when its Deferred fires, so a killed broker loses nothing acknowledged."""
    store, slow = slow_store(tmp_path, sync=False)
    segment = next((tmp_path / "journal").glob("*.seg"))
    sizes = []
    for mid in (1, 2):
        store.add_message(Q, mid, b"y" * 100).addCallback(
            lambda _: sizes.append(segment.stat().st_size))
    assert segment.stat().st_size == 0
    slow.finish_one()
    slow.finish_one()
    assert sizes[0] > 100 and sizes[1] > 2 * 100 and store.fsync_count == 0
    recovered = result(FileStore(tmp_path, run_now).recover())
    assert [m.message_id for m in recovered.messages[Q]] == [1, 2]


def test_work_submitted_by_callbacks_joins_the_next_batch(tmp_path):
    """S3.4: what acknowledgement callbacks submit is batched, not written one by one."""
    store, slow = slow_store(tmp_path, sync=True)
    first = [store.add_message(Q, mid, b"a") for mid in (1, 2)]
    for d, mid in zip(first, (1, 2)):
        d.addCallback(lambda _, m=mid: store.remove_message(Q, m))
    slow.finish_one()                  # batch [1]: its callback removes 1
    slow.finish_one()                  # batch [2, remove 1]: callback removes 2
    slow.finish_one()                  # batch [remove 2]
    assert not slow.calls and store.fsync_count == 3
    assert store.stats["max_batch"] == 2


def test_a_failed_write_refuses_its_adds_until_the_store_recovers(tmp_path, monkeypatch):
    """S3.6: a disk error refuses the adds of its batch and of what waited behind it
    (StoreFailed naming the cause), later adds are refused at once without a write,
    and once the fault clears a probe makes the store take adds again."""
    store, slow = slow_store(tmp_path, sync=True)
    ok = store.add_message(Q, 1, b"a")
    slow.finish_one()
    result(ok)
    real_append = store._disk.journal.append

    def broken(records, sync=False):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(store._disk.journal, "append", broken)
    first = store.add_message(Q, 2, b"b")
    queued = store.add_message(Q, 3, b"c")
    slow.finish_one()
    for d in (first, queued):
        box = []
        d.addErrback(box.append)
        assert box[0].check(StoreFailed) and box[0].value.exhausted
    later = store.add_message(Q, 4, b"d")
    assert later.called and not slow.calls
    later.addErrback(lambda _: None)
    monkeypatch.setattr(store._disk.journal, "append", real_append)
    probe = store.health.probe()
    slow.finish_one()
    assert result(probe) is True
    again = store.add_message(Q, 5, b"e")
    slow.finish_one()
    assert result(again) is None
    recovered = result(FileStore(tmp_path, run_now).recover())
    assert [m.message_id for m in recovered.messages[Q]] == [1, 5]


def test_write_queue_runs_one_batch_at_a_time():
    """S3.4: the queue never hands a second batch to the thread before the first
    finished, and batches keep submission order."""
    slow = SlowThread()
    seen = []
    writes = WriteQueue(slow, lambda ops: (seen.append(list(ops)), ops)[1])
    ds = [writes.submit(n) for n in range(5)]
    assert len(slow.calls) == 1
    slow.finish_one()
    assert writes.busy and len(slow.calls) == 1
    slow.finish_one()
    assert seen == [[0], [1, 2, 3, 4]] and [result(d) for d in ds] == list(range(5))
    assert not writes.busy


class ThreadRunner:
    """run_in_thread on a real thread pool; results come back through a queue that the
    test thread drains, as callFromThread does for the reactor."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=4)
        self.done = queue.Queue()
        self.outstanding = 0

    def __call__(self, f, *args):
        d = defer.Deferred()
        self.outstanding += 1
        future = self.pool.submit(f, *args)
        future.add_done_callback(lambda fut: self.done.put((d, fut)))
        return d

    def pump(self):
        while self.outstanding:
            d, fut = self.done.get(timeout=30)
            self.outstanding -= 1
            if fut.exception() is not None:
                d.errback(fut.exception())
            else:
                d.callback(fut.result())


@pytest.mark.parametrize("segment_size", [1 << 20, 2000])
def test_real_threads_with_sync_on(tmp_path, segment_size):
    """S3.4: on a real thread pool, 200 concurrent adds with sync on are all
    acknowledged after fsync, share few fsyncs, and all come back after a restart."""
    runner = ThreadRunner()
    try:
        store = FileStore(tmp_path, runner, sync=True, segment_size=segment_size,
                          max_record_size=500)
        d = store.recover()
        runner.pump()
        result(d)
        acks = [store.add_message(Q, mid, b"r" * (1000 if mid % 50 == 0 else 40))
                for mid in range(1, 201)]
        runner.pump()
        assert [result(a) for a in acks] == [None] * 200
        assert store.stats["records"] == 200 and store.stats["batches"] == 2
        # One fsync per batch, plus one per sealed segment (journal.py).
        rolls = len(list((tmp_path / "journal").glob("*.seg"))) - 1
        assert store.fsync_count == 2 + rolls
        assert (rolls > 3) == (segment_size == 2000)
        closing = store.close()
        runner.pump()
        result(closing)
        again = FileStore(tmp_path, runner)
        d = again.recover()
        runner.pump()
        recovered = result(d)
    finally:
        runner.pool.shutdown()
    assert [m.message_id for m in recovered.messages[Q]] == list(range(1, 201))
    assert len(recovered.messages[Q][49].data) == 1000


def test_store_package_never_imports_the_reactor():
    """The store reaches threads only through the injected run_in_thread; factory.py,
    which makes that run_in_thread for the configured store, is the exception."""
    package = Path(mqgate.store.__file__).parent
    for path in package.glob("*.py"):
        if path.name == "factory.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any("reactor" in n or n.startswith("twisted.internet.threads")
                           for n in names), (path, names)


class _QueuedReactor:
    """callFromThread that queues the call for the test thread to run, as the
    reactor's does."""

    def __init__(self):
        self.calls = queue.Queue()

    def callFromThread(self, f, *args):
        self.calls.put((f, args))

    def run_one(self):
        f, args = self.calls.get(timeout=10)
        f(*args)


def test_the_writer_thread_runs_jobs_in_turn_off_the_callers_thread():
    """The file store's thread runs what it is given in order, on itself, and answers
    on the reactor thread (results and failures alike); stop ends it."""
    reactor = _QueuedReactor()
    writer = WriterThread(reactor, "test-writer")
    writer.start()
    seen = []
    first = writer.run(lambda: seen.append(threading.current_thread().name) or 1)
    second = writer.run(lambda: 1 / 0)
    assert not first.called
    reactor.run_one()
    reactor.run_one()
    assert result(first) == 1 and seen == ["test-writer"]
    box = []
    second.addErrback(box.append)
    assert box[0].check(ZeroDivisionError)
    writer.stop()
    assert not writer.started
