# -*- test-case-name: tests.security.test_guard -*-
"""
The login guard (S4.2): what stands between a flood of logins and the slow password hash.

A password check costs tens of milliseconds of CPU by design (L{mqgate.security.users}).
Without a guard, anyone who can open sockets can queue checks without end and keep the
threads busy, and can guess passwords as fast as the CPU allows. L{LoginGuard} wraps the
real authenticator and adds three rules:

- B{bounded checks}: at most C{max_pending} checks per service are running or queued
  at a time; one more is refused at once with L{LoginBusy} ("the broker is busy, try
  again"), which costs nothing. Per service, so that a flood on one service never
  refuses the logins of another (the admin service stays reachable);
- B{slowed failures} (L{FailureThrottle}): a token bucket per address. Each address
  has C{free_failures} failed logins that cost nothing, and gets one back every
  C{window / free_failures} seconds (all of them after C{window} seconds without a
  failure); an address that fails no faster than that is never slowed. Once they are
  spent, each further attempt from it waits before it is checked, twice as long each
  time up to C{max_delay}, and attempts from one address wait one behind the other. Once an address has failed, its attempts still being
  checked count as failures to come, so that opening many connections at once buys it
  no more free guesses; an address without failures is not held back, so that many
  clients behind one address may all log in at once (after a broker restart, say).
  The table of addresses is bounded (the least recently active forgotten first);
- B{quiet logs} (L{LogBudget}): a failed login is logged with its address and user
  name, but at most C{lines} lines a minute; the next line says how many were left out.

Time comes from an injected C{IReactorTime}; nothing here touches a socket or a thread.
"""

import collections

from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import implementer

from mqgate.errors import ConfigError
from mqgate.security.auth import AuthenticationFailed, IAuthenticator, RepositoryUnavailable

__all__ = ["LoginBusy", "FailureThrottle", "LogBudget", "LoginGuard"]

# Attempts waiting for their turn (slowed down) at most, broker-wide: each holds a timer
# until its turn; past this one more is refused as busy instead of being scheduled.
MAX_WAITING = 1024
# The doubling stops here (2**20 times the first delay is far past any cap).
_MAX_DOUBLINGS = 20


_BUSY = "the broker is busy checking other logins; try again later"
_SLOWED = "too many failed logins from this address; try again later"


class LoginBusy(AuthenticationFailed):
    """This login was refused without a check: too many are being checked, or its
    address is slowed down too far.

    @ivar setting: the setting an operator would change, for the log.
    """

    def __init__(self, username, reason="too many logins being checked",
                 setting="mqgate.authentication.max_pending_checks", message=_BUSY):
        super().__init__(username, reason)
        self.setting = setting
        self.args = (message,)

    def __str__(self):
        return self.args[0]


class FailureThrottle:
    """Failed logins per source address, and how long the next attempt must wait.

    @param clock: an C{IReactorTime}.
    @param free_failures: failures that cost nothing: the bucket's size.
    @param window: seconds after its last failure an address is forgiven; one failure
        is forgiven every C{window / free_failures} seconds meanwhile (the refill).
    @param first_delay: the wait after the first failure beyond the free ones; each
        further one doubles it.
    @param max_delay: the longest wait between two attempts from one address.
    @param max_sources: addresses remembered at most (least recently failed dropped).
    """

    def __init__(self, clock, *, free_failures=5, window=60.0, first_delay=0.5,
                 max_delay=10.0, max_sources=10000):
        if max_sources < 1:
            raise ConfigError("max_sources", max_sources, "at least 1")
        self._clock = clock
        self.free_failures = free_failures
        self.window = window
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.max_sources = max_sources
        self._sources = collections.OrderedDict()   # source -> _Record, oldest first
        # Seconds after which one failure of an address no longer counts.
        self.refill = window / free_failures if free_failures else None

    def __len__(self):
        return len(self._sources)

    def failures(self, source):
        """Failures of C{source} that still count."""
        record = self._current(source)
        return record.failures if record is not None else 0

    def admit(self, source):
        """Seconds from now at which an attempt from C{source} may be checked (0: now).

        The attempt takes that turn: the next one from C{source} waits behind it. Each
        admitted attempt must be ended by L{failed} or L{settled}: until then it counts
        as a failure to come, once C{source} has failed at all."""
        record = self._touch(source)
        ahead = record.failures + record.in_flight if record.failures else 0
        record.in_flight += 1
        if ahead < self.free_failures:
            return 0.0
        now = self._clock.seconds()
        turn = max(now, record.next_turn) + self._delay(ahead)
        record.next_turn = turn
        return turn - now

    def failed(self, source):
        """An attempt from C{source} failed."""
        record = self._touch(source)
        record.in_flight = max(0, record.in_flight - 1)
        if not record.failures:
            record.refilled = record.last   # the refill counts from the first failure
        record.failures += 1

    def settled(self, source):
        """An attempt from C{source} ended without failing (or was never checked)."""
        record = self._sources.get(source)
        if record is not None:
            record.in_flight = max(0, record.in_flight - 1)

    def _touch(self, source):
        """The record of C{source}, made the most recently active (created if need be;
        the least recently active dropped past C{max_sources})."""
        record = self._current(source)
        if record is None:
            record = self._sources[source] = _Record()
        record.last = self._clock.seconds()
        self._sources.move_to_end(source)
        while len(self._sources) > self.max_sources:
            self._sources.popitem(last=False)
        return record

    def _delay(self, failures):
        doublings = min(failures - self.free_failures, _MAX_DOUBLINGS)
        return min(self.first_delay * 2 ** doublings, self.max_delay)

    def _current(self, source):
        record = self._sources.get(source)
        if record is None:
            return None
        now = self._clock.seconds()
        if now - record.last >= self.window:
            del self._sources[source]   # forgiven
            return None
        if record.failures and self.refill:
            earned = int((now - record.refilled) // self.refill)
            if earned:
                record.failures = max(0, record.failures - earned)
                record.refilled += earned * self.refill
        return record


class _Record:
    __slots__ = ("failures", "in_flight", "last", "next_turn", "refilled")

    def __init__(self):
        self.failures = 0
        self.in_flight = 0     # admitted attempts not ended yet
        self.last = 0.0        # last activity: the window counts from here
        self.next_turn = 0.0
        self.refilled = 0.0    # when the bucket last got a failure back


class LogBudget:
    """At most C{lines} log lines per C{interval} seconds, counting what it held back.

    @param clock: an C{IReactorTime}.
    """

    def __init__(self, clock, lines=10, interval=60.0):
        self._clock = clock
        self.lines = lines
        self.interval = interval
        self._start = None
        self._used = 0
        self._held = 0

    def take(self):
        """C{None} when the line must be left out; else how many were left out before
        it (to say so in the line)."""
        now = self._clock.seconds()
        if self._start is None or now - self._start >= self.interval:
            self._start, self._used = now, 0
        if self._used >= self.lines:
            self._held += 1
            return None
        self._used += 1
        held, self._held = self._held, 0
        return held


@implementer(IAuthenticator)
class LoginGuard:
    """An L{IAuthenticator} that bounds and slows the checks of another one.

    @param checker: the real L{IAuthenticator} (the slow hash behind it).
    @param clock: an C{IReactorTime}.
    @param max_pending: checks running or queued at most, per service; one more is
        L{LoginBusy}.
    @param throttle: a L{FailureThrottle}, or None for none.
    @param log_budget: a L{LogBudget} for the failed-login lines (default 10 a minute).
    @param horizon: seconds ahead an attempt may be scheduled at most; an address
        slowed down further than this is refused at once (its client would have given
        up, or been closed by the login deadline, before its turn).
    """

    log = Logger()

    def __init__(self, checker, clock, *, max_pending=32, throttle=None, log_budget=None,
                 horizon=60.0):
        if max_pending < 1:
            raise ConfigError("max_pending", max_pending, "at least 1")
        self._checker = checker
        self._clock = clock
        self.max_pending = max_pending
        self.throttle = throttle
        self._log_budget = log_budget or LogBudget(clock)
        self.horizon = horizon
        self._pending = collections.Counter()   # service -> checks not answered yet
        self.waiting = 0     # attempts slowed down, waiting for their turn
        self.refused_busy = 0

    @property
    def pending(self):
        """Checks handed to the checker and not answered yet, all services together."""
        return sum(self._pending.values())

    def authenticate(self, username, password, source=None, service=None):
        """See L{IAuthenticator.authenticate}; C{source} is the client's address,
        C{service} the connection service it came through."""
        delay = self.throttle.admit(source) if self.throttle is not None and source else 0.0
        if delay <= 0:
            d = self._check(username, password, service)
        elif delay > self.horizon:
            d = defer.fail(LoginBusy(
                username, f"its address must wait {delay:.1f} s for its turn",
                "mqgate.authentication.failures.max_delay", _SLOWED))
        elif self.waiting >= MAX_WAITING:
            d = defer.fail(LoginBusy(username, f"{MAX_WAITING} slowed-down logins waiting"))
        else:
            self.waiting += 1
            d = task.deferLater(self._clock, delay, self._turn, username, password,
                                service)
        d.addCallbacks(self._succeeded, self._failed, callbackArgs=(source,),
                       errbackArgs=(username, source))
        return d

    def authenticate_anonymous(self, source=None, service=None):
        """See L{IAuthenticator.authenticate_anonymous} (no password, no hash)."""
        return self._checker.authenticate_anonymous()

    def _turn(self, username, password, service):
        self.waiting -= 1
        return self._check(username, password, service)

    def _check(self, username, password, service):
        if self._pending[service] >= self.max_pending:
            self.refused_busy += 1
            return defer.fail(LoginBusy(username))
        self._pending[service] += 1
        d = self._checker.authenticate(username, password)
        d.addBoth(self._answered, service)
        return d

    def _answered(self, result, service):
        self._pending[service] -= 1
        if not self._pending[service]:
            del self._pending[service]
        return result

    def _succeeded(self, principal, source):
        if self.throttle is not None and source:
            self.throttle.settled(source)
        return principal

    def _failed(self, failure, username, source):
        error = failure.value
        # Only a verdict on the credentials counts: not a refusal for load, nor a
        # repository that could not answer.
        counted = isinstance(error, AuthenticationFailed) and \
            not isinstance(error, (LoginBusy, RepositoryUnavailable))
        if self.throttle is not None and source:
            if counted:
                self.throttle.failed(source)
            else:
                self.throttle.settled(source)
        if isinstance(error, AuthenticationFailed):
            self._log_failure(error, source)
        return failure

    def _log_failure(self, error, source):
        held = self._log_budget.take()
        if held is None:
            return
        more = f" ({held} more failed logins not logged)" if held else ""
        if isinstance(error, LoginBusy):
            more += f" (see {error.setting})"
        self.log.info("failed login from {source} as {user}: {reason}{more}",
                      source=source or "?", user=_short(error.username),
                      reason=error.reason, more=more)


def _short(name):
    """A client-chosen user name as a log line may show it: quoted, bounded."""
    if name is None:
        return "(anonymous)"
    return repr(name[:64] + ("..." if len(name) > 64 else ""))
