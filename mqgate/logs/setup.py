# -*- test-case-name: tests.logs.test_setup -*-
"""
Build the broker's log observer from the settings (``mqgate.log.*``) and from where
twistd was told to log.

twistd asks the application for its log observer before it starts logging; mqgate
gives it one observer that writes two outputs:

- the console: the stream of ``mqgate.log.console.stream`` when twistd runs in the
  foreground (``-n``), or the file of twistd's ``--logfile`` (rolled over by twistd's
  rule, past 1 MB); a daemon without ``--logfile`` has no console;
- the log file ``mqgate.log.file.dirpath/filename`` (VARHOME/instances/NAME/log/log.txt
  by default), rolled over by size and age.

Each output has its own categories (``.output``); the level applies to both.
"""

import os
import sys

from twisted.python import logfile

from mqgate.logs.files import RollingLogFile
from mqgate.logs.observers import (
    FilteredObserver, LineObserver, LogPlan, fan_out, json_line, parse_output,
    text_line)

__all__ = ["log_file_path", "log_plan", "CONSOLE_STREAM", "NO_CONSOLE"]

#: log_plan(console=...): the console is the stream mqgate.log.console.stream names.
CONSOLE_STREAM = "stream"
#: log_plan(console=...): there is no console (a daemon without --logfile).
NO_CONSOLE = None

#: mqgate.log.console.stream's words, OpenMQ's included, and the stream each names.
_STREAMS = {"stdout": "stdout", "OUT": "stdout", "stderr": "stderr", "ERR": "stderr"}


def log_file_path(settings):
    """The path of the broker's log file."""
    directory = settings["mqgate.log.file.dirpath"] or os.path.join(
        settings.instance_dir, "log")
    return os.path.join(directory, settings["mqgate.log.file.filename"])


def log_plan(settings, *, console, clock, streams=None):
    """Return the L{LogPlan}: the observer for twistd and where the log goes.

    @param console: L{CONSOLE_STREAM}, L{NO_CONSOLE}, or the path twistd's --logfile
        names.
    @param clock: the time in seconds, for the log file's age (the reactor's seconds).
    @param streams: C{{"stdout": ..., "stderr": ...}}; the process's own by default.
        Taken now: once twistd logs, C{sys.stdout} is redirected into the log, and
        writing the log to it would go round in circles.
    """
    if streams is None:
        streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    level = settings["mqgate.log.level"]
    console_categories = parse_output(settings["mqgate.log.console.output"])
    file_categories = parse_output(settings["mqgate.log.file.output"])

    console_observer = console_name = None
    if console is not None and console_categories:
        if console == CONSOLE_STREAM:
            console_name = _STREAMS[settings["mqgate.log.console.stream"]]
            stream = streams[console_name]
        else:
            console_name = console
            stream = logfile.LogFile.fromFullPath(console)
        console_observer = FilteredObserver(
            LineObserver(stream, text_line), level, console_categories)

    file_observer = file_path = log_file = None
    if file_categories:
        file_path = log_file_path(settings)
        log_file = RollingLogFile(
            file_path,
            rollover_bytes=settings["mqgate.log.file.rolloverbytes"],
            rollover_secs=settings["mqgate.log.file.rolloversecs"],
            max_files=settings["mqgate.log.file.maxfiles"],
            clock=clock, errors=streams["stderr"])
        form = json_line if settings["mqgate.log.file.format"] == "json" else text_line
        file_observer = FilteredObserver(
            LineObserver(log_file, form), level, file_categories)

    return LogPlan(observer=fan_out(console_observer, file_observer),
                   console=console_name, file=file_path, log_file=log_file)
