"""
Memory states (S2.6): GREEN, YELLOW, ORANGE and RED, by how much of the broker's memory
budget (C{mqgate.memory.limit}) the messages it holds use.

What is measured is the broker's own account of what it holds: the bytes of every
message held (waiting or unacknowledged, once per queue or subscription holding it, as
C{mqgate.system.max_size} counts them) plus a fixed overhead per message held for the
objects that carry it. It is exact, costs two attribute reads, and falls as soon as
consumers take messages. The process's resident size is shown beside it (metrics) but
does not drive the states: CPython rarely gives freed memory back to the system, so a
state driven by it would rise and never fall, and a broker that refuses messages at RED
would refuse them for ever (docs/memory.md).

Each state has a threshold (percent of the limit at which it is entered) and a count
(C{mqgate.STATE.count}: the largest batch of credit a producer is granted in it, so
producers are throttled as memory fills; RED's is 0: nothing new is accepted). A state
is left downwards only once the use is C{hysteresis} percentage points below its
threshold, so a broker hovering at a threshold does not flap between two states, log a
line per message and flip its producers' credit.

L{MemoryStates.check} is cheap (one comparison of the bytes held against the two
boundaries of the current state, precomputed), so the glue may call it per message;
only a move to another state does any work: one log line with the figures, and, on
leaving RED, calling back the producers that wait for it. No I/O, no clock: the
sampler service (L{mqgate.net.memory_watch}) calls L{check} on a timer, so that a state
falls while no message arrives.
"""

from dataclasses import dataclass

from twisted.logger import Logger

from mqgate.core.limits import ResourceLimitExceeded
from mqgate.errors import ConfigError

__all__ = ["GREEN", "YELLOW", "ORANGE", "RED", "RED_LEVEL", "STATES",
           "MemoryConfig", "MemoryStates", "default_limit"]

GREEN, YELLOW, ORANGE, RED = "GREEN", "YELLOW", "ORANGE", "RED"
#: The states from lowest to highest; a state's index is its level.
STATES = (GREEN, YELLOW, ORANGE, RED)
#: The level of RED, what L{MemoryStates.check} returns when it refuses.
RED_LEVEL = 3

_NEVER = float("inf")

_log = Logger(namespace="mqgate.memory")


class _NothingPaged:
    """What L{MemoryStates.paged} is until a pager exists: nothing paged."""

    count = 0
    bytes = 0


_NOTHING_PAGED = _NothingPaged()


def default_limit(physical, share):
    """The budget when C{mqgate.memory.limit} is 0: C{share} percent of the machine's
    C{physical} memory, or 1 GiB when the platform cannot tell it."""
    if not physical:
        return 1 << 30
    return physical * share // 100


@dataclass(frozen=True)
class MemoryConfig:
    """The memory settings (S2.6; FACTS 1.7 for the defaults).

    @ivar limit: the budget in bytes (C{mqgate.memory.limit}, resolved: never 0).
    @ivar thresholds: percent of the budget at which YELLOW, ORANGE and RED are
        entered (C{mqgate.yellow.threshold} ...); GREEN's is 0.
    @ivar counts: the credit batch of GREEN, YELLOW and ORANGE (C{mqgate.green.count}
        ...); RED's is 0.
    @ivar hysteresis: percentage points below a state's threshold at which it is
        left (C{mqgate.memory.hysteresis}).
    @ivar overhead: bytes counted per message held on top of its own
        (C{mqgate.memory.message_overhead}).
    """

    limit: int = 1 << 30
    thresholds: tuple = (80, 90, 98)
    counts: tuple = (5000, 500, 50)
    hysteresis: int = 5
    overhead: int = 512

    def __post_init__(self):
        if self.limit < 1:
            raise ConfigError("mqgate.memory.limit", self.limit, "a size above 0")
        names = ("mqgate.yellow.threshold", "mqgate.orange.threshold",
                 "mqgate.red.threshold")
        low = 0
        for name, value in zip(names, self.thresholds):
            if not low < value <= 100:
                raise ConfigError(name, value, f"a percentage above {low} (the state"
                                  " below it) and at most 100")
            low = value
        if not 0 <= self.hysteresis < self.thresholds[0]:
            raise ConfigError("mqgate.memory.hysteresis", self.hysteresis,
                              f"0 to {self.thresholds[0] - 1} (below"
                              " mqgate.yellow.threshold)")


class MemoryStates:
    """The broker's memory state, moved by what it holds.

    @param config: the L{MemoryConfig}.
    @param holdings: what the broker holds, its C{count} and C{bytes} read live
        (L{mqgate.core.broker.Broker.holdings}).
    @ivar level: the state's index in L{STATES} (0 GREEN ... 3 RED).
    @ivar used: the bytes counted at the last check.
    @ivar changes: how many times the state changed.
    @ivar paged: what was paged out of memory (its C{bytes} are not counted): the
        L{mqgate.core.paging.Pager} once there is one.
    """

    def __init__(self, config, holdings):
        self.config = config
        self._holdings = holdings
        self._overhead = config.overhead
        self.level = 0
        self.used = 0
        self.changes = 0
        self.paged = _NOTHING_PAGED
        # Called once the state falls below RED; a dict, so that one connection's
        # callback (a bound method) is held once however often it asks, and the
        # callbacks are bounded by the connections (design rule 4).
        self._callbacks = {}
        # Byte figures of the thresholds and of the points where a state is left.
        limit = config.limit
        self._enter = [0] + [limit * t // 100 for t in config.thresholds]
        self._leave = [0] + [max(0, limit * (t - config.hysteresis) // 100)
                             for t in config.thresholds]
        self._counts = tuple(config.counts) + (0,)
        self._bounds()

    def __repr__(self):
        return f"<MemoryStates {self.state} {self.used}/{self.config.limit}>"

    @property
    def state(self):
        """The state's name."""
        return STATES[self.level]

    @property
    def refusing(self):
        """C{True} at RED: new messages are not accepted."""
        return self.level == RED_LEVEL

    @property
    def percent(self):
        """The use at the last check, in percent of the limit."""
        return 100.0 * self.used / self.config.limit

    def measure(self):
        """The bytes counted now: the messages' own plus the overhead of each."""
        holdings = self._holdings
        return holdings.bytes + holdings.count * self._overhead - self.paged.bytes

    def check(self):
        """Read what the broker holds and move to the state it calls for; return
        the level. Cheap while the state stays (the glue calls it per message)."""
        holdings = self._holdings
        used = self.used = (holdings.bytes + holdings.count * self._overhead
                            - self.paged.bytes)
        if used >= self._up or used < self._down:
            self._move(used)
        return self.level

    def credit(self, wanted):
        """C{wanted} credit limited to this state's batch (0 at RED), after a
        L{check}."""
        batch = self._counts[self.check()]
        return wanted if wanted < batch else batch

    @property
    def batch(self):
        """The state's credit batch as of the last check (0 at RED)."""
        return self._counts[self.level]

    def when_accepting(self, callback):
        """Call C{callback()} once the state is below RED (at once if it is); the same
        callback given again is called once."""
        if self.level != RED_LEVEL:
            callback()
            return
        self._callbacks[callback] = None

    def forget(self, callback):
        """Drop a callback given to L{when_accepting} (its connection went)."""
        self._callbacks.pop(callback, None)

    def refusal(self):
        """The error a message refused at RED gets, naming the figures and the
        setting."""
        return ResourceLimitExceeded(
            f"the broker's memory is in state RED: its messages use {self.used} bytes,"
            f" {self.percent:.0f} % of mqgate.memory.limit={self.config.limit}; the"
            " message was not accepted, send it again once consumers have taken some")

    def snapshot(self):
        """The figures, for the metrics: C{memory_state} (name), C{memory_level},
        C{memory_used_bytes}, C{memory_limit_bytes}, C{memory_percent},
        C{memory_state_changes}, C{memory_paged_messages}, C{memory_paged_bytes} (S2.6:
        bodies paged out, not counted in the bytes used)."""
        return {"memory_state": self.state, "memory_level": self.level,
                "memory_used_bytes": self.used, "memory_limit_bytes": self.config.limit,
                "memory_percent": round(self.percent, 1),
                "memory_state_changes": self.changes,
                "memory_paged_messages": self.paged.count,
                "memory_paged_bytes": self.paged.bytes}

    # -- moving ---------------------------------------------------------------------

    def _bounds(self):
        # Rise at the next state's threshold; fall below this one's less hysteresis.
        level = self.level
        self._up = self._enter[level + 1] if level < RED_LEVEL else _NEVER
        self._down = self._leave[level] if level else -1

    def _move(self, used):
        before = self.level
        level = before
        while level < RED_LEVEL and used >= self._enter[level + 1]:
            level += 1
        if level == before:
            while level and used < self._leave[level]:
                level -= 1
        if level == before:
            return
        self.level = level
        self.changes += 1
        self._bounds()
        self._log_change(before, used)
        if before == RED_LEVEL:
            callbacks, self._callbacks = self._callbacks, {}
            for callback in callbacks:
                callback()

    def _log_change(self, before, used):
        limit = self.config.limit
        level = self.level
        if level == RED_LEVEL:
            effect = "new messages are refused until it falls"
        else:
            effect = f"producers get credit in batches of at most {self._counts[level]}"
        log = _log.warn if level > before else _log.info
        log("memory state {before} -> {state}: messages use {used} bytes, {percent:.1f} %"
            " of mqgate.memory.limit={limit} (thresholds {thresholds} %); {effect}",
            before=STATES[before], state=STATES[level], used=used,
            percent=100.0 * used / limit, limit=limit,
            thresholds="/".join(str(t) for t in self.config.thresholds), effect=effect)
