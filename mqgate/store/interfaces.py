"""
The message store contract (S3.1) and the values recovery hands back.

Every store (memory, file journal, later SQL) implements L{IMessageStore}. Every method
returns a C{Deferred}; the broker settles a producer's persistent delivery only when the
Deferred of its C{add_message} fires (S3.4, S8.1). A store orders its writes exactly as
the calls were made, so what survives a crash is always a prefix of the calls.

Keys. A message lives under a I{destination key}, a string the broker picks. Two helpers
name the keys the store itself understands: L{destination_key} (what
C{remove_destination} drops together with the destination) and L{durable_key} (what
C{remove_durable} drops together with the subscription). Message ids are ints, unique
among the live messages of one destination key (the broker's arrival C{seq}).

Transactions (S3.1). C{begin} opens a transaction; adds and removes passed with
C{txn=} take effect only at C{commit}; C{prepare} makes them durable without applying
them (two-phase commit); C{rollback} discards them. After a restart, open transactions
are gone (rolled back) and prepared ones come back in L{Recovered.prepared}, waiting for
C{commit} or C{rollback}. Committed adds take their place in their destination's order
at the commit.
"""

import errno
from dataclasses import dataclass, field

from zope.interface import Attribute, Interface

from mqgate.errors import MqgateError

__all__ = [
    "CorruptStore", "DuplicateMessage", "IMessageStore", "PreparedTransaction",
    "Recovered", "StoreClosed", "StoreError", "StoreFailed", "StoredDestination",
    "StoredDurable", "StoredMessage", "TransactionStateError", "UnknownMessage",
    "destination_key", "durable_key",
]


def destination_key(kind, name):
    """The key of the messages of destination C{(kind, name)}: C{'queue://orders'}.

    The same text as L{mqgate.core.addresses.canonical}, so the broker can use the
    address it already has.
    """
    return f"{kind}://{name}"


def durable_key(container_id, name):
    """The key of the backlog of durable subscription C{(container_id, name)}.

    The container id's length is part of the key, so that no pair of (container id,
    name) can produce the key of another pair, whatever characters they contain.
    """
    return f"durable://{len(container_id)}:{container_id}/{name}"


# -- errors -------------------------------------------------------------------------

class StoreError(MqgateError):
    """Root of the store's errors."""


class StoreClosed(StoreError):
    """The store was closed (or never recovered) and takes no more calls."""


class StoreFailed(StoreError):
    """The store cannot write now: a write failed and the store has not recovered yet.

    While a store is failing it refuses what would store new data (messages,
    transactions, delivery counts) at once with this error, keeps what must not be
    forgotten (removals, destinations, durable subscriptions) to write when it
    recovers, and probes the disk or database until it can write again (S3.6).

    @ivar cause: the original exception (an C{OSError}, a database error ...).
    @ivar reason: the cause in words, for the producer and the log
        (C{"No space left on device"}).
    @ivar exhausted: the cause is a resource running out (disk space, quota), not a
        fault: the broker answers C{amqp:resource-limit-exceeded} rather than
        C{amqp:internal-error}.
    """

    def __init__(self, cause):
        self.cause = cause
        self.reason = describe_cause(cause)
        self.exhausted = _is_exhaustion(cause)
        super().__init__(f"the message store cannot write: {self.reason}")


#: errno values that mean "out of room" rather than "broken".
_EXHAUSTED = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))
#: SQLite's SQLITE_FULL ("database or disk is full").
_SQLITE_FULL = 13


def _is_exhaustion(cause):
    # The cause, or what it wraps (the SQL store wraps driver errors).
    for error in (cause, getattr(cause, "__cause__", None)):
        if isinstance(error, StoreFailed):
            return error.exhausted
        if (getattr(error, "errno", None) in _EXHAUSTED
                or getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL):
            return True
    return False


def describe_cause(cause):
    """The words of a store failure's cause: C{strerror} of an C{OSError}, else the
    exception's own text (a database message), else its class name."""
    if isinstance(cause, StoreFailed):
        return cause.reason
    text = getattr(cause, "strerror", None) or str(cause).strip()
    return text or type(cause).__name__


class DuplicateMessage(StoreError):
    """S3.6: the message id is already stored live under that destination key."""

    def __init__(self, destination, message_id):
        self.destination = destination
        self.message_id = message_id
        super().__init__(f"message {message_id} already stored in {destination!r}")


class UnknownMessage(StoreError):
    """The message id is not stored live under that destination key."""

    def __init__(self, destination, message_id):
        self.destination = destination
        self.message_id = message_id
        super().__init__(f"no message {message_id} stored in {destination!r}")


class TransactionStateError(StoreError):
    """The transaction does not exist, or is not in a state that allows the call.

    @ivar txn_id: the transaction.
    @ivar state: its state (C{'open'}, C{'prepared'}) or C{None} when unknown.
    """

    def __init__(self, txn_id, state, wanted):
        self.txn_id = txn_id
        self.state = state
        super().__init__(f"transaction {txn_id!r} is {state or 'unknown'}; {wanted}")


class CorruptStore(StoreError):
    """A stored file is damaged somewhere other than a torn tail (S3.3).

    @ivar path: the file.
    @ivar offset: the byte offset of the damaged record, or C{None}.
    @ivar reason: what is wrong.
    """

    def __init__(self, path, offset, reason):
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {reason}")


# -- recovered values ---------------------------------------------------------------

@dataclass(frozen=True)
class StoredMessage:
    """One persistent message as recovery returns it."""

    destination: str
    message_id: int
    data: bytes = field(repr=False)
    delivery_count: int = 0


@dataclass(frozen=True)
class StoredDestination:
    """A destination as C{add_destination} stored it (attributes: JSON-able dict)."""

    kind: str
    name: str
    attributes: dict


@dataclass(frozen=True)
class StoredDurable:
    """A durable subscription as C{add_durable} stored it.

    @ivar owner: the name of the user it belongs to, or C{None} when it was stored by
        a version of mqgate that did not record owners.
    """

    container_id: str
    name: str
    topic: str
    selector: object = None
    owner: object = None


@dataclass(frozen=True)
class PreparedTransaction:
    """A prepared transaction kept for its coordinator (S3.1).

    @ivar adds: the L{StoredMessage}s it adds when committed, in call order.
    @ivar removes: the C{(destination, message_id)} pairs it removes when committed;
        those messages are also in L{Recovered.messages} until then.
    """

    txn_id: str
    adds: tuple = ()
    removes: tuple = ()


@dataclass
class Recovered:
    """Everything a store hands back at start-up (S3.1).

    @ivar destinations: L{StoredDestination}s in creation order.
    @ivar durables: L{StoredDurable}s in creation order.
    @ivar messages: destination key -> L{StoredMessage}s in their original order.
    @ivar prepared: txn id -> L{PreparedTransaction}.
    @ivar max_message_id: at least the largest message id stored (0 when none): the
        broker continues its C{seq} above it.
    @ivar warnings: what recovery repaired (a cut torn tail, ...), for the log.
    """

    destinations: list = field(default_factory=list)
    durables: list = field(default_factory=list)
    messages: dict = field(default_factory=dict)
    prepared: dict = field(default_factory=dict)
    max_message_id: int = 0
    warnings: list = field(default_factory=list)


# -- the interface ------------------------------------------------------------------

class IMessageStore(Interface):
    """Persistent messages, destinations, durable subscriptions, transactions (S3.1).

    Every method returns a C{Deferred}. Failures arrive as errbacks carrying a
    L{StoreError} (never raised synchronously). C{recover} must be called first, once.
    """

    fsync_count = Attribute("How many journal fsyncs were made so far (S3.4).")
    health = Attribute(
        "Optional: a mqgate.store.health.StoreHealth, whether the store can write now "
        "(S3.6); a store without one never fails for a while (the memory store).")
    stats = Attribute(
        "A dict of counters: fsyncs, records, batches, records_per_fsync, bytes ...")

    def recover():
        """Load the stored state: C{Deferred[Recovered]}."""

    def add_message(destination, message_id, data, *, txn=None):
        """Store C{data} (bytes) under C{(destination, message_id)}.

        Without C{txn} the Deferred fires once the message is durable as configured
        (S3.4): after fsync with sync on, after the OS took the bytes otherwise. With
        C{txn} it fires at once; the transaction's commit carries the guarantee.
        Errback L{DuplicateMessage} when the id is live in that destination.
        """

    def write_batch(ops):
        """Optional (the file store has it; the core calls the per-message methods of
        a store without it): store and remove messages as one write, all or nothing
        (the adds and removals of a reactor turn).

        C{ops}: in call order, C{(destination, message_id, data)} to add or
        C{(destination, message_id, None)} to remove. The Deferred fires once the write
        is durable as configured (S3.4) with C{{index: StoreError}} of the operations
        refused (one by one: a duplicate, an unknown message; or every add of a write
        that failed, with the L{StoreFailed} a single add would get); it errbacks only
        when the whole call is refused (a closed store).
        """

    def remove_message(destination, message_id, *, txn=None):
        """Remove a stored message (consumer settlement). L{UnknownMessage} if absent."""

    def read_message(destination, message_id):
        """The bytes stored under C{(destination, message_id)}, read back without
        blocking the caller: C{Deferred[bytes]} (the broker pages message bodies out
        of memory and reads them back, S2.6). L{UnknownMessage} when it is not live;
        a failed read is a L{StoreError} and changes nothing stored."""

    def update_delivery_count(destination, message_id, count):
        """Record the delivery count of a stored message (redelivery, S2.9)."""

    def add_destination(kind, name, attributes):
        """Store (or replace the attributes of) a destination."""

    def remove_destination(kind, name):
        """Forget a destination and every message under C{destination_key(kind, name)}."""

    def add_durable(container_id, name, topic, selector, owner=None):
        """Store (or replace) a durable subscription, with the name of the user it
        belongs to (C{None}: unknown; ownership)."""

    def remove_durable(container_id, name):
        """Forget a durable subscription and its backlog (C{durable_key(...)})."""

    def begin(txn_id):
        """Open transaction C{txn_id} (a str). L{TransactionStateError} if it exists."""

    def prepare(txn_id):
        """Make an open transaction durable without applying it (two-phase commit)."""

    def commit(txn_id):
        """Apply an open or prepared transaction; fires once the commit is durable."""

    def rollback(txn_id):
        """Discard an open or prepared transaction."""

    def compact():
        """Reclaim space now (admin C{compact dst}, S3.3); fires with a dict of figures."""

    def close():
        """Finish pending writes and release files; later calls errback L{StoreClosed}."""
