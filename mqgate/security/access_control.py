# -*- test-case-name: tests.security.test_access -*-
"""
Access control at run time (S4.1, S4.5): the rules in force, their reload, and the
questions the protocol glues ask.

- L{RuleSet} holds the rules of one file and their C{generation}, counted up at every
  successful reload. L{RuleSet.reload} reads and parses the file: a bad file keeps the
  last good rules and logs which line and why (and so does a missing file, at start
  the rules then deny everything). It is called by L{RuleFileWatcher}, a service that
  checks the file's mtime, size and inode once a second and reloads on a change, and by
  the admin C{reload} request (L{Reloadables}).
- L{ServiceAccess} is what one connection service's glue holds: whether access control
  is on for the service, its type (NORMAL or ADMIN), its L{RuleSet}, and the audit
  trail. Its C{check_*} methods answer None (allowed) or a L{Denied} carrying the
  description for the client, and record every denial (S4.8); the log says so at most
  a few lines a minute.
- L{RelayDecisions} caches the decisions of one anonymous-relay connection per
  destination and rule generation (bounded), so that checking every message costs a
  dict lookup (the hot path).

The clock, the file reader and the audit trail are injected.
"""

import os

from twisted.application import service
from twisted.internet import task
from twisted.logger import Logger

from mqgate.security.access import (
    BROWSE, CONSUME, CREATE, DEFAULT_FILE_TEXT, PRODUCE, AccessFileError, Rules,
    parse_rules, read_rules_text,
)
from mqgate.security.audit import NO_AUDIT
from mqgate.security.guard import LogBudget

__all__ = ["Denied", "RuleSet", "ServiceAccess", "RelayDecisions", "RuleFileWatcher",
           "Reloadables", "ensure_rule_file"]

# Anonymous-relay decisions a connection keeps at most (destination -> decision): a
# client sending to ever new addresses then costs a re-check now and then, never memory
# without bound (design rule 4).
RELAY_CACHE_MAX = 1024

# How often the watcher looks at the rule file (seconds): a change takes effect within
# this, and a stat a second costs nothing.
WATCH_INTERVAL = 1.0

_VERBS = {
    PRODUCE: "produce to", CONSUME: "consume from", BROWSE: "browse", CREATE: "create",
}


class Denied:
    """A refusal: what to tell the client, and the rule that refused.

    @ivar description: e.g. "user bob may not consume from queue orders (rule
        queue.orders.consume)": it names the rule's subject, never the file's content.
    @ivar subject: the rule's subject.
    """

    __slots__ = ("description", "subject", "details")

    def __init__(self, description, subject, details):
        self.description = description
        self.subject = subject
        self.details = details   # for the audit record of a repeated denial

    def __repr__(self):
        return f"<Denied {self.description!r}>"


class RuleSet:
    """The rules of one access control file, reloaded when it changes.

    @param path: the file.
    @param read: C{read(path) -> text} (L{read_rules_text}; tests pass their own).
    @param audit: an L{mqgate.security.audit.IAuditTrail}.
    @ivar rules: the L{Rules} in force (deny-all until a file was read).
    @ivar generation: counts successful loads; decisions cached under an older one are
        stale.
    """

    log = Logger(namespace="mqgate.accesscontrol")

    def __init__(self, path, read=read_rules_text, audit=NO_AUDIT):
        self.path = path
        self._read = read
        self._audit = audit
        self.rules = Rules({})
        self.generation = 0
        self.loaded = False

    def reload(self):
        """Read and parse the file now; keep the last good rules if it is bad.

        @return: C{(ok, text)}, the text saying what happened, for the admin reply.
        """
        try:
            rules = parse_rules(self._read(self.path))
        except AccessFileError as e:
            kept = ("the previous rules stay in force" if self.loaded
                    else "every operation is denied until it is fixed")
            self.log.warn("access control file {path} refused, {where}: {why}; {kept}; "
                          "it is read again when it changes, or with `mqgate cmd reload "
                          "rules`", path=self.path,
                          where=f"line {e.line}" if e.line else "whole file",
                          why=e.why, kept=kept)
            self._audit.record("access.reload", "failed", file=self.path, why=str(e))
            return False, f"{self.path} refused ({e}); {kept}"
        self.rules = rules
        self.generation += 1
        self.loaded = True
        self.log.info("access control rules loaded from {path}: {count} rules",
                      path=self.path, count=len(rules))
        self._audit.record("access.reload", "ok", file=self.path, why=None)
        return True, f"{self.path}: {len(rules)} rules loaded"


class ServiceAccess:
    """Access control as one connection service sees it.

    @param service: the service's name (C{jms}, C{admin}, ...).
    @param service_type: C{NORMAL} or C{ADMIN}.
    @param rule_set: the L{RuleSet}, or None when access control is off for the
        service: then only the admin group may connect to an ADMIN service, and
        everything else is allowed.
    @param audit: an L{mqgate.security.audit.IAuditTrail}.
    @param clock: an C{IReactorTime}, for the log's budget.
    """

    log = Logger(namespace="mqgate.accesscontrol")

    def __init__(self, service, service_type, rule_set, *, audit=NO_AUDIT, clock=None):
        self.service = service
        self.service_type = service_type
        self.rule_set = rule_set
        self._audit = audit
        self._budget = LogBudget(clock, lines=10, interval=60.0) if clock else None

    @property
    def enabled(self):
        return self.rule_set is not None

    def check_connection(self, principal, peer=None):
        """None if C{principal} may use this service, else a L{Denied}."""
        who = f"user {principal.name} may not connect to the {self.service} service"
        if self.rule_set is None:
            # Access control is off here, but an admin service stays the admin group's.
            if self.service_type != "ADMIN" or "admin" in principal.groups:
                return None
            return self._denied(principal, peer, f"{who}: only the admin group may use it",
                                "connection.ADMIN", operation="connection")
        decision = self.rule_set.rules.connection(
            principal.name, principal.groups, self.service_type)
        if decision.allowed:
            return None
        return self._denied(principal, peer, f"{who} (rule {decision.subject})",
                            decision.subject, operation="connection")

    def check_destination(self, principal, kind, name, operation, exists, peer=None):
        """None if C{principal} may do C{operation} on C{kind} C{name}, else a
        L{Denied}. A destination that does not exist yet (C{exists} false) needs the
        C{create} rule of its kind too (auto-creation, S2.5)."""
        if self.rule_set is None:
            return None
        rules = self.rule_set.rules
        decision = rules.destination(principal.name, principal.groups, kind, name,
                                     operation)
        if decision.allowed and not exists:
            decision = rules.create(principal.name, principal.groups, kind)
            operation = CREATE if not decision.allowed else operation
        if decision.allowed:
            return None
        return self._denied(
            principal, peer, f"user {principal.name} may not {_VERBS[operation]} {kind} "
            f"{name} (rule {decision.subject})", decision.subject, operation=operation,
            dest_type=kind, name=name)

    def _denied(self, principal, peer, description, subject, **details):
        denied = Denied(description, subject, details)
        self.record(principal, peer, denied)
        return denied

    def record(self, principal, peer, denied):
        """Audit one denial (every one, S4.8) and log it (a few lines a minute)."""
        self._audit.record("access.denied", "denied", user=principal.name, address=peer,
                           service=self.service, rule=denied.subject, **denied.details)
        held = self._budget.take() if self._budget is not None else 0
        if held is not None:
            self.log.info("access denied to {peer}: {why}{held}", peer=peer or "-",
                          why=denied.description,
                          held=f" ({held} more denials not logged)" if held else "")


class RelayDecisions:
    """The produce decisions of one connection, per address (S4.5): for an
    anonymous-relay producer every message is checked by its C{to}, and for STOMP every
    SEND by its destination, so a check must cost a dict lookup once an address was
    seen (the hot path).

    Decisions are kept with the rules' generation they were made under and thrown away
    when the rules change. The table is bounded (L{RELAY_CACHE_MAX}): when full it is
    emptied and refilled as messages come. Whether the destination would be
    auto-created (and so needs the create rule too) is asked of the core each time, a
    dict lookup, so that a destination another client made since is usable at once.

    @param access: the service's L{ServiceAccess}.
    @param principal: the connection's L{mqgate.security.auth.Principal}.
    @param locate: C{locate(address) -> (kind, name)}; may raise the core's
        C{AddressError} (then nothing is cached, and the caller's error stands).
    @param would_create: C{would_create(kind, name) -> bool}, the core's answer.
    """

    __slots__ = ("_access", "_principal", "_peer", "_locate", "_would_create", "_cache",
                 "_generation")

    def __init__(self, access, principal, locate, would_create, peer=None):
        self._access = access
        self._principal = principal
        self._peer = peer
        self._locate = locate
        self._would_create = would_create
        self._cache = {}
        self._generation = None

    def check(self, address):
        """None if a message to C{address} may go, else a L{Denied}."""
        access = self._access
        rule_set = access.rule_set
        if rule_set is None:
            return None
        if self._generation != rule_set.generation:
            self._cache.clear()
            self._generation = rule_set.generation
        entry = self._cache.get(address)
        if entry is None:
            if len(self._cache) >= RELAY_CACHE_MAX:
                self._cache.clear()
            kind, name = self._locate(address)
            # [kind, name, decision if it exists, decision if it would be created]
            entry = self._cache[address] = [kind, name, _UNSET, _UNSET]
        slot = 3 if self._would_create(entry[0], entry[1]) else 2
        denied = entry[slot]
        if denied is _UNSET:
            denied = entry[slot] = access.check_destination(
                self._principal, entry[0], entry[1], PRODUCE, slot == 2, self._peer)
        elif denied is not None:
            # Each denied message is a denial to audit, even when decided before.
            access.record(self._principal, self._peer, denied)
        return denied


_UNSET = object()


class RuleFileWatcher(service.Service):
    """Reloads a L{RuleSet} when its file changes: a stat once a L{WATCH_INTERVAL}.

    The file is (re)read when its mtime, size or inode differ from the last look, so
    an editor that replaces the file and one that rewrites it in place are both seen.

    @param rule_sets: the L{RuleSet}s to watch.
    @param clock: an C{IReactorTime}.
    @param stat: C{os.stat} (tests pass their own).
    """

    def __init__(self, rule_sets, clock, stat=os.stat):
        self._rule_sets = list(rule_sets)
        self._clock = clock
        self._stat = stat
        self._seen = {}
        self._loop = None

    def startService(self):
        super().startService()
        for rule_set in self._rule_sets:
            self._seen[rule_set.path] = self._signature(rule_set.path)
            rule_set.reload()
        self._loop = task.LoopingCall(self.check)
        self._loop.clock = self._clock
        self._loop.start(WATCH_INTERVAL, now=False)

    def stopService(self):
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def check(self):
        """Reload each rule set whose file changed since the last look."""
        for rule_set in self._rule_sets:
            signature = self._signature(rule_set.path)
            if signature != self._seen.get(rule_set.path):
                self._seen[rule_set.path] = signature
                rule_set.reload()

    def _signature(self, path):
        try:
            st = self._stat(path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


class Reloadables:
    """What the admin C{reload} request re-reads: a list of named things, each with a
    C{reload() -> (ok, text)}. Access control adds its rule sets; the user repository
    may add itself the same way.
    """

    def __init__(self):
        self._things = []

    def add(self, name, reload):
        """Add C{reload}, a callable answering C{(ok, text)}, under C{name}."""
        self._things.append((name, reload))

    def names(self):
        return [name for name, _ in self._things]

    def reload(self, which=None):
        """Reload everything (or the things called C{which}); C{[(name, ok, text)]}."""
        results = []
        for name, reload in self._things:
            if which is None or name == which:
                ok, text = reload()
                results.append((name, ok, text))
        return results


def ensure_rule_file(path):
    """Install the shipped rules at C{path} if there is no file there (first start).

    @return: warnings for the operator (the file was created).
    """
    if os.path.exists(path):
        return []
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
        os.chmod(directory, 0o700)
    # Readable by the owner only, like the user repository: the rules say who may do
    # what, which is nobody else's business (S4.7).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(DEFAULT_FILE_TEXT)
    return [f"created access control file {path} with the shipped rules"]
