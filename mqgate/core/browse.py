"""
Queue browsing (S2.1; AMQP C{distribution-mode: copy}, STOMP C{browser:true}): a look
at what a queue holds that changes nothing.

A L{Browser} takes a snapshot of the messages waiting in the queue when it attaches,
in the order the queue would deliver them (highest priority first, oldest first within
a priority, then those set aside for another consumer), and hands copies of them to
its target as its credit allows. Nothing is acquired: the messages stay where they
were, for the queue's consumers, with their delivery counts; settling a browsed
delivery does nothing; the queue's counters do not move. Messages handed to consumers
and not settled yet are not in the snapshot (they belong to those consumers now), nor
are those that expire before the browser reaches them. Once the browser has handed
the last one it is L{Browser.finished}: the glue says so to the client (AMQP: the
drain completes, STOMP: a MESSAGE with C{browser:end}, as ActiveMQ does).

To the glue and the egress a browser looks like a L{mqgate.core.deliveries.Consumer}
(C{set_credit}, C{drain}, C{settle}, C{close}, C{presettled}, C{target}); the queue
never sees it, so browsing costs the queue's consumers nothing.
"""

import functools

from mqgate.core.addresses import QUEUE, canonical, resolve
from mqgate.core.deliveries import Delivery
from mqgate.core.selectors import compile_selector, message_field

__all__ = ["Browser", "open_browser", "snapshot"]


def snapshot(queue):
    """The messages waiting in C{queue} now, as C{(message, delivery_count)} in
    delivery order; the queue is not changed."""
    return queue.backlog.snapshot()


def open_browser(broker, address, target, *, capabilities=(), presettled=False,
                 selector=None, requester=None):
    """A L{Browser} of the queue C{address} names, or C{None} when it names a topic
    (a topic subscription receives copies anyway: the glue attaches an ordinary
    consumer).

    The queue is made if a consumer would make it (S2.5): browsing an empty new
    queue shows nothing. C{selector}: text (blank: none) or compiled (S2.8).

    @raise NotFound: no such queue and it may not be created.
    @raise Unauthorized: it is another connection's temporary queue.
    @raise SelectorError: the selector does not compile.
    """
    if isinstance(selector, str):
        selector = compile_selector(selector) if selector.strip() else None
    kind, name = resolve(address, capabilities, broker.config.default_type)
    if kind != QUEUE:
        return None
    # What a consumer's attach checks, by the core's own means (names, reserved names,
    # auto-creation and its limits, temporary queues' ownership, audited).
    broker._check_name(kind, name)
    if broker.reserved is not None:
        broker.reserved(kind, name, "consume")
    # S7.2: a browser reads what a consumer would: a security setting's consume
    # permission covers it (a capture queue's copies are for the capture role only).
    broker._check_security(requester, name, "consume")
    queue = broker._private(broker._destination(QUEUE, name), requester)
    return Browser(canonical(kind, name), queue, target, presettled=presettled,
                   selector=selector, now=broker.clock.seconds)


class Browser:
    """Copies of a queue's waiting messages, handed out as credit allows.

    @ivar address: the canonical address browsed.
    @ivar queue: the queue browsed (read once, at attach, and never changed).
    @ivar target: whose C{deliver(delivery)} receives the copies.
    @ivar credit: how many more it may hand out now.
    @ivar handed: how many it handed out.
    @ivar closed: C{True} once closed.
    @ivar on_finished: called with no arguments, once, when the last message of the
        snapshot has been handed out (or skipped), or C{None}.
    """

    __slots__ = ("address", "queue", "target", "presettled", "selector", "credit",
                 "handed", "closed", "on_finished", "_pending", "_next", "_now",
                 "_handing", "_told")

    def __init__(self, address, queue, target, *, presettled=False, selector=None,
                 now=None):
        self.address = address
        self.queue = queue
        self.target = target
        self.presettled = presettled
        self.selector = selector
        self.credit = 0
        self.handed = 0
        self.closed = False
        self._pending = snapshot(queue)
        self._next = 0
        self._now = now
        self._handing = False
        self._told = False
        self.on_finished = None

    def __repr__(self):
        return (f"<Browser {self.address} {self.handed}/{len(self._pending)}"
                f" credit={self.credit}>")

    @property
    def finished(self):
        """Every message of the snapshot has been handed out (or skipped)."""
        return self._next >= len(self._pending)

    @property
    def unsettled(self):
        """Nothing a browser hands out is ever waited for."""
        return 0

    def set_credit(self, credit):
        """May hand out C{credit} more from now on (replaces the credit, as AMQP
        flow does); hands out what it can before returning."""
        if self.closed:
            return
        self.credit = credit if credit > 0 else 0
        self._hand()

    def drain(self):
        """Hand out what the credit allows, then give up the rest; return it."""
        if self.closed:
            return 0
        self._hand()
        given_up, self.credit = self.credit, 0
        return given_up

    def settle(self, delivery, outcome=None, **_ignored):
        """A browsed delivery's settlement changes nothing."""

    def close(self, *, remove=False):
        """Stop; nothing to give back."""
        self.closed = True
        self.credit = 0
        self._pending = []

    def _hand(self):
        # Re-entrant calls (the target lowering the credit) just update the credit:
        # the running loop reads it again after each hand-over.
        if self._handing:
            return
        self._handing = True
        try:
            pending = self._pending
            while self.credit > 0 and self._next < len(pending) and not self.closed:
                message, count = pending[self._next]
                pending[self._next] = None   # let it go once handed (memory)
                self._next += 1
                if self._skip(message):
                    continue
                self.credit -= 1
                self.handed += 1
                self.target.deliver(Delivery(message, self, count))
        finally:
            self._handing = False
        if self._next >= len(self._pending) and not self._told and not self.closed:
            self._told = True
            if self.on_finished is not None:
                self.on_finished()

    def _skip(self, message):
        if message.paged:
            # Its body is in the store only (memory state ORANGE or RED): a browser
            # does not wait for it, it shows what is in memory.
            return True
        expiry = message.expiry
        if expiry is not None and self._now is not None and expiry <= self._now():
            return True
        selector = self.selector
        return selector is not None and not selector.matches(
            functools.partial(message_field, message))
