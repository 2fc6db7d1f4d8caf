"""
Slow subscribers (S9.4) and the egress buffer load factor (S9.6).

Theory of operation
-------------------
L{SlowSubscriberMeter}: one per client connection. The source measures "how many seconds
in the last minute the client had data to send but could not, usually because its TCP
window was closed", with an extra penalty for TCP trouble, as a percentage. Here "could
not send" is "the transport had paused our producer" (S9.3) and "had data" is "the
egress scheduler held something". The adapter tells the meter when either changes
(L{SlowSubscriberMeter.record}, or L{mark_paused}/L{mark_resumed}/L{set_queued}); the
meter reads the injected clock itself.

Blocked time is kept to the clock's precision in one bucket per second, so a fast
consumer whose socket buffer fills and drains many times a second is charged for the
milliseconds it was blocked, not for a whole second each time. The share is

    (blocked seconds in the window + trouble penalties in the window) / window

capped at 1. Memory is bounded by the window: at most C{window + 1} buckets, and
trouble events older than the window are dropped.

L{LoadFactor}: one per broker. The share of the egress buffer budget in use (the sum of
every scheduler's L{queued_bytes<mqgate.egress.scheduler.EgressScheduler.queued_bytes>}),
with set/clear events and hysteresis (S9.6, FACTS 4), and the choice of which slow
subscribers to disconnect, slowest first, when it is above 100 %.

No reactor, no C{time}: the clock is an C{IReactorTime} passed in (docs/design.md).
"""

from collections import deque
from dataclasses import dataclass
import math

from mqgate.errors import ConfigError

__all__ = [
    "SlowSubscriberMeter", "LoadFactor", "ClientLoad", "LOAD_SET", "LOAD_CLEAR",
    "DEFAULT_WINDOW", "DEFAULT_SLOW_THRESHOLD", "DEFAULT_TROUBLE_WEIGHT",
]

#: S9.4: "over the last minute".
DEFAULT_WINDOW = 60
#: A client blocked for more than half of the last minute is slow.
DEFAULT_SLOW_THRESHOLD = 0.5
#: Seconds of blocked time one connection-trouble event counts as (S9.4: "extra
#: weight"; the source does not publish its penalty). Five missed seconds per event
#: makes a client with one missed heart-beat every ten seconds slow on that alone.
DEFAULT_TROUBLE_WEIGHT = 5.0

#: L{LoadFactor.update} events (S9.6).
LOAD_SET = "set"
LOAD_CLEAR = "clear"


class SlowSubscriberMeter:
    """How much of the last minute one client spent unable to send (S9.4).

    @param clock: an C{IReactorTime}; only C{seconds()} is used.
    @param window: the window in seconds.
    @param threshold: the share (0..1) above which the client is slow.
    @param trouble_weight: seconds of penalty one L{trouble} call adds by default.
    """

    def __init__(self, clock, window=DEFAULT_WINDOW, threshold=DEFAULT_SLOW_THRESHOLD,
                 trouble_weight=DEFAULT_TROUBLE_WEIGHT):
        if not (isinstance(window, int) and window >= 1):
            raise ConfigError("window", window, "a whole number of seconds, at least 1")
        if not 0 <= threshold <= 1:
            raise ConfigError("threshold", threshold, "a share from 0 to 1")
        if trouble_weight < 0:
            raise ConfigError("trouble_weight", trouble_weight, "at least 0 seconds")
        self._clock = clock
        self.window = window
        self.threshold = threshold
        self.trouble_weight = trouble_weight
        self._paused = False
        self._queued = False
        self._blocked_since = None
        # [second, blocked seconds within it], seconds ascending, one per second.
        self._buckets = deque()
        # (time, penalty seconds), oldest first.
        self._troubles = deque()

    # -- what the adapter reports ----------------------------------------------------

    def record(self, paused, queued):
        """The transport is (not) paused and the scheduler does (not) hold data, now."""
        self._paused = bool(paused)
        self._queued = bool(queued)
        now = self._clock.seconds()
        blocked = self._paused and self._queued
        if blocked and self._blocked_since is None:
            self._blocked_since = now
        elif not blocked and self._blocked_since is not None:
            self._add_blocked(self._blocked_since, now)
            self._blocked_since = None
        self._prune(now)

    def mark_paused(self):
        """The transport paused the client's producer (its send buffer is full)."""
        self.record(True, self._queued)

    def mark_resumed(self):
        """The transport resumed the client's producer."""
        self.record(False, self._queued)

    def set_queued(self, queued):
        """The client's egress scheduler now does (not) hold data to send."""
        self.record(self._paused, queued)

    def trouble(self, weight=None):
        """Count a connection-trouble event (a missed heart-beat, a failed write): a
        penalty of C{weight} seconds (default L{trouble_weight}) for one window."""
        now = self._clock.seconds()
        self._troubles.append((now, self.trouble_weight if weight is None else weight))
        self._prune(now)

    @property
    def paused(self):
        """What the adapter last said about its transport."""
        return self._paused

    # -- what the operator sees ------------------------------------------------------

    def blocked_seconds(self):
        """Seconds of the window spent paused with data queued (penalties excluded)."""
        now = self._clock.seconds()
        self._prune(now)
        # A bucket straddling the start of the window counts whole: the meter may
        # overstate by under a second, never understate.
        total = sum(used for _, used in self._buckets)
        if self._blocked_since is not None:
            total += now - max(self._blocked_since, self._window_start(now))
        return min(total, self.window)

    def share(self):
        """The slowness share of the last window, 0..1 (S9.4)."""
        now = self._clock.seconds()
        self._prune(now)
        penalty = sum(weight for _, weight in self._troubles)
        return min(1.0, (self.blocked_seconds() + penalty) / self.window)

    def percent(self):
        """L{share} as a whole percentage, for the show commands."""
        return int(round(self.share() * 100))

    def is_slow(self):
        """True when the share is above the threshold (S9.4)."""
        return self.share() > self.threshold

    # -- internals -------------------------------------------------------------------

    def _window_start(self, now):
        # The window is the last `window` seconds up to now.
        return now - self.window

    def _add_blocked(self, start, end):
        # Only the part inside the window can ever be read again.
        start = max(start, end - self.window - 1)
        second = math.floor(start)
        while second < end:
            used = min(end, second + 1) - max(start, second)
            if used > 0:
                if self._buckets and self._buckets[-1][0] == second:
                    self._buckets[-1][1] += used
                else:
                    self._buckets.append([second, used])
            second += 1

    def _prune(self, now):
        first = self._window_start(now)
        buckets = self._buckets
        while buckets and buckets[0][0] + 1 <= first:
            buckets.popleft()
        troubles = self._troubles
        while troubles and troubles[0][0] <= first:
            troubles.popleft()


@dataclass(frozen=True)
class ClientLoad:
    """What L{LoadFactor.victims} needs to know about one client.

    @ivar client: whatever identifies the client to the caller (returned as is).
    @ivar queued_bytes: the egress bytes its disconnection would free.
    @ivar share: its slowness share (L{SlowSubscriberMeter.share}).
    @ivar slow: whether it is slow (L{SlowSubscriberMeter.is_slow}).
    """

    client: object
    queued_bytes: int
    share: float
    slow: bool


class LoadFactor:
    """The egress buffer load factor: share of the budget in use, with events (S9.6).

    @param budget_bytes: the broker's egress buffer budget (100 %).
    @param set_pct: the percentage at or above which the "set" event fires.
    @param clear_pct: the percentage below which, after a "set", "clear" fires.
    """

    def __init__(self, budget_bytes, set_pct=80, clear_pct=60):
        if not (isinstance(budget_bytes, int) and budget_bytes > 0):
            raise ConfigError("budget_bytes", budget_bytes, "a number of bytes above 0")
        if not 0 < set_pct <= 100:
            raise ConfigError("set_pct", set_pct, "a percentage above 0, at most 100")
        if not 0 <= clear_pct <= set_pct:
            raise ConfigError("clear_pct", clear_pct,
                              f"a percentage from 0 to the set percentage ({set_pct})")
        self.budget_bytes = budget_bytes
        self.set_pct = set_pct
        self.clear_pct = clear_pct
        self.used_bytes = 0
        self.raised = False

    @property
    def percent(self):
        """The load factor as a percentage of the budget (may exceed 100)."""
        return self.used_bytes * 100.0 / self.budget_bytes

    @property
    def over_capacity(self):
        """True above 100 %: slow subscribers are to be disconnected (S9.6)."""
        return self.used_bytes > self.budget_bytes

    def update(self, used_bytes):
        """Take the bytes in use now; return L{LOAD_SET}, L{LOAD_CLEAR} or None.

        "set" fires once when the load factor reaches C{set_pct}; "clear" fires once
        when, after that, it falls below C{clear_pct}. In between nothing fires, so a
        load hovering around one threshold does not flood the log (hysteresis).
        """
        self.used_bytes = used_bytes
        percent = self.percent
        if not self.raised and percent >= self.set_pct:
            self.raised = True
            return LOAD_SET
        if self.raised and percent < self.clear_pct:
            self.raised = False
            return LOAD_CLEAR
        return None

    def victims(self, clients):
        """Choose whom to disconnect to bring the load back to 100 % (S9.6).

        Only slow subscribers are chosen, the slowest first (ties: the one holding more
        bytes first), until the projected use (the last L{update} minus what the
        chosen hold) is no longer over the budget. When every slow subscriber together
        is not enough, all of them are returned; fast clients are never chosen.

        @param clients: an iterable of L{ClientLoad}.
        @return: the chosen C{client} values, in the order to disconnect them.
        """
        projected = self.used_bytes
        if projected <= self.budget_bytes:
            return []
        slow = sorted((c for c in clients if c.slow),
                      key=lambda c: (-c.share, -c.queued_bytes))
        chosen = []
        for load in slow:
            if projected <= self.budget_bytes:
                break
            chosen.append(load.client)
            projected -= load.queued_bytes
        return chosen
