# -*- test-case-name: tests.capture.test_client -*-
"""
C{mqgate capture tail} and C{mqgate capture search}: the capture views (S7.6) from a
terminal, through the HTTP admin API (C{/api/capture/...}) of a running broker.

    mqgate capture tail   [--address A] [--subscription S] [--json]
    mqgate capture search [--address A] [--queue Q] [--from T] [--to T]
                          [--property NAME=VALUE ...] [--correlation-id ID]
                          [--limit N] [--all] [--json]

The broker is reached at C{--url} (default: the httpadmin service of the
configuration, C{http://HOST:mqgate.httpadmin.http.port}). The user (C{-u}, default
admin) logs in with HTTP Basic; the password is C{mqgate.imqcmd.password} in the
password file, as for C{mqgate cmd}, or is asked for at a terminal; never on the
command line.

A plain blocking HTTP client (the standard library's): a command-line tool waits for
one answer at a time, and the tail is one long response read line by line.
"""

import base64
import datetime
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from mqgate.errors import ConfigError
from mqgate.security.passfile import find_password, passfile_overrides

__all__ = ["register", "format_line"]

#: The password file key of the user's password: the same as C{mqgate cmd}'s.
PASSWORD_KEY = "mqgate.imqcmd.password"

#: Seconds without a line after which the tail gives up on the broker: four of its
#: default heartbeats (15 s) missed.
TAIL_TIMEOUT = 60


class CaptureClientError(Exception):
    """The broker could not be asked, or refused: in words for the operator."""


def register(commands, common, settings_of):
    """Add C{mqgate capture} with its C{tail} and C{search} subcommands."""
    parser = commands.add_parser(
        "capture", help="watch and search captured messages (live tail, search)",
        description="Watch the messages capture subscriptions copy as they are "
                    "routed (tail) or search those kept in the capture index "
                    "(search), through the broker's HTTP admin API. The user's "
                    "password comes from the password file (mqgate.imqcmd.password) or "
                    "is asked for; it is never given on the command line.")
    actions = parser.add_subparsers(dest="action", required=True)
    tail = actions.add_parser(
        "tail", help="print captured messages as they are routed, until interrupted",
        description="Print each captured message as the broker copies it, one line "
                    "each (or one JSON object per line with --json), until Ctrl-C. "
                    "Lines say when messages were dropped: by the broker (the capture "
                    "subscription's bounds) or because this reader was too slow.")
    _shared(tail, common)
    tail.add_argument("--address", help="only messages sent to this address (or, for "
                                        "a queue, reaching it)")
    tail.add_argument("--subscription", help="only this capture subscription's")
    tail.add_argument("--count", type=int, default=None, metavar="N",
                      help="stop after N messages (default: run until interrupted)")
    tail.set_defaults(run=lambda args: _run(args, settings_of, _tail))
    search = actions.add_parser(
        "search", help="search the capture index",
        description="Print the captured messages that match, newest first. Times are "
                    "seconds since the epoch or ISO 8601 (2026-12-04T09:30:00Z; UTC "
                    "when no zone is given).")
    _shared(search, common)
    search.add_argument("--address", help="messages sent to this address")
    search.add_argument("--queue", help="messages that reached this queue")
    search.add_argument("--subscription", help="messages of this capture subscription")
    search.add_argument("--from", dest="start", metavar="TIME",
                        help="captured at or after TIME")
    search.add_argument("--to", dest="end", metavar="TIME", help="captured before TIME")
    search.add_argument("--property", action="append", default=[],
                        metavar="NAME=VALUE",
                        help="an application property's value (repeat: all must match)")
    search.add_argument("--correlation-id", help="messages with this correlation id")
    search.add_argument("--limit", type=int, default=50,
                        help="messages per page (default 50, at most 1000)")
    search.add_argument("--all", action="store_true",
                        help="every page, not only the newest")
    search.set_defaults(run=lambda args: _run(args, settings_of, _search))
    return parser


def _shared(parser, common):
    common(parser)
    parser.add_argument("--url", help="the broker's HTTP admin API (default "
                                      "http://HOST:PORT of the httpadmin service in the "
                                      "configuration)")
    parser.add_argument("-u", "--user", default="admin",
                        help="a user of group admin (default admin)")
    parser.add_argument("--passfile", metavar="PATH",
                        help="password file holding mqgate.imqcmd.password (default: "
                             "the broker's, when mqgate.passfile.enabled)")
    parser.add_argument("--json", action="store_true",
                        help="print each message as one JSON object per line")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the broker to answer (default 10)")


def _run(args, settings_of, action, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.passfile:
            args.defines = list(args.defines) + passfile_overrides(args.passfile)
        settings = settings_of(args)
        url = (args.url or _default_url(settings)).rstrip("/")
        password = find_password(settings, PASSWORD_KEY, f"Password of {args.user}: ")
        if password is None:
            raise ConfigError(PASSWORD_KEY, "(not given)",
                              "the password of the user in the password file "
                              "(mqgate.passfile.enabled=true, or --passfile PATH), or "
                              "typed at a terminal")
        auth = "Basic " + base64.b64encode(
            f"{args.user}:{password}".encode("utf-8")).decode("ascii")
        return action(args, url, auth, out)
    except CaptureClientError as e:
        print(f"mqgate capture {args.action}: {e}", file=err)
        return 2
    except KeyboardInterrupt:
        return 0


def _default_url(settings):
    host, port = settings.service_address("httpadmin")
    if not port:
        raise CaptureClientError(
            "the configuration gives the httpadmin service no fixed port "
            "(mqgate.httpadmin.http.port); say where the broker's HTTP admin API is "
            "with --url http://HOST:PORT")
    return f"http://{host or '127.0.0.1'}:{port}"


def _open(url, path, query, auth, timeout):
    target = f"{url}{path}"
    if query:
        target += "?" + urllib.parse.urlencode(query, doseq=True)
    request = urllib.request.Request(target, headers={"Authorization": auth})
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        try:
            why = json.loads(e.read().decode("utf-8"))["error"]
        except Exception:
            why = e.reason
        raise CaptureClientError(f"{url} answered {e.code}: {why}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CaptureClientError(
            f"cannot reach the broker's HTTP admin API at {url} ({reason}); is the "
            "broker running with httpadmin in mqgate.service.activelist? --url says "
            "where it is") from None


def _tail(args, url, auth, out):
    query = {k: v for k, v in (("address", args.address),
                               ("subscription", args.subscription)) if v}
    # The broker sends a heartbeat line at least every mqgate.capture.tail.heartbeat
    # seconds: a longer silence means the broker or the network is gone.
    response = _open(url, "/api/capture/tail", query, auth,
                      max(args.timeout, TAIL_TIMEOUT))
    shown = 0
    try:
        for raw in response:
            line = json.loads(raw)
            if line["type"] == "heartbeat":
                continue
            if args.json:
                out.write(json.dumps(line) + "\n")
            else:
                out.write(format_line(line) + "\n")
            out.flush()
            if line["type"] == "message":
                shown += 1
                if args.count is not None and shown >= args.count:
                    return 0
    except OSError as e:
        raise CaptureClientError(f"the tail from {url} stopped: {e}") from None
    finally:
        response.close()
    raise CaptureClientError(f"the broker at {url} ended the tail (it is stopping?)")


def _search(args, url, auth, out):
    query = {"limit": str(args.limit)}
    for key, value in (("address", args.address), ("queue", args.queue),
                       ("subscription", args.subscription), ("from", args.start),
                       ("to", args.end), ("correlation_id", args.correlation_id)):
        if value:
            query[key] = value
    if args.property:
        query["property"] = list(args.property)
    while True:
        with _open(url, "/api/capture/messages", query, auth, args.timeout) as response:
            page = json.loads(response.read().decode("utf-8"))
        for message in page["messages"]:
            if args.json:
                out.write(json.dumps(message) + "\n")
            else:
                out.write(format_line({"type": "message", **message}) + "\n")
        if not args.all or page["next"] is None:
            break
        query["before"] = str(page["next"])
    if not args.json and not args.all and page["next"] is not None:
        out.write("(more: --all for every page)\n")
    return 0


def format_line(line):
    """One tail or search line in words: time, id, address, ids, body preview."""
    if line["type"] == "dropped":
        where = ("this reader read too slowly" if line["reason"] == "slow reader"
                 else f"the broker dropped them ({line['reason']}, subscription "
                      f"{line.get('subscription')})")
        return f"-- {line['count']} message(s) not shown: {where}"
    when = datetime.datetime.fromtimestamp(line["captured_at"], datetime.timezone.utc)
    parts = [when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", f"#{line['id']}",
             line["address"]]
    for key, label in (("message_id", "id"), ("correlation_id", "corr"),
                       ("reply_to", "reply-to")):
        if line.get(key):
            parts.append(f"{label}={line[key]}")
    if line.get("properties"):
        parts.append(" ".join(f"{k}={v}" for k, v in line["properties"].items()))
    text = line.get("body_text")
    if text is None:
        parts.append(f"<{line['body_size']} bytes, not text>")
    else:
        preview = text if len(text) <= 80 else text[:77] + "..."
        parts.append(repr(preview))
        if line.get("truncated"):
            parts.append(f"(body cut at {len(text.encode('utf-8'))} of "
                         f"{line['body_size']} bytes)")
    return "  ".join(parts)
