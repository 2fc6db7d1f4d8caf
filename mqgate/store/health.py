"""
Whether a store can write, and what it does while it cannot (S3.6).

A full disk, an I/O error or a database server that went away is a normal operating
condition, not the end of the store. When a write fails the store becomes I{failing}:

 - it refuses at once what would store new data (a persistent message, a transaction,
   a delivery count) with L{StoreFailed}, so nothing piles up behind the fault and the
   broker never acknowledges, nor delivers, a message it did not store;
 - it keeps, in order, what must not be forgotten (a removal, a destination, a durable
   subscription) and writes it first once it recovers;
 - it probes every C{retry_interval} seconds (L{StoreHealth.probe}: repair what the
   failed write left, then try a small write), and is healthy again as soon as a probe
   succeeds, without a restart; a store that fails again right after it recovered
   (the probe's small write fits, real ones do not) probes less and less often, up to
   L{MAX_BACKOFF} times the interval, so that it does not flap every second;
 - it says so in the log: one line when it fails, at most one line a second while it
   keeps refusing, with what to do about it, and one line when it recovers. When a probe
   finds something the broker cannot repair by itself (a journal changed behind its
   back), the store is I{broken}: it says why and stops probing.

L{StoreHealth} holds that policy for every store; the store supplies the probe and
the advice for its kind of fault. Nothing here touches a disk or the reactor: the
clock is injected (C{None}: no timer, tests call L{StoreHealth.probe}).
"""

import errno

from twisted.internet import defer
from twisted.logger import Logger

from mqgate.store.interfaces import CorruptStore, StoreClosed, StoreFailed

__all__ = ["StoreHealth", "HEALTHY", "FAILING", "BROKEN", "file_advice",
           "DEFAULT_RETRY_INTERVAL"]

HEALTHY = "healthy"
FAILING = "failing"
BROKEN = "broken"

#: Probing a failing store once a second recovers it within a second of the fault
#: clearing and costs one small write a second meanwhile.
DEFAULT_RETRY_INTERVAL = 1.0
#: How far a flapping store's probes back off: at most this many retry intervals.
MAX_BACKOFF = 32
#: A failure this many retry intervals or fewer after a recovery counts as flapping.
_FLAP_WINDOW = 2
#: At most one "still failing" line per second: enough to follow, never a flood.
LOG_INTERVAL = 1.0
#: Without refusals to report, a reminder that the store still fails once a minute.
QUIET_LOG_INTERVAL = 60.0


def file_advice(cause, where):
    """What an operator can do about C{cause} (an C{OSError}) on a store in C{where}."""
    code = getattr(cause, "errno", None)
    if isinstance(cause, StoreFailed):
        code = getattr(cause.cause, "errno", None)
    if code in (errno.ENOSPC, errno.EFBIG):
        return f"free disk space on the file system of {where}"
    if code == errno.EDQUOT:
        return f"raise the disk quota of the broker's user or free space in {where}"
    if code == errno.EROFS:
        return f"the file system of {where} is read-only: remount it read-write"
    if code in (errno.EACCES, errno.EPERM):
        return f"give the broker's user write access to {where} again"
    return f"check the disk of {where} and the system log (dmesg)"


class StoreHealth:
    """A store's state (L{HEALTHY}, L{FAILING}, L{BROKEN}), its probes and its log.

    @param clock: an C{IReactorTime} for the probes and the log's pace, or C{None}.
    @param probe: C{probe() -> Deferred}: fires once the store can write again (it has
        repaired what the failed write left), errbacks with the reason it still cannot
        (L{CorruptStore}: it never will by itself).
    @param resume: C{resume()}, called once the store is healthy again: write what was
        kept, then go on.
    @param describe: the store in words, for the log (C{"file store in DIR"}).
    @param advice: C{advice(cause) -> str}: what the operator can do about a cause.
    @param pending: C{pending() -> int}: how many writes wait for the store to recover.
    @param retry_interval: seconds between probes.

    @ivar error: the L{StoreFailed} while failing or broken, else C{None}.
    @ivar refused: writes refused since the store last failed.
    @ivar outages: how many times the store failed so far.
    """

    log = Logger(namespace="mqgate.store")

    def __init__(self, clock, probe, describe, advice, *, resume=lambda: None,
                 pending=lambda: 0, retry_interval=DEFAULT_RETRY_INTERVAL):
        self._clock = clock
        self._probe = probe
        self._resume = resume
        self.describe = describe
        self._advice = advice
        self._pending = pending
        self.retry_interval = retry_interval
        self.state = HEALTHY
        self.error = None
        self.refused = 0
        self.outages = 0
        self._since = None
        self._last_log = None
        self._refused_logged = 0
        self._call = None
        self._probing = None
        self._backoff = 1
        self._recovered_at = None

    @property
    def failing(self):
        """Whether writes of new data are refused now (failing or broken)."""
        return self.state != HEALTHY

    def _now(self):
        return self._clock.seconds() if self._clock is not None else 0.0

    # -- what the store reports ----------------------------------------------------------

    def write_failed(self, cause):
        """A write failed with C{cause}: fail (or stay failing); return the
        L{StoreFailed} to refuse writes with."""
        error = cause if isinstance(cause, StoreFailed) else StoreFailed(cause)
        if isinstance(getattr(error, "cause", None), CorruptStore):
            return self._break(error)
        if self.state == BROKEN:
            return self.error
        self.error = error
        if self.state == HEALTHY:
            self._back_off()
            self.state = FAILING
            self.outages += 1
            self.refused = self._refused_logged = 0
            self._since = self._last_log = self._now()
            self.log.error(
                "The {store} cannot write: {reason}. Persistent messages are refused "
                "until it recovers; non-persistent messages go on. To fix: {advice}. "
                "The broker retries every {interval:g} s by itself "
                "(mqgate.persist.retry_interval).",
                store=self.describe, reason=error.reason, advice=self._advice(error),
                interval=self._interval(), store_state=FAILING)
        else:
            self._maybe_log()
        self._schedule()
        return error

    def refuse(self):
        """A write is refused because the store is failing: count it; return the
        L{StoreFailed} to refuse it with."""
        self.refused += 1
        self._maybe_log()
        return self.error

    def _maybe_log(self):
        now = self._now()
        quiet = self.refused == self._refused_logged
        pace = QUIET_LOG_INTERVAL if quiet else LOG_INTERVAL
        if self._last_log is not None and now - self._last_log < pace:
            return
        self._last_log = now
        self._refused_logged = self.refused
        self.log.warn(
            "The {store} still cannot write ({reason}) after {seconds:.0f} s: {refused} "
            "persistent messages refused so far, {pending} writes waiting for it. "
            "To fix: {advice}.", store=self.describe, reason=self.error.reason,
            seconds=now - self._since, refused=self.refused, pending=self._pending(),
            advice=self._advice(self.error), store_state=self.state)

    def _break(self, error):
        self.cancel()
        first = self.state != BROKEN
        self.state, self.error = BROKEN, error
        if first:
            self.outages += 1
            self._since = self._now()
            self.log.critical(
                "The {store} cannot recover by itself: {reason}. Persistent messages "
                "are refused until the broker is restarted (recovery then checks the "
                "store and says what it repairs).", store=self.describe,
                reason=error.reason, store_state=BROKEN)
        return error

    # -- probing -----------------------------------------------------------------------

    def _interval(self):
        return self.retry_interval * self._backoff

    def _back_off(self):
        # A new outage: probe at the base interval, or, when the store failed again
        # soon after it recovered, half as often as during the last outage.
        recent = (self._recovered_at is not None and self._now() - self._recovered_at
                  <= _FLAP_WINDOW * self._interval())
        self._backoff = min(self._backoff * 2, MAX_BACKOFF) if recent else 1

    def _schedule(self):
        if self._clock is None or self._call is not None or self.state != FAILING:
            return
        self._call = self._clock.callLater(self._interval(), self._timer)

    def _timer(self):
        self._call = None
        self.probe()

    def probe(self):
        """Try now whether the store can write again; a Deferred firing with whether it
        is healthy afterwards (a probe already running is not started twice)."""
        if self.state != FAILING:
            return defer.succeed(self.state == HEALTHY)
        waiter = defer.Deferred()
        if self._probing is not None:
            self._probing.append(waiter)
            return waiter
        self._probing = [waiter]
        d = defer.maybeDeferred(self._probe)
        d.addCallbacks(self._probe_worked, self._probe_failed)
        d.addCallback(self._tell_waiters)
        return waiter

    def _tell_waiters(self, healthy):
        waiters, self._probing = self._probing, None
        for waiter in waiters:
            waiter.callback(healthy)

    def _probe_worked(self, _):
        if self.state != FAILING:
            return self.state == HEALTHY
        seconds = self._now() - self._since
        self.state, self.error = HEALTHY, None
        self._recovered_at = self._now()
        self._last_log = None
        self.log.info(
            "The {store} can write again after {seconds:.1f} s; {refused} persistent "
            "messages were refused meanwhile, {pending} kept writes are being written "
            "now.", store=self.describe, seconds=seconds, refused=self.refused,
            pending=self._pending(), store_state=HEALTHY)
        self._resume()
        return self.state == HEALTHY

    def _probe_failed(self, failure):
        self.write_failed(failure.value)
        return False

    def cancel(self):
        """Stop probing (the store is closing, or broken)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def abandon_kept(self, writer):
        """The store closes while it cannot write: give up the writes C{writer} keeps
        (each fails with StoreClosed), saying in the log what that means."""
        kept = writer.waiting
        if kept:
            self.log.warn(
                "The {store} closes without writing {kept} kept writes (it cannot "
                "write: {reason}); messages consumed meanwhile will be delivered again "
                "after the restart.", store=self.describe, kept=kept,
                reason=self.error.reason)
        writer.abandon(StoreClosed("the store closed before it could write this"))

    # -- for the admin -----------------------------------------------------------------

    def status(self):
        """The state as data: C{state}, and while failing C{reason}, C{advice},
        C{seconds} (how long), C{refused}, C{pending}."""
        result = {"state": self.state, "outages": self.outages,
                  "pending": self._pending()}
        if self.error is not None:
            result.update(reason=self.error.reason, advice=self._advice(self.error),
                          seconds=round(self._now() - self._since, 1),
                          refused=self.refused)
        return result
