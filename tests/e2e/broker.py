"""Run the real broker as a ``twistd -n mqgate`` subprocess, for end-to-end tests.

The broker is started exactly as an operator would start it (S0.4), but on ports the
operating system chooses: ``-D`` overrides set the fixed ports of the shipped
configuration to 0, and the real ports are read back from the broker's own log, which
prints one line per listening service::

    service jms listening on 127.0.0.1:40321

Nothing here sleeps and hopes: every wait is on a line of the broker's output, with a
deadline, and a timeout or an early exit raises L{BrokerError} carrying everything the
broker printed, so a failing test shows why the broker did not come up.

This module uses only the standard library so that ``bench/`` can import it too
(``from tests.e2e.broker import BrokerProcess``) with just the repository root on
``sys.path``.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: The checkout; the broker runs with it as working directory and on PYTHONPATH.
REPO_ROOT = Path(__file__).resolve().parents[2]

#: The shipped configuration the tests start from (S0.3).
DEFAULT_CONFIG = REPO_ROOT / "etc" / "mqgate.properties"

#: The line the broker logs once per service when its port is bound.
LISTENING = re.compile(r"service (\w+) listening on ([0-9.]+):(\d+)")

#: Ports fixed by the shipped configuration, set to 0 (OS-chosen) so that tests can
#: run in parallel with each other and with a broker started by `make run` (S1.4).
EPHEMERAL_PORTS = {
    "mqgate.jms.tcp.port": "0",
    "mqgate.admin.tcp.port": "0",
    "mqgate.stomp.tcp.port": "0",
    "mqgate.portmapper.port": "0",
    "mqgate.httpadmin.http.port": "0",
}

#: Start-up covers interpreter start, plugin discovery and binding ports; on the
#: 2-core CI machine that takes a few seconds, so 30 s means "it is not coming".
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class BrokerError(Exception):
    """The broker did not do what a test waited for; carries its whole output."""

    def __init__(self, message, output):
        self.output = output
        text = "".join(output[-200:]) or "(no output)\n"
        super().__init__(f"{message}\n--- broker output ---\n{text}--- end ---")


#: ``python -c`` program equivalent to the ``twistd`` console script. Not
#: ``python -m twisted``: that runs ``twist``, Twisted's other runner, which has no
#: ``-n``/``--pidfile`` and logs JSON when its output is not a terminal.
_TWISTD_MAIN = ("import sys; from twisted.scripts.twistd import run; "
                "sys.argv[0] = 'twistd'; sys.exit(run())")


def twistd_command(*args):
    """The argv that runs ``twistd ARGS`` with this interpreter.

    The same C{twistd} as the console script, but started with C{sys.executable},
    so the broker uses the test's virtualenv whatever is on PATH.
    """
    return [sys.executable, "-c", _TWISTD_MAIN, *args]


def broker_environment(extra=None):
    """The environment for a twistd child: the checkout first on PYTHONPATH, unbuffered.

    The checkout on PYTHONPATH makes ``twisted/plugins/mqgate_plugin.py`` visible to
    Twisted's plugin search even where mqgate is not installed (e.g. a virtualenv
    made by hand); PYTHONUNBUFFERED makes each log line reach us when it is written.

    PYTHONDONTWRITEBYTECODE is dropped: with it, no broker keeps the bytecode of the
    mqgate modules it compiles, so every one of the hundreds of brokers a test run
    starts compiles them all again from source (about a quarter of a second of CPU
    each). The caches go to the ``__pycache__`` directories git ignores.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class BrokerProcess:
    """A ``twistd -n mqgate`` child process and everything it has printed.

    Use L{start} (or the C{broker}/C{broker_factory} fixtures), then L{port} to
    connect, and L{terminate} for an orderly shutdown. stdout and stderr are merged
    and read line by line in a daemon thread, so the pipe never fills up.

    @ivar varhome: the VARHOME directory (S0.5) given to the broker.
    @ivar output: every line printed so far (with its newline), in order.
    """

    def __init__(self, varhome, defines=None, config=DEFAULT_CONFIG,
                 instance=None, extra_args=()):
        """
        @param varhome: directory for the broker's data (a test's C{tmp_path}).
        @param defines: C{{key: value}} given as ``-D key=value`` after the
            ephemeral-port overrides, so they can replace them.
        @param config: the properties file (default: the shipped etc/ file).
        @param instance: instance name (``--instance``), or L{None} for the default.
        @param extra_args: more arguments for the mqgate plugin, appended last.
        """
        self.varhome = Path(varhome)
        self.output = []
        self._defines = dict(EPHEMERAL_PORTS)
        self._defines.update(defines or {})
        self._config = Path(config)
        self._instance = instance
        self._extra_args = list(extra_args)
        self._process = None
        self._reader = None
        self._eof = False
        self._changed = threading.Condition()

    # -- starting --------------------------------------------------------------

    def command(self):
        """The full argv of the broker process."""
        args = ["--pidfile", str(self.varhome / "twistd.pid"), "-n", "mqgate",
                "--config", str(self._config), "--varhome", str(self.varhome)]
        # --pidfile: twistd writes twistd.pid into its working directory (the
        # checkout) even with -n, and refuses to start while another broker's pid
        # file is there; each broker keeps its own under its VARHOME.
        if self._instance is not None:
            args += ["--instance", self._instance]
        for key, value in self._defines.items():
            args += ["-D", f"{key}={value}"]
        return twistd_command(*args, *self._extra_args)

    def spawn(self):
        """Start the process and the output reader; do not wait for anything."""
        self.varhome.mkdir(parents=True, exist_ok=True)
        return self._launch(REPO_ROOT, broker_environment())

    def _launch(self, cwd, env):
        """Run L{command} in C{cwd} with the environment C{env}, stdin closed, and
        start reading its output; a subclass that runs another twistd (an installed
        one) gives its own directory and environment here."""
        self._process = subprocess.Popen(
            self.command(), cwd=str(cwd), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._reader = threading.Thread(
            target=self._read_output, name="broker-output", daemon=True)
        self._reader.start()
        return self

    def start(self, service="jms", timeout=START_TIMEOUT):
        """Start the broker and wait until C{service} is listening.

        @return: C{self}.
        @raise BrokerError: the broker exited or did not listen within C{timeout}.
        """
        self.spawn()
        self.port(service, timeout=timeout)
        return self

    def _read_output(self):
        for line in self._process.stdout:
            with self._changed:
                self.output.append(line)
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    # -- watching ----------------------------------------------------------------

    @property
    def pid(self):
        """The broker's process id."""
        return self._process.pid

    @property
    def returncode(self):
        """The exit code, or L{None} while the broker runs."""
        return self._process.poll()

    def wait_for_line(self, regex, timeout=START_TIMEOUT):
        """Wait until a line of output matches C{regex}, searching from the start.

        @param regex: a pattern (string or compiled), searched with C{re.search}.
        @return: the C{re.Match} of the first matching line.
        @raise BrokerError: the output ended (the broker exited) or C{timeout}
            seconds passed without a match.
        """
        pattern = re.compile(regex)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.output[seen:]:
                    match = pattern.search(line)
                    if match:
                        return match
                seen = len(self.output)
                if self._eof:
                    raise BrokerError(
                        f"broker exited (code {self._exit_code()}) before printing "
                        f"a line matching {pattern.pattern!r}", self.output)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrokerError(
                        f"no line matching {pattern.pattern!r} within {timeout} s",
                        self.output)
                self._changed.wait(remaining)

    def _exit_code(self):
        """The exit code once the output has ended (the process is exiting)."""
        try:
            return self._process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            return "unknown: closed its output but still runs"

    def ports(self):
        """C{{service: port}} for every listening line printed so far."""
        found = {}
        with self._changed:
            for line in self.output:
                match = LISTENING.search(line)
                if match:
                    found[match.group(1)] = int(match.group(3))
        return found

    def port(self, service="jms", timeout=START_TIMEOUT):
        """The port C{service} is bound to, waiting for its listening line."""
        match = self.wait_for_line(
            rf"service {re.escape(service)} listening on ([0-9.]+):(\d+)", timeout)
        return int(match.group(2))

    def address(self, service="jms", timeout=START_TIMEOUT):
        """C{(host, port)} of C{service}, as the broker logged it."""
        match = self.wait_for_line(
            rf"service {re.escape(service)} listening on ([0-9.]+):(\d+)", timeout)
        return match.group(1), int(match.group(2))

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """Wait for the process to exit and its output to be read; return its code.

        @raise BrokerError: still running after C{timeout} seconds.
        """
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BrokerError(f"broker still running after {timeout} s",
                              self.output) from None
        if self._reader is not None:
            # The pipe closes when the process (and any child holding it) exits.
            self._reader.join(timeout)
        return code

    def exit_output(self, timeout=STOP_TIMEOUT):
        """Wait for the process to exit (a start-up meant to fail); return
        C{(exit code, everything it printed)}."""
        code = self.wait_exit(timeout)
        return code, "".join(self.output)

    # -- stopping ---------------------------------------------------------------

    def wait_until_catching_sigterm(self, timeout=START_TIMEOUT):
        """Wait until the broker handles SIGTERM itself, or it exits.

        The broker installs its SIGTERM handler once the reactor runs and then logs
        "mqgate ready"; waiting for that line is waiting on the event itself.

        @raise BrokerError: neither happened within C{timeout} seconds.
        """
        try:
            self.wait_for_line(r"mqgate ready", timeout)
        except BrokerError:
            if self._process.poll() is None:
                raise  # still running and never ready: worth saying

    def terminate(self, timeout=STOP_TIMEOUT):
        """SIGTERM (an orderly shutdown, S0.4), then wait; return the exit code.

        The signal is sent once the broker handles it (twistd binds the ports before
        the reactor runs and installs signal handlers; a SIGTERM in between would kill
        it), so an early terminate still means "shut down cleanly", never "die".

        @raise BrokerError: the broker did not exit within C{timeout} (it is then
            left running for L{kill}, which the fixtures always call).
        """
        self.wait_until_catching_sigterm(timeout)
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self):
        """SIGKILL the broker if it still runs, and reap it. Safe to call twice."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        if self._reader is not None:
            self._reader.join(5)
        if self._process.stdout is not None:
            self._process.stdout.close()
