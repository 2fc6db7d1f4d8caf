"""
The message journal of the file store (S3.3): checksummed records in segment files.

Theory of operation.

Record. A 16-byte header then the payload::

    magic "MQJR" | type u8 | flags u8 (0) | reserved u16 (0) | length u32 | crc u32

C{crc} is C{zlib.crc32} of the first 12 header bytes followed by the payload, so a
damaged type or length is caught as well as a damaged payload. Integers are big-endian.

Segments. Records are appended to C{NNNNNNNNNN.seg} files; a record that does not fit in
what is left of C{segment_size} starts the next segment (a record larger than a whole
segment gets a segment of its own). A segment is fsynced when it is sealed, whatever the
sync setting, so after any crash only the I{last} segment can end in a torn record.

Recovery (L{Journal.recover}) reads the segments in order and applies each record to a
L{Replay}. The first bad record of the last segment (short header, wrong magic, a length
running past the end of the file, a CRC mismatch) starts a torn tail: the file is cut
there and nothing of it is replayed (S3.3). A bad record anywhere in an older segment
cannot come from a crash, so recovery stops with L{CorruptStore} naming the file and
offset rather than guessing what was lost.

Record types. ADD holds a message's bytes; ADD_FILE points at an own file (messages
over C{max_record_size}); REMOVE and COUNT name a message; DROP removes every message of
a destination key. Transactions: PREPARE holds a transaction's operations (sub-records
with the same payloads), COMMIT and ROLLBACK resolve it by id, and TXN is a one-phase
commit holding its operations. A transaction is thus always one record: a torn tail
cuts all of it or none of it.

Compaction (L{Journal.compact}) first deletes, unread, the sealed segments that the
store's L{mqgate.store.reclaim.SegmentUse} counts dead (the common case: messages that
came and went). Only if the segments left still hold enough dead bytes does it replay
the whole journal (no message bytes kept), then rewrite the sealed segments whose live
share is below a threshold, in place and in order, keeping: live adds, the latest
COUNT of a live message, removes and drops whose add is still physically in the
journal after the pass (else the add would come back), unresolved PREPAREs whole,
resolved PREPAREs and TXNs reduced to their live operations, and COMMIT/ROLLBACK while
their PREPARE is still present. Each rewrite goes to a temporary file that replaces
the segment atomically, so a crash during compaction leaves either the old or the new
segment.

Everything here runs on the store's writer thread; nothing touches the reactor.
"""

import os
import struct
import time
import zlib
from pathlib import Path

from mqgate.store.interfaces import CorruptStore

__all__ = [
    "ADD", "ADD_FILE", "COMMIT", "COUNT", "DROP", "HEADER_SIZE", "Journal", "PREPARE",
    "REMOVE", "ROLLBACK", "TXN", "JournalWriteError", "OpsBuilder", "Replay",
    "encode_record",
    "record_bytes",
    "pack_add", "pack_add_file", "pack_count", "pack_drop", "pack_end", "pack_ops",
    "pack_remove", "scan", "write_all",
]

MAGIC = b"MQJR"
_HEADER = struct.Struct(">4sBBHII")
HEADER_SIZE = _HEADER.size
_PREFIX = struct.Struct(">4sBBHI")

ADD, ADD_FILE, REMOVE, COUNT, DROP, PREPARE, COMMIT, ROLLBACK, TXN = range(1, 10)
_TYPES = frozenset(range(1, 10))

#: S3.3 keeps segments bounded so that compaction rewrites little at a time.
DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
_MAX_PAYLOAD = 0xFFFFFFFF
# os.writev accepts at most IOV_MAX buffers per call (1024 on Linux).
_IOV_MAX = 1024
#: A chunk of records up to this size is joined and written with one call; a larger
#: one (large messages) goes to writev as it is, so that no batch is copied whole.
_JOIN_LIMIT = 4 * 1024 * 1024

_SEGMENT_SUFFIX = ".seg"
_TMP_SUFFIX = ".compact"

_KEY = struct.Struct(">QH")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_FILE = struct.Struct(">QIH")
_SUB = struct.Struct(">BI")


# -- payloads -------------------------------------------------------------------------

def _text(value):
    raw = value.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"name longer than 65535 bytes: {value[:40]!r}...")
    return raw


def _key(destination, message_id):
    dest = _text(destination)
    return _KEY.pack(message_id, len(dest)) + dest


def pack_add(destination, message_id, count, data):
    """Payload parts of ADD: count, id, destination, then the message bytes."""
    return [_U32.pack(count) + _key(destination, message_id), data]


def pack_add_file(destination, message_id, count, path, length, crc):
    """Payload of ADD_FILE: the message lives in own file C{path} (relative)."""
    raw = _text(path)
    return [_U32.pack(count) + _key(destination, message_id)
            + _FILE.pack(length, crc, len(raw)) + raw]


def add_file_size(destination, path):
    """The payload length of L{pack_add_file}, known before the file is written."""
    return 4 + _KEY.size + len(_text(destination)) + _FILE.size + len(_text(path))


def pack_remove(destination, message_id):
    """Payload of REMOVE."""
    return [_key(destination, message_id)]


def pack_count(destination, message_id, count):
    """Payload of COUNT (the message's delivery count)."""
    return [_U32.pack(count) + _key(destination, message_id)]


def pack_drop(destination):
    """Payload of DROP: every message of C{destination} goes."""
    raw = _text(destination)
    return [_U16.pack(len(raw)) + raw]


def pack_end(txn_id):
    """Payload of COMMIT and ROLLBACK."""
    raw = _text(txn_id)
    return [_U16.pack(len(raw)) + raw]


def pack_ops(txn_id, ops):
    """Payload of PREPARE and TXN: C{ops} is C{[(type, parts, length)]}."""
    parts = pack_end(txn_id) + [_U32.pack(len(ops))]
    for rtype, sub_parts, length in ops:
        parts.append(_SUB.pack(rtype, length))
        parts.extend(sub_parts)
    return parts


class OpsBuilder:
    """The operations of a TXN record, encoded one at a time, each destination name
    once: the file store's C{write_batch} (a reactor turn's adds and removals as one
    record) on the reactor thread, where every microsecond per message counts."""

    __slots__ = ("parts", "count", "_names")

    def __init__(self):
        self.parts = []
        self.count = 0
        self._names = {}

    def _key(self, destination, message_id):
        name = self._names.get(destination)
        if name is None:
            name = self._names[destination] = _text(destination)
        return _KEY.pack(message_id, len(name)) + name

    def add(self, destination, message_id, data):
        """Append an ADD (delivery count 0); return its position and its size (with
        its operation header)."""
        head = _NO_COUNT + self._key(destination, message_id)
        length = len(head) + len(data)
        at = len(self.parts)
        self.parts += (_SUB.pack(ADD, length), head, data)
        self.count += 1
        return at, length + _SUB.size

    def add_parts(self, rtype, parts):
        """Append an operation made elsewhere (an ADD_FILE); return its position and
        its size."""
        length = sum(len(p) for p in parts)
        at = len(self.parts)
        self.parts.append(_SUB.pack(rtype, length))
        self.parts += parts
        self.count += 1
        return at, length + _SUB.size

    def remove(self, destination, message_id):
        """Append a REMOVE; return its size."""
        key = self._key(destination, message_id)
        self.parts += (_SUB.pack(REMOVE, len(key)), key)
        self.count += 1
        return len(key) + _SUB.size

    def cancel(self, at, n):
        """Take back the operation of C{n} parts appended at C{at}."""
        self.parts[at:at + n] = [b""] * n
        self.count -= 1

    def payload(self, txn_id):
        """The TXN (or PREPARE) payload parts."""
        return pack_end(txn_id) + [_U32.pack(self.count)] + self.parts


_NO_COUNT = _U32.pack(0)


def encode_record(rtype, parts):
    """The buffers of one record: header then C{parts} (bytes-like, unchanged)."""
    length = sum(len(p) for p in parts)
    if length > _MAX_PAYLOAD:
        raise ValueError(f"record payload of {length} bytes exceeds 4 GiB")
    prefix = _PREFIX.pack(MAGIC, rtype, 0, 0, length)
    crc = zlib.crc32(prefix)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return [prefix + _U32.pack(crc)] + list(parts)


def record_bytes(rtype, parts):
    """One record as one C{bytes}: what L{encode_record} gives, joined.

    The file store encodes a message's record on the reactor thread when the message
    arrives, once, so that the writer thread only joins a batch's records and writes
    them with one call (the writer's Python work competes with the reactor for the GIL).
    """
    payload = b"".join(parts)
    if len(payload) > _MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
    prefix = _PREFIX.pack(MAGIC, rtype, 0, 0, len(payload))
    return b"".join((prefix, _U32.pack(zlib.crc32(payload, zlib.crc32(prefix))),
                     payload))


class Add:
    """A decoded ADD or ADD_FILE (C{file} is C{(path, length, crc)} for ADD_FILE)."""

    __slots__ = ("destination", "message_id", "count", "data", "file")

    def __init__(self, destination, message_id, count, data=None, file=None):
        self.destination = destination
        self.message_id = message_id
        self.count = count
        self.data = data
        self.file = file


class _Reader:
    """Reads fields from a payload; a short payload raises C{ValueError}."""

    def __init__(self, view):
        self.view = view
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.view):
            raise ValueError(f"payload ends {self.pos + n - len(self.view)} bytes early")
        part = self.view[self.pos:self.pos + n]
        self.pos += n
        return part

    def unpack(self, fmt):
        return fmt.unpack(self.take(fmt.size))

    def text(self):
        (n,) = self.unpack(_U16)
        return str(self.take(n), "utf-8")

    def key(self):
        mid, n = self.unpack(_KEY)
        return str(self.take(n), "utf-8"), mid

    def rest(self):
        return self.take(len(self.view) - self.pos)


def decode(rtype, payload, load_data=True):
    """Decode one payload. Returns an L{Add}, C{(dest, id)} for REMOVE, C{(dest, id,
    count)} for COUNT, C{dest} for DROP, C{txn_id} for COMMIT/ROLLBACK, and
    C{(txn_id, [(type, raw_sub_payload, decoded)])} for PREPARE/TXN.

    @raise ValueError: the payload does not match its type.
    """
    r = _Reader(payload)
    if rtype in (ADD, ADD_FILE):
        (count,) = r.unpack(_U32)
        dest, mid = r.key()
        if rtype == ADD:
            data = r.rest()
            return Add(dest, mid, count, data=bytes(data) if load_data else None)
        length, crc, n = r.unpack(_FILE)
        return Add(dest, mid, count, file=(str(r.take(n), "utf-8"), length, crc))
    if rtype == REMOVE:
        return r.key()
    if rtype == COUNT:
        (count,) = r.unpack(_U32)
        return r.key() + (count,)
    if rtype in (DROP, COMMIT, ROLLBACK):
        return r.text()
    if rtype in (PREPARE, TXN):
        txn_id = r.text()
        (n,) = r.unpack(_U32)
        ops = []
        for _ in range(n):
            sub_type, length = r.unpack(_SUB)
            if sub_type not in (ADD, ADD_FILE, REMOVE):
                raise ValueError(f"operation of type {sub_type} inside a transaction")
            raw = r.take(length)
            ops.append((sub_type, raw, decode(sub_type, raw, load_data)))
        return txn_id, ops
    raise ValueError(f"unknown record type {rtype}")


# -- scanning -------------------------------------------------------------------------

def scan(buf):
    """Yield C{(offset, type, payload, size)} for each good record of C{buf}.

    Stops at the first bad record by yielding C{(offset, None, reason, 0)}.
    """
    view = memoryview(buf)
    offset, end = 0, len(buf)
    while offset < end:
        if end - offset < HEADER_SIZE:
            yield offset, None, "header runs past the end of the file", 0
            return
        magic, rtype, _, _, length, crc = _HEADER.unpack_from(view, offset)
        if magic != MAGIC or rtype not in _TYPES:
            yield offset, None, "no record header (bad magic or type)", 0
            return
        stop = offset + HEADER_SIZE + length
        if stop > end:
            yield offset, None, f"record of {length} bytes runs past the end of the file", 0
            return
        payload = view[offset + HEADER_SIZE:stop]
        if zlib.crc32(payload, zlib.crc32(view[offset:offset + 12])) != crc:
            yield offset, None, "checksum mismatch", 0
            return
        yield offset, rtype, payload, stop - offset
        offset = stop


def write_all(fd, buffers):
    """Write every buffer to C{fd} with C{os.writev}, resuming after short writes."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    i = 0
    while i < len(views):
        written = os.writev(fd, views[i:i + _IOV_MAX])
        while written:
            if written >= len(views[i]):
                written -= len(views[i])
                i += 1
            else:
                views[i] = views[i][written:]
                written = 0


def fsync_dir(path):
    """fsync a directory, so that names created or renamed in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_fdatasync = getattr(os, "fdatasync", os.fsync)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class JournalWriteError(Exception):
    """An append failed part way (S3.6: a full disk is a normal operating condition).

    @ivar done: how many of the records passed were written and stay in the journal.
    @ivar cause: the C{OSError}.
    @ivar locations: where those C{done} records were written, as L{Journal.append}
        returns them.
    """

    def __init__(self, done, cause, locations=()):
        self.done = done
        self.cause = cause
        self.locations = locations
        super().__init__(f"{done} records written, then: {cause}")


# -- replay ---------------------------------------------------------------------------

def _sized(ops):
    # Keep operation sizes, not views: a view would pin the whole segment buffer.
    return [(sub_type, len(raw) + _SUB.size, op) for sub_type, raw, op in ops]


class _Live:
    __slots__ = ("loc", "size", "count", "count_loc", "count_size", "data", "file")


class Replay:
    """The state the journal's records add up to, and what compaction may drop.

    A location is C{(segment, offset, index)}: C{index} is -1 for a record and the
    operation's position inside a PREPARE or TXN record.

    @ivar live: destination key -> {message_id: live entry}, in order.
    @ivar prepared: txn id -> C{(location, size, ops)} of unresolved PREPAREs.
    @ivar cancelled: the location of each removal or drop -> the locations of the adds
        it cancelled.
    @ivar two_phase: the segments holding PREPARE, COMMIT or ROLLBACK records.
    """

    def __init__(self, load_data):
        self.load_data = load_data
        self.live = {}
        self.prepared = {}
        self.max_message_id = 0
        self.segment_bytes = {}
        self.cancelled = {}    # remove/drop location -> the add locations it cancelled
        self.two_phase = set()  # segments holding PREPARE, COMMIT or ROLLBACK records
        self._ends = {}        # COMMIT/ROLLBACK location -> the PREPARE location
        self._filtered = {}    # PREPARE location -> kept operations (during compaction)

    # -- applying records ------------------------------------------------------------

    def apply(self, segno, offset, size, rtype, decoded):
        """Apply one decoded record found at C{(segno, offset)}."""
        self.segment_bytes[segno] = self.segment_bytes.get(segno, 0) + size
        loc = (segno, offset, -1)
        if rtype in (ADD, ADD_FILE):
            self._add(loc, size, decoded)
        elif rtype == REMOVE:
            self._remove(loc, *decoded)
        elif rtype == COUNT:
            self._count(loc, size, *decoded)
        elif rtype == DROP:
            held = self.live.pop(decoded, {})
            self.cancelled[loc] = tuple(m.loc for m in held.values())
        elif rtype == PREPARE:
            self.two_phase.add(segno)
            self.prepared[decoded[0]] = (loc, size, _sized(decoded[1]))
        elif rtype in (COMMIT, ROLLBACK):
            self.two_phase.add(segno)
            found = self.prepared.pop(decoded, None)
            self._ends[loc] = found and found[0]
            if found and rtype == COMMIT:
                self._apply_ops(found[0], found[2])
        elif rtype == TXN:
            self._apply_ops(loc, _sized(decoded[1]))

    def _apply_ops(self, loc, ops):
        # Removes first, then adds, as Ledger.commit does.
        for i, (sub_type, _, op) in enumerate(ops):
            if sub_type == REMOVE:
                self._remove((loc[0], loc[1], i), *op)
        for i, (sub_type, size, op) in enumerate(ops):
            if sub_type != REMOVE:
                self._add((loc[0], loc[1], i), size, op)

    def _add(self, loc, size, add):
        entry = _Live()
        entry.loc, entry.size = loc, size
        entry.count, entry.count_loc, entry.count_size = add.count, None, 0
        entry.data, entry.file = add.data, add.file
        self.live.setdefault(add.destination, {})[add.message_id] = entry
        self.max_message_id = max(self.max_message_id, add.message_id)

    def _remove(self, loc, destination, message_id):
        held = self.live.get(destination, {})
        entry = held.pop(message_id, None)
        if not held:
            self.live.pop(destination, None)
        self.cancelled[loc] = (entry.loc,) if entry is not None else ()

    def _count(self, loc, size, destination, message_id, count):
        entry = self.live.get(destination, {}).get(message_id)
        if entry is not None:
            entry.count, entry.count_loc, entry.count_size = count, loc, size

    # -- compaction decisions --------------------------------------------------------------

    def finish(self):
        """Index the final state for L{keep}; call once, after the last record."""
        self._live_locs = set()
        self._count_locs = set()
        for held in self.live.values():
            for entry in held.values():
                self._live_locs.add(entry.loc)
                if entry.count_loc is not None:
                    self._count_locs.add(entry.count_loc)
        self._prepared_locs = {loc for loc, _, _ in self.prepared.values()}

    def live_bytes(self):
        """Live bytes per segment (adds, latest counts, unresolved PREPAREs)."""
        share = {}
        for held in self.live.values():
            for e in held.values():
                share[e.loc[0]] = share.get(e.loc[0], 0) + e.size
                if e.count_loc is not None:
                    share[e.count_loc[0]] = share.get(e.count_loc[0], 0) + e.count_size
        for loc, size, _ in self.prepared.values():
            share[loc[0]] = share.get(loc[0], 0) + size
        return share

    def _present(self, loc, chosen):
        # Will the add at loc still be in the journal after this pass?
        return loc[0] not in chosen or loc in self._live_locs

    def _record_present(self, loc, chosen):
        if loc[0] not in chosen:
            return True
        return bool(self._filtered.get(loc, True))

    def keep(self, segno, offset, rtype, payload, chosen):
        """What compaction keeps of a record: C{True} (all), C{False} (nothing) or a
        shorter list of operations C{[(type, raw, length)]} for PREPARE/TXN."""
        loc = (segno, offset, -1)
        if rtype in (ADD, ADD_FILE):
            return loc in self._live_locs
        if rtype == COUNT:
            return loc in self._count_locs
        if rtype in (REMOVE, DROP):
            return any(self._present(p, chosen) for p in self.cancelled.get(loc, ()))
        if rtype in (COMMIT, ROLLBACK):
            target = self._ends.get(loc)
            return target is not None and self._record_present(target, chosen)
        if rtype == PREPARE and loc in self._prepared_locs:
            return True
        ops = decode(rtype, payload, load_data=False)[1]
        kept = self._kept_ops(segno, offset, ops, chosen)
        if rtype == PREPARE:
            self._filtered[loc] = kept
        return kept if len(kept) < len(ops) else True

    def _kept_ops(self, segno, offset, ops, chosen):
        kept = []
        for i, (sub_type, raw, _) in enumerate(ops):
            sub = (segno, offset, i)
            if sub_type == REMOVE:
                alive = any(self._present(p, chosen) for p in self.cancelled.get(sub, ()))
            else:
                alive = sub in self._live_locs
            if alive:
                kept.append((sub_type, [raw], len(raw)))
        return kept


# -- the journal ----------------------------------------------------------------------

class Journal:
    """Segment files under one directory: append, fsync, recover, compact.

    Used from one thread at a time (the store's writer). Counters are plain ints that
    the reactor thread may read.
    """

    def __init__(self, directory, *, segment_size=DEFAULT_SEGMENT_SIZE):
        self.directory = Path(directory)
        self.segment_size = segment_size
        self._fd = None
        self._segno = 0
        self._offset = 0
        self._unsynced = 0
        self.fsyncs = 0
        self.fsync_seconds = 0.0   # spent in those fsyncs (S5.1: the store's latency)
        self.records = 0
        self.records_synced = 0
        self.max_records_per_fsync = 0
        self.bytes_written = 0
        self.compactions = 0
        self.full_compactions = 0     # passes that replayed the whole journal
        self.segments_deleted = 0     # dead segments deleted without being read
        # The error of a failed append whose torn bytes could not be cut off.
        self._damaged = None

    def _path(self, segno):
        return self.directory / f"{segno:010d}{_SEGMENT_SUFFIX}"

    def segments(self):
        """The segment numbers on disk, ascending."""
        found = []
        for path in self.directory.glob(f"*{_SEGMENT_SUFFIX}"):
            try:
                found.append(int(path.stem))
            except ValueError:
                raise CorruptStore(path, None, "segment file name is not a number")
        return sorted(found)

    # -- recovery ---------------------------------------------------------------------

    def recover(self, load_data=True):
        """Replay every segment, cut a torn tail, open the last segment for appends.

        Returns C{(replay, warnings)}. @raise CorruptStore: a bad record before the
        last segment.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        for tmp in self.directory.glob(f"*{_TMP_SUFFIX}"):
            tmp.unlink()     # an interrupted compaction; the segment itself is intact
        replay, warnings = Replay(load_data), []
        segnos = self.segments()
        cut = None
        for segno in segnos:
            cut = self._replay_segment(segno, replay, last=segno == segnos[-1])
        if cut is not None:
            offset, reason, size = cut
            path = self._path(segnos[-1])
            warnings.append(f"{path}: torn tail cut at offset {offset} ({reason}); "
                            f"{size - offset} bytes dropped")
        self._open_segment(segnos[-1] if segnos else 1, cut and cut[0])
        replay.finish()
        return replay, warnings

    def _replay_segment(self, segno, replay, last):
        path = self._path(segno)
        buf = path.read_bytes()
        for offset, rtype, payload, size in scan(buf):
            if rtype is None:
                if last:
                    return offset, payload, len(buf)
                raise CorruptStore(path, offset, payload)
            try:
                decoded = decode(rtype, payload, replay.load_data)
            except ValueError as e:
                raise CorruptStore(path, offset, f"undecodable record: {e}") from None
            replay.apply(segno, offset, size, rtype, decoded)
        return None

    def _open_segment(self, segno, cut):
        path = self._path(segno)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        if cut is not None:
            os.ftruncate(self._fd, cut)
            os.fsync(self._fd)
        self._segno = segno
        self._offset = os.lseek(self._fd, 0, os.SEEK_END)
        fsync_dir(self.directory)

    # -- appending ----------------------------------------------------------------------

    def append(self, records, sync=False):
        """Append C{[(type, parts)]} in order (one write); return their locations.

        A record may also be given whole, as the C{bytes} of L{record_bytes}.

        Returns C{[(segment, offset, size)]}. The bytes are with the OS when this
        returns (enough for a broker crash, S3.4); with C{sync} they are on disk too.

        @raise JournalWriteError: a write or fsync failed (a full disk, an I/O error).
            Its C{done} records were written before the failure and stay (a segment
            sealed on the way, so fsynced); the others were cut off again, so the
            journal ends with a whole record and takes appends again once
            L{repair} (a no-op when the cut worked) has succeeded.
        """
        if self._damaged is not None:
            raise JournalWriteError(0, self._damaged)
        locations, pending = [], []
        done = chunk = 0
        base = self._offset       # where this chunk's bytes start in the active segment
        try:
            for record in records:
                if isinstance(record, bytes):
                    buffers, size = (record,), len(record)
                else:
                    buffers = encode_record(*record)
                    size = sum(len(b) for b in buffers)
                if self._offset and self._offset + size > self.segment_size:
                    self._write(pending, self._offset - base)
                    self._unsynced += chunk
                    self.roll()
                    done, chunk, base, pending = done + chunk, 0, 0, []
                locations.append((self._segno, self._offset, size))
                pending.extend(buffers)
                self._offset += size
                chunk += 1
            self._write(pending, self._offset - base)
            self._unsynced += chunk
            if sync:
                self.sync()
        except OSError as e:
            self._cut_back(base)
            self.records += done
            raise JournalWriteError(done, e, locations[:done]) from e
        self.records += len(records)
        return locations

    def _write(self, buffers, size):
        # One buffer, one write call: joining a batch's small records costs less than
        # handing the kernel an iovec per record (and a memoryview per record to build
        # it). A chunk of large records is not copied: writev takes it as it is.
        if size <= _JOIN_LIMIT:
            buffers = (b"".join(buffers),)
        write_all(self._fd, buffers)
        self.bytes_written += size

    def _cut_back(self, offset):
        # After a failed append: the active segment must end with a whole record again,
        # or the next append would follow a torn one, which recovery would cut together
        # with everything after it. If even this fails, appends wait for repair().
        self._offset = offset
        try:
            os.ftruncate(self._fd, offset)
            os.lseek(self._fd, offset, os.SEEK_SET)
        except OSError as e:
            self._damaged = e

    def repair(self):
        """Make the active segment end at its last whole record again and fsync it
        (after a failed append, before the next one).

        @raise OSError: still failing. @raise CorruptStore: the segment is shorter than
            what was written to it: something else changed it, the broker cannot
            repair that by itself.
        """
        path = self._path(self._segno)
        if self._fd is None:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size < self._offset:
            raise CorruptStore(path, size, f"the active journal segment is {size} bytes "
                               f"long, but {self._offset} bytes were written to it")
        if size > self._offset:
            os.ftruncate(self._fd, self._offset)
        os.lseek(self._fd, self._offset, os.SEEK_SET)
        os.fsync(self._fd)
        fsync_dir(self.directory)
        self._damaged = None

    def sync(self):
        """fsync the active segment: one fsync for everything appended since the last."""
        started = time.perf_counter()
        _fdatasync(self._fd)
        self.fsync_seconds += time.perf_counter() - started
        self.fsyncs += 1
        self.records_synced += self._unsynced
        self.max_records_per_fsync = max(self.max_records_per_fsync, self._unsynced)
        self._unsynced = 0

    def roll(self):
        """Seal the active segment (fsynced) and start the next one.

        The next segment is opened before the sealed one is closed, so a failure (a
        full disk, an I/O error) leaves the journal on its active segment, usable.
        """
        self.sync()
        path = self._path(self._segno + 1)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fsync_dir(self.directory)
        except OSError:
            os.close(fd)
            _unlink_quietly(path)
            raise
        os.close(self._fd)
        self._fd = fd
        self._segno += 1
        self._offset = 0

    def close(self):
        """Close the active segment (after an fsync, so a clean stop loses nothing)."""
        if self._fd is not None:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = None

    # -- compaction ---------------------------------------------------------------------

    def compact(self, threshold, roll=False, use=None, min_gain=0):
        """Rewrite sealed segments whose live share is below C{threshold} (0..1].

        C{roll=True} first seals the active segment so that all of it can be
        compacted (the admin C{compact} command). Given the journal's
        L{mqgate.store.reclaim.SegmentUse}, the segments it finds dead are deleted
        first, unread; the whole journal is then replayed and rewritten only if the
        sealed segments left below the threshold hold more than C{min_gain} dead
        bytes. (Under a steady flow the newest sealed segment still holds a few
        messages in flight, soon removed: it is deleted unread by a later pass, which
        costs far less than replaying the journal now.) Returns a dict of figures.
        """
        if roll and self._offset:
            self.roll()
        sizes = {s: self._path(s).stat().st_size for s in self.segments()}
        before = sum(sizes.values())
        deleted = []
        if use is not None:
            deleted = use.dead(sorted(sizes), self._segno)
            for segno in deleted:
                # Oldest first, each unlink made durable before the next: a later
                # segment may hold the removals of an earlier one's adds, and must
                # never be gone while that one could come back after a crash.
                self._path(segno).unlink()
                fsync_dir(self.directory)
                use.forget(segno)
                del sizes[segno]
                self.segments_deleted += 1
            gain = 0
            for segno, size in sizes.items():
                live = use.live_bytes.get(segno, 0)
                if segno != self._segno and live < threshold * size:
                    gain += size - live
            if gain <= min_gain:
                self.compactions += 1
                return {"segments_compacted": 0, "segments_deleted": len(deleted),
                        "bytes_before": before, "bytes_after": sum(sizes.values()),
                        "live_bytes": sum(use.live_bytes.values())}
        self.full_compactions += 1
        replay = Replay(load_data=False)
        for segno in self.segments():
            self._replay_segment(segno, replay, last=False)
        replay.finish()
        live = replay.live_bytes()
        chosen = {s for s, total in replay.segment_bytes.items()
                  if s != self._segno and live.get(s, 0) < threshold * total}
        for segno in sorted(chosen):
            self._rewrite(segno, replay, chosen)
        for segno in self.segments():
            if segno != self._segno and segno not in replay.segment_bytes:
                self._path(segno).unlink()    # sealed and empty: nothing to keep
        remaining = self.segments()
        gone = set(sizes).difference(remaining)
        if use is not None:
            use.rewritten(chosen)
            for segno in gone:
                use.forget(segno)
        self.compactions += 1
        after = sum(self._path(s).stat().st_size for s in remaining)
        return {"segments_compacted": len(chosen),
                "segments_deleted": len(deleted) + len(gone),
                "bytes_before": before, "bytes_after": after,
                "live_bytes": sum(live.values())}

    def _rewrite(self, segno, replay, chosen):
        path = self._path(segno)
        buf = path.read_bytes()
        out = []
        for offset, rtype, payload, size in scan(buf):
            if rtype is None:
                raise CorruptStore(path, offset, payload)
            kept = replay.keep(segno, offset, rtype, payload, chosen)
            if kept is True:
                out.append(memoryview(buf)[offset:offset + size])
            elif kept:
                txn_id = decode(rtype, payload, load_data=False)[0]
                out.extend(encode_record(rtype, pack_ops(txn_id, kept)))
        if not out:
            path.unlink()
        else:
            tmp = path.with_suffix(_TMP_SUFFIX)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    write_all(fd, out)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except OSError:
                # A full disk or an I/O error: the old segment is intact; the pass is
                # tried again later (S3.6).
                _unlink_quietly(tmp)
                raise
        fsync_dir(self.directory)
