"""
Consumers and the deliveries they hold in flight (S8.1, design rule 3).

A delivery is "in flight" from the moment the core hands it to a consumer's target
until the consumer settles it. A pre-settled (at-most-once) consumer holds nothing: the
message is gone as soon as it is handed over, and a later disposition for it is ignored
(FACTS 3.3: clients settle pre-settled deliveries anyway). An at-least-once consumer
keeps every delivery in C{_unsettled}, in the order they were handed out, so that
closing the consumer can put them back at the head of the queue in that same order,
marked redelivered.

Who owns a consumer's credit: the core's credit (L{Consumer.credit}, how many more
deliveries the queue may hand it now) is the consumer's, and only the core changes it:
L{Consumer.set_credit} from what its driver offers, within consumerFlowLimit; one less
per hand-over; none after a drain or a close. What the glue offers is computed in one
place for AMQP and STOMP alike (L{mqgate.glue.egress.Egress.core_credit}). The target
(L{IConsumerTarget}) only takes deliveries: the core never asks it about credit.
"""

from zope.interface import Attribute, Interface

from mqgate.core.dead import REJECTED as DEAD_REJECTED
from mqgate.core.dead import UNDELIVERABLE
from mqgate.core.errors import CoreError, ErrorKind

ACCEPTED = "accepted"
REJECTED = "rejected"
RELEASED = "released"
MODIFIED = "modified"

OUTCOMES = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))


class IConsumerTarget(Interface):
    """What a L{Consumer} hands its deliveries to: an AMQP link or a STOMP
    subscription in the glue (L{mqgate.glue.egress.IEgressTarget}), a capture
    subscription in the core.
    """

    revoked = Attribute(
        "None, or revoked(kind, description) (kind: an L{mqgate.core.errors.ErrorKind}): called when an operator destroys "
        "the destination (S11.1), before the core closes the consumer.")

    def deliver(delivery):
        """Take a L{Delivery} the core hands over; the consumer's credit is one less
        already.

        It may call back into the core (settle, set credit, close the consumer): the
        core expects that. Should it raise, the core logs it, takes the delivery
        back for another consumer and gives this one no credit until its driver
        sets some again.
        """


class Delivery:
    """One attempt to deliver a message to one consumer.

    @ivar message: the L{BrokerMessage} (possibly shared with other subscriptions).
    @ivar consumer: the L{Consumer} it was handed to; C{None} once that consumer
        closed with the delivery unsettled (it went back to the queue).
    @ivar delivery_count: how many times this message was delivered before without
        success; the glue writes it into the outgoing AMQP header.
    @ivar tag: a free slot for the glue (the AMQP delivery id, typically).
    """

    __slots__ = ("message", "consumer", "delivery_count", "tag")

    def __init__(self, message, consumer, delivery_count):
        self.message = message
        self.consumer = consumer
        self.delivery_count = delivery_count
        self.tag = None

    @property
    def redelivered(self):
        """C{True} when the message was delivered before without success."""
        return self.delivery_count > 0

    def __repr__(self):
        return (f"<Delivery seq={self.message.seq} count={self.delivery_count}"
                f" tag={self.tag!r}>")


class Consumer:
    """A receiver attached to one queue (a plain queue or a topic subscription's queue).

    Built by L{mqgate.core.broker.Broker.open_consumer}; the glue drives it with
    L{set_credit}, L{drain}, L{settle} and L{close}.

    @ivar address: the canonical address actually attached (C{'queue://x'},
        C{'topic://x'} or the temporary one made for a dynamic attach).
    @ivar presettled: at-most-once (S8.1): a delivery counts as settled when handed over.
    @ivar credit: how many more deliveries the consumer may receive now (see the
        module's note on who owns it).
    @ivar target: the L{IConsumerTarget} that receives its deliveries.
    @ivar queue: the L{mqgate.core.destinations.Queue} it consumes from.
    @ivar selector: the compiled L{mqgate.core.selectors.Selector} (S2.8), or C{None}.
    @ivar closed: C{True} once L{close} ran.
    """

    __slots__ = ("address", "presettled", "credit", "target", "queue", "closed",
                 "selector", "_unsettled", "_on_close", "_withheld")

    def __init__(self, address, queue, target, *, presettled=False, selector=None,
                 on_close=None):
        self.address = address
        self.queue = queue
        self.target = target
        self.presettled = presettled
        self.selector = selector
        self.credit = 0
        self.closed = False
        # delivery -> True, insertion-ordered: the order deliveries were handed out.
        self._unsettled = {}
        self._on_close = on_close
        # Credit offered that consumerFlowLimit keeps back for now (S2.3, set_credit).
        self._withheld = 0

    def __repr__(self):
        return (f"<Consumer {self.address} credit={self.credit}"
                f" unsettled={len(self._unsettled)}{' closed' if self.closed else ''}>")

    @property
    def unsettled(self):
        """The number of deliveries handed out and not yet settled."""
        return len(self._unsettled)

    def handed(self, delivery):
        """Its queue handed it C{delivery}: one credit less, and the delivery in flight
        until settled (unless this consumer is pre-settled)."""
        self.credit -= 1
        if not self.presettled:
            self._unsettled[delivery] = True

    def take_back(self, delivery):
        """Its queue takes C{delivery} back (the target failed to take it); whether
        it was still unsettled. The consumer gets no more until its glue gives it
        credit again, so a target that fails on everything cannot make a dispatch run
        go round for ever."""
        self.credit = 0
        return self._unsettled.pop(delivery, False)

    def set_credit(self, credit):
        """Let the consumer receive C{credit} more deliveries from now on.

        This replaces the current credit (AMQP flow semantics), it does not add to it.
        Available messages are delivered to the target before this returns.
        """
        if self.closed:
            return
        had_credit = self.credit > 0
        credit = credit if credit > 0 else 0
        # The one place the core's credit is derived from what its driver offered
        # (here, and from _flow_room for what was kept back): S2.3 consumerFlowLimit
        # allows no more than that many unsettled and granted at once; the rest is
        # withheld until settlements make room.
        limit = self.queue.limits.consumer_flow_limit
        if limit > 0:
            allowed = max(0, limit - len(self._unsettled))
            self._withheld = credit - allowed if credit > allowed else 0
            credit = min(credit, allowed)
        self.credit = credit
        if self.credit:
            self.queue.offer(self, had_credit)

    def drain(self):
        """Deliver what is available, then give up the remaining credit.

        @return: the credit given up (the glue advances the AMQP delivery-count by it).
        """
        if self.closed:
            return 0
        if self.credit:
            self.queue.dispatch()
        given_up = self.credit
        self.credit = 0
        return given_up

    def settle(self, delivery, outcome=ACCEPTED, *, delivery_failed=False,
               undeliverable_here=False, reason=DEAD_REJECTED):
        """Settle a delivery with an AMQP outcome.

        ACCEPTED removes the message, from the store too. REJECTED makes it dead: it
        goes to the dead message queue for C{reason} (S2.4; the glue says
        L{mqgate.core.dead.UNRENDERABLE} for a message its protocol cannot carry).
        RELEASED puts it back at the head of its queue unchanged. MODIFIED puts it
        back too, with the delivery count raised when C{delivery_failed} or
        C{undeliverable_here} (each is a failed delivery); with C{undeliverable_here} it
        waits for another consumer. A message whose delivery count reaches its
        destination's C{maxDeliveryCount} is dead instead (S2.4).
        Settling an unknown or already settled delivery does nothing (FACTS 3.3).
        """
        if outcome not in OUTCOMES:
            if delivery not in self._unsettled:
                return
            raise CoreError(f"unknown delivery outcome {outcome!r}",
                            ErrorKind.NOT_IMPLEMENTED)
        if not self._unsettled.pop(delivery, False):
            return
        queue = self.queue
        message = delivery.message
        # No longer in flight nor held, bytes included (S2.2, S2.3); an outcome that
        # gives the message back holds it again.
        if outcome == ACCEPTED:
            queue.settled(message.size, message)   # and gone for good
            self._flow_room()
            return
        queue.settled(message.size)
        if outcome == RELEASED:
            queue.requeue(delivery)
        elif outcome == MODIFIED:
            if delivery_failed or undeliverable_here:
                delivery.delivery_count += 1
                if _too_often(queue, delivery):
                    queue.dead_delivery(delivery, UNDELIVERABLE)
                    self._flow_room()
                    return
                if queue.store is not None and delivery.message.durable:
                    queue.store.count(delivery.message, delivery.delivery_count)
            if undeliverable_here:
                queue.park(delivery, self)
            else:
                queue.requeue(delivery)
        else:   # REJECTED
            queue.rejected_delivery(delivery, reason)
        self._flow_room()

    def _flow_room(self):
        # A settlement made room under consumerFlowLimit: offer again what was kept
        # back, through set_credit (a settlement frees at least one place, so the
        # credit grows).
        if self._withheld and not self.closed:
            self.set_credit(self.credit + self._withheld)

    def close(self, *, remove=False):
        """Detach: requeue what is in flight and release what this consumer owned.

        Unsettled deliveries go back to the head of their queue, in the order they were
        handed out, with their delivery count raised (design rule 3, S8.1). A
        non-durable topic subscription and a temporary destination made for this
        consumer are deleted; C{remove=True} deletes a durable subscription too (AMQP
        detach with closed=true).
        """
        if self.closed:
            return
        self.closed = True
        self.credit = 0
        pending = list(self._unsettled)
        self._unsettled.clear()
        queue = self.queue
        store = queue.store
        dead = []
        for delivery in pending:
            delivery.delivery_count += 1
            # The delivery waits in the queue, maybe for long (a detached durable
            # subscription): do not let it keep this consumer and its target alive.
            delivery.consumer = None
            if _too_often(queue, delivery):
                dead.append(delivery)
            elif store is not None and delivery.message.durable:
                store.count(delivery.message, delivery.delivery_count)
        if dead:
            # S2.4: delivered as often as its destination allows; it goes no further.
            pending = [d for d in pending if not _too_often(queue, d)]
            for delivery in dead:
                queue.settled(delivery.message.size)
                queue.dead_delivery(delivery, UNDELIVERABLE)
        queue.detach(self, pending)
        if self._on_close is not None:
            self._on_close(self, remove)


def _too_often(queue, delivery):
    # S2.4: a delivery count at the destination's maxDeliveryCount (0: no limit).
    limit = queue.limits.max_delivery_count
    return 0 < limit <= delivery.delivery_count
