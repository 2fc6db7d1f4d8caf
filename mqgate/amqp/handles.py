"""
Numbers a peer uses to name our endpoints: channels (sessions, Part 2 section 2.5.1) and
handles (links, section 2.6.2).

Section 2.7.3 recommends that "implementations always assign the lowest available
handle"; sections 2.7.2 (begin) and 2.7.1 (open) cap the numbers with the partner's
handle-max and channel-max. A L{NumberPool} hands out the lowest free number in O(log n): a counter
for numbers never used, and a heap of numbers given back. Taking a number when all of
them up to the limit are in use returns None, so the caller refuses cleanly instead of
searching for ever.
"""

import heapq

__all__ = ["NumberPool"]


class NumberPool:
    """The numbers 0..C{limit} with the lowest free one first.

    @ivar limit: the highest number that may be handed out (inclusive); it may be
        lowered later (the partner's handle-max or channel-max arrives after we
        started), which only affects numbers not yet handed out.
    """

    __slots__ = ("limit", "_next", "_freed", "_in_use")

    def __init__(self, limit):
        self.limit = limit
        self._next = 0          # every number below this was handed out at least once
        self._freed = []        # heap of numbers below _next given back
        self._in_use = 0

    def __len__(self):
        """How many numbers are handed out now."""
        return self._in_use

    def take(self):
        """The lowest free number, now in use; None when none is left up to C{limit}."""
        freed = self._freed
        if freed and freed[0] <= self.limit:
            number = heapq.heappop(freed)
        elif self._next <= self.limit:
            # No freed number is at or below the limit (a limit lowered since): the
            # next never-used one, if the limit allows it.
            number = self._next
            self._next += 1
        else:
            return None
        self._in_use += 1
        return number

    def give_back(self, number):
        """C{number} is free again (its link or session is gone)."""
        self._in_use -= 1
        if number == self._next - 1:
            self._next = number   # the newest went first: no need to remember it
        else:
            heapq.heappush(self._freed, number)
