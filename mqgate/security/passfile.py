# -*- test-case-name: tests.security.test_passfile -*-
"""
The password file (S4.6): passwords the broker and its tools need (the TLS key's, the
database's, the admin user's for ``mqgate cmd``, a user's for ``mqgate usermgr``) come
from a properties file or an interactive prompt, never from the command line.

A password file that other users may read or write is refused, with the fix: anyone
who can read it has every password in it, and anyone who can write it chooses the
passwords a tool will use (S4.6, S4.7).
"""

import getpass
import os
import stat
import sys

from mqgate.config.properties import parse_properties
from mqgate.errors import ConfigError

__all__ = ["find_password", "check_passfile", "read_passfile"]

# Read or write for group or others; execute bits mean nothing for a data file.
_OTHERS_RW = 0o066


def _who(mode):
    """'group and others can read it' and the like, for the message."""
    parts = []
    for who, read, write in (("group", stat.S_IRGRP, stat.S_IWGRP),
                             ("others", stat.S_IROTH, stat.S_IWOTH)):
        can = [verb for verb, bit in (("read", read), ("write", write)) if mode & bit]
        if can:
            parts.append(f"{who} can {' and '.join(can)} it")
    return "; ".join(parts)


def _refuse_if_shared(path, mode):
    mode = stat.S_IMODE(mode)
    if mode & _OTHERS_RW:
        raise ConfigError(
            "mqgate.passfile.name", path,
            f"a password file only its owner can read and write; it has mode "
            f"{mode:04o} ({_who(mode)}): run `chmod 600 {path}`")


def check_passfile(path):
    """Refuse the password file at C{path} if group or others may read or write it.

    A missing file passes (the caller that reads it says so).

    @raise ConfigError: naming the file, its mode and the command that fixes it.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    _refuse_if_shared(path, mode)


def read_passfile(path):
    """The entries C{(key, value, line)} of the password file at C{path}.

    The mode is checked on the opened file, so that the file checked is the file read.

    @raise ConfigError: the file is unreadable, or others may read or write it.
    """
    try:
        with open(path, encoding="utf-8") as f:
            _refuse_if_shared(path, os.fstat(f.fileno()).st_mode)
            text = f.read()
    except OSError as e:
        raise ConfigError("mqgate.passfile.enabled", "true",
                          f"a readable password file at {path} ({e.strerror})") from None
    return parse_properties(text, source=path)


def passfile_overrides(path):
    """The C{-D} overrides that make the tools read passwords from the file at C{path}
    (their C{--passfile PATH} option)."""
    path = os.path.abspath(path)
    return ["mqgate.passfile.enabled=true",
            f"mqgate.passfile.dirpath={os.path.dirname(path)}",
            f"mqgate.passfile.name={os.path.basename(path)}"]


def find_password(settings, key, prompt=None, *, stdin=None):
    """The password stored under C{key} (C{mqgate.} or C{imq.} spelling).

    From the password file when C{mqgate.passfile.enabled}; else, when C{prompt} is given
    and a person is at the terminal, asked for; else None.

    @raise ConfigError: the password file is enabled but unreadable, or others may
        read or write it.
    """
    if settings["mqgate.passfile.enabled"]:
        entries = read_passfile(settings.passfile_path)
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
