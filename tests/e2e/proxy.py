"""A throw-away HTTP proxy for the tunnel's end-to-end tests: Debian's tinyproxy on a
free loopback port, with its own configuration file in a temporary directory, started
and stopped (and restarted on the same port) by the test.

Like tests/ldapserver.py: L{start_for_test} skips the test when tinyproxy is missing,
or fails it under C{make test} (C{MQGATE_REQUIRE_TINYPROXY=1}) or CI, where the
Makefile installs it.
"""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["TinyProxy", "ProxyUnavailable", "start_for_test", "find_tinyproxy"]

START_TIMEOUT = 10.0


class ProxyUnavailable(Exception):
    """tinyproxy is missing or would not start."""


def find_tinyproxy():
    """The path of the tinyproxy binary, or None."""
    for candidate in (shutil.which("tinyproxy"), "/usr/bin/tinyproxy",
                      "/usr/sbin/tinyproxy"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TinyProxy:
    """One tinyproxy process on 127.0.0.1 (L{url}); L{restart} keeps its port.

    @param directory: where its configuration and log go.
    @ivar requests: not counted; the log file (L{log}) has one line per request.
    """

    def __init__(self, directory):
        self.binary = find_tinyproxy()
        if self.binary is None:
            raise ProxyUnavailable("tinyproxy is not installed (Debian package tinyproxy; "
                                   "make install-test installs it)")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.directory / "tinyproxy.log"
        self.config = self.directory / "tinyproxy.conf"
        # No ConnectPort line: CONNECT is allowed to any port (the https tunnel's is
        # dynamic). Timeout above the longest pull.
        self.config.write_text(
            f"Port {self.port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 100\n"
            f"LogLevel Info\nAllow 127.0.0.1\nDisableViaHeader Yes\n", encoding="utf-8")
        self._process = None
        self._output = None

    def start(self):
        """Start it and wait until it accepts connections."""
        self._output = open(self.log, "ab")
        self._process = subprocess.Popen([self.binary, "-d", "-c", str(self.config)],
                                         stdin=subprocess.DEVNULL, stdout=self._output,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ProxyUnavailable(f"tinyproxy exited with {self._process.returncode}: "
                                       f"{self.log.read_text(errors='replace')[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ProxyUnavailable(f"tinyproxy did not listen on {self.port} within "
                               f"{START_TIMEOUT} s")

    def stop(self):
        """Kill it at once (its connections drop, as in a crash)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)
        if self._output is not None:
            self._output.close()
            self._output = None

    def restart(self):
        """Kill it and start it again on the same port."""
        self.stop()
        return self.start()

    def requests_seen(self):
        """How many requests the proxy logged (proves the traffic went through it)."""
        text = self.log.read_text(errors="replace")
        return text.count("Request (file descriptor")


def proxy_required():
    """Whether a missing tinyproxy must fail the tests instead of skipping them."""
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("MQGATE_REQUIRE_TINYPROXY", "") not in ("", "0"))


def start_for_test(directory):
    """Start a throw-away tinyproxy for a pytest fixture, or skip (or fail) the test."""
    import pytest
    try:
        return TinyProxy(directory).start()
    except ProxyUnavailable as e:
        if proxy_required():
            pytest.fail(f"tinyproxy is required here but unavailable: {e}", pytrace=False)
        pytest.skip(f"tinyproxy unavailable: {e}")
