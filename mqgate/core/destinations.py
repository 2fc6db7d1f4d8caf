"""
Queues and topics: where messages wait and how they are handed to consumers (S2.1, S2.9).

A L{Queue} keeps its waiting messages in a L{Backlog} (mqgate.core.backlog: priority
levels, deliveries given back or parked, the one expiry check) and a deque of "ready"
consumers, those that may have credit. Messages reach consumers in one of two ways:

 - the fast path: a message published while nothing waits, no run is going on and the
   first ready consumer has credit goes straight to it, without touching the backlog.
   This is most messages of a queue whose consumers keep up;
 - the dispatch loop (L{Queue.dispatch}): each round first I{plans}, asking the backlog
   for its entries in delivery order (higher priority first, FIFO within a priority,
   S2.9) and giving each to the first ready consumer with credit left in the round
   that accepts it (its selector, S2.8; not the consumer a parked delivery avoids);
   that consumer goes to the back of the ready deque, which is round-robin among
   competing consumers (S2.1). Planning calls no outside code. Then it I{hands over}
   the planned deliveries, in order.

Re-entrancy: C{target.deliver()} may call back into the core (settle, set credit,
close, publish). Such a call only changes the backlog or the ready deque and asks for
another round (C{_again}); it never starts a second loop. A planned delivery whose
consumer lost its credit (or went) before its turn goes back to the backlog, in its
place, for the next round. The state of the loop is two plain flags: C{_running} (a
run, or a fast-path hand-over, is going on) and C{_paused} (an operator paused the
consumers, S11.1): while either is set, dispatching only records that there is work.

A L{Topic} has no storage of its own: every subscription is a Queue (S2.1), and
publishing enqueues the same message object on each matching one.

Selectors (S2.8). A topic applies a subscription's selector before enqueueing, so a
subscription queue only ever holds what its consumer wants. A plain queue with at least
one selector consumer plans with the selectors: what no ready consumer accepts stays
where it is, in order, while later messages pass. Outside a run, everything waiting has
been refused by every ready consumer (a selector's verdict never changes), so a message
published then is tried alone.

Limits (S2.3, S2.7, design rule 4): a queue with L{Limits} is I{full} once the
messages it holds (waiting plus in flight) reach C{max_count}, or their bytes reach
C{max_bytes}. Publishing costs two integer comparisons more; the
queue never refuses anything itself: the producer decides (L{mqgate.core.broker.Producer}
raises for REJECT_NEWEST, registers as a waiter for FLOW_CONTROL). A full queue checks,
each time something leaves it, whether it is back under its low-water mark, and then
wakes its waiting producers, synchronously. A message counts, by number and by bytes,
from the moment it is enqueued until it leaves for good: handed to a pre-settled
consumer, or settled (L{Queue.settled}, which L{mqgate.core.deliveries.Consumer.settle}
calls with its size) in a way that does not give it back.

The broker-wide limits (S2.2) are counted at the same points: every queue adds what it
holds to the broker's L{SystemLimits} (messages and bytes, waiting or in flight),
which the producer checks before routing (L{mqgate.core.broker.Producer.send}).

Operators (S11.1: C{pause dst}, C{purge dst}, C{update dst}) act here off the hot path.
Pausing a queue's consumers sets C{_paused}: nothing is planned, and what arrives waits
in the backlog. Pausing producers sets the destination's C{holding} to its L{Pause}: a
producer that sends to it keeps the message (L{mqgate.core.broker.Producer}) and is
blocked like a producer of a full FLOW_CONTROL queue, until L{Pause.release}.
"""

import functools
import itertools
from collections import deque

from twisted.logger import Logger

from mqgate.core.addresses import topic_matches
from mqgate.core.backlog import STOP, Backlog
from mqgate.core.deliveries import Delivery
from mqgate.core.dead import EXPIRED, LOW_PRIORITY, OLDEST
from mqgate.core.limits import FLOW_CONTROL, REMOVE_OLDEST, UNLIMITED, SystemLimits
from mqgate.core.modes import DEFAULT_MODES, refusal
from mqgate.core.selectors import message_field

_log = Logger(namespace="mqgate.core")

#: A destination's states, as list/query dst show them (imqcmd's words).
RUNNING = "RUNNING"
PRODUCERS_PAUSED = "PRODUCERS_PAUSED"
CONSUMERS_PAUSED = "CONSUMERS_PAUSED"
PAUSED = "PAUSED"

# Subscription changes the index remembers for topics catching up (SubscriptionIndex).
_CHANGES_KEPT = 64


class _Operated:
    """What queues and topics share for operators (S11.1, C{pause dst}, C{list dst}):
    the producers attached by name, and the pause an operator put on them.

    Each destination lists C{attached}, C{pause} and C{holding} in its own
    C{__slots__} (this class has none, so the layout and the hot path's reads of
    C{holding} stay what they were) and calls L{_init_operated} from C{__init__}.
    """

    __slots__ = ()

    def _init_operated(self):
        self.attached = {}       # producers attached to it by name, in order
        self.pause = None        # the operator's Pause, or None: running
        self.holding = None      # the Pause while its producers are paused (one test)

    @property
    def producers(self):
        """How many producers are attached to it by name."""
        return len(self.attached)

    @property
    def state(self):
        """L{RUNNING}, L{PRODUCERS_PAUSED}, L{CONSUMERS_PAUSED} or L{PAUSED}."""
        pause = self.pause
        if pause is None or not (pause.producers or pause.consumers):
            return RUNNING
        if pause.producers and pause.consumers:
            return PAUSED
        return PRODUCERS_PAUSED if pause.producers else CONSUMERS_PAUSED


_QUEUE_COUNTERS = ("messages_in", "messages_out", "delivered", "dropped", "rejected",
                   "expired", "bytes_in", "bytes_out", "peak_held", "dead", "removed")


def drops_new(destination):
    """Whether a message sent to C{destination} now goes nowhere, silently: the queue
    (for a topic, the subscription) the last publish left full drops new messages
    (an address setting's full policy DROP, S7.1) instead of refusing them. Counted
    in that queue's C{dropped}; its sender is told the message was accepted."""
    queue = destination if type(destination) is Queue else destination.full
    if queue and queue.full and queue.limits.drops:
        queue.dropped += 1
        return True
    return False


class Queue(_Operated):
    """A point-to-point queue, or the private queue of one topic subscription.

    Counters (plain ints, read them directly): C{messages_in} (enqueued),
    C{messages_out} (left for good: accepted, or handed to a pre-settled consumer),
    C{delivered} (hand-overs, redeliveries included), C{dropped} (discarded: rejected,
    or still held when the queue was deleted), C{rejected}, C{expired}, C{in_flight}
    (handed over, not yet settled); for the metrics (S5.1), C{bytes_in} and
    C{bytes_out} (the bytes of C{messages_in} and C{messages_out}) and C{peak_held}
    (the most messages held at once).

    @ivar name: the queue name (for a subscription: a broker-made name).
    @ivar pattern: for a topic subscription, the topic name or pattern it matches;
        C{None} for a plain queue.
    @ivar durable_key: C{(container_id, durable_name)} of a durable subscription.
    @ivar selector: for a topic subscription, the compiled selector (S2.8) its topic
        applies before enqueueing; C{None} otherwise.
    @ivar temporary: made for a dynamic attach; deleted with its creator.
    @ivar creator: of a temporary queue, what stands for the connection that made it
        (only it may receive from the queue); C{None} otherwise.
    @ivar owner: of a durable subscription, the name of the user it belongs to, or
        C{None} (not known yet: stored by an older mqgate); C{None} otherwise.
    @ivar deleted: set when the broker deletes it.
    @ivar limits: the L{Limits} (S2.3).
    @ivar full: C{True} from the moment a limit is reached until the queue is back under
        its low-water mark.
    @ivar store: the L{mqgate.core.persistence.QueueStore} keeping this queue's
        persistent messages (S3.1), or C{None} (temporary queues, non-durable
        subscriptions, a broker without a store).
    @ivar backlog: the L{Backlog} of the messages waiting.
    """

    __slots__ = ("name", "pattern", "durable_key", "selector", "temporary", "creator",
                 "owner", "deleted", "backlog", "_ready", "_in_ready",
                 "_consumers", "_running", "_paused", "_again", "_planned", "_seconds", "_selective",
                 "limits", "full", "_bytes", "_waiters",
                 "_in_flight", "_flight_bytes", "store", "_system",
                 "attached", "pause", "holding", "modes", "_backups",
                 "dead_letters", "pager", "matches", "diverts", "limits_set",
                 "expiry_delay") + _QUEUE_COUNTERS

    def __init__(self, name, clock, *, pattern=None, durable_key=None, selector=None,
                 temporary=False, limits=UNLIMITED, system=None, dead_letters=None):
        self.name = name
        self.pattern = pattern
        self.durable_key = durable_key
        self.selector = selector
        self.temporary = temporary
        self.creator = None
        self.owner = None
        self.deleted = False
        self._seconds = clock.seconds
        self.backlog = Backlog(clock.seconds)
        # The consumers that may have credit, in round-robin order, and the same as a
        # set (the queue's own record of who is in the deque).
        self._ready = deque()
        self._in_ready = set()
        self._consumers = []
        # The dispatch loop's state (see the module docstring): a run is going on; an
        # operator paused the consumers; something changed during a run (the loop
        # goes round again).
        self._running = False
        self._paused = False
        self._again = False
        # Entries the running round took out of the backlog and has not handed over
        # yet: still waiting, as far as the counts go.
        self._planned = 0
        # S2.8: how many attached consumers have a selector this queue must apply.
        self._selective = 0
        for counter in _QUEUE_COUNTERS:
            setattr(self, counter, 0)
        self._in_flight = 0
        self.limits = limits
        self.full = False
        self._bytes = 0          # bytes of the messages held, in flight too (S2.3)
        self._flight_bytes = 0   # of which in flight
        self._waiters = {}       # producers blocked on this queue, in order
        self.store = None
        # The broker's totals (S2.2); a queue made on its own counts only for itself.
        self._system = SystemLimits() if system is None else system
        # S2.4: where its dead messages go (None: dropped).
        self.dead_letters = dead_letters
        self._init_operated()
        # Active and backup consumers (mqgate.core.modes): the backups wait here, in
        # attach order, outside _consumers and the ready deque.
        self.modes = DEFAULT_MODES
        self._backups = []
        # S2.6: the Pager that paged some of its messages out (mqgate.core.paging).
        self.pager = None
        # How a topic name is matched against its pattern: C{matches(pattern, name)}
        # (an MQ Light subscription's patterns have their own syntax, S8.5).
        self.matches = topic_matches
        # S7.1: the DivertSet of the diverts on this queue's address (None: none).
        self.diverts = None
        # S7.1: whether its limits are its own (an operator's, a ring's), which an
        # address setting leaves alone; and the expiry delay of the address setting
        # matching it (seconds, None: none), which its producers apply.
        self.limits_set = False
        self.expiry_delay = None

    def __repr__(self):
        return (f"<Queue {self.name!r} depth={self.depth} in_flight={self._in_flight}"
                f" consumers={len(self._consumers)}>")

    # -- introspection ----------------------------------------------------------------

    @property
    def depth(self):
        """Messages waiting to be delivered."""
        return self.backlog.depth + self._planned

    @property
    def held(self):
        """Messages the queue is responsible for: waiting plus in flight."""
        return self.backlog.depth + self._planned + self._in_flight

    @property
    def in_flight(self):
        """Messages handed to consumers and not settled yet."""
        return self._in_flight

    def settled(self, size, accepted=None):
        """A delivery of a message of C{size} bytes was settled: it is no longer in
        flight, and no longer held (a settlement that gives it back holds it again, by
        L{requeue} or L{park}). The one way a settlement reaches the queue.

        @param accepted: the message, when the settlement accepted it: it left for good
            (counted out, and out of the store).
        """
        self._in_flight -= 1
        self._flight_bytes -= size
        self._bytes -= size
        system = self._system
        system.count -= 1
        system.bytes -= size
        if accepted is not None:
            self.messages_out += 1
            self.bytes_out += size
            if self.store is not None and accepted.durable:
                self.store.remove(accepted)
        if self.full:
            self._ease()

    @property
    def held_bytes(self):
        """Bytes of the messages held, waiting or in flight (what C{max_bytes}
        limits)."""
        return self._bytes

    @property
    def consumers(self):
        """The consumers attached, active ones then backups, in attach order (a
        copy)."""
        return self._consumers + self._backups

    @property
    def backups(self):
        """The consumers waiting as backups (mqgate.core.modes), in order (a copy)."""
        return list(self._backups)

    @property
    def consumers_paused(self):
        """Whether an operator holds its deliveries back (C{pause dst})."""
        return self._paused

    def oldest_arrival(self):
        """When the oldest message waiting now began to wait (the clock's seconds), or
        C{None} when none waits (S5.1)."""
        return self.backlog.oldest_arrival()

    def oldest_age(self):
        """Seconds the oldest message waiting now has waited (0.0 when none waits)."""
        oldest = self.backlog.oldest_arrival()
        return 0.0 if oldest is None else max(0.0, self._seconds() - oldest)

    def stats(self):
        """A snapshot of the counters as a dict."""
        result = {name: getattr(self, name) for name in _QUEUE_COUNTERS}
        result.update(depth=self.depth, held=self.held, in_flight=self._in_flight,
                      consumers=len(self._consumers))
        return result

    # -- producing --------------------------------------------------------------------

    def publish(self, message):
        """Enqueue C{message} and deliver it at once if a consumer has credit.

        Counting it, the queue may become L{full}; it takes the message all the same
        (the producer decides what a full queue means, S2.3).
        """
        self.messages_in += 1
        self.bytes_in += message.size
        self._bytes += message.size
        system = self._system
        system.count += 1
        system.bytes += message.size
        limits = self.limits
        backlog = self.backlog
        held = backlog.depth + self._planned + self._in_flight
        if held >= self.peak_held:
            self.peak_held = held + 1   # with this message (S5.1)
        if held >= limits.full_count or self._bytes >= limits.full_bytes:
            self.full = True
        ready = self._ready
        if ready and not self._running and not self._paused:
            if not backlog.depth and not self._selective:
                # The fast path: nothing waits, so this message is next for whoever
                # is ready; the backlog is not touched.
                consumer = ready.popleft()
                if consumer.credit > 0:
                    if message.expiry is not None and backlog.expired(message):
                        ready.appendleft(consumer)
                        self._expire(message)
                        return
                    # Out of the deque, still in the set: a re-entrant offer leaves
                    # it to us, and it goes to the back if it still has credit. Then
                    # _hand_alone, inlined: a call here cost core_bench 8 %.
                    self._again = False
                    self._running = True
                    try:
                        self._hand(consumer, message, message.delivery_count)
                    finally:
                        self._running = False
                    if consumer.credit > 0:
                        ready.append(consumer)
                    else:
                        self._in_ready.discard(consumer)
                    # What the hand-over added waits for a run (the deque did not hold
                    # this consumer meanwhile, so a publish may not have asked for one).
                    if self._again or backlog.depth:
                        self.dispatch()
                    return
                self._in_ready.discard(consumer)
            elif self._selective and not backlog.paged:
                # S2.8: outside a run, everything waiting was refused by every ready
                # consumer (a selector's verdict never changes, and each way to break
                # that, a new entry or a consumer gaining credit, starts a run), so
                # only this message needs trying.
                if message.expiry is not None and backlog.expired(message):
                    self._expire(message)
                    return
                consumer = self._choose(message, None, None)
                if consumer is not None:
                    self._hand_alone(consumer, message)
                    if consumer.credit <= 0:
                        self._leave_ready(consumer)
                    if self._again:
                        self.dispatch()
                    return
                self._wait(message)   # refused by every ready consumer: no run needed
                return
        self._wait(message)
        if ready:
            self.dispatch()

    enqueue = publish

    def _wait(self, message):
        # The message joins the backlog; a full queue whose limit behaviour removes
        # waiting messages (oldest, or lowest priority) makes room (S2.3).
        self.backlog.append(message)
        if self.full and self.limits.removes:
            self._make_room(message)

    def _hand_alone(self, consumer, message):
        # One message handed over without a plan (S2.8's publish, as the fast path
        # does inline): a run as far as re-entrant calls can tell, so what they change
        # waits for the follow-up run the caller starts when C{_again} says so.
        self._again = False
        self._running = True
        try:
            self._hand(consumer, message, message.delivery_count)
        finally:
            self._running = False

    # -- consumers --------------------------------------------------------------------

    def attach(self, consumer):
        """Add a competing consumer (it receives nothing until it has credit), or a
        backup when the queue has as many active ones as its L{modes} allow.

        @raise ResourceLimitExceeded: it has as many backups as allowed too.
        """
        modes = self.modes
        if not modes.room_for_active(len(self._consumers)):
            if not modes.room_for_backup(len(self._backups)):
                raise refusal(self.name, modes, len(self._consumers), len(self._backups))
            self._backups.append(consumer)
            return
        self._activate(consumer)

    def _activate(self, consumer):
        self._consumers.append(consumer)
        if self._filters(consumer):
            self._selective += 1

    def set_modes(self, modes):
        """Apply new consumer L{modes}: backups become active if there is room now;
        active consumers past a lowered limit stay active until they go."""
        self.modes = modes
        if self._promote():
            self.dispatch()

    def _promote(self):
        # An active consumer went (or the limit rose): the backups that waited
        # longest take its place, with the credit they kept. True if any did.
        promoted = False
        while self._backups and self.modes.room_for_active(len(self._consumers)):
            consumer = self._backups.pop(0)
            self._activate(consumer)
            promoted = True
            if consumer.credit > 0:
                self._join_ready(consumer)
        return promoted

    def _filters(self, consumer):
        # A subscription's selector was applied by its topic already (S2.8).
        return consumer.selector is not None and self.pattern is None

    def _join_ready(self, consumer):
        if consumer not in self._in_ready:
            self._in_ready.add(consumer)
            self._ready.append(consumer)

    def _leave_ready(self, consumer):
        if consumer in self._in_ready:
            self._in_ready.discard(consumer)
            try:
                self._ready.remove(consumer)
            except ValueError:
                pass    # the fast path holds it, and lets it go as it has no credit

    def offer(self, consumer, had_credit=False):
        """A consumer now has credit: put it in the ready rotation and dispatch (a
        backup keeps its credit for when it becomes active).

        @param had_credit: it had credit already (only its amount changed).
        """
        if self._backups and consumer in self._backups:
            return
        joined = consumer not in self._in_ready
        if joined:
            self._in_ready.add(consumer)
            self._ready.append(consumer)
        elif had_credit and self._selective:
            # S2.8: a ready consumer that kept its credit has refused everything
            # waiting already (a selector's verdict never changes).
            return
        self.dispatch()

    def detach(self, consumer, pending):
        """Remove a closed consumer and take back its unsettled deliveries.

        C{pending} go back at the head, in their original order, ahead of anything that
        arrived later (S8.1, design rule 3); what was waiting for "any consumer
        but this one" becomes available to every consumer again.
        """
        if self._backups and consumer in self._backups:
            self._backups.remove(consumer)   # it was handed nothing: nothing comes back
            return
        try:
            self._consumers.remove(consumer)
        except ValueError:
            pass
        else:
            if self._filters(consumer):
                self._selective -= 1
            if self._backups:
                self._promote()
        # Dropped now, so an idle queue does not keep the closed consumer (and its
        # target) alive.
        self._leave_ready(consumer)
        # They leave the flight and wait again; held all along.
        self._in_flight -= len(pending)
        size = sum(delivery.message.size for delivery in pending)
        self._flight_bytes -= size
        if self._dropped_if_deleted(len(pending)):
            self._bytes -= size
            self._system.count -= len(pending)
            self._system.bytes -= size
            return
        self.backlog.push_front(pending)
        if self.backlog.parked:
            self.backlog.unpark(consumer)
        self.dispatch()

    def requeue(self, delivery):
        """Put a settled-back delivery at the head of its priority level and dispatch."""
        if self._dropped_if_deleted(1):
            return
        # It left with its settlement; it is back.
        self._system.count += 1
        self._add_bytes(delivery.message.size)
        self.backlog.push_front((delivery,))
        self.dispatch()

    def park(self, delivery, consumer):
        """Keep C{delivery} for any consumer except C{consumer} (undeliverable-here)."""
        if self._dropped_if_deleted(1):
            return
        self._system.count += 1
        self._add_bytes(delivery.message.size)
        self.backlog.park(delivery, consumer)
        self.dispatch()

    # -- dispatch ---------------------------------------------------------------------

    def dispatch(self):
        """Hand waiting messages to consumers with credit: plan, then hand over.

        Each round of the loop first plans (L{_plan}: which waiting message goes to
        which consumer, calling no outside code), then hands the planned deliveries
        over. A call from inside a hand-over (a target that settles, publishes, gives
        credit, detaches) only changes the backlog or the ready deque and asks for
        another round (C{_again}); the running loop does it.
        """
        if self._running or self._paused:
            self._again = True
            return
        if not self._ready:
            return
        self._running = True
        try:
            while True:
                self._again = False
                plan = []
                self._plan(plan)
                if plan:
                    self._hand_over(plan)
                if not self._again or self._paused or not self._ready:
                    break
        finally:
            self._running = False
        if self.backlog.paged:
            # S2.6: what comes next may be paged out: read it back (dispatch goes on
            # when it arrives).
            self.pager.fill(self)

    def _plan(self, plan):
        # Which consumer takes which waiting message: round-robin among the ready
        # consumers, priority first, each consumer's selector applied (S2.1, S2.8,
        # S2.9). Planned credit is counted here, not taken: the hand-over takes it.
        ready = self._ready
        credit = {}
        for consumer in ready:
            if consumer.credit > 0:
                credit[consumer] = consumer.credit
        if len(credit) != len(ready):
            # Out of credit since it joined: it rejoins when it gets credit (offer).
            ready = self._ready = deque(credit)
            self._in_ready = set(credit)
        if not credit:
            return
        expired = []
        if self._selective:
            self.backlog.select(lambda message, avoid: self._choose(message, avoid, credit)
                                or (None if credit else STOP), plan, expired)
        else:
            self.backlog.select(self._rotation(credit), plan, expired)
        # Counted (and dead-lettered, S2.4) once the backlog is consistent again.
        for message in expired:
            self._expire(message)

    def _rotation(self, credit):
        # Without selectors, the chooser of a round: the first ready consumer with
        # credit left in it takes the message and goes to the back (S2.1); a parked
        # message skips the consumer that refused it. A closure: one call a message.
        ready = self._ready
        in_ready = self._in_ready

        def choose(message, avoid):
            if not credit:
                return STOP
            if avoid is None:
                consumer = ready.popleft()
            else:
                for position, consumer in enumerate(ready):
                    if consumer is not avoid:
                        break
                else:
                    return None
                del ready[position]
            left = credit[consumer]
            if left > 1:
                credit[consumer] = left - 1
                ready.append(consumer)
            else:
                del credit[consumer]
                in_ready.discard(consumer)
            return consumer
        return choose

    def _choose(self, message, avoid, credit):
        # S2.8: the first ready consumer with credit (C{credit}: what is left of it in
        # this round, or None for the live value) that accepts C{message}; it moves to
        # the back of the ready deque, which keeps the rotation of S2.1.
        ready = self._ready
        lookup = None
        pattern = self.pattern
        for position, consumer in enumerate(ready):
            left = consumer.credit if credit is None else credit.get(consumer, 0)
            if left <= 0 or consumer is avoid:
                continue
            selector = consumer.selector
            if selector is not None and pattern is None:
                if lookup is None:
                    lookup = functools.partial(message_field, message)
                if not selector.matches(lookup):
                    continue
            del ready[position]
            if credit is None or left > 1:
                ready.append(consumer)
                if credit is not None:
                    credit[consumer] = left - 1
            else:
                del credit[consumer]
                self._in_ready.discard(consumer)
            return consumer
        return None

    def _hand_over(self, plan):
        # The planned deliveries, in order. One whose consumer lost its credit (or went)
        # meanwhile, or whose queue was deleted, goes back to the backlog, and another
        # round looks for a consumer for it.
        unhanded = None
        self._planned = len(plan)
        for consumer, message, delivery_count, entry in plan:
            self._planned -= 1
            if consumer.credit <= 0 or self.deleted:
                if unhanded is None:
                    unhanded = []
                unhanded.append(entry)
                continue
            self._hand(consumer, message, delivery_count)
        if unhanded:
            if self.deleted:
                # Taken out of the backlog before the deletion, so discard did not
                # count them (their bytes it did: they were never handed over).
                self._dropped_if_deleted(len(unhanded))
                self._system.count -= len(unhanded)
                return
            self.backlog.put_back(unhanded)
            self._again = True

    def _hand(self, consumer, message, delivery_count):
        delivery = Delivery(message, consumer, delivery_count)
        # Book-keeping first: the target may settle or close re-entrantly.
        consumer.handed(delivery)
        self.delivered += 1
        if consumer.presettled:
            # Gone once handed over: no longer held.
            self._bytes -= message.size
            system = self._system
            system.bytes -= message.size
            system.count -= 1
            self.messages_out += 1
            self.bytes_out += message.size
        else:
            # Still held, in flight, until settled (bytes too: S2.2, S2.3).
            self._in_flight += 1
            self._flight_bytes += message.size
        if self.full:
            self._ease()
        try:
            consumer.target.deliver(delivery)
        except Exception:
            # Whatever one consumer's target does wrong stays with it (S10.4): the
            # dispatch run, the producer that published and the other consumers go on.
            self._not_handed(consumer, delivery)
            return
        if consumer.presettled and message.durable and self.store is not None:
            self.store.remove(message)   # at-most-once: gone once handed over

    def _not_handed(self, consumer, delivery):
        # The target raised: take the hand-over back (the consumer's credit with it)
        # and keep the message for another consumer.
        message = delivery.message
        _log.failure("consumer {consumer} of {queue} failed to take message {id}; "
                     "it waits for another consumer", consumer=consumer.address,
                     queue=self.name, id=message.message_id)
        unsettled = consumer.take_back(delivery)
        self.delivered -= 1
        if consumer.presettled:
            self.messages_out -= 1
            self.bytes_out -= message.size
        elif unsettled:
            self.settled(message.size)   # park holds it again
        else:
            return   # the target settled it before failing: it is no longer ours
        delivery.consumer = None
        self.park(delivery, consumer)

    # -- operators (S11.1) ------------------------------------------------------------

    def pause_consumers(self):
        """Deliver nothing more until L{resume_consumers}: what arrives waits."""
        self._paused = True

    def resume_consumers(self):
        """Deliver again, starting with what waited."""
        if self._paused:
            self._paused = False
            self.dispatch()

    def purge(self):
        """Drop the messages waiting (in flight ones stay until settled), from the
        store too; return how many were dropped."""
        messages = self.backlog.clear()
        if not messages:
            return 0
        size = sum(message.size for message in messages)
        self._forget_paged(messages)
        self.dropped += len(messages)
        self._system.count -= len(messages)
        self._add_bytes(-size)
        if self.store is not None:
            for message in messages:
                if message.durable:
                    self.store.remove(message)
        if self.full:
            self._ease()
        return len(messages)

    def _forget_paged(self, messages):
        # S2.6: paged messages leaving without a body (purged, the queue deleted).
        if self.backlog.paged:
            for message in messages:
                if message.paged:
                    self.pager.forget(self, message)

    def set_limits(self, limits):
        """Apply new L{Limits} now: the queue becomes full at once if it holds as much
        as they allow, and its producers go on if it is now under their low-water
        mark. A REMOVE_* queue over its limits removes what is over at once."""
        self.limits = limits
        if self.held > limits.full_count or self._bytes >= limits.full_bytes:
            self.full = True
            if limits.removes:
                self._make_room()
        elif self.full:
            self._ease()

    # -- limits (S2.3, S2.7) ----------------------------------------------------------

    def _expire(self, message):
        # Taken out of the backlog (or never put there) by the caller: it expired.
        self.expired += 1
        self._system.count -= 1
        self._add_bytes(-message.size)
        self._died(message, EXPIRED)
        if self.full:
            self._ease()

    def _died(self, message, reason):
        # S2.4: no longer counted here (the caller counted why it left); to the DMQ
        # (or nowhere), in the store too.
        if message.paged:
            # S2.6: the DMQ keeps a copy of it: read its body back first.
            self.pager.forget(self, message)
            if self.dead_letters is not None and self.store is not None:
                self.pager.revive(self, message,
                                  lambda: self.dead_letters.take(self, message, reason))
                return
        if self.dead_letters is not None:
            self.dead_letters.take(self, message, reason)
            return
        if message.durable and self.store is not None:
            self.store.remove(message)

    def rejected_delivery(self, delivery, reason):
        """A consumer rejected C{delivery} (settled): counted, and its message is dead
        for C{reason} (L{dead_delivery})."""
        self.rejected += 1
        self.dead_delivery(delivery, reason)

    def dead_delivery(self, delivery, reason):
        """A settled delivery's message is dead (rejected, delivered too often): it
        leaves for good, to the DMQ (S2.4). The settlement already took it out of the
        queue's counts (L{settled})."""
        if self._dropped_if_deleted(1):
            return
        self.dropped += 1
        self._died(delivery.message, reason)

    def _make_room(self, newest=None):
        # S2.3 REMOVE_OLDEST / REMOVE_LOW_PRIORITY: remove waiting messages (in flight
        # ones cannot be) until what the queue holds is within its limits again. Runs
        # only when a publish filled the queue; each removal looks at the heads of the
        # ten priority levels, no more. REMOVE_OLDEST never removes the message just
        # published (C{newest}): with the others all in flight, the queue holds one
        # more than its limit for a while, as a ring queue does.
        limits = self.limits
        oldest = limits.behavior == REMOVE_OLDEST
        reason = OLDEST if oldest else LOW_PRIORITY
        while self.held > limits.max_count >= 0 or self._bytes > limits.max_bytes >= 0:
            message = self.backlog.remove_head(oldest, newest)
            if message is None:
                break
            self.removed += 1
            self.dropped += 1
            self._system.count -= 1
            self._add_bytes(-message.size)
            self._died(message, reason)
        # Nobody waits for a removing queue (producers may, from before a change of
        # its limit behaviour: they go on).
        self._unblock()
        self.full = self.held > limits.full_count or self._bytes >= limits.full_bytes

    def reap(self, now):
        """Remove the waiting messages that expired by C{now} (S2.2's reaper, S2.9);
        return how many."""
        removed = self.backlog.reap(now)
        for message in removed:
            self._expire(message)
        return len(removed)

    def _ease(self):
        # Called when something left a full queue: below the low-water mark, it is no
        # longer full and its waiting producers may go on.
        limits = self.limits
        if (self.backlog.depth + self._planned + self._in_flight < limits.low_count
                and self._bytes < limits.low_bytes):
            self._unblock()

    def _unblock(self):
        self.full = False
        waiters, self._waiters = self._waiters, {}
        for producer in waiters:
            producer._eased(self)

    def add_waiter(self, producer):
        """Call C{producer._eased(self)} once this queue is no longer full."""
        self._waiters[producer] = None

    def remove_waiter(self, producer):
        """Forget C{producer} (it closed)."""
        self._waiters.pop(producer, None)

    def room(self):
        """How many more messages this queue takes before it is full, or C{None} when
        it never holds its producers back (no FLOW_CONTROL limit): the glue grants
        producer credit from it (S2.7). Bytes count by the mean size of what it holds."""
        limits = self.limits
        if limits.behavior != FLOW_CONTROL:
            return None
        held = self.held
        room = limits.full_count + 1 - held
        if held and self._bytes > 0 and limits.max_bytes >= 0:
            room = min(room, (limits.full_bytes - self._bytes) * held // self._bytes)
        return room if room > 0 else 0

    def limit_reached(self):
        """A sentence naming this queue and the limit it has reached (for errors)."""
        limits = self.limits
        if self._bytes >= limits.full_bytes:
            what = f"{self._bytes} bytes, its limit is {limits.max_bytes} (maxTotalMsgBytes)"
        else:
            what = f"{self.held} messages, its limit is {limits.max_count} (maxNumMsgs)"
        if self.pattern is None:
            return f"queue {self.name!r} is full: it holds {what}"
        return (f"a subscription {self.name!r} of topic {self.pattern!r} is full:"
                f" it holds {what}")

    def _add_bytes(self, size):
        # Bytes waiting changed off the hot path: the queue's and the broker's totals.
        self._bytes += size
        self._system.bytes += size

    def _dropped_if_deleted(self, count):
        # Deliveries coming back to a queue that was deleted meanwhile go nowhere: the
        # deletion dropped what it held, these are dropped now (and no longer held).
        if not self.deleted:
            return False
        self.dropped += count
        return True

    def discard(self):
        """Mark the queue deleted and drop what it holds (counted as dropped)."""
        self.deleted = True
        messages = self.backlog.clear()
        self.dropped += len(messages)
        self._system.count -= len(messages)
        # What is in flight stays held until it is settled (or comes back, dropped).
        self._system.bytes -= self._bytes - self._flight_bytes
        self._forget_paged(messages)
        self._bytes = self._flight_bytes
        self._ready.clear()
        self._in_ready.clear()
        # Its stored messages went with it (remove_destination/remove_durable): what
        # its consumers still settle must not be removed a second time.
        self.store = None
        # Nothing waits for a queue that is gone: its producers learn of the deletion
        # on their next send.
        self._unblock()


class SubscriptionIndex:
    """Every topic subscription queue, with a generation number bumped on each change.

    Topics cache the tuple of subscriptions matching their name and bring it up to date
    lazily when the generation moved, so publishing never matches patterns. A topic
    that fell only a few changes behind matches just the subscriptions those changes
    added (L{changes_since}): a client making and dropping subscriptions over and over
    then costs each publish a match or two, not one per subscription.
    """

    __slots__ = ("gen", "_queues", "_log")

    def __init__(self):
        self.gen = 0
        self._queues = {}
        # The last changes, as (generation reached, queue, added); bounded, so an old
        # reader starts over with matching().
        self._log = deque(maxlen=_CHANGES_KEPT)

    def __len__(self):
        return len(self._queues)

    def __iter__(self):
        return iter(list(self._queues))

    def add(self, queue):
        """Register a subscription queue."""
        self._queues[queue] = None
        self.gen += 1
        self._log.append((self.gen, queue, True))

    def remove(self, queue):
        """Forget a subscription queue."""
        if self._queues.pop(queue, False) is None:
            self.gen += 1
            self._log.append((self.gen, queue, False))

    def changes_since(self, gen):
        """The C{(queue, added)} changes after generation C{gen}, oldest first, or
        C{None} when they are no longer all known."""
        log = self._log
        behind = self.gen - gen
        if behind > len(log):
            return None
        return [(queue, added) for _, queue, added in itertools.islice(
            log, len(log) - behind, None)]

    def matching(self, name):
        """The subscription queues whose pattern matches the topic C{name}, in the
        order they were made."""
        return tuple(q for q in self._queues if q.matches(q.pattern, name))


class Topic(_Operated):
    """A publish/subscribe destination (S2.1): copies go to every matching subscription.

    Counters: C{messages_in} (published), C{messages_out} (copies enqueued on
    subscriptions), C{dropped} (published while no subscription matched, or none whose
    selector accepted it), C{bytes_in} and C{bytes_out} (the bytes of C{messages_in}
    and C{messages_out}, S5.1).

    @ivar full: a subscription queue the last publish left full (S2.3: its producers
        wait for it), or C{None}.
    @ivar creator: of a temporary topic, what stands for the connection that made it
        (see L{Queue.creator}); C{None} otherwise.
    """

    __slots__ = ("name", "temporary", "creator", "deleted", "messages_in",
                 "messages_out", "dropped", "full", "_index", "_gen", "_subs",
                 "_selective", "attached", "pause", "holding", "limits", "bytes_in",
                 "bytes_out", "default_persistence", "persistence_set", "diverts",
                 "expiry_delay")

    def __init__(self, name, index, *, temporary=False):
        self.name = name
        self.temporary = temporary
        self.creator = None
        self.deleted = False
        self.messages_in = 0
        self.messages_out = 0
        self.dropped = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.full = None
        self._index = index
        self._gen = -1
        self._subs = ()
        self._selective = False
        self._init_operated()
        # Limits an operator gave it: its subscriptions on exactly its name get them
        # (None: the broker's).
        self.limits = None
        # S8.4: whether a message published without durable=true is persistent here
        # (the broker's mqgate.topic.default_persistence unless an operator set it
        # for this topic: persistence_set).
        self.default_persistence = False
        self.persistence_set = False
        # S7.1: the DivertSet of the diverts on this topic (None: none); the expiry
        # delay of the address setting matching its name (None: none).
        self.diverts = None
        self.expiry_delay = None

    def __repr__(self):
        return f"<Topic {self.name!r} in={self.messages_in}>"

    @property
    def subscriptions(self):
        """The subscription queues this topic currently feeds."""
        if self._gen != self._index.gen:
            self._refresh()
        return self._subs

    def _refresh(self):
        index = self._index
        changes = index.changes_since(self._gen) if self._gen >= 0 else None
        if changes is None:
            self._subs = index.matching(self.name)
        else:
            self._subs = self._changed(changes)
        if self.temporary:
            # A temporary topic is private to the connection that made it: only
            # subscriptions naming it exactly (which the broker checks at attach)
            # receive from it, never another client's wildcard.
            self._subs = tuple(q for q in self._subs if q.pattern == self.name)
        self._gen = index.gen
        self._selective = any(q.selector is not None for q in self._subs)

    def _changed(self, changes):
        # The cached subscriptions with a few changes applied: a new queue is the
        # newest, so appending keeps creation order.
        subs = list(self._subs)
        name = self.name
        for queue, added in changes:
            if added:
                if queue.matches(queue.pattern, name):
                    subs.append(queue)
            elif queue in subs:
                subs.remove(queue)
        return tuple(subs)

    def publish(self, message):
        """Enqueue C{message} (the same object) on every matching subscription whose
        selector, if any, accepts it (S2.8); with none, drop it and count it."""
        self.publish_to(self.route(message), message)

    def route(self, message):
        """The subscriptions that take C{message} (a tuple, maybe empty).

        Nothing is counted here: a persistent message is routed at once, stored on
        the durable subscriptions among these, and counted only when L{publish_to}
        enqueues it once stored (S3.6: nothing is delivered, nor counted as
        published, that the store did not take).
        """
        if self._gen != self._index.gen:
            self._refresh()
        subs = self._subs
        if self._selective:
            subs = _selected(subs, message)
        return subs

    def publish_to(self, subs, message):
        """Count C{message} as published and enqueue it on the subscriptions C{subs}
        that still exist; with none, count it as dropped."""
        self.messages_in += 1
        self.bytes_in += message.size
        if not subs:
            self.dropped += 1
            self.full = None
            return
        self.messages_out += len(subs)
        self.bytes_out += message.size * len(subs)
        full = None
        # A tuple snapshot: a subscriber closing re-entrantly cannot disturb the loop.
        for queue in subs:
            if queue.deleted:
                continue
            queue.publish(message)
            if queue.full:
                full = queue
        self.full = full

    def room(self):
        """The least L{Queue.room} of the subscriptions this topic feeds (S2.7), or
        C{None} when none of them holds its producers back."""
        rooms = [room for room in (q.room() for q in self.subscriptions)
                 if room is not None]
        return min(rooms) if rooms else None

    def stats(self):
        """A snapshot of the counters as a dict."""
        return {"messages_in": self.messages_in, "messages_out": self.messages_out,
                "dropped": self.dropped, "subscriptions": len(self.subscriptions)}


class Pause:
    """What an operator paused on one destination (S11.1, C{pause dst}).

    Producers paused: each producer that sends to the destination keeps the message
    and waits here, blocked like a producer of a full FLOW_CONTROL queue (the glue
    grants no credit, or stops reading its socket); L{release} hands the messages on
    in order and lets them go on. Never a message dropped.

    @ivar producers: producers are paused.
    @ivar consumers: consumers are paused.
    """

    __slots__ = ("producers", "consumers", "_waiting")

    def __init__(self):
        self.producers = False
        self.consumers = False
        self._waiting = {}    # producers holding messages or blocked here, in order

    def __repr__(self):
        return f"<Pause producers={self.producers} consumers={self.consumers}>"

    def add_waiter(self, producer):
        """C{producer} holds messages for the destination, or is blocked by it."""
        self._waiting[producer] = None

    def remove_waiter(self, producer):
        """C{producer} closed: it stays if it still holds messages for later."""
        if not producer.holds(self):
            self._waiting.pop(producer, None)

    def release(self):
        """Producers go on: what they hold goes to the destination (or nowhere, if it
        was deleted), in the order they sent it."""
        waiting, self._waiting = self._waiting, {}
        for producer in waiting:
            producer._resumed(self)


def _selected(subscriptions, message):
    # S2.8: a subscription never holds a message its selector refuses.
    lookup = functools.partial(message_field, message)
    return tuple(q for q in subscriptions
                 if q.selector is None or q.selector.matches(lookup))
