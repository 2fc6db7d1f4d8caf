# -*- test-case-name: tests.web.test_console -*-
"""
Live data over plain HTTP: one JSON object per line (NDJSON), written as it comes.

A browser reads such a response with C{fetch} and a stream reader, line by line, with
the same login header as every other API request: no WebSocket, no second login. The
response ends when the client goes away, or after C{max_seconds} (the client opens a
new one, and its login is checked again, so a stream cannot outlive a changed
password by long).
"""

import json

from twisted.internet import defer, task

__all__ = ["CONTENT_TYPE", "stream_readings"]

CONTENT_TYPE = b"application/x-ndjson; charset=utf-8"


def stream_readings(request, clock, read, interval, max_seconds):
    """Write C{read(now)} as one JSON line now and every C{interval} seconds.

    @param read: C{(now) -> JSON-able}.
    @return: a Deferred that fires (with C{b""}, the end of the body) when the stream
        ends; cancelling it ends the stream.
    """
    request.setResponseCode(200)
    request.setHeader(b"content-type", CONTENT_TYPE)
    request.setHeader(b"cache-control", b"no-store")
    # Proxies that buffer (nginx) would hold the lines back.
    request.setHeader(b"x-accel-buffering", b"no")
    started = clock.seconds()
    ended = defer.Deferred(lambda _: stop())

    def write():
        now = clock.seconds()
        if now - started >= max_seconds:
            stop()
            return
        line = json.dumps(read(now), default=str, separators=(",", ":"))
        request.write(line.encode("utf-8") + b"\n")

    def stop(_=None):
        if loop.running:
            loop.stop()
        if not ended.called:
            ended.callback(b"")

    loop = task.LoopingCall(write)
    loop.clock = clock
    request.notifyFinish().addBoth(stop)
    loop.start(interval, now=True).addErrback(_failed, ended)
    return ended


def _failed(failure, ended):
    # A reading that raises ends the stream with the error in the broker's log.
    if not ended.called:
        ended.errback(failure)
