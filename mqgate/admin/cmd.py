"""
``mqgate cmd``: admin commands sent to a running broker's admin service (S11.1).

    mqgate cmd [-b HOST:PORT] [-u USER] [--passfile PATH] VERB OBJECT [ARGUMENT ...]

    mqgate cmd show client-profile default detail
    mqgate cmd -b broker.example:7676 show client '*' stats queue
    mqgate cmd show client '*' slow-subscriber
    mqgate cmd reload rules
    mqgate cmd metrics dst -t q -n orders -int 5 -msp 3

Like the source's imqcmd (FACTS 1.8): C{-b} names the broker's port mapper (default
localhost and C{mqgate.portmapper.port}, 7676), which says where the C{admin} service
listens; C{-b mqtcp://HOST:PORT/admin} names the admin service's own port. C{-u}
(default C{admin}) must be a user of group admin. The password is never given on the
command line (S4.6): it is C{mqgate.imqcmd.password} (or C{imq.imqcmd.password}) in the
password file (C{mqgate.passfile.*}, or C{--passfile PATH}), else it is asked for at
the terminal.

Exit status: 0 done; 1 the broker answered with an error (bad command, unknown
client or profile); 2 the request could not be made (address, login, configuration).

The C{metrics} commands take imqcmd's C{-int SECONDS} and C{-msp SAMPLES} here, in
the client: it asks C{SAMPLES} times, C{SECONDS} apart, and prints a line per reading
with the rates (messages and bytes per second) worked out from the differences
(L{mqgate.metrics.commands.sampling}); C{--json} then prints one JSON object a line.
"""

import argparse
import json
import sys
import time

from mqgate.admin.client import DEFAULT_TIMEOUT, AdminClient, AdminClientError, \
    find_service_port
from mqgate.admin.wire import OK, BadRequest
from mqgate.errors import ConfigError
from mqgate.portmap.table import DEFAULT_PORT, MqAddressError, parse_mq_url
from mqgate.security.passfile import find_password, passfile_overrides

__all__ = ["add_parser", "PASSWORD_KEY"]

#: The password file key of the admin user's password (the source's imq.imqcmd.password).
PASSWORD_KEY = "mqgate.imqcmd.password"

_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def _list_commands_in_help(parser):
    """Fill the command table into the epilog only when help is printed: building the
    table imports the broker's commands, which a command being sent does not need."""
    format_help = parser.format_help

    def with_commands():
        # One line per usage: a usage may cover several table rows (reload NAME | all).
        from mqgate.admin.commands import admin_commands
        usages = {c.usage: c.help for c in admin_commands().values()}
        listing = "\n".join(f"  {usage}\n      {help_}" for usage, help_ in usages.items())
        parser.epilog = parser.epilog.replace("{listing}", listing)
        return format_help()
    parser.format_help = with_commands


def add_parser(commands, common, settings_of):
    """Add the C{cmd} subcommand to the C{mqgate} parser.

    @param commands: the parser's subparsers.
    @param common: adds the options every tool shares (--config, --varhome, -D ...).
    @param settings_of: C{settings_of(args) -> Settings}.
    """
    parser = commands.add_parser(
        "cmd", help="send an admin command to a running broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Send one admin command to a running broker's admin service and "
                    "print the answer. The password of the admin user comes from the "
                    "password file (mqgate.imqcmd.password) or is asked for; it is "
                    "never given on the command line.",
        epilog="commands:\n{listing}\n\nNAME may be a pattern with * and ?; quote it "
               "for the shell ('*').\n\nmetrics ... -int SECONDS -msp SAMPLES: ask "
               "SAMPLES times, SECONDS apart, a line each with the rates per second."
               "\n\nexit status: 0 done, 1 the broker answered "
               "with an error, 2 the command could not be sent")
    _list_commands_in_help(parser)
    common(parser)
    parser.add_argument(
        "-b", "--broker", metavar="HOST:PORT",
        help="the broker's port mapper (default localhost:mqgate.portmapper.port, "
             f"{DEFAULT_PORT}), or mqtcp://HOST:PORT/admin for the admin port itself")
    parser.add_argument("-u", "--user", default="admin",
                        help="a user of group admin (default admin)")
    parser.add_argument("--passfile", metavar="PATH",
                        help="password file holding mqgate.imqcmd.password "
                             "(default: the broker's, when mqgate.passfile.enabled)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the broker ({DEFAULT_TIMEOUT:g})")
    parser.add_argument("--json", action="store_true",
                        help="print the answer's data as JSON instead of the table")
    # REMAINDER: the command's own options (imqcmd's -t q -n NAME) are words too,
    # sent as they are, even where they look like mqgate's (-n, -c); mqgate cmd's
    # long options and -D may still follow the command (_TRAILING).
    parser.add_argument("words", nargs=argparse.REMAINDER, metavar="WORD",
                        help="the command, VERB OBJECT [ARGUMENT ...], e.g. show "
                             "client-profile default detail, or metrics dst -t q -n "
                             "orders (options of mqgate cmd go before it)")
    parser.set_defaults(run=lambda args: run(_trailing_options(parser, args), settings_of))
    return parser


#: Options of mqgate cmd itself that are read even after the command's words (a script
#: may write `mqgate cmd metrics bkr --json`); its short options there (-n, -c, -b, -u)
#: are the command's own, as imqcmd's -n NAME and -c CLIENTID are.
_TRAILING = ("--varhome", "--config", "--instance", "--passfile", "--timeout", "--json",
             "--broker", "--user", "-D")


def _trailing_options(parser, args):
    """Read the L{_TRAILING} options found among C{args.words} into C{args}."""
    words = list(args.words)
    for at, word in enumerate(words):
        if word.split("=", 1)[0] in _TRAILING:
            parser.parse_args(words[at:], namespace=args)
            args.words = words[:at]
            break
    return args


def run(args, settings_of, *, out=None, err=None):
    """Run C{mqgate cmd}; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if args.words[:1] == ["--"]:
        args.words = args.words[1:]   # the separator is allowed, never needed
    if len(args.words) < 2:
        print("mqgate cmd: give a verb and an object, e.g. show client-profile "
              "default", file=err)
        return 2
    try:
        sampled = _sampling(args.words) if args.words[0] == "metrics" else None
    except BadRequest as e:
        print(f"mqgate cmd: {e}", file=err)
        return 2
    try:
        if args.passfile:
            args.defines = list(args.defines) + passfile_overrides(args.passfile)
        settings = settings_of(args)
        host, port = _admin_address(settings, args)
        password = _password(settings, args.user)
        with AdminClient(host, port, args.user, password, args.timeout) as client:
            if sampled is not None and not sampled.single:
                return _sampled(client, sampled, args.json, out, err)
            words = sampled.words if sampled is not None else args.words
            reply = client.request(words[0], words[1], list(words[2:]))
    except (AdminClientError, ConfigError, MqAddressError) as e:
        print(f"mqgate cmd: {e}", file=err)
        return 2
    if reply.status != OK:
        print(f"mqgate cmd: {reply.text} (status {reply.status})", file=err)
        return 1
    if args.json:
        print(json.dumps(reply.data, indent=2, sort_keys=True), file=out)
    else:
        print(reply.text, end="" if reply.text.endswith("\n") else "\n", file=out)
    return 0


def _sampling(words):
    # Imported here: the metrics commands bring the broker's core with them.
    from mqgate.metrics.commands import sampling
    return sampling(words)


def _sampled(client, sampled, as_json, out, err):
    """Ask C{sampled.readings} times, C{sampled.interval} seconds apart, and print a
    line per reading with the rates since the one before (imqcmd's -int, -msp)."""
    from mqgate.metrics.commands import SampleTable, rates
    words = sampled.words
    table = previous = None
    for reading in range(sampled.readings):
        if reading:
            time.sleep(sampled.interval)
        reply = client.request(words[0], words[1], list(words[2:]))
        now = time.monotonic()
        if reply.status != OK:
            print(f"mqgate cmd: {reply.text} (status {reply.status})", file=err)
            return 1
        data = reply.data
        rates_now = None if previous is None else rates(previous[1], data,
                                                        now - previous[0])
        previous = (now, data)
        if sampled.rates and reading == 0:
            continue    # -m rts: every line shows rates, so the first only starts
        if as_json:
            print(json.dumps({**data, "rates": rates_now or {}}, sort_keys=True),
                  file=out, flush=True)
            continue
        if table is None:
            table = SampleTable(data)
            print(table.head, file=out)
        print(table.line(time.strftime("%H:%M:%S"), data, rates_now), file=out,
              flush=True)
    return 0


def _admin_address(settings, args):
    """C{(host, port)} of the admin service, through the port mapper unless direct."""
    if args.broker is None:
        host, port = settings.portmapper_address()
        host = "localhost" if host in _WILDCARD_HOSTS else host
        return host, find_service_port(host, port, "admin", args.timeout)
    address = parse_mq_url(args.broker)
    if "/" not in args.broker.split("://", 1)[-1]:
        address = address._replace(service="admin")   # HOST:PORT alone: imqcmd's -b
    if address.tls:
        raise AdminClientError("mqgate cmd does not speak TLS yet: use the admin "
                               "service (plain tcp)")
    if address.direct:
        return address.host, address.port
    return address.host, find_service_port(address.host, address.port, address.service,
                                           args.timeout)


def _password(settings, user):
    password = find_password(settings, PASSWORD_KEY, f"Password of {user}: ")
    if password is None:
        raise ConfigError(PASSWORD_KEY, "(not given)",
                          "the password of the admin user in the password file "
                          "(mqgate.passfile.enabled=true, or --passfile PATH), or typed "
                          "at a terminal")
    return password
