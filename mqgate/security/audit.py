# -*- test-case-name: tests.security.test_audit -*-
"""
The audit trail (S4.8): one structured record per security-relevant event.

Whatever records an event (the login guard, the access control, the admin requests, the
core's destination life cycle) is handed an object with L{IAuditTrail}'s one method and
calls it; it never knows where the record goes. L{NO_AUDIT} is that object when
auditing is off, so callers never test for it.

Event kinds, and the C{outcome} values they use:

    authentication        ok | failed            (user, address, service, mechanism)
    admin                 ok | failed            (user, address, service, command)
    destination.create    ok                     (user or None, dest_type, name)
    destination.destroy   ok                     (user or None, dest_type, name)
    access.denied         denied                 (user, address, service, operation,
                                                  dest_type, name, rule subject)
    access.reload         ok | failed            (file, why)
    capture.install       requested, then ok | failed   (user, subscription,
                                                  capture_address; why when failed)
    capture.remove        requested, then ok | failed   (user, subscription; why)

L{AuditTrail} is the real trail: each record becomes one JSON object on one line::

    {"time": "2026-12-03T14:55:01.123Z", "kind": "authentication", "outcome": "ok",
     "user": "admin", "address": "127.0.0.1", "service": "jms", "mechanism": "password"}

C{record} only formats the line and appends it to a bounded buffer, on the reactor
thread; the lines go to their sink in batches. A file sink (L{RotatingFile}, the
default, C{audit.log} in the instance's log directory) is written on a thread of its
own, so a slow disk never holds the reactor; while a batch is being written the next
records wait in the buffer, and past C{max_pending} of them a record is dropped and
counted, and the count is logged. Without a file the lines go to the broker's own log.
"""

import datetime
import json
import os

from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import Interface, implementer

__all__ = ["IAuditTrail", "NO_AUDIT", "AuditTrail", "RotatingFile", "LogSink",
           "AuditingAuthenticator", "format_record"]


class IAuditTrail(Interface):
    """Where audit records go."""

    def record(kind, outcome, *, user=None, address=None, service=None, **details):
        """Record one event of C{kind} with C{outcome} (see the module docstring).

        Must be cheap and must not raise: it is called on the reactor thread, on paths
        a hostile client can drive. C{details} values are JSON-serialisable (str, int,
        float, bool, None).
        """


@implementer(IAuditTrail)
class _NoAudit:
    """Auditing is off: every record is dropped."""

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        pass


#: The audit trail when C{mqgate.audit.enabled} is false.
NO_AUDIT = _NoAudit()


def format_record(when, kind, outcome, user=None, address=None, service=None,
                  **details):
    """One record as its JSON line (with the newline).

    @param when: seconds since the epoch; written ISO 8601, UTC, to the millisecond.
    """
    stamp = datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    record = {"time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
              "kind": kind, "outcome": outcome, "user": user, "address": address,
              "service": service}
    for key, value in details.items():
        record.setdefault(key, value)   # a detail never overwrites a fixed field
    # default=str: a value of an unexpected type is written as text, never raises.
    return json.dumps(record, default=str, ensure_ascii=False) + "\n"


class RotatingFile:
    """An append-only file, owner-only (it names users and addresses), that rotates
    as twistd's main log does: past C{rotate_length} bytes, C{FILE} becomes C{FILE.1}
    (C{FILE.1} becomes C{FILE.2} ...) and a new C{FILE} is begun; none is deleted.

    Blocking: used from the audit trail's writer thread only.
    """

    def __init__(self, path, rotate_length=1_000_000):
        self.path = os.fspath(path)
        self._rotate_length = rotate_length
        self._fd = None
        self._size = 0

    def _open(self):
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes):
        if self._fd is None:
            self._open()
        if self._size and self._size + len(data) > self._rotate_length:
            self._rotate()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)

    def _rotate(self):
        os.close(self._fd)
        self._fd = None
        number = 1
        while os.path.exists(f"{self.path}.{number}"):
            number += 1
        for n in range(number, 1, -1):
            os.replace(f"{self.path}.{n - 1}", f"{self.path}.{n}")
        os.replace(self.path, f"{self.path}.1")
        self._open()

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LogSink:
    """The broker's own log as the sink (C{mqgate.audit.file} empty): written on the
    reactor thread, where the log is written anyway."""

    blocking = False
    _log = Logger(namespace="mqgate.audit")

    def write(self, data: bytes):
        for line in data.decode("utf-8").splitlines():
            self._log.info("audit {record}", record=line)

    def close(self):
        pass


@implementer(IAuditTrail)
class AuditTrail(service.Service):
    """The audit trail: a bounded buffer of lines, handed to a sink in batches.

    @param sink: C{write(bytes)}, C{close()}; written through C{run_in_thread} unless
        it has C{blocking = False}.
    @param clock: an C{IReactorTime}: the records' time and the flush timer.
    @param run_in_thread: C{run_in_thread(f, *args) -> Deferred}, for a blocking sink.
    @param max_pending: records waiting for the sink at most; more are dropped.
    @param interval: seconds between batches.
    @param report_every: seconds between log lines counting dropped records.
    @ivar dropped: records dropped since start, in all.
    """

    _log = Logger(namespace="mqgate.audit")

    def __init__(self, sink, clock, run_in_thread=None, *, max_pending=10_000,
                 interval=0.25, report_every=10.0, description="the audit log"):
        self._sink = sink
        self._clock = clock
        self._run_in_thread = run_in_thread
        self._max_pending = max_pending
        self._interval = interval
        self._report_every = report_every
        self._description = description
        self._pending = []
        self._writing = None
        self._unreported = 0
        self._last_report = None
        self.dropped = 0
        # Not flush itself: the loop would wait for a slow write's Deferred, and the
        # drops it causes would go unreported until the disk came back.
        self._loop = task.LoopingCall(lambda: self.flush() and None)
        self._loop.clock = clock

    @property
    def pending(self):
        """Records waiting for the sink."""
        return len(self._pending)

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        """See L{IAuditTrail.record}."""
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            self._unreported += 1
            return
        try:
            line = format_record(self._clock.seconds(), kind, outcome, user, address,
                                 service, **details)
        except Exception:
            self._log.failure("audit record {kind} could not be written", kind=kind)
            return
        self._pending.append(line)

    def flush(self):
        """Hand the waiting records to the sink, unless a batch is still being written.

        @return: a L{Deferred} firing when this batch is written (at once if none).
        """
        self._report_dropped()
        if self._writing is not None or not self._pending:
            return defer.succeed(None)
        lines, self._pending = self._pending, []
        if getattr(self._sink, "blocking", True) and self._run_in_thread is not None:
            # Joined and encoded on the writer thread too: 10,000 lines take
            # milliseconds, which the reactor need not spend.
            d = self._writing = self._run_in_thread(self._write, lines)
            d.addErrback(self._write_failed)
            d.addBoth(self._written)
            return d
        try:
            self._write(lines)
        except Exception as e:
            self._write_failed(e)
        return defer.succeed(None)

    def _write(self, lines):
        self._sink.write("".join(lines).encode("utf-8"))

    def _written(self, _):
        self._writing = None

    def _write_failed(self, why):
        message = getattr(why, "getErrorMessage", lambda: str(why))()
        self._log.error("the audit trail could not write to {where}: {why}; those "
                        "records are lost", where=self._description, why=message)

    def _report_dropped(self, force=False):
        if not self._unreported:
            return
        now = self._clock.seconds()
        if not force and self._last_report is not None and \
                now - self._last_report < self._report_every:
            return
        self._log.warn(
            "the audit trail dropped {count} records ({total} since start): {where} "
            "did not keep up and {limit} records were waiting (mqgate.audit.max_pending)",
            count=self._unreported, total=self.dropped, where=self._description,
            limit=self._max_pending)
        self._unreported = 0
        self._last_report = now

    def startService(self):
        super().startService()
        self._loop.start(self._interval, now=False)

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        # The batch being written, then what is left, written here and now (the
        # broker is stopping, its writer thread may be gone), then the file closed.
        if self._writing is not None:
            yield self._writing
        self._report_dropped(force=True)
        if self._pending:
            lines, self._pending = self._pending, []
            try:
                self._write(lines)
            except Exception as e:
                self._write_failed(e)
        self._sink.close()


#: Logins whose quiet time L{AuditingAuthenticator} remembers before it sweeps.
_MAX_QUIET_KEYS = 10_000


class AuditingAuthenticator:
    """An L{mqgate.security.auth.IAuthenticator} that records each login's outcome (kind C{authentication})
    and passes it on unchanged. Wraps the outermost authenticator (the login guard),
    so that refusals for load or for repeated failures are recorded too.

    The reason of a failure (unknown user, wrong password, ...) goes into the record,
    which only the operator reads; the client is never told it.

    (No import of L{mqgate.security.auth} here: the modules that authenticate import
    this one for L{NO_AUDIT}, and must not find it half-initialised.)
    """

    def __init__(self, authenticator, audit, *, clock=None, quiet_repeats=0):
        self._authenticator = authenticator
        self._audit = audit
        self._clock = clock
        self._quiet_repeats = quiet_repeats
        self._recorded_at = {}   # (user, address, service) -> when its ok was recorded

    def quiet_repeats(self, clock, seconds):
        """The same logins, audited alike except that a successful login is not
        recorded again for C{seconds} after one by the same user from the same
        address on the same service was; a failure is always recorded, and ends the
        quiet time. For HTTP, where every request of a console or a script logs in
        again: its first login is in the trail, not one per request."""
        return AuditingAuthenticator(self._authenticator, self._audit, clock=clock,
                                     quiet_repeats=seconds)

    def __getattr__(self, name):
        # Anything else the wrapped authenticator offers (counters for admin, say).
        return getattr(self._authenticator, name)

    def authenticate(self, username, password, source=None, service=None):
        d = self._authenticator.authenticate(username, password, source, service)
        return self._recorded(d, username, source, service, "password")

    def authenticate_anonymous(self, source=None, service=None):
        d = self._authenticator.authenticate_anonymous(source, service)
        return self._recorded(d, None, source, service, "anonymous")

    def _recorded(self, d, username, source, service, mechanism):
        audit = self._audit

        def ok(principal):
            if not self._repeated((principal.name, source, service)):
                audit.record("authentication", "ok", user=principal.name,
                             address=source, service=service, mechanism=mechanism)
            return principal

        def failed(failure):
            error = failure.value
            # AuthenticationFailed carries why; anything else is named by its type.
            reason = getattr(error, "reason", None)
            if not isinstance(reason, str):
                reason = type(error).__name__
            audit.record("authentication", "failed", user=username, address=source,
                         service=service, mechanism=mechanism, reason=reason)
            self._recorded_at.pop((username, source, service), None)
            return failure

        return d.addCallbacks(ok, failed)

    def _repeated(self, key):
        """Whether an ok login of C{key} falls in the quiet time of one recorded
        (and, when it does not, that this one is recorded now)."""
        if not self._quiet_repeats:
            return False
        now = self._clock.seconds()
        recorded = self._recorded_at.get(key)
        if recorded is not None and now - recorded < self._quiet_repeats:
            return True
        if len(self._recorded_at) >= _MAX_QUIET_KEYS:
            # Many users and addresses: forget the quiet times that are over.
            self._recorded_at = {k: t for k, t in self._recorded_at.items()
                                 if now - t < self._quiet_repeats}
            if len(self._recorded_at) >= _MAX_QUIET_KEYS:
                self._recorded_at.clear()
        self._recorded_at[key] = now
        return False
