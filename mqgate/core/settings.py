"""
Address settings and security settings made at run time (S7.1, S7.2).

Each is matched against a queue or topic name the way Artemis matches them (FACTS 2):
dot-separated levels, C{*} one level, C{#} any number; the most specific match wins
(an exact name over C{*}, C{*} over C{#}). They are made by an operator (the C{setting}
admin commands) or by a capture subscription, kept by the broker's runtime catalog
across restarts, and used here:

- an address setting's C{expiry_delay} gives the messages a divert copies to a matching
  queue that carry no expiry one (C{expiry-delay}); its C{full_policy} says what a
  matching queue does when full. mqgate's capture only uses DROP, which its ring
  queues are (they drop, never block or page); a setting records it so that an
  operator sees what capture relies on.
- a security setting lists, per permission, the groups (roles) that may; the broker
  refuses everyone else, beside the access rules file. Only C{consume} is a
  permission here: a receiver or a browser attaching to a matching queue (both read
  its messages). Sending is left to the access rules.
"""

from mqgate.core.addresses import topic_matches

__all__ = ["AddressSetting", "SecuritySetting", "RuntimeSettings", "FULL_POLICIES",
           "PERMISSIONS"]

#: What a full address does (FACTS 2): mqgate's rings drop.
FULL_POLICIES = ("DROP", "FAIL", "BLOCK", "PAGE")
#: The permissions a security setting may restrict.
PERMISSIONS = ("consume",)


class AddressSetting:
    """C{match}, C{full_policy} (one of L{FULL_POLICIES}), C{expiry_delay} (seconds,
    or C{None}), and C{owner} (C{None}: an operator; else what made it)."""

    __slots__ = ("match", "full_policy", "expiry_delay", "owner")

    def __init__(self, match, full_policy="DROP", expiry_delay=None, owner=None):
        check_match(match)
        policy = str(full_policy).upper()
        if policy not in FULL_POLICIES:
            raise ValueError(f"full policy {full_policy!r} is not one of"
                             f" {', '.join(FULL_POLICIES)}")
        if expiry_delay is not None and not expiry_delay > 0:
            raise ValueError(f"expiry delay {expiry_delay!r} must be a number of seconds"
                             " greater than 0 (or none)")
        self.match = match
        self.full_policy = policy
        self.expiry_delay = None if expiry_delay is None else float(expiry_delay)
        self.owner = owner

    def describe(self):
        return {"match": self.match, "full_policy": self.full_policy,
                "expiry_delay": self.expiry_delay, "owner": self.owner}


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
