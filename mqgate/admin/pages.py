# -*- test-case-name: tests.web.test_console -*-
"""
One page of the destination list, with figures and rates (the web console, S11.2).

A broker may have 10,000 destinations; a console shows some fifty at a time. The page
is chosen on names alone (type, a text filter, offset and limit) and only the
destinations on it are measured: a destination's figures add up its subscriptions,
and measuring every destination to show fifty of them cost 120-180 ms a page at 10,000.

Rates (messages per second in and out, queues and topics alike) are the difference
between two readings of the same destination's totals. L{RateBook} keeps the last
reading of each destination someone looked at, so a rate appears from a page's second
reading on; readings nobody asks for again are forgotten after L{RateBook.forget_after}
seconds, so the book holds only what consoles are showing.

Pure: the caller gives the core broker and the time.
"""

from mqgate.admin.destinations import _RESERVED_PREFIX, _TEMPORARY_PREFIX
from mqgate.admin.requests import BadRequest
from mqgate.core.addresses import QUEUE, TOPIC
from mqgate.metrics.snapshot import (
    broker_snapshot, destination_snapshot, egress_snapshot)

__all__ = ["RateBook", "destination_page", "page_arguments", "overview",
           "LatestReading", "OverviewRates", "MAX_LIMIT"]

#: The longest page: enough for a screen, small enough to stay cheap.
MAX_LIMIT = 500
_DEFAULT_LIMIT = 50
_KINDS = {"queue": (QUEUE,), "topic": (TOPIC,), None: (QUEUE, TOPIC)}
_RATE_KEYS = ("messages_in", "messages_out")
#: Names list dst leaves out (temporary ones, the broker's own), as one startswith:
#: the test runs on every name of the broker, 10,000 of them.
_INTERNAL = (_TEMPORARY_PREFIX, _RESERVED_PREFIX)


class RateBook:
    """The last reading of each destination looked at, for its rates.

    @ivar min_interval: seconds two readings must be apart to make a new rate; a
        reading sooner than that shows the rate made last (two consoles polling the
        same page do not make each other's rates jumpy).
    @ivar forget_after: seconds after which a reading nobody asked for again is
        dropped.
    """

    min_interval = 0.5
    forget_after = 120.0

    def __init__(self):
        self._readings = {}   # (type, name) -> (time, totals, rates or None)
        self._swept = 0.0

    def __len__(self):
        return len(self._readings)

    def rates(self, key, totals, now):
        """C{{key_per_second: float}} for C{totals} read at C{now}, or C{None} the
        first time this destination is read."""
        self._sweep(now)
        last = self._readings.get(key)
        if last is not None and now - last[0] < self.min_interval:
            return last[2]
        rates = None
        if last is not None:
            seconds = now - last[0]
            rates = {f"{name}_per_second": max(0.0, (totals[name] - last[1][name])
                                               / seconds) for name in _RATE_KEYS}
        self._readings[key] = (now, {name: totals[name] for name in _RATE_KEYS}, rates)
        return rates

    def _sweep(self, now):
        if now - self._swept < self.forget_after:
            return
        self._swept = now
        stale = [key for key, (when, _, _) in self._readings.items()
                 if now - when > self.forget_after]
        for key in stale:
            del self._readings[key]


def page_arguments(args):
    """C{(kind, text, offset, limit)} from the query's strings (each may be None).

    @raise BadRequest: naming the bad value.
    """
    kind = args.get("type")
    if kind not in _KINDS:
        raise BadRequest(f"type={kind}: use queue or topic (or leave it out for both)")
    text = args.get("filter") or ""
    offset = _number(args, "offset", 0, 0, None)
    limit = _number(args, "limit", _DEFAULT_LIMIT, 1, MAX_LIMIT)
    return kind, text, offset, limit


def _number(args, name, default, low, high):
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        top = "" if high is None else f" and at most {high}"
        raise BadRequest(f"{name}={raw}: give a whole number of at least {low}{top}")
    return value


def destination_page(broker, rates, now, *, kind=None, text="", offset=0,
                     limit=_DEFAULT_LIMIT):
    """One page of user destinations, queues first, each sorted by name.

    @param broker: the core L{mqgate.core.broker.Broker}.
    @param rates: a L{RateBook}.
    @param kind: C{"queue"}, C{"topic"} or None (both).
    @param text: only names containing it, ignoring case.
    @return: C{{"total", "offset", "limit", "destinations"}}: C{total} counts the
        names that pass the filter; each destination is its
        L{mqgate.metrics.snapshot.destination_snapshot} plus C{state},
        C{messages_in_per_second} and C{messages_out_per_second} (None until a
        second reading).
    """
    wanted = text.lower()
    names = []
    for each in _KINDS[kind]:
        listed = broker.queues() if each == QUEUE else broker.topics()
        if wanted:
            kept = [name for name in listed
                    if wanted in name.lower() and not name.startswith(_INTERNAL)]
        else:
            kept = [name for name in listed if not name.startswith(_INTERNAL)]
        names.extend((each, name) for name in kept)
    rows = []
    for each, name in names[offset:offset + limit]:
        destination = broker.destination(each, name)
        row = destination_snapshot(destination)
        row["state"] = destination.state
        found = rates.rates((row["type"], name), row, now)
        for key in _RATE_KEYS:
            rate = f"{key}_per_second"
            row[rate] = None if found is None else found[rate]
        rows.append(row)
    return {"total": len(names), "offset": offset, "limit": limit, "destinations": rows}


# -- the overview ------------------------------------------------------------------


def overview(context):
    """The console's overview: the broker's figures (with its memory state), its
    clients' egress queues and the egress buffer load factor (S9.6; None when the
    broker has no load watch, as in unit tests)."""
    sources = context.metrics
    factor = getattr(sources, "load_factor", None)
    load = None
    if factor is not None:
        load = {"percent": factor.percent, "used_bytes": factor.used_bytes,
                "budget_bytes": factor.budget_bytes, "set_percent": factor.set_pct,
                "clear_percent": factor.clear_pct, "raised": factor.raised}
    return {"broker": broker_snapshot(context), "egress": egress_snapshot(context),
            "load_factor": load}


class LatestReading:
    """C{read()} done at most once per C{fresh} seconds, whoever asks: a reading of
    the overview walks every destination (some 13 ms of CPU at 10,000), and each open
    console asks for one a second; they share it."""

    def __init__(self, read, fresh=0.5):
        self._read = read
        self._fresh = fresh
        self._at = None
        self._value = None

    def __call__(self, now):
        if self._at is None or not 0 <= now - self._at < self._fresh:
            self._value, self._at = self._read(), now
        return self._value


class OverviewRates:
    """One console's overview readings one after another (from C{read(now)}, shared
    with the others), each with the broker's message rates since the one before
    (C{messages_in_per_second}, ...; None the first time)."""

    def __init__(self, read):
        self._read = read
        self._last = None   # (time, broker figures)

    def reading(self, now):
        data = dict(self._read(now))
        figures = data["broker"]
        last, self._last = self._last, (now, figures)
        for key in ("messages_in", "messages_out", "bytes_in", "bytes_out"):
            rate = None
            if last is not None and now > last[0]:
                rate = max(0.0, (figures[key] - last[1][key]) / (now - last[0]))
            data[f"{key}_per_second"] = rate
        data["time"] = now
        return data
