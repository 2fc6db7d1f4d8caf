"""
``mqgate send`` and ``mqgate receive``: operators' tools on the client library (S6.1).

    mqgate send URL ADDRESS (--body TEXT | --file PATH) [--count N] [--property K=V]...
                [--at-most-once] [--json]
    mqgate receive URL ADDRESS [--count N] [--timeout S] [--json]

The password never goes on the command line (where `ps` shows it): it comes from
C{MQGATE_PASSWORD}, from the first line of C{--password-file}, or is asked for at a
terminal. Exit codes: 0 done; 1 the broker or the connection failed (the message says
what it said); 2 a bad argument (named); 3 C{receive} got fewer than C{--count}
messages within C{--timeout}.
"""

import argparse
import base64
import getpass
import json
import os
import re
import sys

from mqgate.client.urls import UrlError, parse_url

__all__ = ["register", "send_main", "receive_main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
_INT = re.compile(r"-?[0-9]{1,18}")

_COMMON_EPILOG = """\
The user is --user, else the URL's (amqp://USER@host), else $MQGATE_USER; the password
comes from $MQGATE_PASSWORD, the first line of --password-file, or a prompt at a
terminal (never from the command line). URLs: amqp://host:5672, amqps://host:5671
(certificate and host name verified; --ca-file, --server-name, --no-verify),
mq://host:7676/jms (asks the port mapper), http(s)://host:port/tunnel, ws(s)://host:port/ws.
Addresses: queue://NAME, topic://NAME, or a bare queue name.
Exit codes: 0 done, 1 the broker or connection failed, 2 bad argument, 3 receive timed
out before --count messages."""


def _connection_arguments(parser):
    parser.add_argument("url", help="the broker, e.g. amqp://127.0.0.1:5672")
    parser.add_argument("address", help="queue://NAME, topic://NAME or a queue name")
    parser.add_argument("-u", "--user", default=None, help="user name (see below)")
    parser.add_argument("--password-file", default=None, metavar="PATH",
                        help="file whose first line is the password")
    parser.add_argument("--ca-file", default=None, metavar="PEM",
                        help="CA certificates to verify the broker with (TLS URLs)")
    parser.add_argument("--server-name", default=None,
                        help="verify the broker's certificate for this name, not the "
                             "URL's host")
    parser.add_argument("--no-verify", action="store_true",
                        help="do not verify the broker's certificate (TLS URLs; unsafe)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per line instead of text")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to connect and log in (default 10)")


def register(commands):
    """Add the C{send} and C{receive} subcommands to the C{mqgate} command."""
    send = commands.add_parser(
        "send", help="send messages to a queue or topic",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Send --count messages with the same body to ADDRESS, each "
                    "confirmed by the broker (at-least-once) unless --at-most-once.",
        epilog="example:\n  MQGATE_PASSWORD=admin mqgate send -u admin "
               "amqp://127.0.0.1:5672 queue://examples --body 'Hello' --property "
               "colour=red\n\n" + _COMMON_EPILOG)
    _connection_arguments(send)
    body = send.add_mutually_exclusive_group(required=True)
    body.add_argument("--body", default=None, help="the body, as text")
    body.add_argument("--file", default=None, metavar="PATH",
                      help="the body, the file's bytes (- for standard input)")
    send.add_argument("--count", type=int, default=1, metavar="N",
                      help="how many messages (default 1)")
    send.add_argument("--property", action="append", default=[], metavar="K=V",
                      help="an application property (repeatable); whole numbers and "
                           "true/false are sent typed, anything else as text")
    send.add_argument("--durable", action="store_true",
                      help="persistent messages (stored before the broker accepts)")
    send.add_argument("--at-most-once", action="store_true",
                      help="send pre-settled, without waiting for the broker's outcome")
    send.set_defaults(run=send_main)
    receive = commands.add_parser(
        "receive", help="receive messages from a queue or topic",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Receive up to --count messages from ADDRESS and print them (text: "
                    "the body, one per line; --json: body, properties and fields).",
        epilog="example:\n  MQGATE_PASSWORD=admin mqgate receive -u admin "
               "amqp://127.0.0.1:5672 queue://examples --count 1 --timeout 10\n\n"
               + _COMMON_EPILOG)
    _connection_arguments(receive)
    receive.add_argument("--count", type=int, default=1, metavar="N",
                         help="messages to receive, then stop (default 1; 0: until "
                              "--timeout passes without one)")
    receive.add_argument("--timeout", type=float, default=10.0, metavar="S",
                         help="seconds to wait for each message (default 10)")
    receive.add_argument("--selector", default=None,
                         help="a JMS selector on the messages' properties")
    receive.set_defaults(run=receive_main)


def _typed(text):
    if _INT.fullmatch(text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    return text


def _properties(items):
    properties = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UrlError(f"--property {item!r}: write it as KEY=VALUE")
        properties[key] = _typed(value)
    return properties


def _credentials(args, url):
    if url.password is not None:
        raise UrlError(f"broker URL {url.text}: a password in the URL would show in the "
                       "process list; give it in $MQGATE_PASSWORD or --password-file")
    user = args.user or url.user or os.environ.get("MQGATE_USER")
    if user is None:
        return "ANONYMOUS"
    password = os.environ.get("MQGATE_PASSWORD")
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as handle:
                password = handle.readline().rstrip("\r\n")
        except OSError as e:
            raise UrlError(f"--password-file {args.password_file}: "
                           f"{e.strerror or e}") from None
    if password is None:
        if not sys.stdin.isatty():
            raise UrlError(f"no password for user {user!r}: set $MQGATE_PASSWORD or "
                           "give --password-file")
        password = getpass.getpass(f"Password for {user}: ")
    return (user, password)


def _check(args):
    if args.count < 0:
        raise UrlError(f"--count {args.count}: give 0 or more")
    if args.connect_timeout <= 0:
        raise UrlError(f"--connect-timeout {args.connect_timeout}: give seconds above 0")
    url = parse_url(args.url)
    return url, _credentials(args, url)


def _connect(reactor, args, url, credentials):
    # The client (and the AMQP engine) is imported only where it is used, here and
    # below: `mqgate --help` and the other tools start without it.
    from mqgate.client.connection import connect
    return connect(url, credentials=credentials, reactor=reactor, ca_file=args.ca_file,
                   verify=not args.no_verify, server_name=args.server_name,
                   connect_timeout=args.connect_timeout)


def _fail(command, error):
    print(f"mqgate {command}: {error}", file=sys.stderr)
    return EXIT_FAILED


def _read_body(args):
    if args.body is not None:
        return args.body
    try:
        if args.file == "-":
            return sys.stdin.buffer.read()
        with open(args.file, "rb") as handle:
            return handle.read()
    except OSError as e:
        raise UrlError(f"--file {args.file}: {e.strerror or e}") from None


def send_main(args):
    """C{mqgate send}: returns the exit code."""
    from twisted.internet import defer     # only sending and receiving need Twisted
    url, credentials = _check(args)
    body = _read_body(args)
    properties = _properties(args.property)
    outcome = {}

    @defer.inlineCallbacks
    def run(reactor):
        connection = yield _connect(reactor, args, url, credentials)
        try:
            sender = connection.sender(args.address, at_least_once=not args.at_most_once)
            yield sender.ready
            yield defer.gatherResults(
                [sender.send(body, properties, durable=args.durable)
                 for _ in range(args.count)], consumeErrors=True).addErrback(
                lambda failure: failure.value.subFailure)
            outcome["sent"] = args.count
        finally:
            yield connection.close()

    code = _react(run, "send")
    if code:
        return code
    if args.json:
        print(json.dumps({"sent": outcome["sent"], "address": args.address,
                          "url": url.text, "at_least_once": not args.at_most_once}))
    else:
        confirmed = "" if args.at_most_once else ", each accepted by the broker"
        print(f"sent {outcome['sent']} message(s) to {args.address}{confirmed}")
    return EXIT_OK


def receive_main(args):
    """C{mqgate receive}: returns the exit code."""
    from twisted.internet import defer
    url, credentials = _check(args)
    if args.timeout <= 0:
        raise UrlError(f"--timeout {args.timeout}: give seconds above 0")
    wanted = args.count
    got = []

    @defer.inlineCallbacks
    def run(reactor):
        from mqgate.client.connection import AUTO
        connection = yield _connect(reactor, args, url, credentials)
        try:
            limit = max(1, min(wanted, 1000)) if wanted else 1000
            receiver = connection.receiver(args.address, flow_limit=limit,
                                           ack_mode=AUTO, selector=args.selector)
            yield receiver.ready
            while not wanted or len(got) < wanted:
                message = yield receiver.get(timeout=args.timeout)
                if message is None:
                    break
                got.append(message)
                _print(message, args.json)
        finally:
            yield connection.close()

    code = _react(run, "receive")
    if code:
        return code
    if wanted and len(got) < wanted:
        print(f"mqgate receive: received {len(got)} of {wanted} message(s); none came "
              f"within {args.timeout:g} s", file=sys.stderr)
        return EXIT_TIMEOUT
    return EXIT_OK


def _react(run, command):
    """Run C{run(reactor)} on a reactor of its own; the exit code of its failure."""
    from twisted.internet import task
    result = {}

    def main(reactor):
        done = run(reactor)
        done.addErrback(lambda failure: result.setdefault("error", failure.value))
        return done

    try:
        task.react(main)
    except SystemExit as e:
        if e.code not in (0, None) and "error" not in result:
            return _fail(command, "failed")
    error = result.get("error")
    if error is None:
        return EXIT_OK
    if isinstance(error, UrlError):
        print(f"mqgate {command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    from mqgate.client.connection import ClientError
    if isinstance(error, ClientError):
        return _fail(command, error)
    return _fail(command, f"{type(error).__name__}: {error}")


def _print(message, as_json):
    body = message.body
    if not as_json:
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        print(body, flush=True)
        return
    record = {"body": body, "properties": message.properties}
    if isinstance(body, bytes):
        try:
            record["body"] = body.decode("utf-8")
            record["body_encoding"] = "utf-8"
        except UnicodeDecodeError:
            record["body"] = base64.b64encode(body).decode("ascii")
            record["body_encoding"] = "base64"
    for field in ("message_id", "correlation_id", "subject", "reply_to", "to",
                  "content_type", "priority"):
        value = getattr(message, field)
        if value is not None:
            record[field] = value if isinstance(value, (int, float)) else str(value)
    record["durable"] = message.durable
    record["redelivered"] = message.redelivered
    print(json.dumps(record, default=str), flush=True)
