# -*- test-case-name: tests.security.test_authcache -*-
"""
The authentication cache (S4.2): successful verifications remembered for a while.

A password check costs a deliberately slow hash. After a broker restart every client
reconnects at once, mostly with credentials the broker verified minutes ago; checking
each of them again would take the hash's time, thousands of times over, on a worker or
two. L{AuthCache} wraps any L{IAuthenticator} (the file repository's, LDAP's) and keeps
the principals of successful checks in memory, like RabbitMQ's
C{rabbitmq_auth_backend_cache}:

- B{keyed by a digest}, never by the password: HMAC-SHA256 of the user name and the
  password under a key drawn at random when the process starts. The key never leaves
  the process, so the table (in a core dump, say) gives a guesser nothing to test
  offline, and a digest costs microseconds;
- B{bounded} (C{max_entries}; the least recently used entry goes first) and
  B{expiring} (C{ttl} seconds after the check: a password changed or a user removed
  behind the broker's back is noticed within that time at the latest);
- B{cleared} when the user repository changes: C{generation()} returns a value that
  changes with every change to the repository (a reload, a user added, deleted or
  updated); a different value than the one the entries were made under drops them all;
- B{single flight}: while a check is running, other logins with the same credentials
  wait for its outcome instead of starting their own, so ten thousand clients with one
  set of credentials cost one hash. Waiters are counted, and bounded like the checks;
- B{failures are not cached, nor shared}: when a check fails with a verdict (a wrong
  password, an unknown or inactive user), each login that waited on it is checked on
  its own, so every wrong password is checked, counted against its own address, slowed
  down and logged (L{mqgate.security.guard}); when it was refused without a verdict
  (L{LoginBusy}: the guard had no room, or the leader's address is slowed down), the
  next waiter leads a new check and the others wait on that one. Only a verified
  principal is kept.

Anonymous logins cost no hash and pass through uncached. Time comes from an injected
C{IReactorTime}.
"""

import collections
import hashlib
import hmac
import os

from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from mqgate.errors import ConfigError
from mqgate.security.auth import IAuthenticator
from mqgate.security.guard import LoginBusy

__all__ = ["AuthCache"]

#: Logins waiting on another login's check at most (all keys together); one more goes
#: to the checker itself, which has its own bounds (the guard's pending checks).
MAX_WAITERS = 100000


def _no_generation():
    return 0


@implementer(IAuthenticator)
class AuthCache:
    """An L{IAuthenticator} that remembers the successful checks of another one.

    @param checker: the L{IAuthenticator} that really checks.
    @param clock: an C{IReactorTime}.
    @param ttl: seconds a verified login is remembered.
    @param max_entries: verified logins remembered at most.
    @param generation: returns the user repository's generation; a change empties the
        cache.
    @param key: the HMAC key (random when not given; tests pass one).
    """

    def __init__(self, checker, clock, *, ttl=300.0, max_entries=10000,
                 generation=_no_generation, key=None):
        if max_entries < 1:
            raise ConfigError("mqgate.authentication.cache.max_entries", str(max_entries),
                              "at least 1")
        if ttl <= 0:
            raise ConfigError("mqgate.authentication.cache.ttl", str(ttl),
                              "more than 0 seconds")
        self._checker = checker
        self._clock = clock
        self.ttl = ttl
        self.max_entries = max_entries
        self._generation = generation
        self._seen_generation = generation()
        self._key = key if key is not None else os.urandom(32)
        self._entries = collections.OrderedDict()   # digest -> (principal, expires)
        # digest -> the logins waiting on the running check of those credentials, each
        # (Deferred, username, password, source, service)
        self._flights = {}
        self.waiting = 0
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._entries)

    def authenticate(self, username, password, source=None, service=None):
        """See L{IAuthenticator.authenticate}."""
        self._check_generation()
        digest = self._digest(username, password)
        principal = self._lookup(digest)
        if principal is not None:
            self.hits += 1
            return defer.succeed(principal)
        waiters = self._flights.get(digest)
        if waiters is not None and self.waiting < MAX_WAITERS:
            # The same credentials are being checked right now: share that answer.
            self.waiting += 1
            d = defer.Deferred()
            waiters.append((d, username, password, source, service))
            return d
        self.misses += 1
        return self._fly(digest, username, password, source, service)

    def authenticate_anonymous(self, source=None, service=None):
        """See L{IAuthenticator.authenticate_anonymous} (no hash, nothing to cache)."""
        return self._checker.authenticate_anonymous(source, service)

    def clear(self):
        """Forget every verified login (the repository changed)."""
        self._entries.clear()

    def _fly(self, digest, username, password, source, service):
        """Check with the real checker; whoever asks meanwhile waits for this answer."""
        leader = digest not in self._flights
        if leader:
            self._flights[digest] = []
        generation = self._seen_generation
        d = self._checker.authenticate(username, password, source, service)
        if leader:
            d.addBoth(self._landed, digest, generation)
        return d

    def _landed(self, result, digest, generation):
        """The check ended: remember a success and give it to every waiter; after a
        failure, each waiter is checked on its own."""
        waiters = self._flights.pop(digest, [])
        self.waiting -= len(waiters)
        if isinstance(result, Failure):
            if result.check(LoginBusy):
                # No verdict on the credentials (the guard had no room, or the leader's
                # address is slowed down): the first waiter leads the next check, the
                # others wait on it.
                for d, *login in waiters:
                    self.authenticate(*login).chainDeferred(d)
            else:
                # A verdict: each waiter is checked on its own, as without the cache,
                # so that each is counted, slowed down and logged with its address.
                for d, *login in waiters:
                    self._checker.authenticate(*login).chainDeferred(d)
            return result
        if generation == self._current_generation():
            self._remember(digest, result)
        for d, *_ in waiters:
            d.callback(result)
        return result

    def _lookup(self, digest):
        entry = self._entries.get(digest)
        if entry is None:
            return None
        principal, expires = entry
        if self._clock.seconds() >= expires:
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return principal

    def _remember(self, digest, principal):
        self._entries[digest] = (principal, self._clock.seconds() + self.ttl)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def _current_generation(self):
        self._check_generation()
        return self._seen_generation

    def _check_generation(self):
        generation = self._generation()
        if generation != self._seen_generation:
            self._seen_generation = generation
            self.clear()

    def _digest(self, username, password):
        # The length of the name goes first so that no (name, password) pair can be
        # split differently into another with the same bytes.
        name = username.encode("utf-8", "surrogatepass")
        secret = password.encode("utf-8", "surrogatepass")
        message = len(name).to_bytes(4, "big") + name + secret
        return hmac.new(self._key, message, hashlib.sha256).digest()
