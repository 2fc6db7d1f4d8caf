# -*- test-case-name: tests.security.test_auth -*-
"""
Authentication against a user repository (S4.2).

An L{IAuthenticator} turns credentials into a L{Principal}, asynchronously: the protocol
glue (SASL PLAIN / ANONYMOUS / EXTERNAL for AMQP, login/passcode for STOMP, the HTTP
services) calls it and waits on the Deferred. A client identified by its verified TLS
certificate has no password to check: C{principal_for} maps the certificate's user name
to a L{Principal} with the repository's groups (S4.7). Which of these ways in a service
allows is its L{LoginPolicy}. L{FileAuthenticator} checks the file repository of
S4.3. Checking a salted hash costs tens of milliseconds by design, so the check runs
through an injected C{run_in_thread}, never on the reactor thread; this module itself
never touches the reactor.

Failures errback with L{AuthenticationFailed}. Its message is safe to send to the
client: it never tells whether the user exists, is inactive, or typed the wrong
password. The real reason is on the exception's C{reason} attribute, for the log and the
audit trail (S4.8).
"""

import collections

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import Interface, implementer

from mqgate.errors import MqgateError
from mqgate.security import users as _users

__all__ = ["AuthenticationFailed", "RepositoryUnavailable", "Principal", "IAuthenticator",
           "IPrincipalSource", "FileAuthenticator", "LoginPolicy"]

# Longest user name echoed back in a failure message; a client may send anything.
_MAX_ECHOED_NAME = 64



def _dummy_hash(iterations):
    """A hash that matches no password (its expected value is all zeros) but costs
    the same PBKDF2 work as a real entry of C{iterations} rounds."""
    return f"pbkdf2-sha256${iterations}${'A' * 22}==${'A' * 43}="




def _echo(name):
    """C{name} as it may appear in a message: quoted, escaped, bounded."""
    if len(name) > _MAX_ECHOED_NAME:
        name = name[:_MAX_ECHOED_NAME] + "..."
    return repr(name)


class AuthenticationFailed(MqgateError):
    """Credentials were refused.

    C{str()} of the exception is safe to show the client.

    @ivar username: the name the client gave, or C{None} for an anonymous login.
    @ivar reason: why, for the log only (C{"unknown user"}, C{"wrong password"},
        C{"inactive user"}, C{"anonymous not allowed"}, C{"no anonymous user"}).
    """

    def __init__(self, username, reason):
        self.username = username
        self.reason = reason
        if username is None:
            message = "anonymous authentication failed"
        else:
            message = f"authentication failed for user {_echo(username)}"
        super().__init__(message)


class RepositoryUnavailable(AuthenticationFailed):
    """The user repository could not check the credentials (a directory that does not
    answer). The client sees the same refusal as any other, but the failure is not
    counted against its address: retrying during an outage is not guessing passwords.
    """


@attrs.frozen
class Principal:
    """An authenticated identity.

    @ivar name: the user name (for an anonymous login, the repository's anonymous user).
    @ivar groups: the groups access control (S4.5) matches against.
    @ivar anonymous: whether the client logged in without credentials.
    """

    name: str
    groups: frozenset = attrs.field(converter=frozenset)
    anonymous: bool = False


class IAuthenticator(Interface):
    """Checks credentials against a user repository (S4.2)."""

    def authenticate(username, password, source=None, service=None):
        """Authenticate with a user name and password.

        @type username: L{str}
        @type password: L{str}
        @param source: the client's address (a host), for the failed-login rules of
            an implementation that has them; None when unknown.
        @param service: the connection service the client came through (its bounds
            are kept per service where an implementation has them), or None.
        @return: a L{Deferred} firing with a L{Principal}, or failing with
            L{AuthenticationFailed}.
        """

    def authenticate_anonymous(source=None, service=None):
        """Authenticate a client that gave no credentials (SASL ANONYMOUS).

        @return: a L{Deferred} firing with a L{Principal} whose C{anonymous} is true,
            or failing with L{AuthenticationFailed}.
        """


class IPrincipalSource(Interface):
    """Finds a user's principal without a password (S4.7): for a client that proved who
    it is otherwise (a TLS client certificate the broker verified, whose subject names
    the user). A user repository's authenticator provides it (the file one here, LDAP
    likewise); the login guard need not, there being no password to check or slow down.
    """

    def principal_for(name):
        """The principal of user C{name}, with its groups.

        @return: a L{Deferred} firing with a L{Principal}, or failing with
            L{AuthenticationFailed} when the repository has no active user C{name}.
        """


@implementer(IAuthenticator, IPrincipalSource)
class FileAuthenticator:
    """L{IAuthenticator} over a L{mqgate.security.users.UserRepository}.

    @param repository: the L{UserRepository}.
    @param run_in_thread: C{run_in_thread(f, *args) -> Deferred} runs C{f} off the
        reactor thread; production passes
        C{lambda f, *a: deferToThreadPool(reactor, reactor.getThreadPool(), f, *a)}.
    @param allow_anonymous: whether L{authenticate_anonymous} may succeed (a service
        that allows a guest, S4.2).
    """

    _log = Logger()

    def __init__(self, repository, run_in_thread, *, allow_anonymous=True):
        self._repository = repository
        self._run_in_thread = run_in_thread
        self._allow_anonymous = allow_anonymous
        self._dummy = _dummy_hash(_usual_iterations(repository))

    def authenticate(self, username, password, source=None, service=None):
        """See L{IAuthenticator.authenticate}.

        Every attempt costs one PBKDF2 check of the repository's usual strength, whether
        the user exists or not and whatever form its entry has, so that the time of an
        answer tells nothing about either (S4.2)."""
        d = self._run_in_thread(self._check, username, password)
        d.addCallback(self._upgrade_legacy, password)
        d.addCallback(self._principal, anonymous=False)
        return d

    def authenticate_anonymous(self, source=None, service=None):
        """See L{IAuthenticator.authenticate_anonymous}."""
        if not self._allow_anonymous:
            return defer.fail(AuthenticationFailed(None, "anonymous not allowed"))
        user = self._repository.anonymous_user()
        if user is None or not user.active:
            return defer.fail(AuthenticationFailed(None, "no anonymous user"))
        return defer.succeed(self._principal(user, anonymous=True))

    def principal_for(self, name):
        """See L{IPrincipalSource.principal_for}: a look-up, no hash to check."""
        user = self._repository.get(name)
        if user is None:
            return defer.fail(AuthenticationFailed(name, "unknown user"))
        if not user.active:
            return defer.fail(AuthenticationFailed(name, "inactive user"))
        return defer.succeed(self._principal(user, anonymous=False))

    def _check(self, username, password):
        """Runs in a thread: the L{User} if the password is right, else raise."""
        user = self._repository.get(username)
        if user is None:
            _users.verify_password(self._dummy, username, password)
            raise AuthenticationFailed(username, "unknown user")
        legacy = _users.is_legacy_hash(user.password_hash)
        if legacy:
            # An MD5 entry answers in microseconds; the dummy check makes it cost what
            # a salted entry costs, so a guesser cannot pick out the legacy entries.
            _users.verify_password(self._dummy, username, password)
        if not _users.verify_password(user.password_hash, username, password):
            raise AuthenticationFailed(username, "wrong password")
        # Checked after the password so that a guesser cannot tell inactive users
        # from unknown ones by timing either.
        if not user.active:
            raise AuthenticationFailed(username, "inactive user")
        return user

    def _upgrade_legacy(self, user, password):
        """Re-hash a source-system MD5 entry to the salted form (S4.3), in a thread.

        The login succeeds whether or not the rewrite does: a read-only repository
        must not lock users out; the failure is logged and retried at the next login.
        """
        if not _users.is_legacy_hash(user.password_hash):
            return user
        d = self._run_in_thread(self._rehash, user, password)
        d.addErrback(self._rehash_failed, user)
        d.addCallback(lambda _: user)
        return d

    def _rehash(self, user, password):
        new_hash = _users.hash_password(password)
        self._repository.replace_hash(
            user.name, new_hash, expected_hash=user.password_hash)

    def _rehash_failed(self, failure, user):
        self._log.failure(
            "could not re-hash the legacy password entry of user {user!r} in {path}",
            failure, user=user.name, path=self._repository.path)

    @staticmethod
    def _principal(user, anonymous):
        return Principal(user.name, frozenset([user.group]), anonymous)


@attrs.frozen
class LoginPolicy:
    """The ways in that one connection service allows (S4.2, S4.7), and what a client
    trying another is told. Pure: the protocol adapters and glues ask it.

    @ivar service: the service's name, quoted in the settings a refusal names.
    @ivar allow_anonymous: guests may log in without credentials
        (C{mqgate.SERVICE.allow_anonymous}).
    @ivar allow_password: passwords are accepted (false on a cleartext service with
        C{mqgate.SERVICE.sasl.plain.allow_cleartext=false}).
    @ivar tls_services: the TLS services a client refused a password should use instead.
    @ivar client_certificates: the service verifies TLS client certificates
        (C{ssl.client_auth} want or need): their users may log in without a password.
    """

    service: str
    allow_anonymous: bool = False
    allow_password: bool = True
    tls_services: tuple = ()
    client_certificates: bool = False

    @property
    def mechanisms(self):
        """The SASL mechanisms always offered (EXTERNAL is added per connection, when
        its client presented a verified certificate)."""
        return tuple(name for name, allowed in (("PLAIN", self.allow_password),
                                                ("ANONYMOUS", self.allow_anonymous))
                     if allowed)

    @property
    def anonymous_refusal(self):
        """What a client logging in without credentials is told when guests are not
        let in."""
        return (f"the {self.service} service needs a login (a user name and password); "
                f"guests are let in only with mqgate.{self.service}.allow_anonymous=true")

    @property
    def password_refusal(self):
        """What a client sending a password is told on a service that takes none over
        cleartext."""
        where = (f"use the TLS service {' or '.join(self.tls_services)}"
                 if self.tls_services else "use a TLS service")
        return (f"the {self.service} service does not accept passwords over cleartext; "
                f"{where} (mqgate.{self.service}.sasl.plain.allow_cleartext is false)")

    @property
    def refusals(self):
        """SASL mechanism -> why it is not offered, for a client that tries it anyway."""
        refusals = {"EXTERNAL": "SASL EXTERNAL needs a TLS client certificate the broker "
                                "verified"}
        if not self.allow_anonymous:
            refusals["ANONYMOUS"] = self.anonymous_refusal
        if not self.allow_password:
            refusals["PLAIN"] = self.password_refusal
        return refusals

    def refusal(self, login, certified):
        """Why a STOMP CONNECT with C{login} (None: none given) may not log in, or
        None when it may. C{certified}: its client presented a verified certificate,
        which stands for a login."""
        if login is None:
            return None if certified or self.allow_anonymous else self.anonymous_refusal
        return None if self.allow_password else self.password_refusal


def _usual_iterations(repository):
    """The PBKDF2 rounds most salted entries of C{repository} use (the default when it
    has none): what the dummy check of an unknown user or an MD5 entry must cost."""
    counts = collections.Counter(
        _users.pbkdf2_iterations(user.password_hash) for user in repository.users())
    counts.pop(None, None)
    if not counts:
        return _users.DEFAULT_ITERATIONS
    return counts.most_common(1)[0][0]
