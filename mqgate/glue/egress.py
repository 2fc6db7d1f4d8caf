"""
One connection's way out to its client (S9.1-S9.5): between the core's deliveries and
the engine's frames, for AMQP and STOMP alike.

The core hands a delivery to a consumer's target; the target files it here, under the
class the message deserves:

- direct (the consumer settles on hand-over and the message is not persistent): a D
  queue by class of service. A full D queue drops its oldest message for the new one
  (S9.2), so a subscriber that cannot keep up costs at most its queues' max-depth. A
  consumer on a non-durable topic subscription is therefore given all the core credit
  it wants: its messages are filed as they are routed, whether or not its link has
  credit now, and wait here, not in an unbounded subscription backlog;
- guaranteed (anything else): G-1, which never drops. When G-1 has no room left the
  consumer's core credit is withheld, so the messages wait in their destination, and is
  given back when G-1 drains (S9.2).

L{Egress.drain} is called by the connection adapter whenever the transport can take
more: it serves the queues in strict priority (C-1 first: control frames the engine
produced while the transport was paused) and writes what the engine then has to say.
A protocol's link credit is respected by blocking a target's items while it has none.

A target (L{mqgate.glue.amqp} and L{mqgate.glue.stomp} each have one) provides
L{IEgressTarget}. Who owns what of its credit, each in one place:

- its protocol credit (what its client lets it receive now): the protocol's, read
  through C{protocol_credit()} (the AMQP link's credit; STOMP's prefetch less what
  waits for an ACK);
- its items waiting here: the scheduler's, counted where they wait
  (L{EgressScheduler.waiting_for}), never kept on the side;
- whether its core credit is withheld (G-1 full): this module's;
- its core credit: the core consumer's; this module computes what to offer it in
  L{Egress.core_credit} alone and gives it through L{Egress.refresh} alone.
"""

from zope.interface import Attribute

from mqgate.core.deliveries import RELEASED, IConsumerTarget
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable
from mqgate.egress.scheduler import C1, EgressScheduler, cos_for
from mqgate.egress.slowness import SlowSubscriberMeter
from mqgate.glue.ingress import IngressBudget
from mqgate.glue.client_ids import ContainerIds

__all__ = ["Egress", "EgressContext", "IEgressTarget", "MESSAGE_TOO_BIG",
           "PRESETTLED_REFUSED", "SLOW_DISCONNECT", "UNBOUNDED", "files_as_routed"]

#: Core credit of a target whose direct messages may all be filed here (the D queues
#: bound them instead).
UNBOUNDED = 1 << 30

#: Bytes put into the engine before they are written out, so that the transport can
#: say "paused" before much more is produced (its own buffer is 64 KiB).
_BATCH = 64 * 1024

_COS_ANNOTATION = "x-opt-cos"


class IEgressTarget(IConsumerTarget):
    """A consumer's target whose deliveries go out through a connection's L{Egress}:
    its C{deliver} files them there (L{Egress.file})."""

    consumer = Attribute("The core consumer (L{mqgate.core.deliveries.Consumer}) "
                         "delivering to it; None until it is opened.")
    unbounded = Attribute(
        "True for a non-durable topic subscription settled on hand-over "
        "(L{files_as_routed}): its direct messages are all filed here as routed.")

    def protocol_credit():
        """How many more deliveries its protocol lets it receive now."""

    def write(delivery, discarded):
        """Put C{delivery} into the engine (with a discard indication when
        C{discarded}); return the bytes written."""


class Egress:
    """The five egress queues of one connection and how they fill and drain.

    @param engine: the protocol engine (C{data_to_send()}).
    @param profile: the L{mqgate.egress.profiles.ClientProfile}, or None for defaults.
    @param meter: the connection's L{mqgate.egress.slowness.SlowSubscriberMeter}.
    @param request_flush: asks the adapter to drain us in this reactor turn.
    """

    def __init__(self, engine, meter, request_flush, profile=None):
        self.engine = engine
        self.meter = meter
        self.request_flush = request_flush
        self.scheduler = EgressScheduler(profile, on_guaranteed_room=self._room)
        self._withheld = set()     # targets whose core credit waits for G-1 room
        self._when_served = []     # callbacks for when nothing ready is left (drains)
        self._paused = False       # the transport asked us to stop writing
        self._room_again = False
        self._queued_seen = False  # what the meter was last told

    # -- filing (from the core, through a target) ------------------------------------

    def file(self, target, delivery):
        """File one delivery the core handed to C{target} (S9.1, S9.2).

        When nothing waits in any queue, the transport is not paused and the target
        may receive now, the delivery is written at once: queueing it only to serve it
        in the same breath would order nothing differently (S9.3). It is counted as
        a delivery of its queue all the same.
        """
        message = delivery.message
        scheduler = self.scheduler
        direct = target.consumer.presettled and not message.durable
        if direct:
            cos = message.cos
            if cos is None:
                cos = message.cos = _cos_of(message)
        else:
            cos = 1
        if not (scheduler.queued_messages or self._paused or scheduler.is_blocked(target)):
            target.write(delivery, scheduler.pass_through(not direct, cos, target))
            self.request_flush()
            return
        if direct:
            # What a full D queue drops is gone: settled on hand-over, nothing to undo.
            scheduler.offer_direct((target, delivery), message.size, cos, key=target)
        elif not scheduler.push_guaranteed((target, delivery), message.size, key=target):
            # The core reads the consumer's credit again after this call: zero stops
            # it handing us more until G-1 drains.
            self._withheld.add(target)
            self.refresh(target)
        if self._paused and not self._queued_seen:
            # Data waits for a paused transport: from now on that counts (S9.4).
            self._tell_meter(True)
        self.request_flush()

    def core_credit(self, target):
        """How many more deliveries the core may hand C{target}'s consumer now (call
        after its protocol credit changed, or after items of it were written).

        The one place this is computed, for AMQP and STOMP alike, so that the three
        counts it weighs each keep one owner and nothing caches the result: the
        protocol's credit is what the client will take, what already waits here will
        use that credit when it is written, so the core may hand over the rest; none
        while G-1 is full (S9.2); all it wants for a target whose D queues bound its
        messages instead (S9.1). The core then applies its own consumerFlowLimit
        (L{mqgate.core.deliveries.Consumer.set_credit}).
        """
        if target in self._withheld:
            return 0
        if target.unbounded:
            return UNBOUNDED
        return max(0, target.protocol_credit() - self.scheduler.waiting_for(target))

    def refresh(self, target):
        """Give C{target}'s consumer the core credit it should have (L{core_credit})."""
        consumer = target.consumer
        if consumer is not None and not consumer.closed:
            consumer.set_credit(self.core_credit(target))

    def queued(self, target):
        """How many of C{target}'s items wait here (served or held)."""
        return self.scheduler.waiting_for(target)

    def block(self, target, blocked):
        """Hold (or serve again) C{target}'s items: its protocol credit is (not) zero."""
        if blocked:
            self.scheduler.block(target)
        else:
            self.scheduler.unblock(target)

    def withdraw(self, target):
        """C{target} goes: take its waiting items back. Guaranteed deliveries are given
        back to the core as never delivered (their delivery count unchanged)."""
        taken = self.scheduler.withdraw(target)
        consumer = target.consumer
        if consumer is None or consumer.presettled or not taken:
            self._withheld.discard(target)
            return
        # Withheld while they go back (its consumer closes next), or the released
        # deliveries would come straight back here; newest first, so that the oldest
        # ends at the head of its queue.
        self._withheld.add(target)
        self.refresh(target)
        for _queue, (_, delivery) in reversed(taken):
            consumer.settle(delivery, RELEASED)
        self._withheld.discard(target)

    # -- draining (from the adapter) -------------------------------------------------

    def hold_control(self, data):
        """Keep engine output produced while the transport is paused (or while older
        control output still waits), on C-1."""
        self.scheduler.offer_control(data, len(data))

    @property
    def holding_control(self):
        """Whether control output waits on C-1: newer output must queue behind it."""
        return self.scheduler.control_waiting > 0

    def flush_control(self, write):
        """Write every waiting C-1 item now (the connection is closing)."""
        while self.scheduler.control_waiting:
            _queue, item, _ = self.scheduler.next()
            write(item)

    def when_served(self, callback):
        """Call C{callback()} once everything ready now has been written (an AMQP drain
        completes then, S9.3)."""
        self._when_served.append(callback)
        self.request_flush()

    def drain(self, write, paused):
        """Serve the queues while C{paused()} is false, writing through C{write}.

        @return: True when everything ready was served (nothing is left that could be
            sent now), False when the transport paused first.
        """
        scheduler = self.scheduler
        engine = self.engine
        produced = 0
        done = False
        # The transport can only ask us to pause inside write(): look after each.
        while not paused():
            while True:
                served = scheduler.next()
                if served is None:
                    done = True
                    break
                queue, item, discarded = served
                if queue == C1:
                    out = engine.data_to_send()   # what earlier items made goes first
                    if out:
                        write(out)
                    produced = 0
                    write(item)
                    break
                target, delivery = item
                produced += target.write(delivery, discarded)
                if self._room_again:
                    self._give_back_credit()
                if produced >= _BATCH:
                    write(engine.data_to_send())
                    produced = 0
                    break
            if done:
                break
        if done and self._when_served:
            callbacks, self._when_served = self._when_served, []
            for callback in callbacks:
                callback()
        out = engine.data_to_send()
        if out:
            write(out)
        self._tell_meter(not done)
        return done

    @property
    def has_pending(self):
        """Whether L{drain} has anything to do: items to serve, or callbacks waiting
        for the queues to be served."""
        if self._when_served:
            return True
        return bool(self.scheduler.queued_messages) and self.scheduler.has_pending()

    def _tell_meter(self, queued):
        if queued != self._queued_seen:
            self._queued_seen = queued
            self.meter.set_queued(queued)

    def paused(self):
        """The transport asked us to stop (S9.3, S9.4)."""
        self._paused = True
        self.meter.mark_paused()

    def resumed(self):
        """The transport can take more again."""
        self._paused = False
        self.meter.mark_resumed()

    def _room(self):
        # From inside scheduler.next(): note it, act once the item is written.
        self._room_again = True

    def _give_back_credit(self):
        self._room_again = False
        withheld, self._withheld = self._withheld, set()
        for target in withheld:
            self.refresh(target)


def files_as_routed(consumer):
    """Whether C{consumer}'s direct messages are filed here as they are routed (its
    target is C{unbounded}): it settles on hand-over and reads a non-durable topic
    subscription of its own, whose backlog would otherwise grow without bound."""
    queue = consumer.queue
    return consumer.presettled and queue.pattern is not None and queue.durable_key is None


def _cos_of(message):
    """The class of service of a message (S9.1): its C{x-opt-cos} annotation, else
    its priority band."""
    payload = message.payload
    annotation = None
    if getattr(payload, "annotations", None) is not None:
        for key, value in payload.message_annotations.items():
            if str(key) == _COS_ANNOTATION and isinstance(value, int):
                annotation = value
                break
    return cos_for(message.priority, annotation)


class EgressContext:
    """What the egress of every connection shares (S9.4-S9.7): the client registry,
    the client profiles, the slow-subscriber settings, the ingress limits and the
    broker-wide event counters.

    @ivar clients: the L{mqgate.egress.clients.ClientRegistry}.
    @ivar profiles: the L{mqgate.egress.profiles.ProfileTable}.
    @ivar ingress_limits: C{(guaranteed, direct)} largest incoming message, bytes (S9.5).
    @ivar ingress_budget: the L{mqgate.glue.ingress.IngressBudget} every connection
        takes its unfinished incoming messages from.
    @ivar container_ids: the L{mqgate.glue.client_ids.ContainerIds} of every AMQP
        connection.
    @ivar events: event name -> how many times it happened (C{CLIENT_CLIENT_MESSAGE_TOO_BIG},
        C{CLIENT_DISCONNECTED_SLOW}, C{CLIENT_PRESETTLED_REFUSED}).
    """

    def __init__(self, clock, *, clients=None, profiles=None, slow_threshold=0.5,
                 ingress_limits=(30_000_000, 64 << 20), ingress_budget=None):
        self.clock = clock
        self.clients = clients if clients is not None else ClientRegistry()
        self.profiles = profiles if profiles is not None else ProfileTable()
        self.slow_threshold = slow_threshold
        self.ingress_limits = ingress_limits
        self.ingress_budget = ingress_budget if ingress_budget is not None else IngressBudget()
        self.events = {MESSAGE_TOO_BIG: 0, SLOW_DISCONNECT: 0, PRESETTLED_REFUSED: 0}
        # S8.5: the AMQP connections by container-id, for the takeover of a client id.
        self.container_ids = ContainerIds()

    def meter(self):
        """A new connection's L{SlowSubscriberMeter} (S9.4: over the last minute)."""
        return SlowSubscriberMeter(self.clock, threshold=self.slow_threshold)

    def count(self, event):
        self.events[event] = self.events.get(event, 0) + 1


#: S9.5's event, logged and counted when a client sends a message over its limit.
MESSAGE_TOO_BIG = "CLIENT_CLIENT_MESSAGE_TOO_BIG"
#: S9.6: a slow subscriber disconnected because the egress buffers were over budget.
SLOW_DISCONNECT = "CLIENT_DISCONNECTED_SLOW_SUBSCRIBER"
#: A pre-settled (at-most-once) message a limit or the store refused: the producer
#: cannot be told for that message (AMQP has no rejecting a settled transfer).
PRESETTLED_REFUSED = "CLIENT_PRESETTLED_REFUSED"
