"""
A fault-injecting file layer for the file store's tests (S3.6).

L{FaultyDisk} stands in for the C{os} module of the journal, the file store and the
catalogs: every call goes to the real C{os}, except the writing calls named in
L{FaultyDisk.fail}, which raise C{OSError(errno)} until L{FaultyDisk.heal}. A failing
C{writev} first writes part of what it was given, as a disk that fills up in the
middle of a write does, so the store has a torn record to cut off.
"""

import errno
import os

import pytest

from mqgate.store import catalog, filestore, journal

__all__ = ["FaultyDisk", "ENOSPC", "EIO", "WRITES", "SYNCS"]

ENOSPC = errno.ENOSPC
EIO = errno.EIO

#: The calls that put bytes on the disk.
WRITES = ("writev", "write", "pwrite")
#: The calls that make them durable.
SYNCS = ("fsync", "fdatasync")
#: The calls that change names or sizes.
NAMES = ("open", "replace", "ftruncate")


class FaultyDisk:
    """The C{os} module, with chosen writing calls failing on demand.

    @ivar calls: how many times each faultable call was made (failing or not).
    """

    _FAULTABLE = frozenset(WRITES + SYNCS + NAMES)

    def __init__(self):
        self._failing = {}
        self._opening_only_writes = True
        self.calls = {}

    def fail(self, code, *names, opening_only_writes=True):
        """Make the calls C{names} raise C{OSError(code)} from now on.

        @param opening_only_writes: when C{"open"} is among them, only opening for
            writing fails (reading the store back still works, as on a full disk).
        """
        for name in names:
            self._failing[name] = code
        self._opening_only_writes = opening_only_writes

    def heal(self):
        """Every call works again (disk space was freed)."""
        self._failing.clear()

    def __getattr__(self, name):
        real = getattr(os, name)
        if name not in self._FAULTABLE:
            return real

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            code = self._failing.get(name)
            if code is not None and not self._spared(name, args):
                if name == "writev":
                    self._write_part(args)
                raise OSError(code, os.strerror(code))
            return real(*args, **kwargs)
        return call

    def _spared(self, name, args):
        if name != "open" or not self._opening_only_writes:
            return False
        flags = args[1] if len(args) > 1 else 0
        return not flags & (os.O_WRONLY | os.O_RDWR)

    @staticmethod
    def _write_part(args):
        # Half of the first buffer reaches the file before the disk is full.
        fd, buffers = args[0], args[1]
        if buffers and len(buffers[0]) > 1:
            os.write(fd, bytes(buffers[0][:len(buffers[0]) // 2]))


@pytest.fixture
def faulty_disk(monkeypatch):
    """A L{FaultyDisk} under the journal, the file store and the catalogs."""
    disk = FaultyDisk()
    for module in (journal, filestore, catalog):
        monkeypatch.setattr(module, "os", disk)
    monkeypatch.setattr(journal, "_fdatasync", lambda fd: disk.fdatasync(fd))
    return disk
