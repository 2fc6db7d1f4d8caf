# -*- test-case-name: tests.security.test_users -*-
"""
The file user repository (S4.3): one user per line, ``user:hash:group:active``.

The line format is the source system's (FACTS 1.4): UTF-8, exactly three colons,
``active`` is ``1`` or ``0``, the group is ``admin``, ``user`` or ``anonymous``, and at
most one user is in group ``anonymous``. We add ``#`` comment lines and blank lines, which
are kept verbatim when the file is rewritten.

Two password hash forms are read:

- ours, salted and slow: ``pbkdf2-sha256$<iterations>$<salt b64>$<hash b64>``; the
  iteration count travels with the hash so that it can be raised later without
  invalidating existing entries;
- the source system's legacy form, the signed hex MD5 of ``"user:password"``
  (``-2d5455c8583c24eec82c7a1e273ea02e`` for admin/admin). It is accepted as it is, and
  the authenticator re-hashes such an entry to our form on the user's next successful
  login (S4.3).

Every rewrite of the file is atomic: a temporary file with owner-only permissions in the
same directory, flushed to disk, then ``os.replace`` (S4.7). ``mqgate usermgr`` edits the
file through L{add_user}, L{update_user} and L{delete_user}; a running broker's
L{UserRepository} notices the change (its size, mtime or inode) at the next login and
re-reads it, so that no restart is needed (S4.3).
"""

import base64
import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
import threading
import time

import attrs

from mqgate.errors import ConfigError

__all__ = [
    "DEFAULT_ITERATIONS", "GROUPS", "DEFAULT_USERS", "User", "UserRepository",
    "UserError", "add_user", "update_user", "delete_user", "read_users",
    "hash_password", "verify_password", "is_legacy_hash", "check_hash_form",
    "pbkdf2_iterations",
    "check_user_name", "format_entry", "ensure_repository", "default_password_warnings",
]

#: PBKDF2-HMAC-SHA256 rounds for new hashes: about 50 ms per check on one current
#: server core (measured ~41 ms at 200k on a 2020s Xeon), slow enough to make offline
#: guessing expensive and fast enough for a login. Stored per hash, so raising it later
#: leaves existing entries valid.
DEFAULT_ITERATIONS = 250_000

_SCHEME = "pbkdf2-sha256"
_SALT_BYTES = 16
_HASH_BYTES = 32

#: The groups of FACTS 1.4, in the order the source system lists them.
GROUPS = ("admin", "user", "anonymous")
ANONYMOUS_GROUP = "anonymous"

#: The users a new repository is created with (S4.3): (name, password, group).
DEFAULT_USERS = (("admin", "admin", "admin"), ("guest", "guest", "anonymous"))

# The source system writes BigInteger.toString(16): lower-case, no zero padding, an
# optional minus sign (FACTS 1.4). Upper case is accepted in case of hand editing.
_LEGACY_RE = re.compile(r"-?[0-9a-fA-F]{1,32}")
_PBKDF2_RE = re.compile(
    r"pbkdf2-sha256\$([1-9][0-9]{0,9})\$([A-Za-z0-9+/]+={0,2})\$([A-Za-z0-9+/]+={0,2})")

# FACTS 1.4 forbids these in a user name. '#' is refused only in first position,
# because such a line would read back as a comment.
_FORBIDDEN_NAME_CHARS = "*,:\n\r"

_FILE_MODE = 0o600
_DIR_MODE = 0o700

_HEADER = """\
# mqgate user repository.
#
# One user per line:  user:hash:group:active
#   user    at least one character; none of * , : newline CR; not starting with #
#   hash    pbkdf2-sha256$<iterations>$<salt base64>$<hash base64> (salted, slow), or
#           the source system's signed hex MD5 of "user:password", which is accepted
#           and replaced by the salted form on the user's next successful login
#   group   admin, user or anonymous (at most one user in group anonymous)
#   active  1 (may log in) or 0 (may not)
# Lines starting with # and blank lines are ignored. The file is UTF-8.
#
# The default users admin/admin and guest/guest must get new passwords before the
# broker is reachable by anyone else: `mqgate usermgr update -u NAME` asks for the new
# password. Edit users with `mqgate usermgr`; a running broker re-reads this file.
"""


@attrs.frozen
class User:
    """One entry of the repository.

    @ivar name: the user name.
    @ivar password_hash: the stored hash, in either form the module reads.
    @ivar group: one of L{GROUPS}.
    @ivar active: whether the user may log in.
    """

    name: str
    password_hash: str
    group: str
    active: bool = True


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _legacy_hash(user, password):
    """The source system's hash (FACTS 1.4): signed big-endian MD5, hex, no padding."""
    digest = hashlib.md5(f"{user}:{password}".encode("utf-8")).digest()
    n = int.from_bytes(digest, "big", signed=True)
    return ("-" if n < 0 else "") + format(abs(n), "x")


def hash_password(password: str, *, iterations=None) -> str:
    """Hash C{password} with a fresh random salt.

    @param iterations: PBKDF2 rounds; L{DEFAULT_ITERATIONS} when C{None}.
    @return: C{pbkdf2-sha256$<iterations>$<salt b64>$<hash b64>} (no colon in it).
    """
    if iterations is None:
        iterations = DEFAULT_ITERATIONS
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive integer, not {iterations!r}")
    salt = secrets.token_bytes(_SALT_BYTES)
    derived = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{_SCHEME}${iterations}${_b64(salt)}${_b64(derived)}"


def is_legacy_hash(stored: str) -> bool:
    """Whether C{stored} is in the source system's MD5 form (and so wants re-hashing)."""
    return _LEGACY_RE.fullmatch(stored) is not None


def pbkdf2_iterations(stored: str):
    """The PBKDF2 rounds of a salted hash, or C{None} for any other form."""
    match = _PBKDF2_RE.fullmatch(stored)
    return int(match.group(1)) if match is not None else None


def check_hash_form(stored: str):
    """Return C{None} if C{stored} is a hash this module reads, else why not (a phrase)."""
    if is_legacy_hash(stored):
        return None
    match = _PBKDF2_RE.fullmatch(stored)
    if match is None:
        return ("pbkdf2-sha256$<iterations>$<salt base64>$<hash base64>"
                " or the source system's hex MD5")
    try:
        base64.b64decode(match.group(2), validate=True)
        base64.b64decode(match.group(3), validate=True)
    except ValueError:
        return "valid base64 in the salt and hash fields"
    return None


def verify_password(stored: str, user: str, password: str) -> bool:
    """Whether C{password} is the password of C{user} whose stored hash is C{stored}.

    Both forms compare in constant time. A stored value in neither form never matches.
    """
    if is_legacy_hash(stored):
        expected = _legacy_hash(user, password).encode("ascii")
        return hmac.compare_digest(stored.lower().encode("ascii"), expected)
    match = _PBKDF2_RE.fullmatch(stored)
    if match is None:
        return False
    try:
        salt = base64.b64decode(match.group(2), validate=True)
        expected = base64.b64decode(match.group(3), validate=True)
    except ValueError:
        return False
    derived = hashlib.pbkdf2_hmac(
        "sha256", password.encode("utf-8"), salt, int(match.group(1)), len(expected))
    return hmac.compare_digest(derived, expected)


def check_user_name(name: str):
    """Return C{None} if C{name} is a valid user name (FACTS 1.4), else why not."""
    if not name:
        return "at least one character"
    if any(c in _FORBIDDEN_NAME_CHARS for c in name):
        return "no '*', ',', ':', newline or carriage return"
    if name.startswith("#"):
        return "not starting with '#' (that line would be a comment)"
    return None


def format_entry(user: User) -> str:
    """The repository line for C{user}, without the line end."""
    return f"{user.name}:{user.password_hash}:{user.group}:{1 if user.active else 0}"


def _parse_line(line, where):
    """One non-comment line -> L{User}; raises L{ConfigError} naming C{where}."""
    colons = line.count(":")
    if colons != 3:
        raise ConfigError("entry", f"{colons} colon(s)",
                          "exactly 3 colons: user:hash:group:active", where)
    name, password_hash, group, active = line.split(":")
    for key, value, why in (
            ("user name", name, check_user_name(name)),
            ("password hash", password_hash, check_hash_form(password_hash))):
        if why is not None:
            raise ConfigError(key, value, why, where)
    if group not in GROUPS:
        raise ConfigError("group", group, " or ".join(GROUPS), where)
    if active not in ("0", "1"):
        raise ConfigError("active flag", active, "1 or 0", where)
    return User(name, password_hash, group, active == "1")


def _parse(text, path):
    """Repository text -> (lines, users): lines holds comment text or L{User} objects."""
    lines, users, anonymous = [], {}, None
    if text.startswith("\ufeff"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    for number, raw in enumerate(text.split("\n") if text else [], start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            lines.append(line)
            continue
        where = f"{path}:{number}"
        user = _parse_line(line, where)
        if user.name in users:
            raise ConfigError("user name", user.name, "each user only once", where)
        if user.group == ANONYMOUS_GROUP:
            if anonymous is not None:
                raise ConfigError("group", user.group,
                                  f"one user in group anonymous (already {anonymous!r})",
                                  where)
            anonymous = user.name
        users[user.name] = user
        lines.append(user)
    return lines, users


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError("user repository file", os.fspath(path),
                          f"a readable file ({e.strerror})") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        number = data.count(b"\n", 0, e.start) + 1
        raise ConfigError("encoding", repr(data[e.start:e.end]), "UTF-8",
                          f"{path}:{number}") from e


def _render(lines):
    return "".join(
        (format_entry(item) if isinstance(item, User) else item) + "\n" for item in lines)


def _write_atomically(path, text):
    """Replace C{path} with C{text}: owner-only temp file in the same dir, fsync, rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".passwd.", suffix=".tmp")
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def _fsync_directory(directory):
    # The rename is durable only once the directory entry is on disk; best effort,
    # since some platforms and file systems refuse to open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _signature(path):
    """What tells that the file changed: (inode, size, mtime in ns), or None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class UserRepository:
    """The users of one repository file, re-read when the file changes (S4.3).

    Build it with L{load}. Reads (L{get}, L{users}) may run on any thread; rewrites and
    re-reads are serialised by a lock and swap the in-memory state in one assignment.

    L{get} first calls L{refresh}, which looks at the file (one C{stat}) at most once
    every C{check_interval} seconds and re-reads it when its inode, size or mtime
    changed. The broker calls L{get} on its login threads only, so neither the C{stat}
    nor a re-read ever runs on the reactor thread. A file that no longer parses keeps
    the last good users, with a warning naming the line (given to C{warn}).

    @ivar generation: goes up by one each time the users change (a re-read that found
        different content, or L{replace_hash}); a cache of verified logins keyed on it
        is thereby emptied by any change of the repository.
    """

    def __init__(self, path, lines, users, *, check_interval=1.0, now=time.monotonic,
                 warn=None):
        self._path = os.fspath(path)
        self._lines = lines
        self._users = users
        self._lock = threading.Lock()
        self._signature = _signature(self._path)
        self._check_interval = check_interval
        self._now = now
        self._next_check = now() + check_interval
        self._warn = warn if warn is not None else (lambda message: None)
        self._bad_signature = None
        self._generation = 0

    @classmethod
    def load(cls, path, **kwargs) -> "UserRepository":
        """Read the repository at C{path}; C{kwargs} go to the constructor.

        @raise ConfigError: the file cannot be read, is not UTF-8, or a line is
            malformed; C{source} is C{"file:line"} and C{key} names the bad field.
        """
        lines, users = _parse(_read(path), os.fspath(path))
        return cls(path, lines, users, **kwargs)

    @property
    def path(self) -> str:
        """The repository file."""
        return self._path

    @property
    def generation(self) -> int:
        """How many times the users have changed since L{load} (see the class)."""
        return self._generation

    def refresh(self) -> bool:
        """Re-read the file if it changed since it was last read; cheap otherwise.

        Blocking (a C{stat}, perhaps a read): call it off the reactor thread. At most
        one check per C{check_interval}; a thread that finds another one re-reading
        goes on with the users as they are.

        @return: whether the users changed.
        """
        now = self._now()
        if now < self._next_check or not self._lock.acquire(blocking=False):
            return False
        try:
            return self._check(now)
        finally:
            self._lock.release()

    def reload(self) -> bool:
        """Re-read the file now, whatever the time of the last check (the admin
        C{reload} request). Blocking: call it off the reactor thread.

        @return: whether the users changed.
        @raise ConfigError: the file does not parse; the users read before stay.
        """
        with self._lock:
            self._next_check = self._now() + self._check_interval
            signature = _signature(self._path)
            try:
                lines, users = _parse(_read(self._path), self._path)
            except ConfigError:
                self._bad_signature = signature   # said here; not warned again
                raise
            self._signature, self._bad_signature = signature, None
            return self._swap(lines, users)

    def _check(self, now):
        # Called with the lock held.
        self._next_check = now + self._check_interval
        signature = _signature(self._path)
        if signature == self._signature or signature == self._bad_signature:
            return False
        try:
            lines, users = _parse(_read(self._path), self._path)
        except ConfigError as e:
            self._bad_signature = signature
            self._warn(f"the user repository {self._path} changed but cannot be "
                       f"read ({e}); the users read before stay in force until it "
                       "is fixed")
            return False
        self._bad_signature = None
        self._signature = signature
        return self._swap(lines, users)

    def _swap(self, lines, users):
        # Called with the lock held. Only a change of the users moves the generation:
        # a rewrite that changed a comment leaves verified logins valid.
        changed = users != self._users
        self._lines, self._users = lines, users
        if changed:
            self._generation += 1
        return changed

    def get(self, name: str):
        """The L{User} called C{name}, or C{None}, after a L{refresh}."""
        self.refresh()
        return self._users.get(name)

    def users(self) -> list:
        """Every L{User}, in file order (as last read; no L{refresh})."""
        return list(self._users.values())

    def anonymous_user(self):
        """The (single) L{User} of group anonymous, or C{None}.

        No L{refresh}: this is asked on the reactor thread. It sees the users as the
        last login check read them."""
        for user in self._users.values():
            if user.group == ANONYMOUS_GROUP:
                return user
        return None

    def replace_hash(self, name: str, new_hash: str, *, expected_hash=None) -> bool:
        """Set the hash of user C{name} and rewrite the file atomically.

        The file is read again first, so an edit made since L{load} (by C{usermgr})
        is kept; the in-memory users then reflect the file as written.

        @param expected_hash: if given, replace only when the file still holds this
            hash for C{name} (so a password changed meanwhile is not overwritten).
        @return: C{True} if the file was rewritten, C{False} if C{expected_hash}
            did not match.
        @raise KeyError: no user C{name} in the file.
        @raise ValueError: C{new_hash} is not a hash this module reads.
        @raise ConfigError: the file on disk is no longer valid.
        """
        why = check_hash_form(new_hash)
        if why is not None:
            raise ValueError(f"new hash for {name!r} is not {why}")
        with self._lock:
            lines, users = _parse(_read(self._path), self._path)
            current = users.get(name)
            if current is None:
                raise KeyError(name)
            if expected_hash is not None and current.password_hash != expected_hash:
                return False
            updated = attrs.evolve(current, password_hash=new_hash)
            lines = [updated if item is current else item for item in lines]
            users = dict(users)
            users[name] = updated
            _write_atomically(self._path, _render(lines))
            self._signature = _signature(self._path)
            self._swap(lines, users)
        return True


# -- editing the file (mqgate usermgr) ----------------------------------------------------

class UserError(Exception):
    """An edit of the repository that cannot be made; the message says why and what
    to do instead."""


def read_users(path) -> list:
    """Every L{User} of the repository file at C{path}, in file order.

    @raise ConfigError: the file cannot be read or does not parse.
    """
    return list(_parse(_read(path), os.fspath(path))[1].values())


def _edit(path, change):
    """Read the file, apply C{change(lines, users) -> lines}, write it atomically.

    The result is parsed again before it is written, so an edit can never leave a
    file the broker would refuse.
    """
    path = os.fspath(path)
    lines, users = _parse(_read(path), path)
    lines = change(lines, users)
    text = _render(lines)
    _parse(text, path)
    _write_atomically(path, text)


def _check_new_name(name):
    why = check_user_name(name)
    if why is not None:
        raise UserError(f"bad user name {name!r}: a user name has {why}")


def _check_group(group):
    if group not in GROUPS:
        raise UserError(f"bad group {group!r}: one of {', '.join(GROUPS)}")


def _refuse_second_anonymous(users, name, group):
    if group != ANONYMOUS_GROUP:
        return
    for other in users.values():
        if other.group == ANONYMOUS_GROUP and other.name != name:
            raise UserError(
                f"user {other.name!r} is already in group anonymous, and only one user "
                "may be (it is who anonymous clients log in as); delete it or move it "
                "to another group first")


def _refuse_losing_last_admin(users, name, after):
    """Refuse an edit that leaves no active admin: nobody could administer the broker."""
    admins = [u for u in users.values() if u.group == "admin" and u.active]
    if [u.name for u in admins] == [name] and (
            after is None or after.group != "admin" or not after.active):
        raise UserError(
            f"user {name!r} is the last active user of group admin; without one nobody "
            "could use the admin service. Add another admin first "
            "(mqgate usermgr add -u NAME -g admin)")


def add_user(path, name, password, *, group="user", active=True, iterations=None):
    """Add user C{name} to the repository file at C{path}.

    @raise UserError: a bad name or group, the user exists, or a second anonymous user.
    @raise ConfigError: the file cannot be read, does not parse, or cannot be written.
    """
    _check_new_name(name)
    _check_group(group)
    new = User(name, hash_password(password, iterations=iterations), group, active)

    def change(lines, users):
        if name in users:
            raise UserError(f"user {name!r} exists already; change it with "
                            f"`mqgate usermgr update -u {name}`")
        _refuse_second_anonymous(users, name, group)
        return lines + [new]

    _edit(path, change)
    return new


def update_user(path, name, *, password=None, group=None, active=None, iterations=None):
    """Change the password, group or active flag of user C{name}.

    @raise UserError: no such user, a bad group, a second anonymous user, or the last
        active admin would be lost.
    @raise ConfigError: the file cannot be read, does not parse, or cannot be written.
    """
    if group is not None:
        _check_group(group)
    new_hash = (hash_password(password, iterations=iterations)
                if password is not None else None)
    result = []

    def change(lines, users):
        current = users.get(name)
        if current is None:
            raise UserError(f"no user {name!r}; `mqgate usermgr list` shows the users")
        updated = attrs.evolve(
            current,
            password_hash=new_hash if new_hash is not None else current.password_hash,
            group=group if group is not None else current.group,
            active=active if active is not None else current.active)
        _refuse_second_anonymous(users, name, updated.group)
        _refuse_losing_last_admin(users, name, updated)
        result.append(updated)
        return [updated if item is current else item for item in lines]

    _edit(path, change)
    return result[0]


def delete_user(path, name):
    """Remove user C{name} from the repository file at C{path}.

    @raise UserError: no such user, or it is the last active admin.
    @raise ConfigError: the file cannot be read, does not parse, or cannot be written.
    """
    def change(lines, users):
        current = users.get(name)
        if current is None:
            raise UserError(f"no user {name!r}; `mqgate usermgr list` shows the users")
        _refuse_losing_last_admin(users, name, None)
        return [item for item in lines if item is not current]

    _edit(path, change)


def _make_private_dir(directory):
    if os.path.isdir(directory):
        return
    os.makedirs(directory, mode=_DIR_MODE)
    # makedirs' mode is filtered by the umask; owner-only is what S4.7 asks for.
    os.chmod(directory, _DIR_MODE)


def ensure_repository(path, *, iterations=None, made=None) -> list:
    """Create the repository at C{path} with the default users if it does not exist.

    A new file gets mode 0600 in a directory created with mode 0700 (S4.7), and holds
    admin/admin (group admin) and guest/guest (group anonymous), salted (S4.3).

    @param iterations: PBKDF2 rounds for the new hashes (default L{DEFAULT_ITERATIONS}).
    @param made: a dict to fill with C{{stored hash: password}} for the default users
        written, for L{default_password_warnings}; None: not wanted.
    @return: warnings for the operator (creation, a file others may read).
    """
    path = os.fspath(path)
    if os.path.exists(path):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            return [f"user repository {path} is accessible to other users "
                    f"(mode {mode:04o}); restrict it with `chmod 600 {path}`"]
        return []
    _make_private_dir(os.path.dirname(os.path.abspath(path)))
    users = []
    for name, password, group in DEFAULT_USERS:
        stored = hash_password(password, iterations=iterations)
        if made is not None:
            made[stored] = password
        users.append(User(name, stored, group, True))
    lines = _HEADER.rstrip("\n").split("\n") + users
    _write_atomically(path, _render(lines))
    return [f"created user repository {path} with the default users "
            + " and ".join(name for name, _, _ in DEFAULT_USERS)]


def default_password_warnings(repository: UserRepository, known=None) -> list:
    """A warning for each default user (admin, guest) whose password is unchanged (S4.3).

    This verifies a password per default user, so it costs one slow hash each: call it
    once at start-up, off the reactor thread if it matters.

    @param known: C{{stored hash: password}} of hashes made a moment ago (the C{made}
        of L{ensure_repository}): their answer is known without hashing again, so a
        broker's first start on a new instance pays for its default users once, not
        twice. Each hash has its own random salt: an entry only matches its own line.
    """
    known = known or {}
    warnings = []
    for name, password, _ in DEFAULT_USERS:
        user = repository.get(name)
        if user is None:
            continue
        if (known.get(user.password_hash) == password
                or verify_password(user.password_hash, name, password)):
            warnings.append(
                f"user {name!r} still has the default password; change it with "
                f"`mqgate usermgr update -u {name}` (it asks for the new password)")
    return warnings
