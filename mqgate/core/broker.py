"""
The broker core: destinations by name, producers and consumers (S2.1, S2.5, S2.9, S8.1).

No I/O (design rule 1): time comes from the injected clock, and deliveries leave
through the consumer's target object. The protocol glue turns link attaches into
L{Broker.open_producer}/L{Broker.open_consumer}, transfers into L{Producer.send}, flow
frames into L{Consumer.set_credit}/L{Consumer.drain}, dispositions into
L{Consumer.settle} and detaches into C{close}.
"""

import collections
import functools
import itertools
import secrets
from dataclasses import dataclass

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.core.dead import DMQ_NAME, DeadLetters, dmq_limits
from mqgate.core.addresses import (
    QUEUE, TOPIC, AddressError, NameLimitExceeded, NotAllowed, NotFound, canonical,
    check_name, is_pattern, resolve)
from mqgate.core.diverts import Divert, DivertRouter
from mqgate.core.deliveries import (
    ACCEPTED, MODIFIED, REJECTED, RELEASED, Consumer, Delivery)
from mqgate.core.destinations import Pause, Queue, SubscriptionIndex, Topic, drops_new
from mqgate.core.limits import (
    FLOW_CONTROL, LIMIT_BEHAVIORS, REJECT_NEWEST, Limits, ResourceLimitExceeded,
    StoreBacklog, SystemLimits, limits_attributes, limits_from_attributes, names_limits)
from mqgate.core.message import BrokerMessage
from mqgate.core import mqlight
from mqgate.core.modes import ConsumerModes, modes_attributes, modes_from_attributes
from mqgate.core.persistence import stored_on
from mqgate.core.ring import ring_limits
from mqgate.core.settings import RuntimeSettings
from mqgate.core.selectors import Selector, SelectorError, compile_selector
from mqgate.core.transactions import TransactionLimits
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import ConfigError

__all__ = [
    "ACCEPTED", "REJECTED", "RELEASED", "MODIFIED", "AddressError", "Broker",
    "BrokerMessage", "Consumer", "CoreConfig", "Delivery", "FLOW_CONTROL", "Limits",
    "NameLimitExceeded", "NotAllowed", "NotFound", "Producer", "REJECT_NEWEST",
    "Requester", "ResourceLimitExceeded", "SelectorError", "StoreBacklog",
    "Unauthorized",
]

# Anonymous producers resolve message.to through a cache; bounded so that a client
# sending to ever new addresses cannot grow it without limit (design rule 4).
_ROUTE_CACHE_MAX = 4096

# A temporary destination's name is this prefix (so that operators and the docs
# recognise it) and 128 random bits: a client cannot guess another's reply address.
_TEMPORARY_PREFIX = "mqgate.tmp."
_TEMPORARY_BYTES = 16

# The group whose members may resume or delete any user's durable subscription.
ADMIN_GROUP = "admin"

_AUTOCREATE = "mqgate.autocreate.destination."

_TOTALS = ("published", "delivered", "acknowledged", "dropped", "expired", "bytes_in",
           "bytes_out")

# The stored attribute of a topic's default persistence (S8.4), as update dst names it.
_DEFAULT_PERSISTENCE = "defaultPersistence"

#: The kind of error a consumer's or producer's link is revoked with when an operator
#: destroys its destination (the AMQP glue detaches it with amqp:resource-deleted).
RESOURCE_DELETED = ErrorKind.DELETED


@dataclass(frozen=True)
class CoreConfig:
    """What the core needs from the settings (S2.1, S2.5).

    @ivar autocreate_queue: C{mqgate.autocreate.queue}: create unknown queues on use.
    @ivar autocreate_topic: C{mqgate.autocreate.topic}: create unknown topics on use.
    @ivar default_type: the kind a bare address name resolves to (C{'queue'} or
        C{'topic'}).
    @ivar max_num_msgs: C{mqgate.autocreate.destination.maxNumMsgs}: messages a queue
        (or a topic subscription) may hold; -1 means no limit (S2.3, S2.5).
    @ivar max_total_msg_bytes: C{mqgate.autocreate.destination.maxTotalMsgBytes}:
        bytes of messages a queue may hold, waiting or in flight; -1 means no limit.
    @ivar limit_behavior: C{mqgate.autocreate.destination.limitBehavior}: what a full
        destination does to its producers, L{FLOW_CONTROL} or L{REJECT_NEWEST}.
    @ivar max_count: C{mqgate.system.max_count}: messages the broker holds, -1 for no
        limit (S2.2).
    @ivar max_size: C{mqgate.system.max_size}: bytes of messages the broker holds, -1
        for no limit (S2.2).
    @ivar max_message_size: C{mqgate.message.max_size}: the largest message (S2.2).
    @ivar max_destinations: C{mqgate.system.max_destinations}: queues, topics and
        durable subscriptions clients may make the broker create.
    @ivar max_name_length: C{mqgate.destination.max_name_length}: characters of a
        destination name or topic pattern.
    @ivar max_topic_levels: C{mqgate.topic.max_levels}: levels of a topic name or
        pattern.
    @ivar max_bytes_per_msg, max_num_producers, consumer_flow_limit, use_dmq: the
        C{mqgate.autocreate.destination.*} defaults of the other destination
        properties (S2.3, FACTS 1.6); -1 means no limit.
    @ivar max_delivery_count: C{mqgate.destination.max_delivery_count}: failed
        deliveries after which a message is dead (S2.4); 0 means no limit.
    @ivar dmq_max_num_msgs, dmq_max_total_msg_bytes: the dead message queue's limits
        (C{mqgate.destination.DMQ.*}); it removes its oldest past them.
    @ivar dmq_truncate_body: C{mqgate.destination.DMQ.truncateBody}.
    @ivar log_dead_messages: C{mqgate.destination.logDeadMsgs}.
    @ivar max_active_consumers: C{mqgate.autocreate.queue.maxNumActiveConsumers}:
        consumers a queue delivers to at once, -1 for any (L{mqgate.core.modes}).
    @ivar max_backup_consumers: C{mqgate.autocreate.queue.maxNumBackupConsumers}:
        consumers that may wait as backups beyond them, -1 for any.
    @ivar topic_default_persistence: C{mqgate.topic.default_persistence}: whether a
        message published to a topic without C{durable=true} is persistent (S8.4),
        for topics an operator did not set otherwise.
    """

    autocreate_queue: bool = True
    autocreate_topic: bool = True
    default_type: str = QUEUE
    max_num_msgs: int = 100000
    max_total_msg_bytes: int = 1 << 30
    limit_behavior: str = FLOW_CONTROL
    max_count: int = -1
    max_size: int = -1
    max_message_size: int = 70 << 20
    max_destinations: int = 100000
    max_name_length: int = 255
    max_topic_levels: int = 32
    max_bytes_per_msg: int = -1
    max_num_producers: int = -1
    consumer_flow_limit: int = -1
    use_dmq: bool = True
    max_delivery_count: int = 10
    dmq_max_num_msgs: int = 1000
    dmq_max_total_msg_bytes: int = 10 << 20
    dmq_truncate_body: bool = False
    log_dead_messages: bool = False
    max_active_consumers: int = -1
    max_backup_consumers: int = 0
    topic_default_persistence: bool = False

    def __post_init__(self):
        if self.default_type not in (QUEUE, TOPIC):
            raise ConfigError("default_type", self.default_type, "queue or topic")
        if self.limit_behavior not in LIMIT_BEHAVIORS:
            raise ConfigError(_AUTOCREATE + "limitBehavior", self.limit_behavior,
                              " or ".join(LIMIT_BEHAVIORS))
        for key, value in (("maxNumMsgs", self.max_num_msgs),
                           ("maxTotalMsgBytes", self.max_total_msg_bytes)):
            if value < -1 or value == 0:
                raise ConfigError(_AUTOCREATE + key, value,
                                  "-1 (no limit) or a positive integer")

    @property
    def system_limits(self):
        """A new L{SystemLimits} holding nothing yet (S2.2)."""
        return SystemLimits(self.max_count, self.max_size, self.max_message_size)

    @property
    def consumer_modes(self):
        """The L{ConsumerModes} every queue is made with (FACTS 1.6)."""
        try:
            return ConsumerModes(self.max_active_consumers, self.max_backup_consumers)
        except ValueError as error:
            raise ConfigError("mqgate.autocreate.queue.maxNumActiveConsumers/"
                              "maxNumBackupConsumers",
                              (self.max_active_consumers, self.max_backup_consumers),
                              str(error)) from None

    @property
    def limits(self):
        """The L{Limits} every destination is made with (S2.5: auto-create limits)."""
        return Limits(self.max_num_msgs, self.max_total_msg_bytes, self.limit_behavior,
                      max_message_bytes=self.max_bytes_per_msg,
                      max_producers=self.max_num_producers,
                      consumer_flow_limit=self.consumer_flow_limit,
                      use_dmq=self.use_dmq, max_delivery_count=self.max_delivery_count)


class Unauthorized(CoreError):
    """The requester may not use what it names: another connection's temporary
    destination, another user's durable subscription."""

    kind = ErrorKind.UNAUTHORIZED


@dataclass(frozen=True)
class Requester:
    """Who attaches a consumer, as ownership needs it.

    @ivar user: the logged-in user's name (C{None}: unknown).
    @ivar admin: whether the user is in group L{ADMIN_GROUP}.
    @ivar connection: any object standing for the client's connection, compared by
        identity: the owner of the temporary destinations it makes.
    @ivar address: the client's address, and C{service} the connection service, for
        the audit trail only.
    @ivar groups: the user's groups (the roles a security setting names, S7.2).
    """

    user: object = None
    admin: bool = False
    connection: object = None
    address: object = None
    service: object = None
    groups: tuple = ()

    @classmethod
    def of(cls, principal, connection, address=None, service=None):
        """The requester for C{principal} (name, groups; or C{None}) on
        C{connection}."""
        if principal is None:
            return cls(None, False, connection, address, service)
        return cls(principal.name, ADMIN_GROUP in principal.groups, connection, address,
                   service, tuple(principal.groups))


class Producer:
    """A sender attached to one destination, or anonymous (routes by C{message.to}).

    Flow control (S2.3, S2.7): a send that fills a FLOW_CONTROL destination still goes
    through, but leaves the producer L{blocked} until that destination is back under its
    low-water mark; the glue stops granting credit (AMQP) or reading the socket (STOMP)
    meanwhile and goes on when L{when_unblocked} calls it back. A producer may therefore
    overshoot a limit by what it had in flight, which its credit bounds.

    Messages waiting for the store (a persistent one, and those sent after it) count
    in the connection's L{StoreBacklog}, when the glue gave one: the glue holds the
    connection back while it is L{StoreBacklog.over}.

    @ivar address: the canonical address (C{'queue://x'}, C{'topic://x'}), or C{None}
        for an anonymous producer.
    """

    __slots__ = ("address", "closed", "_dest", "_route", "_next_seq", "_blockers",
                 "_callbacks", "_system", "_held", "_releasing", "_backlog",
                 "on_revoked", "_defaults", "_diverter", "_seconds")

    log = Logger(namespace="mqgate.core")

    def __init__(self, address, destination, route, next_seq, system, backlog=None,
                 defaults=Limits(), diverter=None, seconds=None):
        self.address = address
        # S7.1: the clock an address setting's expiry delay counts from.
        self._seconds = seconds
        # S7.1: the broker, which moves and copies what diverts take; None for the
        # broker's own producer of divert copies (a copy is never diverted again).
        self._diverter = diverter
        # The limits of a topic that was given none (S2.3 maxBytesPerMsg).
        self._defaults = defaults
        self.closed = False
        self._system = system
        if destination is not None:
            destination.attached[self] = None
        self._dest = destination
        self._route = route
        self._next_seq = next_seq
        # The full queues this producer waits for, and who to tell when none is left;
        # made only when the producer first blocks.
        self._blockers = None
        self._callbacks = None
        # Messages of this producer waiting, in send order, for the persistent ones
        # among them to be stored (_Held); made when first needed.
        self._held = None
        self._releasing = False
        self._backlog = backlog
        # on_revoked(kind, description): the glue's way to detach its link when
        # an operator destroys the destination (S11.1); None: just closed.
        self.on_revoked = None
        if destination is not None and destination.holding is not None:
            self._wait_for(destination.holding)   # attached to a paused destination

    def __repr__(self):
        return f"<Producer {self.address}{' closed' if self.closed else ''}>"

    def send(self, message):
        """Route C{message} now and deliver it to consumers with credit.

        A topic enqueues the same message object on every matching subscription, or
        drops it (counted) when none matches.

        @raise NotFound: the destination was deleted, or (anonymous) C{message.to} names
            a destination that does not exist and may not be created.
        @raise AddressError: (anonymous) C{message.to} is missing or empty.
        @raise ResourceLimitExceeded: the destination (for a topic, one of its
            subscriptions) is full and its limit behaviour is REJECT_NEWEST (S2.3), or
            the message is larger than C{mqgate.message.max_size} or the broker holds
            as much as C{mqgate.system.*} allow (S2.2); the message was not enqueued
            anywhere.
        @return: C{None}, or, when the message is persistent and went to a queue (or
            durable subscription) that stores its messages, a Deferred that fires once
            the store has it (and it is enqueued) and errbacks with
            L{mqgate.core.persistence.StorageFailed} when it could not be stored (it is
            then enqueued nowhere): the producer's delivery must be settled only then
            (S3.4, S3.6, S8.1).
        """
        destination = self.admit(message)
        if destination.full and drops_new(destination):
            return None
        if message.seq is None:
            message.seq = self._next_seq()
        if destination.diverts is not None and self._diverter is not None:
            self._diverter.copy(destination, message)
        if destination.holding is not None:
            return self._send_paused(destination, message)
        if message.durable:
            return self._send_persistent(destination, message)
        if self._held:
            # Persistent messages sent before this one wait for the store: this one
            # waits behind them, so that the producer's order holds.
            self._hold(_Held(destination, None, message, _READY))
            return None
        destination.publish(message)
        if destination.full:
            self._block(destination)
        return None

    def admit(self, message):
        """The destination C{message} would go to, with every check L{send} makes
        before it sends (L{send} starts here): a transaction admits a message when it
        is sent and publishes it at its commit, through L{enqueue_committed} (S6.3).
        Raises what L{send} raises for a message it refuses; takes no seq and counts
        nothing."""
        if self.closed:
            raise CoreError("send on a closed producer", ErrorKind.ILLEGAL_STATE)
        self._system.admit(message.size)
        destination = self._dest
        if destination is None:
            destination = self._route(message.to)
        elif destination.deleted:
            raise NotFound(f"destination {self.address} was deleted")
        if destination.diverts is not None and self._diverter is not None:
            destination = self._diverter.move(destination, message)
        limits = destination.limits or self._defaults
        if message.size > limits.max_message_bytes:
            limits.check_message(message.size, canonical_of(destination))
        if destination.full:
            _refuse_if_rejecting(destination)
        delay = destination.expiry_delay
        if delay is not None and message.expiry is None and self._seconds is not None:
            # S7.1: an address setting's expiry-delay, for a message without one.
            message.expiry = self._seconds() + delay
        if not message.durable and type(destination) is Topic:
            # S8.4: the publisher's durable=true always wins; otherwise the topic's
            # default persistence decides (here, so that a transaction's send, which
            # is admitted now and stored at its commit, is decided alike).
            message.durable = destination.default_persistence
        return destination

    def enqueue_committed(self, destination, targets, message):
        """Enqueue a message of a committed transaction (admitted by L{admit}, stored
        by the transaction if persistent) on C{destination}, or for a topic on the
        subscriptions C{targets} it was routed to at the commit; its diverts copy it
        now (S7.1: a rolled-back message is never copied)."""
        if destination.diverts is not None and self._diverter is not None:
            self._diverter.copy(destination, message)
        self._enqueue(destination, targets, message)

    def _send_persistent(self, destination, message):
        # S3.6, fail closed: a persistent message is enqueued (so delivered) only once
        # the store has it; a topic routes it now and enqueues it later on the
        # subscriptions it was routed to.
        if type(destination) is Queue:
            targets = destination
            stored = None if destination.store is None else destination.store.add(message)
        else:
            targets = destination.route(message)
            stored = stored_on(targets, message)
        if stored is None:
            # Nothing stores it: a temporary queue, no durable subscription, no store.
            if self._held:
                self._hold(_Held(destination, targets, message, _READY))
            else:
                self._enqueue(destination, targets, message)
            return None
        entry = _Held(destination, targets, message, _WAITING)
        if self._held is None:
            self._held = collections.deque()
        self._hold(entry)
        stored.addBoth(self._stored, entry)
        return stored

    def _send_paused(self, destination, message):
        # S11.1 pause dst -pst PRODUCERS: keep the message, in order, and block this
        # producer; a persistent one is stored (and its Deferred fires) only once the
        # destination is resumed, so its producer hears nothing until then.
        pause = destination.holding
        entry = _Held(destination, None, message, _PAUSED)
        if message.durable:
            entry.targets = defer.Deferred()
        if self._held is None:
            self._held = collections.deque()
        self._hold(entry)
        self._wait_for(pause)
        return entry.targets

    def _wait_for(self, pause):
        blockers = self._blockers
        if blockers is None:
            blockers = self._blockers = set()
        blockers.add(pause)
        pause.add_waiter(self)

    def holds(self, pause):
        """Whether this producer keeps messages for the destination C{pause} paused."""
        return any(entry.state is _PAUSED and entry.destination.pause is pause
                   for entry in self._held or ())

    def kept(self):
        """How many messages this producer keeps for paused destinations."""
        return sum(entry.state is _PAUSED for entry in self._held or ())

    def _resumed(self, pause):
        # The operator resumed (or destroyed) a destination this producer waited for:
        # hand on what it kept, in order, then let it go on.
        for entry in list(self._held or ()):
            if entry.state is not _PAUSED or entry.destination.pause is not pause:
                continue
            self._unpause(entry)
        self._release_held()
        self._eased(pause)

    def _unpause(self, entry):
        destination, message, done = entry.destination, entry.message, entry.targets
        entry.targets = None
        if destination.deleted:
            entry.state = _FAILED
            if done is not None:
                done.errback(NotFound(f"destination {canonical_of(destination)} was"
                                      " destroyed before the message was stored"))
            return
        if not message.durable:
            entry.state = _READY
            return
        if type(destination) is Queue:
            entry.targets = destination
            stored = None if destination.store is None else destination.store.add(message)
        else:
            entry.targets = destination.route(message)
            stored = stored_on(entry.targets, message)
        if stored is None:
            entry.state = _READY
            done.callback(None)
            return
        entry.state = _WAITING
        stored.addBoth(self._stored, entry)
        stored.chainDeferred(done)

    def _hold(self, entry):
        self._held.append(entry)
        if self._backlog is not None:
            self._backlog.add(entry.message.size)

    def _enqueue(self, destination, targets, message):
        if targets is None or type(destination) is Queue:
            if not destination.deleted:
                destination.publish(message)
        else:
            destination.publish_to(targets, message)   # counted only now (S3.6)
        if destination.full and not self.closed:
            self._block(destination)

    def _stored(self, result, entry):
        # The store answered for entry: enqueue what is ready at the head, in order.
        entry.state = _FAILED if isinstance(result, Failure) else _READY
        self._release_held()
        return result

    def _release_held(self):
        if self._releasing:
            return      # called re-entrantly from a delivery: the running loop goes on
        self._releasing = True
        held = self._held
        try:
            backlog = self._backlog
            while held and held[0].state is not _WAITING and \
                    held[0].state is not _PAUSED:
                entry = held.popleft()
                if entry.state is _READY:
                    self._enqueue_held(entry)
                if backlog is not None:
                    backlog.remove(entry.message.size)
        finally:
            self._releasing = False

    def _enqueue_held(self, entry):
        try:
            self._enqueue(entry.destination, entry.targets, entry.message)
        except Exception:
            # The message is stored and stays so (it comes back after a restart); what
            # went wrong handing it out must not reach its producer as "not stored".
            self.log.failure("enqueueing a stored message failed")

    @property
    def room(self):
        """Messages the destination takes before its FLOW_CONTROL limit holds this
        producer back, shared among the producers attached to it: what the glue may
        grant as credit without carrying it far past the limit (S2.7). C{None} when
        nothing holds it back (no such limit, or an anonymous producer)."""
        destination = self._dest
        if destination is None:
            return None
        if destination.holding is not None:
            return 0    # paused by an operator: what it sends now waits (S11.1)
        room = destination.room()
        return None if room is None else room // destination.producers

    @property
    def blocked(self):
        """C{True} while a FLOW_CONTROL destination this producer filled is still over
        its low-water mark (S2.7): the glue should let it send nothing more."""
        return bool(self._blockers)

    def when_unblocked(self, callback):
        """Call C{callback()} once, when this producer is no longer L{blocked}.

        That happens synchronously inside the core call that took the last full
        destination under its low-water mark (a settlement, a pre-settled delivery,
        an expiry, a deletion); a producer that is not blocked is called back at once.
        Callbacks of a producer that closes are dropped, never called.
        """
        if not self._blockers:
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def _block(self, destination):
        queue = destination if type(destination) is Queue else destination.full
        if queue.limits.behavior != FLOW_CONTROL:
            return
        blockers = self._blockers
        if blockers is None:
            blockers = self._blockers = set()
        elif queue in blockers:
            return
        blockers.add(queue)
        queue.add_waiter(self)

    def _eased(self, queue):
        # From the queue, once it is back under its low-water mark.
        blockers = self._blockers
        if blockers is None:
            return
        blockers.discard(queue)
        if blockers:
            return
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()

    def close(self):
        """Detach; further sends raise, and pending L{when_unblocked} callbacks are
        dropped. Messages it sent are not: those waiting for the store or for a
        paused destination are enqueued when their turn comes."""
        self.closed = True
        if self._dest is not None:
            self._dest.attached.pop(self, None)
        self._dest = None
        for queue in self._blockers or ():
            queue.remove_waiter(self)
        self._blockers = None
        self._callbacks = None


_WAITING, _READY, _FAILED = "waiting", "ready", "failed"
# Kept while its destination's producers are paused (S11.1); it blocks the entries
# behind it like a message waiting for the store.
_PAUSED = "paused"


class _Held:
    """A message of a producer waiting for its turn to be enqueued (S3.6).

    @ivar targets: a persistent message's queue, or its topic's subscriptions as
        routed when it was sent; C{None} for one routed only when enqueued.
    @ivar state: L{_WAITING} for the store, L{_READY} to enqueue, L{_FAILED} (the store
        refused it: it is dropped, its producer was told), L{_PAUSED} (its destination's
        producers are paused; C{targets} is then the Deferred a persistent message's
        producer waits on, or None).
    """

    __slots__ = ("destination", "targets", "message", "state")

    def __init__(self, destination, targets, message, state):
        self.destination = destination
        self.targets = targets
        self.message = message
        self.state = state


def _refuse_if_rejecting(destination):
    # S2.3 REJECT_NEWEST: the queue the last publish left full (for a topic: one of
    # its subscriptions) takes nothing until it has room again.
    queue = destination if type(destination) is Queue else destination.full
    if queue.full and queue.limits.behavior == REJECT_NEWEST and not queue.limits.drops:
        raise ResourceLimitExceeded(
            f"{queue.limit_reached()}; the message was not accepted (REJECT_NEWEST)")


class Broker:
    """Destinations by name, and the producers and consumers attached to them.

    Limits checked here, on attach or on a new route (never per message but the two
    comparisons of L{SystemLimits.admit}): destination names (length, topic levels),
    how many destinations clients may make (S2.5), what the broker holds (S2.2).

    @ivar clock: the injected C{IReactorTime}; only C{seconds()} is used.
    @ivar config: the L{CoreConfig}.
    @ivar persistence: the L{mqgate.core.persistence.Persistence}, or C{None}: no
        message, destination or subscription is ever stored.
    @ivar audit: an L{mqgate.security.audit.IAuditTrail} told of ownership refusals
        (C{access.denied}), or C{None}.
    @ivar on_destination: C{on_destination(event, kind, name, user)} is called when a
        queue or topic is made (C{"create"}) or goes away (C{"destroy"}), temporary
        ones aside, for the audit trail (S4.8); C{user} is C{None} (the core does not
        know who asked). C{None}: nobody listens.
    @ivar reserved: C{reserved(kind, name, operation)} (operation C{"produce"} or
        C{"consume"}) is asked before a producer or consumer uses a name, and raises
        (L{Unauthorized}, L{NotFound}) when names the broker keeps for itself refuse
        it (S5.3: the metrics topics); once per attach, and once per address an
        anonymous producer routes to (its route cache). C{None}: no name is reserved.
    @ivar on_subscribe: C{on_subscribe(name, queue)} is called when a consumer is
        attached to a subscription queue of the topic name or pattern C{name} (S5.3:
        a new metrics subscriber gets a sample at once). C{None}: nobody listens.
    """

    log = Logger(namespace="mqgate.broker")
    on_destination = None
    #: The L{mqgate.core.transactions.TransactionLimits} of every connection's
    #: transactions (S6.3); the wiring sets the configured ones.
    transaction_limits = TransactionLimits()
    reserved = None
    on_subscribe = None
    #: Called with no argument when a divert or a run-time setting is made or removed
    #: (S7.1: the runtime catalog keeps them across restarts); C{None}: nobody keeps.
    on_runtime_change = None
    #: The L{mqgate.core.capture.Captures} of this broker, or C{None}.
    captures = None
    #: The L{mqgate.core.memory.MemoryStates} the glues ask before they grant producer
    #: credit or accept a message (S2.6), or C{None}: memory states are not watched.
    memory = None

    def __init__(self, clock, config=CoreConfig(), persistence=None, audit=None):
        self.clock = clock
        self.config = config
        self.persistence = persistence
        self.audit = audit
        self._queues = {}
        self._topics = {}
        self._index = SubscriptionIndex()
        self._durable = {}
        self._routes = {}
        self._next_seq = itertools.count(1).__next__
        self._subscription_ids = itertools.count(1)
        # S8.3: how long MQ Light subscriptions outlive their last subscriber.
        self.lifetimes = mqlight.Lifetimes(clock, self._delete_subscription)
        self._retired = dict.fromkeys(_TOTALS, 0)
        self._limits = config.limits
        self._modes = config.consumer_modes
        self._system = config.system_limits
        self._destinations_refused = False
        # S2.4: the dead message queue, a system queue made with the broker.
        # Made before recovery, and not stored as a destination (the broker makes it
        # at every start); what an operator sets on it is (update dst).
        dmq = self.dmq = Queue(
            DMQ_NAME, clock, system=self._system,
            limits=dmq_limits(config.dmq_max_num_msgs, config.dmq_max_total_msg_bytes))
        if persistence is not None:
            dmq.store = persistence.queue_store(QUEUE, DMQ_NAME)
        # S7.1: address and security settings made at run time.
        self.settings = RuntimeSettings()
        # S7.1: diverts; their copies go through producers of the broker's own.
        self.diverts = DivertRouter(self._existing, self._destination, self._copier,
                                    clock.seconds)
        self.dead_letters = dmq.dead_letters = DeadLetters(
            dmq, clock, self.next_seq, persistence=persistence,
            truncate_body=config.dmq_truncate_body, log_dead=config.log_dead_messages)

    def every_queue(self):
        """Every queue: plain ones and topic subscriptions (the expiry reaper's pass)."""
        return list(itertools.chain(self._queues.values(), self._index, (self.dmq,)))

    def system_queues(self):
        """The broker's own queues (the DMQ): not among L{queues}, nor counted against
        C{mqgate.system.max_destinations}; found by name like any queue."""
        return [self.dmq]

    def set_annotate(self, annotate):
        """How dead messages get their annotations: C{annotate(payload, annotations,
        keep_body) -> payload} (the glue's; see L{DeadLetters})."""
        self.dead_letters.annotate = annotate

    # -- attach -----------------------------------------------------------------------

    def open_producer(self, address, capabilities=(), *, backlog=None):
        """Attach a producer to C{address}, creating the destination if allowed (S2.5).

        C{address=None} makes an anonymous producer: each message is routed by its
        C{to} field. C{backlog}: the connection's L{StoreBacklog}, counting what the
        producer has waiting for the store (S2.7), or C{None}.

        @raise NotFound: the destination does not exist and may not be created.
        @raise AddressError: the address names nothing.
        @raise NameLimitExceeded: the name is too long or (a topic) too deep.
        @raise ResourceLimitExceeded: the destination would be one more than
            C{mqgate.system.max_destinations}.
        """
        if address is None:
            return Producer(None, None, self._route, self._next_seq, self._system,
                            backlog, self._limits, self.diverts, self.clock.seconds)
        kind, name = self._resolve(address, capabilities)
        if self.reserved is not None:
            self.reserved(kind, name, "produce")
        destination = self._destination(kind, name)
        limit = self.limits_of(destination).max_producers
        if 0 <= limit <= destination.producers:
            raise ResourceLimitExceeded(
                f"{kind} {name!r} has {destination.producers} producers, as many as its"
                f" maxNumProducers={limit} allows; try again once one has gone (an"
                f" administrator can raise it: update dst -o maxNumProducers=N)")
        return Producer(canonical(kind, name), destination, None, self._next_seq,
                        self._system, backlog, self._limits, self.diverts,
                        self.clock.seconds)

    def open_consumer(self, address, target, *, capabilities=(), presettled=False,
                      durable_name=None, container_id=None, dynamic=False, selector=None,
                      requester=None):
        """Attach a consumer delivering to C{target.deliver(delivery)} (S2.1, S8.1).

        A queue gets a competing consumer. A topic gets a subscription queue of its
        own; with C{durable_name} the subscription is durable and identified by
        C{(container_id, durable_name)}, and reattaching with the same pair resumes it
        with its backlog. C{dynamic=True} makes a temporary queue (a temporary topic
        when the capabilities say C{temporary-topic} or C{topic}) with a unique name,
        deleted when this consumer closes.

        Ownership, when C{requester} (a L{Requester}) is given, as the
        protocol glue always does: a temporary destination belongs to the connection
        that made it, and only that connection may receive from it (anyone may send
        to it: it is a reply address); a durable subscription belongs to the user who
        made it, and only that user or a member of group admin may resume it.
        C{requester=None} is the broker's own trusted use (tests, recovery).

        C{selector} (S2.8; text, a compiled L{Selector}, or C{None}; blank text means
        none) limits what the consumer receives: on a queue, messages it refuses stay
        for the other consumers; on a topic, they are never enqueued on its
        subscription. A durable subscription reattached with another selector is
        replaced, backlog and all (JMS).

        @raise SelectorError: the selector does not compile (nothing was created).
        @raise NotFound: the destination does not exist and may not be created.
        @raise NotAllowed: the durable subscription already has a consumer.
        @raise Unauthorized: the temporary destination or the durable subscription
            belongs to another connection or user (nothing was changed).
        @raise AddressError: the address names nothing.
        @raise NameLimitExceeded: the name or pattern is too long or too deep.
        @raise ResourceLimitExceeded: the destination or durable subscription would be
            one more than C{mqgate.system.max_destinations}.
        """
        selector = _compiled(selector)
        temporary = None
        if dynamic:
            kind = TOPIC if _wants_topic(capabilities) else QUEUE
            name = self._temporary_name()
            self._refuse_past_max_destinations(kind, name)
            temporary = self._create(kind, name, temporary=True)
            temporary.creator = None if requester is None else requester.connection
        else:
            kind, name = resolve(address, capabilities, self.config.default_type)
            if not self._resumes_durable(container_id, durable_name, kind, name):
                self._check_name(kind, name)
            if self.reserved is not None:
                self.reserved(kind, name, "consume")
        if kind == QUEUE:
            if temporary is None:
                self._check_security(requester, name, "consume")
            queue = temporary or self._private(self._destination(QUEUE, name), requester)
        else:
            if temporary is None and not is_pattern(name):
                self._private(self._destination(TOPIC, name), requester)
            if durable_name is not None and temporary is None:
                queue = self._durable_subscription(container_id, durable_name, name,
                                                   selector, requester=requester)
            else:
                queue = self._subscription(name, selector)
        consumer = Consumer(
            canonical(kind, name), queue, target, presettled=presettled,
            selector=selector,
            on_close=functools.partial(self._consumer_closed, temporary=temporary))
        queue.attach(consumer)
        if queue.pattern is not None and self.on_subscribe is not None:
            self.on_subscribe(queue.pattern, queue)
        return consumer

    def open_mqlight(self, subscription, target, *, client_id, ttl=0, presettled=False,
                     requester=None):
        """Subscribe to an MQ Light C{private:} or C{share:} subscription (S8.3, S8.5;
        L{mqgate.core.mqlight}): make it, or resume it with what it holds.

        A private subscription is C{client_id}'s (one subscriber at a time); a shared
        one takes any number, each message going to one of them. The subscription
        outlives its last subscriber by C{ttl} seconds (C{mqlight.FOREVER}: until it
        is closed); while it has a time-to-live it stores its persistent messages,
        and it is restored with them after a restart. Closing the consumer with
        C{remove=True} removes the subscription at once if no other subscriber is
        left (else the last one's leaving decides, by the time-to-live).

        Ownership as for durable subscriptions: only the user who made it (or a
        member of group admin) may subscribe to it again.

        @param subscription: a L{mqlight.Subscription}.
        @raise NotAllowed: the private subscription has a subscriber already.
        @raise Unauthorized: it belongs to another user.
        @raise NameLimitExceeded: the pattern is too long.
        @raise ResourceLimitExceeded: one more than C{mqgate.system.max_destinations}.
        """
        pattern = subscription.pattern
        container_id, name = subscription.key(client_id)
        queue = self._durable.get((container_id, name))
        if queue is None:
            self._check_name(TOPIC, pattern)
        if self.reserved is not None:
            self.reserved(TOPIC, pattern, "consume")
        if queue is None:
            self._refuse_past_max_destinations("subscription", name)
            queue = self._mqlight_queue(container_id, name, pattern,
                                        owner=None if requester is None else requester.user)
        else:
            self._check_owner(queue, requester, "consume")
            if queue.consumers and not subscription.shared:
                raise NotAllowed(
                    f"client {client_id} is subscribed to {name} already; unsubscribe"
                    " first, or subscribe to another pattern")
        self._keep_for(queue, ttl)
        consumer = Consumer(f"topic://{pattern}", queue, target, presettled=presettled,
                            on_close=self._mqlight_closed)
        queue.attach(consumer)
        self.lifetimes.subscribed(queue, ttl)
        if self.on_subscribe is not None:
            self.on_subscribe(pattern, queue)
        return consumer

    def _mqlight_queue(self, container_id, name, pattern, owner):
        queue = Queue(f"{container_id}:{name}", self.clock, pattern=pattern,
                      durable_key=(container_id, name),
                      limits=self._subscription_limits(self._topics.get(pattern),
                                                       pattern),
                      system=self._system, dead_letters=self.dead_letters)
        queue.matches = mqlight.topic_matches
        queue.owner = owner
        self._paused_like(self._topics.get(pattern), queue)
        self._durable[queue.durable_key] = queue
        self._index.add(queue)
        return queue

    def _keep_for(self, queue, ttl):
        # S8.3, S8.4: a subscription with a time-to-live keeps its persistent messages
        # in the store (a restart restores it with them), with its ttl on record; one
        # without stores nothing: it goes with its last subscriber, and a restart
        # ends every subscriber.
        persistence = self.persistence
        if persistence is None or (queue.store is None and ttl == 0):
            return
        if queue.store is not None and self.lifetimes.ttl(queue) == ttl:
            return   # on record already
        container_id, name = queue.durable_key
        if queue.store is None:
            queue.store = persistence.durable_store(container_id, name)
        persistence.durable_created(container_id, name, queue.pattern,
                                    mqlight.TtlRecord(ttl), queue.owner)

    def _mqlight_closed(self, consumer, remove):
        self.lifetimes.unsubscribed(consumer.queue, close=remove)

    def destroy_durable(self, container_id, durable_name, requester=None):
        """Delete a durable subscription and its backlog (JMS unsubscribe).

        @param requester: the L{Requester} asking; only the subscription's owner or a
            member of group admin may (C{None}: the broker's own trusted use).
        @raise NotFound: no such subscription.
        @raise Unauthorized: it belongs to another user.
        @raise NotAllowed: a consumer is attached to it.
        """
        queue = self.subscription(container_id, durable_name)
        self._check_owner(queue, requester, "delete")
        if queue.consumers:
            raise NotAllowed(f"subscription {durable_name!r} is in use")
        self._delete_subscription(queue)

    def create_queue(self, name):
        """Create the queue C{name} (admin, or configuration with auto-creation off);
        return the existing one if there is one."""
        if name == DMQ_NAME:
            return self.dmq
        queue = self._queues.get(name)
        return queue if queue is not None else self._create(QUEUE, name)

    def create_ring_queue(self, name, size, *, stored=True):
        """Create the ring queue C{name} of C{size} messages (S7.1, L{mqgate.core.ring}),
        or make the existing queue C{name} one. C{stored=False}: its messages are
        never stored and it is not kept as a destination (a capture's ring: what
        survives a restart is the capture, which makes it again).

        @raise ValueError: C{size} is not a positive whole number.
        """
        limits = ring_limits(size)
        queue = self._queues.get(name)
        if queue is None:
            queue = self._create(QUEUE, name, stored=stored)
        queue.set_limits(limits)
        queue.limits_set = True     # a ring's, whatever address setting matches it
        if stored:
            self._store_attributes(QUEUE, queue)
        return queue

    def create_divert(self, name, address, target, *, exclusive=False, selector=None,
                      owner=None):
        """Put a divert called C{name} on C{address} that moves (C{exclusive}) or
        copies the messages C{selector} accepts (all when C{None}) to C{target}
        (S7.1, L{mqgate.core.diverts}). Neither address need exist yet.

        @raise NotAllowed: a divert called C{name} exists, or the target is the
            address itself.
        @raise AddressError: an address names nothing, or C{name} is empty.
        @raise SelectorError: the selector does not compile.
        """
        if not isinstance(name, str) or not name.strip():
            raise AddressError("a divert needs a name")
        source = canonical(*self._resolve(address, ()))
        target = canonical(*self._resolve(target, ()))
        divert = Divert(name, source, target, exclusive=exclusive,
                        selector=_compiled(selector), owner=owner)
        self.diverts.add(divert)
        self._runtime_changed()
        return divert

    def destroy_divert(self, name):
        """Remove the divert called C{name}; return it. @raise NotFound: none."""
        divert = self.diverts.remove(name)
        self._runtime_changed()
        return divert

    def set_address_setting(self, setting):
        """Put the L{AddressSetting} C{setting} in force (replacing one of its match):
        its bounds and expiry delay apply at once to the queues and topics it matches
        (L{apply_address_settings})."""
        self.settings.address[setting.match] = setting
        self.apply_address_settings()
        self._runtime_changed()

    def set_security_setting(self, setting):
        """Put the L{SecuritySetting} C{setting} in force (replacing one of its match)."""
        self.settings.security[setting.match] = setting
        self._runtime_changed()

    def remove_setting(self, which, match):
        """Remove the C{which} (C{"address"} or C{"security"}) setting on C{match};
        return it. @raise NotFound: there is none."""
        table = self.settings.address if which == "address" else self.settings.security
        setting = table.pop(match, None)
        if setting is None:
            raise NotFound(f"no {which} setting on {match!r}")
        if which == "address":
            self.apply_address_settings()
        self._runtime_changed()
        return setting

    def apply_address_settings(self):
        """Give every queue and topic what the address settings now say (S7.1,
        L{mqgate.core.settings}): the limits of a queue without limits of its own (a
        plain queue by its name, a subscription by its pattern, unless an operator
        gave its topic limits), and the expiry delay of each. Called when a setting
        is made or removed, and once the runtime catalog is restored."""
        for queue in self._queues.values():
            queue.expiry_delay = self._expiry_delay_for(queue.name)
            if not queue.limits_set:
                queue.set_limits(self._limits_for(queue.name))
        for topic in self._topics.values():
            topic.expiry_delay = self._expiry_delay_for(topic.name)
        for queue in self._index:
            limits = self._subscription_limits(self._topics.get(queue.pattern),
                                               queue.pattern)
            if limits is not queue.limits:
                queue.set_limits(limits)

    def limits_source(self, destination):
        """Where a destination's limits come from (S7.1), for an operator: C{"own"}
        (an operator's, a ring's, the DMQ's), C{"address setting MATCH"}, or
        C{"defaults"}."""
        if type(destination) is Topic:
            own, name = destination.limits is not None, destination.name
        else:
            own = destination.limits_set or destination is self.dmq
            name = destination.pattern or destination.name
        if own:
            return "own"
        setting = self.settings.address_for(name)
        if setting is not None and setting.bounded:
            return f"address setting {setting.match}"
        return "defaults"

    def _limits_for(self, name):
        # The limits of a queue (or subscription on pattern name) with none of its own.
        setting = self.settings.address_for(name)
        return self._limits if setting is None else setting.limits(self._limits)

    def _expiry_delay_for(self, name):
        setting = self.settings.address_for(name)
        return None if setting is None else setting.expiry_delay

    def _runtime_changed(self):
        if self.on_runtime_change is not None:
            self.on_runtime_change()

    def _existing(self, kind, name):
        return (self._queues if kind == QUEUE else self._topics).get(name)

    def _copier(self):
        # An anonymous producer that applies no divert: one per copying divert.
        return Producer(None, None, self._route, self._next_seq, self._system,
                        None, self._limits, seconds=self.clock.seconds)

    def create_topic(self, name):
        """Create the topic C{name}; return the existing one if there is one."""
        topic = self._topics.get(name)
        return topic if topic is not None else self._create(TOPIC, name)

    # -- introspection ----------------------------------------------------------------

    def would_create(self, kind, name):
        """Whether using C{kind} C{name} now would auto-create it (S2.5): it does not
        exist, is not a topic pattern, and auto-creation of its kind is on.

        Access control asks this before an attach or an anonymous-relay message, so
        that auto-creating needs its own permission (S4.5); the core knows nothing of
        the rules. A dict lookup: cheap enough for every message.
        """
        if kind == QUEUE:
            return (name not in self._queues and name != DMQ_NAME
                    and self.config.autocreate_queue)
        return (name not in self._topics and self.config.autocreate_topic
                and not is_pattern(name))

    def queue(self, name):
        """The queue called C{name}. @raise NotFound: there is none."""
        try:
            return self._queues[name]
        except KeyError:
            if name == DMQ_NAME:
                return self.dmq
            raise NotFound(f"no queue {name!r}") from None

    def topic(self, name):
        """The topic called C{name}. @raise NotFound: there is none."""
        try:
            return self._topics[name]
        except KeyError:
            raise NotFound(f"no topic {name!r}") from None

    def queues(self):
        """The queue names, sorted (subscription queues are not included)."""
        return sorted(self._queues)

    def topics(self):
        """The topic names, sorted."""
        return sorted(self._topics)

    def subscriptions(self):
        """Every topic subscription queue, durable or not, in creation order."""
        return list(self._index)

    def subscription(self, container_id, durable_name):
        """The durable subscription C{(container_id, durable_name)}.

        @raise NotFound: there is none.
        """
        try:
            return self._durable[(container_id, durable_name)]
        except KeyError:
            raise NotFound(f"no durable subscription {durable_name!r}"
                           f" for {container_id!r}") from None

    @property
    def stats(self):
        """Broker totals as a dict (computed on demand, so counting stays cheap).

        C{published}: messages accepted from producers; C{delivered}: hand-overs to
        consumers; C{acknowledged}: messages that left for good; C{dropped}; C{expired};
        C{bytes_in} and C{bytes_out}: the bytes of the published and acknowledged
        messages (S5.1); C{held}, C{held_bytes}; C{in_flight}; and how many queues,
        topics and subscriptions exist;
        C{system_count} and C{system_bytes}: what counts against C{mqgate.system.*}
        (S2.2).
        """
        totals = dict(self._retired)
        held = in_flight = held_bytes = 0
        for queue in itertools.chain(self._queues.values(), self._index):
            if queue.pattern is None:
                totals["published"] += queue.messages_in
                totals["bytes_in"] += queue.bytes_in
            totals["delivered"] += queue.delivered
            totals["acknowledged"] += queue.messages_out
            totals["bytes_out"] += queue.bytes_out
            totals["dropped"] += queue.dropped
            totals["expired"] += queue.expired
            held += queue.held
            held_bytes += queue.held_bytes
            in_flight += queue.in_flight
        for topic in self._topics.values():
            totals["published"] += topic.messages_in
            totals["bytes_in"] += topic.bytes_in
            totals["dropped"] += topic.dropped
        totals.update(held=held, held_bytes=held_bytes, in_flight=in_flight,
                      queues=len(self._queues),
                      topics=len(self._topics), subscriptions=len(self._index),
                      system_count=self._system.count, system_bytes=self._system.bytes)
        return totals

    @property
    def holdings(self):
        """What the broker holds now, waiting or in flight, as C{mqgate.system.*}
        count it (S2.2): the L{SystemLimits} whose C{count} and C{bytes} every queue
        keeps up to date; memory states read them (S2.6)."""
        return self._system

    # -- operators (S11.1: the admin commands' side of the core) -----------------------

    def destination(self, kind, name):
        """The queue or topic C{name}. @raise NotFound: there is none."""
        return self.queue(name) if kind == QUEUE else self.topic(name)

    def own_queues(self, destination):
        """The queues an operator's pause, purge or destroy of C{destination} acts on:
        a queue itself; for a topic, its subscriptions on exactly its name, durable or
        not (a wildcard subscription also holds other topics' messages: it is left
        alone)."""
        if type(destination) is Queue:
            return [destination]
        return [q for q in destination.subscriptions if q.pattern == destination.name]

    def set_limits(self, kind, name, limits):
        """Give destination C{name} new L{Limits} now (C{update dst -o}); a topic's go
        to its subscriptions on its name, and to those made later. Stored with the
        destination when there is a store. They are its own from then on: no address
        setting changes them (S7.1).

        @raise NotFound: no such destination.
        """
        destination = self.destination(kind, name)
        self._apply_limits(destination, limits)
        self._store_attributes(kind, destination)
        return destination

    def set_default_persistence(self, name, persistent):
        """Set whether messages published to topic C{name} without C{durable=true}
        are persistent (S8.4; C{update dst -t t -o defaultPersistence=...}); stored
        with the topic. C{None} goes back to C{mqgate.topic.default_persistence}.

        @raise NotFound: there is no such topic.
        """
        topic = self.topic(name)
        topic.persistence_set = persistent is not None
        topic.default_persistence = (self.config.topic_default_persistence
                                     if persistent is None else bool(persistent))
        self._store_attributes(TOPIC, topic)
        return topic

    def set_consumer_modes(self, name, modes):
        """Give queue C{name} new L{ConsumerModes} now (C{update dst -o
        maxNumActiveConsumers=...}); stored with it when there is a store.

        @raise NotFound: no such queue.
        """
        queue = self.queue(name)
        queue.set_modes(modes)
        self._store_attributes(QUEUE, queue)
        return queue

    def _store_attributes(self, kind, destination):
        # The store replaces a destination's attributes: give it all of them.
        if self.persistence is None or destination.temporary:
            return
        # Limits only when they are the destination's own: the defaults and address
        # settings are applied afresh at every start (S7.1).
        own = (destination.limits_set if kind == QUEUE
               else destination.limits is not None)
        attributes = limits_attributes(self.limits_of(destination)) if own else {}
        if kind == QUEUE:
            attributes.update(modes_attributes(destination.modes))
        elif destination.persistence_set:
            attributes[_DEFAULT_PERSISTENCE] = destination.default_persistence
        self.persistence.destination_updated(kind, destination.name, attributes)

    def restore_attributes(self, kind, name, attributes):
        """Apply the attributes stored with destination C{name} (recovery).

        @raise ValueError: they do not make valid limits.
        """
        destination = self.destination(kind, name)
        if names_limits(attributes):
            self._apply_limits(destination,
                               limits_from_attributes(attributes, self._limits))
        if kind == QUEUE:
            destination.set_modes(modes_from_attributes(attributes, self._modes))
        elif _DEFAULT_PERSISTENCE in attributes:
            destination.default_persistence = bool(attributes[_DEFAULT_PERSISTENCE])
            destination.persistence_set = True

    def _apply_limits(self, destination, limits):
        if type(destination) is Topic:
            destination.limits = limits
        else:
            destination.limits_set = True
        for queue in self.own_queues(destination):
            queue.set_limits(limits)

    def limits_of(self, destination):
        """The L{Limits} of a queue, or those a topic gives its subscriptions."""
        if type(destination) is Queue:
            return destination.limits
        return destination.limits or self._limits

    def pause_destination(self, kind, name, producers=True, consumers=True):
        """Pause a destination's producers (what they send waits in them, and they
        are blocked: no credit, no reading) and/or its consumers (nothing is
        delivered); L{resume_destination} undoes it. Never a message dropped.

        @raise NotFound: no such destination.
        """
        destination = self.destination(kind, name)
        pause = destination.pause
        if pause is None:
            pause = destination.pause = Pause()
        if producers and not pause.producers:
            pause.producers = True
            destination.holding = pause
            for producer in list(destination.attached):
                producer._wait_for(pause)
        if consumers and not pause.consumers:
            pause.consumers = True
            for queue in self.own_queues(destination):
                queue.pause_consumers()
        return destination

    def resume_destination(self, kind, name):
        """Undo L{pause_destination}: deliveries start again, and producers' kept
        messages go on, in order. @raise NotFound: no such destination."""
        destination = self.destination(kind, name)
        pause = destination.pause
        if pause is None:
            return destination
        if pause.consumers:
            pause.consumers = False
            for queue in self.own_queues(destination):
                queue.resume_consumers()
        if pause.producers:
            pause.producers = False
            destination.holding = None
            pause.release()
        return destination

    def purge_destination(self, kind, name):
        """Drop the messages waiting on a destination (not those in flight), from the
        store too; return how many. @raise NotFound: no such destination."""
        destination = self.destination(kind, name)
        return sum(queue.purge() for queue in self.own_queues(destination))

    def destroy_destination(self, kind, name, description):
        """Delete a destination with its messages (stored ones too); its consumers'
        and producers' links are detached with L{RESOURCE_DELETED} and
        C{description}. A topic's subscriptions on exactly its name go with it,
        durable ones included.

        @return: C{(consumers, producers)}: how many were detached.
        @raise NotFound: no such destination.
        """
        destination = self.destination(kind, name)
        queues = self.own_queues(destination)
        consumers = [consumer for queue in queues for consumer in queue.consumers]
        producers = list(destination.attached)
        if type(destination) is Topic:
            for queue in queues:
                self._delete_subscription(queue)
        self._delete_destination(destination)
        pause = destination.pause
        if pause is not None:
            destination.holding = None
            pause.release()     # what its producers kept goes nowhere: it is gone
        for consumer in consumers:
            self._revoke(consumer, getattr(consumer.target, "revoked", None),
                         description)
        for producer in producers:
            self._revoke(producer, producer.on_revoked, description)
        return len(consumers), len(producers)

    def purge_durable(self, container_id, durable_name):
        """Drop the waiting backlog of a durable subscription; return how many.

        @raise NotFound: no such subscription.
        """
        return self.subscription(container_id, durable_name).purge()

    def durables(self):
        """The durable subscription queues, in creation order."""
        return list(self._durable.values())

    def _revoke(self, user, revoked, description):
        # Tell the glue (it detaches the link and closes user); close it anyway.
        if revoked is not None:
            try:
                revoked(RESOURCE_DELETED, description)
            except Exception:
                self.log.failure("telling {user} that its destination was destroyed",
                                 user=user)
        if not user.closed:
            user.close()

    # -- internals --------------------------------------------------------------------

    def _destination(self, kind, name, restoring=False):
        # S2.5: look up, or create when configuration allows, else not-found.
        table = self._queues if kind == QUEUE else self._topics
        destination = table.get(name)
        if destination is not None:
            return destination
        if kind == QUEUE and name == DMQ_NAME:
            return self.dmq
        allowed = (self.config.autocreate_queue if kind == QUEUE
                   else self.config.autocreate_topic)
        if not allowed:
            raise NotFound(f"no {kind} {name!r} and auto-creation is disabled")
        if name.startswith(_TEMPORARY_PREFIX):
            # Only a dynamic attach makes these. A reply sent after its temporary
            # queue went away must not make an ordinary queue of that name, which
            # anyone who saw the reply address could then read.
            raise NotFound(f"no {kind} {name!r}: names starting with {_TEMPORARY_PREFIX}"
                           " are temporary destinations, made by a dynamic attach and"
                           " deleted with their connection's consumer")
        if not restoring:
            self._refuse_past_max_destinations(kind, name)
        return self._create(kind, name)

    def _resolve(self, address, capabilities):
        # resolve, and refuse names that are too long or too deep before anything is
        # made or matched with them.
        kind, name = resolve(address, capabilities, self.config.default_type)
        self._check_name(kind, name)
        return kind, name

    def _check_name(self, kind, name):
        check_name(kind, name, self.config.max_name_length, self.config.max_topic_levels)

    def _resumes_durable(self, container_id, durable_name, kind, pattern):
        # Reattaching to a durable subscription as it is makes nothing new: its owner
        # may do so even if its pattern is past limits lowered since it was made.
        if durable_name is None or kind != TOPIC:
            return False
        queue = self._durable.get((container_id, durable_name))
        return queue is not None and queue.pattern == pattern

    def _refuse_past_max_destinations(self, kind, name):
        # Clients may make queues, topics, temporary destinations and durable
        # subscriptions; each stays (the last two until their owner goes). The ones
        # restored or made by an administrator are not refused, but count.
        limit = self.config.max_destinations
        held = len(self._queues) + len(self._topics) + len(self._durable)
        if 0 <= limit <= held:
            if not self._destinations_refused:
                self._destinations_refused = True   # logged once until one is made
                self.log.warn(
                    "the broker holds {held} destinations and durable subscriptions as"
                    " mqgate.system.max_destinations={limit} allows: clients may create no"
                    " more; raise the setting if they should", held=held, limit=limit)
            raise ResourceLimitExceeded(
                f"the broker holds {held} destinations and durable subscriptions, as many"
                f" as it may (mqgate.system.max_destinations={limit}); {kind} {name!r}"
                " was not created")
        self._destinations_refused = False

    def _create(self, kind, name, *, temporary=False, stored=True):
        if kind == QUEUE:
            destination = self._queues[name] = Queue(name, self.clock, temporary=temporary,
                                                     limits=self._limits_for(name),
                                                     system=self._system,
                                                     dead_letters=self.dead_letters)
            if not temporary:
                destination.modes = self._modes   # its creator's own: no limits
        else:
            destination = self._topics[name] = Topic(name, self._index,
                                                     temporary=temporary)
            destination.default_persistence = self.config.topic_default_persistence
        destination.expiry_delay = self._expiry_delay_for(name)    # S7.1
        persistence = self.persistence
        if persistence is not None and not temporary and stored:
            if kind == QUEUE:
                destination.store = persistence.queue_store(kind, name)
            persistence.destination_created(kind, name)
        if not temporary:
            self.diverts.made(kind, name, destination)
        if self.on_destination is not None and not temporary:
            self.on_destination("create", kind, name, None)
        return destination

    def _route(self, to):
        # Anonymous producers: resolve message.to once per distinct address.
        destination = self._routes.get(to)
        if destination is None:
            kind, name = self._resolve(to, ())
            if self.reserved is not None:
                self.reserved(kind, name, "produce")
            destination = self._destination(kind, name)
            if len(self._routes) >= _ROUTE_CACHE_MAX:
                self._routes.clear()
            self._routes[to] = destination
        return destination

    def _temporary_name(self):
        while True:
            name = f"{_TEMPORARY_PREFIX}{secrets.token_hex(_TEMPORARY_BYTES)}"
            if name not in self._queues and name not in self._topics:
                return name

    # -- ownership ----------------------------------------------------------

    def _check_security(self, requester, name, permission):
        # S7.2: a security setting made at run time (a capture's) restricts who may
        # consume from or browse the queues it matches.
        if requester is None or not self.settings.security:
            return
        refused = self.settings.refusal(name, permission, requester.groups,
                                        requester.user)
        if refused is not None:
            self._deny(requester, permission, "queue", name)
            raise Unauthorized(refused)

    def _private(self, destination, requester):
        # A temporary destination is its connection's private reply address: only
        # that connection receives from it. Admin included, unlike durable
        # subscriptions: no one else has any business reading another client's
        # replies, and the connection's consumer going away deletes it anyway.
        if (destination.temporary and requester is not None
                and destination.creator is not requester.connection):
            kind = "queue" if isinstance(destination, Queue) else "topic"
            self._deny(requester, "consume", f"temporary {kind}", destination.name)
            raise Unauthorized(
                f"temporary {kind} {destination.name} belongs to another connection: only"
                " the connection that made it may receive from it")
        return destination

    def _check_owner(self, queue, requester, operation):
        # A durable subscription belongs to the user who made it; group admin may use
        # any. One stored by a version of mqgate without owners goes to the first user
        # who uses it.
        if requester is None:
            return
        container_id, durable_name = queue.durable_key
        if queue.owner is None:
            if requester.user is not None:
                self._adopt(queue, requester.user)
            return
        if queue.owner != requester.user and not requester.admin:
            self._deny(requester, operation, "durable subscription", durable_name,
                       container=container_id)
            raise Unauthorized(
                f"durable subscription {durable_name} of container {container_id} "
                "belongs to another user")

    def _adopt(self, queue, user):
        container_id, durable_name = queue.durable_key
        queue.owner = user
        self.log.info(
            "durable subscription {name!r} of container {client!r} had no owner (it was"
            " stored by an older mqgate); it now belongs to user {user}, who resumed it",
            name=durable_name, client=container_id, user=user)
        if queue.store is not None:
            self.persistence.durable_created(container_id, durable_name, queue.pattern,
                                             queue.selector, user)

    def _deny(self, requester, operation, dest_type, name, **details):
        if self.audit is not None:
            self.audit.record("access.denied", "denied", user=requester.user,
                              address=requester.address, service=requester.service,
                              operation=operation, dest_type=dest_type, name=name,
                              subject="owner", **details)

    def _subscription(self, pattern, selector):
        name = f"mqgate.sub.{next(self._subscription_ids)}"
        topic = self._topics.get(pattern)
        queue = Queue(name, self.clock, pattern=pattern, selector=selector,
                      limits=self._subscription_limits(topic, pattern),
                      system=self._system,
                      dead_letters=self.dead_letters)
        self._index.add(queue)
        self._paused_like(topic, queue)
        return queue

    def _subscription_limits(self, topic, pattern):
        # Limits an operator gave the topic apply to subscriptions on its name; else
        # the address setting matching the pattern's (S7.1).
        if topic is not None and topic.limits is not None:
            return topic.limits
        return self._limits_for(pattern)

    @staticmethod
    def _paused_like(topic, queue):
        # A subscription made on a topic whose consumers are paused starts paused.
        if topic is not None and topic.pause is not None and topic.pause.consumers:
            queue.pause_consumers()

    def _durable_subscription(self, container_id, durable_name, pattern, selector,
                              restoring=False, requester=None, owner=None):
        key = (container_id, durable_name)
        queue = self._durable.get(key)
        if queue is None and not restoring:
            self._refuse_past_max_destinations("durable subscription", durable_name)
        if requester is not None:
            owner = requester.user
        if queue is not None:
            # Whose it is first: another user learns nothing, not even "in use".
            self._check_owner(queue, requester, "consume")
            owner = queue.owner     # replaced below by its owner or admin: still theirs
            if queue.consumers:
                raise NotAllowed(f"subscription {durable_name!r} is in use")
            if queue.pattern == pattern and _text(queue.selector) == _text(selector):
                return queue
            # JMS: resubscribing under the same name to another topic, or with another
            # selector, replaces the subscription, and its backlog with it.
            self._delete_subscription(queue)
        topic = self._topics.get(pattern)
        queue = Queue(f"{container_id}:{durable_name}", self.clock, pattern=pattern,
                      durable_key=key, selector=selector,
                      limits=self._subscription_limits(topic, pattern),
                      system=self._system,
                      dead_letters=self.dead_letters)
        self._paused_like(topic, queue)
        queue.owner = owner
        persistence = self.persistence
        if persistence is not None:
            queue.store = persistence.durable_store(container_id, durable_name)
            persistence.durable_created(container_id, durable_name, pattern, selector,
                                        owner)
        self._durable[key] = queue
        self._index.add(queue)
        return queue

    # -- recovery (S3.1; mqgate.core.persistence) ------------------------------------

    def restore_durable(self, container_id, durable_name, pattern, selector, owner=None):
        """Recreate a stored durable subscription (no consumer) and return its queue.

        C{owner}: the name of the user it belongs to, or C{None} when it was stored
        without one (the first user to resume it then adopts it).

        Neither the name limits nor C{mqgate.system.max_destinations} apply: what the
        broker accepted before it keeps (see L{_warn_if_over_name_limits}).

        @raise SelectorError: its stored selector no longer compiles.
        """
        if mqlight.is_subscription_name(durable_name):
            return self._restore_mqlight(container_id, durable_name, pattern, selector,
                                         owner)
        self._warn_if_over_name_limits(container_id, durable_name, pattern)
        if not is_pattern(pattern):
            self._destination(TOPIC, pattern, restoring=True)
        return self._durable_subscription(container_id, durable_name, pattern,
                                          _compiled(selector), restoring=True,
                                          owner=owner)

    def _restore_mqlight(self, container_id, name, pattern, record, owner):
        # S8.3: its time-to-live (on record in the selector's place) starts again now.
        queue = self._mqlight_queue(container_id, name, pattern, owner)
        queue.store = self.persistence.durable_store(container_id, name)
        self.lifetimes.restored(queue, mqlight.ttl_of_record(record))
        return queue

    def _warn_if_over_name_limits(self, container_id, durable_name, pattern):
        # A durable subscription stored by a broker with higher limits (or before there
        # were any) is kept, with its backlog: dropping it would lose messages the
        # broker accepted, and matching costs pattern x name levels at most, with names
        # held to the limit, so even a pathological pattern cannot stall routing. Its
        # owner may reattach to it, but cannot make it again once it is gone, which
        # the log says.
        try:
            check_name(TOPIC, pattern, self.config.max_name_length,
                       self.config.max_topic_levels)
        except NameLimitExceeded as error:
            self.log.warn(
                "durable subscription {name!r} of {client!r} kept although {why}; it could"
                " not be made again", name=durable_name, client=container_id,
                why=error.description)

    def next_seq(self):
        """A new message number, for a message the broker makes and enqueues itself
        (S5.3: metrics samples); producers number theirs in L{Producer.send}."""
        return self._next_seq()

    def continue_seq(self, after):
        """Number messages from C{after + 1} on (recovery: above every stored id).

        Producers opened before this keep the old numbering: call it first.
        """
        self._next_seq = itertools.count(max(after, 0) + 1).__next__

    def _consumer_closed(self, consumer, remove, temporary=None):
        queue = consumer.queue
        if queue.pattern is not None and not queue.deleted:
            if queue.durable_key is None or remove:
                self._delete_subscription(queue)
        if temporary is not None and not temporary.deleted:
            self._delete_destination(temporary)

    def _delete_subscription(self, queue):
        self.lifetimes.forget(queue)
        self._index.remove(queue)
        if queue.durable_key is not None:
            self._durable.pop(queue.durable_key, None)
            if queue.store is not None:
                self.persistence.durable_deleted(*queue.durable_key)
        queue.discard()
        self._retire(queue)

    def _delete_destination(self, destination):
        if isinstance(destination, Queue):
            del self._queues[destination.name]
            destination.discard()
        else:
            del self._topics[destination.name]
            destination.deleted = True
        if self.persistence is not None and not destination.temporary:
            kind = QUEUE if isinstance(destination, Queue) else TOPIC
            self.persistence.destination_deleted(kind, destination.name)
        if self.on_destination is not None and not destination.temporary:
            self.on_destination(
                "destroy", QUEUE if isinstance(destination, Queue) else TOPIC,
                destination.name, None)
        self._retire(destination)
        self._routes.clear()

    def _retire(self, destination):
        # Keep the broker totals monotonic when a destination goes away.
        retired = self._retired
        if isinstance(destination, Topic):
            retired["published"] += destination.messages_in
            retired["bytes_in"] += destination.bytes_in
            retired["dropped"] += destination.dropped
            return
        if destination.pattern is None:
            retired["published"] += destination.messages_in
            retired["bytes_in"] += destination.bytes_in
        retired["delivered"] += destination.delivered
        retired["acknowledged"] += destination.messages_out
        retired["bytes_out"] += destination.bytes_out
        retired["dropped"] += destination.dropped
        retired["expired"] += destination.expired


def canonical_of(destination):
    """The canonical address of a queue or topic object."""
    return canonical(QUEUE if type(destination) is Queue else TOPIC, destination.name)


def _wants_topic(capabilities):
    if not capabilities:
        return False
    if isinstance(capabilities, str):
        capabilities = (capabilities,)
    return any(str(c) in ("temporary-topic", "topic") for c in capabilities)


def _compiled(selector):
    # S2.8: compile before anything is created, so a bad selector leaves no trace.
    if selector is None or isinstance(selector, Selector):
        return selector
    if isinstance(selector, str) and not selector.strip():
        return None
    return compile_selector(selector)


def _text(selector):
    return None if selector is None else selector.text
