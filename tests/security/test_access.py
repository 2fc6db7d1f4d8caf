"""Access control rules (S4.1, S4.5): parsing, the decisions, reload, the relay cache."""

import os
import pathlib
import stat

import pytest
from twisted.internet import task
from zope.interface import implementer

from mqgate.admin.requests import ERROR, OK, AdminContext, reload_commands
from mqgate.core.addresses import resolve
from mqgate.core.broker import Broker, CoreConfig
from mqgate.security.access import (
    DEFAULT_FILE_TEXT, AccessFileError, parse_rules, read_rules_text)
from mqgate.security.access_control import (
    RELAY_CACHE_MAX, RelayDecisions, Reloadables, RuleFileWatcher, RuleSet,
    ServiceAccess, ensure_rule_file)
from mqgate.security.audit import IAuditTrail
from mqgate.security.auth import Principal

ROOT = pathlib.Path(__file__).resolve().parents[2]
V = "version=JMQFileAccessControlModel/100\n"


def rules(*lines):
    return parse_rules(V + "\n".join(lines) + "\n")


def may(r, user, groups, kind, name, operation):
    return r.destination(user, frozenset(groups), kind, name, operation).allowed


@implementer(IAuditTrail)
class RecordingAudit:
    def __init__(self):
        self.records = []

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        self.records.append((kind, outcome, user, service, details))


# -- the file --------------------------------------------------------------------------


def test_shipped_file_is_the_one_installed_and_parses():
    """etc/accesscontrol.properties is the text installed at first start, and parses."""
    shipped = (ROOT / "etc" / "accesscontrol.properties").read_text(encoding="utf-8")
    assert shipped == DEFAULT_FILE_TEXT
    assert len(parse_rules(shipped)) == 12


@pytest.mark.parametrize("text, line, words", [
    ("connection.NORMAL.allow.user=*\n", None, "no version line"),
    ("version=JMQFileAccessControlModel/200\n", 1, "not JMQFileAccessControlModel/100"),
    (V + "queue.orders.allow.user=*\n", 2, "malformed rule"),
    (V + "queue.orders.consume.permit.user=*\n", 2, "neither allow nor deny"),
    (V + "queue.orders.consume.allow.role=*\n", 2, "neither user nor group"),
    (V + "queue.orders.eat.allow.user=*\n", 2, "unknown operation 'eat'"),
    (V + "topic.news.browse.allow.user=*\n", 2, "unknown operation 'browse'"),
    (V + "connection.HTTP.allow.user=*\n", 2, "service type 'HTTP'"),
    (V + "mailbox.x.produce.allow.user=*\n", 2, "not connection, queue or topic"),
    (V + "queue.ord*.consume.allow.user=*\n", 2, "names one queue or *"),
    (V + "topic.news.a*.consume.allow.user=*\n", 2, "whole levels"),
    (V + "queue.a.consume.allow.user=bob,*\n", 2, "stands alone"),
    (V + "queue.a.consume.allow.user=b*b\n", 2, "may only stand alone"),
    (V + "queue.a.consume.allow.user=bob,,eve\n", 2, "empty principal"),
    (V + "queue.a.consume.allow.user=\n", 2, "empty principal"),
    (V + "queue.a..b.consume.allow.user=bob\n", 2, "empty level"),
])
def test_bad_file_is_refused_with_its_line_and_reason(text, line, words):
    """A bad rule file is refused, naming the line and what is wrong (S4.5)."""
    with pytest.raises(AccessFileError) as info:
        parse_rules(text)
    assert info.value.line == line
    assert words in info.value.why


def test_destination_names_may_hold_dots_and_the_last_duplicate_wins():
    """Keys are read from their right end, so dotted names work; a repeated key's last
    line wins (Properties semantics)."""
    r = rules("queue.orders.eu.consume.allow.user=alice",
              "queue.orders.eu.consume.allow.user=bob")
    assert may(r, "bob", (), "queue", "orders.eu", "consume")
    assert not may(r, "alice", (), "queue", "orders.eu", "consume")


# -- decisions -------------------------------------------------------------------------


def test_shipped_rules():
    """Everybody may connect to NORMAL services and use destinations; only the admin
    group reaches ADMIN services, never the guest's group anonymous (S4.5)."""
    r = parse_rules(DEFAULT_FILE_TEXT)
    assert r.connection("bob", {"user"}, "NORMAL").allowed
    assert r.connection("admin", {"admin"}, "ADMIN").allowed
    denied = r.connection("bob", {"user"}, "ADMIN")
    assert (denied.allowed, denied.subject) == (False, "connection.ADMIN")
    assert not r.connection("guest", {"anonymous"}, "ADMIN").allowed
    for operation in ("produce", "consume", "browse"):
        assert may(r, "bob", {"user"}, "queue", "orders", operation)
    assert may(r, "guest", {"anonymous"}, "topic", "news.eu", "consume")
    assert r.create("bob", {"user"}, "queue").allowed
    # The metrics topics (S5.3): the admin group only.
    assert may(r, "admin", {"admin"}, "topic", "mq.metrics.broker", "consume")
    assert may(r, "admin", {"admin"}, "topic", "mq.metrics.destination.queue.q", "consume")
    assert not may(r, "bob", {"user"}, "topic", "mq.metrics.broker", "consume")
    assert not may(r, "guest", {"anonymous"}, "topic", "mq.metrics.jvm", "consume")


def test_anything_not_allowed_is_denied():
    """Without a rule that allows it, an operation is denied, naming the rule asked."""
    r = rules("queue.*.consume.allow.user=*")
    decision = r.destination("bob", frozenset(), "queue", "orders", "produce")
    assert (decision.allowed, decision.subject) == (False, "queue.orders.produce")
    assert not r.create("bob", frozenset(), "topic").allowed


def test_deny_wins_over_allow_of_the_same_principal():
    """A rule naming a principal in both allow and deny denies it (the documented
    'deny wins'), even where a broader rule allows."""
    r = rules("queue.*.produce.allow.user=*",
              "queue.orders.produce.allow.user=bob",
              "queue.orders.produce.deny.user=bob")
    decision = r.destination("bob", frozenset(), "queue", "orders", "produce")
    assert (decision.allowed, decision.subject) == (False, "queue.orders.produce")
    assert may(r, "eve", (), "queue", "orders", "produce")


def test_specific_user_beats_everybody():
    """user=bob deny beats user=* allow in the same rule, and the reverse."""
    r = rules("queue.q.consume.allow.user=*", "queue.q.consume.deny.user=bob",
              "queue.p.consume.deny.user=*", "queue.p.consume.allow.user=bob")
    assert not may(r, "bob", (), "queue", "q", "consume")
    assert may(r, "eve", (), "queue", "q", "consume")
    assert may(r, "bob", (), "queue", "p", "consume")
    assert not may(r, "eve", (), "queue", "p", "consume")


def test_user_rule_beats_group_rule_and_group_beats_everybody():
    """A rule for the user beats one for its group; a named group beats user=*; and
    user=* beats group=* (FACTS 1.3)."""
    r = rules("queue.q.consume.deny.group=staff", "queue.q.consume.allow.user=bob",
              "queue.g.consume.allow.user=*", "queue.g.consume.deny.group=staff",
              "queue.s.consume.deny.group=*", "queue.s.consume.allow.user=*")
    assert may(r, "bob", {"staff"}, "queue", "q", "consume")
    assert not may(r, "eve", {"staff"}, "queue", "q", "consume")
    assert not may(r, "eve", {"staff"}, "queue", "g", "consume")
    assert may(r, "eve", {"other"}, "queue", "g", "consume")
    assert may(r, "eve", {"staff"}, "queue", "s", "consume")


def test_specific_destination_beats_every_destination():
    """queue.orders beats queue.* either way."""
    r = rules("queue.*.produce.allow.user=*", "queue.orders.produce.deny.user=*",
              "queue.*.consume.deny.user=*", "queue.orders.consume.allow.user=*")
    assert not may(r, "bob", (), "queue", "orders", "produce")
    assert may(r, "bob", (), "queue", "other", "produce")
    assert may(r, "bob", (), "queue", "orders", "consume")
    assert not may(r, "bob", (), "queue", "other", "consume")


def test_topic_patterns_apply_to_matching_topics_the_narrowest_last():
    """Topic rules may be patterns; a narrower pattern beats a broader one, and the
    exact name beats both; queues get no pattern rules (FACTS 1.3)."""
    r = rules("topic.*.consume.allow.user=*",
              "topic.news.#.consume.deny.user=bob",
              "topic.news.sport.*.consume.allow.user=bob",
              "topic.news.sport.chess.consume.deny.user=bob")
    assert may(r, "bob", (), "topic", "weather", "consume")
    assert not may(r, "bob", (), "topic", "news.politics", "consume")
    decision = r.destination("bob", frozenset(), "topic", "news.sport.golf", "consume")
    assert (decision.allowed, decision.subject) == (True, "topic.news.sport.*.consume")
    assert not may(r, "bob", (), "topic", "news.sport.chess", "consume")
    assert may(r, "eve", (), "topic", "news.sport.chess", "consume")


def test_create_rules():
    """queue.create and topic.create decide auto-creation per kind."""
    r = rules("queue.create.allow.user=*", "queue.create.deny.user=bob",
              "topic.create.allow.group=admin")
    assert r.create("eve", frozenset(), "queue").allowed
    decision = r.create("bob", frozenset(), "queue")
    assert (decision.allowed, decision.subject) == (False, "queue.create")
    assert r.create("root", frozenset({"admin"}), "topic").allowed
    assert not r.create("eve", frozenset(), "topic").allowed


# -- a service's view ------------------------------------------------------------------


def service_access(text, service_type="NORMAL", audit=None):
    rule_set = RuleSet("acl", read=lambda path: text, audit=audit or RecordingAudit())
    rule_set.reload()
    return ServiceAccess("jms", service_type, rule_set, audit=audit or RecordingAudit(),
                         clock=task.Clock())


BOB = Principal("bob", {"user"})


def test_denial_describes_user_operation_destination_and_rule_and_is_audited():
    """A denial names the user, the operation, the destination and the rule's subject
    (never the file), and leaves one access.denied audit record (S4.8)."""
    audit = RecordingAudit()
    access = service_access(V + "queue.*.produce.allow.user=*\n", audit=audit)
    denied = access.check_destination(BOB, "queue", "orders", "consume", True, "1.2.3.4:5")
    assert denied.description == \
        "user bob may not consume from queue orders (rule queue.orders.consume)"
    assert audit.records[1:] == [("access.denied", "denied", "bob", "jms", {
        "rule": "queue.orders.consume", "operation": "consume", "dest_type": "queue",
        "name": "orders"})]
    assert access.check_destination(BOB, "queue", "orders", "produce", True) is None


def test_a_destination_to_be_created_needs_the_create_rule():
    """Using a destination that does not exist yet needs create on its kind too; one
    that exists does not."""
    access = service_access(V + "queue.*.produce.allow.user=*\n"
                                "queue.create.deny.user=bob\n")
    denied = access.check_destination(BOB, "queue", "new", "produce", False)
    assert denied.description == "user bob may not create queue new (rule queue.create)"
    assert access.check_destination(BOB, "queue", "old", "produce", True) is None


def test_disabled_access_control_still_keeps_non_admins_off_admin_services():
    """With access control off for a service, everything is allowed, except that only
    the admin group connects to an ADMIN service (as before S4.5)."""
    access = ServiceAccess("admin", "ADMIN", None)
    assert access.check_connection(Principal("root", {"admin"})) is None
    denied = access.check_connection(BOB)
    assert "bob may not connect to the admin service" in denied.description
    assert ServiceAccess("jms", "NORMAL", None).check_connection(BOB) is None
    assert ServiceAccess("jms", "NORMAL", None).check_destination(
        BOB, "queue", "q", "consume", False) is None


# -- reload ----------------------------------------------------------------------------


class Files:
    """A rule file in memory, read through RuleSet's reader."""

    def __init__(self, text):
        self.text = text
        self.reads = 0

    def read(self, path):
        self.reads += 1
        return self.text


def test_bad_reload_keeps_the_last_good_rules_and_says_why(capsys):
    """A reload of a broken file keeps the rules in force and reports the line and the
    reason; a good one replaces them and moves the generation on (S4.5, S4.8)."""
    files = Files(V + "queue.*.consume.allow.user=*\n")
    audit = RecordingAudit()
    rule_set = RuleSet("/etc/acl", read=files.read, audit=audit)
    assert rule_set.reload() == (True, "/etc/acl: 1 rules loaded")
    files.text = V + "queue.*.consume.alow.user=*\n"
    ok, text = rule_set.reload()
    assert not ok
    assert "line 2" in text and "'alow' is neither allow nor deny" in text
    assert "previous rules stay in force" in text
    assert rule_set.generation == 1
    assert rule_set.rules.destination("bob", frozenset(), "queue", "q", "consume").allowed
    assert [(r[0], r[1]) for r in audit.records] == [
        ("access.reload", "ok"), ("access.reload", "failed")]


def test_unreadable_file_at_start_denies_everything():
    """Until a good file was read, every operation is denied."""
    rule_set = RuleSet("/nonexistent/acl")
    ok, text = rule_set.reload()
    assert not ok and "cannot read" in text and "denied until it is fixed" in text
    assert not rule_set.rules.connection("admin", frozenset({"admin"}), "NORMAL").allowed


def test_watcher_reloads_when_the_file_changes(tmp_path):
    """The watcher loads at start and reloads within a second of a change of mtime,
    size or inode, and not otherwise."""
    path = tmp_path / "accesscontrol.properties"
    path.write_text(V + "queue.*.consume.allow.user=*\n")
    clock = task.Clock()
    rule_set = RuleSet(str(path))
    watcher = RuleFileWatcher([rule_set], clock)
    watcher.startService()
    assert rule_set.generation == 1
    clock.advance(1.0)
    assert rule_set.generation == 1
    replacement = tmp_path / "new"
    replacement.write_text(V + "queue.*.consume.deny.user=*\n")
    os.replace(replacement, path)
    clock.advance(1.0)
    assert rule_set.generation == 2
    assert not rule_set.rules.destination("b", frozenset(), "queue", "q", "consume").allowed
    watcher.stopService()
    assert not clock.getDelayedCalls()


def test_ensure_rule_file_installs_the_shipped_rules_once(tmp_path):
    """A missing file is created with the shipped rules, owner-only; an existing one is
    left alone."""
    path = tmp_path / "etc" / "accesscontrol.properties"
    assert ensure_rule_file(str(path)) == [
        f"created access control file {path} with the shipped rules"]
    assert read_rules_text(str(path)) == DEFAULT_FILE_TEXT
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text(V)
    assert ensure_rule_file(str(path)) == []
    assert path.read_text() == V


def test_reload_command_answers_what_happened():
    """'reload rules' (and 'reload all') re-read now and answer ok or why not."""
    files = Files(V)
    rule_set = RuleSet("/etc/acl", read=files.read)
    reloadables = Reloadables()
    reloadables.add("rules", rule_set.reload)
    commands = reload_commands(reloadables.names())
    context = AdminContext(None, None, None, reloadables)
    reply = commands[("reload", "rules")].run(context, [])
    assert reply.status == OK and reply.text == "rules: reloaded: /etc/acl: 0 rules loaded"
    files.text = "queue.*.consume.allow.user=*\n"
    reply = commands[("reload", "all")].run(context, [])
    assert reply.status == ERROR and "REFUSED" in reply.text and "no version" in reply.text
    assert files.reads == 2


# -- the per-connection cache of produce decisions --------------------------------------


def relay(text, broker=None):
    access = service_access(text)
    broker = broker or Broker(task.Clock(), CoreConfig())
    decisions = RelayDecisions(access, BOB, lambda a: resolve(a), broker.would_create)
    return access, decisions, broker


def test_relay_decisions_are_cached_and_follow_reloads():
    """A relay's decision per address is made once per rule generation, so each
    message costs a lookup; a reload is seen at the next message (S4.5)."""
    access, decisions, broker = relay(V + "queue.*.produce.allow.user=*\n"
                                          "queue.create.allow.user=*\n"
                                          "queue.secret.produce.deny.user=bob\n")
    calls = []
    check = access.check_destination
    access.check_destination = lambda *a: calls.append(a) or check(*a)
    for _ in range(100):
        assert decisions.check("queue://open") is None
        assert decisions.check("queue://secret") is not None
    assert len(calls) == 2
    access.rule_set._read = lambda path: V + "queue.*.produce.deny.user=*\n"
    access.rule_set.reload()
    assert decisions.check("queue://open") is not None
    assert len(calls) == 3


def test_relay_denials_are_each_audited():
    """Every denied relay message is an audit record, even when its decision came from
    the cache (S4.8)."""
    audit = RecordingAudit()
    rule_set = RuleSet("acl", read=lambda p: V)
    rule_set.reload()
    access = ServiceAccess("jms", "NORMAL", rule_set, audit=audit, clock=task.Clock())
    broker = Broker(task.Clock(), CoreConfig())
    decisions = RelayDecisions(access, BOB, resolve, broker.would_create)
    for _ in range(5):
        assert decisions.check("queue://q") is not None
    assert [r[0] for r in audit.records] == ["access.denied"] * 5


def test_relay_needs_create_until_the_destination_exists():
    """A message to a destination nobody made yet needs the create rule; once another
    client made it, the same address is allowed at once."""
    _, decisions, broker = relay(V + "queue.*.produce.allow.user=*\n")
    denied = decisions.check("queue://fresh")
    assert "may not create queue fresh" in denied.description
    broker.create_queue("fresh")
    assert decisions.check("queue://fresh") is None


def test_relay_cache_is_bounded():
    """A client sending to ever new addresses cannot grow the cache past its bound."""
    _, decisions, _ = relay(V + "queue.*.produce.allow.user=*\nqueue.create.allow.user=*\n")
    for number in range(RELAY_CACHE_MAX * 3):
        decisions.check(f"queue://q{number}")
    assert len(decisions._cache) <= RELAY_CACHE_MAX


def test_core_would_create_only_missing_destinations_it_may_create():
    """Broker.would_create: a missing queue or topic (not a pattern) with auto-creation
    on; never an existing one."""
    broker = Broker(task.Clock(), CoreConfig())
    assert broker.would_create("queue", "a")
    broker.create_queue("a")
    assert not broker.would_create("queue", "a")
    assert broker.would_create("topic", "t.x")
    assert not broker.would_create("topic", "t.*")
    off = Broker(task.Clock(), CoreConfig(autocreate_queue=False))
    assert not off.would_create("queue", "b")


def test_rule_file_that_cannot_be_created_is_a_configuration_error(tmp_path):
    """A rule file directory that cannot hold the file stops the start with an error
    naming the setting, not a traceback."""
    from twisted.application.service import MultiService

    from mqgate.config import Settings
    from mqgate.errors import ConfigError
    from mqgate.service import _access_control
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings = Settings.from_properties(
        [], {"mqgate.accesscontrol.file.dirpath": str(blocker / "etc")},
        varhome=str(tmp_path))
    with pytest.raises(ConfigError) as info:
        _access_control(settings, task.Clock(), Reloadables(), None, MultiService())
    assert info.value.key == "mqgate.accesscontrol.file.dirpath"
