"""
The per-client egress scheduler: five priority queues between the core and the wire (S9).

Theory of operation
-------------------
Every client connection owns one L{EgressScheduler}. What the connection will write is
filed into one of five queues, named as in the spec and served in strict priority
(S9.1):

    C-1  control: flow, disposition, detach, heart-beats          (served first)
    D-3  direct (non-persistent, pre-settled), class of service 3
    D-2  direct, class of service 2 (reserved: nothing is filed here today)
    D-1  direct, class of service 1 (and 2, which is treated as low)
    G-1  guaranteed (persistent or unsettled)                      (served last)

Depth is counted in work units of 2,048 bytes (S9.2). Each queue has a C{max_depth}
in work units and a C{min_msg_burst} in messages. A queue holding fewer than
C{min_msg_burst} messages admits the next one whatever its size, which is how a burst
of large messages gets through a small C{max_depth}. Otherwise:

- a D queue over C{max_depth} discards its oldest messages until the new one fits; each
  discard is counted, and the next message delivered for the same key carries a discard
  indication (S9.2, FACTS 4);
- G-1 never discards: L{EgressScheduler.offer_guaranteed} refuses, and the caller
  leaves the message in its destination until L{EgressScheduler.has_room_for_guaranteed}
  says yes again (the core's consumer credit is the lever);
- C-1 is never bounded: control frames are small, few, and must not be lost.

Keys: an item may be offered with a C{key} (the adapter's link, say). A blocked key's
items stay queued but are not served (a direct subscriber whose AMQP link has no credit,
S9.1: its messages wait in its D queue, bounded by C{max_depth}, instead of piling up
without bound in its subscription). Within one queue, keys that can be served take
turns one message at a time; each key's own messages stay in order. Discards take the
oldest message of the queue whatever its key, so the stalled subscriber is the one that
loses messages. The discard indication is kept per key (FACTS 4: "one
discarded-since-last-delivery bit per subscriber"); with no keys (C{key=None}
everywhere) it is per client.

What this module does not know: sockets, time, protocols. The adapter is the
C{IPushProducer}: while its transport is not paused it calls L{EgressScheduler.next}
and writes a bounded batch (S9.3, docs/design.md).
"""

from collections import deque
from dataclasses import dataclass

__all__ = [
    "C1", "D3", "D2", "D1", "G1", "QUEUE_NAMES", "DISPLAY_ORDER", "WORK_UNIT_BYTES",
    "DEFAULT_MAX_DEPTH", "DEFAULT_MIN_MSG_BURST", "DEFAULT_G1_MIN_MSG_BURST",
    "MAX_DEPTH_RANGE", "MIN_MSG_BURST_RANGE", "QueueLimits", "DEFAULT_QUEUE_LIMITS",
    "QueueStats", "EgressScheduler", "work_units", "cos_for", "direct_queue_for",
]

C1 = "C-1"
D3 = "D-3"
D2 = "D-2"
D1 = "D-1"
G1 = "G-1"

#: Service order, highest priority first (S9.1).
QUEUE_NAMES = (C1, D3, D2, D1, G1)
#: The order the source's show commands list queues in: lowest priority first.
DISPLAY_ORDER = (G1, D1, D2, D3, C1)

#: S9.2: one work unit is 2,048 bytes of message.
WORK_UNIT_BYTES = 2048
#: S9.2 defaults and ranges (the source's client-profile queue commands).
DEFAULT_MAX_DEPTH = 20000
DEFAULT_MIN_MSG_BURST = 4
DEFAULT_G1_MIN_MSG_BURST = 255
MAX_DEPTH_RANGE = (2, 262144)
MIN_MSG_BURST_RANGE = (0, 262144)

#: S9.1: classes of service and priority bands.
MIN_COS, MAX_COS = 1, 3


@dataclass(frozen=True)
class QueueLimits:
    """The two settings of one priority queue (S9.2); validated by the profile parser.

    @ivar max_depth: work units the queue holds before it discards (D) or refuses (G-1).
    @ivar min_msg_burst: messages always admitted whatever C{max_depth} says.
    """

    max_depth: int = DEFAULT_MAX_DEPTH
    min_msg_burst: int = DEFAULT_MIN_MSG_BURST


#: The default limits of every queue (S9.2: min-msg-burst 4, but 255 for G-1).
DEFAULT_QUEUE_LIMITS = {
    name: QueueLimits(DEFAULT_MAX_DEPTH,
                      DEFAULT_G1_MIN_MSG_BURST if name == G1 else DEFAULT_MIN_MSG_BURST)
    for name in QUEUE_NAMES
}


@dataclass(frozen=True)
class QueueStats:
    """One row of C{show client NAME stats queue} (S9.7), as the source prints it.

    @ivar length_msgs: messages waiting now.
    @ivar length_units: work units waiting now.
    @ivar high_water_units: the most work units held since the statistics were cleared.
    @ivar max_depth: the queue's configured C{max_depth}.
    @ivar discards: messages discarded from the queue.
    @ivar deliveries: messages delivered from the queue.
    @ivar length_bytes: bytes waiting now (as offered; for the metrics, S5.1).
    """

    name: str
    length_msgs: int
    length_units: int
    high_water_units: int
    max_depth: int
    discards: int
    deliveries: int
    length_bytes: int = 0


def work_units(size):
    """Return the work units a message of C{size} bytes occupies (S9.2).

    C{ceil(size / 2048)}, and at least one: an empty message still takes a slot and
    a frame header on the wire, and a queue of "zero-unit" messages would be unbounded.
    """
    if size <= WORK_UNIT_BYTES:
        return 1
    return -(-size // WORK_UNIT_BYTES)


def cos_for(priority, annotation_cos=None):
    """Return the class of service (1, 2 or 3) of a message (S9.1).

    @param priority: the message priority 0..9 (None: the default, 4); values outside
        0..9 are clamped as the core clamps them (S2.9).
    @param annotation_cos: the C{x-opt-cos} message annotation when the message carries
        one; it wins when it is an integer 1..3, and is ignored otherwise.
    @return: 1, 2 or 3. COS 2 is returned as is; L{direct_queue_for} files it as low.
    """
    if (isinstance(annotation_cos, int) and not isinstance(annotation_cos, bool)
            and MIN_COS <= annotation_cos <= MAX_COS):
        return annotation_cos
    if priority is None:
        priority = 4
    # S9.1 bands: 0-3 low, 4-6 middle, 7-9 high.
    if priority <= 3:
        return 1
    if priority <= 6:
        return 2
    return 3


def direct_queue_for(cos):
    """Return the D queue a direct message of class C{cos} is filed in (S9.1).

    COS 3 goes to D-3; COS 1 and the reserved COS 2 go to D-1 ("COS 2 is reserved and
    treated as low"). Anything else is the caller's bug: ValueError.
    """
    if cos == 3:
        return D3
    if cos in (1, 2):
        return D1
    raise ValueError(f"class of service must be 1, 2 or 3, not {cos!r}")


class _Entry:
    """One queued item with what the queue needs to know about it."""

    __slots__ = ("item", "size", "units", "key", "seq")

    def __init__(self, item, size, units, key, seq):
        self.item = item
        self.size = size
        self.units = units
        self.key = key
        self.seq = seq


class _PriorityQueue:
    """One of the five queues: per-key FIFOs, counters, and the keys ready to serve."""

    __slots__ = ("name", "limits", "_by_key", "_ready", "messages", "units", "bytes",
                 "high_water", "discards", "deliveries")

    def __init__(self, name, limits):
        self.name = name
        self.limits = limits
        # key -> deque of _Entry, oldest first; a key is present only while non-empty.
        self._by_key = {}
        # The keys that are unblocked and non-empty, in turn order (a dict keeps order).
        self._ready = {}
        self.messages = 0
        self.units = 0
        self.bytes = 0
        self.high_water = 0
        self.discards = 0
        self.deliveries = 0

    @property
    def ready(self):
        return bool(self._ready)

    def admits_by_burst(self):
        """S9.2: fewer than min-msg-burst messages queued: admit whatever the size."""
        return self.messages < self.limits.min_msg_burst

    def fits(self, units):
        return self.units + units <= self.limits.max_depth

    def push(self, entry, blocked):
        key = entry.key
        entries = self._by_key.get(key)
        if entries is None:
            entries = self._by_key[key] = deque()
            if key not in blocked:
                self._ready[key] = None
        entries.append(entry)
        self.messages += 1
        self.units += entry.units
        self.bytes += entry.size
        if self.units > self.high_water:
            self.high_water = self.units

    def pop_ready(self):
        """Take the next entry to deliver: the head of the key whose turn it is."""
        ready = self._ready
        key = next(iter(ready))
        entries = self._by_key[key]
        entry = entries.popleft()
        if not entries:
            del ready[key]
            del self._by_key[key]
        elif len(ready) > 1:
            del ready[key]
            ready[key] = None           # to the back of the turn order
        # _account_out, inline: this runs once per message served.
        self.messages -= 1
        self.units -= entry.units
        self.bytes -= entry.size
        self.deliveries += 1
        return entry

    def pop_oldest(self):
        """Take the oldest entry of the queue, whatever its key (S9.2 discards)."""
        # The oldest entry is the head of some key's FIFO: scan the heads. A client
        # has few keys (its links), so this is cheap, and discards are the slow path.
        key = min(self._by_key, key=lambda k: self._by_key[k][0].seq)
        entries = self._by_key[key]
        entry = entries.popleft()
        if not entries:
            del self._by_key[key]
            self._ready.pop(key, None)
        self._account_out(entry)
        self.discards += 1
        return entry

    def withdraw(self, key):
        """Remove and return every entry of C{key}, oldest first (not counted)."""
        entries = self._by_key.pop(key, None)
        if entries is None:
            return []
        self._ready.pop(key, None)
        for entry in entries:
            self._account_out(entry)
        return list(entries)

    def block(self, key):
        self._ready.pop(key, None)

    def unblock(self, key):
        if key in self._by_key:
            self._ready[key] = None

    def _account_out(self, entry):
        self.messages -= 1
        self.units -= entry.units
        self.bytes -= entry.size

    def stats(self):
        return QueueStats(self.name, self.messages, self.units, self.high_water,
                          self.limits.max_depth, self.discards, self.deliveries,
                          self.bytes)

    def clear_stats(self):
        self.high_water = self.units
        self.discards = 0
        self.deliveries = 0


class EgressScheduler:
    """The five egress queues of one client connection (S9.1-S9.3).

    @param profile: anything with a C{queues} mapping of queue name to L{QueueLimits}
        (a L{mqgate.egress.profiles.ClientProfile}); None for the defaults. Queue names
        missing from the mapping get their defaults.
    @param on_guaranteed_room: called with no arguments when G-1, after refusing a
        message, has room again: the adapter asks the core for more (gives credit back).
    """

    def __init__(self, profile=None, *, on_guaranteed_room=None):
        self.profile = profile
        self._queues = {}
        for name in QUEUE_NAMES:
            self._queues[name] = _PriorityQueue(name, self._limits_from(profile, name))
        # Attribute access is the hot path: keep the queues also as a tuple, in order.
        self._in_order = tuple(self._queues[name] for name in QUEUE_NAMES)
        self._control = self._queues[C1]
        self._guaranteed = self._queues[G1]
        # Class of service -> D queue (direct_queue_for), looked up once per message.
        self._by_cos = {cos: self._queues[direct_queue_for(cos)] for cos in (1, 2, 3)}
        self._blocked = set()
        self._discarded_keys = set()
        # Messages waiting in all five queues, kept as they come and go: read once per
        # delivery (L{queued_messages}), so not summed over the queues each time.
        self._waiting = 0
        self._seq = 0
        self._guaranteed_refused = False
        self._on_guaranteed_room = on_guaranteed_room

    @staticmethod
    def _limits_from(profile, name):
        queues = getattr(profile, "queues", None) or {}
        return queues.get(name, DEFAULT_QUEUE_LIMITS[name])

    def apply_profile(self, profile):
        """Take new queue limits; messages already queued stay (S9.2, as the source)."""
        self.profile = profile
        for name, queue in self._queues.items():
            queue.limits = self._limits_from(profile, name)

    # -- filing ----------------------------------------------------------------------

    def offer_control(self, item, size=0):
        """Queue a control frame on C-1 (S9.1). It is never discarded or refused."""
        self._push(self._control, item, size, None)

    def offer_direct(self, item, size, cos=1, key=None):
        """File a direct message under the D queue of its class of service (S9.1, S9.2).

        When the queue is full its oldest messages are discarded to make room (each
        counted; the discarded message's key is flagged for a discard indication). A
        message that cannot fit even in the emptied queue (larger than C{max_depth}
        with C{min_msg_burst} 0) is itself discarded.

        @param cos: 1, 2 or 3 (see L{cos_for}).
        @param key: what the item belongs to (a link), for L{block} and L{withdraw}.
        @return: a sequence of the items discarded to make room, oldest first (the new
            item itself, last, when it was refused); empty when nothing was lost. The
            caller settles or forgets them; the scheduler has already counted them.
        """
        queue = self._by_cos.get(cos) or self._queues[direct_queue_for(cos)]
        units = 1 if size <= WORK_UNIT_BYTES else -(-size // WORK_UNIT_BYTES)
        limits = queue.limits
        if queue.messages < limits.min_msg_burst or \
                queue.units + units <= limits.max_depth:
            # The common case, spelled out: it runs once per message per subscriber.
            self._seq += 1
            self._waiting += 1
            queue.push(_Entry(item, size, units, key, self._seq), self._blocked)
            return ()
        dropped = []
        while (not queue.admits_by_burst() and not queue.fits(units)
               and queue.messages):
            entry = queue.pop_oldest()
            self._waiting -= 1
            self._discarded_keys.add(entry.key)
            dropped.append(entry.item)
        if queue.admits_by_burst() or queue.fits(units):
            self._push(queue, item, size, key, units)
        else:
            queue.discards += 1
            self._discarded_keys.add(key)
            dropped.append(item)
        return dropped

    def offer_guaranteed(self, item, size, key=None):
        """Queue a guaranteed message on G-1 if there is room (S9.2).

        @return: True when queued; False when G-1 is full: nothing was queued or
            counted, and the caller keeps the message in its destination.
        """
        queue = self._guaranteed
        units = work_units(size)
        if queue.admits_by_burst() or queue.fits(units):
            self._push(queue, item, size, key, units)
            return True
        self._guaranteed_refused = True
        return False

    def push_guaranteed(self, item, size, key=None):
        """Queue a guaranteed message on G-1 even when it is full (S9.2).

        For a message the core has already handed over: the caller then withholds the
        consumer's credit until G-1 has room, so G-1 overshoots by at most one message
        per consumer. Nothing is ever discarded from G-1.

        @return: whether G-1 still has room after this message; when not, the
            C{on_guaranteed_room} callback runs once it has again.
        """
        queue = self._guaranteed
        self._push(queue, item, size, key)
        if queue.admits_by_burst() or queue.units < queue.limits.max_depth:
            return True
        self._guaranteed_refused = True
        return False

    def pass_through(self, guaranteed, cos=1, key=None):
        """Count a message written at once, never queued (S9.3: the transport could
        take it and nothing was waiting): a delivery of the queue it would have
        gone to.

        @return: whether it carries the discard indication (the first message for
            C{key} since messages of C{key} were discarded).
        """
        (self._guaranteed if guaranteed else self._by_cos[cos]).deliveries += 1
        discarded = self._discarded_keys
        if discarded and key in discarded:
            discarded.discard(key)
            return True
        return False

    def has_room_for_guaranteed(self, size=1):
        """Would L{offer_guaranteed} accept a message of C{size} bytes now?"""
        queue = self._guaranteed
        return queue.admits_by_burst() or queue.fits(work_units(size))

    def _push(self, queue, item, size, key, units=None):
        self._seq += 1
        self._waiting += 1
        if units is None:
            units = work_units(size)
        queue.push(_Entry(item, size, units, key, self._seq), self._blocked)

    # -- serving ---------------------------------------------------------------------

    def next(self):
        """Take the next item to write, in strict priority (S9.1, S9.3).

        @return: C{(queue_name, item, discard_indication)} or None when nothing can
            be served (all empty, or only blocked keys hold items).
            C{discard_indication} is True on the first message (D or G-1) delivered
            for a key after messages of that key were discarded; control frames never
            carry it and do not clear it.
        """
        for queue in self._in_order:
            if queue._ready:
                entry = queue.pop_ready()
                self._waiting -= 1
                if queue is self._control:
                    return queue.name, entry.item, False
                flagged = False
                if self._discarded_keys and entry.key in self._discarded_keys:
                    self._discarded_keys.discard(entry.key)
                    flagged = True
                if queue is self._guaranteed:
                    self._maybe_guaranteed_room()
                return queue.name, entry.item, flagged
        return None

    def has_pending(self):
        """True when L{next} would return an item now."""
        return any(queue.ready for queue in self._in_order)

    def _maybe_guaranteed_room(self):
        if self._guaranteed_refused and self.has_room_for_guaranteed():
            self._guaranteed_refused = False
            if self._on_guaranteed_room is not None:
                self._on_guaranteed_room()

    # -- keys ------------------------------------------------------------------------

    def block(self, key):
        """Hold C{key}'s items (its link has no credit): queued, counted, not served."""
        self._blocked.add(key)
        for queue in self._in_order:
            queue.block(key)

    def unblock(self, key):
        """Serve C{key}'s items again, in their order."""
        self._blocked.discard(key)
        for queue in self._in_order:
            queue.unblock(key)

    def is_blocked(self, key):
        """True while C{key} is blocked."""
        return key in self._blocked

    def withdraw(self, key):
        """Remove everything queued for C{key} (its link went away).

        Nothing is counted as discarded or delivered, and the key forgets its blocked
        state and its pending discard indication.

        @return: C{[(queue_name, item), ...]}, in service order then oldest first; the
            caller gives unsettled (G-1) deliveries back to the core.
        """
        self._blocked.discard(key)
        self._discarded_keys.discard(key)
        taken = []
        for queue in self._in_order:
            taken.extend((queue.name, entry.item) for entry in queue.withdraw(key))
        self._waiting -= len(taken)
        self._maybe_guaranteed_room()
        return taken

    # -- statistics ------------------------------------------------------------------

    @property
    def queued_messages(self):
        """Messages waiting in all five queues (blocked keys' included)."""
        return self._waiting

    def waiting_for(self, key):
        """Messages of C{key} waiting in the five queues (blocked or not).

        Counted where they wait, on demand: a count kept beside the queues would be
        a second owner of the same number, and this is asked far less often than
        messages come and go (when a key's credit is worked out).
        """
        if not self._waiting:
            return 0
        count = 0
        for queue in self._in_order:
            entries = queue._by_key.get(key)
            if entries is not None:
                count += len(entries)
        return count

    @property
    def control_waiting(self):
        """Control items waiting on C-1: newer control output must queue behind them."""
        return self._control.messages

    @property
    def queued_units(self):
        """Work units waiting in all five queues."""
        return sum(queue.units for queue in self._in_order)

    @property
    def queued_bytes(self):
        """Bytes (as offered) waiting in all five queues: this client's share of the
        egress buffer budget (S9.6)."""
        return sum(queue.bytes for queue in self._in_order)

    @property
    def discards(self):
        """The client's egress congestion discard counter: all D queues (S9.2)."""
        return sum(queue.discards for queue in self._in_order)

    def queue_stats(self, name):
        """Return the L{QueueStats} of queue C{name} ("C-1" ... "G-1")."""
        return self._queues[name].stats()

    def stats(self):
        """Return the L{QueueStats} of every queue, in service order (C-1 first)."""
        return [queue.stats() for queue in self._in_order]

    def clear_stats(self):
        """Zero discards and deliveries; the high-water mark restarts from now (S9.7)."""
        for queue in self._in_order:
            queue.clear_stats()
