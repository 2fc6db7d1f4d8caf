"""
What the admin's broker commands act on (S11.1): the services, the connections, and the
broker's own life (C{pause|resume|shutdown|restart bkr}).

Stopping is always the clean path SIGTERM takes: the reactor is stopped, the services
stop in reverse order (connections closed in their protocols' words, unsettled
deliveries given back), the store is flushed and closed, twistd removes its pid file,
and the process exits with code 0.

Restarting is that, then the process re-executes itself: once the interpreter exits
(after twistd has removed its pid file, which would otherwise make the new twistd
refuse to start, the pid being the same), C{os.execv} runs the same command line again
in the directory it was started from. The process keeps its pid; a daemonized broker
(twistd without C{-n}) daemonizes again and so gets a new pid, written to its pid file.
"""

import atexit
import os
import socket
import sys

from twisted.logger import Logger

from mqgate import __version__

__all__ = ["BrokerControl", "REPLY_GRACE", "reexec"]

#: Seconds a stop waits at least, so that the reply to the command that asked for it
#: is written out first: the reply is routed and flushed in the reactor's next turns,
#: and the connections are closed as soon as the stop begins.
REPLY_GRACE = 0.5


def reexec(argv, cwd):
    """Replace this process with C{argv} run from C{cwd} (what L{restart} ends with)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os.chdir(cwd)
    os.execv(sys.executable, argv)


class BrokerControl:
    """The broker as the admin commands see it: its services, connections, core and
    the way to stop or restart it.

    @param services: the L{mqgate.net.services.ConnectionService}s, port mapper first.
    @param connections: the L{mqgate.net.connections.ConnectionRegistry}: the broker's
        one count of open connections, which the metrics snapshot reads too
        (L{mqgate.metrics.snapshot.MetricsSources} holds the same object).
    @param broker: the core L{mqgate.core.broker.Broker}.
    @param store: what the store is (C{"file store in DIR, sync on"}), or None.
    @param at_exit: registers a function to run at interpreter exit (L{atexit}).
    @param execute: C{execute(argv, cwd)}: L{reexec}.
    """

    log = Logger()

    def __init__(self, reactor, *, instance, services=(), connections=None, broker=None,
                 store=None, at_exit=atexit.register, execute=reexec):
        self._reactor = reactor
        self.instance = instance
        self.services = list(services)
        self.connections = connections
        self.broker = broker
        self.store = store
        self.started_at = reactor.seconds()
        self.stopping = None   # "shutdown" or "restart" once asked for
        self._at_exit = at_exit
        self._execute = execute
        # Taken now, while twistd has not changed anything yet: what to run again.
        self._argv = list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
        self._cwd = os.getcwd()

    # -- reading ---------------------------------------------------------------------

    def service(self, name):
        """The service called C{name}, or None."""
        for service in self.services:
            if service.name == name:
                return service
        return None

    @property
    def normal_services(self):
        return [s for s in self.services if s.kind == "NORMAL"]

    @property
    def state(self):
        """C{RUNNING}, C{PAUSED} (every NORMAL service paused), or C{SHUTTING_DOWN} /
        C{RESTARTING} once asked for."""
        if self.stopping is not None:
            return {"shutdown": "SHUTTING_DOWN", "restart": "RESTARTING"}[self.stopping]
        normal = self.normal_services
        if normal and all(s.paused for s in normal):
            return "PAUSED"
        return "RUNNING"

    def now(self):
        """The clock's time (connections' ages are counted on it)."""
        return self._reactor.seconds()

    @property
    def uptime(self):
        return self._reactor.seconds() - self.started_at

    @property
    def host(self):
        return socket.gethostname()

    @property
    def version(self):
        return __version__

    # -- acting ----------------------------------------------------------------------

    def pause(self):
        """Pause every NORMAL service; ADMIN ones keep working. Returns their names."""
        paused = [s.name for s in self.normal_services if not s.paused]
        for service in self.normal_services:
            service.pause()
        return paused

    def resume(self):
        """Resume every NORMAL service. Returns the names of those that were paused."""
        resumed = [s.name for s in self.normal_services if s.paused]
        for service in self.normal_services:
            service.resume()
        return resumed

    def shutdown(self, delay=0.0, user=None):
        """Stop the broker cleanly in C{delay} seconds (the SIGTERM path, exit 0)."""
        self._stop("shutdown", delay, user)

    def restart(self, user=None):
        """Stop the broker cleanly, then run it again (see the module's docstring)."""
        if self._stop("restart", 0.0, user):
            self._at_exit(self._reexec)

    def stop_for_good(self):
        """A stop asked for from outside (SIGTERM) while a restart is under way: the
        process ends instead of running again (a service manager stopping it would
        otherwise see it come back)."""
        if self.stopping == "restart":
            self.log.warn("SIGTERM during the restart: stopping for good instead")
            self.stopping = "shutdown"

    def _reexec(self):
        if self.stopping == "restart":
            self._execute(self._argv, self._cwd)

    def _stop(self, how, delay, user):
        """Begin stopping, unless a stop was already asked for; True if it began."""
        if self.stopping is not None:
            return False
        self.stopping = how
        self.log.warn("broker {how} asked for by {user} (admin command); stopping in "
                      "{delay:g} s", how=how, user=user or "an administrator",
                      delay=delay)
        self._reactor.callLater(max(delay, REPLY_GRACE), self._reactor.stop)
        return True
