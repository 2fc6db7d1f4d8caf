"""
The expiry reaper (S2.2 C{mqgate.message.expiration.interval}, S2.9 time-to-live).

An expired message is never delivered: every dispatch looks at the expiry of what it
hands over. That alone would leave an expired message waiting, counted against its
queue's limits, for as long as nobody consumes from the queue; the reaper removes them
every C{interval} seconds, to the dead message queue (reason C{EXPIRED}, S2.4).

Each queue keeps its own expiry index (a heap of the messages with an expiry that
waited in it, L{mqgate.core.destinations.Queue.reap}): a tick costs one comparison per
queue whose earliest expiry is still ahead, and a pass over a queue's waiting messages
only when some of them expired. No message without an expiry is ever looked at.

The clock is the injected C{IReactorTime} (design rule 1): C{callLater} schedules the
ticks, so a C{task.Clock} drives it in tests.
"""

from twisted.logger import Logger

__all__ = ["ExpiryReaper"]

_log = Logger(namespace="mqgate.expiry")


class ExpiryReaper:
    """Removes expired messages from a broker's queues every C{interval} seconds.

    @param broker: the L{mqgate.core.broker.Broker}.
    @param clock: an C{IReactorTime} (C{seconds}, C{callLater}).
    @param interval: seconds between two passes; 0 or less: no reaper (expired
        messages are still never delivered, and removed when dispatch meets them).
    @ivar reaped: messages removed so far.
    """

    def __init__(self, broker, clock, interval):
        self.broker = broker
        self.clock = clock
        self.interval = interval
        self.reaped = 0
        self._call = None

    def __repr__(self):
        return f"<ExpiryReaper every {self.interval}s reaped={self.reaped}>"

    @property
    def running(self):
        return self._call is not None

    def start(self):
        """Reap every C{interval} seconds from now on."""
        if self.interval > 0 and self._call is None:
            self._call = self.clock.callLater(self.interval, self._tick)

    def stop(self):
        """No more passes."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def reap(self):
        """One pass over every queue now; return how many messages expired."""
        now = self.clock.seconds()
        count = 0
        for queue in self.broker.every_queue():
            count += queue.reap(now)
        self.reaped += count
        return count

    def _tick(self):
        self._call = None
        try:
            self.reap()
        except Exception:
            # A bug here must not stop the reaper for the rest of the broker's life.
            _log.failure("reaping expired messages failed; trying again in {interval}s",
                         interval=self.interval)
        if self.interval > 0:
            self._call = self.clock.callLater(self.interval, self._tick)
