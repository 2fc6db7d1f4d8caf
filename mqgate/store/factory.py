"""
The configured store (S3.2) and the service that owns it.

L{open_store} reads C{mqgate.persist.*} and returns a L{StoreService}: the store, plus
the one thread its disk work runs on. The file store gets a thread of its own
(L{WriterThread}: its writes are one batch at a time anyway, S3.4), so that a slow disk
never takes the reactor's default pool from the authenticator and the other users of
C{deferToThread}.

Recovery runs before the listeners start (L{mqgate.service.BrokerService}). Until the
reactor runs, the file store's disk work runs inline (L{_Runner}): twistd starts the
services before C{reactor.run()}, so recovering inline is the same as binding a port
inline, and the listeners then start with the broker already rebuilt. Once the reactor
runs, L{StoreService.reactor_running} moves the disk work to the thread.
"""

import os
import queue
import threading

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.errors import ConfigError
from mqgate.store.filestore import FileStore

__all__ = ["StoreService", "WriterThread", "open_store", "FILESTORE_DIR"]

#: The file store's directory under the instance directory (S3.3).
FILESTORE_DIR = "filestore"


class WriterThread:
    """One thread that runs the jobs handed to it in turn, each answered on the
    reactor thread (C{callFromThread}).

    Not a Twisted C{ThreadPool}: a job handed to a pool goes through its coordinator's
    lock, which the worker takes too when it finishes a job. The file store hands over
    its next batch just as the last one's answer arrives, so the reactor found that
    lock held, by a worker waiting for the GIL, for about a twentieth of its time
    under persistent load (py-spy, bench scenario (b): persistent messages settled one by one). A C{SimpleQueue} put never
    waits.
    """

    def __init__(self, reactor, name):
        self._reactor = reactor
        self._name = name
        self._jobs = queue.SimpleQueue()
        self._thread = None

    @property
    def started(self):
        return self._thread is not None

    def start(self):
        if self._thread is None:
            # A daemon: a broker that exits without stopping its store (a crash of
            # the start-up) is not held by it; nothing acknowledged is at stake, as
            # an answer is given only once its write has returned.
            self._thread = threading.Thread(target=self._work, name=self._name,
                                            daemon=True)
            self._thread.start()

    def stop(self):
        """Run what was handed over, then end the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join()

    def run(self, f, *args):
        """C{f(*args)} on the thread: a Deferred of its result."""
        d = defer.Deferred()
        self._jobs.put((f, args, d))
        return d

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            f, args, d = job
            try:
                result = f(*args)
            except BaseException:
                self._reactor.callFromThread(d.errback, Failure())
            else:
                self._reactor.callFromThread(d.callback, result)


class _Runner:
    """C{run_in_thread} for the file store: inline until the reactor runs, then on the
    store's own thread. This module is the one place in the package that ties a
    store to threads (tests/store/test_group_commit.py)."""

    def __init__(self, writer):
        self._writer = writer
        self.threaded = False

    def __call__(self, f, *args):
        if not self.threaded:
            return defer.maybeDeferred(f, *args)
        return self._writer.run(f, *args)


class StoreService(service.Service):
    """Owns the store: recovers it first, closes it last (design rule 6).

    L{mqgate.service.BrokerService} calls L{recover} when it starts and
    C{stopService} once its connections are closed; this service is deliberately not
    one of its children, whose stops all begin at once.

    @ivar store: the L{mqgate.store.interfaces.IMessageStore}.
    @ivar description: what the log calls it (C{"file store in DIR, sync on"}).
    """

    log = Logger(namespace="mqgate.store")

    def __init__(self, store, description, pool=None, runner=None):
        self.store = store
        self.description = description
        self._pool = pool
        self._runner = runner

    def startService(self):
        super().startService()
        if self._pool is not None:
            self._pool.start()

    def reactor_running(self):
        """The reactor runs: disk work goes to the store's thread from now on."""
        if self._runner is not None:
            self._runner.threaded = True

    def recover(self):
        """Start the service if needed and recover the store: C{Deferred[Recovered]}."""
        if not self.running:
            self.startService()
        return self.store.recover()

    def stopService(self):
        """Finish pending writes, close the store, log its figures, stop the thread."""
        super().stopService()
        d = self.store.close()
        d.addErrback(lambda failure: self.log.failure(
            "closing the {store} failed", failure, store=self.description))
        d.addCallback(lambda _: self._closed())
        return d

    def _closed(self):
        stats = dict(getattr(self.store, "stats", None) or {})
        stats.pop("pool", None)
        # One line with the figures: operators see what group commit did, and the
        # benchmark (bench/persistent.py) reads fsyncs and records from it.
        self.log.info("store closed ({store}): {figures}", store=self.description,
                      figures=" ".join(f"{k}={_figure(v)}" for k, v in sorted(stats.items())),
                      stats=stats)
        if self._pool is not None and self._pool.started:
            self._pool.stop()


def _figure(value):
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def open_store(settings, reactor):
    """The store C{settings} configure (S3.2), wrapped in its L{StoreService}.

    @raise ConfigError: the store cannot be made as configured.
    """
    kind = settings["mqgate.persist.store"]
    if kind == "jdbc":
        return _sql_store(settings, reactor)
    directory = os.path.join(settings.instance_dir, FILESTORE_DIR)
    pool = WriterThread(reactor, "mqgate-filestore")
    runner = _Runner(pool)
    sync = settings["mqgate.persist.file.sync.enabled"]
    threshold = settings["mqgate.persist.file.journal.compact_threshold"]
    store = FileStore(
        directory, runner, sync=sync,
        max_record_size=settings["mqgate.persist.file.message.max_record_size"],
        segment_size=settings["mqgate.persist.file.journal.segment_size"],
        filepool_limit=settings["mqgate.persist.file.destination.message.filepool.limit"],
        cleanratio=settings["mqgate.persist.file.message.filepool.cleanratio"],
        cleanup=settings["mqgate.persist.file.message.cleanup"],
        compact_threshold=threshold / 100.0 if threshold else None,
        clock=reactor, retry_interval=settings["mqgate.persist.retry_interval"])
    description = f"file store in {directory}, sync {'on' if sync else 'off'}"
    return StoreService(store, description, pool=pool, runner=runner)


def _sql_store(settings, reactor):
    try:
        from mqgate.store.sql import sql_store_from_settings
    except ModuleNotFoundError as e:
        if e.name != "mqgate.store.sql":
            raise
        raise ConfigError("mqgate.persist.store", "jdbc",
                          "file: the SQL store is not available in this build") from None
    store = sql_store_from_settings(settings, reactor, prompt=_PROMPT)
    where = getattr(store, "where", None)
    vendor = getattr(store, "vendor", None) or "SQL"
    return StoreService(store, f"{vendor} store" + (f" ({where})" if where else ""))


# S3.5: the database password comes from the password file, or is asked for at start-up.
_PROMPT = "Password of the message store database: "
