"""Tests of the login guard (S4.2): bounded checks, slowed failures, quiet logs, and
login attempts that cost the same whatever the user name or its entry."""


import pytest
from twisted.internet import defer, task
from twisted.logger import capturedLogs
from zope.interface.verify import verifyObject

from mqgate.security.auth import (
    AuthenticationFailed, FileAuthenticator, IAuthenticator, Principal,
    RepositoryUnavailable)
from mqgate.security.guard import (
    MAX_WAITING, FailureThrottle, LogBudget, LoginBusy, LoginGuard)
from mqgate.security import users as users_module
from mqgate.security.users import DEFAULT_ITERATIONS, UserRepository, hash_password
from tests.security.test_auth import LEGACY_ADMIN, failure_of, result_of, run_now

ALICE = Principal("alice", frozenset({"user"}))


class HeldChecker:
    """An authenticator whose checks stay pending until the test answers them."""

    def __init__(self):
        self.pending = []

    def authenticate(self, username, password, source=None, service=None):
        d = defer.Deferred()
        self.pending.append((username, password, d))
        return d

    def authenticate_anonymous(self, source=None, service=None):
        return defer.succeed(Principal("guest", frozenset({"anonymous"}), True))

    def answer(self, index=0):
        username, password, d = self.pending.pop(index)
        if password == "right":
            d.callback(ALICE)
        else:
            d.errback(AuthenticationFailed(username, "wrong password"))


def quiet(d):
    """Consume C{d}'s failure, if it ever has one (the test looks elsewhere)."""
    d.addErrback(lambda failure: None)
    return d


def fired(d):
    """Whether C{d} has fired (its result is left as it was)."""
    return d.called


# -- the bound on pending checks -------------------------------------------------------


def test_the_guard_is_an_authenticator():
    """LoginGuard provides IAuthenticator, so the glue uses it like any other."""
    assert verifyObject(IAuthenticator, LoginGuard(HeldChecker(), task.Clock()))


def test_checks_past_the_bound_are_refused_at_once_as_busy():
    """A login flood queues at most max_pending checks; the next attempt is refused at
    once with a "busy, try again" error, without reaching the checker."""
    checker = HeldChecker()
    guard = LoginGuard(checker, task.Clock(), max_pending=3)
    attempts = [guard.authenticate("alice", "wrong") for _ in range(3)]
    refused = guard.authenticate("alice", "right")
    failure = failure_of(refused, LoginBusy)
    assert "busy" in str(failure.value) and "try again" in str(failure.value)
    assert len(checker.pending) == 3 and not any(fired(d) for d in attempts)


def test_the_bound_is_per_service():
    """A flood that fills one service's checks does not refuse another service's
    logins (the admin service stays reachable)."""
    checker = HeldChecker()
    guard = LoginGuard(checker, task.Clock(), max_pending=2)
    for _ in range(2):
        quiet(guard.authenticate("alice", "wrong", service="jms"))
    failure_of(guard.authenticate("alice", "wrong", service="jms"), LoginBusy)
    admin = guard.authenticate("alice", "right", service="admin")
    checker.answer(2)
    assert result_of(admin) == ALICE
    assert guard.pending == 2


def test_an_answered_check_frees_its_place():
    """Once a check is answered, the next attempt is checked again."""
    checker = HeldChecker()
    guard = LoginGuard(checker, task.Clock(), max_pending=1)
    first = guard.authenticate("alice", "wrong")
    checker.answer()
    failure_of(first, AuthenticationFailed)
    second = guard.authenticate("alice", "right")
    checker.answer()
    assert result_of(second) == ALICE and guard.pending == 0


def test_anonymous_logins_are_not_checked_or_counted():
    """An anonymous login has no password to hash: it neither waits nor counts."""
    guard = LoginGuard(HeldChecker(), task.Clock(), max_pending=1)
    assert result_of(guard.authenticate_anonymous("10.0.0.1")).anonymous
    assert guard.pending == 0


# -- failures slow their address down ---------------------------------------------------


def throttled(clock, **kwargs):
    checker = HeldChecker()
    throttle = FailureThrottle(clock, free_failures=2, window=60, first_delay=1,
                               max_delay=4, **kwargs)
    return checker, LoginGuard(checker, clock, throttle=throttle, horizon=30)


def test_failures_beyond_the_free_ones_make_the_next_attempt_wait():
    """After the free failures from one address, its next attempt is checked only after
    a delay that doubles with each failure, up to the cap."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    waits = []
    for _ in range(6):
        d = guard.authenticate("alice", "wrong", "10.0.0.9")
        start = clock.seconds()
        while not checker.pending:
            clock.advance(0.25)
        waits.append(clock.seconds() - start)
        checker.answer()
        failure_of(d, AuthenticationFailed)
    assert waits == [0, 0, 1, 2, 4, 4]


def test_another_address_is_not_slowed_down():
    """Failures from one address cost nothing to a login from another."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    for _ in range(4):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.9"))
        clock.advance(10)
        checker.answer()
    d = guard.authenticate("alice", "right", "10.0.0.7")
    assert checker.pending, "the other address waited"
    checker.answer()
    assert result_of(d) == ALICE


def test_parallel_attempts_from_one_address_wait_one_behind_the_other():
    """Many connections at once from a slowed-down address do not get parallel guesses:
    their turns follow each other, each waiting as if those before it had failed."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    for _ in range(2):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.9"))
        checker.answer()
    for _ in range(3):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.9"))
    seen = []
    for _ in range(8):
        clock.advance(1)
        seen.append(len(checker.pending))
    assert seen == [1, 1, 2, 2, 2, 2, 3, 3]


def test_parallel_first_attempts_from_a_clean_address_are_not_held_back():
    """Many clients behind one address logging in at once (after a restart, say) are
    all checked at once while that address has no failures."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    for _ in range(6):
        guard.authenticate("alice", "right", "10.0.0.5")
    assert len(checker.pending) == 6 and guard.waiting == 0
    for _ in range(6):
        checker.answer()


def test_after_a_failure_parallel_attempts_get_only_the_free_guesses():
    """Once an address has failed, opening many connections at once buys it no more
    than its remaining free guesses: the attempts still being checked count as failures
    to come."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    quiet(guard.authenticate("alice", "wrong", "10.0.0.5"))
    checker.answer()
    attempts = [quiet(guard.authenticate("alice", "wrong", "10.0.0.5")) for _ in range(6)]
    assert len(checker.pending) == 1 and guard.waiting == 5
    checker.answer()
    assert fired(attempts[0])


def test_a_success_ends_its_attempt_without_counting_a_failure():
    """A correct login ends its attempt: it is no failure to come any more."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    d = guard.authenticate("alice", "right", "10.0.0.5")
    checker.answer()
    assert result_of(d) == ALICE
    assert guard.throttle.failures("10.0.0.5") == 0
    for _ in range(2):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.5"))
    assert len(checker.pending) == 2 and guard.waiting == 0


def test_an_address_slowed_past_the_horizon_is_refused_at_once():
    """An attempt whose turn would come after the horizon is refused at once, saying
    its address has failed too often, instead of holding a timer for a client that will
    be gone by then."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    for _ in range(2):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.9"))
        checker.answer()
    waiting = [guard.authenticate("alice", "wrong", "10.0.0.9") for _ in range(40)]
    refused = [d for d in waiting if fired(d)]
    # turns at 1, 3, 7, 11, ... 27 (each doubling its wait up to the cap of 4 s)
    assert len(refused) == 32 and guard.waiting == 8
    failure = failure_of(refused[0], LoginBusy)
    assert str(failure.value) == "too many failed logins from this address; try again later"
    for d in waiting:
        quiet(d)


def test_the_waiting_attempts_are_bounded_broker_wide():
    """However many addresses are slowed down, at most MAX_WAITING attempts wait."""
    clock = task.Clock()
    checker, guard = throttled(clock)
    guard.horizon = 10 ** 9
    for _ in range(2):
        quiet(guard.authenticate("alice", "wrong", "10.0.0.9"))
        checker.answer()
    attempts = [guard.authenticate("alice", "wrong", "10.0.0.9")
                for _ in range(MAX_WAITING + 5)]
    assert guard.waiting == MAX_WAITING
    assert sum(fired(d) for d in attempts) == 5
    for d in attempts:
        quiet(d)


def test_an_address_is_forgiven_after_the_window():
    """Failures older than the window no longer count."""
    clock = task.Clock()
    throttle = FailureThrottle(clock, free_failures=1, window=60)
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.admit("a") > 0
    clock.advance(61)
    assert throttle.failures("a") == 0 and throttle.admit("a") == 0


def test_the_bucket_gives_one_failure_back_every_window_per_free_failures():
    """A token bucket: with 3 free failures in a 60 s window, one failure stops counting
    every 20 s even while the address keeps trying."""
    clock = task.Clock()
    throttle = FailureThrottle(clock, free_failures=3, window=60)
    for _ in range(4):
        throttle.failed("a")
    assert throttle.admit("a") > 0
    throttle.settled("a")
    clock.advance(19)
    assert throttle.failures("a") == 4
    clock.advance(1)
    assert throttle.failures("a") == 3
    clock.advance(20)
    assert throttle.failures("a") == 2


def test_an_address_failing_slower_than_the_refill_is_never_slowed():
    """An address that fails once every 25 s (the bucket refills one every 20 s) is
    never made to wait, however long it goes on; one failing every 10 s is."""
    clock = task.Clock()
    throttle = FailureThrottle(clock, free_failures=3, window=60)
    for _ in range(20):
        assert throttle.admit("slow") == 0
        throttle.failed("slow")
        clock.advance(25)
    waits = []
    for _ in range(20):
        waits.append(throttle.admit("fast"))
        throttle.failed("fast")
        clock.advance(10)
    assert waits[:3] == [0, 0, 0] and max(waits) > 0


def test_the_table_of_addresses_is_bounded():
    """A flood from many addresses keeps at most max_sources of them, forgetting the
    least recently failed first."""
    clock = task.Clock()
    throttle = FailureThrottle(clock, max_sources=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(throttle) == 100
    assert throttle.failures("10.0.3.231") == 1      # the last one
    assert throttle.failures("10.0.0.0") == 0        # the first, forgotten


def test_a_busy_refusal_is_not_counted_as_a_failure():
    """Being refused as busy says nothing about the password: it does not slow the
    address down."""
    clock = task.Clock()
    checker = HeldChecker()
    throttle = FailureThrottle(clock, free_failures=1)
    guard = LoginGuard(checker, clock, max_pending=1, throttle=throttle)
    quiet(guard.authenticate("alice", "wrong", "10.0.0.1"))
    for _ in range(5):
        failure_of(guard.authenticate("alice", "wrong", "10.0.0.2"), LoginBusy)
    assert throttle.failures("10.0.0.2") == 0


def test_a_repository_that_cannot_answer_does_not_slow_the_address_down():
    """Logins refused because the directory did not answer are refused to the client
    like any failure, but retrying through an outage is not guessing: the address is
    not slowed down for it."""
    clock = task.Clock()
    checker = HeldChecker()
    throttle = FailureThrottle(clock, free_failures=1)
    guard = LoginGuard(checker, clock, throttle=throttle)
    for _ in range(5):
        d = guard.authenticate("alice", "right", "10.0.0.3")
        _, _, pending = checker.pending.pop()
        pending.errback(RepositoryUnavailable("alice", "directory not answering"))
        error = failure_of(d, AuthenticationFailed).value
        assert str(error) == "authentication failed for user 'alice'"
    assert throttle.failures("10.0.0.3") == 0


# -- logging ------------------------------------------------------------------------------


def test_failed_logins_are_logged_with_address_and_user_within_a_budget():
    """Each failed login is logged with its address and user, but at most the budget's
    lines per interval; the next line says how many were left out."""
    clock = task.Clock()
    checker = HeldChecker()
    guard = LoginGuard(checker, clock, log_budget=LogBudget(clock, lines=3, interval=60))
    with capturedLogs() as events:
        for _ in range(10):
            d = guard.authenticate("mallory", "wrong", "192.0.2.7")
            checker.answer()
            d.addErrback(lambda f: None)
        clock.advance(60)
        d = guard.authenticate("mallory", "wrong", "192.0.2.7")
        checker.answer()
        d.addErrback(lambda f: None)
    lines = [e for e in events if "failed login" in e["log_format"]]
    assert len(lines) == 4
    assert lines[0]["source"] == "192.0.2.7" and lines[0]["user"] == "'mallory'"
    assert "7 more failed logins not logged" in lines[3]["more"]


def test_a_long_user_name_is_shortened_in_the_log():
    """A client-chosen user name cannot make a log line long."""
    checker = HeldChecker()
    guard = LoginGuard(checker, task.Clock())
    with capturedLogs() as events:
        d = guard.authenticate("x" * 10000, "wrong", "192.0.2.7")
        checker.answer()
        d.addErrback(lambda f: None)
    (line,) = [e for e in events if "failed login" in e["log_format"]]
    assert len(line["user"]) < 80


# -- every attempt costs the same ---------------------------------------------------------


@pytest.fixture
def timing_repo(tmp_path):
    """Salted entries of the real default strength, and one MD5 entry."""
    path = tmp_path / "passwd"
    path.write_text(
        f"alice:{hash_password('wonder')}:user:1\n"
        f"bob:{hash_password('builder')}:user:1\n"
        f"admin:{LEGACY_ADMIN}:admin:1\n")
    return UserRepository.load(path)


@pytest.fixture
def hashes(monkeypatch):
    """The PBKDF2 rounds of every password hash computed, in order: the real hash runs,
    and its iteration count is noted (the work an attempt costs, counted rather than
    timed, so that a busy machine cannot blur it)."""
    rounds = []
    real = users_module.hashlib.pbkdf2_hmac

    def counting(name, password, salt, iterations, *args):
        rounds.append(iterations)
        return real(name, password, salt, iterations, *args)
    monkeypatch.setattr(users_module.hashlib, "pbkdf2_hmac", counting)
    return rounds


def work(auth, hashes, user, password):
    """The PBKDF2 rounds one failed attempt computed."""
    del hashes[:]
    failure_of(auth.authenticate(user, password), AuthenticationFailed)
    return list(hashes)


def test_unknown_known_and_md5_logins_cost_about_the_same(timing_repo, hashes):
    """An unknown user, a known user with a wrong password and an MD5 entry with a wrong
    password each cost exactly one PBKDF2 check of the entries' strength (the MD5 entry
    answered in microseconds before, an unknown user in no time)."""
    auth = FileAuthenticator(timing_repo, run_now)
    known = work(auth, hashes, "alice", "wrong")
    assert known == [DEFAULT_ITERATIONS]
    assert work(auth, hashes, "nobody", "wrong") == known
    assert work(auth, hashes, "admin", "wrong") == known


def test_the_dummy_check_follows_the_repository_strength(tmp_path, hashes):
    """The dummy check of an unknown user costs what the repository's entries cost, not
    a fixed default (a repository of cheaper or dearer entries stays indistinguishable)."""
    path = tmp_path / "passwd"
    strong = hash_password("x", iterations=400_000)
    path.write_text(f"alice:{strong}:user:1\nbob:{strong}:user:1\n")
    auth = FileAuthenticator(UserRepository.load(path), run_now)
    assert work(auth, hashes, "alice", "wrong") == [400_000]
    assert work(auth, hashes, "nobody", "wrong") == [400_000]
