"""
The core's side of the message store (S3.1, S3.4, S8.1; docs/design.md "the path of one
message").

The broker is given one L{Persistence} (or none: then nothing is ever stored). It gives
every queue whose messages outlive the broker, a plain queue or a durable subscription,
a L{QueueStore}; temporary queues and non-durable subscriptions get none, and neither
does a queue of a broker without a store. Only a message that is persistent
(C{BrokerMessage.durable}) and lands on a queue with a L{QueueStore} touches the store,
so the non-persistent path costs one attribute test.

What the store sees, and when:

 - a persistent message is added (key: its queue's, id: its C{seq}) and enqueued only
   once the store has it (fail closed: a message the store did not take is never
   delivered, S3.6); L{mqgate.core.broker.Producer.send} returns the Deferred of that
   addition (for a topic, of all of them), which fires once the store has the message
   as configured (S3.4) and the message is on its queues; the glue settles the
   producer's delivery then, and only then;
 - it is removed when it leaves for good: a consumer settles it ACCEPTED or REJECTED,
   a pre-settled consumer takes it, or it expires;
 - its delivery count is written when a delivery fails (MODIFIED with
   delivery-failed, or its consumer went away with it unsettled);
 - destinations and durable subscriptions are written when made and forgotten when
   deleted, with everything stored under them.

Writes of a reactor turn (measured under bench scenario (b): a persistent message from a client that settles
each delivery on its own cost 140 us of broker CPU, much of it one store call, one
Deferred and its callbacks for every add and every removal). L{QueueStore.add} and
L{QueueStore.remove} do not call the store: they append to this turn's operations,
which L{Persistence.flush} hands to the store as one call (C{write_batch}: one record,
one write, one Deferred) at the end of the turn (C{clock.callLater(0)}), or before any
other store call, so that the store still sees every call in call order (a removal is
never written before its add, nor an add after its destination's removal). When that
one write completes, the turn's adds are answered in order: their producers'
deliveries are settled (AMQP disposition, STOMP RECEIPT) together, after the write,
never before (S3.4). Without a clock (tests of the core) every call is a turn of its
own.

Store failures (S3.6). A failed add errbacks the producer's Deferred with
L{StorageFailed} (the glue rejects the delivery with its kind, in its protocol's words, and its description) and
the message is never enqueued. A store that cannot write refuses new persistent
messages at once, keeps removals to write when it recovers, probes until it can write
again and logs all that itself, at a bounded pace (L{mqgate.store.health}); so the core
does not log those failures (they carry C{exhausted} and C{reason}). Any other failed
store call (a bug) is logged once per kind of error and then only counted.

Keys: the same text as L{mqgate.store.interfaces.destination_key} and C{durable_key}
(the core may not import the store; tests/core/test_persistence.py checks that they
agree).
"""

import struct

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.core.addresses import QUEUE, TOPIC, canonical
from mqgate.core.errors import CoreError, ErrorKind

__all__ = ["Persistence", "QueueStore", "StorageFailed", "RecoverySummary",
           "durable_key", "stored_on"]

_DURABLE_PREFIX = "durable://"

# A stored record that carries the message's absolute expiry (S2.9) starts with this
# magic and the expiry in milliseconds (-1: never), then the glue's bytes. An encoded
# AMQP message starts with 0x00 (a described section), so records without it (all of
# them before mqgate kept expiry, and those of messages that never expire) are read as
# they always were.
_EXPIRY_MAGIC = b"\xffMQE"
_EXPIRY = struct.Struct(">q")
_EXPIRY_HEADER = len(_EXPIRY_MAGIC) + _EXPIRY.size


def _with_expiry(data, expiry):
    millis = -1 if expiry is None else int(round(expiry * 1000))
    return _EXPIRY_MAGIC + _EXPIRY.pack(millis) + bytes(data)


def _split_expiry(data):
    # (the glue's bytes, expiry in clock seconds or None, whether the record said).
    if bytes(data[:len(_EXPIRY_MAGIC)]) != _EXPIRY_MAGIC:
        return data, None, False
    (millis,) = _EXPIRY.unpack_from(data, len(_EXPIRY_MAGIC))
    return data[_EXPIRY_HEADER:], None if millis < 0 else millis / 1000.0, True


def durable_key(container_id, name):
    """The store key of durable subscription C{(container_id, name)}'s backlog."""
    return f"{_DURABLE_PREFIX}{len(container_id)}:{container_id}/{name}"


def _parse_durable_key(key):
    # The inverse of durable_key: (container_id, name), or None.
    rest = key[len(_DURABLE_PREFIX):]
    length, colon, rest = rest.partition(":")
    if not colon or not length.isdigit() or rest[int(length):int(length) + 1] != "/":
        return None
    return rest[:int(length)], rest[int(length) + 1:]


class StorageFailed(CoreError):
    """The store did not take a persistent message: its producer's delivery is
    refused with this error (S3.6: never acknowledged unless stored).

    Of kind LIMIT_EXCEEDED when the store ran out of room (a full disk), INTERNAL
    otherwise.
    """

    kind = ErrorKind.INTERNAL


def _store_cannot_write(error):
    # The store's "cannot write now" error (mqgate.store.interfaces.StoreFailed; the
    # core may not import the store): it has a reason and says whether room ran out.
    return getattr(error, "exhausted", None) is not None and hasattr(error, "reason")


class QueueStore:
    """One queue's way to the store: its key, and the calls the queue makes.

    @ivar key: the store key (C{'queue://orders'}, or a L{durable_key}).
    """

    __slots__ = ("key", "_persistence")

    def __init__(self, persistence, key):
        self.key = key
        self._persistence = persistence

    def __repr__(self):
        return f"<QueueStore {self.key!r}>"

    def add(self, message):
        """Store C{message} with this turn's writes; a Deferred that fires when it is
        stored, or errbacks with L{StorageFailed}."""
        return self._persistence.add(self.key, message)

    def remove(self, message):
        """C{message} left this queue for good (written with this turn's writes)."""
        p = self._persistence
        retired = p.retired
        if retired and (self.key, message.seq) in retired:
            return   # a committed transaction removed it from the store already
        p.remove(self.key, message.seq)

    def count(self, message, delivery_count):
        """A delivery of C{message} failed: remember how many times it did (S2.9)."""
        p = self._persistence
        p.store.update_delivery_count(self.key, message.seq, delivery_count).addErrback(
            p.failed, "record a delivery count in", self.key)


def stored_on(queues, message):
    """Add C{message} to the store of each of C{queues} that has one (a topic's
    subscriptions); one Deferred for them all, or C{None} when none stores it."""
    stored = [q.store.add(message) for q in queues if q.store is not None]
    if not stored:
        return None
    if len(stored) == 1:
        return stored[0]
    d = defer.DeferredList(stored, fireOnOneErrback=True, consumeErrors=True)
    d.addCallbacks(lambda _: None, lambda failure: failure.value.subFailure)
    return d


def _write_one_by_one(store, ops):
    # A store without write_batch (a test's fake): the same answer from one call per
    # operation.
    calls = [store.add_message(key, seq, record) if record is not None
             else store.remove_message(key, seq) for key, seq, record in ops]
    refused = {}

    def note(result, i):
        if isinstance(result, Failure):
            refused[i] = result.value
    for i, d in enumerate(calls):
        d.addBoth(note, i)
    return defer.DeferredList(calls).addCallback(lambda _: refused)


class RecoverySummary:
    """What L{Persistence.restore} rebuilt, for the start-up log line."""

    __slots__ = ("messages", "holding", "destinations", "durables", "prepared",
                 "warnings")

    def __init__(self):
        self.messages = 0       # persistent messages put back on their queues
        self.holding = 0        # queues (and subscriptions) they went to
        self.destinations = 0
        self.durables = 0
        self.prepared = 0
        self.warnings = []

    def __repr__(self):
        return (f"<RecoverySummary messages={self.messages} holding={self.holding}"
                f" destinations={self.destinations} durables={self.durables}>")


class Persistence:
    """The broker's store, and the translation between messages and stored bytes.

    @param store: an L{mqgate.store.interfaces.IMessageStore}, recovered by the caller.
    @param encode: C{encode(message) -> bytes}: what to store of a L{BrokerMessage}
        (the glue's encoded message; the core never looks inside a payload).
    @param decode: C{decode(bytes) -> BrokerMessage}: the inverse, for recovery.
    @param clock: an C{IReactorTime}: the adds and removals of a reactor turn are
        written as one store call at its end (module docstring); C{None}: each at once.
    @ivar failures: store calls that failed, by exception class name.
    """

    log = Logger(namespace="mqgate.persistence")

    def __init__(self, store, encode, decode, clock=None):
        self._store = store
        self.encode = encode
        self.decode = decode
        self.failures = {}
        self._clock = clock
        # This turn's writes, in call order: (key, seq, record) of an add, (key, seq,
        # None) of a removal; and per operation the add's Deferred (None: a removal).
        self._ops = []
        self._answers = []
        self._flush_call = None
        # While recovery rebuilds the broker, what it creates is in the store already.
        self._restoring = False
        # (key, seq) of messages a committed transaction removed from the store, while
        # it settles their deliveries (L{retire}); empty otherwise: the cheap test.
        self.retired = set()

    # -- what the broker calls ---------------------------------------------------------

    def record(self, message, keep_expiry=False):
        """The bytes stored for C{message}: the glue's encoding, after the absolute
        expiry when it has one (or C{keep_expiry}: a dead message copy, whose "never"
        must not be worked out again from its header at recovery), so that a
        time-to-live does not start counting again after a restart (S2.9)."""
        data = self.encode(message)
        if message.expiry is None and not keep_expiry:
            return data
        return _with_expiry(data, message.expiry)

    @property
    def store(self):
        """The store, once this turn's adds and removals are handed to it: whoever
        calls it directly (a destination, a durable, a delivery count, a transaction,
        a dead-letter move, a paged body read back, an operator's compaction) comes
        after them, so the store sees every call in call order (a removal is never
        written before its add, nor a read before the write)."""
        self.flush()
        return self._store

    def add(self, key, message):
        """Store C{message} under C{key} with this turn's writes: a Deferred that fires
        once the store has it, or errbacks with L{StorageFailed}."""
        d = defer.Deferred()
        self._queue((key, message.seq, self.record(message)), d)
        return d

    def remove(self, key, seq):
        """Remove message C{seq} from C{key} with this turn's writes."""
        self._queue((key, seq, None), None)

    def _queue(self, op, answer):
        self._ops.append(op)
        self._answers.append(answer)
        if self._clock is None:
            self.flush()
        elif self._flush_call is None:
            self._flush_call = self._clock.callLater(0, self.flush)

    def flush(self):
        """Hand this turn's adds and removals to the store now, as one call (then
        every store call keeps its place in call order)."""
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()
        ops = self._ops
        if not ops:
            return
        answers = self._answers
        self._ops, self._answers = [], []
        write = getattr(self._store, "write_batch", None)
        d = write(ops) if write is not None else _write_one_by_one(self._store, ops)
        d.addCallbacks(self._written, self._not_written, (ops, answers), None,
                       (ops, answers))
        d.addErrback(lambda failure: self.log.failure("answering stored messages",
                                                      failure))

    def _written(self, refused, ops, answers):
        # The store's answer to a turn's writes: C{refused} maps the index of each
        # operation it did not carry out to why; the others are stored (removed).
        for i, answer in enumerate(answers):
            error = refused.get(i) if refused else None
            if answer is None:
                if error is not None:
                    self.failed(Failure(error), "remove a message from", ops[i][0])
            elif error is None:
                answer.callback(None)
            else:
                try:
                    result = self.add_failed(Failure(error), ops[i][0], ops[i][1])
                except Exception:   # add_failed raises the producer's refusal
                    result = Failure()
                answer.errback(result)

    def _not_written(self, failure, ops, answers):
        # The whole call failed (a closed store): nothing of it was carried out.
        self._written(dict.fromkeys(range(len(ops)), failure.value), ops, answers)

    def payload_of(self, data):
        """The payload of a message from the bytes the store kept of it (a paged out
        body read back, S2.6)."""
        return self.decode(_split_expiry(data)[0]).payload

    def queue_store(self, kind, name):
        """The L{QueueStore} of destination C{(kind, name)}."""
        return QueueStore(self, canonical(kind, name))

    def durable_store(self, container_id, name):
        """The L{QueueStore} of durable subscription C{(container_id, name)}."""
        return QueueStore(self, durable_key(container_id, name))

    def destination_created(self, kind, name):
        if not self._restoring:
            self.store.add_destination(kind, name, {}).addErrback(
                self.failed, "store destination", canonical(kind, name))

    def destination_updated(self, kind, name, attributes):
        """Store destination C{(kind, name)} again with C{attributes} (its limits, set
        by an operator): the store replaces what it had."""
        self.store.add_destination(kind, name, attributes).addErrback(
            self.failed, "store the attributes of destination", canonical(kind, name))

    def destination_deleted(self, kind, name):
        self.store.remove_destination(kind, name).addErrback(
            self.failed, "forget destination", canonical(kind, name))

    def durable_created(self, container_id, name, topic, selector, owner=None):
        """Store durable subscription C{(container_id, name)}, or its new owner (the
        store replaces what it had)."""
        if not self._restoring:
            text = None if selector is None else selector.text
            self.store.add_durable(container_id, name, topic, text, owner).addErrback(
                self.failed, "store durable subscription", durable_key(container_id, name))

    def durable_deleted(self, container_id, name):
        self.store.remove_durable(container_id, name).addErrback(
            self.failed, "forget durable subscription", durable_key(container_id, name))

    def store_status(self):
        """The store's health as data (C{state}: healthy, failing or broken; while
        failing C{reason}, C{advice}, C{seconds}, C{refused}; C{pending} writes), for
        the admin; C{None} when the store does not tell."""
        health = getattr(self._store, "health", None)
        return None if health is None else health.status()

    # -- transactions (S3.1, S6.3) -------------------------------------------------------

    def commit_batch(self, txn_id, adds, removes):
        """Write a transaction's persistent messages as one store transaction: begin,
        every add and remove with C{txn=}, commit. A crash before the store's commit
        leaves none of them, after it all (S3.1).

        @param txn_id: a store transaction id (str) unique in the broker.
        @param adds: C{(key, seq, message)} to store.
        @param removes: C{(key, seq)} to remove.
        @return: a Deferred firing once the commit is durable; on a failure the store
            transaction is rolled back and the Deferred fails.
        """
        store = self.store
        d = store.begin(txn_id)

        def write(_):
            calls = [store.add_message(key, seq, self.encode(message), txn=txn_id)
                     for key, seq, message in adds]
            calls += [store.remove_message(key, seq, txn=txn_id) for key, seq in removes]
            return defer.gatherResults(calls, consumeErrors=True)

        def abandon(failure):
            # Nothing of it may be committed later: roll it back, then report why.
            store.rollback(txn_id).addErrback(lambda _: None)
            if isinstance(failure.value, defer.FirstError):
                failure = failure.value.subFailure
            self.failed(failure, "commit transaction", txn_id)
            return failure

        d.addCallback(write)
        d.addCallback(lambda _: store.commit(txn_id))
        d.addErrback(abandon)
        return d

    def retire(self, removes):
        """A transaction that removed C{removes} (C{(key, seq)}) from the store is
        settling their deliveries: their queues' L{QueueStore.remove} must not remove
        them again. L{retire_done} ends it."""
        self.retired.update(removes)

    def retire_done(self, removes):
        self.retired.difference_update(removes)

    # -- failures ----------------------------------------------------------------------

    def add_failed(self, failure, key, message_id):
        """Errback of an add: hand the producer a L{StorageFailed} (logged unless the
        store logs it itself)."""
        self.failed(failure, "store a message in", key)
        error = failure.value
        if _store_cannot_write(error):
            # Returned, not raised: while the store fails this is the answer to every
            # persistent message, and a raised exception would carry a traceback.
            return Failure(StorageFailed(
                f"the message store cannot write: {error.reason}; persistent messages "
                "are refused until it recovers",
                ErrorKind.LIMIT_EXCEEDED if error.exhausted else None))
        raise StorageFailed(
            f"the broker could not store persistent message {message_id} "
            f"({failure.getErrorMessage()}); it was not acknowledged")

    def failed(self, failure, what, key):
        """Errback of every store call: counted; the first failure of each kind is
        logged, except the store's own "cannot write now", which it logs itself."""
        kind = failure.type.__name__
        seen = self.failures.get(kind, 0)
        self.failures[kind] = seen + 1
        if not seen and not _store_cannot_write(failure.value):
            self.log.failure("could not {what} {key} in the store; further {kind} "
                             "failures are only counted", failure, what=what, key=key,
                             kind=kind)

    # -- recovery (S3.1) ---------------------------------------------------------------

    def restore(self, broker, recovered):
        """Rebuild C{broker}'s destinations, durable subscriptions and their pending
        messages, in order, from a L{mqgate.store.interfaces.Recovered}.

        Must run before any producer or consumer is attached: the broker's C{seq}
        then continues above C{recovered.max_message_id}.

        @return: a L{RecoverySummary}.
        """
        summary = RecoverySummary()
        summary.warnings.extend(recovered.warnings)
        self._restoring = True
        try:
            for stored in recovered.destinations:
                if stored.kind == QUEUE:
                    broker.create_queue(stored.name)
                elif stored.kind == TOPIC:
                    broker.create_topic(stored.name)
                else:
                    summary.warnings.append(f"unknown destination kind {stored.kind!r}"
                                            f" of {stored.name!r} ignored")
                    continue
                summary.destinations += 1
                self._restore_attributes(broker, stored, summary)
            queues = {canonical(QUEUE, name): broker.queue(name) for name in broker.queues()}
            for queue in broker.system_queues():   # the DMQ (S2.4)
                queues[canonical(QUEUE, queue.name)] = queue
            for stored in recovered.durables:
                try:
                    queue = broker.restore_durable(stored.container_id, stored.name,
                                                   stored.topic, stored.selector,
                                                   stored.owner)
                except CoreError as e:
                    summary.warnings.append(
                        f"durable subscription {stored.name!r} of {stored.container_id!r}"
                        f" not restored: {e.description}")
                    continue
                queues[durable_key(stored.container_id, stored.name)] = queue
                summary.durables += 1
        finally:
            self._restoring = False
        shared = {}
        for key, messages in recovered.messages.items():
            queue = queues.get(key) or self._orphan(broker, key, summary)
            if queue is None or not messages:
                continue
            summary.holding += 1
            for stored in messages:
                message = shared.get(stored.message_id)
                if message is None:
                    message = self._message(stored, summary)
                    if message is None:
                        queue.store.remove(_Stub(stored.message_id))
                        continue
                    shared[stored.message_id] = message
                queue.publish(message)
                summary.messages += 1
        summary.prepared = len(recovered.prepared)
        if recovered.prepared:
            summary.warnings.append(
                f"{len(recovered.prepared)} prepared transactions are kept in the store"
                " for their coordinator")
        broker.continue_seq(recovered.max_message_id)
        return summary

    @staticmethod
    def _restore_attributes(broker, stored, summary):
        # Limits an operator set (update dst): a value this broker cannot use leaves
        # the destination with the default ones, and says so.
        if not stored.attributes:
            return
        try:
            broker.restore_attributes(stored.kind, stored.name, stored.attributes)
        except (ValueError, TypeError) as e:
            summary.warnings.append(f"{stored.kind} {stored.name!r}: its stored limits"
                                    f" {stored.attributes!r} are not usable ({e}); it"
                                    " has the default ones")

    def _message(self, stored, summary):
        try:
            data, expiry, kept = _split_expiry(stored.data)
            message = self.decode(data)
            if kept:
                message.expiry = expiry   # absolute, as it was when stored (S2.9)
        except Exception as e:   # a record that passed its checksum but does not parse
            summary.warnings.append(f"stored message {stored.message_id} of "
                                    f"{stored.destination!r} is unreadable ({e}); removed")
            return None
        message.durable = True
        message.seq = stored.message_id
        if stored.delivery_count > message.delivery_count:
            message.delivery_count = stored.delivery_count
        return message

    def _orphan(self, broker, key, summary):
        # Messages under a key no stored destination or subscription owns.
        if key.startswith("queue://"):
            name = key[len("queue://"):]
            summary.warnings.append(f"queue {name!r} held stored messages but was not "
                                    "itself stored; it was recreated")
            queue = broker.create_queue(name)
            return queue
        parsed = _parse_durable_key(key) if key.startswith(_DURABLE_PREFIX) else None
        if parsed is not None:
            self.durable_deleted(*parsed)
        elif key.startswith("topic://"):
            self.destination_deleted(TOPIC, key[len("topic://"):])
        summary.warnings.append(f"stored messages under {key!r} belong to nothing; "
                                "removed")
        return None


class _Stub:
    """Just enough of a message for L{QueueStore.remove}."""

    __slots__ = ("seq",)

    def __init__(self, seq):
        self.seq = seq
