# -*- test-case-name: tests.logs.test_files -*-
"""
The broker's log file: rolled over by size and by age, with a bounded number of old files.

``RollingLogFile`` is written by the log observer on the reactor thread, one line per
event, as twistd's own log file is. Before a line is written the file is rolled over
when the line would take it past ``rollover_bytes``, or when it was begun
``rollover_secs`` ago or more: ``FILE`` becomes ``FILE.1``, ``FILE.1`` becomes
``FILE.2`` ... and the oldest past ``max_files`` is deleted. The age is measured on the
clock it is given (the reactor's ``seconds``; a ``task.Clock`` in tests), from the time
this process began the file: a restart starts the count again, and the size limit
bounds a file that a broker restarted every day would otherwise keep.
"""

import os
import sys

__all__ = ["RollingLogFile", "NO_LIMIT"]

#: rollover_bytes / rollover_secs value meaning "never roll over for this reason".
NO_LIMIT = -1


class RollingLogFile:
    """An append-only, owner-only text file (the log names users and addresses).

    @param path: the file; its directory is made (owner-only) when missing.
    @param rollover_bytes: roll over before a line would pass this size; L{NO_LIMIT}
        for never.
    @param rollover_secs: roll over once the file is this many seconds old; L{NO_LIMIT}
        (or 0) for never.
    @param max_files: old files kept beside the current one (FILE.1 ... FILE.N).
    @param clock: a callable returning the time in seconds.
    @param errors: where a failure to write is reported (a file-like object); the
        log cannot report its own failure through itself.
    """

    def __init__(self, path, *, rollover_bytes, rollover_secs, max_files, clock,
                 errors=None):
        self.path = os.fspath(path)
        self._rollover_bytes = rollover_bytes
        self._rollover_secs = rollover_secs
        self._max_files = max_files
        self._clock = clock
        self._errors = errors
        self._fd = None
        self._size = 0
        self._begun = 0.0
        self._failing = False

    def write(self, text):
        """Append C{text} (one or more whole lines), rolling over first if due.

        Never raises: a log that cannot be written (a full disk) must not take the
        broker down, so the failure is reported once on C{errors} and the line lost.
        """
        data = text.encode("utf-8", "replace")
        try:
            if self._fd is None:
                self._open()
            if self._due(len(data)):
                self._roll_over()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self._size += len(data)
        except OSError as error:
            self._report(error)
            return
        if self._failing:
            self._failing = False
            self._say(f"mqgate: writing the log file {self.path} works again\n")

    def flush(self):
        """Nothing to do: every line goes straight to the operating system."""

    def close(self):
        """Close the file; a later write opens it again."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def old_files(self):
        """The paths of the old files there are now, newest first."""
        return [f"{self.path}.{n}" for n in range(1, self._max_files + 1)
                if os.path.exists(f"{self.path}.{n}")]

    def _due(self, length):
        if not self._size:
            return False   # an empty file is never rolled over: a line longer than the
                           # limit goes into a file of its own
        if self._rollover_bytes > 0 and self._size + length > self._rollover_bytes:
            return True
        return (self._rollover_secs > 0
                and self._clock() - self._begun >= self._rollover_secs)

    def _open(self):
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._begun = self._clock()

    def _roll_over(self):
        self.close()
        # Shift from the oldest down, so that nothing is overwritten before it moved;
        # the one past max_files is dropped.
        oldest = f"{self.path}.{self._max_files}"
        if os.path.exists(oldest):
            os.remove(oldest)
        for n in range(self._max_files - 1, 0, -1):
            if os.path.exists(f"{self.path}.{n}"):
                os.replace(f"{self.path}.{n}", f"{self.path}.{n + 1}")
        if self._max_files > 0:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.remove(self.path)
        self._open()

    def _report(self, error):
        self.close()
        if not self._failing:
            self._failing = True
            self._say(f"mqgate: cannot write the log file {self.path} "
                      f"({error.strerror or error}); its lines are lost until it can\n")

    def _say(self, text):
        stream = self._errors if self._errors is not None else sys.__stderr__
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass   # no stderr left either (a daemon): nothing more can be done
