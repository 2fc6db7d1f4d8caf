"""
The in-memory store (reference implementation) and the ledger every store shares.

L{Ledger} holds the rules of L{IMessageStore} with no I/O: which message ids are live
per destination key, the transactions and their states, destinations and durable
subscriptions. L{MemoryStore} is a ledger plus synchronous Deferreds; the file store
keeps a ledger of its own (values: record sizes and own-file names instead of bytes),
so both stores accept and refuse exactly the same calls (tests/store/test_contract.py).
"""

from twisted.internet import defer
from zope.interface import implementer

from mqgate.store.interfaces import (
    DuplicateMessage, IMessageStore, PreparedTransaction, Recovered, StoreClosed,
    StoreError, StoredDestination, StoredDurable, StoredMessage, TransactionStateError,
    UnknownMessage, destination_key, durable_key)

__all__ = ["Ledger", "MemoryStore", "Txn", "OPEN", "PREPARED"]

OPEN = "open"
PREPARED = "prepared"


class Txn:
    """A transaction's pending work (S3.1).

    @ivar adds: C{[(destination, message_id, value)]} in call order.
    @ivar removes: C{[(destination, message_id)]} in call order.
    """

    __slots__ = ("txn_id", "state", "adds", "removes")

    def __init__(self, txn_id, state=OPEN):
        self.txn_id = txn_id
        self.state = state
        self.adds = []
        self.removes = []


class Ledger:
    """Live messages, transactions, destinations and durables; the store rules.

    Methods raise L{StoreError}s; the stores turn them into errbacks. The value kept
    per message is the store's business (bytes and a count, or a record size).

    @ivar messages: destination key -> {message_id: value}, in insertion order.
    @ivar txns: txn id -> L{Txn}.
    @ivar destinations: C{(kind, name)} -> attributes, in creation order.
    @ivar durables: C{(container_id, name)} -> C{(topic, selector, owner)}; owner is
        C{None} for a subscription stored before durables had owners.
    """

    def __init__(self):
        self.messages = {}
        self.txns = {}
        self.destinations = {}
        self.durables = {}
        self.max_message_id = 0

    def get(self, destination, message_id):
        """The value of a live message. @raise UnknownMessage: not live."""
        try:
            return self.messages[destination][message_id]
        except KeyError:
            raise UnknownMessage(destination, message_id) from None

    def is_live(self, destination, message_id):
        """Whether C{(destination, message_id)} is stored live."""
        return message_id in self.messages.get(destination, ())

    @staticmethod
    def check_message(destination, message_id, data):
        """Refuse what no store can keep: non-str keys, ids outside 0..2**64-1, data
        that is not bytes-like. @raise StoreError: with what is wrong."""
        if not isinstance(destination, str):
            raise StoreError(f"destination key must be a str, not {destination!r}")
        if not isinstance(message_id, int) or not 0 <= message_id < 1 << 64:
            raise StoreError(f"message id must be an int in 0..2**64-1, not {message_id!r}")
        if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
            raise StoreError(f"message data must be bytes, not {type(data).__name__}")

    @staticmethod
    def check_count(count):
        """@raise StoreError: C{count} is not an int in 0..2**32-1."""
        if not isinstance(count, int) or not 0 <= count < 1 << 32:
            raise StoreError(f"delivery count must be an int in 0..2**32-1, not {count!r}")

    def add(self, destination, message_id, value, txn=None):
        """Store a message now, or in transaction C{txn}."""
        if txn is not None:
            pending = self.open_txn(txn)
            if self.is_live(destination, message_id) or any(
                    a[0] == destination and a[1] == message_id for a in pending.adds):
                raise DuplicateMessage(destination, message_id)
            pending.adds.append((destination, message_id, value))
            self.max_message_id = max(self.max_message_id, message_id)
            return
        if self.is_live(destination, message_id):
            raise DuplicateMessage(destination, message_id)
        self.insert(destination, message_id, value)

    def remove(self, destination, message_id, txn=None):
        """Remove a live message now (returning its value), or in transaction C{txn}.

        Inside a transaction, removing a message the same transaction added cancels
        the add (returns that value); otherwise the message must be live and stays
        live until the commit (returns C{None}).
        """
        if txn is None:
            value = self.get(destination, message_id)
            self._delete(destination, message_id)
            return value
        pending = self.open_txn(txn)
        for i, (dest, mid, value) in enumerate(pending.adds):
            if dest == destination and mid == message_id:
                del pending.adds[i]
                return value
        self.get(destination, message_id)
        if (destination, message_id) in pending.removes:
            raise UnknownMessage(destination, message_id)
        pending.removes.append((destination, message_id))
        return None

    def drop(self, destination):
        """Remove every message under C{destination}; return their values."""
        return list(self.messages.pop(destination, {}).values())

    # -- transactions -----------------------------------------------------------------

    def open_txn(self, txn_id):
        """The open transaction C{txn_id}. @raise TransactionStateError: otherwise."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.state != OPEN:
            raise TransactionStateError(txn_id, txn and txn.state, "it must be open")
        return txn

    def begin(self, txn_id):
        """Open a transaction. @raise TransactionStateError: it exists already."""
        if not isinstance(txn_id, str):
            raise StoreError(f"transaction id must be a str, not {txn_id!r}")
        if txn_id in self.txns:
            raise TransactionStateError(txn_id, self.txns[txn_id].state,
                                        "it must not exist")
        self.txns[txn_id] = Txn(txn_id)

    def prepare(self, txn_id):
        """Mark an open transaction prepared; return it."""
        txn = self.open_txn(txn_id)
        txn.state = PREPARED
        return txn

    def check_resolvable(self, txn_id):
        """The open or prepared transaction C{txn_id}, still in place."""
        txn = self.txns.get(txn_id)
        if txn is None:
            raise TransactionStateError(txn_id, None, "it must be open or prepared")
        return txn

    def commit(self, txn_id):
        """Apply a transaction: adds become live (in order), removes are applied.

        Returns C{(txn, removed_values)}. Checked before anything changes: an add whose
        id became live meanwhile raises L{DuplicateMessage}. A remove of a message that
        is gone meanwhile is skipped.
        """
        txn = self.check_resolvable(txn_id)
        for dest, mid, _ in txn.adds:
            if self.is_live(dest, mid) and (dest, mid) not in txn.removes:
                raise DuplicateMessage(dest, mid)
        del self.txns[txn_id]
        removed = []
        for dest, mid in txn.removes:
            if self.is_live(dest, mid):
                removed.append(self.messages[dest][mid])
                self._delete(dest, mid)
        for dest, mid, value in txn.adds:
            self.insert(dest, mid, value)
        return txn, removed

    def rollback(self, txn_id):
        """Discard a transaction; return it."""
        txn = self.check_resolvable(txn_id)
        del self.txns[txn_id]
        return txn

    def drop_open_transactions(self):
        """Forget every open transaction (what a restart does, S3.1); return their ids."""
        gone = [t for t, txn in self.txns.items() if txn.state == OPEN]
        for txn_id in gone:
            del self.txns[txn_id]
        return gone

    # -- destinations and durables ------------------------------------------------------

    def add_destination(self, kind, name, attributes):
        """Store a destination; return whether anything changed."""
        attributes = dict(attributes or {})
        if self.destinations.get((kind, name)) == attributes:
            return False
        self.destinations[(kind, name)] = attributes
        return True

    def add_durable(self, container_id, name, topic, selector, owner=None):
        """Store a durable subscription; return whether anything changed."""
        if self.durables.get((container_id, name)) == (topic, selector, owner):
            return False
        self.durables[(container_id, name)] = (topic, selector, owner)
        return True

    def recovered_skeleton(self):
        """A L{Recovered} with destinations, durables and max id (no messages)."""
        return Recovered(
            destinations=[StoredDestination(k, n, dict(a))
                          for (k, n), a in self.destinations.items()],
            durables=[StoredDurable(c, n, t, s, o)
                      for (c, n), (t, s, o) in self.durables.items()],
            max_message_id=self.max_message_id)

    def insert(self, destination, message_id, value):
        """Make a message live (no checks: recovery and commit use it)."""
        self.messages.setdefault(destination, {})[message_id] = value
        self.max_message_id = max(self.max_message_id, message_id)

    def _delete(self, destination, message_id):
        held = self.messages[destination]
        del held[message_id]
        if not held:
            del self.messages[destination]


def _deferred(method):
    """Run C{method} now: its result or L{StoreError} becomes a fired Deferred."""
    def wrapper(self, *args, **kwargs):
        if self._closed:
            return defer.fail(StoreClosed("the memory store is closed"))
        try:
            result = method(self, *args, **kwargs)
        except StoreError as e:
            return defer.fail(e)
        self._ops += 1
        return defer.succeed(result)
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


@implementer(IMessageStore)
class MemoryStore:
    """L{IMessageStore} in memory; every Deferred has fired when it is returned.

    A "restart" is L{restarted}: a new store holding what a durable store would have
    kept (open transactions rolled back, prepared ones kept).
    """

    fsync_count = 0

    def __init__(self):
        self._ledger = Ledger()
        self._closed = False
        self._ops = 0

    @property
    def stats(self):
        """Counters shaped like the file store's (no fsyncs in memory)."""
        return {"fsyncs": 0, "fsync_seconds": 0.0, "records": self._ops,
                "batches": self._ops,
                "records_per_fsync": 0.0}

    def restarted(self):
        """A new store with the durable part of this one's state (S3.1)."""
        other = MemoryStore()
        ledger = other._ledger
        ledger.messages = {d: {m: list(v) for m, v in held.items()}
                           for d, held in self._ledger.messages.items()}
        ledger.destinations = {k: dict(a) for k, a in self._ledger.destinations.items()}
        ledger.durables = dict(self._ledger.durables)
        ledger.max_message_id = self._ledger.max_message_id
        for txn_id, txn in self._ledger.txns.items():
            if txn.state == PREPARED:
                copy = ledger.txns[txn_id] = Txn(txn_id, PREPARED)
                copy.adds = [(d, m, list(v)) for d, m, v in txn.adds]
                copy.removes = list(txn.removes)
        return other

    @_deferred
    def recover(self):
        """The current state as a L{Recovered}; open transactions are not in it."""
        ledger = self._ledger
        recovered = ledger.recovered_skeleton()
        for dest, held in ledger.messages.items():
            recovered.messages[dest] = [
                StoredMessage(dest, mid, bytes(data), count)
                for mid, (data, count) in held.items()]
        for txn_id, txn in ledger.txns.items():
            if txn.state == PREPARED:
                recovered.prepared[txn_id] = PreparedTransaction(
                    txn_id,
                    tuple(StoredMessage(d, m, bytes(v[0]), v[1]) for d, m, v in txn.adds),
                    tuple(txn.removes))
        return recovered

    @_deferred
    def add_message(self, destination, message_id, data, *, txn=None):
        """Store a message (S3.1)."""
        self._ledger.check_message(destination, message_id, data)
        self._ledger.add(destination, message_id, [bytes(data), 0], txn)

    @_deferred
    def remove_message(self, destination, message_id, *, txn=None):
        """Remove a message (S3.1)."""
        self._ledger.remove(destination, message_id, txn)

    @_deferred
    def read_message(self, destination, message_id):
        """The stored bytes of a live message."""
        return bytes(self._ledger.get(destination, message_id)[0])

    @_deferred
    def update_delivery_count(self, destination, message_id, count):
        """Record a delivery count."""
        self._ledger.check_count(count)
        self._ledger.get(destination, message_id)[1] = count

    @_deferred
    def add_destination(self, kind, name, attributes):
        """Store a destination."""
        self._ledger.add_destination(kind, name, attributes)

    @_deferred
    def remove_destination(self, kind, name):
        """Forget a destination and its messages."""
        self._ledger.destinations.pop((kind, name), None)
        self._ledger.drop(destination_key(kind, name))

    @_deferred
    def add_durable(self, container_id, name, topic, selector, owner=None):
        """Store a durable subscription."""
        self._ledger.add_durable(container_id, name, topic, selector, owner)

    @_deferred
    def remove_durable(self, container_id, name):
        """Forget a durable subscription and its backlog."""
        self._ledger.durables.pop((container_id, name), None)
        self._ledger.drop(durable_key(container_id, name))

    @_deferred
    def begin(self, txn_id):
        """Open a transaction."""
        self._ledger.begin(txn_id)

    @_deferred
    def prepare(self, txn_id):
        """Prepare a transaction."""
        self._ledger.prepare(txn_id)

    @_deferred
    def commit(self, txn_id):
        """Commit a transaction."""
        self._ledger.commit(txn_id)

    @_deferred
    def rollback(self, txn_id):
        """Roll a transaction back."""
        self._ledger.rollback(txn_id)

    @_deferred
    def compact(self):
        """Nothing to reclaim in memory."""
        return {"segments_compacted": 0, "bytes_before": 0, "bytes_after": 0,
                "live_bytes": 0}

    def close(self):
        """Refuse further calls."""
        self._closed = True
        return defer.succeed(None)
