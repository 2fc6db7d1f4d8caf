# -*- test-case-name: tests.web.test_capture -*-
"""
The capture views over HTTP (S7.6): search, one message, "verify on broker", request/
reply traces, the index's status, and the live tail as a stream of JSON lines.

    GET /api/capture/messages?address=&queue=&subscription=&from=&to=
            &property=NAME=VALUE&correlation_id=&message_id=&before=&limit=
                                          one page, newest first; "next" pages on
    GET /api/capture/messages/ID          one captured message (its kept body)
    GET /api/capture/messages/ID/verify   is the original still on the broker?
    GET /api/capture/traces?...           requests paired with their replies (same
                                          filters as messages)
    GET /api/capture/status               the index: database, written, dropped ...
    GET /api/capture/tail[?address=&subscription=]
                                          NDJSON, one line per captured message,
                                          heartbeats, and a line when a slow reader
                                          missed messages (L{mqgate.capture.tail})

C{from} and C{to} are seconds since the epoch or ISO 8601 times (UTC unless they say
otherwise). C{property} may be given more than once: every one must match.

The admin API (L{mqgate.web.admin}) logs the user in and hands the request here; this
resource never sees a request that has not logged in.
"""

import datetime

from twisted.internet import task
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.web import server
from twisted.web.resource import Resource
from zope.interface import implementer

from mqgate.capture.index import DEFAULT_LIMIT, CaptureQuery, QueryError
from mqgate.capture.tail import DEFAULT_MAX_BACKLOG, TailReader
from mqgate.capture.verify import verify_on_broker
from mqgate.web.site import json_answer, json_error

__all__ = ["CaptureResource", "parse_time", "DEFAULT_HEARTBEAT", "DEFAULT_MAX_READERS"]

#: Seconds between heartbeat lines of a quiet tail: well inside the admin service's
#: idle timeout and the idle timeouts of proxies on the way (often 60 s).
DEFAULT_HEARTBEAT = 15

#: Tail readers at once at most: each may hold a backlog (L{DEFAULT_MAX_BACKLOG}).
DEFAULT_MAX_READERS = 16

_NDJSON = b"application/x-ndjson; charset=utf-8"
_SEARCH = ("address", "queue", "subscription", "from", "to", "property",
           "correlation_id", "message_id", "before", "limit")
_REPEATABLE = ("property",)


class _BadRequest(Exception):
    status = 400


class _NotFound(_BadRequest):
    status = 404


class CaptureResource(Resource):
    """The capture routes under C{/api/capture/}.

    @param index: the L{mqgate.capture.index.CaptureIndex}.
    @param hub: its L{mqgate.capture.tail.TailHub}.
    @param clock: the reactor (heartbeats).
    @param broker: the core, for "verify on broker", or None (then never offered).
    """

    isLeaf = True
    log = Logger()

    def __init__(self, index, hub, clock, *, broker=None, heartbeat=DEFAULT_HEARTBEAT,
                 max_readers=DEFAULT_MAX_READERS, max_backlog=DEFAULT_MAX_BACKLOG):
        super().__init__()
        self._index = index
        self._hub = hub
        self._clock = clock
        self._broker = broker
        self._heartbeat = heartbeat
        self._max_readers = max_readers
        self._max_backlog = max_backlog

    def render(self, request):
        segments = request.path.decode("utf-8", "replace").split("/")[3:]
        try:
            if request.method != b"GET":
                raise _BadRequest("the capture views are read with GET")
            return self._route(request, segments)
        except _BadRequest as e:
            return json_error(request, e.status, str(e))
        except QueryError as e:
            return json_error(request, 400, str(e))

    def _route(self, request, segments):
        if segments == ["messages"]:
            return self._deferred(request, self._index.search(_search(request)))
        if segments == ["traces"]:
            return self._deferred(request, self._index.trace(_search(request)))
        if segments == ["status"]:
            _query(request, ())
            return json_answer(request, 200, self._status())
        if segments == ["tail"]:
            return self._tail(request)
        if len(segments) in (2, 3) and segments[0] == "messages":
            seq = _number(segments[1], "message id")
            verify = len(segments) == 3
            if verify and segments[2] != "verify":
                raise _NotFound(f"no such resource: {request.path.decode()}")
            _query(request, ())
            d = self._index.get(seq)
            d.addCallback(self._one, seq, verify)
            return self._deferred(request, d)
        raise _NotFound(f"no such resource: {request.path.decode('utf-8', 'replace')}"
                        " (the capture views are messages, messages/ID, "
                        "messages/ID/verify, traces, status and tail)")

    def _status(self):
        """The index's status, with the capture subscriptions feeding it (S7.7: per
        node: this broker's, named in each)."""
        status = self._index.status()
        captures = getattr(self._broker, "captures", None)
        if captures is not None:
            status["subscriptions"] = [sub.describe() for sub in captures]
        return status

    def _one(self, summary, seq, verify):
        if summary is None:
            raise _NotFound(f"no captured message {seq} (never captured, or removed "
                            "by retention)")
        if not verify:
            return summary
        if self._broker is None:
            return {"offered": False, "reason": "this view has no broker to ask",
                    "original_id": summary["verify"]["original_id"]}
        return verify_on_broker(self._broker, summary)

    def _deferred(self, request, d):
        """Answer with what C{d} fires with, unless the client has gone meanwhile."""
        gone = []
        request.notifyFinish().addBoth(gone.append)

        def answer(data):
            if not gone:
                _write(request, 200, data)

        def failed(failure):
            if failure.check(_BadRequest):
                status, text = failure.value.status, str(failure.value)
            else:
                self.log.failure("capture view {path} failed", failure,
                                 path=request.path.decode("utf-8", "replace"))
                status, text = 500, ("the capture index failed to answer; see the "
                                     "broker's log")
            if not gone:
                _write_error(request, status, text)
        d.addCallbacks(answer, failed)
        return server.NOT_DONE_YET

    # -- the live tail ---------------------------------------------------------------

    def _tail(self, request):
        args = _query(request, ("address", "subscription"))
        if self._hub.readers >= self._max_readers:
            request.setHeader(b"retry-after", b"5")
            return json_error(request, 503, f"{self._max_readers} tail readers are "
                                            "connected already, the most this broker "
                                            "serves at once; try again later")
        request.setResponseCode(200)
        request.setHeader(b"content-type", _NDJSON)
        request.setHeader(b"cache-control", b"no-store")
        # Proxies that buffer responses (nginx) would hold the lines back.
        request.setHeader(b"x-accel-buffering", b"no")
        reader = TailReader(request.write, address=args.get("address"),
                            subscription=args.get("subscription"),
                            max_backlog=self._max_backlog)
        stream = _TailStream(reader, self._hub, self._clock, self._heartbeat)
        request.registerProducer(stream, True)
        request.notifyFinish().addBoth(stream.stop)
        self._hub.add(reader)
        # The first line says the stream is open, so a client knows it is connected.
        reader.heartbeat(self._clock.seconds())
        return server.NOT_DONE_YET


@implementer(IPushProducer)
class _TailStream:
    """One tail response: the reader paused and resumed with its connection, and a
    heartbeat while nothing else is sent."""

    def __init__(self, reader, hub, clock, heartbeat):
        self.reader = reader
        self._hub = hub
        self._clock = clock
        self._beat = task.LoopingCall(self._tick)
        self._beat.clock = clock
        self._beat.start(heartbeat, now=False)

    def _tick(self):
        self.reader.heartbeat(self._clock.seconds())

    def pauseProducing(self):
        self.reader.pause()

    def resumeProducing(self):
        self.reader.resume()

    def stopProducing(self):
        self.stop(None)

    def stop(self, _):
        self._hub.remove(self.reader)
        if self._beat.running:
            self._beat.stop()


# -- reading requests -----------------------------------------------------------------


def _query(request, allowed):
    """The query parameters: each in C{allowed}, once unless repeatable."""
    found = {}
    for key, values in request.args.items():
        name = key.decode("utf-8", "replace")
        if name not in allowed:
            raise _BadRequest(f"unknown query parameter {name!r}; this view takes: "
                              + (", ".join(allowed) or "none"))
        try:
            texts = [v.decode("utf-8") for v in values]
        except UnicodeDecodeError:
            raise _BadRequest(f"query parameter {name!r} is not UTF-8") from None
        if name in _REPEATABLE:
            found[name] = texts
        elif len(texts) != 1:
            raise _BadRequest(f"query parameter {name!r} given more than once")
        else:
            found[name] = texts[0]
    return found


def _search(request):
    args = _query(request, _SEARCH)
    properties = []
    for text in args.get("property", ()):
        name, eq, value = text.partition("=")
        if not eq or not name:
            raise _BadRequest(f"property {text!r}: NAME=VALUE, such as "
                              "property=region=emea")
        properties.append((name, value))
    return CaptureQuery(
        address=args.get("address"), queue=args.get("queue"),
        subscription=args.get("subscription"),
        start=_time(args, "from"), end=_time(args, "to"), properties=properties,
        correlation_id=args.get("correlation_id"), message_id=args.get("message_id"),
        before=_number(args["before"], "before") if "before" in args else None,
        limit=_number(args["limit"], "limit") if "limit" in args else DEFAULT_LIMIT)


def _time(args, name):
    if name not in args:
        return None
    try:
        return parse_time(args[name])
    except ValueError:
        raise _BadRequest(f"{name}={args[name]!r}: seconds since the epoch or an ISO "
                          "8601 time such as 2026-12-04T09:30:00Z") from None


def parse_time(text):
    """Seconds since the epoch from C{text}: a number, or an ISO 8601 time (UTC when
    it names no zone). @raise ValueError: neither."""
    try:
        return float(text)
    except ValueError:
        pass
    when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _number(text, what):
    try:
        value = int(text)
    except ValueError:
        raise _BadRequest(f"{what} {text!r} is not a whole number") from None
    if value < 1:
        raise _BadRequest(f"{what} {text!r}: 1 or more")
    return value


# -- writing answers --------------------------------------------------------------------


def _write(request, status, data):
    request.write(json_answer(request, status, data))
    request.finish()


def _write_error(request, status, message):
    request.write(json_error(request, status, message))
    request.finish()
