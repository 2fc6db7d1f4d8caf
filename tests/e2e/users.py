"""A user repository (the ``passwd`` file, S4.1) written by a test, for a broker the
test starts on it with the overrides L{write_users} returns."""

from mqgate.security.users import User, format_entry, hash_password

#: PBKDF2 rounds of the test users' hashes: few, so a broker checks a login at once.
ROUNDS = 1000


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
    return {"mqgate.user_repository.file.dirpath": str(directory)}
