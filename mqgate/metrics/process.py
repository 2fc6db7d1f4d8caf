"""
The broker process's own figures (S5.1, S5.3 C{mq.metrics.jvm}): memory, threads, CPU
time, open files. Read from C{/proc/self} where the kernel offers it (Linux), otherwise
from what the standard library knows, so that a figure the platform cannot give is
C{None} rather than a made-up number.
"""

import os
import resource
import threading
from dataclasses import dataclass

__all__ = ["ProcessSample", "sample", "physical_memory"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcessSample:
    """One reading of the process.

    @ivar rss_bytes: resident memory now.
    @ivar peak_rss_bytes: the most resident memory so far.
    @ivar virtual_bytes: the address space (C{None} where unknown).
    @ivar threads: threads of the process (the reactor's, the pool's, the store's).
    @ivar cpu_user_seconds: CPU time in user mode since start.
    @ivar cpu_system_seconds: CPU time in the kernel since start.
    @ivar open_files: open file descriptors, sockets included (C{None} where unknown).
    @ivar max_open_files: the soft limit on them.
    @ivar physical_memory: the machine's memory (C{None} where unknown).
    """

    rss_bytes: int
    peak_rss_bytes: int
    virtual_bytes: object
    threads: int
    cpu_user_seconds: float
    cpu_system_seconds: float
    open_files: object
    max_open_files: int
    physical_memory: object


def physical_memory():
    """The machine's memory in bytes, or C{None} where the platform cannot say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def sample():
    """Read the process's figures now (a few small reads of C{/proc/self})."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss * 1024   # kilobytes on Linux
    rss, virtual = _statm()
    times = os.times()
    if rss is None:
        rss = peak
    return ProcessSample(
        rss_bytes=rss,
        # The kernel updates its high-water mark lazily: the resident size read now
        # may be above it, and a peak below the present reads as a mistake.
        peak_rss_bytes=max(peak, rss),
        virtual_bytes=virtual,
        threads=_threads(),
        cpu_user_seconds=times.user,
        cpu_system_seconds=times.system,
        open_files=_open_files(),
        max_open_files=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        physical_memory=physical_memory())


def _statm():
    """C{(resident, virtual)} bytes from C{/proc/self/statm}, or C{(None, None)}."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return int(fields[1]) * _PAGE, int(fields[0]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None, None


def _threads():
    """Threads of the whole process: the kernel's count, else Python's own."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return threading.active_count()


def _open_files():
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
