"""
The file store (S3.3, S3.4): L{IMessageStore} on the journal, plus small files.

Layout under the store directory (the broker passes C{instances/NAME/filestore/})::

    destinations.json   destinations: a snapshot, plus destinations.log, the changes
                        since (catalog.py: one appended line per change)
    durables.json       durable subscriptions (likewise, with durables.log)
    journal/*.seg       message records and transaction records (journal.py)
    large/<hash>/       own files of messages over max_record_size, one pool per
                        destination key (<hash>: SHA-1 of the key, 16 hex digits)

Why transactions are journalled rather than kept in a file of their own: a commit must
be atomic with the message records it orders against. An open transaction is kept only
in memory (so a crash rolls it back by construction, S3.1); C{prepare} writes one
PREPARE record holding all its operations, C{commit} one COMMIT record (or, for a
one-phase commit, one TXN record holding the operations). One record is all or nothing.
Destinations and durable subscriptions are small and change rarely, but a client may
make many (auto-creation), so a change appends one line to a log and the snapshot is
rewritten only now and then (O(1) per change, amortized).

Threads. Two halves: L{FileStore} lives on the reactor thread and keeps a L{Ledger}
(what is live, by submission order), so every call is checked and answered in order
without waiting for the disk. The disk half (L{_Disk}: journal, file pool, small files)
runs only through the injected C{run_in_thread}, one batch at a time (L{WriteQueue}):
records submitted while a batch is being written wait and form the next batch, which
gets one write (its records were encoded on the reactor when submitted) and,
with sync on, one fsync (group commit, S3.4). Every Deferred of
a batch fires after that fsync, or with sync off after the write returned (so a
broker crash loses nothing acknowledged).

Faults (S3.6). A full disk or an I/O error does not stop the store for good. A batch
that fails stops at the failed operation: what was written before stays (and is
acknowledged), the journal is cut back to its last whole record, and the store becomes
I{failing} (L{mqgate.store.health}): the adds that were not written are taken back
from the ledger and refused (L{StoreFailed}), so the broker never delivers them; new
adds are refused at once; removals and catalog changes are kept, in order, and written
first once a probe (repair, then write and remove a small file) succeeds. Own files of
adds that were not written are freed again.
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
from mqgate.store.catalog import Catalog
from mqgate.store.guard import guarded, refused_while_failing
from mqgate.store.health import DEFAULT_RETRY_INTERVAL, StoreHealth, file_advice
from mqgate.store.interfaces import (
    CorruptStore, IMessageStore, PreparedTransaction, StoreError,
    StoreFailed, StoredMessage, destination_key, durable_key)
from mqgate.store.memory import PREPARED, Ledger, Txn
from mqgate.store.reclaim import SegmentUse

__all__ = ["FileStore", "FilePool", "WriteQueue", "DEFAULT_MAX_RECORD_SIZE"]

#: FACTS 1.7: imq.persist.file.message.max_record_size=1m.
DEFAULT_MAX_RECORD_SIZE = 1024 * 1024
#: FACTS 1.7: imq.persist.file.destination.message.filepool.limit=100.
DEFAULT_FILEPOOL_LIMIT = 100
#: Automatic compaction rewrites sealed segments less than half live.
DEFAULT_COMPACT_THRESHOLD = 0.5

#: Records that only cancel others (their size counts as dead at once).
_CANCELLING = frozenset((j.REMOVE, j.DROP, j.COMMIT, j.ROLLBACK))
#: Records of two-phase transactions (SegmentUse leaves their segments to a full pass).
_TWO_PHASE = frozenset((j.PREPARE, j.COMMIT, j.ROLLBACK))



# -- group commit -----------------------------------------------------------------------

class BatchFailed(Exception):
    """A batch stopped at a failed operation (raised on the writer thread).

    @ivar done: how many operations, from the first, were carried out.
    @ivar results: their results.
    @ivar cause: the exception of the operation that failed.
    """

    def __init__(self, done, results, cause):
        self.done = done
        self.results = results
        self.cause = cause
        super().__init__(f"{done} operations done, then: {cause!r}")


class OpFailed:
    """The result of one operation that failed on its own, without stopping its batch
    (a compaction pass that ran out of room)."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


class WriteQueue:
    """One writer: batches what is submitted while a write is in progress (S3.4).

    When a batch fails, the operations it carried out are answered, and every other
    (the rest of the batch, then what waits) goes to C{on_failure(cause, rest)}, which
    answers those it refuses and returns, in order, those to keep; the queue then
    I{stalls}, keeping them (and what is submitted later) until L{resume} (S3.6).

    @param run_in_thread: C{f(*args) -> Deferred}, e.g. C{deferToThreadPool} bound to
        a reactor and pool.
    @param execute: C{execute(ops) -> [result per op]}, run in the thread; raises
        L{BatchFailed} (or any exception: nothing done).
    @param after_batch: called on the caller's thread after each batch's Deferreds.
    @param on_failure: C{on_failure(cause, [(op, Deferred)]) -> [(op, Deferred)]}.
    """

    def __init__(self, run_in_thread, execute, after_batch=None, on_failure=None):
        self._run = run_in_thread
        self._execute = execute
        self._after_batch = after_batch
        self._on_failure = on_failure or _refuse_all
        self._pending = []
        self._busy = False
        self.stalled = False
        self.batches = 0
        self.max_batch = 0

    @property
    def busy(self):
        """Whether a batch is being written."""
        return self._busy

    @property
    def waiting(self):
        """How many operations wait (while stalled: for the store to recover)."""
        return len(self._pending)

    def submit(self, op):
        """Queue C{op}; the Deferred fires with its result once its batch is written."""
        d = defer.Deferred()
        self._pending.append((op, d))
        if not (self._busy or self.stalled):
            self._start()
        return d

    def resume(self):
        """The store can write again: write what was kept, then go on."""
        self.stalled = False
        if self._pending and not self._busy:
            self._start()

    def abandon(self, error):
        """Errback everything waiting with C{error} (closing while stalled)."""
        pending, self._pending = self._pending, []
        for _, d in pending:
            d.errback(error)

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
            error = result.value
            done, values, cause = ((error.done, error.results, error.cause)
                                   if isinstance(error, BatchFailed) else (0, [], error))
            _answer(batch[:done], values)
            rest, self._pending = batch[done:] + self._pending, []
            self.stalled = True
            self._pending = self._on_failure(cause, rest) + self._pending
        else:
            _answer(batch, result)
        self._busy = False
        if self.stalled:
            return
        if self._after_batch is not None:
            self._after_batch()
        if self._pending and not self._busy and not self.stalled:
            self._start()


def _answer(pairs, values):
    for (_, d), value in zip(pairs, values):
        if isinstance(value, OpFailed):
            d.errback(value.error)
        else:
            d.callback(value)


def _refuse_all(cause, rest):
    error = StoreFailed(cause)
    for _, d in rest:
        d.errback(error)
    return []


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
    """An ADD_FILE payload whose own file is written on the writer thread.

    The bytes are kept until the op is dropped: an op kept across a store failure (a
    transaction) writes its own file again when it is retried.
    """

    __slots__ = ("destination", "message_id", "count", "rel", "data", "size", "written")

    def __init__(self, destination, message_id, count, rel, data):
        self.destination = destination
        self.message_id = message_id
        self.count = count
        self.rel = rel
        self.data = data
        self.size = j.add_file_size(destination, rel)
        self.written = False

    def __len__(self):
        return self.size

    def materialize(self, pool, sync):
        self.written = True
        pool.write(self.rel, self.data, sync)
        (payload,) = j.pack_add_file(self.destination, self.message_id, self.count,
                                     self.rel, len(self.data), zlib.crc32(self.data))
        return payload


# -- operations handed to the writer thread ---------------------------------------------

class _Record:
    """A journal record. C{key} is C{(destination, message_id)} for a plain add (what
    to take back from the ledger if it is never written). C{raw} is the whole record,
    encoded on the reactor (L{j.record_bytes}), when it needs nothing from the writer
    thread (no own file); C{parts} is then C{None}.

    The ledger entries it names tell the writer thread's L{SegmentUse} what the record
    changes: C{entries}, the messages it adds (each learns where it was written, for
    read_message); C{cancels}, those it removes; C{counted}, the one whose delivery
    count it records."""

    __slots__ = ("rtype", "parts", "releases", "key", "raw", "entries", "cancels",
                 "counted")

    def __init__(self, rtype, parts, releases=(), key=None, raw=None, entries=(),
                 cancels=(), counted=None):
        self.rtype = rtype
        self.parts = parts
        self.releases = releases
        self.key = key
        self.raw = raw
        self.entries = entries
        self.cancels = cancels
        self.counted = counted


class _Batch(_Record):
    """The adds and removals of one L{FileStore.write_batch} call as one TXN record:
    on disk whole or not at all, so a failed write leaves none of its adds behind.

    @ivar added: C{(destination, message_id)} of its adds (taken back from the ledger
        if it is never written).
    @ivar removals: its REMOVE operations (kept and written once the store recovers
        if it is never written, S3.6).
    """

    __slots__ = ("added", "removals")

    def __init__(self, parts, raw, releases, entries, added, removals, cancels):
        super().__init__(j.TXN, parts, releases, raw=raw, entries=entries,
                         cancels=cancels)
        self.added = added
        self.removals = removals


#: The transaction id of the TXN record of a write_batch call: none is needed (the
#: record is applied when it is read, like a one-phase commit), so the shortest.
_BATCH_ID = ""


class _CatalogChange:
    """Set or delete one destination or durable subscription (catalog.py)."""

    __slots__ = ("catalog", "item", "delete")

    def __init__(self, catalog, item, delete=False):
        self.catalog = catalog
        self.item = item
        self.delete = delete


class _Read:
    """Read one live message back (L{FileStore.read_message}), in order with writes.

    @ivar loc: C{(segment, offset)} of the record that added it, when known.
    """

    __slots__ = ("destination", "message_id", "loc")

    def __init__(self, destination, message_id, loc):
        self.destination = destination
        self.message_id = message_id
        self.loc = loc


class _Compact:
    __slots__ = ("threshold", "roll", "min_gain")

    def __init__(self, threshold, roll, min_gain):
        self.threshold = threshold
        self.roll = roll
        self.min_gain = min_gain


class _Close:
    __slots__ = ("cleanup",)

    def __init__(self, cleanup):
        self.cleanup = cleanup


#: The size of the probe file a failing store writes (and removes) to see whether it
#: can write again: small, but more than the few bytes a nearly full disk may still take.
PROBE_SIZE = 64 * 1024
_PROBE = "probe.tmp"


def _destination_key(item):
    return (item["kind"], item["name"])


def _durable_key(item):
    return (item["container_id"], item["name"])


class _Disk:
    """The writer-thread half: journal, pool, catalogs. Never on the reactor."""

    def __init__(self, directory, *, sync, segment_size, filepool_limit, cleanratio):
        self.directory = Path(directory)
        self.sync = sync
        self.journal = j.Journal(self.directory / "journal", segment_size=segment_size)
        self.use = SegmentUse()
        self.pool = FilePool(self.directory / "large", limit=filepool_limit,
                             cleanratio=cleanratio)
        self.catalogs = {
            "destinations": Catalog(self.directory, "destinations", _destination_key,
                                    sync=sync),
            "durables": Catalog(self.directory, "durables", _durable_key, sync=sync),
        }

    @property
    def file_fsyncs(self):
        """fsyncs of the destinations and durables logs."""
        return sum(c.fsyncs for c in self.catalogs.values())

    def recover(self):
        """Read everything back (S3.1): C{(replay, destinations, durables, warnings)}."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / _PROBE).unlink(missing_ok=True)
        destinations = self.catalogs["destinations"].load()
        durables = self.catalogs["durables"].load()
        replay, warnings = self.journal.recover(load_data=True)
        self.use = SegmentUse.of_replay(replay)
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

    def execute(self, ops):
        """Run one batch in order; return one result per op.

        @raise BatchFailed: an operation failed; those before it were carried out.
        """
        results, i = [], 0
        while i < len(ops):
            if isinstance(ops[i], _Record):
                end = i
                while end < len(ops) and isinstance(ops[end], _Record):
                    end += 1
                try:
                    self._flush(ops[i:end])
                except j.JournalWriteError as e:
                    raise BatchFailed(i + e.done, results + [None] * e.done,
                                      e.cause) from None
                results.extend([None] * (end - i))
                i = end
                continue
            try:
                results.append(self._other(ops[i]))
            except OSError as e:
                raise BatchFailed(i, results, e) from None
            i += 1
        return results

    def _flush(self, run):
        records, done = [], 0
        try:
            for op in run:
                if op.raw is not None:
                    records.append(op.raw)
                    continue
                parts = [p.materialize(self.pool, self.sync) if isinstance(p, _LargeAdd)
                         else p for p in op.parts]
                records.append((op.rtype, parts))
            try:
                locations = self.journal.append(records, sync=self.sync)
            except j.JournalWriteError as e:
                done = e.done
                self._written(run, e.locations)
                raise
            done = len(run)
            self._written(run, locations)
        except OSError as e:
            raise j.JournalWriteError(0, e) from e
        finally:
            # Own files are reused only once the records that free them are written;
            # the own files of adds that were not written are freed again.
            for op in run[:done]:
                for rel in op.releases:
                    self._release(rel)
            for op in run[done:]:
                for part in op.parts or ():
                    if isinstance(part, _LargeAdd) and part.written:
                        part.written = False
                        self._release(part.rel)

    def _written(self, run, locations):
        # What the records written change in each segment (and where their adds are).
        wrote = self.use.wrote
        for op, (segno, offset, _) in zip(run, locations):
            wrote(segno, offset, op.rtype in _TWO_PHASE, op.entries, op.cancels,
                  op.counted)

    def _release(self, rel):
        # Best effort: a file left behind is found free by the next recovery's scan.
        try:
            self.pool.release(rel)
        except OSError:
            pass

    def _other(self, op):
        if isinstance(op, _Read):
            try:
                return self.read_message(op.destination, op.message_id, op.loc)
            except (OSError, CorruptStore, ValueError) as e:
                # A read that failed changes nothing stored: it fails alone.
                return OpFailed(StoreError(
                    f"could not read message {op.message_id} of {op.destination!r}"
                    f" back from the journal: {e}"))
        if isinstance(op, _CatalogChange):
            catalog = self.catalogs[op.catalog]
            if op.delete:
                catalog.delete(op.item)
            else:
                catalog.set(op.item)
            return None
        if isinstance(op, _Compact):
            try:
                return self.journal.compact(op.threshold, roll=op.roll, use=self.use,
                                            min_gain=op.min_gain)
            except (OSError, CorruptStore) as e:
                # The old segments are intact: only this pass failed (S3.6).
                return OpFailed(StoreError(f"compaction failed: {e}"))
        self.journal.close()
        for catalog in self.catalogs.values():
            catalog.close()
        if op.cleanup:
            self.pool.cleanup()
        return None

    def read_message(self, destination, message_id, loc):
        """The stored bytes of a live message: its record at C{loc} (one bounded
        read), or, when the record moved (a compaction rewrote its segment) or its
        place is not known, the newest add of it found scanning the segments from
        the newest. @raise CorruptStore: it is not in the journal."""
        if loc is not None:
            found = self._add_at(loc, destination, message_id)
            if found is not None:
                return self._data_of(found)
        for segno in reversed(self.journal.segments()):
            found = None
            for _, rtype, payload, _ in j.scan(self.journal._path(segno).read_bytes()):
                if rtype is None:
                    break
                found = _add_in(rtype, payload, destination, message_id) or found
            if found is not None:
                return self._data_of(found)
        raise CorruptStore(self.directory / "journal", None,
                           f"message {message_id} of {destination!r} is live but not"
                           " in the journal")

    def _add_at(self, loc, destination, message_id):
        # The add of (destination, message_id) in the record at loc, or None.
        segno, offset = loc
        try:
            fd = os.open(self.journal._path(segno), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            header = os.pread(fd, j.HEADER_SIZE, offset)
            if len(header) < j.HEADER_SIZE:
                return None
            length = j._HEADER.unpack(header)[4]
            buf = header + os.pread(fd, length, offset + j.HEADER_SIZE)
        finally:
            os.close(fd)
        for _, rtype, payload, _ in j.scan(buf):
            return rtype and _add_in(rtype, payload, destination, message_id)
        return None

    def _data_of(self, add):
        if add.file is not None:
            return self.pool.read(*add.file)
        return add.data

    def probe(self):
        """Can the store write again? Repair what failed writes left, then write,
        fsync and remove a small file. @raise OSError: not yet. @raise CorruptStore:
        never by itself."""
        self.journal.repair()
        for catalog in self.catalogs.values():
            catalog.repair()
        path = self.directory / _PROBE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                j.write_all(fd, [bytes(PROBE_SIZE)])
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def close_quietly(self):
        """Close the files of a store that cannot write (nothing more is written)."""
        for closer in [self.journal.close] + [c.close for c in self.catalogs.values()]:
            try:
                closer()
            except OSError:
                pass


# -- the reactor-thread half --------------------------------------------------------------

class _Entry:
    """What the ledger keeps per message: its journal bytes and own file, if any."""

    __slots__ = ("size", "rel", "data", "loc", "count_seg")

    def __init__(self, size, rel=None, data=None, loc=None, count_seg=None):
        self.size = size
        self.rel = rel
        self.data = data
        # (segment, offset) of the record that added it, set on the writer thread once
        # written, and cleared there once its removal is written (SegmentUse); a
        # compaction may move it within its segment (read_message then looks for it).
        self.loc = loc
        # The segment of its latest delivery count record, if any (SegmentUse).
        self.count_seg = count_seg


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
    @param clock: an C{IReactorTime} for probing the disk while writes fail (S3.6), or
        C{None}: no timer (call C{health.probe()}).
    @param retry_interval: seconds between those probes.

    @ivar health: the L{StoreHealth}: whether the store can write now.
    """

    def __init__(self, directory, run_in_thread, *, sync=False,
                 max_record_size=DEFAULT_MAX_RECORD_SIZE,
                 segment_size=j.DEFAULT_SEGMENT_SIZE, filepool_limit=DEFAULT_FILEPOOL_LIMIT,
                 cleanratio=0, cleanup=False, compact_threshold=DEFAULT_COMPACT_THRESHOLD,
                 clock=None, retry_interval=DEFAULT_RETRY_INTERVAL):
        self._disk = _Disk(directory, sync=sync, segment_size=segment_size,
                           filepool_limit=filepool_limit, cleanratio=cleanratio)
        self._run = run_in_thread
        self._queue = WriteQueue(run_in_thread, self._disk.execute, self._after_batch,
                                 self._write_failed)
        self.health = StoreHealth(
            clock, self._probe, f"file store in {directory}",
            lambda error: file_advice(error, directory), resume=self._queue.resume,
            pending=lambda: self._queue.waiting, retry_interval=retry_interval)
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
            "fsyncs": jn.fsyncs, "fsync_seconds": jn.fsync_seconds,
            "file_fsyncs": self._disk.file_fsyncs,
            "records": jn.records, "batches": self._queue.batches,
            "max_batch": self._queue.max_batch,
            "records_per_fsync": jn.records_synced / jn.fsyncs if jn.fsyncs else 0.0,
            "max_records_per_fsync": jn.max_records_per_fsync,
            "bytes_written": jn.bytes_written, "compactions": jn.compactions,
            "full_compactions": jn.full_compactions,
            "segments_deleted": jn.segments_deleted,
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
            ledger.destinations[(item["kind"], item["name"])] = item.get("attributes", {})
        for item in durables:
            # An item written before durables had owners has no "owner" key.
            ledger.durables[(item["container_id"], item["name"])] = (
                item["topic"], item["selector"], item.get("owner"))
        recovered = ledger.recovered_skeleton()
        recovered.warnings = warnings
        for dest, held in replay.live.items():
            recovered.messages[dest] = []
            for mid, e in held.items():
                ledger.insert(dest, mid, _Entry(
                    e.size, e.file and e.file[0], loc=e.loc[:2],
                    count_seg=e.count_loc and e.count_loc[0]))
                recovered.messages[dest].append(StoredMessage(dest, mid, e.data, e.count))
        for txn_id, (loc, _, ops) in replay.prepared.items():
            recovered.prepared[txn_id] = self._restore_prepared(txn_id, loc, ops)
        self._total_bytes = sum(replay.segment_bytes.values())
        self._dead_bytes = self._total_bytes - sum(replay.live_bytes().values())
        recovered.max_message_id = max(replay.max_message_id, ledger.max_message_id)
        self._state = "open"
        return recovered

    def _restore_prepared(self, txn_id, loc, ops):
        # Its adds stay in the PREPARE record at loc, where SegmentUse counts them.
        txn = self._ledger.txns[txn_id] = Txn(txn_id, PREPARED)
        adds = []
        for sub_type, size, op in ops:
            if sub_type == j.REMOVE:
                txn.removes.append(op)
            else:
                txn.adds.append((op.destination, op.message_id,
                                 _Entry(size, op.file and op.file[0], loc=loc[:2])))
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
    @refused_while_failing
    def add_message(self, destination, message_id, data, *, txn=None):
        """Store a message; fires when durable as configured (S3.4).

        C{data} is written later, on the writer thread: it must not change meanwhile
        (bytes, or a view of bytes, never a buffer that is reused).
        """
        self._ledger.check_message(destination, message_id, data)
        if txn is None and len(data) <= self.max_record_size:
            # The common case: the whole record encoded here, once; the writer thread
            # only joins it with the rest of its batch.
            raw = j.record_bytes(j.ADD, j.pack_add(destination, message_id, 0, data))
            entry = _Entry(len(raw))
            self._ledger.add(destination, message_id, entry)
            return self._submit(_Record(j.ADD, None, key=(destination, message_id),
                                        raw=raw, entries=(entry,)), entry.size)
        entry = self._new_entry(destination, message_id, data)
        self._ledger.add(destination, message_id, entry, txn)
        if txn is not None:
            return defer.succeed(None)
        # A large message: its own file is written on the writer thread.
        rtype, parts = self._add_parts(destination, message_id, entry)
        entry.data = None
        return self._submit(_Record(rtype, parts, key=(destination, message_id),
                                    entries=(entry,)), entry.size)

    @guarded
    def write_batch(self, ops):
        """Store and remove messages with one record and one write (the adds and
        removals of a reactor turn, L{mqgate.core.persistence}).

        @param ops: in call order, C{(destination, message_id, data)} to add, or
            C{(destination, message_id, None)} to remove.
        @return: a Deferred firing, once the record is durable as configured (S3.4),
            with C{{index: StoreError}} of the operations refused one by one (a
            duplicate id, an unknown message; empty normally). When the record cannot
            be written none of its adds is stored: they are all refused, with the
            L{StoreFailed} a single add gets; its removals are kept and written once
            the store recovers (S3.6). While the store fails, adds are refused at once
            and the Deferred fires at once: nobody waits for removals kept for later.
        """
        refused = {}
        ledger = self._ledger
        failing = self.health.failing
        limit = self.max_record_size
        ops_out = j.OpsBuilder()
        # (destination, message_id) -> (index, entry, position, parts) of its add
        added = {}
        cancels, releases, removals, large = [], [], [], False
        for i, (destination, message_id, data) in enumerate(ops):
            try:
                if data is None:
                    entry = ledger.remove(destination, message_id)
                elif failing:
                    refused[i] = self.health.refuse()
                    continue
                else:
                    ledger.check_message(destination, message_id, data)
                    entry = _Entry(0)
                    ledger.add(destination, message_id, entry)
            except (StoreError, ValueError, TypeError) as e:
                refused[i] = e if isinstance(e, StoreError) else StoreError(str(e))
                continue
            if data is None:
                mine = added.pop((destination, message_id), None)
                if mine is not None:
                    # Added and removed by this call: write neither (in a TXN record
                    # removes apply before adds).
                    ops_out.cancel(*mine[2:])
                    continue
                self._count_dead(entry.size)
                if entry.rel is not None:
                    releases.append(entry.rel)
                ops_out.remove(destination, message_id)
                removals.append((destination, message_id))
                cancels.append(entry)
            elif len(data) <= limit:
                at, entry.size = ops_out.add(destination, message_id, data)
                added[(destination, message_id)] = (i, entry, at, 3)
            else:
                # A large message: its own file is written on the writer thread.
                entry.rel = (f"{FilePool.directory_for(destination)}/"
                             f"{message_id:x}-{os.urandom(6).hex()}.msg")
                at, entry.size = ops_out.add_parts(j.ADD_FILE, [_LargeAdd(
                    destination, message_id, 0, entry.rel, data)])
                added[(destination, message_id)] = (i, entry, at, 2)
                large = True
        if not ops_out.count:
            return defer.succeed(refused)
        parts = ops_out.payload(_BATCH_ID)
        entries = tuple(add[1] for add in added.values())
        if large:
            record = _Batch(parts, None, tuple(releases), entries, list(added),
                            removals, cancels)
            size = _size(parts)
        else:
            # The common case: the whole record encoded here, once.
            raw = j.record_bytes(j.TXN, parts)
            record = _Batch(None, raw, tuple(releases), entries, list(added),
                            removals, cancels)
            size = len(raw) - j.HEADER_SIZE
        if failing:
            # Only removals: kept until the store recovers (S3.6); the refused adds'
            # producers hear it now, not then.
            self._submit(record, size).addErrback(lambda _: None)
            return defer.succeed(refused)
        written = [add[0] for add in added.values()]

        def not_written(failure):
            refused.update(dict.fromkeys(written, failure.value))
            return refused
        return self._submit(record, size).addCallbacks(lambda _: refused, not_written)

    @guarded
    def read_message(self, destination, message_id):
        """The stored bytes of a live message, read on the writer thread in order
        with the writes (a bounded read of its record, S2.6)."""
        entry = self._ledger.get(destination, message_id)
        return self._queue.submit(_Read(destination, message_id, entry.loc))

    @guarded
    def remove_message(self, destination, message_id, *, txn=None):
        """Remove a message (consumer settlement). While the store cannot write, the
        removal is kept and written once it can (S3.6); the Deferred fires then."""
        entry = self._ledger.remove(destination, message_id, txn)
        if txn is not None:
            return defer.succeed(None)
        self._count_dead(entry.size)
        raw = j.record_bytes(j.REMOVE, j.pack_remove(destination, message_id))
        return self._submit(_Record(j.REMOVE, None, _rels([entry]), raw=raw,
                                    cancels=(entry,)), len(raw) - j.HEADER_SIZE)

    @guarded
    @refused_while_failing
    def update_delivery_count(self, destination, message_id, count):
        """Record a message's delivery count."""
        self._ledger.check_count(count)
        entry = self._ledger.get(destination, message_id)
        parts = j.pack_count(destination, message_id, count)
        return self._submit(_Record(j.COUNT, parts, counted=entry), _size(parts))

    # -- destinations and durables ------------------------------------------------------------

    @guarded
    def add_destination(self, kind, name, attributes):
        """Store a destination (destinations.json)."""
        json.dumps(attributes)    # TypeError (-> StoreError) before anything changes
        if not self._ledger.add_destination(kind, name, attributes):
            return defer.succeed(None)
        return self._queue.submit(_CatalogChange("destinations", {
            "kind": kind, "name": name, "attributes": dict(attributes or {})}))

    @guarded
    def remove_destination(self, kind, name):
        """Forget a destination and its messages."""
        d = self._drop(destination_key(kind, name))
        if self._ledger.destinations.pop((kind, name), None) is not None:
            # Written after the DROP, so its Deferred reports both.
            d.addErrback(lambda _: None)
            d = self._queue.submit(_CatalogChange(
                "destinations", {"kind": kind, "name": name}, delete=True))
        return d

    @guarded
    def add_durable(self, container_id, name, topic, selector, owner=None):
        """Store a durable subscription (durables.json), with its owner's name."""
        if not self._ledger.add_durable(container_id, name, topic, selector, owner):
            return defer.succeed(None)
        return self._queue.submit(_CatalogChange("durables", {
            "container_id": container_id, "name": name, "topic": topic,
            "selector": selector, "owner": owner}))

    @guarded
    def remove_durable(self, container_id, name):
        """Forget a durable subscription and its backlog."""
        d = self._drop(durable_key(container_id, name))
        if self._ledger.durables.pop((container_id, name), None) is not None:
            d.addErrback(lambda _: None)
            d = self._queue.submit(_CatalogChange(
                "durables", {"container_id": container_id, "name": name}, delete=True))
        return d

    def _drop(self, key):
        entries = self._ledger.drop(key)
        if not entries:
            return defer.succeed(None)
        self._count_dead(sum(e.size for e in entries))
        parts = j.pack_drop(key)
        return self._submit(_Record(j.DROP, parts, _rels(entries), cancels=tuple(entries)),
                            _size(parts))

    # -- transactions -----------------------------------------------------------------------

    @guarded
    def begin(self, txn_id):
        """Open a transaction (memory only: nothing of it is on disk until prepare)."""
        self._ledger.begin(txn_id)
        return defer.succeed(None)

    @guarded
    @refused_while_failing
    def prepare(self, txn_id):
        """Write one PREPARE record holding the transaction's operations."""
        txn = self._ledger.prepare(txn_id)
        parts = j.pack_ops(txn_id, self._txn_ops(txn))
        return self._submit(_Record(j.PREPARE, parts, entries=_entries(txn)),
                            _size(parts))

    @guarded
    @refused_while_failing
    def commit(self, txn_id):
        """Write COMMIT (prepared) or one TXN record (open); apply it to the ledger."""
        was_prepared = self._ledger.check_resolvable(txn_id).state == PREPARED
        txn, removed = self._ledger.commit(txn_id)
        self._count_dead(sum(e.size for e in removed))
        if was_prepared:
            record = _Record(j.COMMIT, j.pack_end(txn_id), _rels(removed),
                             cancels=tuple(removed))
        elif txn.adds or txn.removes:
            ops = self._txn_ops(txn)
            record = _Record(j.TXN, j.pack_ops(txn_id, ops), _rels(removed),
                             entries=_entries(txn), cancels=tuple(removed))
        else:
            return defer.succeed(None)
        return self._submit(record, _size(record.parts))

    @guarded
    @refused_while_failing
    def rollback(self, txn_id):
        """Discard a transaction; a prepared one gets a ROLLBACK record."""
        txn = self._ledger.rollback(txn_id)
        if txn.state != PREPARED:
            return defer.succeed(None)
        entries = [entry for _, _, entry in txn.adds]
        self._count_dead(sum(e.size for e in entries))
        parts = j.pack_end(txn_id)
        return self._submit(_Record(j.ROLLBACK, parts, _rels(entries),
                                    cancels=tuple(entries)), _size(parts))

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
    @refused_while_failing
    def compact(self):
        """Seal the active segment and rewrite every segment holding dead records."""
        return self._compact(1.0, roll=True)

    def _compact(self, threshold, roll, min_gain=0):
        self._compacting = True
        self._dead_since_compaction = 0
        total_before, dead_before = self._total_bytes, self._dead_bytes
        d = self._queue.submit(_Compact(threshold, roll, min_gain))

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
            # Replaying the journal to rewrite segments pays only for a segment's
            # worth of dead bytes; dead segments are deleted unread in any case.
            self._compact(self.compact_threshold, roll=False,
                          min_gain=self.segment_size).addErrback(lambda _: None)

    def close(self):
        """Write what is pending, fsync, close the files (clean the pool if asked).

        A store that cannot write closes its files without writing: what it kept
        (removals) is lost, so those messages are delivered again after a restart
        (at-least-once), and the log says how many.
        """
        if self._state == "closed":
            return defer.succeed(None)
        was_open, self._state = self._state == "open", "closed"
        self.health.cancel()
        if not was_open:
            return defer.succeed(None)
        if not self.health.failing:
            return self._queue.submit(_Close(self.cleanup))
        self.health.abandon_kept(self._queue)
        return self._run(self._disk.close_quietly)

    # -- faults (S3.6) ---------------------------------------------------------------------

    def _write_failed(self, cause, rest):
        """A batch failed (WriteQueue's C{on_failure}): refuse new data, keep the rest.

        A plain add that was not written is taken back from the ledger and refused: its
        producer hears so, and the broker never delivers it. A delivery count is
        refused (the broker writes the next one). A compaction pass fails alone.
        Everything else (removals, drops, destinations, durable subscriptions,
        transaction records whose effect the ledger already shows) is kept, in order,
        and written first once the store recovers.
        """
        error = self.health.write_failed(cause)
        kept = []
        for op, d in rest:
            if type(op) is _Batch:
                for destination, message_id in op.added:
                    self._take_back_add(destination, message_id, 0)
                d.errback(error)
                if op.removals:
                    kept.append(self._kept_removals(op))
            elif isinstance(op, _Record) and op.key is not None:
                self._take_back(op)
                d.errback(error)
            elif isinstance(op, _Record) and op.rtype == j.COUNT:
                d.errback(error)
            elif isinstance(op, (_Compact, _Close)):
                d.errback(error)
            else:
                kept.append((op, d))
        return kept

    def _take_back(self, record):
        self._take_back_add(*record.key, j.HEADER_SIZE)

    def _take_back_add(self, destination, message_id, header):
        if self._ledger.is_live(destination, message_id):
            entry = self._ledger.remove(destination, message_id)
            self._total_bytes -= entry.size + header

    @staticmethod
    def _kept_removals(batch):
        # The removals of a batch that was not written, as a record of their own; the
        # batch's Deferred has answered already, so nobody waits on this one.
        ops_out = j.OpsBuilder()
        for destination, message_id in batch.removals:
            ops_out.remove(destination, message_id)
        parts = ops_out.payload(_BATCH_ID)
        d = defer.Deferred()
        d.addErrback(lambda _: None)
        return _Batch(None, j.record_bytes(j.TXN, parts), batch.releases, (), [],
                      batch.removals, batch.cancels), d

    def _probe(self):
        # StoreHealth's probe: repair and test the disk on the writer thread.
        if self._queue.busy:
            return defer.fail(StoreFailed(self.health.error))
        return self._run(self._disk.probe)

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


def _add_in(rtype, payload, destination, message_id):
    # The add of (destination, message_id) in one record (an ADD, or an operation
    # of a PREPARE or TXN), its bytes loaded, or None.
    if rtype in (j.ADD, j.ADD_FILE):
        add = j.decode(rtype, payload, load_data=False)
        if add.destination == destination and add.message_id == message_id:
            return j.decode(rtype, payload)
    elif rtype in (j.PREPARE, j.TXN):
        for sub_type, raw, op in j.decode(rtype, payload, load_data=False)[1]:
            if (sub_type != j.REMOVE and op.destination == destination
                    and op.message_id == message_id):
                return j.decode(sub_type, raw)
    return None


def _entries(txn):
    return tuple(entry for _, _, entry in txn.adds)


def _rels(entries):
    return tuple(e.rel for e in entries if e.rel is not None)


