"""Suite-wide pytest configuration (the rootdir conftest).

Markers are registered in setup.cfg (``[tool:pytest]``) and enforced with
``--strict-markers``; this file only adds what cannot be said there.
"""

from pathlib import Path

import pytest

#: The checkout: the directory holding setup.cfg, mqgate/, etc/ and tests/.
REPO_ROOT = Path(__file__).resolve().parent.parent

# Directories whose tests start a real broker process (docs/design.md).
_PROCESS_TEST_DIRS = ("e2e", "crash")


def pytest_collection_modifyitems(config, items):
    """Mark every test under tests/e2e and tests/crash with ``e2e``.

    So ``pytest -m "not e2e"`` runs the in-memory suite alone, without each
    test module having to remember its marker.
    """
    roots = [REPO_ROOT / "tests" / name for name in _PROCESS_TEST_DIRS]
    for item in items:
        path = Path(str(item.path))
        if any(root in path.parents for root in roots):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def repo_root():
    """The checkout's root directory, as a ``pathlib.Path``."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throw-away PostgreSQL server for the session (tests/pgcluster.py; S3.5).

    Started only when a test asks for it, stopped and removed at the end. Without the
    server binaries the test is skipped, or fails under CI / ``make test``
    (``MQGATE_REQUIRE_POSTGRES=1``), where the Makefile installs them.
    """
    from tests.pgcluster import start_for_test
    cluster = start_for_test()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_dsn(postgres_cluster):
    """A libpq connection string (no password) to a fresh, empty database, dropped
    after the test where nothing uses it any more."""
    name = postgres_cluster.create_database()
    yield postgres_cluster.dsn(name)
    postgres_cluster.drop_database(name)


def pytest_unconfigure(config):
    """Stop the global reactor where a test left it running in a thread of its own.

    mqgate's blocking client runs the reactor in a daemon thread (mqgate/client/
    blocking.py), and whatever a test then starts on it that is not a daemon thread —
    the reactor's thread pool, or an adbapi connection pool such as the capture index's,
    made by a test that builds the broker's services without starting them — would
    keep the interpreter from exiting after the last test: pytest would hang until
    CI's time runs out. Stopping the reactor fires its shutdown triggers, which stop
    those pools.
    """
    import sys
    import threading
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import reactor
    if not reactor.running or threading.current_thread() is not threading.main_thread():
        return
    thread = next((t for t in threading.enumerate()
                   if t.name == "mqgate-client-reactor"), None)
    reactor.callFromThread(reactor.stop)
    if thread is not None:
        thread.join(10)
