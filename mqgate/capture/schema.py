# -*- test-case-name: tests.capture.test_index -*-
"""
The capture index's tables (S7.5), on the message store's two databases: the same
L{mqgate.store.sqldialects.Dialect}s give the column types, placeholders and
connection set-up.

    CAPMSG_<id>   one row per routed message: when, where, ids, properties (JSON),
                  the bounded body
    CAPPROP_<id>  one row per application property of each message, as text, so a
                  search by property uses an index instead of reading every JSON

C{<id>} is the broker's id (as the store's tables, S12.1), so brokers can share one
PostgreSQL database. The tables are created when missing (the index holds copies
only: there is nothing to upgrade or keep across a layout change but the copies
themselves, and a newer layout would say so here).

SEQ is numbered on the reactor thread (as the store numbers its rows), so a row's
number is known before it is written and the live tail and the index agree on it.
Times are milliseconds since the epoch, integers, so both databases compare them
alike.

Nothing here runs on the reactor thread: these functions take a DB-API cursor.
"""

__all__ = ["CaptureSchema"]

_DDL = (
    "CREATE TABLE IF NOT EXISTS {msg} (SEQ {pk}, CAPTURED_AT {int} NOT NULL, "
    "NODE {text} NOT NULL, SUBSCRIPTION {text} NOT NULL, ADDRESS {text} NOT NULL, "
    "KIND VARCHAR(8) NOT NULL, ROUTED_TO {text}, MESSAGE_ID {text}, "
    "CORRELATION_ID {text}, REPLY_TO {text}, ORIGINAL_ID {text}, VERIFY_REASON {text}, "
    "PROPERTIES {text} NOT NULL, BODY {blob} NOT NULL, BODY_SIZE {int} NOT NULL, "
    "TRUNCATED {int} NOT NULL, STORED_BYTES {int} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {prop} (SEQ {int} NOT NULL, NAME {text} NOT NULL, "
    "VALUE {text})",
    "CREATE INDEX IF NOT EXISTS {msg}_ADDR ON {msg} (ADDRESS, CAPTURED_AT)",
    "CREATE INDEX IF NOT EXISTS {msg}_TIME ON {msg} (CAPTURED_AT)",
    "CREATE INDEX IF NOT EXISTS {msg}_CORR ON {msg} (CORRELATION_ID)",
    "CREATE INDEX IF NOT EXISTS {msg}_MSGID ON {msg} (MESSAGE_ID)",
    "CREATE INDEX IF NOT EXISTS {prop}_NV ON {prop} (NAME, VALUE)",
    "CREATE INDEX IF NOT EXISTS {prop}_SEQ ON {prop} (SEQ)",
)

_COLUMNS = ("SEQ, CAPTURED_AT, NODE, SUBSCRIPTION, ADDRESS, KIND, ROUTED_TO, MESSAGE_ID, "
            "CORRELATION_ID, REPLY_TO, ORIGINAL_ID, VERIFY_REASON, PROPERTIES, BODY, "
            "BODY_SIZE, TRUNCATED, STORED_BYTES")


class CaptureSchema:
    """The index's tables for one broker id in one database, and its statements
    (with the driver's placeholders).

    @param dialect: a L{mqgate.store.sqldialects.Dialect}.
    @param brokerid: the table name suffix.
    """

    columns = _COLUMNS

    def __init__(self, dialect, brokerid):
        self.dialect = dialect
        self.msg = f"CAPMSG_{brokerid}"
        self.prop = f"CAPPROP_{brokerid}"
        q = dialect.sql
        self.insert_message = q(
            f"INSERT INTO {self.msg} ({_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        self.insert_property = q(
            f"INSERT INTO {self.prop} (SEQ, NAME, VALUE) VALUES (?, ?, ?)")
        self.delete_subscription_upto = q(
            f"DELETE FROM {self.msg} WHERE SUBSCRIPTION = ? AND SEQ <= ?")
        self.delete_orphan_properties_upto = q(
            f"DELETE FROM {self.prop} WHERE SEQ <= ? AND SEQ NOT IN "
            f"(SELECT SEQ FROM {self.msg} WHERE SEQ <= ?)")

    def create(self, cursor):
        """Create what is missing (one transaction)."""
        self.dialect.begin(cursor)
        for text in _DDL:
            for placeholder, sql_type in self.dialect.types.items():
                text = text.replace("{" + placeholder + "}", sql_type)
            cursor.execute(text.format(msg=self.msg, prop=self.prop))

    def totals(self, cursor):
        """C{(next_seq, {subscription: stored_bytes})} of what the tables hold."""
        cursor.execute(f"SELECT COALESCE(MAX(SEQ), 0) FROM {self.msg}")
        last = int(cursor.fetchone()[0])
        cursor.execute(f"SELECT SUBSCRIPTION, SUM(STORED_BYTES) FROM {self.msg} "
                       "GROUP BY SUBSCRIPTION")
        return last + 1, {name: int(size) for name, size in cursor.fetchall()}

    def drop(self, cursor):
        """Drop the index's tables (tests, and an operator starting afresh)."""
        self.dialect.begin(cursor)
        cursor.execute(f"DROP TABLE IF EXISTS {self.prop}")
        cursor.execute(f"DROP TABLE IF EXISTS {self.msg}")

    def cutoff_before(self, cursor, when_ms, limit, subscription=None):
        """The SEQ up to which the oldest C{limit} rows (of C{subscription}, or all)
        captured before C{when_ms} go, or C{None} when none is that old."""
        where, params = "CAPTURED_AT < ?", [when_ms]
        if subscription is not None:
            where += " AND SUBSCRIPTION = ?"
            params.append(subscription)
        cursor.execute(self.dialect.sql(
            f"SELECT MAX(SEQ) FROM (SELECT SEQ FROM {self.msg} WHERE {where} "
            f"ORDER BY SEQ LIMIT {int(limit)}) OLDEST"), params)
        row = cursor.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def oldest_to_free(self, cursor, subscription, excess, limit):
        """C{(cutoff_seq, rows, bytes)}: the oldest rows of C{subscription} that free
        at least C{excess} bytes, C{limit} rows at most; C{(None, 0, 0)} when it has
        none."""
        cursor.execute(self.dialect.sql(
            f"SELECT SEQ, STORED_BYTES FROM {self.msg} WHERE SUBSCRIPTION = ? "
            f"ORDER BY SEQ LIMIT {int(limit)}"), (subscription,))
        seq, rows, freed = None, 0, 0
        for row_seq, size in cursor.fetchall():
            seq, rows, freed = int(row_seq), rows + 1, freed + int(size)
            if freed >= excess:
                break
        return seq, rows, freed
