# -*- test-case-name: tests.admin.test_usermgr -*-
"""
``mqgate usermgr``: add, delete, update and list the users of the file repository (S4.3).

Like the source's imqusermgr (FACTS 1.4), with its options where they fit::

    mqgate usermgr add    -u NAME [-g admin|user|anonymous] [-a true|false]
    mqgate usermgr update -u NAME [-g GROUP] [-a true|false] [--set-password]
    mqgate usermgr delete -u NAME
    mqgate usermgr list   [-u NAME] [--json]
    mqgate usermgr active [--json]          (the active users only)

It edits the repository file of the instance the broker reads (``--config``,
``--varhome``, ``-n``, ``-D`` as for the other tools), atomically and with owner-only
permissions; a running broker re-reads the file at the next login.

The password is never taken from the command line (it would show in the process list
and the shell history): it comes from the password file (``mqgate.usermgr.password``,
with ``--passfile FILE`` or the broker's ``mqgate.passfile.*`` settings), or is asked
for twice at the terminal, not echoed. ``-p`` is refused with a message saying so.

Exit status: 0 done; 1 the request cannot be done (the user exists, no such user, a
bad name, a second anonymous user, the last admin, an unreadable repository); 2 a bad
command line or configuration.
"""

import argparse
import getpass
import json
import sys

from mqgate.errors import ConfigError
from mqgate.security import users as _users
from mqgate.security.passfile import find_password, passfile_overrides

__all__ = ["ACTIONS", "PASSWORD_KEY", "register", "run"]

ACTIONS = ("add", "delete", "update", "list", "active")

#: The password file's key for the password of the user being added or updated.
PASSWORD_KEY = "mqgate.usermgr.password"

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2

_NO_PASSWORD_ON_COMMAND_LINE = (
    "a password is never given on the command line, where the process list and the "
    "shell history would show it: type it when asked (run at a terminal), or put "
    f"{PASSWORD_KEY}=... in a password file only you can read (chmod 600) and give "
    "--passfile FILE")


class _RefusePassword(argparse.Action):
    """C{-p}: refused whatever follows it, without repeating what followed."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(EXIT_USAGE, f"mqgate usermgr: {option_string}: "
                                f"{_NO_PASSWORD_ON_COMMAND_LINE}\n")


def _flag(text):
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"true or false, not {text!r}")


def register(commands, common, settings_of):
    """Add the C{usermgr} subcommand to the C{mqgate} parser.

    @param commands: the subparsers of the C{mqgate} command.
    @param common: adds the options every tool shares (-c, --varhome, -n, -D).
    @param settings_of: C{args -> Settings}.
    """
    parser = commands.add_parser(
        "usermgr", help="add, delete, update or list the broker's users",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Manage the users of the broker's file repository "
                    "(mqgate.user_repository.file.*). A running broker picks up the "
                    "changes at the next login; no restart is needed.",
        epilog="actions:\n"
               "  add     add user -u (group -g, default user; -a, default true);\n"
               "          asks for the password twice\n"
               "  update  change the group (-g) or active flag (-a) of user -u; with\n"
               "          neither, or with --set-password, asks for a new password\n"
               "  delete  remove user -u (never the last active admin)\n"
               "  list    list the users (or only -u) with group and active flag\n"
               "  active  list only the active users; to (de)activate one, use\n"
               "          `update -u NAME -a true|false`\n\n"
               "The password is asked for at the terminal, or read from the password\n"
               f"file's {PASSWORD_KEY} (--passfile FILE, or mqgate.passfile.enabled);\n"
               "never from the command line.\n\n"
               "exit status: 0 done, 1 refused (see the message), 2 bad usage")
    parser.add_argument("action", choices=ACTIONS, help=" | ".join(ACTIONS))
    common(parser)
    parser.add_argument("-u", "--user", dest="name", default=None, help="the user name")
    parser.add_argument("-g", "--group", choices=_users.GROUPS, default=None,
                        help="admin | user | anonymous (add: default user; only one "
                             "user may be in group anonymous)")
    parser.add_argument("-a", "--active", type=_flag, default=None, metavar="true|false",
                        help="whether the user may log in (add: default true)")
    parser.add_argument("--set-password", action="store_true",
                        help="update: also ask for a new password when -g or -a is given")
    parser.add_argument("--passfile", metavar="FILE",
                        help=f"password file holding {PASSWORD_KEY} (instead of a "
                             "prompt)")
    parser.add_argument("--json", action="store_true", help="list: print JSON")
    parser.add_argument("-p", "--password", "--passwd", nargs="?", action=_RefusePassword,
                        help=argparse.SUPPRESS)
    parser.set_defaults(run=lambda args: run(args, settings_of))


def run(args, settings_of, *, out=None, err=None, stdin=None):
    """Carry out C{args.action}; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if args.action in ("add", "update", "delete") and not args.name:
        print(f"mqgate usermgr {args.action}: give the user with -u NAME", file=err)
        return EXIT_USAGE
    try:
        if args.passfile:
            args.defines = list(args.defines) + passfile_overrides(args.passfile)
        settings = settings_of(args)
    except ConfigError as e:
        print(f"mqgate usermgr: {e}", file=err)
        return EXIT_USAGE
    path = settings.user_repository_path
    try:
        for note in _users.ensure_repository(path):
            print(f"mqgate usermgr: {note}", file=err)
        text = _ACTIONS[args.action](args, settings, path, stdin)
    except _PasswordMissing as e:
        print(f"mqgate usermgr {args.action}: {e}", file=err)
        return EXIT_USAGE
    except (_users.UserError, ConfigError) as e:
        print(f"mqgate usermgr {args.action}: {e}", file=err)
        return EXIT_REFUSED
    except OSError as e:
        print(f"mqgate usermgr {args.action}: {path}: {e.strerror}", file=err)
        return EXIT_REFUSED
    if text:
        print(text, end="" if text.endswith("\n") else "\n", file=out)
    return EXIT_OK


class _PasswordMissing(Exception):
    """No password in the password file and no terminal to ask at."""


def _password(settings, name, stdin):
    """The new password of C{name}: from the password file, else typed twice."""
    if settings["mqgate.passfile.enabled"]:
        password = find_password(settings, PASSWORD_KEY)
        if password is None:
            raise _PasswordMissing(
                f"the password file {settings.passfile_path} has no {PASSWORD_KEY}")
        return password
    stdin = sys.stdin if stdin is None else stdin
    if stdin is None or not stdin.isatty():
        raise _PasswordMissing(
            f"no terminal to ask for the password of {name!r} at: run it at a terminal, "
            f"or give --passfile FILE holding {PASSWORD_KEY}=...")
    first = getpass.getpass(f"Password of {name}: ")
    if first != getpass.getpass(f"Repeat the password of {name}: "):
        raise _users.UserError("the two passwords differ; nothing was changed")
    if not first:
        raise _users.UserError("an empty password is not allowed; nothing was changed")
    return first


def _add(args, settings, path, stdin):
    # Checked before asking for a password, so that a typo costs no typing.
    why = _users.check_user_name(args.name)
    if why is not None:
        raise _users.UserError(f"bad user name {args.name!r}: a user name has {why}")
    if any(u.name == args.name for u in _users.read_users(path)):
        raise _users.UserError(f"user {args.name!r} exists already; change it with "
                               f"`mqgate usermgr update -u {args.name}`")
    password = _password(settings, args.name, stdin)
    user = _users.add_user(path, args.name, password, group=args.group or "user",
                           active=True if args.active is None else args.active)
    return f"added user {user.name!r} (group {user.group}, " \
           f"{'active' if user.active else 'inactive'}) to {path}"


def _update(args, settings, path, stdin):
    if all(u.name != args.name for u in _users.read_users(path)):
        raise _users.UserError(
            f"no user {args.name!r}; `mqgate usermgr list` shows the users")
    wants_password = args.set_password or (args.group is None and args.active is None)
    password = _password(settings, args.name, stdin) if wants_password else None
    user = _users.update_user(path, args.name, password=password, group=args.group,
                              active=args.active)
    changed = [what for what, given in (("password", password is not None),
                                        ("group", args.group is not None),
                                        ("active flag", args.active is not None)) if given]
    return (f"updated the {' and '.join(changed)} of user {user.name!r} (group "
            f"{user.group}, {'active' if user.active else 'inactive'}) in {path}")


def _delete(args, settings, path, stdin):
    _users.delete_user(path, args.name)
    return f"deleted user {args.name!r} from {path}"


def _list(args, settings, path, stdin, *, only_active=False):
    users = _users.read_users(path)
    if args.name:
        users = [u for u in users if u.name == args.name]
        if not users:
            raise _users.UserError(f"no user {args.name!r}")
    if only_active:
        users = [u for u in users if u.active]
    if args.json:
        return json.dumps([{"user": u.name, "group": u.group, "active": u.active}
                           for u in users], indent=2)
    return _table(users)


def _table(users):
    rows = [("USER", "GROUP", "ACTIVE")] + [
        (u.name, u.group, "true" if u.active else "false") for u in users]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


_ACTIONS = {
    "add": _add, "update": _update, "delete": _delete, "list": _list,
    "active": lambda args, settings, path, stdin: _list(args, settings, path, stdin,
                                                       only_active=True),
}
