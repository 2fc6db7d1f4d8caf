"""
Destination limits (S2.3): how much a queue may hold and what a full queue does to its
producers. Pure values; the queue in L{mqgate.core.destinations} applies them.
"""

import sys

from mqgate.errors import ProtocolError

__all__ = ["FLOW_CONTROL", "REJECT_NEWEST", "LIMIT_BEHAVIORS", "Limits", "UNLIMITED",
           "ResourceLimitExceeded"]

#: What a full destination does to its producers (S2.3; FACTS 1.6 names the others).
FLOW_CONTROL = "FLOW_CONTROL"
REJECT_NEWEST = "REJECT_NEWEST"
LIMIT_BEHAVIORS = (FLOW_CONTROL, REJECT_NEWEST)

# A queue that filled up under FLOW_CONTROL lets its producers go again once it is down
# to 90 % of its limit: waking them at the limit itself would block them again after one
# message, a flow frame per message.
_LOW_WATER_PERCENT = 90
_UNLIMITED = sys.maxsize


class ResourceLimitExceeded(ProtocolError):
    """A REJECT_NEWEST destination is full: the message was not enqueued (S2.3)."""

    condition = "amqp:resource-limit-exceeded"


class Limits:
    """How much one queue may hold, and what happens when it is full (S2.3).

    @ivar max_count: messages held (waiting plus in flight); -1 means no limit.
    @ivar max_bytes: bytes of the waiting messages; -1 means no limit.
    @ivar behavior: L{FLOW_CONTROL} or L{REJECT_NEWEST}.
    """

    __slots__ = ("max_count", "max_bytes", "behavior", "full_count", "full_bytes",
                 "low_count", "low_bytes")

    def __init__(self, max_count=-1, max_bytes=-1, behavior=FLOW_CONTROL):
        if behavior not in LIMIT_BEHAVIORS:
            raise ValueError(f"limit behavior {behavior!r} is not one of {LIMIT_BEHAVIORS}")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.behavior = behavior
        # Precomputed thresholds, so publishing only compares. full_count is one less
        # than the limit because the queue compares what it held before the message.
        self.full_count = _UNLIMITED if max_count < 0 else max_count - 1
        self.full_bytes = _UNLIMITED if max_bytes < 0 else max_bytes
        self.low_count = _low_water(max_count, behavior)
        self.low_bytes = _low_water(max_bytes, behavior)

    def __repr__(self):
        return (f"<Limits max_count={self.max_count} max_bytes={self.max_bytes}"
                f" {self.behavior}>")


def _low_water(limit, behavior):
    if limit < 0:
        return _UNLIMITED
    if behavior == REJECT_NEWEST:
        return limit  # room for one more is all a rejecting queue waits for
    return max(1, limit * _LOW_WATER_PERCENT // 100)


UNLIMITED = Limits()
