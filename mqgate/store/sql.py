"""
The SQL store (S3.5): L{IMessageStore} on SQLite or PostgreSQL through
C{twisted.enterprise.adbapi}.

Threads. As in the file store, two halves. L{SqlStore} lives on the reactor thread and
keeps a L{Ledger} (what is live, which transactions exist), so every call is checked
and answered in call order without waiting for the database, and turned into SQL
statements at once. L{BatchWriter} hands the statements to the connection pool (one
connection, one thread), one database transaction at a time.

Group commit (S3.4). The first write of a reactor turn schedules a flush with
C{callLater(0)}; every write of that turn, and every write made while a transaction is
running, joins one batch: one C{runInteraction}, one COMMIT (one WAL fsync with sync
on), however many producers. Each Deferred of a batch fires after its COMMIT, so an
acknowledged message is in the database. Statements run in call order (consecutive
equal statements go through one C{executemany}), so the order of effects is the call
order and what survives a crash is a prefix of the calls.

Faults (S3.6, L{mqgate.store.health}). A failed transaction (a full disk under SQLite,
a PostgreSQL server stopped or restarted) makes the store failing: its adds are taken
back from the ledger and refused (L{StoreFailed}), new adds are refused at once, and
removals and catalog changes are kept and written first once a probe (a new connection
and a write that changes nothing) succeeds, every C{mqgate.persist.retry_interval}
seconds.

Sync. C{mqgate.persist.jdbc.sync.enabled} (default true, as a database's COMMIT is
durable by default) makes each COMMIT wait for the disk: SQLite C{synchronous=FULL}
in WAL mode, PostgreSQL C{synchronous_commit=on}. Off, a COMMIT returns once the
database has the data (SQLite C{synchronous=NORMAL}, PostgreSQL
C{synchronous_commit=off}): a killed broker loses nothing acknowledged, a machine (or
database server) crash may lose the last batches, as S3.4 says of sync off.

Transactions (S3.1). An open transaction lives only in the ledger (its adds hold their
bytes), so a restart rolls it back by construction. C{prepare} writes the transaction
and its operations (MQTXN41, MQTXNOP41); C{commit} deletes its removes and copies its
adds into MQMSG41 with new sequence numbers, so they take their place at the commit.

Nothing here imports the reactor: the caller passes one (tests/store/test_group_commit
checks the package).
"""

import json

from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from mqgate.store.guard import guarded, refused_while_failing
from mqgate.store.health import DEFAULT_RETRY_INTERVAL, StoreHealth, file_advice
from mqgate.store.interfaces import (
    IMessageStore, PreparedTransaction, StoreClosed, StoreError, StoreFailed,
    StoredMessage, UnknownMessage, destination_key, durable_key)
from mqgate.store.memory import PREPARED, Ledger, Txn
from mqgate.store.sqlconfig import (
    PASSWORD_KEY, SqlConfig, connection_pool, sql_config_from_settings)
from mqgate.store.sqldialects import from_sql_id, to_sql_id

__all__ = [
    "BatchWriter", "PASSWORD_KEY", "SqlConfig", "SqlStore", "connection_pool",
    "sql_config_from_settings", "sql_store_from_settings",
]

#: Most writes in one database transaction; the rest wait for the next one. Bounds
#: the latency one huge burst adds to the acknowledgements behind it.
DEFAULT_MAX_BATCH = 5000


# -- group commit ----------------------------------------------------------------------

class BatchWriter:
    """Coalesces the writes of a reactor turn into one database transaction (S3.4).

    A write is a list of C{(sql, params)} and a I{tag} saying what becomes of it if
    its transaction fails (S3.6): C{None} (keep it, write it again once the store
    recovers), L{REFUSE}, or C{(destination, message_id)} for a plain add. A failed
    batch's writes, and what waits behind them, go to C{on_failure(cause, rest)},
    which answers those it refuses and returns those to keep; the writer then stalls
    until L{resume}. C{run_batch(statements) -> Deferred} runs statements in one
    transaction; C{run_alone(job) -> Deferred} runs a job that needs the connection to
    itself (compaction), after what was submitted before it.
    """

    def __init__(self, clock, run_batch, run_alone, *, max_batch=DEFAULT_MAX_BATCH,
                 on_failure=None):
        self._clock = clock
        self._run_batch = run_batch
        self._run_alone = run_alone
        self._on_failure = on_failure or _refuse_all
        self.max_batch = max_batch
        self._pending = []          # (kind, payload, Deferred, tag)
        self._busy = False
        self._scheduled = False
        self._idle_waiters = []
        self.stalled = False
        self.commits = 0
        # Seconds from handing a batch to the database thread to its COMMIT returning,
        # summed over the commits (S5.1: the store's latency, as fsync_seconds).
        self.commit_seconds = 0.0
        self._started_at = None
        self.records = 0
        self.largest = 0
        self.statements = 0

    @property
    def waiting(self):
        """How many writes wait (while stalled: for the store to recover)."""
        return len(self._pending)

    def submit(self, statements, tag=None):
        """Queue one write; the Deferred fires after the COMMIT that carries it."""
        return self._queue("batch", statements, tag)

    def submit_alone(self, job):
        """Queue C{job(connection)} to run by itself, in order; fires with its result."""
        return self._queue("alone", job, REFUSE)

    def drained(self):
        """A Deferred that fires once everything submitted so far has been run."""
        if not (self._busy or self._pending) or self.stalled:
            return defer.succeed(None)
        d = defer.Deferred()
        self._idle_waiters.append(d)
        return d

    def resume(self):
        """The database takes writes again: write what was kept, then go on."""
        self.stalled = False
        self._schedule()

    def abandon(self, error):
        """Errback everything waiting with C{error} (closing while stalled)."""
        pending, self._pending = self._pending, []
        for _, _, d, _ in pending:
            d.errback(error)
        self._wake_idle()

    def _queue(self, kind, payload, tag):
        d = defer.Deferred()
        self._pending.append((kind, payload, d, tag))
        self._schedule()
        return d

    def _schedule(self):
        if not (self._busy or self._scheduled or self.stalled) and self._pending:
            # Flush at the end of this turn: what else this turn writes shares it.
            self._scheduled = True
            self._clock.callLater(0, self._start)

    def _start(self):
        self._scheduled = False
        if self._busy or not self._pending or self.stalled:
            return
        if self._pending[0][0] == "alone":
            batch, self._pending = self._pending[:1], self._pending[1:]
            d = self._run_alone(batch[0][1])
        else:
            n = 0
            while (n < len(self._pending) and n < self.max_batch
                   and self._pending[n][0] == "batch"):
                n += 1
            batch, self._pending = self._pending[:n], self._pending[n:]
            statements = [s for _, payload, _, _ in batch for s in payload]
            self.statements += len(statements)
            self._started_at = self._clock.seconds()
            d = self._run_batch(statements)
        self._busy = True
        d.addBoth(self._finished, batch)

    def _finished(self, result, batch):
        # Deferreds fire while still busy, so what their callbacks write joins the next
        # batch instead of starting a batch of one (as the file store's WriteQueue).
        if isinstance(result, Failure):
            if batch[0][0] == "alone":
                # A job (compaction) changes no data: its failure stops only itself.
                batch[0][2].errback(StoreError(str(result.value)))
            else:
                rest, self._pending = batch + self._pending, []
                self.stalled = True
                self._pending = self._on_failure(result.value, rest) + self._pending
        elif batch[0][0] == "alone":
            batch[0][2].callback(result)
        else:
            self.commits += 1
            self.commit_seconds += self._clock.seconds() - self._started_at
            self.records += len(batch)
            self.largest = max(self.largest, len(batch))
            for _, _, d, _ in batch:
                d.callback(None)
        self._busy = False
        if self._pending and not self.stalled:
            self._start()
        elif not self._pending or self.stalled:
            self._wake_idle()

    def _wake_idle(self):
        waiters, self._idle_waiters = self._idle_waiters, []
        for d in waiters:
            d.callback(None)


#: The tag of a write that is refused, not kept, when its transaction fails.
REFUSE = "refuse"


def _refuse_all(cause, rest):
    error = StoreFailed(cause)
    for _, _, d, _ in rest:
        d.errback(error)
    return []


class _DatabaseError(Exception):
    """A database error in a batch or job, wrapped so the writer can tell it apart."""


# -- the statements --------------------------------------------------------------------

class _Statements:
    """The store's SQL, with this broker's table names and the driver's placeholders."""

    def __init__(self, schema):
        n, q = schema.names, schema.dialect.sql
        msg, dst, con = n["MQMSG41"], n["MQDST41"], n["MQCON41"]
        txn, ops = n["MQTXN41"], n["MQTXNOP41"]
        self.insert_message = q(
            f"INSERT INTO {msg} (SEQ, DESTINATION, MESSAGE_ID, DELIVERY_COUNT, DATA) "
            "VALUES (?, ?, ?, 0, ?)")
        self.select_message = q(
            f"SELECT DATA FROM {msg} WHERE DESTINATION = ? AND MESSAGE_ID = ?")
        self.delete_message = q(
            f"DELETE FROM {msg} WHERE DESTINATION = ? AND MESSAGE_ID = ?")
        self.update_count = q(
            f"UPDATE {msg} SET DELIVERY_COUNT = ? WHERE DESTINATION = ? AND MESSAGE_ID = ?")
        self.drop_messages = q(f"DELETE FROM {msg} WHERE DESTINATION = ?")
        self.insert_destination = q(
            f"INSERT INTO {dst} (SEQ, KIND, NAME, ATTRIBUTES) VALUES (?, ?, ?, ?)")
        self.update_destination = q(
            f"UPDATE {dst} SET ATTRIBUTES = ? WHERE KIND = ? AND NAME = ?")
        self.delete_destination = q(f"DELETE FROM {dst} WHERE KIND = ? AND NAME = ?")
        self.insert_durable = q(
            f"INSERT INTO {con} (SEQ, CONTAINER_ID, NAME, TOPIC, SELECTOR, OWNER) "
            "VALUES (?, ?, ?, ?, ?, ?)")
        self.update_durable = q(
            f"UPDATE {con} SET TOPIC = ?, SELECTOR = ?, OWNER = ? "
            "WHERE CONTAINER_ID = ? AND NAME = ?")
        self.delete_durable = q(f"DELETE FROM {con} WHERE CONTAINER_ID = ? AND NAME = ?")
        self.insert_txn = q(f"INSERT INTO {txn} (SEQ, TXN_ID) VALUES (?, ?)")
        self.delete_txn = q(f"DELETE FROM {txn} WHERE TXN_ID = ?")
        self.insert_op = q(
            f"INSERT INTO {ops} (SEQ, TXN_ID, OP, DESTINATION, MESSAGE_ID, DATA) "
            "VALUES (?, ?, ?, ?, ?, ?)")
        self.delete_ops = q(f"DELETE FROM {ops} WHERE TXN_ID = ?")
        # A prepared transaction's adds enter MQMSG41 shifted past every SEQ so far.
        self.commit_adds = q(
            f"INSERT INTO {msg} (SEQ, DESTINATION, MESSAGE_ID, DELIVERY_COUNT, DATA) "
            f"SELECT SEQ + ?, DESTINATION, MESSAGE_ID, 0, DATA FROM {ops} "
            "WHERE TXN_ID = ? AND OP = 'A'")
        self.select_destinations = (
            f"SELECT SEQ, KIND, NAME, ATTRIBUTES FROM {dst} ORDER BY SEQ")
        self.select_durables = (
            f"SELECT SEQ, CONTAINER_ID, NAME, TOPIC, SELECTOR, OWNER FROM {con} "
            "ORDER BY SEQ")
        self.select_messages = (
            f"SELECT SEQ, DESTINATION, MESSAGE_ID, DELIVERY_COUNT, DATA FROM {msg} "
            "ORDER BY SEQ")
        self.select_txns = f"SELECT SEQ, TXN_ID FROM {txn} ORDER BY SEQ"
        self.select_ops = (
            f"SELECT SEQ, TXN_ID, OP, DESTINATION, MESSAGE_ID, DATA FROM {ops} "
            "ORDER BY SEQ")


def _execute_in_order(cursor, statements):
    """Run C{(sql, params)} in order; a run of the same statement is one executemany."""
    i = 0
    while i < len(statements):
        sql = statements[i][0]
        j = i + 1
        while j < len(statements) and statements[j][0] is sql:
            j += 1
        if j - i == 1:
            cursor.execute(sql, statements[i][1])
        else:
            cursor.executemany(sql, [params for _, params in statements[i:j]])
        i = j


def _check_text(value, what):
    """Refuse text neither database can store: not a str, a NUL, a lone surrogate."""
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a str, not {value!r}")
    if "\x00" in value:
        raise StoreError(f"{what} must not contain NUL characters: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError(f"{what} is not valid Unicode text: {value!r}") from None


# -- the store -------------------------------------------------------------------------

@implementer(IMessageStore)
class SqlStore:
    """The SQL store (S3.5).

    @param pool: an C{adbapi.ConnectionPool} with one connection (L{connection_pool}).
    @param schema: the L{Schema} (database, brokerid, DDL overrides).
    @param clock: C{callLater} provider (the reactor) for the once-per-turn flush.
    @param max_batch: most writes per database transaction.
    @param where: a text naming the database, for messages.
    @param retry_interval: seconds between attempts to write again while the database
        cannot be written (S3.6).

    @ivar vendor: C{"sqlite"} or C{"postgresql"}.
    @ivar where: the database, for messages and logs (never a password).
    @ivar health: the L{StoreHealth}: whether the store can write now.
    """

    def __init__(self, pool, schema, clock, *, max_batch=DEFAULT_MAX_BATCH, where=None,
                 retry_interval=DEFAULT_RETRY_INTERVAL):
        self._pool = pool
        self.schema = schema
        self.vendor = schema.dialect.name
        self.where = where or schema.dialect.name
        self._sql = _Statements(schema)
        self._dbapi_error = schema.dialect.dbapi().Error
        self._writer = BatchWriter(clock, self._run_batch, self._run_alone,
                                   max_batch=max_batch, on_failure=self._write_failed)
        self.health = StoreHealth(
            clock, self._probe, f"{self.vendor} store ({self.where})", self._advice,
            resume=self._writer.resume, pending=lambda: self._writer.waiting,
            retry_interval=retry_interval)
        self._ledger = Ledger()
        self._state = "new"
        self._seq = 0
        self._prepared_span = {}     # txn id -> (lowest, highest) SEQ of its ops, or None
        self._bytes_written = 0

    # -- figures -----------------------------------------------------------------------

    @property
    def fsync_count(self):
        """Write transactions committed (S3.4: one COMMIT, one WAL flush, per batch)."""
        return self._writer.commits

    @property
    def stats(self):
        """Counters shaped like the file store's, for the benchmark and admin views."""
        w = self._writer
        return {
            "fsyncs": w.commits, "fsync_seconds": w.commit_seconds,
            "commits": w.commits, "records": w.records,
            "batches": w.commits, "max_batch": w.largest,
            "records_per_fsync": w.records / w.commits if w.commits else 0.0,
            "max_records_per_fsync": w.largest, "statements": w.statements,
            "bytes_written": self._bytes_written,
        }

    # -- the database thread -----------------------------------------------------------

    def _run_batch(self, statements):
        return self._pool.runInteraction(self._write_batch, statements)

    def _write_batch(self, cursor, statements):
        try:
            _execute_in_order(cursor, statements)
        except self._dbapi_error as e:
            raise _DatabaseError(f"{self.where}: {e}") from e

    def _run_alone(self, job):
        return self._pool.runWithConnection(self._job, job)

    def _job(self, conn, job):
        try:
            return job(conn)
        except self._dbapi_error as e:
            raise _DatabaseError(f"{self.where}: {e}") from e

    def _load(self, cursor):
        """Recovery, in one transaction: check (or create) the tables, read them all."""
        rows = {"upgraded": self.schema.check(cursor)}
        for name in ("destinations", "durables", "messages", "txns", "ops"):
            cursor.execute(getattr(self._sql, f"select_{name}"))
            rows[name] = cursor.fetchall()
        return rows

    # -- recovery ----------------------------------------------------------------------

    def recover(self):
        """Read the store back (S3.1), creating the tables when none exist."""
        if self._state != "new":
            return defer.fail(StoreError("recover() was called already"))
        self._state = "recovering"
        d = self._pool.runInteraction(self._load)
        d.addCallbacks(self._recovered, self._recovery_failed)
        return d

    def _recovery_failed(self, failure):
        self._state = "new"
        if failure.check(StoreError):
            return failure
        return Failure(StoreError(f"cannot open the SQL store ({self.where}): "
                                  f"{failure.value}"))

    def _recovered(self, rows):
        if self._state != "recovering":
            raise StoreClosed("the store was closed during recovery")
        ledger = self._ledger
        seqs = [0]
        for seq, kind, name, attributes in rows["destinations"]:
            ledger.destinations[(kind, name)] = json.loads(attributes)
            seqs.append(seq)
        for seq, container_id, name, topic, selector, owner in rows["durables"]:
            ledger.durables[(container_id, name)] = (topic, json.loads(selector), owner)
            seqs.append(seq)
        recovered = ledger.recovered_skeleton()
        for seq, dest, mid, count, data in rows["messages"]:
            mid = from_sql_id(mid)
            ledger.insert(dest, mid, None)
            recovered.messages.setdefault(dest, []).append(
                StoredMessage(dest, mid, bytes(data), count))
            seqs.append(seq)
        if rows["upgraded"]:
            recovered.warnings.append(rows["upgraded"])
        self._restore_prepared(rows["txns"], rows["ops"], recovered, seqs)
        recovered.max_message_id = ledger.max_message_id
        self._seq = max(seqs)
        self._state = "open"
        return recovered

    def _restore_prepared(self, txns, ops, recovered, seqs):
        ledger = self._ledger
        adds, removes, spans = {}, {}, {}
        for seq, txn_id, op, dest, mid, data in ops:
            mid = from_sql_id(mid)
            if op == "A":
                adds.setdefault(txn_id, []).append(StoredMessage(dest, mid, bytes(data), 0))
                ledger.max_message_id = max(ledger.max_message_id, mid)
            else:
                removes.setdefault(txn_id, []).append((dest, mid))
            low, high = spans.get(txn_id, (seq, seq))
            spans[txn_id] = (min(low, seq), max(high, seq))
            seqs.append(seq)
        for seq, txn_id in txns:
            seqs.append(seq)
            txn = ledger.txns[txn_id] = Txn(txn_id, PREPARED)
            txn.adds = [(m.destination, m.message_id, None) for m in adds.get(txn_id, ())]
            txn.removes = list(removes.get(txn_id, ()))
            self._prepared_span[txn_id] = spans.get(txn_id)
            recovered.prepared[txn_id] = PreparedTransaction(
                txn_id, tuple(adds.get(txn_id, ())), tuple(txn.removes))

    # -- messages ----------------------------------------------------------------------

    def _next_seq(self):
        self._seq += 1
        return self._seq

    def _write(self, statements, tag=None):
        return self._writer.submit(statements, tag)

    @guarded
    @refused_while_failing
    def add_message(self, destination, message_id, data, *, txn=None):
        """Store a message; fires after the COMMIT of its batch (S3.4)."""
        self._ledger.check_message(destination, message_id, data)
        _check_text(destination, "destination key")
        data = bytes(data)
        self._ledger.add(destination, message_id, data if txn is not None else None, txn)
        if txn is not None:
            return defer.succeed(None)
        self._bytes_written += len(data)
        return self._write([(self._sql.insert_message, (
            self._next_seq(), destination, to_sql_id(message_id), data))],
            (destination, message_id))

    @guarded
    def read_message(self, destination, message_id):
        """The stored bytes of a live message: one SELECT on the pool's thread (S2.6)."""
        self._ledger.get(destination, message_id)
        return self._pool.runInteraction(self._select_message, destination, message_id)

    def _select_message(self, cursor, destination, message_id):
        try:
            cursor.execute(self._sql.select_message, (destination, to_sql_id(message_id)))
            row = cursor.fetchone()
        except self._dbapi_error as e:
            raise StoreError(f"{self.where}: could not read message {message_id} of"
                             f" {destination!r} back: {e}") from e
        if row is None:
            raise UnknownMessage(destination, message_id)
        return bytes(row[0])

    @guarded
    def remove_message(self, destination, message_id, *, txn=None):
        """Remove a message (consumer settlement)."""
        self._ledger.remove(destination, message_id, txn)
        if txn is not None:
            return defer.succeed(None)
        return self._write([(self._sql.delete_message,
                             (destination, to_sql_id(message_id)))])

    @guarded
    @refused_while_failing
    def update_delivery_count(self, destination, message_id, count):
        """Record a message's delivery count."""
        self._ledger.check_count(count)
        self._ledger.get(destination, message_id)
        return self._write([(self._sql.update_count,
                             (count, destination, to_sql_id(message_id)))], REFUSE)

    # -- destinations and durables -----------------------------------------------------

    @guarded
    def add_destination(self, kind, name, attributes):
        """Store a destination (MQDST41); a replaced one keeps its place."""
        _check_text(kind, "destination kind")
        _check_text(name, "destination name")
        text = json.dumps(attributes or {}, sort_keys=True)
        existed = (kind, name) in self._ledger.destinations
        if not self._ledger.add_destination(kind, name, attributes):
            return defer.succeed(None)
        if existed:
            return self._write([(self._sql.update_destination, (text, kind, name))])
        return self._write([(self._sql.insert_destination,
                             (self._next_seq(), kind, name, text))])

    @guarded
    def remove_destination(self, kind, name):
        """Forget a destination and its messages."""
        key = destination_key(kind, name)
        statements = []
        if self._ledger.drop(key):
            statements.append((self._sql.drop_messages, (key,)))
        if self._ledger.destinations.pop((kind, name), None) is not None:
            statements.append((self._sql.delete_destination, (kind, name)))
        return self._write(statements) if statements else defer.succeed(None)

    @guarded
    def add_durable(self, container_id, name, topic, selector, owner=None):
        """Store a durable subscription (MQCON41) with its owner's name; a replaced
        one keeps its place."""
        for value, what in ((container_id, "container id"), (name, "subscription name"),
                            (topic, "topic"), (owner or "", "owner")):
            _check_text(value, what)
        text = json.dumps(selector)
        existed = (container_id, name) in self._ledger.durables
        if not self._ledger.add_durable(container_id, name, topic, selector, owner):
            return defer.succeed(None)
        if existed:
            return self._write([(self._sql.update_durable,
                                 (topic, text, owner, container_id, name))])
        return self._write([(self._sql.insert_durable,
                             (self._next_seq(), container_id, name, topic, text, owner))])

    @guarded
    def remove_durable(self, container_id, name):
        """Forget a durable subscription and its backlog."""
        key = durable_key(container_id, name)
        statements = []
        if self._ledger.drop(key):
            statements.append((self._sql.drop_messages, (key,)))
        if self._ledger.durables.pop((container_id, name), None) is not None:
            statements.append((self._sql.delete_durable, (container_id, name)))
        return self._write(statements) if statements else defer.succeed(None)

    # -- transactions ------------------------------------------------------------------

    @guarded
    def begin(self, txn_id):
        """Open a transaction (in memory only until prepare or commit)."""
        self._ledger.begin(txn_id)
        try:
            _check_text(txn_id, "transaction id")
        except StoreError:
            del self._ledger.txns[txn_id]
            raise
        return defer.succeed(None)

    @guarded
    @refused_while_failing
    def prepare(self, txn_id):
        """Write the transaction and its operations (MQTXN41, MQTXNOP41)."""
        txn = self._ledger.prepare(txn_id)
        sql = self._sql
        statements = [(sql.insert_txn, (self._next_seq(), txn_id))]
        first = self._seq + 1
        for dest, mid in txn.removes:
            statements.append((sql.insert_op, (
                self._next_seq(), txn_id, "R", dest, to_sql_id(mid), None)))
        for dest, mid, data in txn.adds:
            statements.append((sql.insert_op, (
                self._next_seq(), txn_id, "A", dest, to_sql_id(mid), data)))
            self._bytes_written += len(data)
        self._prepared_span[txn_id] = (first, self._seq) if len(statements) > 1 else None
        # The bytes are in MQTXNOP41 now; commit copies them from there.
        txn.adds = [(dest, mid, None) for dest, mid, _ in txn.adds]
        return self._write(statements)

    @guarded
    @refused_while_failing
    def commit(self, txn_id):
        """Apply a transaction: its removes, then its adds, at the end of the order."""
        was_prepared = self._ledger.check_resolvable(txn_id).state == PREPARED
        txn, _removed = self._ledger.commit(txn_id)
        sql = self._sql
        statements = [(sql.delete_message, (dest, to_sql_id(mid)))
                      for dest, mid in txn.removes]
        if was_prepared:
            span = self._prepared_span.pop(txn_id, None)
            if span is not None:
                low, high = span
                statements.append((sql.commit_adds, (self._seq + 1 - low, txn_id)))
                self._seq += high - low + 1
            statements += [(sql.delete_ops, (txn_id,)), (sql.delete_txn, (txn_id,))]
        else:
            for dest, mid, data in txn.adds:
                statements.append((sql.insert_message, (
                    self._next_seq(), dest, to_sql_id(mid), data)))
                self._bytes_written += len(data)
        return self._write(statements) if statements else defer.succeed(None)

    @guarded
    @refused_while_failing
    def rollback(self, txn_id):
        """Discard a transaction; a prepared one is deleted from the tables."""
        txn = self._ledger.rollback(txn_id)
        if txn.state != PREPARED:
            return defer.succeed(None)
        self._prepared_span.pop(txn_id, None)
        return self._write([(self._sql.delete_ops, (txn_id,)),
                            (self._sql.delete_txn, (txn_id,))])

    # -- compaction and close ----------------------------------------------------------

    @guarded
    @refused_while_failing
    def compact(self):
        """Give free pages back (SQLite VACUUM, PostgreSQL VACUUM), after what is
        pending; fires with C{bytes_before}, C{bytes_after}, C{live_bytes}."""
        return self._writer.submit_alone(self._compact)

    def _compact(self, conn):
        return self.schema.dialect.compact(conn, self.schema)

    def close(self):
        """Commit what is pending, then close the connection. A store that cannot
        write drops what it kept (removals: those messages come back after the
        restart, at least once) and says how many."""
        if self._state == "closed":
            return defer.succeed(None)
        was_open = self._state == "open"
        self._state = "closed"
        self.health.cancel()
        if not was_open:
            self._pool.close()
            return defer.succeed(None)
        if self.health.failing:
            self.health.abandon_kept(self._writer)
        d = self._writer.drained()
        d.addBoth(lambda _: self._pool.close())
        return d

    # -- faults (S3.6) -----------------------------------------------------------------

    def _write_failed(self, cause, rest):
        """A transaction failed (the writer's C{on_failure}): refuse new data, keep the
        rest, in order, to write once the database takes writes again.

        A plain add is taken back from the ledger and refused. Its row is deleted again
        first thing on recovery: a server that went away during the COMMIT may have
        committed it, and a refused message must never come back.
        """
        error = self.health.write_failed(cause)
        kept = []
        for kind, payload, d, tag in rest:
            if tag == REFUSE:
                d.errback(error)
            elif tag is not None:
                destination, message_id = tag
                if self._ledger.is_live(destination, message_id):
                    self._ledger.remove(destination, message_id)
                undo = defer.Deferred()
                undo.addErrback(lambda _: None)   # kept until written; nobody waits
                kept.append(("batch", [(self._sql.delete_message, (
                    destination, to_sql_id(message_id)))], undo, None))
                d.errback(error)
            else:
                kept.append((kind, payload, d, tag))
        return kept

    def _probe(self):
        # StoreHealth's probe: a fresh connection, and a write that changes nothing.
        return self._pool.runWithConnection(self._probe_job)

    def _probe_job(self, conn):
        conn.reconnect()
        cursor = conn.cursor()
        try:
            self.schema.dialect.probe(cursor)
            conn.commit()
        except self._dbapi_error as e:
            raise _DatabaseError(f"{self.where}: {e}") from e
        finally:
            cursor.close()

    def _advice(self, error):
        if self.vendor == "sqlite":
            if error.exhausted:
                return f"free disk space on the file system of the {self.where}"
            return file_advice(error.cause.__cause__ or error.cause, self.where)
        if error.exhausted:
            return f"free disk space on the database server of {self.where}"
        return (f"check that the database server of {self.where} runs and accepts "
                "connections from the broker")


def sql_store_from_settings(settings, reactor, *, prompt=None):
    """The L{SqlStore} the settings describe (not recovered yet).

    @param reactor: runs the pool's results and the once-per-turn flush.
    @param prompt: text to ask for the database password with at a terminal (when
        C{needpassword} and no password file), or None to never ask.
    @raise ConfigError: a bad or missing S3.5 value.
    """
    config = sql_config_from_settings(settings, prompt=prompt)
    return SqlStore(connection_pool(config, reactor), config.schema(), reactor,
                    where=config.where(),
                    retry_interval=settings["mqgate.persist.retry_interval"])
