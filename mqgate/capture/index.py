# -*- test-case-name: tests.capture.test_index -*-
"""
The capture index (S7.5): every copy the core hands over, one row per routed
message, in SQLite (embedded, the default) or PostgreSQL, searchable by address or
queue, time, property and correlation id.

Writes. L{CaptureIndex.ingest} runs on the reactor thread: it decodes the copy
(L{mqgate.capture.record}), numbers it, shows it to the live tail and queues its
statements on the message store's L{BatchWriter}, which writes what a reactor turn
queued in one database transaction on the pool's thread. Capture must never hurt
production traffic (S7), so the index never makes the core wait: when more than
C{max_pending} copies wait for the database (a slow disk, a database server gone),
a new copy is dropped and counted (reason C{"backlog"}), as are those of a failed
transaction (C{"write-failed"}); writing goes on after C{retry_interval} seconds.

Retention (S7.4). Every C{prune_interval} seconds a job removes rows older than
C{retention} seconds, and the oldest rows of a subscription whose rows hold more than
C{max_bytes}; each database transaction removes at most C{prune_batch} rows and the
next waits its turn behind the copies queued meanwhile, so a large removal never holds
the writer (nor, being on the pool's thread, the reactor) for long.

Queries run on the pool's one connection too, in turn with the writes.
"""

import json
import time

from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import implementer

from mqgate.capture.record import (
    DEFAULT_MAX_BODY, CaptureRecord, address_forms, record_of)
from mqgate.capture.trace import pair_requests
from mqgate.core.taps import ICaptureSink
from mqgate.store.sql import BatchWriter

__all__ = ["CaptureIndex", "CaptureQuery", "QueryError", "DEFAULT_LIMIT", "MAX_LIMIT"]

#: Rows per page of a search unless asked for fewer; at most L{MAX_LIMIT}: one page
#: is read into memory and sent as one JSON document.
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

#: Copies waiting for the database at most; beyond, new ones are dropped (S7: capture
#: never makes production wait). At the 500 copies/s of one subscription's default
#: ingest rate, 20 s of a database that does not answer.
DEFAULT_MAX_PENDING = 10000

#: Rows one retention transaction removes at most (a few tens of milliseconds of
#: SQLite's time; the copies queued meanwhile are written right after it).
DEFAULT_PRUNE_BATCH = 2000

# Requests one trace looks at, at most: replies are looked up by their ids in one
# statement per this many requests.
_TRACE_CHUNK = 500


class QueryError(ValueError):
    """A search the index cannot run, in words for the one who asked."""


class CaptureQuery:
    """What a search asks for; every field optional.

    @ivar address: the address the producer sent to.
    @ivar queue: a queue the original reached (or, for a queue, its address).
    @ivar start: seconds since the epoch, inclusive; C{end} exclusive.
    @ivar properties: C{[(name, value)]}, all must match (values compared as text).
    @ivar before: page on: only rows numbered below this (the C{next} of a page).
    """

    def __init__(self, *, address=None, queue=None, subscription=None, start=None,
                 end=None, properties=(), correlation_id=None, message_id=None,
                 before=None, limit=DEFAULT_LIMIT):
        if not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"limit {limit}: from 1 to {MAX_LIMIT} messages per page")
        if start is not None and end is not None and start >= end:
            raise QueryError("the time range is empty: 'from' must be before 'to'")
        self.address = address
        self.queue = queue
        self.subscription = subscription
        self.start = start
        self.end = end
        self.properties = tuple(properties)
        self.correlation_id = correlation_id
        self.message_id = message_id
        self.before = before
        self.limit = limit

    def where(self, schema):
        """C{(sql, params)}: the WHERE clause (with C{?}) and its parameters."""
        terms, params = [], []
        if self.address is not None:
            # "orders" finds what was sent to queue://orders or topic://orders.
            forms = address_forms(self.address)
            terms.append(f"ADDRESS IN ({', '.join('?' * len(forms))})")
            params += forms
        if self.queue is not None:
            terms.append("ROUTED_TO LIKE ? ESCAPE '!'")
            params.append("%" + _like(json.dumps(self.queue)) + "%")
        if self.subscription is not None:
            terms.append("SUBSCRIPTION = ?")
            params.append(self.subscription)
        if self.start is not None:
            terms.append("CAPTURED_AT >= ?")
            params.append(_ms(self.start))
        if self.end is not None:
            terms.append("CAPTURED_AT < ?")
            params.append(_ms(self.end))
        if self.correlation_id is not None:
            terms.append("CORRELATION_ID = ?")
            params.append(self.correlation_id)
        if self.message_id is not None:
            terms.append("MESSAGE_ID = ?")
            params.append(self.message_id)
        if self.before is not None:
            terms.append("SEQ < ?")
            params.append(self.before)
        for name, value in self.properties:
            terms.append(f"SEQ IN (SELECT SEQ FROM {schema.prop} "
                         "WHERE NAME = ? AND VALUE = ?)")
            params += [name, value]
        return (" WHERE " + " AND ".join(terms)) if terms else "", params


@implementer(ICaptureSink)
class CaptureIndex:
    """The index over one adbapi connection pool (L{mqgate.store.sqlconfig.
    connection_pool}: one connection).

    @param clock: the reactor (C{callLater}, C{seconds}) for batching and retention.
    @param now: wall-clock time in seconds since the epoch (captured_at's scale), for
        retention.
    @param tail: a L{mqgate.capture.tail.TailHub} shown every record, or None.
    @param bounds_of: C{bounds_of(subscription)}: its
        L{mqgate.core.capture.CaptureBounds} (body size, retention, stored size), or
        None for the defaults given here (a subscription removed since).
    @param where: the database, for messages and the status (never a password).
    """

    log = Logger()

    def __init__(self, pool, schema, clock, *, now=time.time, tail=None, where=None,
                 bounds_of=lambda subscription: None,
                 max_body=DEFAULT_MAX_BODY, max_pending=DEFAULT_MAX_PENDING,
                 retention=7 * 24 * 3600, max_bytes=5 * 1024 ** 3,
                 prune_interval=60, prune_batch=DEFAULT_PRUNE_BATCH,
                 retry_interval=5):
        self._pool = pool
        self.schema = schema
        self._clock = clock
        self._now = now
        self.tail = tail
        self._bounds_of = bounds_of
        self.where = where or schema.dialect.name
        self.max_body = max_body
        self.max_pending = max_pending
        self.retention = retention
        self.max_bytes = max_bytes
        self.prune_batch = prune_batch
        self._retry_interval = retry_interval
        self._writer = BatchWriter(clock, self._run_batch, self._run_alone,
                                   on_failure=self._write_failed)
        self._pruner = task.LoopingCall(self.prune)
        self._pruner.clock = clock
        self._prune_interval = prune_interval
        self._pruning = None
        self._next_seq = None
        self._early = []         # copies ingested before the index was open
        self._routed_json = {}   # routed_to tuple -> its JSON column (a few per broker)
        self._unwritten = 0
        # The rows ingested this reactor turn, written as one write (one Deferred
        # per turn, not per copy), and how many copies they are.
        self._turn = None
        self._turn_copies = 0
        self.written = 0
        self.bytes = {}          # subscription -> stored bytes
        self.drops = {}          # (subscription, reason) -> copies
        self.kept = {}           # subscription -> [copies kept, bodies cut]
        self.pruned = {"age": 0, "size": 0}
        self.trimmed = set()     # subscriptions cut back to their stored size
        self.last_error = None
        self._closed = False

    # -- life --------------------------------------------------------------------------

    def open(self):
        """Create the tables when missing and read where numbering goes on; then
        start the retention job. A Deferred."""
        d = self._pool.runInteraction(self._open)

        def opened(totals):
            self._next_seq, self.bytes = totals
            self._pruner.start(self._prune_interval, now=False)
            early, self._early = self._early, []
            for copy in early:
                self.ingest(copy)
            return self
        return d.addCallback(opened)

    def _open(self, cursor):
        self.schema.create(cursor)
        return self.schema.totals(cursor)

    def close(self):
        """Write what waits, stop retention, close the pool. A Deferred."""
        self._closed = True
        if self._pruner.running:
            self._pruner.stop()
        d = self.drained()
        if self._pruning is not None:
            d.addCallback(lambda _: self._pruning)
        d.addBoth(lambda _: self._pool.close())
        return d

    def drained(self):
        """A Deferred firing once what was ingested so far is written (or dropped)."""
        self._submit_turn()
        return self._writer.drained()

    # -- ICaptureSink ------------------------------------------------------------------

    def ingest(self, copy):
        if self._closed:
            self._count(copy.subscription, "closed", 1)
            return
        if self._next_seq is None:
            # Not open yet (the broker is starting): kept until it is, within bounds.
            if len(self._early) < self.max_pending:
                self._early.append(copy)
            else:
                self._count(copy.subscription, "backlog", 1)
            return
        if self._unwritten >= self.max_pending:
            self._count(copy.subscription, "backlog", 1)
            return
        try:
            record = record_of(copy, self._bound(copy.subscription, "body_bytes",
                                                 self.max_body), seq=self._next_seq)
        except Exception:
            self.log.failure("capture: a copy of {address} could not be indexed",
                             address=copy.address)
            self._count(copy.subscription, "undecodable", 1)
            return
        self._next_seq += 1
        # The properties' JSON is both the column and part of the row's size
        # (CaptureRecord.stored_bytes): made once per copy.
        properties = json.dumps(record.properties) if record.properties else "{}"
        size = len(record.body) + len(properties) + 200
        subscription = record.subscription
        kept = self.kept.get(subscription)
        if kept is None:
            kept = self.kept[subscription] = [0, 0]
        kept[0] += 1
        kept[1] += record.truncated
        self.bytes[subscription] = self.bytes.get(subscription, 0) + size
        self._unwritten += 1
        statements = self._statements(record, properties, size)
        if self._turn is None:
            self._turn, self._turn_copies = statements, 1
            self._clock.callLater(0, self._submit_turn)
        else:
            self._turn += statements
            self._turn_copies += 1
        tail = self.tail
        if tail is not None and tail.readers:
            tail.publish(record.summary())

    def dropped(self, subscription, reason, count):
        self._count(subscription, reason, count)
        if self.tail is not None:
            self.tail.dropped_upstream(subscription, reason, count)

    def _count(self, subscription, reason, count):
        key = (subscription, reason)
        self.drops[key] = self.drops.get(key, 0) + count

    def _bound(self, subscription, name, default):
        bounds = self._bounds_of(subscription)
        return default if bounds is None else getattr(bounds, name)

    def _statements(self, r, properties, size):
        s = self.schema
        routed_to = r.routed_to
        if routed_to is not None:
            routed_to = self._routed_json.get(routed_to)
            if routed_to is None:
                routed_to = self._routed_json[r.routed_to] = json.dumps(list(r.routed_to))
        statements = [(s.insert_message, (
            r.seq, _ms(r.captured_at), r.node, r.subscription, r.address, r.kind,
            routed_to, r.message_id, r.correlation_id, r.reply_to, r.original_id,
            r.verify_reason, properties, r.body, r.body_size, int(r.truncated), size))]
        if r.properties:
            insert, seq = s.insert_property, r.seq
            statements.extend((insert, (seq, name, _property_text(value)))
                              for name, value in r.properties.items())
        return statements

    def _submit_turn(self):
        statements, self._turn = self._turn, None
        if statements:
            copies, self._turn_copies = self._turn_copies, 0
            self._writer.submit(statements).addBoth(self._settled, copies)

    def _alone(self, job):
        # A job (retention) runs after the rows ingested before it.
        self._submit_turn()
        return self._writer.submit_alone(job)

    def _settled(self, result, copies):
        self._unwritten -= copies
        if result is None:
            self.written += copies
        return None    # a failed write was counted by _write_failed

    # -- the database's side -------------------------------------------------------------

    def _run_batch(self, statements):
        return self._pool.runInteraction(_execute_all, statements)

    def _run_alone(self, job):
        return self._pool.runInteraction(job)

    def _write_failed(self, cause, rest):
        """A transaction failed: its copies, and those queued behind, are dropped and
        counted; writing resumes after C{retry_interval}."""
        self.last_error = str(cause)
        insert = self.schema.insert_message
        dropped = 0
        for _, statements, _, _ in rest:
            if statements and not callable(statements):
                for sql, params in statements:
                    if sql is insert:     # a copy's row; its subscription is 4th
                        self._count(params[3], "write-failed", 1)
                        dropped += 1
        self.log.error("capture index: writing to {where} failed ({error}); {n} "
                       "copies dropped, trying again in {t} s", where=self.where,
                       error=str(cause), n=dropped, t=self._retry_interval)
        for _, _, d, _ in rest:
            d.errback(cause)
        if not self._closed:
            self._clock.callLater(self._retry_interval, self._writer.resume)
        return []

    # -- retention -----------------------------------------------------------------------

    def prune(self):
        """One retention run: by age, then by stored size, a batch per transaction.
        A Deferred firing when done (a run already going is not doubled)."""
        if self._pruning is not None:
            return self._pruning
        self._pruning = d = self._prune_age()
        d.addCallback(lambda _: self._prune_size())
        d.addErrback(self._prune_failed)

        def done(result):
            self._pruning = None
            return result
        return d.addBoth(done)

    def _prune_age(self):
        d = defer.succeed(None)
        for name in sorted(self.bytes):
            d.addCallback(lambda _, name=name: self._expire(name))
        return d

    def _expire(self, subscription):
        """Remove the rows of C{subscription} older than its retention, a batch per
        transaction."""
        retention = self._bound(subscription, "retention", self.retention)
        cutoff_ms = _ms(self._now() - retention)

        def job(cursor):
            seq = self.schema.cutoff_before(cursor, cutoff_ms, self.prune_batch,
                                            subscription)
            return self._remove_upto(cursor, subscription, seq)

        def step(result):
            removed, freed = result
            self._forget({subscription: freed})
            self.pruned["age"] += removed
            if removed and not self._closed:
                return self._alone(job).addCallback(step)
            return None
        return self._alone(job).addCallback(step)

    def _remove_upto(self, cursor, subscription, seq):
        """Delete the rows of C{subscription} numbered up to C{seq}, and their
        properties: C{(rows, bytes)}."""
        if seq is None:
            return 0, 0
        cursor.execute(self.schema.dialect.sql(
            f"SELECT COUNT(*), COALESCE(SUM(STORED_BYTES), 0) FROM {self.schema.msg} "
            "WHERE SUBSCRIPTION = ? AND SEQ <= ?"), (subscription, seq))
        removed, freed = cursor.fetchone()
        cursor.execute(self.schema.delete_subscription_upto, (subscription, seq))
        cursor.execute(self.schema.delete_orphan_properties_upto, (seq, seq))
        return int(removed), int(freed)

    def _prune_size(self):
        over = [name for name, size in self.bytes.items()
                if size > self._bound(name, "stored_bytes", self.max_bytes)]
        d = defer.succeed(None)
        for name in over:
            d.addCallback(lambda _, name=name: self._trim(name))
        return d

    def _trim(self, subscription):
        limit = self._bound(subscription, "stored_bytes", self.max_bytes)
        if self.bytes.get(subscription, 0) <= limit or self._closed:
            return None
        if subscription not in self.trimmed:
            self.trimmed.add(subscription)
            self.log.warn("capture index: subscription {name} holds more than {max} "
                          "bytes; it is degraded: its oldest messages are removed "
                          "before their retention time", name=subscription, max=limit)
        excess = self.bytes[subscription] - limit

        def job(cursor):
            # Enough of the oldest rows to free the excess, a batch at most.
            seq, removed, freed = self.schema.oldest_to_free(
                cursor, subscription, excess, self.prune_batch)
            if seq is not None:
                cursor.execute(self.schema.delete_subscription_upto, (subscription, seq))
                cursor.execute(self.schema.delete_orphan_properties_upto, (seq, seq))
            return removed, freed

        def step(result):
            removed, freed = result
            self._forget({subscription: freed})
            self.pruned["size"] += removed
            return self._trim(subscription) if removed else None
        return self._alone(job).addCallback(step)

    def _forget(self, freed):
        for name, size in freed.items():
            left = self.bytes.get(name, 0) - size
            if left > 0:
                self.bytes[name] = left
            else:
                self.bytes.pop(name, None)

    def _prune_failed(self, failure):
        self.last_error = str(failure.value)
        self.log.failure("capture index: removing old messages from {where} failed",
                         failure, where=self.where)

    # -- queries -------------------------------------------------------------------------

    def search(self, query):
        """A Deferred firing with C{{"messages": [summary...], "next": before}}: one
        page, newest first; C{next} pages on (C{None} on the last page)."""
        return self._pool.runInteraction(self._search, query)

    def _search(self, cursor, query):
        where, params = query.where(self.schema)
        cursor.execute(self.schema.dialect.sql(
            f"SELECT {self.schema.columns} FROM {self.schema.msg}{where} "
            f"ORDER BY SEQ DESC LIMIT {query.limit + 1}"), params)
        rows = [_record(row) for row in cursor.fetchall()]
        more = len(rows) > query.limit
        rows = rows[:query.limit]
        return {"messages": [r.summary() for r in rows],
                "next": rows[-1].seq if more else None}

    def get(self, seq):
        """A Deferred firing with the summary of row C{seq}, or None."""
        return self._pool.runInteraction(self._get, seq)

    def _get(self, cursor, seq):
        cursor.execute(self.schema.dialect.sql(
            f"SELECT {self.schema.columns} FROM {self.schema.msg} WHERE SEQ = ?"), (seq,))
        row = cursor.fetchone()
        return None if row is None else _record(row).summary()

    def trace(self, query):
        """Request/reply pairs among the messages C{query} finds that carry a
        reply-to (L{mqgate.capture.trace.pair_requests}). A Deferred."""
        return self._pool.runInteraction(self._trace, query)

    def _trace(self, cursor, query):
        where, params = query.where(self.schema)
        joiner = " AND " if where else " WHERE "
        cursor.execute(self.schema.dialect.sql(
            f"SELECT {self.schema.columns} FROM {self.schema.msg}{where}{joiner}"
            f"REPLY_TO IS NOT NULL ORDER BY SEQ DESC LIMIT {query.limit + 1}"), params)
        requests = [_record(row) for row in cursor.fetchall()]
        more = len(requests) > query.limit
        requests = requests[:query.limit]
        ids = sorted({i for r in requests for i in (r.message_id, r.correlation_id)
                      if i is not None})
        replies = []
        for i in range(0, len(ids), _TRACE_CHUNK):
            chunk = ids[i:i + _TRACE_CHUNK]
            marks = ", ".join("?" * len(chunk))
            cursor.execute(self.schema.dialect.sql(
                f"SELECT {self.schema.columns} FROM {self.schema.msg} "
                f"WHERE CORRELATION_ID IN ({marks}) ORDER BY SEQ"), chunk)
            replies += [_record(row) for row in cursor.fetchall()]
        captured = set()
        for address in sorted({f for r in requests for f in address_forms(r.reply_to)}):
            cursor.execute(self.schema.dialect.sql(
                f"SELECT 1 FROM {self.schema.msg} WHERE ADDRESS = ? LIMIT 1"), (address,))
            if cursor.fetchone() is not None:
                captured.add(address)
        result = pair_requests(requests, replies, captured, now=self._now())
        result["next"] = requests[-1].seq if more else None
        return result

    # -- the figures `query capture` shows (as mqgate.core.capture_sinks') ----------

    def figures(self, subscription):
        """C{dict} of what the index holds and dropped of C{subscription}."""
        dropped = {reason: count for (name, reason), count in self.drops.items()
                   if name == subscription}
        copies, truncated = self.kept.get(subscription, (0, 0))
        return {"copies": copies, "stored_bytes": self.bytes.get(subscription, 0),
                "truncated": truncated, "dropped": dropped,
                "degraded": subscription in self.trimmed}

    def forget(self, subscription):
        """The subscription was removed: its counts go (its rows stay until their
        retention: what was captured is still worth looking at)."""
        for key in [k for k in self.drops if k[0] == subscription]:
            del self.drops[key]
        self.kept.pop(subscription, None)
        self.trimmed.discard(subscription)

    # -- status ----------------------------------------------------------------------------

    def status(self):
        """What the index is doing, for the status view and the metrics."""
        drops = {}
        for (subscription, reason), count in sorted(self.drops.items()):
            drops.setdefault(subscription, {})[reason] = count
        return {
            "database": self.where,
            "open": self._next_seq is not None and not self._closed,
            "written": self.written,
            "pending": self._unwritten,
            "max_pending": self.max_pending,
            "stored_bytes": dict(sorted(self.bytes.items())),
            # A subscription's own bounds win; these apply to one without (removed).
            "defaults": {"stored_bytes": self.max_bytes, "retention": self.retention,
                         "body_bytes": self.max_body},
            "dropped": drops,
            "pruned": dict(self.pruned),
            "trimmed": sorted(self.trimmed),
            "last_error": self.last_error,
            "tail_readers": 0 if self.tail is None else self.tail.readers,
        }


def _execute_all(cursor, statements):
    # A batch holds inserts of rows that do not depend on one another (a message
    # row and its property rows): one executemany per statement, in the order each
    # first appears, costs the driver far less than a call per row.
    by_sql = {}
    for sql, params in statements:
        rows = by_sql.get(sql)
        if rows is None:
            by_sql[sql] = [params]
        else:
            rows.append(params)
    for sql, rows in by_sql.items():
        cursor.executemany(sql, rows)


def _ms(seconds):
    return int(round(seconds * 1000))


def _like(text):
    """C{text} as a literal in a LIKE pattern with C{!} as the escape."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _property_text(value):
    """A property value as the text a search compares with: strings as they are,
    true/false, numbers as Python writes them, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value)


def _record(row):
    (seq, at, node, subscription, address, kind, routed_to, message_id, correlation_id,
     reply_to, original_id, verify_reason, properties, body, body_size, truncated,
     _stored) = row
    return CaptureRecord(
        seq=int(seq), captured_at=at / 1000.0, node=node, subscription=subscription,
        address=address, kind=kind,
        routed_to=None if routed_to is None else tuple(json.loads(routed_to)),
        message_id=message_id, correlation_id=correlation_id, reply_to=reply_to,
        original_id=original_id, verify_reason=verify_reason,
        properties=json.loads(properties), body=bytes(body), body_size=int(body_size),
        truncated=bool(truncated))
