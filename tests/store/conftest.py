"""
Fixtures for the SQL store tests (S3.5): stores on real SQLite files and real
PostgreSQL databases, run two ways.

- I{inline}: the pool's "thread" runs each job at once on the test thread, and the
  store's end-of-turn flush runs at once, so every Deferred has fired when the call
  returns. The contract suite (tests/store/test_contract.py) needs that, as it uses a
  synchronous C{run_in_thread} for the file store.
- I{threads}: adbapi's real thread pool; results come back through a queue the test
  drains with L{PumpReactor.run_until}, as the reactor's C{callFromThread} would. Calls
  made before draining are one reactor turn: this is how batching is tested.
"""

import queue

import pytest
from twisted.python.failure import Failure

from mqgate.store.sql import SqlConfig, SqlStore, connection_pool


class _Later:
    """A delayed call that the test runs by hand (the store's probes, S3.6)."""

    def __init__(self, calls, f, args, kwargs):
        self._calls = calls
        self.f, self.args, self.kwargs = f, args, kwargs
        calls.append(self)

    def active(self):
        return self in self._calls

    def cancel(self):
        self._calls.remove(self)


class _Clocked:
    """Delayed calls (delay > 0) wait in C{later} until L{run_later}."""

    def seconds(self):
        return 0.0

    def delayed(self, f, args, kwargs):
        return _Later(self.__dict__.setdefault("later", []), f, args, kwargs)

    def run_later(self):
        """Run the delayed calls due now (a probe of a failing store)."""
        calls, self.later = self.__dict__.get("later", []), []
        for call in calls:
            call.f(*call.args, **call.kwargs)


class InlineReactor(_Clocked):
    """Just enough reactor for adbapi and SqlStore to run everything now."""

    def callWhenRunning(self, f, *args, **kwargs):
        return None              # the pool is started by hand (after swapping its pool)

    def addSystemEventTrigger(self, *args, **kwargs):
        return object()

    def removeSystemEventTrigger(self, trigger):
        pass

    def callFromThread(self, f, *args, **kwargs):
        f(*args, **kwargs)

    def callLater(self, delay, f, *args, **kwargs):
        if delay > 0:
            return self.delayed(f, args, kwargs)
        f(*args, **kwargs)


class InlineThreadPool:
    """A thread pool that runs each job on the calling thread."""

    def start(self):
        pass

    def stop(self):
        pass

    def callInThreadWithCallback(self, on_result, f, *args, **kwargs):
        try:
            value = f(*args, **kwargs)
        except BaseException:
            on_result(False, Failure())
        else:
            on_result(True, value)


class PumpReactor(_Clocked):
    """A reactor for a real adbapi thread pool: thread results and C{callLater(0)}
    calls queue up until the test runs them (L{run_until})."""

    def __init__(self):
        self._calls = queue.Queue()
        self.turns = 0

    def callWhenRunning(self, f, *args, **kwargs):
        f(*args, **kwargs)

    def addSystemEventTrigger(self, *args, **kwargs):
        return object()

    def removeSystemEventTrigger(self, trigger):
        pass

    def callFromThread(self, f, *args, **kwargs):
        self._calls.put((f, args, kwargs))

    def callLater(self, delay, f, *args, **kwargs):
        if delay > 0:
            return self.delayed(f, args, kwargs)
        self._calls.put((f, args, kwargs))

    def run_until(self, d, timeout=20.0):
        """Run queued calls until C{d} has fired; return its result (or raise)."""
        while not d.called:
            f, args, kwargs = self._calls.get(timeout=timeout)
            self.turns += 1
            f(*args, **kwargs)
        box = []
        d.addBoth(box.append)
        if isinstance(box[0], Failure):
            box[0].raiseException()
        return box[0]


def sql_config(vendor, url, *, brokerid="b1", tables=None, sync=True, user=None,
               password=None):
    """A L{SqlConfig} as sql_config_from_settings would make it."""
    return SqlConfig(vendor=vendor, url=url, create_url="", user=user, password=password,
                     brokerid=brokerid, tables=dict(tables or {}), sync=sync)


class SqlOpener:
    """Opens SQL stores on one database and closes whatever is left at the end."""

    def __init__(self, vendor, url):
        self.vendor = vendor
        self.url = url
        self.pools = []

    def store(self, mode="inline", **config):
        """A new (not recovered) store; C{mode} "inline" or "threads".

        Returns C{(store, reactor)}.
        """
        config = sql_config(self.vendor, self.url, **config)
        if mode == "inline":
            reactor = InlineReactor()
            pool = connection_pool(config, reactor)
            pool.threadpool = InlineThreadPool()
            pool.start()
        else:
            reactor = PumpReactor()
            pool = connection_pool(config, reactor)
        self.pools.append(pool)
        return SqlStore(pool, config.schema(), reactor, where=config.where()), reactor

    def close_all(self):
        for pool in self.pools:
            if pool.running:
                pool.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_opener(request, tmp_path):
    """An L{SqlOpener} on a fresh SQLite file, then on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        opener = SqlOpener("sqlite", str(tmp_path / "dbstore" / "mqgate.sqlite"))
    else:
        opener = SqlOpener("postgresql", request.getfixturevalue("pg_dsn"))
    yield opener
    opener.close_all()


@pytest.fixture
def sqlite_opener(tmp_path):
    """An L{SqlOpener} on a fresh SQLite file only."""
    opener = SqlOpener("sqlite", str(tmp_path / "dbstore" / "mqgate.sqlite"))
    yield opener
    opener.close_all()
