"""
Ring queues (S7.1, S7.2): a queue of fixed size that never grows and never holds a
producer back. When it holds its size, the oldest waiting message is dropped (counted
in the queue's C{removed}) as a new one comes in.

A ring queue is an ordinary L{mqgate.core.destinations.Queue} with REMOVE_OLDEST
limits that send nothing to the DMQ: the queue's own removal (S2.3) already drops the
oldest and never blocks, and one mechanism serves the DMQ, an operator's REMOVE_OLDEST
queue and a ring. As in Artemis (FACTS 2), a message in delivery cannot be dropped, so
the queue may hold more than its size while consumers hold deliveries unsettled.
"""

from mqgate.core.limits import REMOVE_OLDEST, Limits

__all__ = ["ring_limits", "is_ring", "ring_size"]


def ring_limits(size):
    """The L{Limits} of a ring queue of C{size} messages.

    @raise ValueError: C{size} is not a positive whole number.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a ring queue's size must be a whole number of messages, 1 or"
                         f" more, not {size!r}")
    return Limits(size, -1, REMOVE_OLDEST, use_dmq=False)


def is_ring(queue):
    """Whether C{queue} is a ring queue (its limits are a ring's)."""
    limits = queue.limits
    return (limits.behavior == REMOVE_OLDEST and not limits.use_dmq
            and limits.max_count > 0 and limits.max_bytes < 0)


def ring_size(queue):
    """The size of ring queue C{queue}."""
    return queue.limits.max_count
