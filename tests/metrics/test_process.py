"""The process's own figures (S5.1): read from the running test process."""

import threading
import time

from mqgate.metrics.process import physical_memory, sample


def test_sample_sees_memory_threads_and_files_of_this_process():
    """A sample counts a thread and a file this test opens, and memory that is real."""
    before = sample()
    started, stop = threading.Event(), threading.Event()

    def wait():
        started.set()
        stop.wait(10)
    thread = threading.Thread(target=wait)
    thread.start()
    started.wait(10)
    try:
        with open(__file__, "rb"):
            during = sample()
    finally:
        stop.set()
        thread.join()
    assert during.threads >= before.threads + 1
    assert during.open_files >= before.open_files + 1
    assert 1 << 20 < during.rss_bytes <= during.virtual_bytes
    assert during.peak_rss_bytes >= during.rss_bytes // 2
    assert during.max_open_files >= during.open_files
    assert physical_memory() > during.rss_bytes


def test_cpu_time_grows_with_work():
    """The CPU time a sample reports grows when the process computes (within 10 s of
    computing: the clock's grain is a hundredth of a second)."""
    def cpu(reading):
        return reading.cpu_user_seconds + reading.cpu_system_seconds
    before = cpu(sample())
    deadline = time.monotonic() + 10
    while cpu(sample()) <= before:
        assert time.monotonic() < deadline, "10 s of work and no CPU time counted"
        sum(range(10000))
