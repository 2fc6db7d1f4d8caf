"""The authentication cache (S4.2): verified logins remembered, bounded, expiring, and
dropped when the user repository changes; concurrent logins share one check."""

import pytest
from twisted.internet import defer, task
from zope.interface.verify import verifyObject

from mqgate.errors import ConfigError
from mqgate.security.auth import AuthenticationFailed, IAuthenticator, Principal
from mqgate.security.authcache import AuthCache
from mqgate.security.guard import LoginBusy


class Checker:
    """An authenticator whose checks the test answers by hand; it knows one password
    per user."""

    def __init__(self, passwords):
        self.passwords = passwords
        self.checks = []     # (username, password, source, service, Deferred)

    def authenticate(self, username, password, source=None, service=None):
        d = defer.Deferred()
        self.checks.append((username, password, source, service, d))
        return d

    def authenticate_anonymous(self, source=None, service=None):
        return defer.succeed(Principal("guest", {"anonymous"}, anonymous=True))

    def answer(self, index=-1):
        """Finish check C{index} as the real checker would."""
        username, password, _, _, d = self.checks[index]
        if self.passwords.get(username) == password:
            d.callback(Principal(username, {"user"}))
        else:
            d.errback(AuthenticationFailed(username, "wrong password"))


def outcome(d):
    """What C{d} fired with: a Principal, the failure's exception, or None if pending.
    (Read without consuming it, so that a test may look twice.)"""
    if not d.called:
        return None
    return getattr(d.result, "value", d.result)


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def checker():
    return Checker({"alice": "secret", "bob": "hunter2"})


def make(checker, clock, **kwargs):
    return AuthCache(checker, clock, key=b"k" * 32, **kwargs)


def test_it_is_an_authenticator(checker, clock):
    """The cache can stand wherever an authenticator is expected."""
    assert verifyObject(IAuthenticator, make(checker, clock))


def test_a_verified_login_is_not_checked_again(checker, clock):
    """The second login with the same credentials is answered without a check."""
    cache = make(checker, clock)
    first = cache.authenticate("alice", "secret", "10.0.0.1", "jms")
    checker.answer()
    assert outcome(first).name == "alice"
    second = cache.authenticate("alice", "secret", "10.0.0.2", "stomp")
    assert outcome(second).name == "alice"
    assert len(checker.checks) == 1
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_check_is_told_the_address_and_service(checker, clock):
    """The real checker still gets the client's address and service (for the guard)."""
    cache = make(checker, clock)
    cache.authenticate("alice", "secret", "10.0.0.1", "jms")
    assert checker.checks[0][:4] == ("alice", "secret", "10.0.0.1", "jms")


def test_another_password_is_checked(checker, clock):
    """A cached login does not let in a different password for the same user."""
    cache = make(checker, clock)
    cache.authenticate("alice", "secret")
    checker.answer()
    wrong = cache.authenticate("alice", "guess")
    assert outcome(wrong) is None   # waiting for its own check
    checker.answer()
    assert isinstance(outcome(wrong), AuthenticationFailed)
    assert len(checker.checks) == 2


def test_failures_are_not_cached(checker, clock):
    """Every attempt with a wrong password is checked."""
    cache = make(checker, clock)
    for _ in range(3):
        d = cache.authenticate("alice", "guess")
        checker.answer()
        assert isinstance(outcome(d), AuthenticationFailed)
    assert len(checker.checks) == 3
    assert len(cache) == 0


def test_entries_expire_after_the_ttl(checker, clock):
    """Past the ttl a login is checked again."""
    cache = make(checker, clock, ttl=60)
    cache.authenticate("alice", "secret")
    checker.answer()
    clock.advance(59)
    assert outcome(cache.authenticate("alice", "secret")).name == "alice"
    assert len(checker.checks) == 1
    clock.advance(1)
    assert outcome(cache.authenticate("alice", "secret")) is None
    assert len(checker.checks) == 2


def test_the_least_recently_used_entry_goes_first(checker, clock):
    """With room for two, a third login pushes out the one used least recently."""
    checker.passwords["carol"] = "pw"
    cache = make(checker, clock, max_entries=2)
    for user, password in (("alice", "secret"), ("bob", "hunter2")):
        cache.authenticate(user, password)
        checker.answer()
    cache.authenticate("alice", "secret")            # alice is now the most recent
    cache.authenticate("carol", "pw")
    checker.answer()
    assert len(cache) == 2
    assert outcome(cache.authenticate("alice", "secret")).name == "alice"
    assert outcome(cache.authenticate("bob", "hunter2")) is None   # pushed out
    assert len(checker.checks) == 3 + 1


def test_a_new_generation_of_the_repository_empties_it(checker, clock):
    """When the repository's generation changes, every login is checked again."""
    generation = [1]
    cache = make(checker, clock, generation=lambda: generation[0])
    cache.authenticate("alice", "secret")
    checker.answer()
    generation[0] = 2
    assert outcome(cache.authenticate("alice", "secret")) is None
    assert len(checker.checks) == 2


def test_a_check_that_ends_after_a_change_is_not_remembered(checker, clock):
    """A success checked against the old repository is not kept once it changed."""
    generation = [1]
    cache = make(checker, clock, generation=lambda: generation[0])
    d = cache.authenticate("alice", "secret")
    generation[0] = 2
    checker.answer()
    assert outcome(d).name == "alice"
    assert len(cache) == 0


def test_concurrent_logins_share_one_check(checker, clock):
    """A thousand logins with the same credentials while one is checked cost one check
    and all get its principal."""
    cache = make(checker, clock)
    logins = [cache.authenticate("alice", "secret", f"10.0.{i // 250}.{i % 250}")
              for i in range(1000)]
    assert len(checker.checks) == 1
    assert cache.waiting == 999
    checker.answer()
    assert {outcome(d).name for d in logins} == {"alice"}
    assert cache.waiting == 0


def test_waiters_on_a_failed_check_are_each_checked(checker, clock):
    """When the shared check finds the password wrong, every login that waited on it
    gets a check of its own, with its own address (counted and slowed down by the
    guard as without the cache): failures are never shared."""
    cache = make(checker, clock)
    logins = [cache.authenticate("alice", "guess", f"10.0.0.{i}") for i in range(3)]
    checker.answer(0)
    assert isinstance(outcome(logins[0]), AuthenticationFailed)
    assert [c[2] for c in checker.checks] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert outcome(logins[1]) is None
    checker.answer(1)
    checker.answer(2)
    assert all(isinstance(outcome(d), AuthenticationFailed) for d in logins)


def test_waiters_on_a_refused_check_get_in_with_the_next(checker, clock):
    """A leader refused by the guard without a verdict (busy) does not refuse those
    waiting on it: the next one is checked, and its success lets the rest in."""
    cache = make(checker, clock)
    logins = [cache.authenticate("alice", "secret") for _ in range(5)]
    checker.checks[0][4].errback(LoginBusy("alice"))
    assert len(checker.checks) == 2
    checker.answer(1)
    assert [type(outcome(d)).__name__ for d in logins] == (
        ["LoginBusy"] + ["Principal"] * 4)
    assert len(checker.checks) == 2


def test_the_key_is_a_digest_not_the_password(checker, clock):
    """Nothing the cache keeps contains the password or the user name."""
    cache = AuthCache(checker, clock)
    cache.authenticate("alice", "secret")
    checker.answer()
    (digest,) = cache._entries
    assert len(digest) == 32 and b"secret" not in digest and b"alice" not in digest


def test_name_and_password_cannot_be_split_differently(checker, clock):
    """("ab", "c") and ("a", "bc") are different credentials to the cache."""
    checker.passwords["ab"] = "c"
    cache = make(checker, clock)
    cache.authenticate("ab", "c")
    checker.answer()
    assert outcome(cache.authenticate("a", "bc")) is None


def test_anonymous_logins_pass_through(checker, clock):
    """An anonymous login costs no hash and is not cached."""
    cache = make(checker, clock)
    assert outcome(cache.authenticate_anonymous()).anonymous
    assert len(cache) == 0


@pytest.mark.parametrize("kwargs, key", [
    ({"max_entries": 0}, "mqgate.authentication.cache.max_entries"),
    ({"ttl": 0}, "mqgate.authentication.cache.ttl"),
])
def test_bad_settings_are_named(checker, clock, kwargs, key):
    """A bound that makes no sense is a ConfigError naming its key."""
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make(checker, clock, **kwargs)
