"""
Diverts (S7.1): a divert on an address copies each message routed there to another
address (non-exclusive), or sends it there instead (exclusive), optionally only the
messages a selector accepts.

The order is Artemis' (FACTS 2): the exclusive diverts of an address are tried first,
in the order they were made; the first that takes a message moves it, and then no
non-exclusive divert of that address runs. So a copy made behind an exclusive divert
would silently see nothing, which is why installing a capture refuses then (S7.3).

One hop each: a message an exclusive divert moved meets the copying diverts of the
address it was moved to (so a capture there sees it), never that address's exclusive
ones; a copy is routed like any message sent to the target address, but no divert
applies to it (no chains, no loops). The copy is a new message sharing the original's
encoded bytes (design rule 2); only the broker's routing fields are its own. A copy
the target refuses (full and rejecting, destroyed, its store failing) is counted on the
divert and never told to the original's producer: a divert never holds production
back.
"""

import functools

from twisted.logger import Logger

from mqgate.core.addresses import NotAllowed, NotFound, resolve
from mqgate.core.errors import CoreError
from mqgate.core.message import BrokerMessage
from mqgate.core.selectors import message_field

__all__ = ["Divert", "DivertRouter", "DivertSet", "Diverts", "copy_of"]


class Divert:
    """One divert.

    @ivar name: unique on the broker.
    @ivar source: the canonical address it is on (C{'queue://orders'}).
    @ivar target: the canonical address it forwards to.
    @ivar exclusive: moves (C{True}) or copies (C{False}).
    @ivar selector: the compiled selector that picks the messages it takes, or C{None}
        (every message).
    @ivar gate: for a copying divert, C{gate() -> bool} asked before each copy is
        made (a capture's ingest rate, L{mqgate.core.capture}); C{False}: no copy.
        C{None}: every message it takes is copied.
    @ivar expiry_delay: seconds a copy without an expiry of its own may live (an
        address setting's expiry delay), or C{None}.
    @ivar volatile: its copies are never stored (a capture's ring), whatever the
        original's durability.
    @ivar taken: messages it moved or copied.
    @ivar failed: copies its target refused (full, destroyed), counted, never told to
        the original's producer.
    @ivar owner: who made it (C{None}: an operator; else the capture subscription's
        name): an operator cannot remove a capture's divert on its own (S7.8).
    """

    __slots__ = ("name", "source", "target", "exclusive", "selector", "gate", "taken",
                 "failed", "owner", "producer", "expiry_delay", "volatile")

    def __init__(self, name, source, target, *, exclusive=False, selector=None,
                 owner=None):
        self.name = name
        self.source = source
        self.target = target
        self.exclusive = bool(exclusive)
        self.selector = selector
        self.owner = owner
        self.gate = None
        self.expiry_delay = None
        self.volatile = False
        self.taken = 0
        self.failed = 0
        # The broker's internal producer that routes this divert's copies (or None).
        self.producer = None

    def __repr__(self):
        kind = "exclusive" if self.exclusive else "copying"
        return f"<Divert {self.name!r} {kind} {self.source} -> {self.target}>"

    def takes(self, message):
        """Whether this divert takes C{message} (its selector, if any, accepts it)."""
        selector = self.selector
        return selector is None or selector.matches(
            functools.partial(message_field, message))

    def describe(self):
        """What an operator reads about it (the admin commands' rows)."""
        return {"name": self.name, "address": self.source, "target": self.target,
                "exclusive": self.exclusive,
                "selector": None if self.selector is None else self.selector.text,
                "taken": self.taken, "failed": self.failed, "owner": self.owner}


class DivertSet:
    """The diverts on one address, as its destination holds them (C{diverts}): the
    exclusive ones and the copying ones, each in the order they were made."""

    __slots__ = ("exclusive", "copying", "_copy_all")

    def __init__(self, diverts):
        self.exclusive = tuple(d for d in diverts if d.exclusive)
        self.copying = tuple(d for d in diverts if not d.exclusive)
        # No copying divert has a selector (a capture without a filter): each takes
        # every message, and no per-message list is made.
        self._copy_all = all(d.selector is None for d in self.copying)

    def moving(self, message):
        """The exclusive divert that moves C{message}, or C{None}."""
        for divert in self.exclusive:
            if divert.takes(message):
                return divert
        return None

    def copying_for(self, message):
        """The copying diverts that take C{message} (a sequence, maybe empty)."""
        if self._copy_all:
            return self.copying
        return [divert for divert in self.copying if divert.takes(message)]


class Diverts:
    """Every divert on the broker: by name, and by the address they are on."""

    def __init__(self):
        self._by_name = {}
        self._by_source = {}

    def __iter__(self):
        return iter(list(self._by_name.values()))

    def __len__(self):
        return len(self._by_name)

    def get(self, name):
        """The divert called C{name}, or C{None}."""
        return self._by_name.get(name)

    def add(self, divert):
        """Add C{divert}.

        @raise NotAllowed: a divert of that name exists, or it would forward to the
            address it is on.
        """
        if divert.name in self._by_name:
            raise NotAllowed(f"a divert called {divert.name!r} already exists (on"
                             f" {self._by_name[divert.name].source}); choose another"
                             " name or destroy that one first")
        if divert.source == divert.target:
            raise NotAllowed(f"divert {divert.name!r} would forward {divert.source} to"
                             " itself")
        self._by_name[divert.name] = divert
        self._by_source.setdefault(divert.source, []).append(divert)

    def remove(self, name):
        """Remove and return the divert called C{name}.

        @raise NotFound: there is none.
        """
        divert = self._by_name.pop(name, None)
        if divert is None:
            raise NotFound(f"no divert called {name!r}")
        on_source = self._by_source[divert.source]
        on_source.remove(divert)
        if not on_source:
            del self._by_source[divert.source]
        return divert

    def on(self, address):
        """The L{DivertSet} of the canonical C{address}, or C{None} when it has none."""
        diverts = self._by_source.get(address)
        return DivertSet(diverts) if diverts else None

    def exclusive_on(self, address):
        """The exclusive diverts on C{address} (a list, maybe empty)."""
        return [d for d in self._by_source.get(address, ()) if d.exclusive]


def copy_of(message, to):
    """A new message for address C{to} carrying C{message}'s encoded bytes and
    routing fields: what a divert routes (the original is never changed, and may be
    shared by subscriptions)."""
    copy = BrokerMessage(message.payload, durable=message.durable,
                         priority=message.priority, expiry=message.expiry, to=to,
                         reply_to=message.reply_to, message_id=message.message_id,
                         correlation_id=message.correlation_id,
                         delivery_count=message.delivery_count)
    copy.size = message.size
    return copy


class DivertRouter:
    """The broker's diverts at work: the table, the destinations' L{DivertSet}s kept
    in step with it, and the moving and copying a L{mqgate.core.broker.Producer} asks
    for.

    @param existing: C{existing(kind, name)}: the destination, or C{None}.
    @param destination_of: C{destination_of(kind, name)}: the destination, made when
        the broker may (else it raises L{NotFound}).
    @param make_producer: C{make_producer()}: an anonymous producer that applies no
        divert, to route one divert's copies.
    @param seconds: the clock's C{seconds} (expiry delays count from it).
    """

    log = Logger(namespace="mqgate.core.diverts")

    def __init__(self, existing, destination_of, make_producer, seconds):
        self.table = Diverts()
        self._seconds = seconds
        self._existing = existing
        self._destination_of = destination_of
        self._make_producer = make_producer

    def add(self, divert):
        """Put C{divert} to work (see L{Diverts.add} for what it raises)."""
        self.table.add(divert)
        if not divert.exclusive:
            divert.producer = self._make_producer()
        self._refresh(divert.source)

    def remove(self, name):
        """Stop and remove the divert called C{name}; return it. Copies already
        routed stay where they went."""
        divert = self.table.remove(name)
        if divert.producer is not None:
            divert.producer.close()
            divert.producer = None
        self._refresh(divert.source)
        return divert

    def made(self, kind, name, destination):
        """A destination was made: give it the diverts already on its address."""
        destination.diverts = self.table.on(f"{kind}://{name}")

    def _refresh(self, address):
        kind, name = resolve(address)
        destination = self._existing(kind, name)
        if destination is not None:
            destination.diverts = self.table.on(address)

    def move(self, destination, message):
        """Where C{message}, routed to C{destination}, really goes: the target of the
        first exclusive divert that takes it, or C{destination} itself.

        @raise NotFound: the target does not exist and may not be made.
        """
        divert = destination.diverts.moving(message)
        if divert is None:
            return destination
        target = self._destination_of(*resolve(divert.target))
        divert.taken += 1
        return target

    def copy(self, destination, message):
        """Route a copy of C{message} to the target of each copying divert of
        C{destination} that takes it."""
        for divert in destination.diverts.copying_for(message):
            if divert.gate is not None and not divert.gate():
                continue
            copy = copy_of(message, divert.target)
            if divert.volatile:
                copy.durable = False
            if copy.expiry is None and divert.expiry_delay is not None:
                copy.expiry = self._seconds() + divert.expiry_delay
            divert.taken += 1
            try:
                stored = divert.producer.send(copy)
            except CoreError as error:
                self._failed(divert, error)
            else:
                if stored is not None:
                    stored.addErrback(lambda f, d=divert: self._failed(d, f.value))

    def _failed(self, divert, error):
        # The first refusal of a divert is logged; the rest are counted (a full
        # target would otherwise log each message).
        divert.failed += 1
        if divert.failed == 1:
            self.log.warn(
                "divert {name} could not copy a message from {source} to {target}:"
                " {error}; further copies it cannot route are counted (list divert),"
                " not logged", name=divert.name, source=divert.source,
                target=divert.target, error=error)
