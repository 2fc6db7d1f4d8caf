"""
The S9.7 show commands, as admin request handlers (S11.1).

    show client-profile NAME [detail]       a profile; with detail its queues, limits,
                                            keep-alive and the users assigned to it
    show client NAME stats queue            a client's five egress queues: length in
                                            messages and work units, high-water mark,
                                            max depth, discards, deliveries
    show client NAME slow-subscriber [all]  the slow subscribers among the clients
                                            NAME matches; with C{all} every one of them;
                                            and a line on the message store's health

NAME may be a pattern (C{*} and C{?}, as the source's commands take them): a pattern
shows one table per match. A name that matches nothing is a 404. The tables are the
source's, rendered by L{mqgate.egress.profiles}; the replies carry the same figures
as data.

Each handler is C{run(context, arguments) -> Reply} over an
L{mqgate.admin.requests.AdminContext}: pure, no I/O, testable with a filled registry.
"""

import dataclasses
import fnmatch

from mqgate.admin.requests import BadRequest, Command, NotFoundError, Reply
from mqgate.egress.profiles import (
    DEFAULT_PROFILE, render_client_queue_stats, render_profile, render_slow_subscribers)
from mqgate.egress.slowness import ClientLoad

__all__ = ["COMMANDS", "show_client_profile", "show_client"]

_PROFILE_USAGE = "show client-profile NAME [detail]"
_CLIENT_USAGE = "show client NAME stats queue | show client NAME slow-subscriber [all]"

#: What the default profile's user list says besides the explicit assignments.
_EVERYONE_ELSE = "(every user without an assignment)"


def _usage_error(usage, problem):
    return BadRequest(f"{problem}; usage: {usage}")


def _is_pattern(name):
    return any(ch in name for ch in "*?[")


# -- show client-profile ---------------------------------------------------------------


def show_client_profile(context, arguments):
    """C{show client-profile NAME [detail]} (S9.7)."""
    if not 1 <= len(arguments) <= 2:
        raise _usage_error(_PROFILE_USAGE, "give one profile name")
    name, *rest = arguments
    if rest and rest != ["detail"]:
        raise _usage_error(_PROFILE_USAGE, f"unknown argument {rest[0]!r}")
    detail = bool(rest)
    profiles = context.profiles
    names = [n for n in profiles.names() if fnmatch.fnmatchcase(n, name)]
    if not names:
        raise NotFoundError(f"no client profile {name!r}; defined: "
                            + ", ".join(profiles.names()))
    texts, data = [], []
    for profile_name in names:
        profile = profiles[profile_name]
        users = _users(profiles, profile_name)
        texts.append(render_profile(profile, detail=detail, users=users))
        data.append(_profile_data(profile, profiles.users_of(profile_name)))
    return Reply("\n".join(texts), data)


def _users(profiles, name):
    users = profiles.users_of(name)
    return users + [_EVERYONE_ELSE] if name == DEFAULT_PROFILE else users


def _profile_data(profile, users):
    keepalive = profile.tcp_keepalive
    return {
        "name": profile.name,
        "queues": {queue: {"max_depth": limits.max_depth,
                           "min_msg_burst": limits.min_msg_burst}
                   for queue, limits in profile.queues.items()},
        "max_connections_per_user": profile.max_connections_per_user,
        "max_subscriptions": profile.max_subscriptions,
        "max_egress_flows": profile.max_egress_flows,
        "max_ingress_flows": profile.max_ingress_flows,
        "tcp_keepalive": {"enabled": keepalive.enabled, "count": keepalive.count,
                          "idle": keepalive.idle, "interval": keepalive.interval},
        "users": list(users),
    }


# -- show client -------------------------------------------------------------------------


def show_client(context, arguments):
    """C{show client NAME stats queue} and C{show client NAME slow-subscriber [all]}."""
    if len(arguments) < 2:
        raise _usage_error(_CLIENT_USAGE, "give a client name and what to show")
    name, what, *rest = arguments
    if what == "stats" and rest == ["queue"]:
        return _queue_stats(context.clients, name)
    if what == "slow-subscriber" and rest in ([], ["all"]):
        return _slow_subscribers(context, name, include_all=bool(rest))
    raise _usage_error(_CLIENT_USAGE, "unknown arguments " + " ".join(arguments[1:]))


def _matching(clients, name):
    found = clients.matching(name)
    if not found and not _is_pattern(name):
        raise NotFoundError(f"no client {name!r} is connected")
    return found


def _queue_stats(clients, name):
    found = _matching(clients, name)
    if not found:
        raise NotFoundError(f"no connected client matches {name!r}")
    texts = [render_client_queue_stats(c.name, c.scheduler, c.meter.is_slow())
             for c in found]
    return Reply("\n".join(texts), [_client_data(c) for c in found])


def _client_data(client):
    queues = []
    for stats in client.scheduler.stats():
        row = dataclasses.asdict(stats)
        row["queue"] = row.pop("name")
        queues.append(row)
    return {"client": client.name, "user": client.user, "peer": client.peer,
            "protocol": client.protocol, "service": client.service,
            "profile": client.profile_name, "slow": client.meter.is_slow(),
            "queues": queues}


def _slow_subscribers(context, name, include_all):
    found = _matching(context.clients, name)
    # The meter is asked directly (its share, is_slow and percent are methods).
    rows = [ClientLoad(client=c.name, queued_bytes=c.queued_bytes,
                       share=c.meter.share(), slow=c.meter.is_slow()) for c in found]
    data = [{"client": row.client, "user": c.user, "peer": c.peer,
             "service": c.service, "protocol": c.protocol, "slow": row.slow,
             "blocked_percent": int(round(row.share * 100)),
             "queued_bytes": row.queued_bytes}
            for row, c in zip(rows, found)]
    text = render_slow_subscribers(rows, include_all=include_all)
    store = _store_line(context)
    return Reply(f"{text}\n{store}" if store else text, data)


def _store_line(context):
    # S3.6: the health of the message store, beside the clients' (None: no store).
    persistence = getattr(context.broker, "persistence", None)
    status = persistence.store_status() if persistence is not None else None
    if status is None:
        return None
    if status["state"] == "healthy":
        waiting = f", {status['pending']} writes waiting" if status["pending"] else ""
        return f"Message store: healthy{waiting}."
    return (f"Message store: {status['state'].upper()} for {status['seconds']:.0f} s: "
            f"{status['reason']}; {status['refused']} persistent messages refused, "
            f"{status['pending']} writes waiting. To fix: {status['advice']}.")


#: The show commands' table, C{(verb, object) -> Command} (S9.7, S11.1).
COMMANDS = {
    ("show", "client-profile"): Command(
        _PROFILE_USAGE, show_client_profile,
        "a client profile; with detail its queue settings, limits and users"),
    ("show", "client"): Command(
        _CLIENT_USAGE, show_client,
        "a client's egress queue statistics, or the slow subscribers"),
}
