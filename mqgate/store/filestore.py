"""
The file store (S3.3, S3.4): L{IMessageStore} on the journal, plus small files.

Layout under the store directory (the broker passes C{instances/NAME/filestore/})::

    destinations.json   destinations (rewritten whole, atomically: tmp + rename)
    durables.json       durable subscriptions (likewise)
    journal/*.seg       message records and transaction records (journal.py)
    large/<hash>/       own files of messages over max_record_size, one pool per
                        destination key (<hash>: SHA-1 of the key, 16 hex digits)

Why transactions are journalled rather than kept in a file of their own: a commit must
be atomic with the message records it orders against. An open transaction is kept only
in memory (so a crash rolls it back by construction, S3.1); C{prepare} writes one
PREPARE record holding all its operations, C{commit} one COMMIT record (or, for a
one-phase commit, one TXN record holding the operations). One record is all or nothing.
Destinations and durable subscriptions change rarely and are small, so each change
rewrites its file atomically.

Threads. Two halves: L{FileStore} lives on the reactor thread and keeps a L{Ledger}
(what is live, by submission order), so every call is checked and answered in order
without waiting for the disk. The disk half (L{_Disk}: journal, file pool, small files)
runs only through the injected C{run_in_thread}, one batch at a time (L{WriteQueue}):
records submitted while a batch is being written wait and form the next batch, which
gets one C{writev} and, with sync on, one fsync (group commit, S3.4). Every Deferred of
a batch fires after that fsync, or with sync off after C{os.writev} returned (so a
broker crash loses nothing acknowledged). If a batch fails, the store stops accepting
writes (L{StoreFailed}): the ledger and the disk no longer agree.
"""

import hashlib
import json
import os
import zlib
from pathlib import Path

from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from mqgate.store import journal as j
from mqgate.store.guard import guarded
from mqgate.store.interfaces import (
    CorruptStore, IMessageStore, PreparedTransaction, StoreError, StoreFailed,
    StoredMessage, destination_key, durable_key)
from mqgate.store.memory import PREPARED, Ledger, Txn

__all__ = ["FileStore", "FilePool", "WriteQueue", "DEFAULT_MAX_RECORD_SIZE"]

#: FACTS 1.7: imq.persist.file.message.max_record_size=1m.
DEFAULT_MAX_RECORD_SIZE = 1024 * 1024
#: FACTS 1.7: imq.persist.file.destination.message.filepool.limit=100.
DEFAULT_FILEPOOL_LIMIT = 100
#: Automatic compaction rewrites sealed segments less than half live.
DEFAULT_COMPACT_THRESHOLD = 0.5

#: Records that only cancel others (their size counts as dead at once).
_CANCELLING = frozenset((j.REMOVE, j.DROP, j.COMMIT, j.ROLLBACK))

_DESTINATIONS = "destinations.json"
_DURABLES = "durables.json"


# -- group commit -----------------------------------------------------------------------

class WriteQueue:
    """One writer: batches what is submitted while a write is in progress (S3.4).

    @param run_in_thread: C{f(*args) -> Deferred}, e.g. C{deferToThreadPool} bound to
        a reactor and pool.
    @param execute: C{execute(ops) -> [result per op]}, run in the thread.
    @param after_batch: called on the caller's thread after each batch's Deferreds.
    """

    def __init__(self, run_in_thread, execute, after_batch=None):
        self._run = run_in_thread
        self._execute = execute
        self._after_batch = after_batch
        self._pending = []
        self._busy = False
        self.failed = None
        self.batches = 0
        self.max_batch = 0

    @property
    def busy(self):
        """Whether a batch is being written."""
        return self._busy

    def submit(self, op):
        """Queue C{op}; the Deferred fires with its result once its batch is written."""
        if self.failed is not None:
            return defer.fail(StoreFailed(self.failed))
        d = defer.Deferred()
        self._pending.append((op, d))
        if not self._busy:
            self._start()
        return d

    def _start(self):
        batch, self._pending = self._pending, []
        self._busy = True
        self.batches += 1
        self.max_batch = max(self.max_batch, len(batch))
        d = self._run(self._execute, [op for op, _ in batch])
        d.addBoth(self._finished, batch)

    def _finished(self, result, batch):
        # Deferreds fire while still busy, so what their callbacks submit joins the
        # next batch instead of starting a batch of one.
        if isinstance(result, Failure):
            self.failed = result.value
            for _, d in batch:
                d.errback(result)
            pending, self._pending = self._pending, []
            for _, d in pending:
                d.errback(StoreFailed(self.failed))
        else:
            for (_, d), value in zip(batch, result):
                d.callback(value)
        self._busy = False
        if self._after_batch is not None and self.failed is None:
            self._after_batch()
        if self._pending:
            self._start()


# -- the file pool -----------------------------------------------------------------------

class FilePool:
    """Own files of large messages, with a pool of free files per destination (S3.3).

    A released file is kept for reuse (renamed C{free-*}) while its directory holds
    fewer than C{limit} free files, else deleted. C{cleanratio} percent of kept files
    are overwritten with zeros first. Runs on the writer thread.
    """

    def __init__(self, root, *, limit=DEFAULT_FILEPOOL_LIMIT, cleanratio=0):
        self.root = Path(root)
        self.limit = limit
        self.cleanratio = cleanratio
        self._free = {}
        self._free_count = 0      # read by the reactor thread: no dict iteration there
        self._clean_credit = 0
        self.counts = {"created": 0, "reused": 0, "released": 0, "zeroed": 0,
                       "deleted": 0}

    @staticmethod
    def directory_for(destination):
        """The pool directory name of a destination key."""
        return hashlib.sha1(destination.encode("utf-8")).hexdigest()[:16]

    def scan(self, in_use):
        """At recovery: files not in C{in_use} (relative paths) become free files."""
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for path in sorted(sub.iterdir()):
                rel = f"{sub.name}/{path.name}"
                if path.name.startswith("free-"):
                    self._keep_or_delete(path)
                elif rel not in in_use:
                    self.release(rel)      # written, but its record never was

    def write(self, rel, data, sync):
        """Write C{data} to own file C{rel}, reusing a free file when there is one."""
        path = self.root / rel
        free = self._free.get(path.parent.name)
        if free:
            os.replace(free.pop(), path)
            self._free_count -= 1
            self.counts["reused"] += 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.counts["created"] += 1
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            j.write_all(fd, [data])
            os.ftruncate(fd, len(data))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if sync:
            # The record that names this file will be fsynced; so must its name be.
            j.fsync_dir(path.parent)

    def read(self, rel, length, crc):
        """The bytes of own file C{rel}. @raise CorruptStore: missing or damaged."""
        path = self.root / rel
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CorruptStore(path, None, f"own file of a stored message: {e}") from None
        if len(data) != length or zlib.crc32(data) != crc:
            raise CorruptStore(path, None, "own file does not match its journal record")
        return data

    def release(self, rel):
        """The message of own file C{rel} is gone: pool the file or delete it."""
        path = self.root / rel
        self.counts["released"] += 1
        if not path.exists():
            return
        free = path.with_name(f"free-{os.urandom(8).hex()}")
        os.replace(path, free)
        if self._keep_or_delete(free):
            self._clean_credit += self.cleanratio
            if self._clean_credit >= 100:
                self._clean_credit -= 100
                self._zero(free)

    def _keep_or_delete(self, free):
        held = self._free.setdefault(free.parent.name, [])
        if len(held) < self.limit:
            held.append(free)
            self._free_count += 1
            return True
        free.unlink()
        self.counts["deleted"] += 1
        return False

    def _zero(self, path):
        size = path.stat().st_size
        fd = os.open(path, os.O_WRONLY)
        try:
            chunk = bytes(min(size, 1024 * 1024))
            done = 0
            while done < size:
                done += os.pwrite(fd, chunk[:size - done], done)
        finally:
            os.close(fd)
        self.counts["zeroed"] += 1

    def free_files(self):
        """How many free files the pool holds."""
        return self._free_count

    def cleanup(self):
        """Delete every free file (FACTS 1.7 cleanup=true, at shutdown)."""
        for held in self._free.values():
            for path in held:
                path.unlink()
                self.counts["deleted"] += 1
        self._free.clear()
        self._free_count = 0


class _LargeAdd:
    """An ADD_FILE payload whose own file is written on the writer thread."""

    __slots__ = ("destination", "message_id", "count", "rel", "data", "size")

    def __init__(self, destination, message_id, count, rel, data):
        self.destination = destination
        self.message_id = message_id
        self.count = count
        self.rel = rel
        self.data = data
        self.size = j.add_file_size(destination, rel)

    def __len__(self):
        return self.size

    def materialize(self, pool, sync):
        pool.write(self.rel, self.data, sync)
        (payload,) = j.pack_add_file(self.destination, self.message_id, self.count,
                                     self.rel, len(self.data), zlib.crc32(self.data))
        self.data = None
        return payload


# -- operations handed to the writer thread ---------------------------------------------

class _Record:
    __slots__ = ("rtype", "parts", "releases")

    def __init__(self, rtype, parts, releases=()):
        self.rtype = rtype
        self.parts = parts
        self.releases = releases


class _Snapshot:
    __slots__ = ("name", "content")

    def __init__(self, name, content):
        self.name = name
        self.content = content


class _Compact:
    __slots__ = ("threshold", "roll")

    def __init__(self, threshold, roll):
        self.threshold = threshold
        self.roll = roll


class _Close:
    __slots__ = ("cleanup",)

    def __init__(self, cleanup):
        self.cleanup = cleanup


class _Disk:
    """The writer-thread half: journal, pool, small files. Never on the reactor."""

    def __init__(self, directory, *, sync, segment_size, filepool_limit, cleanratio):
        self.directory = Path(directory)
        self.sync = sync
        self.journal = j.Journal(self.directory / "journal", segment_size=segment_size)
        self.pool = FilePool(self.directory / "large", limit=filepool_limit,
                             cleanratio=cleanratio)
        self.file_fsyncs = 0

    def recover(self):
        """Read everything back (S3.1): C{(replay, destinations, durables, warnings)}."""
        self.directory.mkdir(parents=True, exist_ok=True)
        destinations = self._read_small(_DESTINATIONS, "destinations")
        durables = self._read_small(_DURABLES, "durables")
        replay, warnings = self.journal.recover(load_data=True)
        in_use = set()
        for held in replay.live.values():
            for entry in held.values():
                self._load(entry.file, entry, in_use)
        for _, _, ops in replay.prepared.values():
            for _, _, op in ops:
                if not isinstance(op, tuple):
                    self._load(op.file, op, in_use)
        self.pool.scan(in_use)
        return replay, destinations, durables, warnings

    def _load(self, file, holder, in_use):
        if file is not None:
            holder.data = self.pool.read(*file)
            in_use.add(file[0])

    def _read_small(self, name, field):
        path = self.directory / name
        path.with_suffix(".tmp").unlink(missing_ok=True)
        if not path.exists():
            return []
        try:
            return json.loads(path.read_bytes())[field]
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptStore(path, None, f"unreadable: {e}") from None

    def execute(self, ops):
        """Run one batch in order; return one result per op."""
        results, run = [None] * len(ops), []
        for i, op in enumerate(ops):
            if isinstance(op, _Record):
                run.append(op)
                continue
            self._flush(run)
            run = []
            results[i] = self._other(op)
        self._flush(run)
        return results

    def _flush(self, run):
        if not run:
            return
        records = []
        for op in run:
            parts = [p.materialize(self.pool, self.sync) if isinstance(p, _LargeAdd)
                     else p for p in op.parts]
            records.append((op.rtype, parts))
        self.journal.append(records)
        if self.sync:
            self.journal.sync()
        # Own files are reused only once the records that free them are written.
        for op in run:
            for rel in op.releases:
                self.pool.release(rel)

    def _other(self, op):
        if isinstance(op, _Snapshot):
            return self._write_small(op.name, op.content)
        if isinstance(op, _Compact):
            return self.journal.compact(op.threshold, roll=op.roll)
        self.journal.close()
        if op.cleanup:
            self.pool.cleanup()
        return None

    def _write_small(self, name, content):
        path = self.directory / name
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            j.write_all(fd, [content])
            if self.sync:
                os.fsync(fd)
                self.file_fsyncs += 1
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if self.sync:
            j.fsync_dir(self.directory)


# -- the reactor-thread half --------------------------------------------------------------

class _Entry:
    """What the ledger keeps per message: its journal bytes and own file, if any."""

    __slots__ = ("size", "rel", "data")

    def __init__(self, size, rel=None, data=None):
        self.size = size
        self.rel = rel
        self.data = data


@implementer(IMessageStore)
class FileStore:
    """The file store (S3.3, S3.4).

    @param directory: the store directory (created when missing).
    @param run_in_thread: C{f(*args) -> Deferred} running C{f} off the reactor thread.
    @param sync: C{mqgate.persist.file.sync.enabled}: fsync before acknowledging.
    @param max_record_size: larger messages go to own files (FACTS 1.7: 1m).
    @param segment_size: journal segment size in bytes.
    @param filepool_limit: free own files kept per destination (FACTS 1.7: 100).
    @param cleanratio: percent of pooled files zeroed when returned (FACTS 1.7: 0).
    @param cleanup: delete the free own files on close (FACTS 1.7: false).
    @param compact_threshold: automatic compaction rewrites sealed segments whose live
        share is below this; it runs when the dead bytes exceed one segment and this
        share of the journal. C{None} turns it off.
    """

    @property
    def _failed(self):
        # For guarded(): the exception of an earlier failed write, or None.
        return self._queue.failed

    def __init__(self, directory, run_in_thread, *, sync=False,
                 max_record_size=DEFAULT_MAX_RECORD_SIZE,
                 segment_size=j.DEFAULT_SEGMENT_SIZE, filepool_limit=DEFAULT_FILEPOOL_LIMIT,
                 cleanratio=0, cleanup=False, compact_threshold=DEFAULT_COMPACT_THRESHOLD):
        self._disk = _Disk(directory, sync=sync, segment_size=segment_size,
                           filepool_limit=filepool_limit, cleanratio=cleanratio)
        self._run = run_in_thread
        self._queue = WriteQueue(run_in_thread, self._disk.execute, self._after_batch)
        self._ledger = Ledger()
        self._state = "new"
        self.max_record_size = max_record_size
        self.segment_size = segment_size
        self.cleanup = cleanup
        self.compact_threshold = compact_threshold
        self._total_bytes = 0
        self._dead_bytes = 0
        self._dead_since_compaction = 0
        self._compacting = False

    # -- figures ----------------------------------------------------------------------------

    @property
    def fsync_count(self):
        """Journal fsyncs so far (S3.4; group commit makes this << records)."""
        return self._disk.journal.fsyncs

    @property
    def stats(self):
        """Counters for the benchmark and the admin views."""
        jn = self._disk.journal
        return {
            "fsyncs": jn.fsyncs, "file_fsyncs": self._disk.file_fsyncs,
            "records": jn.records, "batches": self._queue.batches,
            "max_batch": self._queue.max_batch,
            "records_per_fsync": jn.records_synced / jn.fsyncs if jn.fsyncs else 0.0,
            "max_records_per_fsync": jn.max_records_per_fsync,
            "bytes_written": jn.bytes_written, "compactions": jn.compactions,
            "journal_bytes": self._total_bytes, "dead_bytes": self._dead_bytes,
            "pool": dict(self._disk.pool.counts, free=self._disk.pool.free_files()),
        }

    # -- recovery ---------------------------------------------------------------------------

    def recover(self):
        """Read the store back (S3.1); must be the first call, once."""
        if self._state != "new":
            return defer.fail(StoreError("recover() was called already"))
        self._state = "recovering"
        d = self._run(self._disk.recover)
        d.addCallback(self._recovered)
        d.addErrback(self._recovery_failed)
        return d

    def _recovery_failed(self, failure):
        self._state = "new"
        return failure

    def _recovered(self, result):
        replay, destinations, durables, warnings = result
        ledger = self._ledger
        for item in destinations:
            ledger.destinations[(item["kind"], item["name"])] = item["attributes"]
        for item in durables:
            ledger.durables[(item["container_id"], item["name"])] = (
                item["topic"], item["selector"])
        recovered = ledger.recovered_skeleton()
        recovered.warnings = warnings
        for dest, held in replay.live.items():
            recovered.messages[dest] = []
            for mid, e in held.items():
                ledger.insert(dest, mid, _Entry(e.size, e.file and e.file[0]))
                recovered.messages[dest].append(StoredMessage(dest, mid, e.data, e.count))
        for txn_id, (_, _, ops) in replay.prepared.items():
            recovered.prepared[txn_id] = self._restore_prepared(txn_id, ops)
        self._total_bytes = sum(replay.segment_bytes.values())
        self._dead_bytes = self._total_bytes - sum(replay.live_bytes().values())
        recovered.max_message_id = max(replay.max_message_id, ledger.max_message_id)
        self._state = "open"
        return recovered

    def _restore_prepared(self, txn_id, ops):
        txn = self._ledger.txns[txn_id] = Txn(txn_id, PREPARED)
        adds = []
        for sub_type, size, op in ops:
            if sub_type == j.REMOVE:
                txn.removes.append(op)
            else:
                txn.adds.append((op.destination, op.message_id,
                                 _Entry(size, op.file and op.file[0])))
                adds.append(StoredMessage(op.destination, op.message_id, op.data,
                                          op.count))
                self._ledger.max_message_id = max(self._ledger.max_message_id,
                                                  op.message_id)
        return PreparedTransaction(txn_id, tuple(adds), tuple(txn.removes))

    # -- messages ---------------------------------------------------------------------------

    def _new_entry(self, destination, message_id, data):
        if len(data) <= self.max_record_size:
            return _Entry(j.HEADER_SIZE + len(j.pack_add(destination, message_id, 0, b"")[0])
                          + len(data), data=data)
        rel = (f"{FilePool.directory_for(destination)}/"
               f"{message_id:x}-{os.urandom(6).hex()}.msg")
        return _Entry(j.HEADER_SIZE + j.add_file_size(destination, rel), rel, data)

    @staticmethod
    def _add_parts(destination, message_id, entry):
        if entry.rel is None:
            return j.ADD, j.pack_add(destination, message_id, 0, entry.data)
        return j.ADD_FILE, [_LargeAdd(destination, message_id, 0, entry.rel, entry.data)]

    @guarded
    def add_message(self, destination, message_id, data, *, txn=None):
        """Store a message; fires when durable as configured (S3.4).

        C{data} is written later, on the writer thread: it must not change meanwhile
        (bytes, or a view of bytes, never a buffer that is reused).
        """
        self._ledger.check_message(destination, message_id, data)
        entry = self._new_entry(destination, message_id, data)
        self._ledger.add(destination, message_id, entry, txn)
        if txn is not None:
            return defer.succeed(None)
        rtype, parts = self._add_parts(destination, message_id, entry)
        entry.data = None
        return self._submit(_Record(rtype, parts), entry.size)

    @guarded
    def remove_message(self, destination, message_id, *, txn=None):
        """Remove a message (consumer settlement)."""
        entry = self._ledger.remove(destination, message_id, txn)
        if txn is not None:
            return defer.succeed(None)
        self._count_dead(entry.size)
        parts = j.pack_remove(destination, message_id)
        return self._submit(_Record(j.REMOVE, parts, _rels([entry])), _size(parts))

    @guarded
    def update_delivery_count(self, destination, message_id, count):
        """Record a message's delivery count."""
        self._ledger.check_count(count)
        self._ledger.get(destination, message_id)
        parts = j.pack_count(destination, message_id, count)
        return self._submit(_Record(j.COUNT, parts), _size(parts))

    # -- destinations and durables ------------------------------------------------------------

    @guarded
    def add_destination(self, kind, name, attributes):
        """Store a destination (destinations.json)."""
        json.dumps(attributes)    # TypeError (-> StoreError) before anything changes
        if not self._ledger.add_destination(kind, name, attributes):
            return defer.succeed(None)
        return self._queue.submit(self._destinations_snapshot())

    @guarded
    def remove_destination(self, kind, name):
        """Forget a destination and its messages."""
        d = self._drop(destination_key(kind, name))
        if self._ledger.destinations.pop((kind, name), None) is not None:
            # The snapshot is written after the DROP, so its Deferred reports both.
            d.addErrback(lambda _: None)
            d = self._queue.submit(self._destinations_snapshot())
        return d

    @guarded
    def add_durable(self, container_id, name, topic, selector):
        """Store a durable subscription (durables.json)."""
        if not self._ledger.add_durable(container_id, name, topic, selector):
            return defer.succeed(None)
        return self._queue.submit(self._durables_snapshot())

    @guarded
    def remove_durable(self, container_id, name):
        """Forget a durable subscription and its backlog."""
        d = self._drop(durable_key(container_id, name))
        if self._ledger.durables.pop((container_id, name), None) is not None:
            d.addErrback(lambda _: None)
            d = self._queue.submit(self._durables_snapshot())
        return d

    def _drop(self, key):
        entries = self._ledger.drop(key)
        if not entries:
            return defer.succeed(None)
        self._count_dead(sum(e.size for e in entries))
        parts = j.pack_drop(key)
        return self._submit(_Record(j.DROP, parts, _rels(entries)), _size(parts))

    def _destinations_snapshot(self):
        items = [{"kind": k, "name": n, "attributes": a}
                 for (k, n), a in self._ledger.destinations.items()]
        return _Snapshot(_DESTINATIONS, _json({"destinations": items}))

    def _durables_snapshot(self):
        items = [{"container_id": c, "name": n, "topic": t, "selector": s}
                 for (c, n), (t, s) in self._ledger.durables.items()]
        return _Snapshot(_DURABLES, _json({"durables": items}))

    # -- transactions -----------------------------------------------------------------------

    @guarded
    def begin(self, txn_id):
        """Open a transaction (memory only: nothing of it is on disk until prepare)."""
        self._ledger.begin(txn_id)
        return defer.succeed(None)

    @guarded
    def prepare(self, txn_id):
        """Write one PREPARE record holding the transaction's operations."""
        txn = self._ledger.prepare(txn_id)
        parts = j.pack_ops(txn_id, self._txn_ops(txn))
        return self._submit(_Record(j.PREPARE, parts), _size(parts))

    @guarded
    def commit(self, txn_id):
        """Write COMMIT (prepared) or one TXN record (open); apply it to the ledger."""
        was_prepared = self._ledger.check_resolvable(txn_id).state == PREPARED
        txn, removed = self._ledger.commit(txn_id)
        self._count_dead(sum(e.size for e in removed))
        if was_prepared:
            record = _Record(j.COMMIT, j.pack_end(txn_id), _rels(removed))
        elif txn.adds or txn.removes:
            ops = self._txn_ops(txn)
            record = _Record(j.TXN, j.pack_ops(txn_id, ops), _rels(removed))
        else:
            return defer.succeed(None)
        return self._submit(record, _size(record.parts))

    @guarded
    def rollback(self, txn_id):
        """Discard a transaction; a prepared one gets a ROLLBACK record."""
        txn = self._ledger.rollback(txn_id)
        if txn.state != PREPARED:
            return defer.succeed(None)
        entries = [entry for _, _, entry in txn.adds]
        self._count_dead(sum(e.size for e in entries))
        parts = j.pack_end(txn_id)
        return self._submit(_Record(j.ROLLBACK, parts, _rels(entries)), _size(parts))

    def _txn_ops(self, txn):
        ops = []
        for dest, mid in txn.removes:
            (raw,) = j.pack_remove(dest, mid)
            ops.append((j.REMOVE, [raw], len(raw)))
        for dest, mid, entry in txn.adds:
            rtype, parts = self._add_parts(dest, mid, entry)
            entry.data = None
            length = _size(parts)
            entry.size = length + 5
            ops.append((rtype, parts, length))
        return ops

    # -- compaction and close -----------------------------------------------------------------

    @guarded
    def compact(self):
        """Seal the active segment and rewrite every segment holding dead records."""
        return self._compact(1.0, roll=True)

    def _compact(self, threshold, roll):
        self._compacting = True
        self._dead_since_compaction = 0
        total_before, dead_before = self._total_bytes, self._dead_bytes
        d = self._queue.submit(_Compact(threshold, roll))

        def done(figures):
            # What was submitted after the compaction op is not reflected in figures.
            self._compacting = False
            residual = max(0, figures["bytes_after"] - figures["live_bytes"])
            self._total_bytes = figures["bytes_after"] + self._total_bytes - total_before
            self._dead_bytes = residual + self._dead_bytes - dead_before
            return figures

        def failed(failure):
            self._compacting = False
            return failure
        return d.addCallbacks(done, failed)

    def _after_batch(self):
        # Automatic online compaction (S3.3), when enough of the journal is dead.
        if (self.compact_threshold is None or self._compacting
                or self._state != "open"):
            return
        # Dead bytes in the active segment cannot be reclaimed without sealing it, so a
        # pass also waits for a segment's worth of new dead bytes since the last one.
        dead = self._dead_bytes
        if (self._dead_since_compaction >= self.segment_size
                and dead >= self.compact_threshold * self._total_bytes):
            self._compact(self.compact_threshold, roll=False).addErrback(lambda _: None)

    def close(self):
        """Write what is pending, fsync, close the files (clean the pool if asked)."""
        if self._state == "closed":
            return defer.succeed(None)
        if self._state != "open" or self._queue.failed is not None:
            self._state = "closed"
            return defer.succeed(None)
        self._state = "closed"
        return self._queue.submit(_Close(self.cleanup))

    def _count_dead(self, size):
        self._dead_bytes += size
        self._dead_since_compaction += size

    def _submit(self, record, size):
        self._total_bytes += size + j.HEADER_SIZE
        if record.rtype in _CANCELLING:
            # Needed only while what it cancels is on disk: reclaimable, so dead.
            self._count_dead(size + j.HEADER_SIZE)
        return self._queue.submit(record)


def _size(parts):
    return sum(len(p) for p in parts)


def _rels(entries):
    return tuple(e.rel for e in entries if e.rel is not None)


def _json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
