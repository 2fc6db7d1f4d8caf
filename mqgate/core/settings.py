"""
Address settings and security settings made at run time (S7.1, S7.2).

Each is matched against a queue or topic name the way Artemis matches them (FACTS 2):
dot-separated levels, C{*} one level, C{#} any number; the most specific match wins
(an exact name over C{*}, C{*} over C{#}). They are made by an operator (the C{setting}
admin commands) or by a capture subscription, kept by the broker's runtime catalog
across restarts, and used here:

- an address setting bounds the queues it matches (a plain queue by its name, a topic
  subscription by the topic name or pattern it subscribes to) with C{max_bytes}
  and/or C{max_messages} (Artemis' C{max-size-bytes}, C{max-size-messages}), and its
  C{full_policy} says what such a queue does once a bound is reached, as one of
  mqgate's queue limit behaviours (L{mqgate.core.limits}, S2.3):

    - C{FAIL} (Artemis: refuse the send, the client gets an error): REJECT_NEWEST;
      the sender gets a LIMIT_EXCEEDED error (AMQP:
      amqp:resource-limit-exceeded; STOMP: an ERROR frame).
    - C{BLOCK} (the producers wait): FLOW_CONTROL; no more credit (AMQP) or socket
      reads (STOMP) for the producers until the queue drains to 90 %.
    - C{DROP} (new messages are silently dropped): REJECT_NEWEST that drops instead of
      refusing; the sender is told its message was accepted, the queue counts it in
      C{dropped}.
    - C{PAGE} (Artemis keeps taking messages and pages them to disk): mqgate has no
      per-queue page file; its memory pager (L{mqgate.core.paging}, S2.6) pages
      persistent message bodies out when memory runs short, whatever the queue. So a
      PAGE setting takes no bounds, and leaves the queue's limits as they are.

  A setting without bounds changes no limits: a full policy applies only when a
  bound is reached. Limits an operator gave a destination (C{update dst -o ...}, kept
  by the store) win over any setting; so do a ring queue's (capture's rings keep
  theirs). The broker applies a setting to the queues that exist when it is made or
  removed, to those made later, and again at a restart (L{mqgate.core.broker}).
- its C{expiry_delay} gives a message sent to a matching queue or topic that carries
  no expiry of its own one, that many seconds from when it is sent (C{expiry-delay});
  so do the copies a divert makes to a matching queue.
- a security setting lists, per permission, the groups (roles) that may; the broker
  refuses everyone else, beside the access rules file. Only C{consume} is a
  permission here: a receiver or a browser attaching to a matching queue (both read
  its messages). Sending is left to the access rules.
"""

from mqgate.core.addresses import topic_matches
from mqgate.core.limits import FLOW_CONTROL, REJECT_NEWEST

__all__ = ["AddressSetting", "SecuritySetting", "RuntimeSettings", "FULL_POLICIES",
           "PERMISSIONS"]

#: What a full address does (FACTS 2): mqgate's rings drop.
FULL_POLICIES = ("DROP", "FAIL", "BLOCK", "PAGE")
#: The queue limit behaviour each bounding policy maps onto (PAGE bounds nothing).
_BEHAVIOURS = {"DROP": REJECT_NEWEST, "FAIL": REJECT_NEWEST, "BLOCK": FLOW_CONTROL}
#: The permissions a security setting may restrict.
PERMISSIONS = ("consume",)


class AddressSetting:
    """C{match}, C{full_policy} (one of L{FULL_POLICIES}), C{expiry_delay} (seconds,
    or C{None}), the bounds C{max_bytes} and C{max_messages} (C{None}: none), and
    C{owner} (C{None}: an operator; else what made it)."""

    __slots__ = ("match", "full_policy", "expiry_delay", "max_bytes", "max_messages",
                 "owner")

    def __init__(self, match, full_policy="DROP", expiry_delay=None, owner=None, *,
                 max_bytes=None, max_messages=None):
        check_match(match)
        policy = str(full_policy).upper()
        if policy not in FULL_POLICIES:
            raise ValueError(f"full policy {full_policy!r} is not one of"
                             f" {', '.join(FULL_POLICIES)}")
        if expiry_delay is not None and not expiry_delay > 0:
            raise ValueError(f"expiry delay {expiry_delay!r} must be a number of seconds"
                             " greater than 0 (or none)")
        for what, bound in (("max size bytes", max_bytes),
                            ("max size messages", max_messages)):
            if bound is not None and (isinstance(bound, bool)
                                      or not isinstance(bound, int) or bound < 1):
                raise ValueError(f"{what} {bound!r} must be a whole number, 1 or more"
                                 " (or none)")
        if policy == "PAGE" and (max_bytes is not None or max_messages is not None):
            raise ValueError(
                "full policy PAGE takes no max size: mqgate pages message bodies out"
                " when memory runs short, whatever the queue (mqgate.memory.*); use"
                " BLOCK, FAIL or DROP to bound the matching queues")
        self.match = match
        self.full_policy = policy
        self.expiry_delay = None if expiry_delay is None else float(expiry_delay)
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.owner = owner

    @property
    def bounded(self):
        """Whether it bounds the queues it matches."""
        return self.max_bytes is not None or self.max_messages is not None

    def limits(self, base):
        """The L{mqgate.core.limits.Limits} of a matching queue that has none of its
        own: C{base} (the broker's defaults) with this setting's bounds and the
        behaviour its full policy maps onto; C{base} itself when it bounds nothing."""
        if not self.bounded:
            return base
        return base.replace(
            max_count=-1 if self.max_messages is None else self.max_messages,
            max_bytes=-1 if self.max_bytes is None else self.max_bytes,
            behavior=_BEHAVIOURS[self.full_policy], drops=self.full_policy == "DROP")

    def describe(self):
        return {"match": self.match, "full_policy": self.full_policy,
                "expiry_delay": self.expiry_delay, "max_bytes": self.max_bytes,
                "max_messages": self.max_messages, "owner": self.owner}


class SecuritySetting:
    """C{match}, C{permissions} (permission -> tuple of groups), C{owner}."""

    __slots__ = ("match", "permissions", "owner")

    def __init__(self, match, permissions, owner=None):
        check_match(match)
        for permission, roles in permissions.items():
            if permission not in PERMISSIONS:
                raise ValueError(f"permission {permission!r} is not one of"
                                 f" {', '.join(PERMISSIONS)}")
            if not roles or not all(isinstance(r, str) and r for r in roles):
                raise ValueError(f"permission {permission!r} needs one or more group"
                                 " names")
        self.match = match
        self.permissions = {p: tuple(r) for p, r in permissions.items()}
        self.owner = owner

    def describe(self):
        return {"match": self.match,
                "permissions": {p: list(r) for p, r in self.permissions.items()},
                "owner": self.owner}


class RuntimeSettings:
    """The address and security settings in force, by match."""

    def __init__(self):
        self.address = {}
        self.security = {}

    def address_for(self, name):
        """The most specific L{AddressSetting} matching C{name}, or C{None}."""
        return _most_specific(self.address, name)

    def security_for(self, name):
        """The most specific L{SecuritySetting} matching C{name}, or C{None}."""
        return _most_specific(self.security, name)

    def refusal(self, name, permission, groups, user):
        """Why the user C{user} in C{groups} may not C{permission} queue C{name} (a
        sentence), or C{None} when it may."""
        setting = self.security_for(name)
        if setting is None:
            return None
        roles = setting.permissions.get(permission)
        if roles is None or set(roles) & set(groups):
            return None
        return (f"user {user} may not {permission} {name}: the security setting on"
                f" {setting.match} lets only group(s) {', '.join(roles)} {permission}")


def check_match(match):
    """@raise ValueError: C{match} is not a name or pattern."""
    if not isinstance(match, str) or not match or match.strip() != match \
            or "" in match.split("."):
        raise ValueError(f"match {match!r} must be a dot-separated name or pattern such"
                         " as orders.# (no empty levels, no spaces at its ends)")


def _most_specific(table, name):
    if not table:
        return None
    best = None
    for match, setting in table.items():
        if topic_matches(match, name):
            rank = _specificity(match)
            if best is None or rank > best[0]:
                best = (rank, setting)
    return None if best is None else best[1]


def _specificity(match):
    # More literal levels first; then * before #; an exact name beats both.
    levels = match.split(".")
    literal = sum(level not in ("*", "#") for level in levels)
    return (literal, -levels.count("#"), -levels.count("*"))
