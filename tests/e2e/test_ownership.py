"""Ownership of temporary queues and durable subscriptions, end to end.

Two users besides admin, alice and bob, log in to the real broker with passwords (no
anonymous logins): a temporary queue is readable only by the connection that made it,
whoever else asks, admin included, while anyone may send to it; a durable subscription
belongs to the user who made it, and another user reusing its container id and
subscription name is refused and changes nothing, before and after a broker restart,
on the file store and on both SQL stores.

The tests that need no restart share one broker; each uses container ids, topics and
subscription names of its own.
"""

import re

import pytest
from proton import Message
from proton.reactor import DurableSubscription
from proton.utils import LinkDetached

from tests.e2e.proton_client import drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique
from tests.e2e.users import write_users

UNAUTHORIZED = "amqp:unauthorized-access"
USERS = (("admin", "admin", "admin"), ("alice", "alice-pw", "user"),
         ("bob", "bob-pw", "user"))
PASSWORDS = {name: password for name, password, _ in USERS}

STORES = {
    "file": {},
    "sqlite": {"mqgate.persist.store": "jdbc", "mqgate.persist.jdbc.dbVendor": "sqlite"},
    "postgresql": {"mqgate.persist.store": "jdbc",
                   "mqgate.persist.jdbc.dbVendor": "postgresql"},
}


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """The -D overrides of a user repository holding admin, alice and bob."""
    return write_users(tmp_path_factory.mktemp("users"), USERS)


@pytest.fixture
def restartable(broker_factory, tmp_path, users):
    """C{start(defines=None) -> BrokerProcess} on one VARHOME with the users above;
    every broker it started is killed at the end."""
    return lambda defines=None: broker_factory({**users, **(defines or {})},
                                               varhome=tmp_path / "varhome")


@pytest.fixture(scope="module")
def broker(module_broker_factory, users):
    """The module's broker with the users above, for the tests that need no restart."""
    return module_broker_factory(users)


def login(broker, user, **kwargs):
    """An AMQP connection of C{user} (a context manager)."""
    return opened(broker, user=user, password=PASSWORDS[user], **kwargs)


def stomp_login(open_client, broker, user, **headers):
    return open_client(broker.address("jms"), user=user, passcode=PASSWORDS[user],
                       **headers)


def refused_attach(conn, address, **kwargs):
    """The LinkDetached of a receiver attach the broker refuses."""
    with pytest.raises(LinkDetached) as info:
        conn.create_receiver(address, **kwargs)
    return info.value


def refused_subscribe(client, destination, **headers):
    """The ERROR frame answering a SUBSCRIBE the broker refuses."""
    client.connection.subscribe(destination, id=unique("sub"), ack="auto",
                                headers=dict(headers, receipt=unique("subscribe")))
    return client.collector.wait_for_error()


# -- temporary queues ---------------------------------------------------------------------

@pytest.mark.parametrize("other", ["bob", "alice", "admin"])
def test_only_the_creating_connection_receives_from_a_temporary_queue(broker, other):
    """A temporary queue has an unguessable name, another connection's receiver is
    refused with unauthorized-access (another user, the same user, admin), and
    anyone may still send replies to it."""
    with login(broker, "alice") as owner, login(broker, other) as intruder:
        mine = owner.create_receiver(None, dynamic=True)
        address = mine.link.remote_source.address
        assert re.fullmatch(r"queue://mqgate\.tmp\.[0-9a-f]{32}", address), address
        error = refused_attach(intruder, address)
        assert error.condition == UNAUTHORIZED, str(error)
        assert "belongs to another connection" in str(error)
        intruder.create_sender(address).send(Message(body="the reply"))
        [reply] = receive_all(mine, 1)
        assert reply.body == "the reply"


def test_stomp_cannot_subscribe_to_another_connections_temporary_queue(broker):
    """A STOMP SUBSCRIBE to another connection's temporary queue gets an ERROR, and
    a STOMP SEND to it reaches its owner."""
    with login(broker, "alice") as owner, clients() as open_client:
        mine = owner.create_receiver(None, dynamic=True)
        name = mine.link.remote_source.address.split("://")[1]
        bob = stomp_login(open_client, broker, "bob")
        bob.send(f"/queue/{name}", "from stomp")
        error = refused_subscribe(bob, f"/queue/{name}")
        assert error.headers["message"] == "access refused"
        assert "belongs to another connection" in error.body.decode()
        [reply] = receive_all(mine, 1)
        assert reply.body in ("from stomp", b"from stomp")


def test_a_reply_to_a_gone_temporary_queue_is_refused(broker):
    """Once its connection's receiver is gone, a temporary queue's address takes no
    more replies (not-found) and is not re-created as an ordinary queue that another
    user could read."""
    with login(broker, "alice") as owner:
        address = owner.create_receiver(None, dynamic=True).link.remote_source.address
    with login(broker, "bob") as conn:
        with pytest.raises(LinkDetached) as info:
            conn.create_sender(address)
        assert info.value.condition == "amqp:not-found", str(info.value)
        error = refused_attach(conn, address)
        assert error.condition == "amqp:not-found", str(error)


# -- durable subscriptions ----------------------------------------------------------------

@pytest.fixture
def durable():
    """A container id, a topic and a subscription name of this test's own:
    C{(container, topic address, subscription name)}."""
    return unique("app"), f"topic://{unique('rates')}", unique("rates-sub")


def subscribe_durable(conn, topic="topic://rates", name="rates-sub"):
    return conn.create_receiver(topic, name=name, options=DurableSubscription())


def publish(broker, *bodies, topic="topic://rates"):
    with login(broker, "admin") as conn:
        sender = conn.create_sender(topic)
        for body in bodies:
            sender.send(Message(body=body, durable=True))


def test_another_user_cannot_resume_or_delete_a_durable_subscription(broker, durable):
    """Bob reusing alice's container id and subscription name is refused with
    unauthorized-access and a description, also with another topic (which would
    replace it); alice then resumes it with every message kept."""
    app, topic, name = durable
    with login(broker, "alice", container_id=app) as conn:
        subscribe_durable(conn, topic, name).link.detach()
    publish(broker, "r1", "r2", topic=topic)
    with login(broker, "bob", container_id=app) as conn:
        error = refused_attach(conn, topic, name=name, options=DurableSubscription())
        assert error.condition == UNAUTHORIZED
        assert (f"durable subscription {name} of container {app} belongs to another"
                " user") in str(error)
        error = refused_attach(conn, f"topic://{unique('other')}", name=name,
                               options=DurableSubscription())
        assert error.condition == UNAUTHORIZED
    with login(broker, "alice", container_id=app) as conn:
        got = receive_all(subscribe_durable(conn, topic, name), 2)
        assert [m.body for m in got] == ["r1", "r2"]


def test_admin_resumes_and_deletes_another_users_durable_subscription(broker, durable):
    """A member of group admin may resume a user's durable subscription and delete
    it (detach with closed=true): the subscription is gone afterwards."""
    app, topic, name = durable
    with login(broker, "alice", container_id=app) as conn:
        subscribe_durable(conn, topic, name).link.detach()
    publish(broker, "r1", topic=topic)
    with login(broker, "admin", container_id=app) as conn:
        receiver = subscribe_durable(conn, topic, name)
        assert [m.body for m in receive_all(receiver, 1)] == ["r1"]
        receiver.close()    # closed=true: unsubscribe
    publish(broker, "r2", topic=topic)
    with login(broker, "alice", container_id=app) as conn:
        receiver = subscribe_durable(conn, topic, name)    # a new, empty subscription
        assert drain(conn, receiver) == []


def test_stomp_durable_subscription_belongs_to_its_user(broker):
    """Over STOMP, bob reusing alice's client-id and durable-subscription-name gets
    an ERROR, and alice resumes her subscription with its backlog."""
    durable = {"durable-subscription-name": unique("news-sub")}
    client_id = {"client-id": unique("sapp")}
    news = unique("news")
    with clients() as open_client:
        alice = stomp_login(open_client, broker, "alice", **client_id)
        sub_id = alice.subscribe(f"/topic/{news}", **durable)
        alice.frame("unsubscribe", sub_id)     # a durable subscription stays
        alice.disconnect()
    publish(broker, "n1", topic=f"topic://{news}")
    with clients() as open_client:
        bob = stomp_login(open_client, broker, "bob", **client_id)
        error = refused_subscribe(bob, f"/topic/{news}", **durable)
        assert error.headers["message"] == "access refused"
        assert "belongs to another user" in error.body.decode()
    with clients() as open_client:
        alice = stomp_login(open_client, broker, "alice", **client_id)
        alice.subscribe(f"/topic/{news}", **durable)
        alice.collector.wait_for_messages(1)
        assert [m.body for m in alice.messages] == [b"n1"]


@pytest.mark.parametrize("store", sorted(STORES))
def test_the_owner_survives_a_restart(restartable, store, request):
    """The owner is stored with the durable subscription: after a restart bob is
    still refused and alice resumes it with its persistent backlog."""
    defines = STORES[store]
    if store == "postgresql":
        defines = dict(defines, **{
            "mqgate.persist.jdbc.opendburl": request.getfixturevalue("pg_dsn")})
    broker = restartable(defines)
    with login(broker, "alice", container_id="app") as conn:
        subscribe_durable(conn).link.detach()
    publish(broker, "kept")
    assert broker.terminate() == 0
    broker = restartable(defines)
    with login(broker, "bob", container_id="app") as conn:
        error = refused_attach(conn, "topic://rates", name="rates-sub",
                               options=DurableSubscription())
        assert error.condition == UNAUTHORIZED
    with login(broker, "alice", container_id="app") as conn:
        receiver = subscribe_durable(conn)
        assert [m.body for m in receive_all(receiver, 1)] == ["kept"]
        assert drain(conn, receiver) == []
