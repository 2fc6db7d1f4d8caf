# -*- test-case-name: tests.logs.test_observers -*-
"""
Log observers built from the ``mqgate.log.*`` settings: which events, in what form, where.

Two settings choose the events an output writes, as in OpenMQ:

- ``mqgate.log.level`` (ERROR, WARNING, INFO, DEBUG) is a threshold: each level
  includes the ones above it, so INFO lets ERROR, WARNING and INFO events through.
- ``mqgate.log.console.output`` and ``mqgate.log.file.output`` are *sets* of
  categories written ``ERROR|WARNING``: an output writes exactly the categories named,
  with no implied inclusion (``INFO`` alone writes no errors); ``ALL`` and ``NONE``
  name every category and none.

An event goes to an output when it passes both. Twisted's levels map onto the
categories: critical and error are ERROR, warn is WARNING, info is INFO, debug is
DEBUG. Lines are text (twistd's own layout: time, ``[namespace#level]``, message, a
traceback after it when there is one) or JSON, one object per line.
"""

import json
from datetime import datetime, timezone

import attrs
from twisted.logger import (
    LogLevel, formatEvent, formatEventAsClassicLogText, LogPublisher)
from twisted.python import failure

from mqgate.config.schema import LOG_OUTPUT_PATTERN

__all__ = ["CATEGORIES", "LEVELS", "parse_output", "category_of",
           "FilteredObserver", "text_line", "json_line", "LineObserver",
           "LogPlan", "fan_out"]

#: The categories, most severe first; mqgate.log.level takes the same words.
CATEGORIES = ("ERROR", "WARNING", "INFO", "DEBUG")
LEVELS = CATEGORIES

_CATEGORY_OF_LEVEL = {
    LogLevel.critical: "ERROR",
    LogLevel.error: "ERROR",
    LogLevel.warn: "WARNING",
    LogLevel.info: "INFO",
    LogLevel.debug: "DEBUG",
}


def parse_output(text):
    """Return the frozenset of categories an output setting names.

    Raises:
        ValueError: a word is not a category, ALL or NONE.
    """
    if not LOG_OUTPUT_PATTERN.fullmatch(text):
        raise ValueError(text)
    words = {word.strip().upper() for word in text.split("|")}
    if "ALL" in words:
        return frozenset(CATEGORIES)
    return frozenset(words - {"NONE"})


def category_of(event):
    """The category of a log event; an event without a level (legacy) is INFO."""
    return _CATEGORY_OF_LEVEL.get(event.get("log_level"), "INFO")


@attrs.frozen
class FilteredObserver:
    """Pass an event on to C{observer} when its category is within C{level} and in
    C{categories} (see the module's docstring)."""

    observer: object
    level: str
    categories: frozenset

    def __call__(self, event):
        category = category_of(event)
        if (CATEGORIES.index(category) <= CATEGORIES.index(self.level)
                and category in self.categories):
            self.observer(event)


def text_line(event):
    """The event as twistd writes it, with its traceback; None if it has no text."""
    return formatEventAsClassicLogText(event)


def json_line(event):
    """The event as one JSON object and a newline.

    Fields: ``time`` (ISO 8601, UTC, milliseconds), ``level`` (the category),
    ``namespace``, ``message`` and, when there is one, ``traceback``.
    """
    when = event.get("log_time")
    record = {
        "time": (datetime.fromtimestamp(when, timezone.utc)
                 .isoformat(timespec="milliseconds") if when is not None else None),
        "level": category_of(event),
        "namespace": event.get("log_namespace"),
        "message": formatEvent(event),
    }
    problem = event.get("log_failure")
    if isinstance(problem, failure.Failure):
        record["traceback"] = problem.getTraceback()
    return json.dumps(record, ensure_ascii=False, default=str) + "\n"


@attrs.frozen
class LineObserver:
    """Write each event to C{stream} (a file-like object with write/flush) as the line
    C{format} makes of it."""

    stream: object
    format: object = text_line

    def __call__(self, event):
        line = self.format(event)
        if line:
            self.stream.write(line)
            self.stream.flush()


def fan_out(*observers):
    """One observer that hands each event to every one of C{observers} (None skipped)."""
    return LogPublisher(*(o for o in observers if o is not None))


@attrs.frozen
class LogPlan:
    """Where the broker's log goes, for the start-up banner.

    @ivar observer: the one observer to give twistd (console and file together).
    @ivar console: the console's destination (C{"stdout"}, C{"stderr"}, a file name
        given with twistd --logfile) or None.
    @ivar file: the path of mqgate's log file, or None.
    @ivar log_file: the L{RollingLogFile}, or None.
    """

    observer: object
    console: str | None
    file: str | None
    log_file: object = None

    def describe(self):
        """One phrase for the banner: where the log goes."""
        places = [f"the console ({self.console})" if self.console else None,
                  self.file]
        places = [p for p in places if p]
        return " and ".join(places) if places else "nowhere (both outputs are NONE)"
