"""
Local transactions, one kind for both protocols (S6.3, S10.1, S10.2, S3.1).

A L{Transaction} collects what a client does "inside" it: messages it publishes and
the outcomes it gives deliveries it received. Nothing of that is visible until
L{Transaction.commit}; L{Transaction.rollback} undoes it. The AMQP glue drives one
through the coordinator link (declare, transactional transfers and dispositions,
discharge), the STOMP glue through BEGIN, SEND/ACK/NACK with a C{transaction} header,
COMMIT and ABORT.

The rules:

 - A publish is checked when it is added, as a plain send is (the producer is open, the
   destination exists and takes it, the broker's limits admit it): a refused message
   is refused on the transfer or SEND that carried it, never later at the commit.
 - An outcome added to a transaction leaves the delivery in flight (its consumer still
   holds it) until the commit applies it; a rollback gives it back to its queue with its
   delivery count raised, as a failed delivery.
 - A commit writes every persistent message the transaction publishes and every
   persistent message it consumes in one store transaction (the store's C{begin}, adds
   and removes with C{txn=}, C{commit}): a crash before the store's commit leaves none
   of it, after it all of it (S3.1). Only when the store has committed are the messages
   enqueued and the outcomes applied; a commit the store refuses is a rollback.
 - Limits (design rule 4): messages and bytes per transaction, open transactions per
   connection, and an idle timeout after which the transaction is rolled back and its
   next use fails with L{TransactionTimedOut}. A connection that goes rolls back what
   it had open (L{Transactions.close}).

Errors are the core's (L{mqgate.core.errors}: the TX_ kinds, which the AMQP glue maps
to the conditions of AMQP Part 4 section 4.5.7, and the STOMP glue to an ERROR frame).
"""

import collections
import itertools

from twisted.internet import defer
from twisted.logger import Logger

from mqgate.core.deliveries import ACCEPTED, MODIFIED, REJECTED
from mqgate.core.destinations import Queue, drops_new
from mqgate.core.errors import CoreError, ErrorKind

__all__ = ["Transaction", "TransactionLimits", "Transactions", "TransactionRolledBack",
           "TransactionTimedOut", "TransactionLimitExceeded", "UnknownTransaction"]

#: How many timed-out transaction ids a connection remembers, to answer their next use
#: with "timed out" rather than "unknown" (bounded: a client cannot grow it).
_REMEMBERED_TIMEOUTS = 64


class UnknownTransaction(CoreError):
    """No open transaction has that id on this connection."""

    kind = ErrorKind.TX_UNKNOWN


class TransactionRolledBack(CoreError):
    """The transaction was rolled back instead of committed (the store refused it)."""

    kind = ErrorKind.TX_ROLLBACK


class TransactionTimedOut(CoreError):
    """The transaction was idle longer than C{mqgate.transaction.timeout} and was
    rolled back."""

    kind = ErrorKind.TX_TIMEOUT


class TransactionLimitExceeded(CoreError):
    """A transaction would hold more than its limits allow."""

    kind = ErrorKind.TX_LIMIT_EXCEEDED


class TransactionLimits:
    """The limits of transactions (design rule 4).

    @ivar max_messages: messages published plus outcomes given in one transaction.
    @ivar max_bytes: bytes of the messages one transaction publishes.
    @ivar max_per_connection: transactions open at once on one connection.
    @ivar timeout: seconds a transaction may stay idle (nothing added to it) before it
        is rolled back; 0: never.
    """

    __slots__ = ("max_messages", "max_bytes", "max_per_connection", "timeout")

    def __init__(self, max_messages=10000, max_bytes=64 << 20, max_per_connection=16,
                 timeout=300.0):
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_per_connection = max_per_connection
        self.timeout = timeout


# A transaction's states.
OPEN, COMMITTING, COMMITTED, ROLLED_BACK, TIMED_OUT = (
    "open", "committing", "committed", "rolled back", "timed out")


class _Publish:
    __slots__ = ("producer", "destination", "message")

    def __init__(self, producer, destination, message):
        self.producer = producer
        self.destination = destination
        self.message = message


class _Outcome:
    __slots__ = ("consumer", "delivery", "outcome", "delivery_failed",
                 "undeliverable_here")

    def __init__(self, consumer, delivery, outcome, delivery_failed, undeliverable_here):
        self.consumer = consumer
        self.delivery = delivery
        self.outcome = outcome
        self.delivery_failed = delivery_failed
        self.undeliverable_here = undeliverable_here

    @property
    def held(self):
        # Still in flight with its consumer: a consumer that closed meanwhile gave it
        # back to its queue (design rule 3), and then it is no longer ours to settle.
        consumer = self.consumer
        return not consumer.closed and self.delivery.consumer is consumer


class Transaction:
    """One transaction: what it publishes and the outcomes it gives, until it ends.

    Made by L{Transactions.declare}. C{txn_id} is a short C{bytes} id, unique on its
    connection (AMQP hands it to the client in C{declared}).
    """

    log = Logger(namespace="mqgate.transactions")

    def __init__(self, owner, txn_id, name=None):
        self._owner = owner
        self.txn_id = txn_id
        self.name = txn_id.decode("ascii") if name is None else name
        self.state = OPEN
        self.publishes = []
        self.outcomes = {}    # delivery -> _Outcome (the latest outcome given wins)
        self.size = 0
        self._timer = None
        self._arm()

    def __repr__(self):
        return (f"<Transaction {self.txn_id!r} {self.state} publishes="
                f"{len(self.publishes)} outcomes={len(self.outcomes)}>")

    # -- what the glue adds -------------------------------------------------------------

    def publish(self, producer, message):
        """Add C{message}, sent by C{producer}, to be published at the commit.

        Checked now as L{mqgate.core.broker.Producer.send} checks it; the exceptions
        are that method's (L{mqgate.core.addresses.NotFound} ...), plus
        L{TransactionLimitExceeded} past this transaction's limits and the errors of a
        transaction no longer open. The transaction stays open when one is raised.
        """
        self.check_open()
        self._check_room()
        limits = self._owner.limits
        if self.size + message.size > limits.max_bytes:
            raise TransactionLimitExceeded(
                f"transaction {self.name} would hold more than {limits.max_bytes} bytes "
                "of messages (mqgate.transaction.max_bytes)")
        destination = producer.admit(message)
        if drops_new(destination):
            return      # S7.1 full policy DROP: gone now, as outside a transaction
        self.publishes.append(_Publish(producer, destination, message))
        self.size += message.size
        self._arm()

    def settle(self, consumer, delivery, outcome=ACCEPTED, *, delivery_failed=False,
               undeliverable_here=False):
        """Give C{delivery} (in flight with C{consumer}) C{outcome} at the commit; the
        arguments are those of L{mqgate.core.deliveries.Consumer.settle}."""
        self.check_open()
        if delivery not in self.outcomes:
            self._check_room()
        self.outcomes[delivery] = _Outcome(consumer, delivery, outcome, delivery_failed,
                                           undeliverable_here)
        self._arm()

    # -- how it ends --------------------------------------------------------------------

    def commit(self):
        """Publish and settle everything, atomically in the store.

        @return: a Deferred firing once it is all done (the persistent part committed
            in the store), or failing with L{TransactionRolledBack} when the store
            refused it (then nothing of it happened and the deliveries are back on
            their queues), or with the error of a transaction no longer open.
        """
        try:
            self.check_open()
        except CoreError as error:
            return defer.fail(error)
        self._end(COMMITTING)
        work = _Work(self._owner.broker.next_seq, self.publishes, self.outcomes)
        persistence = self._owner.broker.persistence
        if persistence is None or work.empty_for_store:
            self._apply(work, persistence)
            return defer.succeed(None)
        d = persistence.commit_batch(self._store_id, work.adds, work.removes)
        d.addCallbacks(lambda _: self._apply(work, persistence),
                       self._store_refused)
        return d

    def rollback(self, state=ROLLED_BACK):
        """Drop the publishes; give the deliveries back to their queues, their delivery
        count raised. Rolling back a transaction that has ended does nothing."""
        if self.state is not OPEN:
            return
        self._end(state)
        self._give_back()

    def _apply(self, work, persistence):
        self.state = COMMITTED
        if persistence is not None:
            persistence.retire(work.removes)
        try:
            for publish, targets in work.routed:
                publish.producer.enqueue_committed(publish.destination, targets,
                                                   publish.message)
            for outcome in self.outcomes.values():
                if outcome.held:
                    outcome.consumer.settle(
                        outcome.delivery, outcome.outcome,
                        delivery_failed=outcome.delivery_failed,
                        undeliverable_here=outcome.undeliverable_here)
        finally:
            if persistence is not None:
                persistence.retire_done(work.removes)
        self._forget()

    def _store_refused(self, failure):
        self.state = ROLLED_BACK
        self._give_back()
        raise TransactionRolledBack(
            f"transaction {self.name} was rolled back: the store did not commit it "
            f"({failure.getErrorMessage()})")

    def _give_back(self):
        # Each goes back to the head of its queue: the last one first, so that they
        # come again in the order they came.
        for outcome in reversed(list(self.outcomes.values())):
            if outcome.held:
                outcome.consumer.settle(outcome.delivery, MODIFIED, delivery_failed=True)
        self._forget()

    def _forget(self):
        self.publishes = []
        self.outcomes = {}
        self.size = 0

    # -- bookkeeping --------------------------------------------------------------------

    def check_open(self):
        """Raise the error of a transaction that is no longer open (timed out, ended)."""
        state = self.state
        if state is OPEN:
            return
        if state is TIMED_OUT:
            raise TransactionTimedOut(
                f"transaction {self.name} was rolled back after "
                f"{self._owner.limits.timeout:g} seconds without use "
                "(mqgate.transaction.timeout)")
        raise UnknownTransaction(f"transaction {self.name} is {state}")

    def _check_room(self):
        most = self._owner.limits.max_messages
        if len(self.publishes) + len(self.outcomes) >= most:
            raise TransactionLimitExceeded(
                f"transaction {self.name} already holds {most} messages and "
                "acknowledgements, the most allowed (mqgate.transaction.max_messages)")

    @property
    def _store_id(self):
        return f"{self._owner.prefix}{self.txn_id.decode('ascii')}"

    def _arm(self):
        # Idle timeout: every use pushes the deadline back; one delayed call per
        # transaction, reset rather than made again.
        timeout = self._owner.limits.timeout
        if not timeout:
            return
        timer = self._timer
        if timer is not None and timer.active():
            timer.reset(timeout)
        else:
            self._timer = self._owner.clock.callLater(timeout, self._timed_out)

    def _timed_out(self):
        self._timer = None
        if self.state is OPEN:
            self.log.info("transaction {txn} of {owner} rolled back: idle for {timeout}"
                          " seconds (mqgate.transaction.timeout)", txn=self.name,
                          owner=self._owner.who, timeout=self._owner.limits.timeout)
            self.rollback(TIMED_OUT)

    def _end(self, state):
        self.state = state
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()
        self._owner._ended(self)


class _Work:
    """A committing transaction's work, routed: C{routed} lists (publish, targets) in
    publish order; C{adds} and C{removes} are the store's part, as C{(key, seq, message)}
    for adds and C{(key, seq)} for removes."""

    __slots__ = ("routed", "adds", "removes")

    def __init__(self, next_seq, publishes, outcomes):
        self.routed = []
        self.adds = []
        self.removes = []
        for publish in publishes:
            message, destination = publish.message, publish.destination
            # Numbered now: committed messages take their place in their queue's
            # order at the commit (what the store contract says of transactional adds).
            message.seq = next_seq()
            targets = (destination,) if type(destination) is Queue else \
                destination.route(message)
            self.routed.append((publish, targets))
            if message.durable:
                self.adds.extend((queue.store.key, message.seq, message)
                                 for queue in targets if queue.store is not None)
        for outcome in outcomes.values():
            message = outcome.delivery.message
            store = outcome.consumer.queue.store
            if outcome.outcome in (ACCEPTED, REJECTED) and message.durable and \
                    store is not None and outcome.held:
                self.removes.append((store.key, message.seq))

    @property
    def empty_for_store(self):
        return not self.adds and not self.removes


class Transactions:
    """The open transactions of one connection.

    @param broker: the L{mqgate.core.broker.Broker} (its C{persistence}, C{next_seq}
        and C{transaction_limits}).
    @param clock: an C{IReactorTime} for the idle timeout.
    @param who: how the log names the connection (its peer address).
    """

    def __init__(self, broker, clock, who="?"):
        self.broker = broker
        self.clock = clock
        self.who = who
        self.limits = broker.transaction_limits
        # Store transaction ids must be unique among those the store has open: this
        # object lives while any of its transactions is committing (the store's
        # callbacks hold it), so its id() cannot be another's meanwhile; a restart
        # forgets open store transactions.
        self.prefix = f"c{id(self):x}-"
        self._open = {}
        self._ids = itertools.count(1)
        self._timed_out = collections.OrderedDict()

    def __len__(self):
        return len(self._open)

    def declare(self, name=None):
        """A new open transaction; C{name} is what errors call it (the client's name
        for it, STOMP's C{transaction} header), by default its id.

        @raise TransactionLimitExceeded: the connection has
            C{mqgate.transaction.max_per_connection} open already.
        """
        limit = self.limits.max_per_connection
        if len(self._open) >= limit:
            raise TransactionLimitExceeded(
                f"this connection already has {len(self._open)} open transactions, the "
                f"most allowed (mqgate.transaction.max_per_connection is {limit})")
        txn_id = str(next(self._ids)).encode("ascii")
        transaction = self._open[txn_id] = Transaction(self, txn_id, name)
        return transaction

    def get(self, txn_id):
        """The open transaction C{txn_id} (bytes).

        @raise TransactionTimedOut: it timed out (and was rolled back).
        @raise UnknownTransaction: there is no such open transaction.
        """
        transaction = self._open.get(txn_id)
        if transaction is not None:
            return transaction
        name = txn_id.decode("ascii", "replace") if isinstance(txn_id, bytes) else txn_id
        if txn_id in self._timed_out:
            raise TransactionTimedOut(
                f"transaction {name} was rolled back after {self.limits.timeout:g} "
                "seconds without use (mqgate.transaction.timeout)")
        raise UnknownTransaction(f"there is no open transaction {name} on this "
                                 "connection")

    def close(self):
        """The connection is gone: roll back what it had open."""
        for transaction in list(self._open.values()):
            transaction.rollback()

    def _ended(self, transaction):
        self._open.pop(transaction.txn_id, None)
        if transaction.state is TIMED_OUT:
            remembered = self._timed_out
            remembered[transaction.txn_id] = None
            if len(remembered) > _REMEMBERED_TIMEOUTS:
                remembered.popitem(last=False)

