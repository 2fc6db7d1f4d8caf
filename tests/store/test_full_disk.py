"""
The stores on a real full disk and a real database server going away (S3.6): a small
tmpfs filled to the last byte under the file store and under SQLite, and a PostgreSQL
server stopped and started again. Each store must refuse what it cannot write, keep
its removals, and take writes again by itself once the fault is gone.
"""

import os
import subprocess

import pytest
from twisted.internet.task import Clock

from mqgate.store import FileStore, StoreFailed, destination_key
from mqgate.store.health import FAILING, HEALTHY

from tests.store.conftest import SqlOpener
from tests.store.test_faults import ids, refused, result, run_now
from tests.store.tmpfs import small_filesystem  # noqa: F401

Q = destination_key("queue", "orders")
#: Big enough that a few of them need space the full disk does not have.
BODY = b"m" * 100_000


def test_file_store_on_a_full_disk(small_filesystem):
    """On a real 2 MB file system filled up: adds are refused as resource exhaustion,
    a removal waits; once space is freed the store recovers at the next probe, and a
    restart finds exactly the acknowledged messages minus the removed one."""
    fs = small_filesystem
    clock = Clock()
    store = FileStore(fs.path / "filestore", run_now, sync=True, clock=clock,
                      max_record_size=1 << 20)
    result(store.recover())
    for mid in (1, 2):
        result(store.add_message(Q, mid, BODY))
    fs.fill()
    outcomes = []
    for mid in range(3, 40):
        store.add_message(Q, mid, BODY).addBoth(outcomes.append)
    acknowledged = [3 + i for i, o in enumerate(outcomes) if o is None]
    assert store.health.state == FAILING
    assert refused(store.add_message(Q, 99, BODY)).exhausted
    removal = store.remove_message(Q, 1)
    clock.advance(1)
    assert store.health.state == FAILING and not removal.called
    fs.free()
    clock.advance(1)
    assert store.health.state == HEALTHY and removal.called
    result(store.add_message(Q, 100, BODY))
    again = FileStore(fs.path / "filestore", run_now)
    assert ids(result(again.recover())) == [2] + acknowledged + [100]


def test_sqlite_store_on_a_full_disk(small_filesystem):
    """SQLite on a real full disk: a commit that needs space fails, its add is refused
    (resource exhaustion), later adds are refused at once; once space is freed a probe
    brings the store back, and the database holds exactly what was acknowledged."""
    fs = small_filesystem
    opener = SqlOpener("sqlite", str(fs.path / "dbstore" / "mqgate.sqlite"))
    try:
        store, reactor = opener.store()
        result(store.recover())
        result(store.add_message(Q, 1, b"small"))
        fs.fill()
        outcomes = []
        for mid in range(2, 40):
            store.add_message(Q, mid, BODY).addBoth(outcomes.append)
        acknowledged = [2 + i for i, o in enumerate(outcomes) if o is None]
        assert store.health.state == FAILING, "the disk never filled"
        error = outcomes[-1].value
        assert isinstance(error, StoreFailed) and error.exhausted
        removal = store.remove_message(Q, 1)
        assert not removal.called
        fs.free()
        reactor.run_later()
        assert store.health.state == HEALTHY and removal.called
        result(store.add_message(Q, 100, b"after"))
        again, _ = opener.store()
        assert ids(result(again.recover())) == acknowledged + [100]
    finally:
        opener.close_all()


@pytest.fixture
def own_postgres():
    """A PostgreSQL cluster of this test's own, which it may stop and start."""
    from tests.pgcluster import start_for_test
    cluster = start_for_test()
    yield cluster
    cluster.stop()


def _pg_ctl(cluster, *argv):
    # The cluster's own pg_ctl, as its owner (tests/pgcluster.py runs it the same way).
    command = [str(cluster.bindir / "pg_ctl"), "-D", str(cluster.datadir), *argv]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   timeout=90)


def pg_stop(cluster):
    """Stop the server (fast: connections are cut, as when it is restarted)."""
    _pg_ctl(cluster, "-m", "fast", "-w", "stop")


def pg_start(cluster):
    """Start the stopped server again, on its port and socket directory."""
    options = (f"-p {cluster.port} -k {cluster.datadir.parent} "
               "-c listen_addresses=127.0.0.1 -c fsync=off")
    _pg_ctl(cluster, "-l", str(cluster.datadir.parent / "server.log"), "-o", options,
            "-w", "start")


def test_postgresql_server_stopped_and_started_again(own_postgres):
    """With the PostgreSQL server stopped, adds are refused and a removal waits;
    probes fail while it is down; once it runs again the store reconnects by itself,
    writes the removal and takes adds again."""
    cluster = own_postgres
    opener = SqlOpener("postgresql", cluster.dsn(cluster.create_database()))
    try:
        store, reactor = opener.store()
        result(store.recover())
        for mid in range(1, 6):
            result(store.add_message(Q, mid, b"before"))
        pg_stop(cluster)
        error = refused(store.add_message(Q, 6, b"down"))
        assert not error.exhausted and store.health.state == FAILING
        assert "runs and accepts connections" in store.health.status()["advice"]
        refused(store.add_message(Q, 7, b"down"))
        removal = store.remove_message(Q, 1)
        reactor.run_later()
        assert store.health.state == FAILING and not removal.called
        pg_start(cluster)
        reactor.run_later()
        assert store.health.state == HEALTHY and removal.called
        result(store.add_message(Q, 8, b"after"))
        again, _ = opener.store()
        assert ids(result(again.recover())) == [2, 3, 4, 5, 8]
    finally:
        opener.close_all()
