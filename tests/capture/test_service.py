"""
The capture index built from the settings (S7.5): SQLite under the instance directory
by default, off when disabled, the broker-wide capture bounds as its defaults.
"""

from mqgate.capture.service import capture_index_from_settings
from mqgate.config import Settings
from tests.capture.conftest import Clocked, copy
from tests.deferreds import result
from tests.store.conftest import InlineThreadPool


def settings(tmp_path, **overrides):
    return Settings.from_properties([], overrides, varhome=str(tmp_path))


def test_sqlite_under_the_instance_directory_with_the_capture_bounds(tmp_path):
    service = capture_index_from_settings(
        settings(tmp_path, **{"mqgate.capture.body_max": "4",
                              "mqgate.capture.retention": "7200"}), Clocked())
    index = service.index
    path = tmp_path / "instances" / "mqgate" / "capture" / "index.sqlite"
    assert index.where == f"SQLite database {path}"
    assert (index.max_body, index.retention) == (4, 7200)
    index._pool.threadpool = InlineThreadPool()
    index._pool.start()
    result(index.open())
    index.ingest(copy(body=b"abcdefgh"))
    result(index.close())
    assert path.exists()


def test_off_when_disabled(tmp_path):
    assert capture_index_from_settings(
        settings(tmp_path, **{"mqgate.capture.index.enabled": "false"}),
        Clocked()) is None


def test_postgresql_in_the_stores_database_in_tables_of_its_own(tmp_path, pg_dsn):
    """dbVendor=postgresql: the SQL store's database settings, CAPMSG_<brokerid>."""
    import psycopg

    service = capture_index_from_settings(settings(tmp_path, **{
        "mqgate.capture.index.dbVendor": "postgresql",
        "mqgate.persist.jdbc.opendburl": pg_dsn,
        "mqgate.persist.jdbc.brokerid": "b7"}), Clocked())
    index = service.index
    assert index.where.startswith("PostgreSQL database")
    index._pool.threadpool = InlineThreadPool()
    index._pool.start()
    result(index.open())
    index.ingest(copy(body=b"kept"))
    result(index.close())
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT BODY FROM CAPMSG_b7").fetchall() == [(b"kept",)]
