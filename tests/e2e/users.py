"""User repositories (the ``passwd`` file, S4.1) for the brokers the tests start.

A broker that finds no repository creates one holding the default users admin/admin
and guest/guest with the production work factor (DEFAULT_ITERATIONS rounds of PBKDF2),
and every login then pays that much CPU. The test brokers get their repository from
here instead, with the same users but few rounds (L{ROUNDS}), so a login is checked at
once: L{seed_default_users} for the default users, L{write_users} for a test's own.
The tests that time logins or watch the work of the hash itself mark themselves
``production_hashes`` (tests/e2e/conftest.py), and their brokers create their
repository as a real one does.
"""

from pathlib import Path

from mqgate.security.users import User, ensure_repository, format_entry, hash_password

#: PBKDF2 rounds of the test users' hashes: few, so a broker checks a login at once.
ROUNDS = 1000

#: The instance a broker runs when the test names none (the shipped configuration's).
DEFAULT_INSTANCE = "mqgate"

#: The ``-D`` key that puts the repository somewhere of the test's choosing.
DIRPATH_KEY = "mqgate.user_repository.file.dirpath"


def write_users(directory, users):
    """Write C{directory}/passwd (owner-only) holding C{users}; return the ``-D``
    overrides of a broker that reads it.

    @param users: C{(name, group)} pairs, each password the user's name, or
        C{(name, password, group)} triples.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    entries = []
    for user in users:
        name, password, group = user if len(user) == 3 else (user[0], *user)
        entries.append(format_entry(
            User(name, hash_password(password, iterations=ROUNDS), group)) + "\n")
    path = directory / "passwd"
    path.write_text("".join(entries), encoding="utf-8")
    path.chmod(0o600)   # as usermgr keeps it: otherwise the broker warns (S4.7)
    return {DIRPATH_KEY: str(directory)}


def seed_default_users(varhome, defines=None, instance=None):
    """Create the repository a broker on C{varhome} would create at its first start
    (the default users, the file 0600 in a 0700 directory, S4.3, S4.7), but with
    L{ROUNDS} rounds; leave alone a repository that exists or that the C{defines} put
    elsewhere (the test's own) or replace by LDAP.

    @return: the path of the repository, or L{None} where the test has its own.
    """
    defines = defines or {}
    if defines.get(DIRPATH_KEY) or defines.get(
            "mqgate.authentication.basic.user_repository", "file") != "file":
        return None
    path = (Path(varhome) / "instances" / (instance or DEFAULT_INSTANCE) / "etc"
            / defines.get("mqgate.user_repository.file.filename", "passwd"))
    ensure_repository(path, iterations=ROUNDS)
    return path
