"""
The password file (S4.6): passwords the broker needs (the TLS key's, later the
database's and LDAP's) come from a properties file or an interactive prompt, never from
the command line.
"""

import getpass
import sys

from mqgate.config.properties import parse_properties
from mqgate.errors import ConfigError

__all__ = ["find_password"]


def find_password(settings, key, prompt=None, *, stdin=None):
    """The password stored under C{key} (C{mqgate.} or C{imq.} spelling).

    From the password file when C{mqgate.passfile.enabled}; else, when C{prompt} is given
    and a person is at the terminal, asked for; else None.

    @raise ConfigError: the password file is enabled but unreadable.
    """
    if settings["mqgate.passfile.enabled"]:
        path = settings.passfile_path
        try:
            with open(path, encoding="utf-8") as f:
                entries = parse_properties(f.read(), source=path)
        except OSError as e:
            raise ConfigError("mqgate.passfile.enabled", "true",
                              f"a readable password file at {path} ({e.strerror})") from None
        wanted = {key, "imq." + key[len("mqgate."):]}
        found = None
        for name, value, _line in entries:
            if name in wanted:
                found = value
        return found
    stdin = sys.stdin if stdin is None else stdin
    if prompt and stdin is not None and stdin.isatty():
        return getpass.getpass(prompt)
    return None
