"""
A small real file system that fills up (S3.6: a full disk is a normal operating
condition, so the tests fill one for real).

L{SmallFilesystem} mounts a size-limited tmpfs on a directory (the tests run as root
here and in CI), fills it with a filler file until the kernel answers ENOSPC, and frees
it again. Without the right to mount, the fixture skips with the reason.
"""

import errno
import os
import subprocess

import pytest

__all__ = ["SmallFilesystem", "small_filesystem"]


class SmallFilesystem:
    """A tmpfs of C{size} on C{path}, and a filler file to fill it with."""

    def __init__(self, path, size="2m"):
        self.path = path
        self.size = size
        self.filler = path / "filler"
        self.mounted = False

    def mount(self):
        """Mount it. @raise OSError: not permitted (with mount's words)."""
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise OSError(errno.EPERM, f"mount -t tmpfs failed: {done.stdout.strip()}")
        self.mounted = True
        return self

    def fill(self):
        """Write the filler file until the file system is full; return its size."""
        chunk = b"\0" * 4096
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        finally:
            os.close(fd)
        return self.filler.stat().st_size

    def free(self):
        """Remove the filler: the space is back."""
        self.filler.unlink(missing_ok=True)

    def available(self):
        """Bytes still free."""
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def umount(self):
        """Unmount (lazily, should a process still hold a file there)."""
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False


@pytest.fixture
def small_filesystem(tmp_path):
    """A mounted 2 MB tmpfs (L{SmallFilesystem}) under C{tmp_path}, unmounted after."""
    fs = SmallFilesystem(tmp_path / "smallfs")
    try:
        fs.mount()
    except OSError as e:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {e.strerror}")
    yield fs
    fs.umount()
