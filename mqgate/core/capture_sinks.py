"""
A capture sink that keeps nothing and counts (L{mqgate.core.taps.ICaptureSink}): what
the broker uses when no capture index is configured, and what the figures of
C{query capture} and the metrics come from until one is. It applies the bounds a sink
owns that can be applied without keeping anything: a body longer than the
subscription's body bound counts as truncated, and the bytes it would have stored
count towards the stored-size bound, past which the subscription is degraded.
"""

from zope.interface import implementer

from mqgate.core.taps import ICaptureSink

__all__ = ["CountingSink"]


class _Figures:
    __slots__ = ("copies", "bytes", "truncated", "dropped", "degraded")

    def __init__(self):
        self.copies = 0
        self.bytes = 0
        self.truncated = 0
        self.dropped = {}
        self.degraded = False


@implementer(ICaptureSink)
class CountingSink:
    """Counts the copies of every subscription.

    @param bounds_of: C{bounds_of(subscription)}: its L{CaptureBounds}, or C{None}
        (no body or stored-size bound applies).
    """

    def __init__(self, bounds_of=lambda name: None):
        self._bounds_of = bounds_of
        self._figures = {}

    def figures(self, subscription):
        """C{dict} of the counts for C{subscription} (zeros when it had none)."""
        f = self._figures.get(subscription) or _Figures()
        return {"copies": f.copies, "stored_bytes": f.bytes, "truncated": f.truncated,
                "dropped": dict(f.dropped), "degraded": f.degraded}

    def forget(self, subscription):
        self._figures.pop(subscription, None)

    def ingest(self, copy):
        f = self._figures.get(copy.subscription)
        if f is None:
            f = self._figures[copy.subscription] = _Figures()
        size = copy.message.size
        bounds = self._bounds_of(copy.subscription)
        if bounds is not None:
            if size > bounds.body_bytes:
                f.truncated += 1
                size = bounds.body_bytes
            if f.bytes + size > bounds.stored_bytes:
                f.degraded = True
                f.dropped["stored"] = f.dropped.get("stored", 0) + 1
                return
        f.copies += 1
        f.bytes += size

    def dropped(self, subscription, reason, count):
        f = self._figures.get(subscription)
        if f is None:
            f = self._figures[subscription] = _Figures()
        f.dropped[reason] = f.dropped.get(reason, 0) + count
