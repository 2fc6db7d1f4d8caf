"""
Client profiles (S9.7): named egress queue settings and connection limits, assigned to
users, and the text tables of the show commands.

Configuration keys
------------------
A profile is defined by its keys; every key is optional and a missing one takes its
default. NAME is 1 to 32 letters, digits and ``_`` (case-sensitive, as the source);
``assign`` is reserved for the assignments below. QUEUE is one of ``c1``, ``d3``,
``d2``, ``d1``, ``g1`` (the queues C-1, D-3, D-2, D-1, G-1 of S9.1)::

    mqgate.client_profile.NAME.QUEUE.max_depth         work units, 2..262144 (20000)
    mqgate.client_profile.NAME.QUEUE.min_msg_burst     messages, 0..262144
                                                       (4; 255 for g1)
    mqgate.client_profile.NAME.max_connections_per_user   1..1000000 (6000)
    mqgate.client_profile.NAME.max_subscriptions          0..5000000 (5000000)
    mqgate.client_profile.NAME.max_egress_flows           0..1000000 (16000)
    mqgate.client_profile.NAME.max_ingress_flows          0..1000000 (16000)
    mqgate.client_profile.NAME.tcp_keepalive              true|false (true)
    mqgate.client_profile.NAME.tcp_keepalive.count        probes, 1..255 (5)
    mqgate.client_profile.NAME.tcp_keepalive.idle         seconds, 1..86400 (3)
    mqgate.client_profile.NAME.tcp_keepalive.interval     seconds, 1..86400 (1)

    mqgate.client_profile.assign.USER = NAME              USER uses profile NAME

The defaults are the source's (seed 004, ``show client-profile ... detail``). The
profile ``default`` always exists (its keys may change it) and serves every user
without an assignment. A USER may contain dots: it is everything after ``assign.``.

Every bad key or value raises C{ConfigError(key, value, allowed)}: an unknown setting
name lists the known ones, a number out of range gives the range, an assignment to a
profile that is not defined lists the defined ones.
"""

from dataclasses import dataclass, field
import re
import types

from mqgate.egress.scheduler import (
    D1, D2, D3, DEFAULT_QUEUE_LIMITS, DISPLAY_ORDER, G1, C1, MAX_DEPTH_RANGE,
    MIN_MSG_BURST_RANGE, QueueLimits,
)
from mqgate.errors import ConfigError

__all__ = [
    "PREFIX", "DEFAULT_PROFILE", "ClientProfile", "TcpKeepAlive", "ProfileTable",
    "profiles_from_settings", "render_profile", "render_client_queue_stats",
    "render_slow_subscribers",
]

PREFIX = "mqgate.client_profile."
DEFAULT_PROFILE = "default"
_ASSIGN = "assign"

_NAME = re.compile(r"[A-Za-z0-9_]{1,32}")
_NAME_ALLOWED = "1 to 32 letters, digits or _ (not 'assign')"
_INTEGER = re.compile(r"[+-]?[0-9]+")

#: Key spelling of each queue (S9.1 names without the dash).
_QUEUE_KEYS = {"c1": C1, "d3": D3, "d2": D2, "d1": D1, "g1": G1}

#: Connection limits: field -> (minimum, maximum, default), the source's defaults.
_LIMITS = {
    "max_connections_per_user": (1, 1000000, 6000),
    "max_subscriptions": (0, 5000000, 5000000),
    "max_egress_flows": (0, 1000000, 16000),
    "max_ingress_flows": (0, 1000000, 16000),
}

#: TCP keep-alive numbers: field -> (minimum, maximum, default).
_KEEPALIVE = {
    "count": (1, 255, 5),
    "idle": (1, 86400, 3),
    "interval": (1, 86400, 1),
}


def _key(name, setting):
    return f"{PREFIX}{name}.{setting}"


def _check_range(key, value, minimum, maximum):
    if isinstance(value, bool) or not isinstance(value, int) or \
            not minimum <= value <= maximum:
        raise ConfigError(key, value, f"an integer from {minimum} to {maximum}")
    return value


def _check_name(key, name):
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == _ASSIGN:
        raise ConfigError(key, name, _NAME_ALLOWED)


@dataclass(frozen=True)
class TcpKeepAlive:
    """TCP keep-alive of a profile's connections (S9.7; source: count 5, idle 3 s,
    interval 1 s)."""

    enabled: bool = True
    count: int = _KEEPALIVE["count"][2]
    idle: int = _KEEPALIVE["idle"][2]
    interval: int = _KEEPALIVE["interval"][2]


@dataclass(frozen=True, eq=False)
class ClientProfile:
    """A named client profile (S9.7); construction validates every field.

    @ivar name: 1 to 32 letters, digits or C{_}.
    @ivar queues: queue name ("C-1" ... "G-1") -> L{QueueLimits}; queues not given
        take their defaults. Read-only.
    @ivar max_connections_per_user: connections one user name may hold at once.
    @ivar max_subscriptions: subscriptions one client may hold.
    @ivar max_egress_flows: consumer links one client may hold.
    @ivar max_ingress_flows: producer links one client may hold.
    @ivar tcp_keepalive: a L{TcpKeepAlive}.
    """

    name: str
    queues: dict = field(default_factory=dict)
    max_connections_per_user: int = _LIMITS["max_connections_per_user"][2]
    max_subscriptions: int = _LIMITS["max_subscriptions"][2]
    max_egress_flows: int = _LIMITS["max_egress_flows"][2]
    max_ingress_flows: int = _LIMITS["max_ingress_flows"][2]
    tcp_keepalive: TcpKeepAlive = TcpKeepAlive()

    def __post_init__(self):
        _check_name(f"{PREFIX}NAME", self.name)
        queues = dict(DEFAULT_QUEUE_LIMITS)
        for queue, limits in self.queues.items():
            if queue not in queues:
                raise ConfigError(_key(self.name, str(queue)), limits,
                                  "a queue among " + ", ".join(DISPLAY_ORDER))
            setting = _queue_key(queue)
            _check_range(_key(self.name, f"{setting}.max_depth"), limits.max_depth,
                         *MAX_DEPTH_RANGE)
            _check_range(_key(self.name, f"{setting}.min_msg_burst"),
                         limits.min_msg_burst, *MIN_MSG_BURST_RANGE)
            queues[queue] = limits
        object.__setattr__(self, "queues", types.MappingProxyType(queues))
        for setting, (minimum, maximum, _) in _LIMITS.items():
            _check_range(_key(self.name, setting), getattr(self, setting),
                         minimum, maximum)
        for setting, (minimum, maximum, _) in _KEEPALIVE.items():
            _check_range(_key(self.name, f"tcp_keepalive.{setting}"),
                         getattr(self.tcp_keepalive, setting), minimum, maximum)


def _queue_key(queue):
    return next(k for k, v in _QUEUE_KEYS.items() if v == queue)


class ProfileTable:
    """The configured profiles and who uses which.

    @ivar profiles: name -> L{ClientProfile}; always holds C{default}.
    @ivar assignments: user name -> profile name.
    """

    def __init__(self, profiles=(), assignments=None):
        self.profiles = {DEFAULT_PROFILE: ClientProfile(DEFAULT_PROFILE)}
        for profile in profiles:
            self.profiles[profile.name] = profile
        self.assignments = dict(assignments or {})
        for user, name in self.assignments.items():
            if name not in self.profiles:
                raise ConfigError(f"{PREFIX}{_ASSIGN}.{user}", name, self._defined())

    def _defined(self):
        return "a defined profile: " + ", ".join(sorted(self.profiles))

    def __getitem__(self, name):
        return self.profiles[name]

    def __contains__(self, name):
        return name in self.profiles

    def names(self):
        """The profile names, sorted."""
        return sorted(self.profiles)

    def for_user(self, user):
        """The profile of C{user}: its assignment, else C{default}."""
        return self.profiles[self.assignments.get(user, DEFAULT_PROFILE)]

    def users_of(self, name):
        """The users explicitly assigned to profile C{name}, sorted."""
        return sorted(user for user, assigned in self.assignments.items()
                      if assigned == name)


# -- parsing -------------------------------------------------------------------------


def profiles_from_settings(mapping):
    """Build a L{ProfileTable} from the C{mqgate.client_profile.*} keys of C{mapping}.

    @param mapping: key -> value; values are text as written in the properties file
        (surrounding white space ignored) or already-typed ints and bools. Keys outside
        the C{mqgate.client_profile.} prefix are ignored.
    @raise ConfigError: naming the key, the value and what is allowed.
    """
    fields = {}        # profile name -> {setting: value}
    assignments = {}
    for key, value in mapping.items():
        if not key.startswith(PREFIX):
            continue
        name, _, setting = key[len(PREFIX):].partition(".")
        if name == _ASSIGN:
            if not setting:
                raise ConfigError(key, value, f"{PREFIX}{_ASSIGN}.USER = PROFILE")
            assignments[setting] = _text(value).strip()
            continue
        _check_name(key, name)
        if not setting:
            raise ConfigError(key, value, "a setting: " + ", ".join(_settings()))
        fields.setdefault(name, {})[setting] = (key, value)
    profiles = [_build_profile(name, settings) for name, settings in fields.items()]
    return ProfileTable(profiles, assignments)


def _settings():
    names = [f"{q}.{s}" for q in _QUEUE_KEYS for s in ("max_depth", "min_msg_burst")]
    names += list(_LIMITS) + ["tcp_keepalive"]
    names += [f"tcp_keepalive.{s}" for s in _KEEPALIVE]
    return names


def _build_profile(name, settings):
    queues = {}
    limits = {}
    keepalive = {}
    for setting, (key, value) in settings.items():
        head, _, tail = setting.partition(".")
        if head in _QUEUE_KEYS and tail in ("max_depth", "min_msg_burst"):
            low, high = MAX_DEPTH_RANGE if tail == "max_depth" else MIN_MSG_BURST_RANGE
            queues.setdefault(_QUEUE_KEYS[head], {})[tail] = _int(key, value, low, high)
        elif setting in _LIMITS:
            low, high, _ = _LIMITS[setting]
            limits[setting] = _int(key, value, low, high)
        elif setting == "tcp_keepalive":
            keepalive["enabled"] = _bool(key, value)
        elif head == "tcp_keepalive" and tail in _KEEPALIVE:
            low, high, _ = _KEEPALIVE[tail]
            keepalive[tail] = _int(key, value, low, high)
        else:
            raise ConfigError(key, value, "a setting: " + ", ".join(_settings()))
    queue_limits = {queue: QueueLimits(**{**_limits_dict(queue), **given})
                    for queue, given in queues.items()}
    return ClientProfile(name, queue_limits, tcp_keepalive=TcpKeepAlive(**keepalive),
                         **limits)


def _limits_dict(queue):
    default = DEFAULT_QUEUE_LIMITS[queue]
    return {"max_depth": default.max_depth, "min_msg_burst": default.min_msg_burst}


def _text(value):
    return value if isinstance(value, str) else str(value)


def _int(key, value, minimum, maximum):
    if not isinstance(value, str):
        return _check_range(key, value, minimum, maximum)
    text = value.strip()
    # int() alone would also take "1_000"; the properties format is stricter.
    if _INTEGER.fullmatch(text) and minimum <= int(text) <= maximum:
        return int(text)
    # The error shows the value as the operator wrote it.
    raise ConfigError(key, value, f"an integer from {minimum} to {maximum}")


def _bool(key, value):
    if isinstance(value, bool):
        return value
    lowered = _text(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(key, value, "true or false")


# -- show commands (S9.7) ------------------------------------------------------------

_LEGEND = "(G-Guaranteed, D-Direct, C-Control)"


def _pairs(rows, indent=""):
    """Lines of C{label : value}, the colons aligned."""
    width = max(len(label) for label, _ in rows)
    return [f"{indent}{label.ljust(width)} : {value}" for label, value in rows]


def render_profile(profile, detail=False, users=None):
    """The text of C{show client-profile NAME [detail]} (S9.7).

    @param users: the user names assigned to the profile, listed with C{detail}.
    """
    lines = _pairs([
        ("Profile Name", profile.name),
        ("Max Connections per Client Username", profile.max_connections_per_user),
        ("Max Subscriptions", profile.max_subscriptions),
    ])
    if not detail:
        return "\n".join(lines) + "\n"
    lines += ["", _LEGEND, "Queue Max Depth"]
    lines += _pairs([(q, f"{profile.queues[q].max_depth} work units")
                     for q in DISPLAY_ORDER], "  ")
    lines.append("Priority Queue Minimum Burst")
    lines += _pairs([(q, f"{profile.queues[q].min_msg_burst} messages")
                     for q in DISPLAY_ORDER], "  ")
    lines += [""] + _pairs([
        ("Max Egress Flows", profile.max_egress_flows),
        ("Max Ingress Flows", profile.max_ingress_flows),
    ])
    keepalive = profile.tcp_keepalive
    lines += ["TCP", "  Keep-alive"]
    lines += _pairs([
        ("Enabled", "Yes" if keepalive.enabled else "No"),
        ("Count", keepalive.count),
        ("Idle", f"{keepalive.idle} seconds"),
        ("Interval", f"{keepalive.interval} seconds"),
    ], "    ")
    if users is not None:
        lines += ["", "Users"]
        lines += [f"  {user}" for user in users] or ["  (none assigned)"]
    return "\n".join(lines) + "\n"


_STATS_HEAD = (("Queue", "(Priority)"), ("Length", "(msgs)"), ("Length", "(work)"),
               ("HWMark", "(work)"), ("Max", "(work)"), ("Discards", "(msgs)"),
               ("Deliveries", "(msgs)"))


def _table(head, rows, banner=None):
    """A source-style table: two header lines, a rule, cells separated by " | ";
    the first column left-aligned, the numbers right-aligned."""
    widths = [max(len(top), len(bottom), *(len(str(row[i])) for row in rows))
              for i, (top, bottom) in enumerate(head)]

    def line(cells):
        first = str(cells[0]).ljust(widths[0])
        rest = [str(cell).rjust(width) for cell, width in zip(cells[1:], widths[1:])]
        return " | ".join([first] + rest)

    lines = []
    if banner:
        lines.append(banner)
    lines.append(" | ".join(top.ljust(w) for (top, _), w in zip(head, widths)).rstrip())
    lines.append(" | ".join(b.ljust(w) for (_, b), w in zip(head, widths)).rstrip())
    lines.append("-+-".join("-" * w for w in widths))
    lines += [line(row) for row in rows]
    return lines


def render_client_queue_stats(client_name, scheduler, slow=None):
    """The text of C{show client NAME stats queue} (S9.7): one row per queue, lowest
    priority first, as the source lists them.

    @param scheduler: the client's L{mqgate.egress.scheduler.EgressScheduler}.
    @param slow: whether the client is a slow subscriber (S9.4), when known.
    """
    header = [("Client", client_name)]
    profile = getattr(scheduler, "profile", None)
    header.append(("Client Profile", profile.name if profile is not None
                   else DEFAULT_PROFILE))
    if slow is not None:
        header.append(("Slow Subscriber", "Yes" if slow else "No"))
    stats = {row.name: row for row in scheduler.stats()}
    rows = [(s.name, s.length_msgs, s.length_units, s.high_water_units, s.max_depth,
             s.discards, s.deliveries)
            for s in (stats[name] for name in DISPLAY_ORDER)]
    lines = _pairs(header) + ["", "Listed from lowest to highest priority: " + _LEGEND]
    lines += _table(_STATS_HEAD, rows, "*" * 27 + " Client Transmit Queues " + "*" * 27)
    return "\n".join(lines) + "\n"


_SLOW_HEAD = (("Client", ""), ("Slow", ""), ("Blocked", "(%)"), ("Queued", "(bytes)"))


def render_slow_subscribers(rows, include_all=False):
    """The text of C{show client '*' slow-subscriber} (S9.4), slowest first.

    @param rows: objects with C{client} (the name), C{share} (0..1), C{slow} and
        C{queued_bytes}: L{mqgate.egress.slowness.ClientLoad} fits.
    @param include_all: list every client given, not only the slow ones.
    """
    rows = list(rows)
    shown = sorted((row for row in rows if include_all or row.slow),
                   key=lambda row: (-row.share, str(row.client)))
    slow_count = sum(1 for row in rows if row.slow)
    summary = f"{slow_count} slow subscriber(s) among {len(rows)} client(s)"
    if not shown:
        return summary + "\n"
    table = _table(_SLOW_HEAD, [
        (row.client, "Yes" if row.slow else "No", int(round(row.share * 100)),
         row.queued_bytes) for row in shown])
    return "\n".join(table + ["", summary]) + "\n"
