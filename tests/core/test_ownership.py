"""Ownership of temporary destinations and durable subscriptions: who may
receive from a temporary queue or topic, and who may resume or delete a durable
subscription, in the core."""

import re

import pytest
from twisted.logger import capturedLogs
from zope.interface import implementer

from mqgate.core import BrokerMessage, NotFound
from mqgate.core.broker import Requester, Unauthorized
from mqgate.core.persistence import durable_key
from mqgate.security.audit import IAuditTrail
from mqgate.security.auth import Principal
from mqgate.core.errors import ErrorKind
from tests.core import consume, make_broker, send
from tests.core.test_persistence import restart, stored_broker

ALICE = Requester("alice", connection="conn-a")
ALICE_AGAIN = Requester("alice", connection="conn-a2")
BOB = Requester("bob", connection="conn-b")
ADMIN = Requester("admin", admin=True, connection="conn-admin")


@implementer(IAuditTrail)
class RecordingAudit:
    """An audit trail keeping its records as (kind, outcome, fields)."""

    def __init__(self):
        self.records = []

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        self.records.append((kind, outcome, dict(user=user, address=address,
                                                 service=service, **details)))


def test_requester_of_a_principal_knows_admins():
    """A member of group admin is an admin requester; others are not."""
    admin = Requester.of(Principal("root", {"admin", "users"}), "c1")
    user = Requester.of(Principal("alice", {"users"}), "c2", "10.0.0.1:5", "jms")
    assert (admin.user, admin.admin, admin.connection) == ("root", True, "c1")
    assert (user.admin, user.address, user.service) == (False, "10.0.0.1:5", "jms")


def test_temporary_names_are_unguessable():
    """Temporary names keep the mqgate.tmp. prefix and carry 128 random bits."""
    broker, _ = make_broker()
    names = {consume(broker, None, dynamic=True, requester=ALICE)[0].address
             for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"queue://mqgate\.tmp\.[0-9a-f]{32}", name), name


@pytest.mark.parametrize("other", [BOB, ALICE_AGAIN, ADMIN],
                         ids=["other-user", "same-user", "admin"])
def test_only_the_creating_connection_receives_from_a_temporary_queue(other):
    """Another connection cannot attach a consumer to a temporary queue, whoever its
    user is, while anyone may send to it and the owner keeps receiving."""
    broker, _ = make_broker()
    owner, received = consume(broker, None, credit=10, dynamic=True, requester=ALICE)
    with pytest.raises(Unauthorized) as caught:
        consume(broker, owner.address, requester=other)
    assert caught.value.kind is ErrorKind.UNAUTHORIZED
    assert "belongs to another connection" in caught.value.description
    send(broker, owner.address, b"reply")
    assert received.payloads == [b"reply"]
    second, _ = consume(broker, owner.address, requester=ALICE)   # same connection
    assert second.queue is owner.queue


def test_only_the_creating_connection_subscribes_to_a_temporary_topic():
    """A temporary topic refuses another connection's subscription, and another
    connection's wildcard subscription never receives what is sent to it."""
    broker, _ = make_broker()
    owner, received = consume(broker, None, credit=10, dynamic=True,
                              capabilities=["temporary-topic"], requester=ALICE)
    wildcard, snooped = consume(broker, "topic://mqgate.tmp.#", credit=10,
                                requester=BOB)
    with pytest.raises(Unauthorized):
        consume(broker, owner.address, requester=BOB)
    send(broker, owner.address, b"private")
    broker.create_topic("mqgate.tmp.public")     # an ordinary topic of such a name
    send(broker, "topic://mqgate.tmp.public", b"public")
    assert received.payloads == [b"private"]
    assert snooped.payloads == [b"public"]


def test_a_gone_temporary_queue_is_not_made_again_by_a_late_reply():
    """A reply sent after its temporary queue was deleted is refused with not-found
    rather than auto-creating an ordinary queue anyone could read; a queue of such a
    name made by an administrator (or stored before) is still used."""
    broker, _ = make_broker()
    owner, _ = consume(broker, None, dynamic=True, requester=ALICE)
    owner.close()
    with pytest.raises(NotFound) as caught:
        send(broker, owner.address, b"late reply")
    assert "temporary destinations" in caught.value.description
    with pytest.raises(NotFound):
        consume(broker, owner.address, requester=BOB)
    with pytest.raises(NotFound):
        broker.open_producer(None).send(BrokerMessage(b"late", to=owner.address))
    assert broker.queues() == []
    broker.create_queue("mqgate.tmp.kept")
    send(broker, "queue://mqgate.tmp.kept", b"1")
    assert broker.queue("mqgate.tmp.kept").held == 1


def test_a_refused_temporary_attach_is_audited():
    """A refusal is an access.denied audit record naming the user and the queue."""
    audit = RecordingAudit()
    broker, _ = make_broker()
    broker.audit = audit
    owner, _ = consume(broker, None, dynamic=True, requester=ALICE)
    with pytest.raises(Unauthorized):
        consume(broker, owner.address,
                requester=Requester("bob", connection="b", address="h:1", service="jms"))
    [(kind, outcome, fields)] = audit.records
    assert (kind, outcome) == ("access.denied", "denied")
    assert fields["user"] == "bob" and fields["address"] == "h:1"
    assert fields["name"] == owner.address.split("://")[1]
    assert fields["operation"] == "consume"


def durable(broker, requester, credit=0, topic="topic://news", **kwargs):
    return consume(broker, topic, credit=credit, durable_name="sub",
                   container_id="app", requester=requester, **kwargs)


def test_another_user_cannot_resume_a_durable_subscription():
    """Another user reusing the container id and link name is refused with
    unauthorized-access, and the subscription and its backlog are untouched."""
    broker, _ = make_broker()
    first, _ = durable(broker, ALICE)
    first.close()
    send(broker, "topic://news", b"1", b"2")
    with pytest.raises(Unauthorized) as caught:
        durable(broker, BOB)
    assert caught.value.kind is ErrorKind.UNAUTHORIZED
    assert caught.value.description == (
        "durable subscription sub of container app belongs to another user")
    # Even with another topic, which would replace it for its owner.
    with pytest.raises(Unauthorized):
        durable(broker, BOB, topic="topic://other")
    resumed, target = durable(broker, ALICE_AGAIN, credit=5)
    assert target.payloads == [b"1", b"2"]


def test_another_user_learns_nothing_from_a_subscription_in_use():
    """While the owner is attached, another user is refused as not the owner, not
    told that the subscription is in use."""
    broker, _ = make_broker()
    durable(broker, ALICE)
    with pytest.raises(Unauthorized):
        durable(broker, BOB)


def test_admin_resumes_and_deletes_another_users_subscription():
    """A member of group admin may resume another user's durable subscription and
    delete it; the owner stays the owner while it exists."""
    broker, _ = make_broker()
    first, _ = durable(broker, ALICE)
    first.close()
    send(broker, "topic://news", b"1")
    by_admin, target = durable(broker, ADMIN, credit=5)
    assert target.payloads == [b"1"]
    assert broker.subscription("app", "sub").owner == "alice"
    by_admin.close(remove=True)    # AMQP detach closed=true
    with pytest.raises(NotFound):
        broker.subscription("app", "sub")


def test_destroy_durable_checks_the_owner():
    """Deleting a durable subscription (JMS unsubscribe) is refused to another user
    and allowed to its owner."""
    broker, _ = make_broker()
    durable(broker, ALICE)[0].close()
    with pytest.raises(Unauthorized):
        broker.destroy_durable("app", "sub", BOB)
    assert broker.subscription("app", "sub").owner == "alice"
    broker.destroy_durable("app", "sub", ALICE)
    assert broker.subscriptions() == []


def test_the_owner_is_stored_and_survives_a_restart():
    """The owner is stored with the subscription and restored: after a restart
    another user is still refused and the owner resumes it with its backlog."""
    broker, store, _, _ = stored_broker()
    durable(broker, ALICE)[0].close()
    broker.open_producer("topic://news").send(BrokerMessage(b"kept", durable=True))
    assert store._ledger.durables[("app", "sub")] == ("news", None, "alice")
    again, _, _ = restart(store)
    with pytest.raises(Unauthorized):
        durable(again, BOB)
    _, target = durable(again, ALICE, credit=5)
    assert target.payloads == [b"kept"]


def test_a_durable_stored_without_owner_is_adopted_by_its_first_user():
    """A durable subscription stored by an older mqgate (no owner) goes to the first
    user who resumes it, which is logged and stored; the next user is refused."""
    broker, store, _, _ = stored_broker()
    durable(broker, None)[0].close()     # the broker's own use: no owner
    broker.open_producer("topic://news").send(BrokerMessage(b"old", durable=True))
    assert store._ledger.durables[("app", "sub")] == ("news", None, None)
    again, store, _ = restart(store)
    with capturedLogs() as events:
        resumed, target = durable(again, BOB, credit=5)
    assert target.payloads == [b"old"]
    assert any("now belongs to user bob" in str(e.get("log_format", "")).format(**e)
               for e in events)
    assert store._ledger.durables[("app", "sub")] == ("news", None, "bob")
    assert durable_key("app", "sub") in store._ledger.messages
    resumed.close()
    with pytest.raises(Unauthorized):
        durable(again, ALICE)
    third, _, _ = restart(store)
    with pytest.raises(Unauthorized):
        durable(third, ALICE)
