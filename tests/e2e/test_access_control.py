"""Access control against the real broker (S4.1, S4.5), with Proton and stomp.py.

Each broker reads a rule file and a user repository the test writes (in the source
system's formats, FACTS 1.3 and 1.4): bob, alice, eve and mallory are in group user,
admin in group admin, guest in group anonymous; every password is the user's name.
"""

import functools
import re

import pytest
from proton import ConnectionException, Message
from proton.reactor import Copy
from proton.utils import LinkDetached

from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.proton_client import DEFAULT_TIMEOUT, connect, opened, receive_all
from tests.e2e.stomp_client import DeadlineExceeded, open_client, unique
from tests.e2e.users import write_users
from tests.hostile.probe import wait_until

UNAUTHORIZED = "amqp:unauthorized-access"
V = "version=JMQFileAccessControlModel/100\n"

USERS = (("admin", "admin"), ("guest", "anonymous"), ("bob", "user"), ("alice", "user"),
         ("eve", "user"), ("mallory", "user"))

SHIPPED = """\
connection.NORMAL.allow.user=*
connection.ADMIN.allow.group=admin
connection.ADMIN.deny.group=anonymous
queue.*.produce.allow.user=*
queue.*.consume.allow.user=*
queue.*.browse.allow.user=*
topic.*.produce.allow.user=*
topic.*.consume.allow.user=*
queue.create.allow.user=*
topic.create.allow.user=*
"""

RULES = V + SHIPPED + """\
# a specific destination beats *
queue.orders.consume.deny.user=bob
# deny wins: allow and deny of the same principal in one rule
queue.both.produce.allow.user=alice
queue.both.produce.deny.user=alice
# a specific user beats user=*
queue.vip.consume.deny.user=*
queue.vip.consume.allow.user=alice
# a user rule beats a group rule
queue.staff.produce.deny.group=user
queue.staff.produce.allow.user=alice
# topic wildcard rules, the narrower pattern last
topic.news.#.consume.deny.user=bob
topic.news.sport.*.consume.allow.user=bob
# browsing refused to bob
queue.ledger.browse.deny.user=bob
# mallory may not connect at all
connection.NORMAL.deny.user=mallory
# auto-creation refused to eve
queue.create.deny.user=eve
topic.create.deny.user=eve
"""


def start_broker(start, directory, rules, **defines):
    """With C{start} (a broker factory fixture), a broker reading C{rules} from a file
    the test owns under C{directory}, and L{USERS}; returns it and the file."""
    etc = directory / "etc"
    users = write_users(etc, USERS)
    path = etc / "acl.properties"
    path.write_text(rules, encoding="utf-8")
    broker = start({
        "mqgate.accesscontrol.file.dirpath": str(etc),
        "mqgate.accesscontrol.file.filename": "acl.properties", **users, **defines},
        varhome=directory / "varhome")
    broker.wait_for_line(r"access control rules loaded from .*acl\.properties")
    return broker, path


@pytest.fixture(scope="module")
def acl_broker(module_broker_factory, tmp_path_factory):
    """One broker on L{RULES} for the tests that only read the rules."""
    directory = tmp_path_factory.mktemp("acl")
    return start_broker(module_broker_factory, directory, RULES)[0]


@pytest.fixture
def own_broker(broker_factory, tmp_path):
    """A function C{start(rules, **defines)} for tests that edit their rule file."""
    return functools.partial(start_broker, broker_factory, tmp_path)


def as_user(broker, user, **kwargs):
    return opened(broker, user=user, password=user, **kwargs)


def refused_link(make):
    """Run C{make()} (a link attach) and return the refusal's description."""
    with pytest.raises(LinkDetached) as info:
        make()
    condition = info.value.link.remote_condition
    assert condition.name == UNAUTHORIZED, condition
    return condition.description


def send(conn, address, body="x"):
    conn.create_sender(address).send(Message(body=body))


def round_trip(conn, address, body="ok"):
    receiver = conn.create_receiver(address)
    send(conn, address, body)
    [got] = receive_all(receiver, 1)
    return got.body


# -- each rule kind, AMQP -----------------------------------------------------------------


def test_shipped_rules_let_users_send_and_receive(acl_broker):
    """Under the shipped rules any user produces to and consumes from a queue (S4.5)."""
    with as_user(acl_broker, "bob") as conn:
        assert round_trip(conn, f"queue://{unique('plain')}", "fine") == "fine"


def test_specific_destination_beats_every_destination(acl_broker):
    """queue.orders.consume.deny.user=bob refuses bob's receiver, naming the rule;
    queue.* still lets him send there, and lets alice receive."""
    with as_user(acl_broker, "bob") as conn:
        send(conn, "queue://orders", "for alice")
        why = refused_link(lambda: conn.create_receiver("queue://orders"))
    assert why == "user bob may not consume from queue orders (rule queue.orders.consume)"
    with as_user(acl_broker, "alice") as conn:
        [got] = receive_all(conn.create_receiver("queue://orders"), 1)
        assert got.body == "for alice"


def test_deny_wins_over_allow_of_the_same_principal(acl_broker):
    """alice allowed and denied in one rule is denied; bob, named in neither, falls
    back to queue.* (S4.5)."""
    with as_user(acl_broker, "alice") as conn:
        why = refused_link(lambda: conn.create_sender("queue://both"))
    assert "(rule queue.both.produce)" in why
    with as_user(acl_broker, "bob") as conn:
        send(conn, "queue://both")


def test_specific_user_beats_everybody(acl_broker):
    """queue.vip denies user=* and allows alice: alice consumes, bob is refused."""
    with as_user(acl_broker, "alice") as conn:
        conn.create_receiver("queue://vip")
    with as_user(acl_broker, "bob") as conn:
        assert "rule queue.vip.consume" in refused_link(
            lambda: conn.create_receiver("queue://vip"))


def test_user_rule_beats_group_rule(acl_broker):
    """queue.staff denies group user and allows alice: alice (in group user) produces,
    bob (in group user) is refused."""
    with as_user(acl_broker, "alice") as conn:
        send(conn, "queue://staff")
    with as_user(acl_broker, "bob") as conn:
        assert "rule queue.staff.produce" in refused_link(
            lambda: conn.create_sender("queue://staff"))


def test_topic_wildcard_rules(acl_broker):
    """topic.news.# denies bob, topic.news.sport.* allows him again; other topics
    follow topic.* (S4.5)."""
    with as_user(acl_broker, "bob") as conn:
        why = refused_link(lambda: conn.create_receiver("topic://news.politics"))
        assert why == ("user bob may not consume from topic news.politics "
                       "(rule topic.news.#.consume)")
        receiver = conn.create_receiver("topic://news.sport.chess")
        send(conn, "topic://news.sport.chess", "check")
        [got] = receive_all(receiver, 1)
        assert got.body == "check"
        conn.create_receiver("topic://weather")


def test_create_rules_refuse_auto_creation_but_not_existing_destinations(acl_broker):
    """eve may not have a queue or topic auto-created; a queue someone else made is
    usable by her all the same (S2.5, S4.5)."""
    fresh = unique("fresh")
    with as_user(acl_broker, "eve") as conn:
        why = refused_link(lambda: conn.create_sender(f"queue://{fresh}"))
        assert why == f"user eve may not create queue {fresh} (rule queue.create)"
        assert "rule topic.create" in refused_link(
            lambda: conn.create_receiver(f"topic://{fresh}"))
    with as_user(acl_broker, "bob") as conn:
        send(conn, f"queue://{fresh}", "made by bob")
    with as_user(acl_broker, "eve") as conn:
        [got] = receive_all(conn.create_receiver(f"queue://{fresh}"), 1)
        assert got.body == "made by bob"


def test_browse_rule_applies_to_a_copying_receiver(acl_broker):
    """A receiver asking for copies (distribution-mode copy) needs the browse rule:
    bob, denied browsing the ledger, is refused such a receiver but may consume."""
    with as_user(acl_broker, "bob") as conn:
        why = refused_link(lambda: conn.create_receiver("queue://ledger", options=Copy()))
        assert why == "user bob may not browse queue ledger (rule queue.ledger.browse)"
        conn.create_receiver("queue://ledger")
    with as_user(acl_broker, "alice") as conn:
        conn.create_receiver("queue://ledger", options=Copy())


# -- the anonymous relay -----------------------------------------------------------------


def relay_send(conn, sender, address, body):
    """Send on an anonymous-relay sender; return the delivery once settled."""
    message = Message(address=address, body=body)
    delivery = sender.link.send(message)
    conn.wait(lambda: bool(delivery.remote_state), timeout=DEFAULT_TIMEOUT,
              msg="the outcome of a relayed message")
    return delivery


def test_anonymous_relay_messages_are_checked_by_their_to(acl_broker):
    """Each message of an anonymous-relay sender is checked by its to: a denied one is
    rejected with amqp:unauthorized-access and the link stays up for the next (S4.5)."""
    with as_user(acl_broker, "alice") as conn:
        sender = conn.create_sender(None)
        denied = relay_send(conn, sender, "queue://both", "no")
        assert denied.remote_state == denied.REJECTED
        condition = denied.remote.condition
        assert condition.name == UNAUTHORIZED
        assert "(rule queue.both.produce)" in condition.description
        for number in range(3):   # the cached decision, and the link, go on
            assert relay_send(conn, sender, "queue://both", "again").remote_state == \
                denied.REJECTED
            delivery = relay_send(conn, sender, "queue://relay-ok", f"ok {number}")
            assert delivery.remote_state == delivery.ACCEPTED
        [got] = receive_all(conn.create_receiver("queue://relay-ok"), 1)
        assert got.body == "ok 0"


# -- connections -------------------------------------------------------------------------


def test_guest_cannot_reach_the_admin_service(acl_broker):
    """guest logs in (SASL succeeds) but its open is answered with a close carrying
    amqp:unauthorized-access naming connection.ADMIN; admin gets in (S4.5)."""
    with pytest.raises(ConnectionException) as info:
        connect(acl_broker, user="guest", password="guest", service="admin").close()
    assert UNAUTHORIZED in str(info.value)
    assert "user guest may not connect to the admin service (rule connection.ADMIN)" in \
        str(info.value)
    with pytest.raises(ConnectionException) as info:
        connect(acl_broker, user="bob", password="bob", service="admin").close()
    assert "rule connection.ADMIN" in str(info.value)
    with opened(acl_broker, service="admin"):
        pass
    acl_broker.wait_for_line(r"access denied to .*guest may not connect")


def test_connection_rule_refuses_a_user_on_both_protocols(acl_broker):
    """connection.NORMAL.deny.user=mallory: her AMQP open is closed with
    amqp:unauthorized-access, her STOMP CONNECT answered with an ERROR naming the rule."""
    with pytest.raises(ConnectionException) as info:
        connect(acl_broker, user="mallory", password="mallory").close()
    assert UNAUTHORIZED in str(info.value)
    assert "rule connection.NORMAL" in str(info.value)
    with pytest.raises(DeadlineExceeded) as info:
        open_client(acl_broker.address("stomp"), user="mallory", passcode="mallory")
    assert "user mallory may not connect to the stomp service (rule " \
        "connection.NORMAL)" in str(info.value)


# -- STOMP -------------------------------------------------------------------------------


def test_stomp_subscribe_and_send_are_checked(acl_broker):
    """SUBSCRIBE needs consume and SEND produce (and create for a new destination);
    a refusal is an ERROR frame whose message names the user and the rule (S4.5)."""
    address = acl_broker.address("stomp")
    client = open_client(address, user="bob", passcode="bob")
    try:
        client.connection.subscribe("/queue/orders", id="s1")
        error = client.collector.wait_for_error()
        assert error.headers["message"] == \
            "user bob may not consume from queue orders (rule queue.orders.consume)"
    finally:
        client.close()
    client = open_client(address, user="eve", passcode="eve")
    try:
        fresh = unique("stomp-fresh")
        client.connection.send(f"/queue/{fresh}", "x")
        error = client.collector.wait_for_error()
        assert error.headers["message"] == \
            f"user eve may not create queue {fresh} (rule queue.create)"
    finally:
        client.close()
    with_alice = open_client(address, user="alice", passcode="alice")
    try:
        with_alice.subscribe("/queue/vip")
        with_alice.send("/queue/staff", "alice may")
    finally:
        with_alice.close()


# -- reloads -----------------------------------------------------------------------------


def may_consume(broker, user, address):
    with as_user(broker, user) as conn:
        try:
            conn.create_receiver(address)
        except LinkDetached:
            return False
        return True


def test_edited_rule_file_takes_effect_and_a_broken_one_is_refused(own_broker):
    """A rule file edited while the broker runs takes effect within seconds; a broken
    edit keeps the previous rules and the log names the line and the reason (S4.5)."""
    broker, path = own_broker(V + SHIPPED)
    assert may_consume(broker, "bob", "queue://edited")
    path.write_text(V + SHIPPED + "queue.edited.consume.deny.user=bob\n")
    wait_until(lambda: not may_consume(broker, "bob", "queue://edited"),
               DEFAULT_TIMEOUT, "bob refused after the edit", interval=0.1)
    path.write_text(V + SHIPPED + "queue.edited.consume.deny.usr=bob\n")
    match = broker.wait_for_line(r"access control file .*acl\.properties refused, "
                                 r"line (\d+): .*'usr' is neither user nor group; the "
                                 r"previous rules stay in force")
    assert match.group(1) == str(SHIPPED.count("\n") + 2)
    assert not may_consume(broker, "bob", "queue://edited")
    assert may_consume(broker, "alice", "queue://edited")


def test_rule_file_without_version_keeps_the_rules_in_force(own_broker):
    """A file whose version line is gone is refused as a whole, saying so."""
    broker, path = own_broker(V + SHIPPED)
    path.write_text(SHIPPED + "queue.x.consume.deny.user=*\n")
    broker.wait_for_line(r"refused, whole file: no version line")
    assert may_consume(broker, "bob", "queue://x")
    assert len(re.findall("rules loaded", "".join(broker.output))) == 1


# -- settings ----------------------------------------------------------------------------


def test_per_service_switch_and_file(own_broker, tmp_path):
    """Access control off broker-wide but on for the stomp service with a file of its
    own (mqgate.SERVICE.accesscontrol.*): bob consumes freely over jms, the stomp
    service applies its file, and the admin service still takes only the admin group
    (S4.1, S4.5)."""
    etc = tmp_path / "etc"
    (etc).mkdir()
    (etc / "stomp-acl.properties").write_text(
        V + SHIPPED + "queue.locked.consume.deny.user=bob\n", encoding="utf-8")
    broker, _ = own_broker(V, **{
        "mqgate.accesscontrol.enabled": "false",
        "mqgate.stomp.accesscontrol.enabled": "true",
        "mqgate.stomp.accesscontrol.file.filename": "stomp-acl.properties"})
    assert may_consume(broker, "bob", "queue://locked")
    client = open_client(broker.address("stomp"), user="bob", passcode="bob")
    try:
        client.connection.subscribe("/queue/locked", id="s1")
        assert "(rule queue.locked.consume)" in \
            client.collector.wait_for_error().headers["message"]
    finally:
        client.close()
    with pytest.raises(ConnectionException) as info:
        connect(broker, user="guest", password="guest", service="admin").close()
    assert "user guest may not connect to the admin service: only the admin group " \
        "may use it" in str(info.value)


def test_reload_command_rereads_the_rules_and_says_what_happened(own_broker, passfile):
    """`mqgate cmd reload rules` re-reads the file at once: a broken one is refused
    (exit status 1, the line and the reason), a good one loaded (S4.5, S11.1)."""
    broker, path = own_broker(V + SHIPPED)
    path.write_text(V + "queue.*.consume.allow.usr=*\n")
    result = mqgate_cmd(broker, passfile, "reload", "rules")
    assert result.returncode == 1, result
    assert "rules: REFUSED" in result.stderr
    assert "line 2: rule 'queue.*.consume.allow.usr': 'usr' is neither user nor group" \
        in result.stderr
    path.write_text(V + SHIPPED)
    result = mqgate_cmd(broker, passfile, "reload", "rules")
    assert result.returncode == 0, result
    assert result.stdout.startswith("rules: reloaded: ")
    assert "10 rules loaded" in result.stdout
