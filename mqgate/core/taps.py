"""
Where captured copies leave the core: the hand-off between message capture in the
core (diverts, ring queues, capture subscriptions) and whatever keeps and shows them
(the capture index, the live tail).

The core knows a capture subscription only as a ring queue that an in-process
consumer drains. For each copy it takes from that queue it builds one
L{CapturedCopy} and gives it to the subscription's L{ICaptureSink}. The sink decodes
what it needs from the encoded message, off the production path: the core never
decodes a body (design rule 2).
"""

import attr
from zope.interface import Interface

__all__ = ["CapturedCopy", "ICaptureSink"]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CapturedCopy:
    """One routed message, as a capture subscription saw it.

    @ivar subscription: the capture subscription's name.
    @ivar node: the broker instance that copied it (capture is per node).
    @ivar address: the address the producer sent to.
    @ivar kind: C{"queue"} or C{"topic"}.
    @ivar routed_to: the queues the original reached, in routing order, or C{None}
        where the core cannot tell (a topic: one copy per routed message, whatever
        the number of subscriptions it reached).
    @ivar captured_at: wall-clock time of the copy, seconds since the epoch.
    @ivar message: the copy as the core holds it (L{mqgate.core.message.BrokerMessage}):
        its C{payload} is the encoded message, shared with the original, never
        changed.
    @ivar original_id: the broker's own id of the original message, which an operator
        can look for on the broker ("verify on broker"), or C{None} when the copy
        carries none; C{verify_reason} then says why.
    @ivar verify_reason: why "verify on broker" cannot be offered for this copy, or
        C{None} when it can.
    """

    subscription: str
    node: str
    address: str
    kind: str
    routed_to: tuple | None
    captured_at: float
    message: object
    original_id: str | None = None
    verify_reason: str | None = None


class ICaptureSink(Interface):
    """Takes the copies of one or more capture subscriptions."""

    def ingest(copy):
        """Take one L{CapturedCopy}.

        Called on the reactor thread; must not block and must not raise. Whatever it
        cannot keep (its own bounds: body size, stored size, retention) it drops and
        counts itself.
        """

    def dropped(subscription, reason, count):
        """The core dropped C{count} copies of C{subscription} before the sink saw
        them, for C{reason} (C{"ring"}: the ring queue was full and its oldest copy
        went; C{"rate"}: beyond the subscription's ingest rate; C{"filter"} is not a
        drop and is never reported)."""
