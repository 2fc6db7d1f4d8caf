"""Tests for the file user repository (S4.3) and its password hashes."""

import os
import stat

import pytest

from mqgate.errors import ConfigError
from mqgate.security.users import (
    DEFAULT_ITERATIONS, User, UserRepository, check_user_name, default_password_warnings,
    ensure_repository, format_entry, hash_password, is_legacy_hash, verify_password)

# Few rounds keep the suite fast; the cost does not change what is being checked.
FAST = 1000

# FACTS 1.4: the source system's shipped passwd file, verbatim.
SOURCE_FILE = """\
admin:-2d5455c8583c24eec82c7a1e273ea02e:admin:1
guest:-2c3c4a34aa2c392f39edd112333c230d:anonymous:1
"""

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "etc", "passwd")


def write(path, text, mode=0o600):
    """Write C{text} to C{path} with C{mode} and return C{path}."""
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    return path


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# -- hashes -------------------------------------------------------------------------------

def test_hash_round_trip():
    """S4.3: a salted hash verifies the password it was made from."""
    stored = hash_password("s3cret", iterations=FAST)
    assert verify_password(stored, "alice", "s3cret")


def test_wrong_password_does_not_verify():
    """S4.3: a salted hash rejects any other password, including a prefix or the empty one."""
    stored = hash_password("s3cret", iterations=FAST)
    for wrong in ("s3cre", "s3cret ", "S3cret", ""):
        assert not verify_password(stored, "alice", wrong)


def test_salt_differs_per_hash():
    """S4.3: hashing the same password twice gives different salts and different hashes."""
    first = hash_password("same", iterations=FAST)
    second = hash_password("same", iterations=FAST)
    assert first != second
    assert first.split("$")[2] != second.split("$")[2]
    assert verify_password(first, "u", "same") and verify_password(second, "u", "same")


def test_hash_form_carries_iterations_and_no_colon():
    """S4.3: the hash names its scheme and iteration count and never contains a colon."""
    stored = hash_password("pw:with:colons", iterations=1234)
    scheme, iterations, _salt, _hash = stored.split("$")
    assert (scheme, iterations) == ("pbkdf2-sha256", "1234")
    assert ":" not in stored
    assert not is_legacy_hash(stored)


def test_default_iterations_are_used():
    """S4.3: without an explicit count, hash_password uses DEFAULT_ITERATIONS."""
    assert hash_password("pw").split("$")[1] == str(DEFAULT_ITERATIONS)


def test_hash_password_rejects_bad_iterations():
    """hash_password refuses a non-positive iteration count rather than a weak hash."""
    with pytest.raises(ValueError):
        hash_password("pw", iterations=0)


@pytest.mark.parametrize("user, password, stored", [
    ("admin", "admin", "-2d5455c8583c24eec82c7a1e273ea02e"),
    ("guest", "guest", "-2c3c4a34aa2c392f39edd112333c230d"),
])
def test_legacy_md5_verifies(user, password, stored):
    """S4.3/FACTS 1.4: the source system's signed hex MD5 of user:password verifies."""
    assert is_legacy_hash(stored)
    assert verify_password(stored, user, password)
    assert verify_password(stored.upper(), user, password)
    assert not verify_password(stored, user, password + "x")


def test_legacy_md5_depends_on_user_name():
    """FACTS 1.4: the legacy hash covers the user name, so admin's hash fails for guest."""
    assert not verify_password("-2d5455c8583c24eec82c7a1e273ea02e", "guest", "admin")


@pytest.mark.parametrize("stored", [
    "", "plain", "pbkdf2-sha256$0$AAAA$AAAA", "pbkdf2-sha256$10$!!$AAAA",
    "md5$abc", "-", "0123456789abcdef0123456789abcdef0",
])
def test_unknown_hash_forms_never_verify(stored):
    """A stored value in neither hash form matches no password."""
    assert not verify_password(stored, "u", stored)
    assert not verify_password(stored, "u", "")


# -- user names ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", "a*b", "a,b", "a:b", "a\nb", "a\rb", "#root"])
def test_invalid_user_names(name):
    """FACTS 1.4: names with * , : newline or CR, empty names (and '#...') are refused."""
    assert check_user_name(name) is not None


@pytest.mark.parametrize("name", ["a", "Jörg", "user name", "x#y", "a.b@c"])
def test_valid_user_names(name):
    """FACTS 1.4: any other non-empty name is accepted."""
    assert check_user_name(name) is None


# -- loading ------------------------------------------------------------------------------

def test_load_reads_source_system_file(tmp_path):
    """S4.3: the source system's shipped file is read as it is."""
    repo = UserRepository.load(write(tmp_path / "passwd", SOURCE_FILE))
    assert repo.users() == [
        User("admin", "-2d5455c8583c24eec82c7a1e273ea02e", "admin", True),
        User("guest", "-2c3c4a34aa2c392f39edd112333c230d", "anonymous", True),
    ]
    assert repo.path == str(tmp_path / "passwd")


def test_load_skips_comments_blank_lines_and_crlf(tmp_path):
    """S4.3: '#' lines and blank lines are ignored; CRLF line ends are accepted."""
    h = hash_password("pw", iterations=FAST)
    text = f"# header\r\n\r\n   \r\n  # indented\r\nbob:{h}:user:0\r\n"
    repo = UserRepository.load(write(tmp_path / "passwd", text))
    assert repo.users() == [User("bob", h, "user", False)]
    assert repo.get("bob").active is False
    assert repo.get("nobody") is None
    assert repo.anonymous_user() is None


def test_load_empty_file(tmp_path):
    """An empty repository loads with no users."""
    assert UserRepository.load(write(tmp_path / "passwd", "")).users() == []


GOOD = "-2d5455c8583c24eec82c7a1e273ea02e"


@pytest.mark.parametrize("bad_line, key", [
    ("alice:" + GOOD + ":user", "entry"),
    ("alice:" + GOOD + ":user:1:extra", "entry"),
    ("a*b:" + GOOD + ":user:1", "user name"),
    (":" + GOOD + ":user:1", "user name"),
    ("alice:plaintext:user:1", "password hash"),
    ("alice:" + GOOD + ":root:1", "group"),
    ("alice:" + GOOD + ":user:yes", "active flag"),
    ("alice:" + GOOD + ":user: 1", "active flag"),
    ("admin:" + GOOD + ":user:1", "user name"),
    ("guest2:" + GOOD + ":anonymous:1", "group"),
])
def test_malformed_line_raises_config_error_naming_line(tmp_path, bad_line, key):
    """S4.3: a malformed line raises ConfigError naming file:line and the bad field."""
    path = write(tmp_path / "passwd", "# comment\n" + SOURCE_FILE + bad_line + "\n")
    with pytest.raises(ConfigError) as info:
        UserRepository.load(path)
    assert info.value.source == f"{path}:4"
    assert info.value.key == key
    assert f"{path}:4" in str(info.value)


def test_invalid_utf8_names_the_line(tmp_path):
    """S4.3: the file must be UTF-8; a bad byte is reported with its line."""
    path = tmp_path / "passwd"
    path.write_bytes(SOURCE_FILE.encode() + b"j\xf6rg:" + GOOD.encode() + b":user:1\n")
    with pytest.raises(ConfigError) as info:
        UserRepository.load(path)
    assert info.value.source == f"{path}:3"
    assert info.value.key == "encoding"


def test_missing_file_raises_config_error(tmp_path):
    """A repository file that cannot be read is a ConfigError naming the file."""
    with pytest.raises(ConfigError) as info:
        UserRepository.load(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(info.value)


# -- rewriting ----------------------------------------------------------------------------

def test_replace_hash_rewrites_only_that_entry(tmp_path):
    """S4.3: replace_hash changes one hash, keeps comments and order, file stays 0600."""
    text = "# keep me\n\n" + SOURCE_FILE + "# trailing\n"
    path = write(tmp_path / "passwd", text, mode=0o644)
    repo = UserRepository.load(path)
    new = hash_password("admin", iterations=FAST)
    assert repo.replace_hash("admin", new) is True
    assert path.read_text() == text.replace(GOOD, new)
    assert mode_of(path) == 0o600
    assert repo.get("admin").password_hash == new
    assert os.listdir(tmp_path) == ["passwd"]


def test_replace_hash_keeps_edits_made_after_load(tmp_path):
    """replace_hash re-reads the file, so a user added since load is not lost."""
    path = write(tmp_path / "passwd", SOURCE_FILE)
    repo = UserRepository.load(path)
    added = "carol:" + hash_password("c", iterations=FAST) + ":user:1\n"
    write(path, SOURCE_FILE + added)
    repo.replace_hash("guest", hash_password("guest", iterations=FAST))
    assert path.read_text().endswith(added)
    assert repo.get("carol") is not None


def test_replace_hash_with_stale_expected_hash_does_nothing(tmp_path):
    """replace_hash(expected_hash=...) leaves a hash changed meanwhile alone."""
    path = write(tmp_path / "passwd", SOURCE_FILE)
    repo = UserRepository.load(path)
    new = hash_password("x", iterations=FAST)
    assert repo.replace_hash("admin", new, expected_hash="-1") is False
    assert path.read_text() == SOURCE_FILE


def test_replace_hash_refuses_unknown_user_and_bad_hash(tmp_path):
    """replace_hash raises KeyError for a missing user, ValueError for a bad hash."""
    path = write(tmp_path / "passwd", SOURCE_FILE)
    repo = UserRepository.load(path)
    with pytest.raises(KeyError):
        repo.replace_hash("nobody", hash_password("x", iterations=FAST))
    with pytest.raises(ValueError):
        repo.replace_hash("admin", "has:colon")
    assert path.read_text() == SOURCE_FILE


def test_format_entry():
    """format_entry writes user:hash:group:active with active as 1 or 0."""
    assert format_entry(User("u", GOOD, "user", False)) == f"u:{GOOD}:user:0"


# -- default repository -------------------------------------------------------------------

def test_ensure_repository_creates_private_default_file(tmp_path):
    """S4.3/S4.7: a missing repository is created 0600 in a 0700 dir with the defaults."""
    path = tmp_path / "inst" / "etc" / "passwd"
    old_umask = os.umask(0o022)
    try:
        warnings = ensure_repository(path, iterations=FAST)
    finally:
        os.umask(old_umask)
    assert mode_of(path) == 0o600
    assert mode_of(path.parent) == 0o700
    assert len(warnings) == 1 and str(path) in warnings[0]
    repo = UserRepository.load(path)
    assert [(u.name, u.group, u.active) for u in repo.users()] == [
        ("admin", "admin", True), ("guest", "anonymous", True)]
    assert not any(is_legacy_hash(u.password_hash) for u in repo.users())
    assert verify_password(repo.get("admin").password_hash, "admin", "admin")
    assert verify_password(repo.get("guest").password_hash, "guest", "guest")


def test_default_password_warnings_report_both(tmp_path):
    """S4.3: both default users with default passwords get a warning with advice."""
    path = tmp_path / "passwd"
    ensure_repository(path, iterations=FAST)
    warnings = default_password_warnings(UserRepository.load(path))
    assert len(warnings) == 2
    assert "'admin'" in warnings[0] and "usermgr update -u admin" in warnings[0]
    assert "'guest'" in warnings[1] and "usermgr update -u guest" in warnings[1]


def test_default_password_warnings_stop_after_change(tmp_path):
    """S4.3: no warning for a default user whose password was changed."""
    path = tmp_path / "passwd"
    ensure_repository(path, iterations=FAST)
    repo = UserRepository.load(path)
    repo.replace_hash("admin", hash_password("n3w", iterations=FAST))
    warnings = default_password_warnings(repo)
    assert len(warnings) == 1 and "'guest'" in warnings[0]


def test_default_password_warnings_know_the_hashes_just_made(tmp_path):
    """S4.3: the hashes ensure_repository has just written are known to be the
    default passwords; one changed since is checked by hashing, as are all of a
    repository made elsewhere (an earlier start)."""
    path = tmp_path / "passwd"
    made = {}
    ensure_repository(path, iterations=FAST, made=made)
    assert sorted(made.values()) == ["admin", "guest"]
    repo = UserRepository.load(path)
    assert len(default_password_warnings(repo, known=made)) == 2
    repo.replace_hash("guest", hash_password("n3w", iterations=FAST))
    warnings = default_password_warnings(repo, known=made)
    assert len(warnings) == 1 and "'admin'" in warnings[0]
    assert default_password_warnings(repo) == warnings


def test_default_password_warnings_for_legacy_defaults(tmp_path):
    """S4.3: the source system's default entries are flagged as default passwords too."""
    repo = UserRepository.load(write(tmp_path / "passwd", SOURCE_FILE))
    assert len(default_password_warnings(repo)) == 2


def test_ensure_repository_leaves_existing_file_alone(tmp_path):
    """ensure_repository does not touch an existing private repository."""
    path = write(tmp_path / "passwd", SOURCE_FILE)
    assert ensure_repository(path) == []
    assert path.read_text() == SOURCE_FILE


def test_ensure_repository_warns_about_readable_file(tmp_path):
    """S4.7: an existing repository readable by others is reported, not changed."""
    path = write(tmp_path / "passwd", SOURCE_FILE, mode=0o644)
    warnings = ensure_repository(path)
    assert len(warnings) == 1 and "chmod 600" in warnings[0]
    assert mode_of(path) == 0o644


def test_shipped_repository_has_salted_defaults():
    """S4.3: etc/passwd ships admin (admin) and guest (anonymous), salted, defaults flagged."""
    repo = UserRepository.load(SHIPPED)
    assert [(u.name, u.group, u.active) for u in repo.users()] == [
        ("admin", "admin", True), ("guest", "anonymous", True)]
    assert all(u.password_hash.startswith("pbkdf2-sha256$") for u in repo.users())
    assert len(default_password_warnings(repo)) == 2


# -- re-reading a changed file, and usermgr's edits ----------------------------------------

class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def edited_repository(tmp_path):
    path = tmp_path / "passwd"
    ensure_repository(path, iterations=FAST)
    ticks, warnings = Ticks(), []
    repo = UserRepository.load(path, now=ticks, warn=warnings.append)
    return path, repo, ticks, warnings


def test_changed_file_is_read_at_the_next_check(tmp_path):
    """S4.3: a user added to the file is seen by the running repository once a second
    has passed, and the generation goes up."""
    from mqgate.security.users import add_user
    path, repo, ticks, _ = edited_repository(tmp_path)
    add_user(path, "alice", "pw", iterations=FAST)
    assert repo.get("alice") is None and repo.generation == 0   # checked < 1 s ago
    ticks.now += 1.0
    alice = repo.get("alice")
    assert alice is not None and verify_password(alice.password_hash, "alice", "pw")
    assert repo.generation == 1


def test_file_is_looked_at_most_once_a_second(tmp_path, monkeypatch):
    """S4.3: however many logins, the file is stat'ed at most once per second."""
    from mqgate.security import users as module
    path, repo, ticks, _ = edited_repository(tmp_path)
    calls = []
    real = module._signature
    monkeypatch.setattr(module, "_signature", lambda p: calls.append(p) or real(p))
    for _ in range(1000):
        repo.get("admin")
        ticks.now += 0.01   # 1000 logins over 10 s
    assert 9 <= len(calls) <= 11


def test_rewrite_with_the_same_users_keeps_the_generation(tmp_path):
    """S4.3: a rewrite that changes no user (a comment) does not move the generation,
    so verified logins stay cached."""
    path, repo, ticks, _ = edited_repository(tmp_path)
    with open(path, "a", encoding="utf-8") as f:
        f.write("# a note\n")
    ticks.now += 1.0
    assert repo.get("admin") is not None and repo.generation == 0


def test_password_update_changes_what_verifies(tmp_path):
    """S4.3: after update_user, the repository's next check verifies the new password
    and refuses the old one."""
    from mqgate.security.users import update_user
    path, repo, ticks, _ = edited_repository(tmp_path)
    update_user(path, "admin", password="n3w", iterations=FAST)
    ticks.now += 1.0
    stored = repo.get("admin").password_hash
    assert verify_password(stored, "admin", "n3w")
    assert not verify_password(stored, "admin", "admin")
    assert repo.generation == 1


def test_broken_file_keeps_the_last_good_users_and_says_where(tmp_path):
    """S4.3: a file edited into something unreadable keeps the users read before, with
    one warning naming the file and line; fixing it is picked up."""
    path, repo, ticks, warnings = edited_repository(tmp_path)
    good = path.read_text(encoding="utf-8")
    path.write_text(good + "broken line without colons\n", encoding="utf-8")
    lineno = good.count("\n") + 1
    for _ in range(3):
        ticks.now += 1.0
        assert repo.get("admin") is not None
    assert len(warnings) == 1, warnings
    assert f"{path}:{lineno}" in warnings[0] and "stay in force" in warnings[0]
    path.write_text(good.replace(":anonymous:1", ":anonymous:0"), encoding="utf-8")
    ticks.now += 1.0
    assert repo.get("guest").active is False and repo.generation == 1


def test_deleted_user_is_gone_after_the_check(tmp_path):
    """S4.3: a user deleted from the file can no longer be found by the broker."""
    from mqgate.security.users import add_user, delete_user
    path, repo, ticks, _ = edited_repository(tmp_path)
    add_user(path, "bob", "pw", iterations=FAST)
    ticks.now += 1.0
    assert repo.get("bob") is not None
    delete_user(path, "bob")
    ticks.now += 1.0
    assert repo.get("bob") is None and repo.generation == 2


def test_edits_keep_comments_and_owner_only_mode(tmp_path):
    """S4.3, S4.7: usermgr's edits keep the file's comments and its 0600 mode."""
    from mqgate.security.users import add_user
    path = tmp_path / "passwd"
    ensure_repository(path, iterations=FAST)
    os.chmod(path, 0o600)
    add_user(path, "carol", "pw", group="admin", active=False, iterations=FAST)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# mqgate user repository") and ":admin:0\n" in text
    assert mode_of(path) == 0o600


def test_startup_warning_names_the_real_command(tmp_path):
    """S4.3: the default-password warning names `mqgate usermgr update -u NAME`, which
    asks for the password, and never suggests a password on the command line."""
    path = tmp_path / "passwd"
    ensure_repository(path, iterations=FAST)
    warnings = default_password_warnings(UserRepository.load(path))
    assert len(warnings) == 2
    assert "`mqgate usermgr update -u admin`" in warnings[0]
    assert not any(" -p " in w for w in warnings)


def test_reload_reads_at_once_and_reports_a_bad_file(tmp_path):
    """S4.3: reload (the admin request) re-reads a changed file at once, and a file that
    does not parse raises the error, keeping the users read before."""
    from mqgate.security.users import add_user
    path, repo, ticks, warnings = edited_repository(tmp_path)
    add_user(path, "alice", "pw", iterations=FAST)
    assert repo.reload() is True and repo.get("alice") is not None
    assert repo.reload() is False   # nothing new
    path.write_text(path.read_text(encoding="utf-8") + "bad\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        repo.reload()
    ticks.now += 1.0
    assert repo.get("alice") is not None and repo.generation == 1
    assert warnings == []   # said once, by reload's error
