"""
A throw-away PostgreSQL cluster for the tests (S3.5, S12.1).

L{PostgresCluster} runs Debian's server binaries (C{/usr/lib/postgresql/*/bin}, else
C{initdb} on the PATH) on a data directory under a fresh temporary directory, on a free
loopback port, with its Unix socket in that directory too, so it never meets the
machine's own clusters. C{initdb} refuses to run as root, so as root the directory is
handed to the C{postgres} OS user and every server command runs through
C{runuser -u postgres --}.

The cluster trades durability for speed (C{fsync=off}, C{full_page_writes=off}): the
tests kill brokers, never this server, so what a broker committed is still there.

C{tests/conftest.py} wraps it in the session fixture C{postgres_cluster} (started only
when a test asks for it) and the per-test fixture C{pg_dsn} (a fresh database).
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from glob import glob
from pathlib import Path

__all__ = ["PASSWORD", "PASSWORD_ROLE", "PostgresCluster", "PostgresUnavailable",
           "find_server_binaries", "postgres_required", "start_for_test"]

#: How long the server may take to accept connections after C{pg_ctl start}.
START_DEADLINE = 60.0
#: The OS user that owns the cluster when the tests run as root.
SERVER_USER = "postgres"
#: A role that must give a password (scram-sha-256 over TCP); every other role is
#: trusted, so the DSNs the fixtures hand out carry no password.
PASSWORD_ROLE = "mqgate_pw"
PASSWORD = "mqgate-test-secret"

_HBA = f"""\
local all all trust
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


class PostgresUnavailable(Exception):
    """No server binaries, or the cluster would not start; says why."""


def postgres_required():
    """Whether a missing PostgreSQL must fail the tests instead of skipping them.

    True in CI (C{CI=true}) and under C{make test} (C{MQGATE_REQUIRE_POSTGRES=1}): the
    Makefile installs the server, so not having it there is a broken build, not a
    reason to quietly test less.
    """
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("MQGATE_REQUIRE_POSTGRES", "") not in ("", "0"))


def start_for_test():
    """Start a throw-away cluster for a pytest fixture: skip the test when PostgreSQL
    is unavailable, or fail it where it is required (L{postgres_required})."""
    import pytest   # only the test suite calls this; bench/ imports this module too
    try:
        return PostgresCluster().start()
    except PostgresUnavailable as e:
        if postgres_required():
            pytest.fail(f"PostgreSQL is required here but unavailable: {e}", pytrace=False)
        pytest.skip(f"PostgreSQL unavailable: {e}")


def find_server_binaries():
    """The directory holding C{initdb} and C{pg_ctl}, newest version first, or None."""
    candidates = sorted(glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: _version_key(Path(p).parent.parent.name),
                        reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.realpath(on_path))
    for initdb in candidates:
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def _version_key(text):
    return [int(part) if part.isdigit() else 0 for part in text.split(".")]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """One private PostgreSQL server: L{start}, L{dsn}, L{create_database}, L{stop}.

    @param durable: keep PostgreSQL's fsync on (benchmarks of synchronous commits);
        tests leave it off.
    @ivar port: the TCP port on 127.0.0.1 once started.
    @ivar superuser: the role the DSNs log in as (trust authentication).
    """

    superuser = "postgres"

    def __init__(self, bindir=None, *, durable=False):
        self.durable = durable
        self.bindir = Path(bindir) if bindir else find_server_binaries()
        if self.bindir is None:
            raise PostgresUnavailable(
                "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/"
                "initdb, no initdb on PATH); install them with "
                "`apt-get install -y postgresql` (make test does)")
        self.port = None
        self._root = None
        self._as_root = os.geteuid() == 0
        self._databases = 0
        self._version = None

    @property
    def datadir(self):
        """The cluster's data directory."""
        return self._root / "data"

    def _run(self, *argv, check=True):
        argv = [str(a) for a in argv]
        if self._as_root:
            argv = ["runuser", "-u", SERVER_USER, "--", *argv]
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=START_DEADLINE + 30)
        if check and done.returncode != 0:
            raise PostgresUnavailable(
                f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}"
                f"{self._log_tail()}")
        return done

    def _log_tail(self):
        log = self._root / "server.log" if self._root else None
        if log is None or not log.exists():
            return ""
        return "\n--- server.log ---\n" + "\n".join(log.read_text().splitlines()[-30:])

    def start(self):
        """initdb, then pg_ctl start on a free port; returns once it accepts
        connections (or raises L{PostgresUnavailable} with the server's log, having
        removed what it made)."""
        self._root = Path(tempfile.mkdtemp(prefix="mqgate-pg-"))
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        if self._as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self._root, user.pw_uid, user.pw_gid)
        os.chmod(self._root, 0o700)
        # --no-sync: nothing here has to survive a machine crash; saves seconds.
        self._run(self.bindir / "initdb", "-D", self.datadir, "-U", self.superuser,
                  "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
        hba = self.datadir / "pg_hba.conf"
        hba.write_text(_HBA)
        if self._as_root:
            os.chown(hba, user.pw_uid, user.pw_gid)
        for attempt in range(3):
            # Another process may take the port between _free_port and the bind: retry.
            self.port = _free_port()
            options = (f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1 "
                       "-c max_connections=200")
            if not self.durable:
                options += " -c fsync=off -c full_page_writes=off"
            done = self._run(self.bindir / "pg_ctl", "-D", self.datadir, "-l",
                             self._root / "server.log", "-o", options, "-w", "-t",
                             int(START_DEADLINE), "start", check=attempt == 2)
            if done.returncode == 0:
                break
        self._wait_until_accepting()
        import psycopg
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
        return self

    def _wait_until_accepting(self):
        # pg_ctl -w already waited for the postmaster; this proves a client gets in.
        import psycopg
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=5).close()
                return
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise PostgresUnavailable(
                        f"server on port {self.port} does not accept connections: "
                        f"{e}{self._log_tail()}") from None
                time.sleep(0.05)

    def dsn(self, dbname="postgres"):
        """A libpq connection string for C{dbname} as the superuser."""
        return (f"host=127.0.0.1 port={self.port} user={self.superuser} "
                f"dbname={dbname}")

    def create_database(self, name=None, owner=None):
        """Create an empty database (owned by role C{owner}, default the superuser);
        return its name (C{mqgate_N} when not given)."""
        import psycopg
        if name is None:
            self._databases += 1
            name = f"mqgate_{self._databases}"
        owned = f" OWNER {owner}" if owner else ""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            # template0 holds no extra objects and copies faster than template1.
            # PostgreSQL 15 and later copy it into the WAL by default, 7-8 MB per
            # database, which a test suite pays for in time and disk; with fsync off the
            # file copy (and its checkpoints) is the quicker way.
            strategy = " STRATEGY FILE_COPY" if self._server_version() >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0{owned}{strategy}')
        return name

    def drop_database(self, name):
        """Drop database C{name}, cutting the connections still open to it (the test is
        over; a broker still on it is killed next). A suite creates a database for each
        test, and a cluster holding all of them grows to gigabytes that take a minute
        to delete at the end."""
        import psycopg
        # Without FORCE (PostgreSQL 13+), a connection a test left open makes DROP
        # wait five seconds and fail; the database then stays until stop().
        force = " WITH (FORCE)" if self._server_version() >= 130000 else ""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"{force}')
            except psycopg.errors.ObjectInUse:
                pass

    def _server_version(self):
        import psycopg
        if self._version is None:
            with psycopg.connect(self.dsn()) as conn:
                self._version = conn.info.server_version
        return self._version

    def stop(self):
        """Stop the server (immediate: nothing in it is worth a checkpoint) and remove
        its directory."""
        if self._root is None:
            return
        try:
            if (self.datadir / "postmaster.pid").exists():
                self._run(self.bindir / "pg_ctl", "-D", self.datadir, "-m", "immediate",
                          "-w", "stop", check=False)
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
