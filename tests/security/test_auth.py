"""Tests for authentication against the file repository (S4.2, S4.3)."""

import pytest
from twisted.internet import defer
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from mqgate.security.auth import (
    AuthenticationFailed, FileAuthenticator, IAuthenticator, Principal)
from mqgate.security.users import (
    UserRepository, hash_password, is_legacy_hash, verify_password)
from tests.deferreds import result as result_of, run_now

FAST = 1000
LEGACY_ADMIN = "-2d5455c8583c24eec82c7a1e273ea02e"   # admin/admin, FACTS 1.4


def failure_of(d, *types):
    """The Failure a fired Deferred holds; fails the test unless it failed with C{types}."""
    box = []
    d.addBoth(box.append)
    assert box, "Deferred has not fired"
    assert isinstance(box[0], Failure), f"Deferred succeeded with {box[0]!r}"
    assert box[0].check(*types), box[0]
    return box[0]


def entry(name, password, group="user", active=1, stored=None):
    return f"{name}:{stored or hash_password(password, iterations=FAST)}:{group}:{active}\n"


@pytest.fixture
def repo(tmp_path):
    """A repository with an admin, a user, an inactive user and an anonymous user."""
    path = tmp_path / "passwd"
    path.write_text(
        "# test users\n"
        + entry("admin", "adm1n", "admin")
        + entry("alice", "wonder")
        + entry("mallory", "evil", active=0)
        + entry("guest", "guest", "anonymous"))
    return UserRepository.load(path)


def test_provides_interface(repo):
    """FileAuthenticator provides IAuthenticator."""
    assert verifyObject(IAuthenticator, FileAuthenticator(repo, run_now))


def test_success_gives_principal_with_group(repo):
    """S4.2: the right password yields a Principal carrying the user's group."""
    auth = FileAuthenticator(repo, run_now)
    assert result_of(auth.authenticate("admin", "adm1n")) == Principal(
        "admin", frozenset({"admin"}), False)
    assert result_of(auth.authenticate("alice", "wonder")).groups == {"user"}


def test_wrong_password_fails(repo):
    """S4.2: a wrong password errbacks with AuthenticationFailed naming only the user."""
    failure = failure_of(
        FileAuthenticator(repo, run_now).authenticate("alice", "wrong"), AuthenticationFailed)
    assert str(failure.value) == "authentication failed for user 'alice'"
    assert failure.value.reason == "wrong password"
    assert failure.value.username == "alice"


def test_unknown_user_fails_like_wrong_password(repo):
    """S4.2: an unknown user gets the same client message as a wrong password."""
    failure = failure_of(
        FileAuthenticator(repo, run_now).authenticate("nobody", "x"), AuthenticationFailed)
    assert str(failure.value) == "authentication failed for user 'nobody'"
    assert failure.value.reason == "unknown user"


def test_inactive_user_fails_even_with_right_password(repo):
    """S4.3: an inactive user cannot log in; the client is not told it is inactive."""
    failure = failure_of(
        FileAuthenticator(repo, run_now).authenticate("mallory", "evil"), AuthenticationFailed)
    assert str(failure.value) == "authentication failed for user 'mallory'"
    assert failure.value.reason == "inactive user"


def test_failure_message_escapes_and_bounds_name(repo):
    """S4.2: a hostile user name is echoed escaped and cut short, never raw."""
    name = "x\r\nFAKE LOG LINE" + "y" * 200
    message = str(failure_of(
        FileAuthenticator(repo, run_now).authenticate(name, "p"), AuthenticationFailed).value)
    assert "\n" not in message and "\r" not in message
    assert len(message) < 120


def test_anonymous_maps_to_anonymous_user(repo):
    """S4.2: anonymous login yields the anonymous-group user, marked anonymous."""
    principal = result_of(FileAuthenticator(repo, run_now).authenticate_anonymous())
    assert principal == Principal("guest", frozenset({"anonymous"}), True)


def test_anonymous_disabled_fails(repo):
    """S4.2: a service that allows no guest refuses anonymous login."""
    auth = FileAuthenticator(repo, run_now, allow_anonymous=False)
    failure = failure_of(auth.authenticate_anonymous(), AuthenticationFailed)
    assert str(failure.value) == "anonymous authentication failed"
    assert failure.value.username is None


@pytest.mark.parametrize("guest_line", ["", entry("guest", "guest", "anonymous", active=0)])
def test_anonymous_without_active_anonymous_user_fails(tmp_path, guest_line):
    """S4.2: with no active anonymous-group user, anonymous login fails."""
    path = tmp_path / "passwd"
    path.write_text(entry("alice", "wonder") + guest_line)
    auth = FileAuthenticator(UserRepository.load(path), run_now)
    failure_of(auth.authenticate_anonymous(), AuthenticationFailed)


def test_password_check_runs_through_run_in_thread(repo):
    """S4.2: the slow check is handed to run_in_thread; nothing fires until it runs."""
    queued = []

    def run_later(f, *args):
        d = defer.Deferred()
        queued.append((d, f, args))
        return d

    result = FileAuthenticator(repo, run_later).authenticate("alice", "wonder")
    assert not result.called
    assert len(queued) == 1
    d, f, args = queued.pop()
    d.callback(f(*args))
    assert result_of(result).name == "alice"


def test_legacy_entry_rehashed_after_successful_login(tmp_path):
    """S4.3: a source-system MD5 entry is rewritten salted on the next good login."""
    path = tmp_path / "passwd"
    path.write_text("# legacy\n" + entry("admin", None, "admin", stored=LEGACY_ADMIN)
                    + entry("alice", "wonder"))
    before_alice = path.read_text().splitlines()[2]
    repo = UserRepository.load(path)
    auth = FileAuthenticator(repo, run_now)

    assert result_of(auth.authenticate("admin", "admin")).name == "admin"

    lines = path.read_text().splitlines()
    assert lines[0] == "# legacy" and lines[2] == before_alice
    name, stored, group, active = lines[1].split(":")
    assert (name, group, active) == ("admin", "admin", "1")
    assert stored.startswith("pbkdf2-sha256$") and not is_legacy_hash(stored)
    assert verify_password(stored, "admin", "admin")
    assert repo.get("admin").password_hash == stored
    assert result_of(auth.authenticate("admin", "admin")).name == "admin"


def test_legacy_entry_kept_after_failed_login(tmp_path):
    """S4.3: a failed login leaves the legacy entry as it was."""
    path = tmp_path / "passwd"
    text = entry("admin", None, "admin", stored=LEGACY_ADMIN)
    path.write_text(text)
    auth = FileAuthenticator(UserRepository.load(path), run_now)
    failure_of(auth.authenticate("admin", "wrong"), AuthenticationFailed)
    assert path.read_text() == text


def test_rehash_runs_through_run_in_thread(tmp_path):
    """S4.3: the re-hash of a legacy entry is also handed to run_in_thread."""
    path = tmp_path / "passwd"
    path.write_text(entry("admin", None, "admin", stored=LEGACY_ADMIN))
    calls = []

    def counting(f, *args):
        calls.append(f.__name__)
        return run_now(f, *args)

    auth = FileAuthenticator(UserRepository.load(path), counting)
    result_of(auth.authenticate("admin", "admin"))
    assert calls == ["_check", "_rehash"]


class ReadOnlyRepository:
    """A repository whose file cannot be rewritten."""

    def __init__(self, repo):
        self._repo = repo
        self.path = repo.path

    def get(self, name):
        return self._repo.get(name)

    def anonymous_user(self):
        return self._repo.anonymous_user()

    def users(self):
        return self._repo.users()

    def replace_hash(self, name, new_hash, *, expected_hash=None):
        raise PermissionError(13, "Permission denied", self.path)


def test_rehash_failure_still_logs_in_and_is_logged(tmp_path):
    """S4.3: if the re-hash cannot be written, the login succeeds and the error is logged."""
    path = tmp_path / "passwd"
    text = entry("admin", None, "admin", stored=LEGACY_ADMIN)
    path.write_text(text)
    auth = FileAuthenticator(ReadOnlyRepository(UserRepository.load(path)), run_now)
    with capturedLogs() as events:
        assert result_of(auth.authenticate("admin", "admin")).name == "admin"
    assert any(e.get("log_failure") and e["log_failure"].check(PermissionError)
               for e in events)
    assert path.read_text() == text
