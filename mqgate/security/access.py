# -*- test-case-name: tests.security.test_access -*-
"""
Access control (S4.1, S4.5): rules from an access control properties file in the source
system's syntax (FACTS 1.3), and the decisions they give.

The file
--------
A Java properties file whose C{version} is C{JMQFileAccessControlModel/100}; every other
key is a rule::

    connection.SERVICETYPE.ACCESS.PTYPE=principals      SERVICETYPE: NORMAL | ADMIN
    queue.NAME.OPERATION.ACCESS.PTYPE=principals        OPERATION: produce | consume |
    topic.NAME.OPERATION.ACCESS.PTYPE=principals                   browse (queues only)
    queue.create.ACCESS.PTYPE=principals                auto-creating a queue / a topic
    topic.create.ACCESS.PTYPE=principals

ACCESS is C{allow} or C{deny}, PTYPE C{user} or C{group}, principals a comma list in
which C{*} alone means every user (every group). NAME is a destination name (dots
allowed: the key is read from its right end) or C{*}; a topic NAME may be a pattern
(C{*} one level, C{#} any levels, as in subscriptions) and then applies to every topic
it matches. For a duplicate key the last line wins.

The decision
------------
Anything not explicitly allowed is denied. The rules that apply to a request are taken
from the most general to the most specific: C{TYPE.*.OP}, then (topics only) the
patterns matching the name, fewer literal characters first, then C{TYPE.NAME.OP}. Within
one rule the principals are weighed, weakest first, C{group=*}, C{user=*}, the user's
groups, the user by name; each decides (allow or deny) only if it says something, and
a later, more specific rule overrides an earlier one in the same way (the source
system's two-bit ALLOW/DENY computation, FACTS 1.3). Where a rule names the same
principal in both its allow and its deny list, that principal is denied: deny wins, as
the source system documents.

Two deliberate departures from the source system's code, for a predictable result:
its topic patterns are weighed after the exact name and in hash order, ours before it
and from the least to the most specific; and it lets an allow and a deny of one
principal cancel out (falling back to a less specific rule), where we deny.

Everything here is pure: L{parse_rules} takes text, L{read_rules_text} is the one
function that reads a file.
"""

import attrs

from mqgate.config.properties import parse_properties
from mqgate.core.addresses import topic_matches
from mqgate.errors import ConfigError, MqgateError

__all__ = [
    "VERSION", "CONNECTION", "QUEUE", "TOPIC", "PRODUCE", "CONSUME", "BROWSE", "CREATE",
    "SERVICE_TYPES", "AccessFileError", "Decision", "Rules", "parse_rules",
    "read_rules_text", "DEFAULT_FILE_TEXT",
]

#: The C{version} a rule file must declare (the source system's file model).
VERSION = "JMQFileAccessControlModel/100"

CONNECTION, QUEUE, TOPIC = "connection", "queue", "topic"
PRODUCE, CONSUME, BROWSE, CREATE = "produce", "consume", "browse", "create"
SERVICE_TYPES = ("NORMAL", "ADMIN")

_OPERATIONS = {QUEUE: (PRODUCE, CONSUME, BROWSE), TOPIC: (PRODUCE, CONSUME)}
_ACCESS = ("allow", "deny")
_PRINCIPAL_TYPES = ("user", "group")
_ALL = "*"

# The two bits of a partial decision.
_NONE, _ALLOW, _DENY = 0, 1, 2

#: The shipped rules (etc/accesscontrol.properties), installed into an instance's etc
#: directory at its first start.
DEFAULT_FILE_TEXT = """\
# mqgate access control, in the source system's syntax (OpenMQ's
# accesscontrol.properties). Edit it while the broker runs: it is re-read within a
# second of a change, or at once with `mqgate cmd reload rules`. A file with a mistake
# is refused with the line and the reason in the broker's log; the rules before it
# stay in force.
#
#   connection.NORMAL|ADMIN.allow|deny.user|group=NAMES
#   queue.NAME|*.produce|consume|browse.allow|deny.user|group=NAMES
#   topic.NAME|PATTERN|*.produce|consume.allow|deny.user|group=NAMES
#   queue.create.allow|deny.user|group=NAMES     (auto-creating a queue)
#   topic.create.allow|deny.user|group=NAMES     (auto-creating a topic)
#
# NAMES is a comma list; * alone means everybody. Anything not allowed is denied; a
# named user beats user=*, a user beats a group, a named destination beats *, and a
# deny beats an allow of the same principal in the same rule.
version=JMQFileAccessControlModel/100

# Connections: every user to the messaging services; only the admin group to the
# admin services (the guest's group, anonymous, never).
connection.NORMAL.allow.user=*
connection.ADMIN.allow.group=admin
connection.ADMIN.deny.group=anonymous

# Destinations: everybody may send, receive and browse.
queue.*.produce.allow.user=*
queue.*.consume.allow.user=*
queue.*.browse.allow.user=*
topic.*.produce.allow.user=*
topic.*.consume.allow.user=*

# The broker's metrics topics (mq.metrics.*) name every destination and its traffic:
# only the admin group may subscribe to them.
topic.mq.metrics.#.consume.deny.user=*
topic.mq.metrics.#.consume.allow.group=admin

# Auto-creating destinations.
queue.create.allow.user=*
topic.create.allow.user=*
"""


class AccessFileError(MqgateError):
    """A rule file that cannot be used, with where and why.

    @ivar line: the line number (1-based), or None for the whole file.
    @ivar why: what is wrong, for the operator.
    """

    def __init__(self, line, why):
        self.line = line
        self.why = why
        super().__init__(f"line {line}: {why}" if line else why)


@attrs.frozen
class Decision:
    """The answer to one question.

    @ivar allowed: whether the operation may go on.
    @ivar subject: the rule that decided, C{"queue.orders.consume"}, or the most
        specific rule asked when none said anything (then C{allowed} is false).
    """

    allowed: bool
    subject: str


@attrs.frozen
class _Rule:
    """The four principal lists of one rule subject (frozensets of names)."""

    allow_users: frozenset = frozenset()
    deny_users: frozenset = frozenset()
    allow_groups: frozenset = frozenset()
    deny_groups: frozenset = frozenset()

    def bits(self, user, groups):
        """The rule's partial decision for the user: the most specific principal level
        that says something."""
        result = _bits(_ALL, self.allow_groups, self.deny_groups)
        result = _override(result, _bits(_ALL, self.allow_users, self.deny_users))
        group_bits = _NONE
        for group in groups:
            group_bits |= _bits(group, self.allow_groups, self.deny_groups)
        # One group allowed and another denied: neither overrides (FACTS 1.3).
        result = _override(result, group_bits)
        return _override(result, _bits(user, self.allow_users, self.deny_users))


def _bits(name, allow, deny):
    if name in deny:
        return _DENY   # deny wins over an allow of the same principal
    return _ALLOW if name in allow else _NONE


def _override(base, bits):
    # Only a clear answer overrides (both bits set, or none, leave the base).
    return bits if bits in (_ALLOW, _DENY) else base


class Rules:
    """A parsed rule file: answers who may do what.

    @param rules: C{subject -> _Rule}, the subject being the key without its
        C{.ACCESS.PTYPE} end (C{"queue.orders.consume"}, C{"connection.ADMIN"},
        C{"topic.create"}).
    """

    def __init__(self, rules):
        self._rules = rules
        # Topic patterns per operation, least specific first (see the module docstring).
        self._patterns = {}
        for subject in rules:
            kind, _, rest = subject.partition(".")
            name, _, operation = rest.rpartition(".")
            if kind == TOPIC and name != _ALL and ("*" in name or "#" in name):
                self._patterns.setdefault(operation, []).append((name, subject))
        for patterns in self._patterns.values():
            patterns.sort(key=lambda item: (_literal_chars(item[0]), item[1]))

    def __len__(self):
        """How many rules (keys of the file, the version aside) there are."""
        return sum(bool(names) for rule in self._rules.values()
                   for names in attrs.astuple(rule, recurse=False))

    def connection(self, user, groups, service_type):
        """May C{user} (in C{groups}) connect to a service of C{service_type}?"""
        return self._decide(user, groups, [f"{CONNECTION}.{service_type}"])

    def destination(self, user, groups, kind, name, operation):
        """May C{user} (in C{groups}) do C{operation} on destination C{kind} C{name}?"""
        subjects = [f"{kind}.{_ALL}.{operation}"]
        if kind == TOPIC:
            subjects += [subject for pattern, subject in self._patterns.get(operation, ())
                         if pattern != name and topic_matches(pattern, name)]
        if name != _ALL:
            subjects.append(f"{kind}.{name}.{operation}")
        return self._decide(user, groups, subjects)

    def create(self, user, groups, kind):
        """May C{user} (in C{groups}) have a C{kind} destination auto-created?"""
        return self._decide(user, groups, [f"{kind}.{CREATE}"])

    def _decide(self, user, groups, subjects):
        decided, by = _NONE, subjects[-1]
        for subject in subjects:
            rule = self._rules.get(subject)
            if rule is None:
                continue
            bits = rule.bits(user, groups)
            if bits in (_ALLOW, _DENY):
                decided, by = bits, subject
        return Decision(decided == _ALLOW, by)


def _literal_chars(pattern):
    return sum(len(level) for level in pattern.split(".") if level not in ("*", "#"))


def parse_rules(text):
    """Parse the text of a rule file.

    @return: the L{Rules}.
    @raise AccessFileError: no (or another) version line, a malformed key, an unknown
        resource type, service type, operation, access or principal type, or C{*}
        misused; the error names the first bad line.
    """
    try:
        entries = parse_properties(text)
    except ConfigError as e:
        raise AccessFileError(None, str(e)) from None
    lists = {}
    version = None
    for key, value, line in entries:
        if key == "version":
            version = (value.strip(), line)
            continue
        subject, field = _parse_key(key, line)
        lists.setdefault(subject, {})[field] = _parse_principals(value, line)
    if version is None:
        raise AccessFileError(None, f"no version line: the file must have "
                                    f"version={VERSION}")
    if version[0] != VERSION:
        raise AccessFileError(version[1], f"version is {version[0]!r}, not {VERSION}")
    return Rules({subject: _Rule(**fields) for subject, fields in lists.items()})


def _parse_key(key, line):
    """C{(subject, field)} of a rule key: C{("queue.a.b.consume", "allow_users")}."""
    parts = key.split(".")
    if len(parts) < 4:
        raise AccessFileError(line, f"malformed rule {key!r}: expected "
                                    "TYPE.NAME.OPERATION.allow|deny.user|group")
    kind, access, ptype = parts[0], parts[-2], parts[-1]
    if access not in _ACCESS:
        raise AccessFileError(line, f"rule {key!r}: {access!r} is neither allow nor deny")
    if ptype not in _PRINCIPAL_TYPES:
        raise AccessFileError(line, f"rule {key!r}: {ptype!r} is neither user nor group")
    field = f"{access}_{ptype}s"
    middle = parts[1:-2]
    if kind == CONNECTION:
        service_type = ".".join(middle)
        if service_type not in SERVICE_TYPES:
            raise AccessFileError(line, f"rule {key!r}: service type {service_type!r} is "
                                        "not one of " + ", ".join(SERVICE_TYPES))
        return f"{CONNECTION}.{service_type}", field
    if kind not in _OPERATIONS:
        raise AccessFileError(line, f"rule {key!r}: {kind!r} is not connection, queue "
                                    "or topic")
    if middle == [CREATE]:
        return f"{kind}.{CREATE}", field
    if len(middle) < 2:
        raise AccessFileError(line, f"malformed rule {key!r}: expected {kind}.NAME."
                                    "OPERATION or {kind}.create before allow|deny")
    name, operation = ".".join(middle[:-1]), middle[-1]
    if operation not in _OPERATIONS[kind]:
        raise AccessFileError(line, f"rule {key!r}: unknown operation {operation!r} for a "
                                    f"{kind} (one of " + ", ".join(_OPERATIONS[kind]) + ")")
    _check_name(key, kind, name, line)
    return f"{kind}.{name}.{operation}", field


def _check_name(key, kind, name, line):
    if name == _ALL or "*" not in name and "#" not in name:
        if not all(name.split(".")):
            raise AccessFileError(line, f"rule {key!r}: empty level in {name!r}")
        return
    if kind == QUEUE:
        raise AccessFileError(line, f"rule {key!r}: a queue rule names one queue or *, "
                                    f"not the pattern {name!r}")
    for level in name.split("."):
        if level != level.strip("*#") and level not in ("*", "#"):
            raise AccessFileError(line, f"rule {key!r}: in a topic pattern * and # stand "
                                        f"for whole levels, not part of {level!r}")


def _parse_principals(value, line):
    names = [name.strip() for name in value.split(",")]
    if not value.strip() or not all(names):
        raise AccessFileError(line, f"empty principal name in {value!r}")
    if _ALL in names and len(names) > 1:
        raise AccessFileError(line, f"* means everybody and stands alone, not in {value!r}")
    for name in names:
        if name != _ALL and "*" in name:
            raise AccessFileError(line, f"{name!r} is not a principal name: * may only "
                                        "stand alone")
    return frozenset(names)


def read_rules_text(path):
    """The text of the rule file at C{path} (UTF-8; the one I/O of this module).

    @raise AccessFileError: it cannot be read or decoded.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise AccessFileError(None, f"cannot read {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise AccessFileError(line, "not UTF-8") from None
