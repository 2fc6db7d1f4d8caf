"""
The file store's destinations and durable subscriptions (S3.3): a snapshot plus a log.

Layout, for C{name} = C{destinations} (and likewise C{durables})::

    destinations.json   the snapshot: {"destinations": [item, ...]}, written whole
                        (temporary file, fsync, rename: a crash leaves the old or the new)
    destinations.log    the changes since the snapshot, one line each:
                        "<crc32 of the JSON, 8 hex digits> <JSON>\\n", the JSON being
                        {"set": item} or {"delete": key}

Why a log. Rewriting the whole file on every change made N auto-created destinations
cost O(N^2) bytes written; a change now appends one line, and the snapshot is rewritten
(and the log emptied) only once the log holds more lines than the snapshot has items
(and at least L{MIN_LOG_LINES}): O(1) amortized per change.

Crash safety. Replaying a line sets or deletes one item, so replaying the log again over
a snapshot that already holds it changes nothing: a crash between the new snapshot's
rename and the emptying of the log is harmless. A torn last line (a crash during an
append: no newline, or a checksum that does not match) is dropped, never replayed; a
bad line followed by good ones cannot come from a crash and is reported as
L{CorruptStore}.

Faults (S3.6). An append that fails (a full disk, an I/O error) is cut off again, so the
log keeps ending with a whole line; if even that fails, L{Catalog.repair} does it
before the next append. A snapshot that cannot be written leaves the old snapshot and
the log as they were, and is tried again after as many more changes.

Runs on the store's writer thread only.
"""

import json
import os
import zlib

from mqgate.store import journal as j
from mqgate.store.interfaces import CorruptStore

__all__ = ["Catalog", "MIN_LOG_LINES"]

#: A log shorter than this is never compacted: small catalogs do not rewrite often.
MIN_LOG_LINES = 64


class Catalog:
    """One snapshot-plus-log file pair; C{items} is what they add up to.

    @param directory: the store directory (a L{pathlib.Path}).
    @param name: C{"destinations"} or C{"durables"} (file names and the snapshot's
        top-level field).
    @param key: C{key(item) -> tuple}: what identifies an item.
    @param sync: fsync every append (C{mqgate.persist.file.sync.enabled}).

    @ivar items: key -> item (a JSON-able dict), in creation order.
    """

    def __init__(self, directory, name, key, *, sync):
        self.directory = directory
        self.name = name
        self.path = directory / f"{name}.json"
        self.log_path = directory / f"{name}.log"
        self._key = key
        self.sync = sync
        self.items = {}
        self._fd = None
        self._size = 0            # the log's bytes up to its last whole line
        self._lines = 0
        self._compact_at = MIN_LOG_LINES
        self._damaged = None
        self.fsyncs = 0
        self.snapshots = 0
        self.bytes_written = 0

    # -- recovery ----------------------------------------------------------------------

    def load(self):
        """Read the snapshot, replay the log (cutting a torn last line), open the log
        for appends; return the items in creation order."""
        self.path.with_suffix(".tmp").unlink(missing_ok=True)
        if self.path.exists():
            try:
                for item in json.loads(self.path.read_bytes())[self.name]:
                    self.items[self._key(item)] = item
            except (ValueError, KeyError, TypeError) as e:
                raise CorruptStore(self.path, None, f"unreadable: {e}") from None
        data = self.log_path.read_bytes() if self.log_path.exists() else b""
        good = self._replay(data)
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT, 0o644)
        if good < len(data):
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)
        os.lseek(self._fd, good, os.SEEK_SET)
        self._size = good
        self._compact_at = max(MIN_LOG_LINES, len(self.items))
        return list(self.items.values())

    def _replay(self, data):
        # The offset after the last whole, good line.
        offset = 0
        while offset < len(data):
            end = data.find(b"\n", offset)
            change = _parse(data[offset:end]) if end >= 0 else None
            if change is None:
                if end >= 0 and data.find(b"\n", end + 1) >= 0:
                    raise CorruptStore(self.log_path, offset,
                                       "a damaged line before good ones")
                return offset     # a torn last line: dropped
            self._apply(change)
            self._lines += 1
            offset = end + 1
        return offset

    def _apply(self, change):
        if "set" in change:
            item = change["set"]
            self.items[self._key(item)] = item
        else:
            self.items.pop(self._key(change["delete"]), None)

    # -- changes -------------------------------------------------------------------------

    def set(self, item):
        """Store (or replace) C{item}. @raise OSError: not written (cut off again)."""
        self._append({"set": item})

    def delete(self, key_item):
        """Forget the item with the key of C{key_item}. @raise OSError: not written."""
        self._append({"delete": key_item})

    def _append(self, change):
        if self._damaged is not None:
            raise self._damaged
        line = _line(change)
        try:
            j.write_all(self._fd, [line])
            if self.sync:
                os.fsync(self._fd)
                self.fsyncs += 1
        except OSError:
            self._cut_back()
            raise
        self._size += len(line)
        self.bytes_written += len(line)
        self._lines += 1
        self._apply(change)
        if self._lines >= self._compact_at:
            self._compact()

    def _cut_back(self):
        try:
            os.ftruncate(self._fd, self._size)
            os.lseek(self._fd, self._size, os.SEEK_SET)
        except OSError as e:
            self._damaged = e

    def repair(self):
        """Cut what a failed append left after the last whole line, and fsync."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, self._size)
        os.lseek(self._fd, self._size, os.SEEK_SET)
        os.fsync(self._fd)
        self._damaged = None

    # -- compaction ----------------------------------------------------------------------

    def _compact(self):
        # The snapshot first (it holds everything the log says), then the log emptied.
        try:
            self._write_snapshot()
        except OSError:
            # The old snapshot and the log are intact; try again after as many changes.
            self._compact_at = self._lines + max(MIN_LOG_LINES, len(self.items))
            return
        self.snapshots += 1
        try:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
            self._size = self._lines = 0
        except OSError:
            # The log replays harmlessly over the new snapshot (module docstring).
            pass
        self._compact_at = max(MIN_LOG_LINES, len(self.items))

    def _write_snapshot(self):
        content = json.dumps({self.name: list(self.items.values())}, sort_keys=True,
                             separators=(",", ":")).encode("utf-8")
        tmp = self.path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                j.write_all(fd, [content])
                # Always fsynced: the log is emptied after the rename, so the snapshot
                # must be on disk first whatever the sync setting.
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            self.bytes_written += len(content)
            j.fsync_dir(self.directory)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def close(self):
        """Close the log."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _line(change):
    raw = json.dumps(change, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(raw), raw)


def _parse(line):
    # A change, or None for a line that is not whole and good.
    if len(line) < 10 or line[8:9] != b" ":
        return None
    raw = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(raw):
            return None
        change = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(change, dict) or not ({"set", "delete"} & change.keys()):
        return None
    return change
