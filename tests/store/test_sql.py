"""
The SQL store beyond the shared contract (S3.5, S3.4, S12.1): group commit on a real
thread pool, brokerid separation, DDL overrides, table checks, fail-stop, and the
settings that build it. Real SQLite files and PostgreSQL databases (tests/pgcluster.py).
"""

import sqlite3

import pytest

from mqgate.config import Settings
from mqgate.config.schema import JDBC_TABLES
from mqgate.errors import ConfigError
from mqgate.store import StoreFailed, destination_key
from mqgate.store.sql import sql_config_from_settings, sql_store_from_settings
from mqgate.store.sqldialects import TABLES, SchemaError
from tests.store.conftest import PumpReactor
from tests.store.test_contract import failure, result

Q = destination_key("queue", "orders")
Q2 = destination_key("queue", "audit")


def ids(recovered, destination):
    return [m.message_id for m in recovered.messages.get(destination, [])]


def raw_connection(opener):
    """A second, plain connection to the opener's database (another process's view)."""
    if opener.vendor == "sqlite":
        return sqlite3.connect(opener.url)
    import psycopg
    return psycopg.connect(opener.url, autocommit=True)


def table_names(opener):
    conn = raw_connection(opener)
    try:
        if opener.vendor == "sqlite":
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        else:
            rows = conn.execute("SELECT table_name FROM information_schema.tables "
                                "WHERE table_schema = 'public'")
        return sorted(row[0].lower() for row in rows.fetchall())
    finally:
        conn.close()


# -- group commit (S3.4) on a real thread pool -----------------------------------------


def test_adds_of_one_turn_share_one_commit(sql_opener):
    """S3.5, S3.4: 100 adds made in one reactor turn are written in one transaction
    (one commit), every acknowledgement fires after it, and all come back in order."""
    store, reactor = sql_opener.store("threads")
    reactor.run_until(store.recover())
    acks = [store.add_message(Q, mid, b"m%d" % mid) for mid in range(1, 101)]
    reactor.run_until(acks[-1])
    assert all(d.called for d in acks)
    assert store.fsync_count == 1
    assert store.stats["records"] == 100 and store.stats["max_batch"] == 100
    assert store.stats["records_per_fsync"] == 100.0
    reactor.run_until(store.close())
    again, reactor = sql_opener.store("threads")
    recovered = reactor.run_until(again.recover())
    assert ids(recovered, Q) == list(range(1, 101))
    reactor.run_until(again.close())


def test_writes_made_by_acknowledgements_join_the_next_batch(sql_opener):
    """S3.4: what acknowledgement callbacks write (a consumer's settlement) is one
    more batch, not one transaction per callback."""
    store, reactor = sql_opener.store("threads")
    reactor.run_until(store.recover())
    acks = [store.add_message(Q, mid, b"x") for mid in range(1, 21)]
    removals = []
    for mid, d in enumerate(acks, 1):
        d.addCallback(lambda _, m=mid: removals.append(store.remove_message(Q, m)))
    reactor.run_until(acks[-1])
    reactor.run_until(removals[-1])
    assert store.fsync_count == 2 and store.stats["records"] == 40
    reactor.run_until(store.close())


def test_effects_follow_call_order_within_a_batch(sql_opener):
    """S3.5: inside one batch, statements run in call order: remove and re-add of an
    id, a destination removed with its messages and created again, a transaction
    committed after the adds it removes."""
    store, reactor = sql_opener.store("threads")
    reactor.run_until(store.recover())
    calls = [
        store.add_destination("queue", "audit", {"v": 1}),
        store.add_message(Q, 1, b"first"),
        store.add_message(Q2, 1, b"gone with its destination"),
        store.remove_message(Q, 1),
        store.add_message(Q, 1, b"second"),
        store.remove_destination("queue", "audit"),
        store.add_destination("queue", "audit", {"v": 2}),
        store.add_message(Q, 2, b"two"),
        store.begin("t"),
        store.remove_message(Q, 2, txn="t"),
        store.add_message(Q, 3, b"three", txn="t"),
        store.commit("t"),
        store.update_delivery_count(Q, 1, 5),
    ]
    reactor.run_until(calls[-1])
    assert store.fsync_count == 1
    reactor.run_until(store.close())
    again, reactor = sql_opener.store("threads")
    recovered = reactor.run_until(again.recover())
    assert [(m.message_id, m.data, m.delivery_count) for m in recovered.messages[Q]] == [
        (1, b"second", 5), (3, b"three", 0)]
    assert Q2 not in recovered.messages
    assert [(d.name, d.attributes) for d in recovered.destinations] == [
        ("audit", {"v": 2})]
    reactor.run_until(again.close())


def test_batches_are_capped(sqlite_opener):
    """S3.4: a burst larger than max_batch is written in several transactions, in
    order, so no acknowledgement waits behind an unbounded transaction."""
    store, reactor = sqlite_opener.store("threads")
    store._writer.max_batch = 30
    reactor.run_until(store.recover())
    acks = [store.add_message(Q, mid, b"x") for mid in range(1, 101)]
    reactor.run_until(acks[-1])
    assert store.fsync_count == 4 and store.stats["max_batch"] == 30
    reactor.run_until(store.close())


# -- brokerid, DDL, table checks (S3.5, S12.1) -----------------------------------------


def test_brokers_sharing_a_database_do_not_see_each_other(sql_opener):
    """S12.1: two brokers with different brokerids in one database keep separate
    tables; each recovers only its own messages and destinations."""
    one, _ = sql_opener.store(brokerid="one")
    two, _ = sql_opener.store(brokerid="two")
    result(one.recover())
    result(two.recover())
    result(one.add_destination("queue", "orders", {}))
    result(one.add_message(Q, 1, b"one's"))
    result(two.add_message(Q, 1, b"two's"))
    result(two.add_message(Q, 2, b"two's too"))
    again_one, _ = sql_opener.store(brokerid="one")
    again_two, _ = sql_opener.store(brokerid="two")
    first, second = result(again_one.recover()), result(again_two.recover())
    assert [m.data for m in first.messages[Q]] == [b"one's"]
    assert [m.data for m in second.messages[Q]] == [b"two's", b"two's too"]
    assert len(first.destinations) == 1 and second.destinations == []
    names = table_names(sql_opener)
    assert "mqmsg41_one" in names and "mqmsg41_two" in names


def test_ddl_override_is_used(sql_opener):
    """S3.5: mqgate.persist.jdbc.table.NAME replaces the CREATE TABLE of that table,
    ${name} standing for its full name; the store works on the result."""
    blob = "BLOB" if sql_opener.vendor == "sqlite" else "BYTEA"
    ddl = ("CREATE TABLE ${name} (SEQ BIGINT NOT NULL PRIMARY KEY, DESTINATION TEXT "
           "NOT NULL, MESSAGE_ID BIGINT NOT NULL, DELIVERY_COUNT BIGINT NOT NULL "
           f"DEFAULT 0, DATA {blob} NOT NULL, NOTE VARCHAR(20) DEFAULT 'overridden', "
           "UNIQUE (DESTINATION, MESSAGE_ID))")
    store, _ = sql_opener.store(brokerid="ddl", tables={"MQMSG41": ddl})
    result(store.recover())
    result(store.add_message(Q, 7, b"x"))
    conn = raw_connection(sql_opener)
    try:
        row = conn.execute("SELECT NOTE, MESSAGE_ID FROM MQMSG41_ddl").fetchone()
    finally:
        conn.close()
    assert tuple(row) == ("overridden", 7)


def test_incomplete_tables_are_refused_by_name(sql_opener):
    """S3.5: when some of a broker's tables are missing, recovery fails naming them
    (and what to run) instead of recreating them and hiding a loss."""
    store, _ = sql_opener.store(brokerid="part")
    result(store.recover())
    result(store.close())
    conn = raw_connection(sql_opener)
    conn.execute("DROP TABLE MQMSG41_part")
    conn.commit()
    conn.close()
    again, _ = sql_opener.store(brokerid="part")
    error = failure(again.recover(), SchemaError)
    assert error.missing == ("MQMSG41",)
    assert "MQMSG41_part" in str(error) and "dbmgr recreate" in str(error)


def test_another_store_version_is_refused(sqlite_opener):
    """S3.5: tables written by another store version are not read."""
    store, _ = sqlite_opener.store()
    result(store.recover())
    result(store.close())
    conn = raw_connection(sqlite_opener)
    conn.execute("UPDATE MQVER41_b1 SET STOREVERSION = 99")
    conn.commit()
    conn.close()
    again, _ = sqlite_opener.store()
    assert "store version(s) [99]" in str(failure(again.recover(), SchemaError))


def test_version_1_tables_are_upgraded_keeping_their_durables(sql_opener):
    """Ownership: tables of store version 1 (no durable owners) are upgraded at
    start-up, their durable subscriptions come back without owner, the upgrade is
    reported, and an owner set afterwards is stored."""
    store, _ = sql_opener.store()
    result(store.recover())
    result(store.close())
    conn = raw_connection(sql_opener)
    # What version 1 wrote: MQCON41 without OWNER, one subscription in it.
    conn.execute("DROP TABLE MQCON41_b1")
    conn.execute("CREATE TABLE MQCON41_b1 (SEQ INTEGER NOT NULL PRIMARY KEY, "
                 "CONTAINER_ID TEXT NOT NULL, NAME TEXT NOT NULL, TOPIC TEXT NOT NULL, "
                 "SELECTOR TEXT, UNIQUE (CONTAINER_ID, NAME))")
    conn.execute("INSERT INTO MQCON41_b1 VALUES (1, 'c', 'old', 'news', 'null')")
    conn.execute("UPDATE MQVER41_b1 SET STOREVERSION = 1")
    conn.commit()
    conn.close()
    again, _ = sql_opener.store()
    recovered = result(again.recover())
    assert [(d.name, d.topic, d.owner) for d in recovered.durables] == [
        ("old", "news", None)]
    assert any("upgraded from store version 1 to 2" in w for w in recovered.warnings)
    result(again.add_durable("c", "old", "news", None, "alice"))
    result(again.close())
    third, _ = sql_opener.store()
    recovered = result(third.recover())
    assert [(d.name, d.owner) for d in recovered.durables] == [("old", "alice")]
    assert not recovered.warnings


def test_a_failed_batch_refuses_its_adds_and_keeps_the_rest(sql_opener):
    """S3.6: when the database refuses a batch, its adds are refused (StoreFailed with
    the database's words), later adds are refused at once, and a catalog change made
    meanwhile waits for the store to recover instead of failing."""
    store, _ = sql_opener.store()
    result(store.recover())
    result(store.add_message(Q, 1, b"kept"))
    conn = raw_connection(sql_opener)
    conn.execute("DROP TABLE MQMSG41_b1")
    conn.commit()
    conn.close()
    error = failure(store.add_message(Q, 2, b"lost"), StoreFailed)
    assert "mqmsg41_b1" in str(error).lower()
    assert store.health.failing
    assert not store.add_destination("queue", "x", {}).called
    failure(store.add_message(Q, 3, b"refused"), StoreFailed)


def test_message_ids_use_all_64_bits(sql_opener):
    """S3.5: ids of 2**63 and above (stored as signed integers) come back unchanged,
    and max_message_id is the unsigned value."""
    store, _ = sql_opener.store()
    result(store.recover())
    big = [(1 << 64) - 1, 1 << 63, 5]
    for mid in big:
        result(store.add_message(Q, mid, b"x"))
    result(store.begin("t"))
    result(store.add_message(Q2, (1 << 63) + 1, b"y", txn="t"))
    result(store.prepare("t"))
    again, _ = sql_opener.store()
    recovered = result(again.recover())
    assert ids(recovered, Q) == big
    assert recovered.prepared["t"].adds[0].message_id == (1 << 63) + 1
    assert recovered.max_message_id == (1 << 64) - 1


def test_text_no_database_keeps_is_refused_before_writing(sql_opener):
    """S3.5: NUL characters and lone surrogates are refused with StoreError, and the
    store goes on working (they would fail a whole batch in the database)."""
    from mqgate.store import StoreError
    store, _ = sql_opener.store()
    result(store.recover())
    failure(store.add_message("queue://a\x00b", 1, b"x"), StoreError)
    failure(store.add_destination("queue", "bad\ud800", {}), StoreError)
    failure(store.add_durable("c", "s", "t\x00", None), StoreError)
    failure(store.begin("t\x00"), StoreError)
    result(store.add_message(Q, 1, b"fine"))


def test_schema_documents_every_table():
    """S3.5: there is one mqgate.persist.jdbc.table.NAME key per table of the store."""
    assert set(JDBC_TABLES) == set(TABLES)


# -- settings (S3.5) -------------------------------------------------------------------


def settings_of(tmp_path, overrides=None):
    return Settings.from_properties([], overrides or {}, varhome=str(tmp_path))


def test_sqlite_defaults_live_in_the_instance_directory(tmp_path):
    """S3.5, S0.5: by default the SQL store is SQLite in
    VARHOME/instances/NAME/dbstore, with the instance name as brokerid."""
    config = sql_config_from_settings(settings_of(tmp_path))
    assert config.vendor == "sqlite" and config.brokerid == "mqgate" and config.sync
    assert config.url == str(tmp_path / "instances" / "mqgate" / "dbstore" /
                             "mqgate.sqlite")
    relative = sql_config_from_settings(settings_of(
        tmp_path, {"mqgate.persist.jdbc.opendburl": "db/x.sqlite",
                   "imq.persist.jdbc.brokerid": "B7"}))
    assert relative.url == str(tmp_path / "instances" / "mqgate" / "db" / "x.sqlite")
    assert relative.brokerid == "B7"


def test_store_from_settings_creates_its_file(tmp_path):
    """S3.5: sql_store_from_settings builds a store whose recovery creates the
    database file and its tables under the instance directory."""
    reactor = PumpReactor()
    store = sql_store_from_settings(settings_of(tmp_path), reactor)
    reactor.run_until(store.recover())
    reactor.run_until(store.add_message(Q, 1, b"x"))
    reactor.run_until(store.close())
    path = tmp_path / "instances" / "mqgate" / "dbstore" / "mqgate.sqlite"
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT MESSAGE_ID FROM MQMSG41_mqgate").fetchall() == [(1,)]
    conn.close()


@pytest.mark.parametrize("overrides, key", [
    ({"mqgate.persist.jdbc.dbVendor": "postgresql",
      "mqgate.persist.jdbc.opendburl": "host=db password=secret"},
     "mqgate.persist.jdbc.opendburl"),
    ({"mqgate.persist.jdbc.dbVendor": "postgresql",
      "mqgate.persist.jdbc.createdburl": "postgresql://u:secret@db/postgres"},
     "mqgate.persist.jdbc.createdburl"),
    ({"mqgate.persist.jdbc.dbVendor": "postgresql",
      "mqgate.persist.jdbc.needpassword": "true"}, "mqgate.persist.jdbc.password"),
    ({"mqgate.persist.jdbc.table.MQMSG41": "CREATE TABLE MQMSG41 (X INTEGER)"},
     "mqgate.persist.jdbc.table.MQMSG41"),
    ({"mqgate.persist.jdbc.dbVendor": "oracle"}, "mqgate.persist.jdbc.dbVendor"),
    ({"mqgate.persist.jdbc.brokerid": "a-b"}, "mqgate.persist.jdbc.brokerid"),
])
def test_bad_settings_name_their_key(tmp_path, overrides, key):
    """S3.5: a password in a URL, a needed password nowhere to be found, a DDL
    override without ${name}, an unknown vendor or brokerid: ConfigError naming the key
    (the password never comes from the command line or a URL)."""
    with pytest.raises(ConfigError) as caught:
        sql_config_from_settings(settings_of(tmp_path, overrides))
    assert caught.value.key == key
    assert "secret" not in str(caught.value)


def test_password_comes_from_the_password_file(tmp_path):
    """S3.5, S4.6: with needpassword, the password is read from the password file;
    -D mqgate.persist.jdbc.password is not a configuration key and is ignored."""
    etc = tmp_path / "instances" / "mqgate" / "etc"
    etc.mkdir(parents=True)
    (etc / "passfile").write_text("imq.persist.jdbc.password=from-file\n")
    (etc / "passfile").chmod(0o600)   # others may not read a password file (S4.6)
    settings = settings_of(tmp_path, {
        "mqgate.persist.jdbc.dbVendor": "postgresql",
        "mqgate.persist.jdbc.needpassword": "true", "mqgate.passfile.enabled": "true",
        "mqgate.persist.jdbc.password": "from-command-line"})
    assert sql_config_from_settings(settings).password == "from-file"
    assert any("mqgate.persist.jdbc.password" in w for w in settings.warnings)


def test_postgresql_with_a_password_role(postgres_cluster, tmp_path):
    """S3.5: a PostgreSQL user that must give a password connects with the one from
    the password file, and the store works."""
    from tests.pgcluster import PASSWORD, PASSWORD_ROLE
    db = postgres_cluster.create_database(owner=PASSWORD_ROLE)
    etc = tmp_path / "instances" / "mqgate" / "etc"
    etc.mkdir(parents=True)
    (etc / "passfile").write_text(f"mqgate.persist.jdbc.password={PASSWORD}\n")
    (etc / "passfile").chmod(0o600)   # others may not read a password file (S4.6)
    settings = settings_of(tmp_path, {
        "mqgate.persist.jdbc.dbVendor": "postgresql",
        "mqgate.persist.jdbc.opendburl":
            f"postgresql://127.0.0.1:{postgres_cluster.port}/{db}",
        "mqgate.persist.jdbc.user": PASSWORD_ROLE,
        "mqgate.persist.jdbc.needpassword": "true", "mqgate.passfile.enabled": "true"})
    reactor = PumpReactor()
    store = sql_store_from_settings(settings, reactor)
    reactor.run_until(store.recover())
    reactor.run_until(store.add_message(Q, 1, b"x"))
    reactor.run_until(store.close())
