"""
Queues and topics: where messages wait and how they are handed to consumers (S2.1, S2.9).

A L{Queue} keeps one FIFO deque per priority level (S2.9: higher priority first, FIFO
within a priority) and a deque of "ready" consumers, those that currently have credit.
Dispatch takes the first ready consumer, hands it the head message and puts it at the
back of the ready deque if it still has credit, which gives round-robin among competing
consumers (S2.1) for the cost of two deque operations per message.

Three things keep the hot path cheap:
 - a message enqueued on an empty queue with a waiting consumer is handed over at once,
   without touching the priority deques;
 - the ready deque is cleaned lazily: a consumer whose credit fell to zero (or which was
   closed) is dropped when it reaches the front, so closing or draining never scans it;
 - the clock is read only for messages that carry an expiry, once per dispatch run.

Re-entrancy: C{target.deliver()} may call back into the core (settle, set credit, close,
publish). Only the outermost dispatch run takes entries out of the deques; a nested
request to dispatch just returns, and the outer loop, which re-reads all state after
every hand-over, picks up whatever the nested call changed.

A L{Topic} has no storage of its own: every subscription is a Queue (S2.1), and
publishing enqueues the same message object on each matching one.
"""

from collections import deque

from mqgate.core.addresses import topic_matches
from mqgate.core.deliveries import Delivery
from mqgate.core.message import MAX_PRIORITY

_LEVELS = MAX_PRIORITY + 1

_QUEUE_COUNTERS = ("messages_in", "messages_out", "delivered", "dropped", "rejected",
                   "expired")


class Queue:
    """A point-to-point queue, or the private queue of one topic subscription.

    Counters (plain ints, read them directly): C{messages_in} (enqueued),
    C{messages_out} (left for good: accepted, or handed to a pre-settled consumer),
    C{delivered} (hand-overs, redeliveries included), C{dropped} (discarded: rejected,
    or still held when the queue was deleted), C{rejected}, C{expired}, C{in_flight}
    (handed over, not yet settled).

    @ivar name: the queue name (for a subscription: a broker-made name).
    @ivar pattern: for a topic subscription, the topic name or pattern it matches;
        C{None} for a plain queue.
    @ivar durable_key: C{(container_id, durable_name)} of a durable subscription.
    @ivar temporary: made for a dynamic attach; deleted with its creator.
    @ivar deleted: set when the broker deletes it.
    """

    __slots__ = ("name", "pattern", "durable_key", "temporary", "deleted",
                 "_levels", "_hi", "_count", "_parked", "_park_gen", "_ready",
                 "_consumers", "_dispatching", "_seconds") + _QUEUE_COUNTERS + (
                     "in_flight",)

    def __init__(self, name, clock, *, pattern=None, durable_key=None, temporary=False):
        self.name = name
        self.pattern = pattern
        self.durable_key = durable_key
        self.temporary = temporary
        self.deleted = False
        self._levels = [deque() for _ in range(_LEVELS)]
        # Highest priority level holding something, -1 when the levels are empty.
        self._hi = -1
        self._count = 0
        # Deliveries settled MODIFIED(undeliverable-here): they wait for another consumer.
        self._parked = []
        self._park_gen = 0
        self._ready = deque()
        self._consumers = []
        self._dispatching = False
        self._seconds = clock.seconds
        for counter in _QUEUE_COUNTERS:
            setattr(self, counter, 0)
        self.in_flight = 0

    def __repr__(self):
        return (f"<Queue {self.name!r} depth={self.depth} in_flight={self.in_flight}"
                f" consumers={len(self._consumers)}>")

    # -- introspection ----------------------------------------------------------------

    @property
    def depth(self):
        """Messages waiting to be delivered."""
        return self._count + len(self._parked)

    @property
    def held(self):
        """Messages the queue is responsible for: waiting plus in flight."""
        return self._count + len(self._parked) + self.in_flight

    @property
    def consumers(self):
        """The consumers attached, in attach order (a copy)."""
        return list(self._consumers)

    def stats(self):
        """A snapshot of the counters as a dict."""
        result = {name: getattr(self, name) for name in _QUEUE_COUNTERS}
        result.update(depth=self.depth, held=self.held, in_flight=self.in_flight,
                      consumers=len(self._consumers))
        return result

    # -- producing --------------------------------------------------------------------

    def publish(self, message):
        """Enqueue C{message} and deliver it at once if a consumer has credit."""
        self.messages_in += 1
        ready = self._ready
        if ready and not self._count and not self._dispatching and not self._parked:
            # The fast path: nothing waits, so this message is next for whoever is ready.
            consumer = ready.popleft()
            if consumer.credit > 0:
                expiry = message.expiry
                if expiry is not None and expiry <= self._seconds():
                    self.expired += 1
                    ready.appendleft(consumer)
                    return
                self._dispatching = True
                try:
                    self._hand(consumer, message, message.delivery_count)
                finally:
                    self._dispatching = False
                if consumer.credit > 0:
                    ready.append(consumer)
                else:
                    consumer._in_ready = False
                if self._count or self._parked:
                    self.dispatch()
                return
            consumer._in_ready = False
        priority = message.priority
        self._levels[priority].append(message)
        self._count += 1
        if priority > self._hi:
            self._hi = priority
        if ready and not self._dispatching:
            self.dispatch()

    enqueue = publish

    # -- consumers --------------------------------------------------------------------

    def attach(self, consumer):
        """Add a competing consumer (it receives nothing until it has credit)."""
        self._consumers.append(consumer)

    def offer(self, consumer):
        """A consumer now has credit: put it in the ready rotation and dispatch."""
        if not consumer._in_ready:
            consumer._in_ready = True
            self._ready.append(consumer)
        self.dispatch()

    def detach(self, consumer, pending):
        """Remove a closed consumer and take back its unsettled deliveries.

        C{pending} go back at the head, in their original order, ahead of anything that
        arrived later (S8.1, ARCHITECTURE rule 3); what was waiting for "any consumer
        but this one" becomes available to every consumer again.
        """
        try:
            self._consumers.remove(consumer)
        except ValueError:
            pass
        if consumer._in_ready:
            # Drop it now rather than lazily, so an idle queue does not keep the closed
            # consumer (and its target) alive. Not found: the running dispatch loop
            # holds it and lets it go when it sees no credit.
            try:
                self._ready.remove(consumer)
                consumer._in_ready = False
            except ValueError:
                pass
        self.in_flight -= len(pending)
        self._push_front(pending)
        if self._parked:
            self._unpark(consumer)
        self.dispatch()

    def requeue(self, delivery):
        """Put a settled-back delivery at the head of its priority level and dispatch."""
        self._push_front((delivery,))
        self.dispatch()

    def park(self, delivery, consumer):
        """Keep C{delivery} for any consumer except C{consumer} (undeliverable-here)."""
        delivery._avoid = consumer
        self._parked.append(delivery)
        self._park_gen += 1
        self.dispatch()

    # -- dispatch ---------------------------------------------------------------------

    def dispatch(self):
        """Hand waiting messages to consumers with credit, round-robin, priority first."""
        if self._dispatching or not self._ready:
            return
        self._dispatching = True
        try:
            while True:
                park_gen = self._park_gen
                if self._parked:
                    self._dispatch_parked()
                self._dispatch_levels()
                if park_gen == self._park_gen or not self._parked or not self._ready:
                    break
        finally:
            self._dispatching = False

    def _dispatch_levels(self):
        ready = self._ready
        levels = self._levels
        now = None
        while ready and self._count:
            consumer = ready.popleft()
            if consumer.credit <= 0:
                consumer._in_ready = False
                continue
            level = levels[self._hi]
            entry = level.popleft()
            self._count -= 1
            if not level:
                self._lower_hi()
            message = entry.message if type(entry) is Delivery else entry
            expiry = message.expiry
            if expiry is not None:
                if now is None:
                    now = self._seconds()
                if expiry <= now:
                    self.expired += 1
                    ready.appendleft(consumer)
                    continue
            self._hand(consumer, message, entry.delivery_count)
            if consumer.credit > 0:
                ready.append(consumer)
            else:
                consumer._in_ready = False

    def _dispatch_parked(self):
        # Rare path (MODIFIED undeliverable-here): each parked delivery goes to the first
        # ready consumer that is not the one that refused it.
        ready = self._ready
        index = 0
        while index < len(self._parked) and ready:
            parked = self._parked[index]
            consumer = self._take_ready(parked._avoid)
            if consumer is None:
                index += 1
                continue
            del self._parked[index]
            parked._avoid = None
            expiry = parked.message.expiry
            if expiry is not None and expiry <= self._seconds():
                self.expired += 1
                ready.appendleft(consumer)
                continue
            self._hand(consumer, parked.message, parked.delivery_count)
            if consumer.credit > 0:
                ready.append(consumer)
            else:
                consumer._in_ready = False

    def _take_ready(self, avoid):
        for position, consumer in enumerate(self._ready):
            if consumer.credit > 0 and consumer is not avoid:
                del self._ready[position]
                return consumer
        return None

    def _hand(self, consumer, message, delivery_count):
        delivery = Delivery(message, consumer, delivery_count)
        # Book-keeping first: the target may settle or close re-entrantly.
        consumer.credit -= 1
        self.delivered += 1
        if consumer.presettled:
            self.messages_out += 1
        else:
            consumer._unsettled[delivery] = True
            self.in_flight += 1
        consumer.target.deliver(delivery)

    # -- storage ----------------------------------------------------------------------

    def _lower_hi(self):
        if not self._count:
            self._hi = -1
            return
        levels = self._levels
        hi = self._hi - 1
        while not levels[hi]:
            hi -= 1
        self._hi = hi

    def _push_front(self, deliveries):
        levels = self._levels
        for delivery in reversed(deliveries):
            priority = delivery.message.priority
            levels[priority].appendleft(delivery)
            if priority > self._hi:
                self._hi = priority
        self._count += len(deliveries)

    def _unpark(self, consumer):
        freed = [d for d in self._parked if d._avoid is consumer]
        if freed:
            self._parked = [d for d in self._parked if d._avoid is not consumer]
            for delivery in freed:
                delivery._avoid = None
            self._push_front(freed)

    def discard(self):
        """Mark the queue deleted and drop what it holds (counted as dropped)."""
        self.deleted = True
        self.dropped += self._count + len(self._parked)
        for level in self._levels:
            level.clear()
        self._parked = []
        self._count = 0
        self._hi = -1
        for consumer in self._ready:
            consumer._in_ready = False
        self._ready.clear()


class SubscriptionIndex:
    """Every topic subscription queue, with a generation number bumped on each change.

    Topics cache the tuple of subscriptions matching their name and recompute it
    lazily when the generation moved, so publishing never matches patterns.
    """

    __slots__ = ("gen", "_queues")

    def __init__(self):
        self.gen = 0
        self._queues = {}

    def __len__(self):
        return len(self._queues)

    def __iter__(self):
        return iter(list(self._queues))

    def add(self, queue):
        """Register a subscription queue."""
        self._queues[queue] = None
        self.gen += 1

    def remove(self, queue):
        """Forget a subscription queue."""
        if self._queues.pop(queue, False) is None:
            self.gen += 1

    def matching(self, name):
        """The subscription queues whose pattern matches the topic C{name}, in the
        order they were made."""
        return tuple(q for q in self._queues if topic_matches(q.pattern, name))


class Topic:
    """A publish/subscribe destination (S2.1): copies go to every matching subscription.

    Counters: C{messages_in} (published), C{messages_out} (copies enqueued on
    subscriptions), C{dropped} (published while no subscription matched).
    """

    __slots__ = ("name", "temporary", "deleted", "messages_in", "messages_out",
                 "dropped", "_index", "_gen", "_subs")

    def __init__(self, name, index, *, temporary=False):
        self.name = name
        self.temporary = temporary
        self.deleted = False
        self.messages_in = 0
        self.messages_out = 0
        self.dropped = 0
        self._index = index
        self._gen = -1
        self._subs = ()

    def __repr__(self):
        return f"<Topic {self.name!r} in={self.messages_in}>"

    @property
    def subscriptions(self):
        """The subscription queues this topic currently feeds."""
        if self._gen != self._index.gen:
            self._refresh()
        return self._subs

    def _refresh(self):
        self._subs = self._index.matching(self.name)
        self._gen = self._index.gen

    def publish(self, message):
        """Enqueue C{message} (the same object) on every matching subscription; with
        none, drop it and count it."""
        self.messages_in += 1
        if self._gen != self._index.gen:
            self._refresh()
        subs = self._subs
        if not subs:
            self.dropped += 1
            return
        self.messages_out += len(subs)
        # A tuple snapshot: a subscriber closing re-entrantly cannot disturb the loop.
        for queue in subs:
            queue.publish(message)

    def stats(self):
        """A snapshot of the counters as a dict."""
        return {"messages_in": self.messages_in, "messages_out": self.messages_out,
                "dropped": self.dropped, "subscriptions": len(self.subscriptions)}
