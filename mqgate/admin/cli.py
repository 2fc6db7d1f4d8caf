"""
The ``mqgate`` command: tools an operator runs beside the broker.

    mqgate keytool     create the TLS key pair and self-signed certificate (S1.8)
    mqgate cmd         send an admin command to a running broker (S11.1)
    mqgate dbmgr       create, delete, recreate or reset the SQL store's tables (S3.5)
    mqgate usermgr     add, delete, update and list the users of the repository (S4.3)
    mqgate init-config write the shipped configuration, commented, for an operator to edit
    mqgate send        send messages to a queue or topic (the client library, S6.1)
    mqgate receive     receive and print messages from a queue or topic
    mqgate capture     watch (tail) and search captured messages (S7.6)

Each tool reads the same configuration as the broker (``--config``, ``--varhome``,
``--instance``, ``-D key=value``), so it finds the same instance directory.
"""

import argparse
import getpass
import sys

from mqgate.admin.cmd import add_parser as add_cmd_parser
from mqgate.admin.dbmgr import register as add_dbmgr_parser
from mqgate.admin.usermgr import register as add_usermgr_parser
from mqgate.capture.client import register as add_capture_parser
from mqgate.client.cli import register as add_client_parsers
from mqgate.config import read_settings, shipped_properties, shipped_settings
from mqgate.errors import ConfigError
from mqgate.security.passfile import check_passfile, find_password

__all__ = ["main"]


def _common(parser):
    parser.add_argument("-c", "--config", default=None,
                        help="broker configuration file (default: the built-in "
                             "configuration, as `mqgate init-config` writes it)")
    parser.add_argument("--varhome", default="./var",
                        help="directory holding instances/NAME (default ./var)")
    parser.add_argument("-n", "--instance", default=None,
                        help="broker instance name (default from the configuration)")
    parser.add_argument("-D", dest="defines", action="append", default=[],
                        metavar="KEY=VALUE", help="override a configuration key")


def _settings(args):
    overrides = {}
    for text in args.defines:
        key, sep, value = text.partition("=")
        if not sep:
            raise ConfigError("-D", text, "key=value")
        overrides[key] = value
    if args.config:
        settings = read_settings(args.config, overrides, instance=args.instance,
                                 varhome=args.varhome)
    else:
        settings = shipped_settings(overrides, instance=args.instance,
                                    varhome=args.varhome)
    if settings["mqgate.passfile.enabled"]:
        # S4.6: every tool refuses a password file others can read, as the broker does.
        check_passfile(settings.passfile_path)
    return settings


def _keystore_password(settings, args):
    if args.nopassword:
        return None
    password = find_password(settings, "mqgate.keystore.password")
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise ConfigError("mqgate.keystore.password", "(not given)",
                          "a password in the password file (mqgate.passfile.enabled=true), "
                          "typed at a terminal, or --nopassword for an unencrypted key")
    first = getpass.getpass("Password for the new TLS key: ")
    if first != getpass.getpass("Repeat the password: "):
        raise ConfigError("password", "(hidden)", "the same password typed twice")
    return first or None


def keytool(args):
    # cryptography is imported here, by the one tool that uses it.
    from mqgate.security.keytool import create_keystore
    settings = _settings(args)
    password = _keystore_password(settings, args)
    key_path, cert_path = create_keystore(
        settings.keystore_dir, hostname=args.hostname, days=args.days, password=password,
        overwrite=args.force)
    print(f"created {key_path} (private key, owner-only"
          f"{', encrypted' if password else ''}) and {cert_path} "
          f"(self-signed certificate for {args.hostname}, {args.days} days)")
    print("the ssljms and ssladmin services use them; add them to "
          "mqgate.service.activelist to start them")
    return 0


def init_config(args):
    """Write the shipped configuration (every key, commented) to args.path, or stdout."""
    text = shipped_properties()
    if args.path == "-":
        sys.stdout.write(text)
        return 0
    # "x" refuses an existing file without a window between looking and writing.
    try:
        with open(args.path, "w" if args.force else "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise FileExistsError(
            f"{args.path} exists; use --force to replace it") from None
    print(f"wrote {args.path}: every setting with what it means and its default; "
          f"edit it, then start the broker with: twistd -n mqgate --config {args.path}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mqgate", description="Tools for the mqgate message broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    kt = commands.add_parser(
        "keytool", help="create the TLS key pair and self-signed certificate",
        description="Create the key pair and self-signed certificate that the TLS "
                    "services (ssljms, ssladmin) present. The key's password comes from "
                    "the password file (mqgate.passfile.enabled) or is asked for.")
    _common(kt)
    kt.add_argument("--hostname", default="localhost",
                    help="host name (or IP) the certificate is for (default localhost)")
    kt.add_argument("--days", type=int, default=3650, help="validity in days (3650)")
    kt.add_argument("--nopassword", action="store_true",
                    help="leave the private key unencrypted (protected by file mode only)")
    kt.add_argument("--force", action="store_true", help="replace an existing key pair")
    kt.set_defaults(run=keytool)
    ic = commands.add_parser(
        "init-config", help="write a starting configuration file to edit",
        description="Write the configuration the broker runs on when it is started "
                    "without --config (AMQP and STOMP on 5672, STOMP on 61613, the port "
                    "mapper on 7676, all on 127.0.0.1), with every other setting "
                    "listed, commented out, with what it means and its default.")
    ic.add_argument("path", nargs="?", default="mqgate.properties",
                    help="file to write (default mqgate.properties; - for stdout)")
    ic.add_argument("--force", action="store_true", help="replace an existing file")
    ic.set_defaults(run=init_config)
    add_cmd_parser(commands, _common, _settings)
    add_dbmgr_parser(commands, _common, _settings)
    add_usermgr_parser(commands, _common, _settings)
    add_client_parsers(commands)
    add_capture_parser(commands, _common, _settings)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ConfigError, FileExistsError, ValueError) as e:
        print(f"mqgate {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
