"""
``mqgate dbmgr create|delete|recreate|reset`` (S3.5) on SQLite and PostgreSQL, run as
the console script runs it (``mqgate.admin.cli.main``), against real databases.
"""

import sqlite3

import pytest

from mqgate.admin.cli import main
from mqgate.store import destination_key
from mqgate.store.sqldialects import TABLES
from tests.pgcluster import PASSWORD, PASSWORD_ROLE
from tests.store.test_contract import result
from tests.store.conftest import SqlOpener

Q = destination_key("queue", "orders")


class Db:
    """One database as dbmgr and a store see it."""

    def __init__(self, vendor, url, defines, tmp_path):
        self.vendor = vendor
        self.url = url
        self.defines = defines
        self.varhome = tmp_path / "var"

    def dbmgr(self, action, *extra):
        argv = ["dbmgr", action, "-c", "", "--varhome", str(self.varhome)]
        for key, value in self.defines.items():
            argv += ["-D", f"{key}={value}"]
        return main(argv + list(extra))

    def tables(self, brokerid="mqgate"):
        if self.vendor == "sqlite":
            conn = sqlite3.connect(self.url)
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        else:
            import psycopg
            conn = psycopg.connect(self.url, autocommit=True)
            rows = conn.execute("SELECT table_name FROM information_schema.tables "
                                "WHERE table_schema = 'public'")
        names = sorted(r[0].lower() for r in rows.fetchall())
        conn.close()
        return [n for n in names if n.endswith("_" + brokerid.lower())]

    def store(self, brokerid="mqgate"):
        return SqlOpener(self.vendor, self.url).store(brokerid=brokerid)[0]


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        url = str(tmp_path / "var" / "instances" / "mqgate" / "dbstore" / "mqgate.sqlite")
        return Db("sqlite", url, {}, tmp_path)
    dsn = request.getfixturevalue("pg_dsn")
    return Db("postgresql", dsn, {"mqgate.persist.jdbc.dbVendor": "postgresql",
                                  "mqgate.persist.jdbc.opendburl": dsn}, tmp_path)


ALL = sorted(f"{base.lower()}_mqgate" for base in TABLES)


def test_create_then_create_again(db, capsys):
    """S3.5: create makes every table of the broker (exit 0, naming them); a second
    create refuses (exit 1) and points at recreate."""
    assert db.dbmgr("create") == 0
    assert db.tables() == ALL
    assert "created tables MQDST41_mqgate" in capsys.readouterr().out
    assert db.dbmgr("create") == 1
    err = capsys.readouterr().err
    assert "exist already" in err and "recreate" in err


def test_reset_empties_the_tables_and_keeps_them(db, capsys):
    """S3.5: reset deletes the stored data (messages, destinations, ...) but keeps the
    tables and the store version, so the broker starts empty on them."""
    assert db.dbmgr("create") == 0
    store = db.store()
    result(store.recover())
    result(store.add_destination("queue", "orders", {}))
    result(store.add_message(Q, 1, b"x"))
    result(store.close())
    assert db.dbmgr("reset") == 0
    assert db.tables() == ALL
    recovered = result(db.store().recover())
    assert recovered.messages == {} and recovered.destinations == []


def test_delete_and_recreate(db, capsys):
    """S3.5: delete drops the tables (a second delete says there is nothing, exit 1);
    recreate works on nothing and on existing tables, and drops their data."""
    assert db.dbmgr("create") == 0
    assert db.dbmgr("delete") == 0
    assert db.tables() == []
    assert db.dbmgr("delete") == 1
    assert "no tables of brokerid 'mqgate'" in capsys.readouterr().err
    assert db.dbmgr("recreate") == 0
    store = db.store()
    result(store.recover())
    result(store.add_message(Q, 1, b"x"))
    result(store.close())
    assert db.dbmgr("recreate") == 0
    assert db.tables() == ALL
    assert result(db.store().recover()).messages == {}


def test_brokerid_selects_the_tables(db, capsys):
    """S12.1: dbmgr works on the tables of mqgate.persist.jdbc.brokerid only."""
    assert db.dbmgr("create") == 0
    db.defines["mqgate.persist.jdbc.brokerid"] = "other"
    assert db.dbmgr("create") == 0
    assert db.dbmgr("delete") == 0
    assert db.tables("other") == [] and db.tables() == ALL


def test_reset_without_tables_names_the_missing(db, capsys):
    """S3.5: reset on a database without the tables refuses (exit 1) naming them."""
    if db.vendor == "sqlite":
        assert db.dbmgr("reset") == 1
        assert "no database file" in capsys.readouterr().err
        assert db.dbmgr("create") == 0 and db.dbmgr("delete") == 0
    assert db.dbmgr("reset") == 1
    assert "MQMSG41_mqgate" in capsys.readouterr().err


def test_bad_vendor_is_named(tmp_path, capsys):
    """S3.5: an unknown dbVendor is a configuration error (exit 2) naming the key and
    the vendors mqgate knows."""
    db = Db("sqlite", None, {"mqgate.persist.jdbc.dbVendor": "oracle"}, tmp_path)
    assert db.dbmgr("create") == 2
    err = capsys.readouterr().err
    assert "mqgate.persist.jdbc.dbVendor" in err and "sqlite, postgresql" in err


def test_there_is_no_password_option(tmp_path, capsys):
    """S3.5: a password is never taken from the command line: -p is refused."""
    db = Db("sqlite", None, {}, tmp_path)
    with pytest.raises(SystemExit) as caught:
        db.dbmgr("create", "-p", "secret")
    assert caught.value.code == 2


@pytest.fixture
def pw_db(postgres_cluster, tmp_path):
    """A database owned by the password role; dbmgr logs in as that role."""
    name = postgres_cluster.create_database(owner=PASSWORD_ROLE)
    url = f"host=127.0.0.1 port={postgres_cluster.port} dbname={name}"
    return Db("postgresql", url, {
        "mqgate.persist.jdbc.dbVendor": "postgresql",
        "mqgate.persist.jdbc.opendburl": url,
        "mqgate.persist.jdbc.needpassword": "true"}, tmp_path)


def write_passfile(db, password):
    etc = db.varhome / "instances" / "mqgate" / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "passfile").write_text(f"mqgate.persist.jdbc.password={password}\n")
    (etc / "passfile").chmod(0o600)   # others may not read a password file (S4.6)
    db.defines["mqgate.passfile.enabled"] = "true"


def test_missing_password_is_a_configuration_error(pw_db, capsys):
    """S3.5: with needpassword and neither a password file nor a terminal, dbmgr
    stops (exit 2) naming mqgate.persist.jdbc.password and where it may come from."""
    assert pw_db.dbmgr("create", "-u", PASSWORD_ROLE) == 2
    err = capsys.readouterr().err
    assert "mqgate.persist.jdbc.password" in err and "password file" in err


def test_password_from_the_password_file(pw_db, capsys):
    """S3.5: -u names the user, the password file gives the password; a wrong one is
    the database's refusal (exit 1), shown without the password."""
    write_passfile(pw_db, "wrong-password")
    assert pw_db.dbmgr("create", "-u", PASSWORD_ROLE) == 1
    err = capsys.readouterr().err
    assert "password authentication failed" in err and "wrong-password" not in err
    write_passfile(pw_db, PASSWORD)
    assert pw_db.dbmgr("create", "-u", PASSWORD_ROLE) == 0
    assert pw_db.dbmgr("reset", "-u", PASSWORD_ROLE) == 0


def test_create_makes_the_postgresql_database(postgres_cluster, tmp_path, capsys):
    """S3.5: with createdburl set, create first creates the opendburl database when it
    does not exist, then the tables."""
    url = postgres_cluster.dsn("made_by_dbmgr")
    db = Db("postgresql", url, {
        "mqgate.persist.jdbc.dbVendor": "postgresql",
        "mqgate.persist.jdbc.opendburl": url,
        "mqgate.persist.jdbc.createdburl": postgres_cluster.dsn("postgres")}, tmp_path)
    assert db.dbmgr("create") == 0
    assert "created database made_by_dbmgr" in capsys.readouterr().out
    assert db.tables() == ALL
    assert db.dbmgr("recreate") == 0
    assert "created database" not in capsys.readouterr().out


def test_unreachable_database_is_reported(tmp_path, capsys):
    """S3.5: a database that cannot be reached is exit 1 with the driver's reason."""
    from tests.pgcluster import _free_port
    url = f"host=127.0.0.1 port={_free_port()} dbname=x connect_timeout=3"
    db = Db("postgresql", url, {"mqgate.persist.jdbc.dbVendor": "postgresql",
                                "mqgate.persist.jdbc.opendburl": url}, tmp_path)
    assert db.dbmgr("create") == 1
    err = capsys.readouterr().err
    assert "mqgate dbmgr create: PostgreSQL database x on 127.0.0.1" in err
