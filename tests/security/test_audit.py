"""Tests for the audit trail (S4.8): the record format, the bounded writer, the file
it writes, the authentication wrapper and the core's destination hook."""

import json
import os
import stat

from twisted.internet import defer, task
from twisted.logger import capturedLogs

from mqgate.core.broker import Broker
from mqgate.security.audit import (
    NO_AUDIT, AuditingAuthenticator, AuditTrail, RotatingFile, format_record)
from mqgate.security.auth import AuthenticationFailed, Principal


class ListSink:
    """A sink that keeps what it is given, written on the reactor thread."""

    blocking = False

    def __init__(self):
        self.data = b""
        self.closed = False

    def write(self, data):
        self.data += data

    def close(self):
        self.closed = True

    def records(self):
        return [json.loads(line) for line in self.data.decode("utf-8").splitlines()]


class SlowDisk:
    """A blocking sink behind a thread that only finishes when the test says so."""

    def __init__(self):
        self.sink = ListSink()
        self.sink.blocking = True
        self.calls = []

    def run_in_thread(self, f, *args):
        d = defer.Deferred()
        self.calls.append((d, f, args))
        return d

    def finish(self):
        d, f, args = self.calls.pop(0)
        f(*args)
        d.callback(None)


def started_trail(sink, clock, *args, **kwargs):
    trail = AuditTrail(sink, clock, *args, **kwargs)
    trail.startService()
    return trail


class RecordingTrail:
    """An IAuditTrail that keeps each call, for the hooks' tests."""

    def __init__(self):
        self.records = []

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        self.records.append(dict(kind=kind, outcome=outcome, user=user, address=address,
                                 service=service, **details))


# -- the record ---------------------------------------------------------------------------

def test_record_is_one_json_line_with_utc_millisecond_time():
    """S4.8: a record is one JSON object on one line, time in ISO 8601 UTC with ms."""
    line = format_record(1764773701.1234, "authentication", "ok", "admin", "10.0.0.1",
                         "jms", mechanism="password")
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == {
        "time": "2025-12-03T14:55:01.123Z", "kind": "authentication", "outcome": "ok",
        "user": "admin", "address": "10.0.0.1", "service": "jms",
        "mechanism": "password"}


def test_details_cannot_overwrite_the_fixed_fields():
    """S4.8: a detail named like a fixed field does not replace the record's own time."""
    record = json.loads(format_record(0, "admin", "ok", "admin", time="forged",
                                      command="show x"))
    assert (record["time"], record["command"]) == ("1970-01-01T00:00:00.000Z", "show x")


def test_unexpected_detail_types_are_written_as_text():
    """S4.8: record never raises on a value JSON cannot hold; it is written as text."""
    record = json.loads(format_record(0, "access.reload", "failed", file=b"x", why={1}))
    assert record["file"] == "b'x'" and record["why"] == "{1}"


def test_no_audit_records_nothing():
    """S4.8: with auditing off, recording is a no-op that never fails."""
    assert NO_AUDIT.record("authentication", "ok", user="u", anything=object()) is None


# -- the writer ---------------------------------------------------------------------------

def test_records_reach_the_sink_on_the_next_tick():
    """S4.8: recorded events are written in a batch at the next flush, in order, each
    parsed back as JSON."""
    clock, sink = task.Clock(), ListSink()
    trail = started_trail(sink, clock, interval=0.25)
    for kind in ("authentication", "admin", "destination.create", "destination.destroy",
                 "access.denied", "access.reload"):
        trail.record(kind, "ok", user="admin")
    assert sink.data == b""
    clock.advance(0.25)
    assert [r["kind"] for r in sink.records()] == [
        "authentication", "admin", "destination.create", "destination.destroy",
        "access.denied", "access.reload"]
    assert trail.pending == 0


def test_a_slow_disk_bounds_the_buffer_and_counts_the_dropped():
    """S4.8: while the disk is slow, at most max_pending records wait; the rest are
    dropped, counted, and the count logged with the setting to raise."""
    clock, disk = task.Clock(), SlowDisk()
    trail = started_trail(disk.sink, clock, disk.run_in_thread, max_pending=100,
                          interval=0.25)
    trail.record("admin", "ok", user="first")
    clock.advance(0.25)   # the first batch goes to the (stuck) writer thread
    assert len(disk.calls) == 1
    for n in range(130):
        trail.record("authentication", "failed", user=f"u{n}")
    assert (trail.pending, trail.dropped) == (100, 30)
    with capturedLogs() as events:
        clock.advance(0.25)   # still writing: nothing new handed over, the drop is said
    assert len(disk.calls) == 1
    warnings = [e for e in events if "dropped" in e.get("log_format", "")]
    assert len(warnings) == 1 and warnings[0]["count"] == 30
    assert "mqgate.audit.max_pending" in warnings[0]["log_format"]
    disk.finish()
    clock.advance(0.25)   # the disk is back: the 100 waiting go in one batch
    disk.finish()
    users = [r["user"] for r in disk.sink.records()]
    assert users == ["first"] + [f"u{n}" for n in range(100)]


def test_drop_reports_are_rate_limited():
    """S4.8: a disk that stays slow gets one log line per report interval, not one per
    tick, and the next line counts everything dropped meanwhile."""
    clock, disk = task.Clock(), SlowDisk()
    trail = started_trail(disk.sink, clock, disk.run_in_thread, max_pending=1,
                          interval=1.0, report_every=10.0)
    trail.record("admin", "ok")
    with capturedLogs() as events:
        for _ in range(20):
            clock.advance(1.0)
            trail.record("admin", "ok")
            trail.record("admin", "ok")
    counts = [e["count"] for e in events if "dropped" in e.get("log_format", "")]
    assert len(counts) == 2 and sum(counts) <= trail.dropped


def test_stop_writes_what_is_left_and_closes():
    """S4.8: stopping the broker writes the records still waiting, then closes."""
    clock, sink = task.Clock(), ListSink()
    trail = started_trail(sink, clock, interval=0.25)
    trail.record("destination.create", "ok", name="q")
    d = trail.stopService()
    assert d.called and sink.closed
    assert [r["name"] for r in sink.records()] == ["q"]


def test_a_failing_disk_is_logged_and_the_trail_goes_on():
    """S4.8: a write that fails (a full disk) is logged; later records still go."""
    clock = task.Clock()

    class Failing(ListSink):
        fail = True

        def write(self, data):
            if self.fail:
                self.fail = False
                raise OSError(28, "No space left on device")
            super().write(data)

    sink = Failing()
    trail = started_trail(sink, clock)
    trail.record("admin", "ok", user="lost")
    with capturedLogs() as events:
        clock.advance(0.25)
    assert any("could not write" in e.get("log_format", "") for e in events)
    trail.record("admin", "ok", user="kept")
    clock.advance(0.25)
    assert [r["user"] for r in sink.records()] == ["kept"]


# -- the file -----------------------------------------------------------------------------

def test_file_is_owner_only_and_rotates(tmp_path):
    """S4.8: the audit file is made 0600 in a 0700 directory, and past its length it
    becomes FILE.1 (the older FILE.2), as twistd rotates the main log."""
    path = tmp_path / "log" / "audit.log"
    f = RotatingFile(path, rotate_length=100)
    f.write(b"a" * 60 + b"\n")
    f.write(b"b" * 60 + b"\n")
    f.write(b"c" * 60 + b"\n")
    f.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert path.read_bytes().startswith(b"c")
    assert (tmp_path / "log" / "audit.log.1").read_bytes().startswith(b"b")
    assert (tmp_path / "log" / "audit.log.2").read_bytes().startswith(b"a")


def test_file_appends_across_restarts(tmp_path):
    """S4.8: a new broker appends to the audit file rather than replacing it."""
    path = tmp_path / "audit.log"
    for word in (b"one\n", b"two\n"):
        f = RotatingFile(path)
        f.write(word)
        f.close()
    assert path.read_bytes() == b"one\ntwo\n"


# -- the hooks ----------------------------------------------------------------------------

class FakeAuthenticator:
    def __init__(self, result):
        self.result = result

    def authenticate(self, username, password, source=None, service=None):
        return self.result

    def authenticate_anonymous(self, source=None, service=None):
        return self.result


def test_successful_login_is_recorded():
    """S4.8: a successful login gives an authentication/ok record with user, address,
    service, and the principal goes through unchanged."""
    trail = RecordingTrail()
    principal = Principal("alice", {"user"})
    auth = AuditingAuthenticator(FakeAuthenticator(defer.succeed(principal)), trail)
    d = auth.authenticate("alice", "secret", "10.1.2.3", "jms")
    assert d.result is principal
    assert trail.records == [dict(kind="authentication", outcome="ok", user="alice",
                                  address="10.1.2.3", service="jms",
                                  mechanism="password")]
    assert "secret" not in repr(trail.records)


def test_failed_login_is_recorded_with_its_reason():
    """S4.8: a refused login gives an authentication/failed record with the reason the
    client is never told, and the failure goes through unchanged."""
    trail = RecordingTrail()
    error = AuthenticationFailed("mallory", "unknown user")
    auth = AuditingAuthenticator(FakeAuthenticator(defer.fail(error)), trail)
    d = auth.authenticate_anonymous("10.9.9.9", "stomp")
    failure = []
    d.addErrback(failure.append)
    assert failure[0].value is error
    assert trail.records == [dict(kind="authentication", outcome="failed", user=None,
                                  address="10.9.9.9", service="stomp",
                                  mechanism="anonymous", reason="unknown user")]


def test_core_reports_destinations_made_and_removed():
    """S4.8: the core calls on_destination when a queue or topic is made and removed,
    and not for temporary destinations."""
    broker = Broker(task.Clock())
    events = []
    broker.on_destination = lambda *args: events.append(args)
    broker.open_producer("queue://orders")
    broker.open_producer("topic://news")
    broker.open_producer("queue://orders")   # exists: nothing new
    broker.create_queue("made.by.admin")
    # What an admin `destroy dst` will do: remove a destination.
    broker._delete_destination(broker.queue("orders"))
    assert events == [("create", "queue", "orders", None), ("create", "topic", "news", None),
                      ("create", "queue", "made.by.admin", None),
                      ("destroy", "queue", "orders", None)]
