"""
Capture subscriptions (S7.2-S7.4, S7.8, S7.9): copies of what an address routes, taken
at routing time, bounded so that capture can never hurt production traffic.

Installing a subscription C{SUB} on address C{ADDRESS} makes, on this broker (node):

- a copying divert from the address to C{mqgate.capture.<node>.<ADDRESS>.<SUB>};
- a ring queue of that name (never stored, never growing: the oldest copy goes);
- the address setting on C{mqgate.capture.#}: full policy DROP and an expiry delay;
- the security setting on C{mqgate.capture.#}: only the capture role consumes.

The copies are then drained from the ring by a consumer inside the broker, which hands
each to the subscription's L{ICaptureSink} as a L{CapturedCopy}
(L{mqgate.core.taps}). Production routing and consumers are untouched: the divert
copies, it does not take.

The bounds, each dropping and counting what is beyond it: the ingest rate (a token
bucket on the divert: beyond it a copy is not made, reason C{"rate"}); the ring (copies
the drain has not taken when the ring is full: the oldest goes, reason C{"ring"}); the
expiry delay (a copy without an expiry gets one). Body size, retention and stored size
are the sink's to apply (it keeps the copies); the subscription carries them.

Refusals, before anything is made (S7.3): an exclusive divert on the address (the
capture would see nothing: the divert and where the traffic goes are named), and a
security setting of an operator's on the capture queues that lets others consume (the
capture cannot restrict them: the setting it needs is named). Installing and removing
need C{capture:write} (S7.9): the requester must be in one of the writer groups. Both
are audited before anything is done and again with the outcome.
"""

import re

import attr
from twisted.logger import Logger
from zope.interface import implementer

from mqgate.core.addresses import QUEUE, TOPIC, NotAllowed, NotFound, canonical, resolve
from mqgate.core.deliveries import IConsumerTarget
from mqgate.core.errors import ErrorKind
from mqgate.core.selectors import compile_selector
from mqgate.core.settings import AddressSetting, SecuritySetting
from mqgate.core.taps import CapturedCopy

__all__ = ["CaptureBounds", "CaptureConfig", "CaptureRefused", "CaptureSubscription",
           "Captures", "CAPTURE_PREFIX", "CAPTURE_MATCH"]

CAPTURE_PREFIX = "mqgate.capture."
#: The match of the address and security settings every capture relies on.
CAPTURE_MATCH = "mqgate.capture.#"
#: Who made the settings and diverts a capture installs (their C{owner}).
OWNER = "capture"

# How often the drain hands copies to the sink, and reports drops (seconds).
DRAIN_INTERVAL = 0.05
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


class CaptureRefused(NotAllowed):
    """A capture was not installed (or removed); the description names the cause."""


class CaptureForbidden(CaptureRefused):
    """The requester lacks C{capture:write}."""

    kind = ErrorKind.UNAUTHORIZED


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CaptureBounds:
    """The bounds of one subscription (S7.4), with their defaults."""

    ring_size: int = 10_000
    expiry_delay: float = 24 * 3600.0
    rate: float = 500.0
    body_bytes: int = 256 * 1024
    retention: float = 7 * 24 * 3600.0
    stored_bytes: int = 5 << 30

    def __attrs_post_init__(self):
        for name in ("ring_size", "expiry_delay", "rate", "body_bytes", "retention",
                     "stored_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not value > 0:
                raise ValueError(f"capture bound {name}={value!r} must be a number"
                                 " greater than 0")
        if not isinstance(self.ring_size, int):
            raise ValueError(f"capture bound ring_size={self.ring_size!r} must be a whole"
                             " number of messages")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CaptureConfig:
    """What the broker's settings say about capture.

    @ivar node: this broker instance's name (in the capture queue names).
    @ivar broker_role: the group that may consume the capture queues.
    @ivar writers: the groups whose members may install and remove captures.
    @ivar bounds: the default L{CaptureBounds}.
    """

    node: str = "mqgate"
    broker_role: str = "amq"
    writers: tuple = ("admin",)
    bounds: CaptureBounds = CaptureBounds()


class _RateGate:
    # A token bucket: up to `rate` copies a second, bursts of up to a second's worth.
    __slots__ = ("rate", "_seconds", "_tokens", "_last", "dropped")

    def __init__(self, rate, seconds):
        self.rate = float(rate)
        self._seconds = seconds
        self._tokens = self.rate
        self._last = seconds()
        self.dropped = 0

    def admit(self):
        now = self._seconds()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self.rate, self._tokens + elapsed * self.rate)
            self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.dropped += 1
        return False


@implementer(IConsumerTarget)
class CaptureSubscription:
    """One installed capture: what it made, its bounds and its figures; the target
    of the in-broker consumer that drains its ring queue.

    @ivar copied: copies the divert made (within the rate).
    @ivar ingested: copies handed to the sink.
    """

    #: Nobody to tell when an operator destroys the ring queue: the consumer closes.
    revoked = None

    def __init__(self, name, address, node, bounds, selector, sink, created_by):
        self.name = name
        self.address = address
        self.node = node
        self.bounds = bounds
        self.selector = selector
        self.sink = sink
        self.created_by = created_by
        kind, plain = resolve(address)
        self.kind = kind
        self.queue_name = f"{CAPTURE_PREFIX}{node}.{plain}.{name}"
        # S7.7: a queue's copies went to that queue; a topic's, the core cannot say.
        self.routed_to = (plain,) if kind == QUEUE else None
        self.divert_name = f"capture.{name}"
        self.ingested = 0
        self.queue = None
        self.divert = None
        self.consumer = None
        self.gate = None
        self._reported = {"rate": 0, "ring": 0}

    @property
    def dropped_rate(self):
        return self.gate.dropped if self.gate is not None else 0

    @property
    def dropped_ring(self):
        return self.queue.removed if self.queue is not None else 0

    def describe(self):
        """What an operator reads about it (the admin commands, the HTTP API)."""
        divert = self.divert
        queue = self.queue
        return {
            "name": self.name, "address": self.address, "node": self.node,
            "queue": self.queue_name, "divert": self.divert_name,
            "filter": None if self.selector is None else self.selector.text,
            "created_by": self.created_by,
            "copied": 0 if divert is None else divert.taken,
            "ingested": self.ingested, "depth": 0 if queue is None else queue.depth,
            "dropped_rate": self.dropped_rate, "dropped_ring": self.dropped_ring,
            "ring_size": self.bounds.ring_size, "expiry_delay": self.bounds.expiry_delay,
            "rate": self.bounds.rate, "body_bytes": self.bounds.body_bytes,
            "retention": self.bounds.retention, "stored_bytes": self.bounds.stored_bytes,
            "per_address": self.kind == TOPIC,
        }

    def spec(self):
        """What the runtime catalog keeps to make it again after a restart."""
        return {"name": self.name, "address": self.address,
                "filter": None if self.selector is None else self.selector.text,
                "created_by": self.created_by, "bounds": attr.asdict(self.bounds)}

    # -- the drain: an in-broker consumer of the ring ----------------------------

    def deliver(self, delivery):
        message = delivery.message
        self.ingested += 1
        original_id = None if message.message_id is None else str(message.message_id)
        self.sink.ingest(CapturedCopy(
            subscription=self.name, node=self.node, address=self.address,
            kind=self.kind,
            routed_to=self.routed_to,
            captured_at=self._now(), message=message, original_id=original_id,
            verify_reason=None if original_id is not None else
            "the producer gave the message no message-id, so it cannot be looked up"
            " on the broker"))

    def report_drops(self):
        """Tell the sink of the drops since the last report."""
        for reason, total in (("rate", self.dropped_rate), ("ring", self.dropped_ring)):
            new = total - self._reported[reason]
            if new > 0:
                self._reported[reason] = total
                self.sink.dropped(self.name, reason, new)

    _now = None


class Captures:
    """The capture subscriptions of one broker.

    @param broker: the L{mqgate.core.broker.Broker}.
    @param clock: an C{IReactorTime} (C{seconds} and C{callLater}).
    @param config: the L{CaptureConfig}.
    @param sink: the L{ICaptureSink} every subscription's copies go to.
    @param on_change: called with no argument after an install or a removal (the
        runtime catalog writes itself then), or C{None}.
    """

    log = Logger(namespace="mqgate.capture")

    def __init__(self, broker, clock, config, sink, on_change=None):
        self.broker = broker
        self.clock = clock
        self.config = config
        self.sink = sink
        self.on_change = on_change
        self._subs = {}
        self._timer = None

    def __iter__(self):
        return iter(list(self._subs.values()))

    def get(self, name):
        """The subscription called C{name}. @raise NotFound: none."""
        sub = self._subs.get(name)
        if sub is None:
            raise NotFound(f"no capture subscription called {name!r} (list capture shows"
                           " them)")
        return sub

    def use_sink(self, sink):
        """Hand every subscription's copies, from now on, to C{sink} (the capture
        index, once it is up: subscriptions restored at start were made before)."""
        self.sink = sink
        for sub in self._subs.values():
            sub.sink = sink

    def bounds_of(self, name):
        """The L{CaptureBounds} of subscription C{name}, or C{None}."""
        sub = self._subs.get(name)
        return None if sub is None else sub.bounds

    def may_write(self, requester):
        """Whether C{requester} holds C{capture:write} (S7.9); C{None} is the broker
        itself (a restore)."""
        return requester is None or bool(set(requester.groups) & set(self.config.writers))

    # -- install ------------------------------------------------------------------

    def install(self, name, address, *, selector=None, bounds=None, requester=None,
                restoring=False, created_by=None):
        """Install the capture subscription C{name} on C{address}; return it.

        @raise CaptureForbidden: the requester lacks C{capture:write}.
        @raise CaptureRefused: the cases of S7.3, or the name is taken or malformed.
        @raise SelectorError: the filter does not compile.
        @raise AddressError: the address names nothing.
        """
        user = None if requester is None else requester.user
        details = {"subscription": name, "capture_address": address}
        if not restoring:
            self._audit("capture.install", "requested", requester, **details)
        try:
            sub = self._install(name, address, selector, bounds, requester)
            if created_by is not None:
                sub.created_by = created_by
        except Exception as e:
            if not restoring:
                self._audit("capture.install", "failed", requester, why=str(e), **details)
            raise
        if not restoring:
            self._audit("capture.install", "ok", requester, **details)
            self.log.info("capture {name} installed on {address} by {user}: copies go to"
                          " {queue}", name=name, address=sub.address, user=user,
                          queue=sub.queue_name)
        self._changed()
        return sub

    def _install(self, name, address, selector, bounds, requester):
        if not self.may_write(requester):
            raise CaptureForbidden(
                f"user {requester.user} may not install or remove captures: that needs"
                f" capture:write, given to the group(s)"
                f" {', '.join(self.config.writers)} (mqgate.capture.writers)")
        if not isinstance(name, str) or not _NAME.match(name):
            raise CaptureRefused(
                f"capture subscription name {name!r} must be 1 to 64 letters, digits,"
                " '-' or '_'")
        if name in self._subs:
            raise CaptureRefused(f"a capture subscription called {name!r} already exists"
                                 f" (on {self._subs[name].address})")
        broker = self.broker
        kind, plain = broker._resolve(address, ())
        source = canonical(kind, plain)
        if plain.startswith(CAPTURE_PREFIX):
            raise CaptureRefused(f"{source} is a capture queue: capture cannot capture"
                                 " itself")
        bounds = bounds if bounds is not None else self.config.bounds
        compiled = None if selector is None or not str(selector).strip() \
            else compile_selector(selector)
        self._refuse_exclusive(source)
        self._refuse_unrestrictable()
        sub = CaptureSubscription(name, source, self.config.node, bounds, compiled,
                                  self.sink, None if requester is None else requester.user)
        sub._now = self.clock.seconds
        self._build(sub)
        self._subs[name] = sub
        if self._timer is None:
            self._timer = self.clock.callLater(DRAIN_INTERVAL, self._tick)
        return sub

    def _refuse_exclusive(self, source):
        exclusive = self.broker.diverts.table.exclusive_on(source)
        if exclusive:
            divert = exclusive[0]
            taken = "every message" if divert.selector is None else \
                f"the messages matching {divert.selector.text!r}"
            raise CaptureRefused(
                f"{source} has the exclusive divert {divert.name!r}, which moves"
                f" {taken} to {divert.target} before any copy is made: a capture here"
                f" would silently miss them. Capture {divert.target} instead, or remove"
                " that divert first")

    def _refuse_unrestrictable(self):
        # S7.3: the capture queues must be consumable by the capture role only; an
        # operator's security setting covering them that lets others consume would
        # win or tie, and capture does not override an operator's setting.
        probe = f"{CAPTURE_PREFIX}{self.config.node}.probe"
        setting = self.broker.settings.security_for(probe)
        role = self.config.broker_role
        if setting is None or setting.owner == OWNER:
            return
        roles = setting.permissions.get("consume")
        if roles is None or set(roles) != {role}:
            raise CaptureRefused(
                f"the security setting on {setting.match}, made by an operator, lets"
                f" {'anyone' if roles is None else 'group(s) ' + ', '.join(roles)}"
                f" consume the capture queues, and capture will not override it: it"
                f" needs a security setting on {CAPTURE_MATCH} with consume={role}"
                " only (set it, or remove that one)")

    def _build(self, sub):
        broker = self.broker
        settings = broker.settings
        if CAPTURE_MATCH not in settings.address:
            settings.address[CAPTURE_MATCH] = AddressSetting(
                CAPTURE_MATCH, "DROP", sub.bounds.expiry_delay, owner=OWNER)
        if CAPTURE_MATCH not in settings.security:
            settings.security[CAPTURE_MATCH] = SecuritySetting(
                CAPTURE_MATCH, {"consume": (self.config.broker_role,)}, owner=OWNER)
        sub.queue = broker.create_ring_queue(sub.queue_name, sub.bounds.ring_size,
                                             stored=False)
        sub.gate = _RateGate(sub.bounds.rate, self.clock.seconds)
        sub.consumer = broker.open_consumer(canonical(QUEUE, sub.queue_name), sub,
                                            presettled=True)
        divert = broker.create_divert(sub.divert_name, sub.address,
                                      canonical(QUEUE, sub.queue_name),
                                      selector=sub.selector, owner=OWNER)
        divert.gate = sub.gate.admit
        divert.volatile = True     # a ring is never stored
        sub.divert = divert
        self._expiry(sub)

    def _expiry(self, sub):
        # S7.4: a copy without an expiry gets the address setting's delay on the
        # capture queues (the subscription's own when there is none). Looked up here
        # and at each drain tick, not per copy: a setting's match costs a pattern
        # match, and a change takes effect within a tick.
        setting = self.broker.settings.address_for(sub.queue_name)
        sub.divert.expiry_delay = sub.bounds.expiry_delay if setting is None or \
            setting.expiry_delay is None else setting.expiry_delay

    # -- remove -------------------------------------------------------------------

    def remove(self, name, *, requester=None):
        """Remove the capture subscription C{name} and everything it installed
        (S7.8): its divert, its ring queue (with the copies it still holds), and the
        capture address and security settings once no subscription is left.

        @raise CaptureForbidden: the requester lacks C{capture:write}.
        @raise NotFound: there is no such subscription.
        """
        details = {"subscription": name}
        self._audit("capture.remove", "requested", requester, **details)
        try:
            if not self.may_write(requester):
                raise CaptureForbidden(
                    f"user {requester.user} may not install or remove captures: that"
                    f" needs capture:write, given to the group(s)"
                    f" {', '.join(self.config.writers)} (mqgate.capture.writers)")
            sub = self.get(name)
            self._teardown(sub)
        except Exception as e:
            self._audit("capture.remove", "failed", requester, why=str(e), **details)
            raise
        self._audit("capture.remove", "ok", requester, **details)
        self.log.info("capture {name} on {address} removed", name=name,
                      address=sub.address)
        self._changed()
        return sub

    def _teardown(self, sub):
        broker = self.broker
        del self._subs[sub.name]
        sub.report_drops()
        if broker.diverts.table.get(sub.divert_name) is not None:
            broker.destroy_divert(sub.divert_name)
        if sub.consumer is not None:
            sub.consumer.close(remove=True)
        if sub.queue is not None and not sub.queue.deleted:
            broker.destroy_destination(QUEUE, sub.queue_name, "capture removed")
        if not self._subs:
            for table in (broker.settings.address, broker.settings.security):
                setting = table.get(CAPTURE_MATCH)
                if setting is not None and setting.owner == OWNER:
                    del table[CAPTURE_MATCH]
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self._timer = None

    def stop(self):
        """Stop draining (the broker is stopping); nothing is removed."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    # -- the drain ----------------------------------------------------------------

    def _tick(self):
        # Every interval while a subscription exists: each drain takes what waits in
        # its ring (a ring's worth at most) and gives up its credit again, and drops
        # are reported. Between ticks copies wait in the ring (the oldest goes when it
        # is full), so the sink is never called from inside a producer's send.
        self._timer = None
        for sub in list(self._subs.values()):
            consumer = sub.consumer
            if consumer is not None and not consumer.closed:
                consumer.set_credit(sub.bounds.ring_size)
                consumer.drain()
            sub.report_drops()
            if sub.divert is not None:
                self._expiry(sub)
        if self._subs:
            self._timer = self.clock.callLater(DRAIN_INTERVAL, self._tick)

    def _changed(self):
        if self.on_change is not None:
            self.on_change()

    def _audit(self, kind, outcome, requester, **details):
        audit = self.broker.audit
        if audit is None:
            return
        if requester is None:
            audit.record(kind, outcome, **details)
        else:
            audit.record(kind, outcome, user=requester.user, address=requester.address,
                         service=requester.service, **details)
