"""
The messages waiting in a queue (S2.1, S2.9, S2.4, S2.6): its backlog.

A L{Backlog} holds two kinds of entries, in the order a queue delivers them:
 - one FIFO deque per priority level (S2.9: higher priority first, FIFO within a
   priority). An entry is a L{BrokerMessage} that never left, or a L{Delivery} given
   back (released, or its consumer closed), which keeps its delivery count and waits at
   the head of its level;
 - the I{parked} deliveries: given back MODIFIED(undeliverable-here), each waits for any
   consumer but the one that refused it. They are few, so they are a plain list, looked
   at before the levels.

The backlog decides nothing about consumers: the queue's dispatch loop asks it for
entries with L{select}, giving it a chooser that says which consumer takes a message.
What the backlog owns is what is true of a waiting message whoever takes it: its
place, when it began to wait (S5.1), whether it expired (L{expired_at}, the one
expiry check: an expired message is taken out and handed back to the queue in a list,
never to a chooser), and whether its body is paged out (S2.6: nothing at or after a
paged message is handed over, so the order holds while its body is read back).

No outside code runs while the backlog changes: the chooser only reads consumers'
credit and selectors, and the queue counts and dead-letters the expired messages once
L{Backlog.select} returned.
"""

import heapq
from collections import deque

from mqgate.core.deliveries import Delivery
from mqgate.core.message import MAX_PRIORITY

__all__ = ["Backlog", "STOP"]

_LEVELS = MAX_PRIORITY + 1

#: What a chooser returns when no consumer can take anything more: selection stops.
STOP = object()


def message_of(entry):
    """The message of a backlog entry (a message, or a delivery given back)."""
    return entry.message if type(entry) is Delivery else entry


def expired_at(message, now):
    """Whether C{message} expired by C{now} (S2.9)."""
    expiry = message.expiry
    return expiry is not None and expiry <= now


def _arrival(entry):
    seq = message_of(entry).seq
    return -1 if seq is None else seq


class Backlog:
    """The waiting messages of one queue.

    @param seconds: the clock (C{clock.seconds}), read only for a message that waits or
        carries an expiry.
    @ivar depth: how many entries wait (levels and parked).
    @ivar paged: how many of them wait with their body paged out (S2.6); kept by the
        L{mqgate.core.paging.Pager} through L{paged_out} and L{paged_in}.
    """

    __slots__ = ("depth", "paged", "_levels", "_hi", "_parked", "_expiring", "_ticket",
                 "_seconds")

    def __init__(self, seconds):
        self.depth = 0
        self.paged = 0
        self._levels = [deque() for _ in range(_LEVELS)]
        # Highest priority level holding something, -1 when the levels are empty.
        self._hi = -1
        # [delivery, consumer it must not go to] pairs, in the order they were parked.
        self._parked = []
        # S2.9: a heap of (expiry, ticket, message) of the messages with an expiry that
        # waited here (some may have left since: reap checks), with a tie-breaker.
        self._expiring = []
        self._ticket = 0
        self._seconds = seconds

    def __repr__(self):
        return f"<Backlog depth={self.depth} parked={len(self._parked)}>"

    # -- what waits -------------------------------------------------------------------

    def expired(self, message):
        """Whether C{message} expired (S2.9): the one expiry check of a queue."""
        return message.expiry is not None and expired_at(message, self._seconds())

    @property
    def parked(self):
        """How many deliveries wait for a consumer other than the one that refused
        them."""
        return len(self._parked)

    def levels(self):
        """The non-empty priority levels (deques of entries), highest priority first,
        for the pager to walk (it changes entries' bodies, never the deques)."""
        levels = self._levels
        return [levels[p] for p in range(self._hi, -1, -1) if levels[p]]

    def snapshot(self):
        """C{(message, delivery_count)} of every entry, in delivery order: levels
        highest first, then the parked ones (for browsing)."""
        result = [(message_of(e), e.delivery_count)
                  for level in reversed(self._levels) for e in level]
        result.extend((d.message, d.delivery_count) for d, _ in self._parked)
        return result

    def messages(self):
        """Every waiting message (levels, then parked)."""
        result = [message_of(e) for level in self._levels for e in level]
        result.extend(d.message for d, _ in self._parked)
        return result

    def oldest_arrival(self):
        """When the oldest waiting message began to wait, or C{None} (S5.1). Each
        level is in arrival order, so it is one of the heads: a dozen looks at most."""
        heads = [level[0] for level in self._levels if level]
        heads.extend(d for d, _ in self._parked[:1])
        oldest = None
        for entry in heads:
            arrived = message_of(entry).arrived
            if arrived is not None and (oldest is None or arrived < oldest):
                oldest = arrived
        return oldest

    # -- entries coming in ----------------------------------------------------------

    def append(self, message):
        """A new message waits, at the tail of its priority level."""
        # When it began to wait is the oldest-message age of the metrics (S5.1).
        message.arrived = self._seconds()
        priority = message.priority
        self._levels[priority].append(message)
        self.depth += 1
        if priority > self._hi:
            self._hi = priority
        if message.expiry is not None:
            self._index_expiry(message)

    def push_front(self, deliveries):
        """Deliveries given back wait again at the head of their levels, in the order
        given, ahead of anything that came later (S8.1, design rule 3)."""
        levels = self._levels
        for delivery in reversed(deliveries):
            self._came_back(delivery.message)
            priority = delivery.message.priority
            levels[priority].appendleft(delivery)
            if priority > self._hi:
                self._hi = priority
        self.depth += len(deliveries)

    def park(self, delivery, avoid):
        """C{delivery} waits for any consumer but C{avoid} (undeliverable-here)."""
        self._came_back(delivery.message)
        self._parked.append([delivery, avoid])
        self.depth += 1

    def unpark(self, consumer):
        """What waited for "any consumer but C{consumer}" (which went) waits for any
        consumer again, at the head of its level."""
        freed = [d for d, avoid in self._parked if avoid is consumer]
        if freed:
            self._parked = [pair for pair in self._parked if pair[1] is not consumer]
            self.depth -= len(freed)
            self.push_front(freed)

    def put_back(self, entries):
        """Entries L{select} took and the queue could not hand over (their consumer
        lost its credit meanwhile): back where they were. A parked one comes as its
        C{[delivery, avoid]} pair. Among the levels, a stable merge by arrival keeps
        what was given back meanwhile at the head where it is."""
        parked = [e for e in entries if type(e) is list]
        if parked:
            self._parked[:0] = parked
        levels = self._levels
        plain = [e for e in entries if type(e) is not list]
        for priority in {message_of(e).priority for e in plain}:
            group = [e for e in plain if message_of(e).priority == priority]
            levels[priority] = deque(heapq.merge(levels[priority], group, key=_arrival))
            if priority > self._hi:
                self._hi = priority
        self.depth += len(entries)

    def _came_back(self, message):
        if message.arrived is None:
            # Handed over at once when it came; waiting from now on (S5.1).
            message.arrived = self._seconds()
        if message.expiry is not None:
            self._index_expiry(message)

    # -- entries going out ----------------------------------------------------------

    def select(self, choose, plan, expired):
        """Take out, in delivery order, the entries C{choose} gives a consumer.

        C{choose(message, avoid)} returns the consumer that takes the message, C{None}
        (none does: it keeps waiting, in its place) or L{STOP} (no consumer takes
        anything more). An expired message is taken out and appended to the list
        C{expired} instead (the queue counts it once selection is over). Selection
        stops, too, at a paged message (S2.6).

        @param plan: a list to which C{(consumer, message, delivery_count, entry)} is
            appended for each entry taken (what the hand-over needs, read once); a
            parked entry is its C{[delivery, avoid]} pair (L{put_back} takes entries
            as they are).
        @return: C{True} if it stopped at a paged message.
        """
        # One clock read per selection, and only for a message with an expiry.
        now = None
        if self._parked:
            now = self._seconds()
            if self._select_parked(choose, plan, expired, now):
                return False
        levels = self._levels
        add = plan.append
        for priority in range(self._hi, -1, -1):
            level = levels[priority]
            take = level.popleft
            kept = None
            outcome = None
            taken = 0
            while level:
                entry = take()
                message = entry.message if type(entry) is Delivery else entry
                if message.paged:
                    level.appendleft(entry)
                    outcome = True
                    break
                if message.expiry is not None:
                    if now is None:
                        now = self._seconds()
                    if expired_at(message, now):
                        taken += 1
                        expired.append(message)
                        continue
                consumer = choose(message, None)
                if consumer is None:
                    if kept is None:
                        kept = []
                    kept.append(entry)
                elif consumer is STOP:
                    level.appendleft(entry)
                    outcome = False
                    break
                else:
                    taken += 1
                    add((consumer, message, entry.delivery_count, entry))
            self.depth -= taken
            if kept:
                level.extendleft(reversed(kept))
            if outcome is not None:
                self._lower_hi()
                return outcome
        self._lower_hi()
        return False

    def _select_parked(self, choose, plan, expired, now):
        # Rare (MODIFIED undeliverable-here): each goes to the consumer the chooser
        # gives, never the one that refused it. True when the chooser said STOP.
        kept = []
        parked = self._parked
        for index, pair in enumerate(parked):
            message = pair[0].message
            if expired_at(message, now):
                self.depth -= 1
                expired.append(message)
                continue
            consumer = choose(message, pair[1])
            if consumer is STOP:
                kept.extend(parked[index:])
                self._parked = kept
                return True
            if consumer is None:
                kept.append(pair)
            else:
                self.depth -= 1
                plan.append((consumer, message, pair[0].delivery_count, pair))
        self._parked = kept
        return False

    def remove_head(self, oldest, newest=None):
        """Take out the oldest waiting message (C{oldest}) or the head of the lowest
        priority level, for a queue over its limits (S2.3); C{None} when nothing in
        the levels may go (the oldest is C{newest}, the message just published)."""
        levels = self._levels
        live = [level for level in levels if level]
        if not live:
            return None
        if oldest:
            level = min(live, key=lambda lv: _arrival(lv[0]))
            if level[0] is newest:
                return None
        else:
            level = live[0]
        entry = level.popleft()
        self.depth -= 1
        self._lower_hi()
        return message_of(entry)

    def reap(self, now):
        """Take out the waiting messages that expired by C{now} and return them (S2.9).
        Costs nothing while the earliest expiry is in the future; one pass over the
        waiting messages only when some expired."""
        expiring = self._expiring
        if not expiring or expiring[0][0] > now:
            return []
        due = {}
        while expiring and expiring[0][0] <= now:
            message = heapq.heappop(expiring)[2]
            due[id(message)] = message

        def is_due(message):
            # By identity: an id is only unique among live objects.
            return due.get(id(message)) is message

        removed = []
        levels = self._levels
        for priority, level in enumerate(levels):
            if level and any(is_due(message_of(e)) for e in level):
                kept = deque()
                for entry in level:
                    if is_due(message_of(entry)):
                        removed.append(message_of(entry))
                    else:
                        kept.append(entry)
                levels[priority] = kept
        if any(is_due(d.message) for d, _ in self._parked):
            removed.extend(d.message for d, _ in self._parked if is_due(d.message))
            self._parked = [pair for pair in self._parked if not is_due(pair[0].message)]
        self.depth -= len(removed)
        self._hi = max((p for p, level in enumerate(levels) if level), default=-1)
        self._prune_expiring()
        return removed

    def clear(self):
        """Take out everything waiting; return the messages."""
        messages = self.messages()
        for level in self._levels:
            level.clear()
        self._parked = []
        self.depth = 0
        self._hi = -1
        return messages

    # -- paging (S2.6) ---------------------------------------------------------------

    def paged_out(self, count):
        """C{count} more waiting messages lost their body to the pager."""
        self.paged += count

    def paged_in(self):
        """A paged message got its body back, or left."""
        self.paged -= 1

    # -- book-keeping ---------------------------------------------------------------

    def _lower_hi(self):
        levels = self._levels
        hi = self._hi
        while hi >= 0 and not levels[hi]:
            hi -= 1
        self._hi = hi

    def _index_expiry(self, message):
        # The ticket keeps heap entries apart (messages do not compare).
        self._ticket += 1
        heapq.heappush(self._expiring, (message.expiry, self._ticket, message))
        if len(self._expiring) > 2 * self.depth + 64:
            self._prune_expiring()

    def _prune_expiring(self):
        # Messages that left (delivered, purged) stay in the heap until their expiry
        # passes; rebuilt from what waits once it is twice as large, so it stays
        # bounded by the depth (design rule 4), at an amortised O(1).
        if len(self._expiring) <= 2 * self.depth + 64:
            return
        messages = self.messages()
        self._expiring = [(m.expiry, n, m) for n, m in enumerate(messages)
                          if m.expiry is not None]
        self._ticket = len(messages)
        heapq.heapify(self._expiring)

    @property
    def expiry_index_size(self):
        """Entries in the expiry index (bounded by twice the depth, plus a little)."""
        return len(self._expiring)
