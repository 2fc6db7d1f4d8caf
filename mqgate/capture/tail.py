# -*- test-case-name: tests.capture.test_tail -*-
"""
The live tail (S7.6): each captured message as one line of JSON to every reader
watching its address, as it is indexed.

A reader is whoever reads the stream (an HTTP response, L{mqgate.web.capture}). A
reader that cannot keep up must not make the broker hold messages for it: while its
connection is paused (its socket buffer full) lines wait in a backlog of at most
C{max_backlog}; past that, new messages are not kept but counted, and once the reader
takes lines again it is told, in a line of its own, how many it missed. A reader
never holds more than its backlog, whatever the rate of capture.

Lines (NDJSON, one JSON object per line, C{type} first):

    {"type": "message", ...}            a captured message (L{CaptureRecord.summary},
                                        its body cut to a preview)
    {"type": "dropped", "count": N,     N messages this reader did not get because
     "reason": "slow reader"}           it read too slowly
    {"type": "dropped", "count": N,     the broker dropped N copies before the index
     "reason": "ring"|"rate", ...}      saw them (the core's bounds, S7.4)
    {"type": "heartbeat", "at": T}      nothing happened; the stream is alive

Nothing here does I/O: the reader writes through the C{write} it was given.
"""

import json
from collections import deque

from mqgate.capture.record import address_forms

__all__ = ["TailHub", "TailReader", "encode_line", "DEFAULT_MAX_BACKLOG",
           "PREVIEW_CHARS"]

#: Lines one paused reader keeps at most (about 4 MiB with full previews): bounds
#: what a stalled reader costs the broker.
DEFAULT_MAX_BACKLOG = 1000

#: Characters of a body shown in a tail line; the whole (bounded) body is one request
#: away (C{/api/capture/messages/ID}).
PREVIEW_CHARS = 4096


class TailReader:
    """One reader of the tail.

    @param write: C{write(bytes)}: one or more lines to the reader.
    @param address: only messages to this address (or, for a queue, reaching it), or
        C{None} for all.
    @param subscription: only this capture subscription's messages, or C{None}.
    """

    def __init__(self, write, *, address=None, subscription=None,
                 max_backlog=DEFAULT_MAX_BACKLOG):
        self._write = write
        self.address = address
        self._forms = () if address is None else address_forms(address)
        self.subscription = subscription
        self.max_backlog = max_backlog
        self._backlog = deque()
        self.paused = False
        self.missed = 0        # not yet told
        self.missed_total = 0
        self.sent = 0

    def wants(self, summary):
        if self.subscription is not None and summary["subscription"] != self.subscription:
            return False
        if self.address is None:
            return True
        return (summary["address"] in self._forms
                or self.address in (summary["routed_to"] or ()))

    def offer(self, line):
        """Send C{line} (a dict, or a dict already encoded as one line of bytes), or
        keep it while paused, or count it as missed."""
        if not self.paused:
            self._send(line)
        elif len(self._backlog) < self.max_backlog:
            self._backlog.append(line)
        else:
            self.missed += 1
            self.missed_total += 1

    def pause(self):
        self.paused = True

    def resume(self):
        """Send the backlog, then the count of what was missed behind it."""
        self.paused = False
        while self._backlog and not self.paused:
            self._send(self._backlog.popleft())
        if self.missed and not self.paused:
            missed, self.missed = self.missed, 0
            self._send({"type": "dropped", "count": missed, "reason": "slow reader"})

    def heartbeat(self, now):
        """A heartbeat line, unless the reader is paused (it has lines waiting)."""
        if not self.paused:
            self._send({"type": "heartbeat", "at": now})

    def _send(self, line):
        self.sent += 1
        self._write(line if isinstance(line, bytes) else encode_line(line))


class TailHub:
    """The readers of the tail; the index shows it every record."""

    def __init__(self):
        self._readers = set()

    @property
    def readers(self):
        return len(self._readers)

    def add(self, reader):
        self._readers.add(reader)

    def remove(self, reader):
        self._readers.discard(reader)

    def publish(self, summary):
        """Show one record (L{CaptureRecord.summary}) to the readers that want it."""
        if not self._readers:
            return
        line = None
        for reader in list(self._readers):
            if reader.wants(summary):
                if line is None:    # encoded once, whatever the number of readers
                    line = encode_line(_preview(summary))
                reader.offer(line)

    def dropped_upstream(self, subscription, reason, count):
        """The core dropped C{count} copies of C{subscription} (S7.4 bounds)."""
        line = encode_line({"type": "dropped", "count": count, "reason": reason,
                            "subscription": subscription})
        for reader in list(self._readers):
            if reader.subscription in (None, subscription):
                reader.offer(line)


def encode_line(line):
    """One NDJSON line: compact JSON and a newline."""
    return json.dumps(line, separators=(",", ":")).encode("utf-8") + b"\n"


def _preview(summary):
    line = {"type": "message", **summary}
    text = summary.get("body_text")
    if text is not None and len(text) > PREVIEW_CHARS:
        line["body_text"] = text[:PREVIEW_CHARS]
        line["preview"] = True
    return line
