"""
The SQL store's tables and the two databases it runs on (S3.5): SQLite, PostgreSQL.

Tables. One set per broker: each name is a base name plus C{_<brokerid>}, so brokers
can share one database (S12.1). The base names follow the source's 4.1 schema (FACTS:
MQVER41, MQMSG41, MQDST41 ...) where a table holds the same thing, so an operator who
knows those recognises them; MQTXNOP41 is ours (the source keeps a prepared
transaction's work in columns of its message and consumer-state tables). The
underscore keeps brokerid C{1} from reading as a different base name (MQMSG41_1, not
MQMSG411). Unquoted names: both databases compare them without regard to case, so
brokerids differing only in case share tables.

    MQVER41     the store version (one row), checked at start-up
    MQDST41     destinations: kind, name, attributes (JSON)
    MQCON41     durable subscriptions ("consumers" in the source), with the name
                of the user each belongs to (OWNER; NULL when stored by version 1)
    MQMSG41     live persistent messages, in SEQ order
    MQTXN41     prepared transactions (open ones are never written: S3.1)
    MQTXNOP41   what each prepared transaction adds ('A') and removes ('R')

Every table has a SEQ column: one counter the store advances on the reactor thread at
each call, so ordering by SEQ gives call order (creation order of destinations, arrival
order of messages) without relying on either database's auto-increment. The DDL of
each table can be replaced with C{mqgate.persist.jdbc.table.NAME}; C{${name}} in it
stands for the full table name. A replacement must keep these columns.

Message ids are unsigned 64-bit, but both databases' integers are signed 64-bit: ids
of 2**63 and more are stored as their two's complement (L{to_sql_id}); order never
depends on them.

Nothing here runs on the reactor thread: these functions take a DB-API cursor and are
called from the store's connection pool or from C{mqgate dbmgr}.
"""

import importlib
import os

from mqgate.store.interfaces import StoreError

__all__ = [
    "DIALECTS", "STORE_VERSION", "TABLES", "Dialect", "Schema", "SchemaError",
    "from_sql_id", "to_sql_id",
]

#: The version of the table layout below, kept in MQVER41. Version 2 added
#: MQCON41.OWNER (durable subscriptions belong to a user); L{Schema.check} brings a
#: version 1 database up to it at start-up (L{_UPGRADES}).
STORE_VERSION = 2

#: Base table names, in creation order (MQVER41 last: its row says "complete").
TABLES = ("MQDST41", "MQCON41", "MQMSG41", "MQTXN41", "MQTXNOP41", "MQVER41")

# The DDL of each table, with {int} {blob} {text} filled per database.
_DDL = {
    "MQVER41": "CREATE TABLE ${name} (STOREVERSION {int} NOT NULL, "
               "BROKERID VARCHAR(100) NOT NULL)",
    "MQDST41": "CREATE TABLE ${name} (SEQ {pk}, KIND VARCHAR(32) NOT NULL, "
               "NAME {text} NOT NULL, ATTRIBUTES {text} NOT NULL, UNIQUE (KIND, NAME))",
    "MQCON41": "CREATE TABLE ${name} (SEQ {pk}, CONTAINER_ID {text} NOT NULL, "
               "NAME {text} NOT NULL, TOPIC {text} NOT NULL, SELECTOR {text}, "
               "OWNER {text}, UNIQUE (CONTAINER_ID, NAME))",
    "MQMSG41": "CREATE TABLE ${name} (SEQ {pk}, DESTINATION {text} NOT NULL, "
               "MESSAGE_ID {int} NOT NULL, DELIVERY_COUNT {int} NOT NULL DEFAULT 0, "
               "DATA {blob} NOT NULL, UNIQUE (DESTINATION, MESSAGE_ID))",
    "MQTXN41": "CREATE TABLE ${name} (SEQ {pk}, TXN_ID {text} NOT NULL UNIQUE)",
    "MQTXNOP41": "CREATE TABLE ${name} (SEQ {pk}, TXN_ID {text} NOT NULL, "
                 "OP CHAR(1) NOT NULL, DESTINATION {text} NOT NULL, "
                 "MESSAGE_ID {int} NOT NULL, DATA {blob}, UNIQUE (TXN_ID, SEQ))",
}

#: What brings the tables from version N to N + 1: statements with C{${MQ...}} for
#: the full table names. Each step only adds: a database upgraded by a newer mqgate
#: cannot be read by an older one, which says so (L{Schema.check}).
_UPGRADES = {
    1: ("ALTER TABLE ${MQCON41} ADD COLUMN OWNER {text}",),
}

_SIGN = 1 << 63


def to_sql_id(message_id):
    """An unsigned 64-bit message id as the signed 64-bit integer stored."""
    return message_id - (1 << 64) if message_id >= _SIGN else message_id


def from_sql_id(value):
    """The inverse of L{to_sql_id}."""
    return value + (1 << 64) if value < 0 else value


class SchemaError(StoreError):
    """The tables are missing, incomplete, or of another store version.

    @ivar missing: base names of the missing tables.
    """

    def __init__(self, text, missing=()):
        self.missing = tuple(missing)
        super().__init__(text)


class Dialect:
    """What differs between the databases: driver, types, catalogue, connect options.

    @ivar name: the C{mqgate.persist.jdbc.dbVendor} value.
    @ivar module: the DB-API module name (for adbapi).
    @ivar types: the C{{pk}} C{{int}} C{{text}} C{{blob}} column types of the DDL.
    @ivar paramstyle: C{"?"} or C{"%s"}: what replaces each C{?} of a statement.
    """

    name = None
    module = None
    types = {}
    paramstyle = "?"

    def dbapi(self):
        """The DB-API module (imported late: psycopg is needed only by PostgreSQL)."""
        return importlib.import_module(self.module)

    def sql(self, text):
        """A statement written with C{?} placeholders, in this driver's style."""
        return text if self.paramstyle == "?" else text.replace("?", self.paramstyle)

    def default_ddl(self, base):
        """The built-in DDL of table C{base} (still with C{${name}})."""
        text = _DDL[base]
        for placeholder, sql_type in self.types.items():   # not format(): ${name} stays
            text = text.replace("{" + placeholder + "}", sql_type)
        return text

    def connect_args(self, url, user, password):
        """C{(args, kwargs)} for the module's C{connect}."""
        raise NotImplementedError

    def connect(self, url, user=None, password=None, *, sync=True):
        """A DB-API connection, set up as the store sets up its own (L{on_connect})."""
        args, kwargs = self.connect_args(url, user, password)
        conn = self.dbapi().connect(*args, **kwargs)
        self.on_connect(conn, sync)
        return conn

    def on_connect(self, conn, sync):
        """Per-connection settings (adbapi's C{cp_openfun})."""

    def begin(self, cursor):
        """Open a transaction that also covers DDL (PostgreSQL: always the case)."""

    def existing_tables(self, cursor, names):
        """Which of the full table C{names} exist (compared without case)."""
        raise NotImplementedError

    def where(self, url):
        """The database, for messages (never shows a password)."""
        return url

    def probe(self, cursor):
        """Check that the database takes writes again after a failure (S3.6), without
        changing anything the store keeps: here, that it answers at all."""
        cursor.execute("SELECT 1")
        cursor.fetchall()

    def compact(self, conn, schema):
        """Give free space back; C{conn} is adbapi's connection wrapper. Returns
        C{bytes_before}, C{bytes_after} (the tables' main storage) and C{live_bytes}
        (the stored messages' bytes)."""
        raise NotImplementedError

    @staticmethod
    def _live_bytes(cursor, schema, length):
        cursor.execute(f"SELECT COALESCE(SUM({length}(DATA)), 0) "
                       f"FROM {schema.names['MQMSG41']}")
        return int(cursor.fetchone()[0])


class SqliteDialect(Dialect):
    """SQLite through the standard library (the embedded database, S3.5).

    WAL lets readers run beside the one writer and turns each commit into one append
    and, with sync on, one fsync of the WAL (C{synchronous=FULL}). With sync off,
    C{synchronous=NORMAL}: a commit reaches the OS, so a killed broker loses nothing,
    but a machine crash may lose the last commits (S3.4's meaning of sync off).
    """

    name = "sqlite"
    module = "sqlite3"
    # INTEGER PRIMARY KEY makes SEQ the rowid: messages are stored in SEQ order.
    types = {"pk": "INTEGER NOT NULL PRIMARY KEY", "int": "INTEGER", "text": "TEXT",
             "blob": "BLOB"}

    def connect_args(self, url, user, password):
        # check_same_thread=False: adbapi opens the connection on one pool thread and
        # closes it from the reactor thread; the pool never shares it at once.
        # timeout: wait for a lock held by another process (dbmgr beside a broker).
        return (url,), {"check_same_thread": False, "timeout": 30.0}

    def on_connect(self, conn, sync):
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")

    def begin(self, cursor):
        # The sqlite3 module opens transactions only before INSERT/UPDATE/DELETE; DDL
        # would autocommit statement by statement. SQLite itself can roll DDL back.
        if not cursor.connection.in_transaction:
            cursor.execute("BEGIN")

    def existing_tables(self, cursor, names):
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        present = {row[0].lower() for row in cursor.fetchall()}
        return [n for n in names if n.lower() in present]

    def where(self, url):
        return f"SQLite database {url}"

    def probe(self, cursor):
        # A real write: rewriting the header's user_version (unused by the store) with
        # its own value appends a page to the WAL, which fails while the disk is full.
        cursor.execute("PRAGMA user_version")
        (version,) = cursor.fetchone()
        cursor.execute(f"PRAGMA user_version = {int(version)}")

    def compact(self, conn, schema):
        cursor = conn.cursor()
        before = self._file_bytes(cursor)
        live = self._live_bytes(cursor, schema, "length")
        conn.commit()                    # VACUUM refuses to run inside a transaction
        cursor.execute("VACUUM")
        # Fold the WAL (which VACUUM filled with the whole database) back and cut it.
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.fetchall()
        return {"bytes_before": before, "bytes_after": self._file_bytes(cursor),
                "live_bytes": live, "segments_compacted": 0}

    @staticmethod
    def _file_bytes(cursor):
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_size")
        return pages * cursor.fetchone()[0]


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3 (the server database, S3.5, S12.1).

    With sync off a session runs with C{synchronous_commit=off}: the server
    acknowledges a commit before its WAL is flushed, so a crash of the server (not of
    the broker) may lose the last commits.
    """

    name = "postgresql"
    module = "psycopg"
    paramstyle = "%s"
    types = {"pk": "BIGINT NOT NULL PRIMARY KEY", "int": "BIGINT", "text": "TEXT",
             "blob": "BYTEA"}

    def connect_args(self, url, user, password):
        kwargs = {"application_name": "mqgate"}
        if user:
            kwargs["user"] = user
        if password is not None:
            kwargs["password"] = password
        return (url,), kwargs

    def on_connect(self, conn, sync):
        conn.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
        conn.commit()

    def existing_tables(self, cursor, names):
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema()")
        present = {row[0].lower() for row in cursor.fetchall()}
        return [n for n in names if n.lower() in present]

    def where(self, url):
        from psycopg.conninfo import conninfo_to_dict
        try:
            info = conninfo_to_dict(url)
        except Exception:
            return "PostgreSQL database (unparsable opendburl)"
        host = info.get("host") or os.environ.get("PGHOST") or "local socket"
        port = info.get("port") or os.environ.get("PGPORT") or "5432"
        db = info.get("dbname") or os.environ.get("PGDATABASE") or "(default)"
        return f"PostgreSQL database {db} on {host}:{port}"

    def compact(self, conn, schema):
        # VACUUM refuses to run inside a transaction block: the raw psycopg connection
        # (adbapi's wrapper keeps it as _connection) goes to autocommit for it.
        raw = getattr(conn, "_connection", conn)
        conn.commit()
        raw.autocommit = True
        try:
            cursor = raw.cursor()
            before = self._table_bytes(cursor, schema)
            live = self._live_bytes(cursor, schema, "octet_length")
            for name in schema.names.values():
                cursor.execute(f"VACUUM {name}")
            after = self._table_bytes(cursor, schema)
        finally:
            raw.autocommit = False
        return {"bytes_before": before, "bytes_after": after, "live_bytes": live,
                "segments_compacted": 0}

    @staticmethod
    def _table_bytes(cursor, schema):
        # The main fork only: VACUUM may add a free-space map, never grows the heap.
        total = 0
        for name in schema.names.values():
            cursor.execute("SELECT pg_relation_size(to_regclass(%s))", (name.lower(),))
            total += cursor.fetchone()[0] or 0
        return total

    def database_name(self, url):
        """The database C{url} names, or None (libpq's default then applies)."""
        from psycopg.conninfo import conninfo_to_dict
        return conninfo_to_dict(url).get("dbname")


DIALECTS = {d.name: d for d in (SqliteDialect(), PostgresDialect())}


class Schema:
    """The tables of one broker (its brokerid) in one database: names, DDL, and the
    create / drop / empty operations C{mqgate dbmgr} and the store share.

    @param dialect: a L{Dialect}.
    @param brokerid: the table name suffix (S12.1).
    @param overrides: base name -> replacement DDL (C{mqgate.persist.jdbc.table.NAME}).
    """

    def __init__(self, dialect, brokerid, overrides=None):
        self.dialect = dialect
        self.brokerid = brokerid
        self.names = {base: f"{base}_{brokerid}" for base in TABLES}
        self.overrides = {k: v for k, v in (overrides or {}).items() if v}

    def ddl(self, base):
        """The CREATE statement of table C{base}, with its full name."""
        text = self.overrides.get(base) or self.dialect.default_ddl(base)
        return text.replace("${name}", self.names[base])

    def existing(self, cursor):
        """Base names of this broker's tables that exist."""
        full = self.dialect.existing_tables(cursor, list(self.names.values()))
        present = {n.lower() for n in full}
        return [b for b in TABLES if self.names[b].lower() in present]

    def create(self, cursor):
        """Create every table and write the version row (one transaction)."""
        self.dialect.begin(cursor)
        for base in TABLES:
            cursor.execute(self.ddl(base))
        cursor.execute(self.dialect.sql(
            f"INSERT INTO {self.names['MQVER41']} (STOREVERSION, BROKERID) VALUES (?, ?)"),
            (STORE_VERSION, self.brokerid))

    def drop(self, cursor, bases=None):
        """Drop this broker's tables (those in C{bases}, by default all)."""
        self.dialect.begin(cursor)
        for base in reversed(TABLES):
            if bases is None or base in bases:
                cursor.execute(f"DROP TABLE IF EXISTS {self.names[base]}")

    def empty(self, cursor):
        """Delete every row but the version's: the data goes, the tables stay."""
        for base in TABLES:
            if base != "MQVER41":
                cursor.execute(f"DELETE FROM {self.names[base]}")

    def check(self, cursor):
        """Create the tables when none exist, upgrade those of an older store
        version; refuse an incomplete set or a newer store version.

        @return: what was upgraded, in words for the start-up log, or C{None}.
        @raise SchemaError: saying which and what to do."""
        existing = self.existing(cursor)
        if not existing:
            self.create(cursor)
            return None
        missing = [b for b in TABLES if b not in existing]
        if missing:
            raise SchemaError(
                f"tables {', '.join(self.names[b] for b in missing)} are missing (the "
                f"others of brokerid {self.brokerid!r} exist): recreate them with "
                "`mqgate dbmgr recreate` (which drops the stored data)", missing)
        cursor.execute(f"SELECT STOREVERSION FROM {self.names['MQVER41']}")
        versions = [row[0] for row in cursor.fetchall()]
        if len(versions) == 1 and versions[0] in _UPGRADES:
            self.upgrade(cursor, versions[0])
            return (f"the tables of brokerid {self.brokerid!r} were upgraded from store"
                    f" version {versions[0]} to {STORE_VERSION}")
        if versions != [STORE_VERSION]:
            raise SchemaError(
                f"{self.names['MQVER41']} holds store version(s) {versions}, this "
                f"mqgate reads version {STORE_VERSION}")
        return None

    def upgrade(self, cursor, version):
        """Bring tables of store version C{version} up to L{STORE_VERSION}, in the
        caller's transaction (DDL included), and say so in MQVER41."""
        self.dialect.begin(cursor)
        for step in range(version, STORE_VERSION):
            for text in _UPGRADES[step]:
                for base, full in self.names.items():
                    text = text.replace("${" + base + "}", full)
                for placeholder, sql_type in self.dialect.types.items():
                    text = text.replace("{" + placeholder + "}", sql_type)
                cursor.execute(text)
        cursor.execute(self.dialect.sql(
            f"UPDATE {self.names['MQVER41']} SET STOREVERSION = ?"), (STORE_VERSION,))
