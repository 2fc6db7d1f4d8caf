"""MQ Light subscriptions at the AMQP level, with python-qpid-proton (S8.3, S8.5).

Proton plays the MQ Light client's part on the wire (FACTS 3): receivers named and
addressed C{private:<pattern>} or C{share:<name>:<pattern>} with the expiry policy
C{link-detach} and a C{timeout}, senders named C{<topic>_<uuid>} to a bare topic. The
tests share one broker on the shipped configuration (each uses topics and client ids
of its own); the restart test has its own. The real Node client is tested in
tests/e2e/test_mqlight_node.py.
"""

import uuid

import pytest
from proton import Endpoint, Message, Terminus
from proton.reactor import AtMostOnce, LinkOption
from proton.utils import ConnectionClosed, LinkDetached

from tests.e2e.proton_client import drain, opened, receive_all


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker on the shipped configuration for the module's tests."""
    return module_broker_factory()


class Ttl(LinkOption):
    """The source (and target) of an MQ Light subscriber: expiry policy
    C{link-detach} and C{timeout} seconds, as the client always sends them."""

    def __init__(self, seconds):
        self.seconds = seconds

    def apply(self, link):
        for terminus in (link.source, link.target):
            terminus.expiry_policy = Terminus.EXPIRE_WITH_LINK
            terminus.timeout = self.seconds


def subscribe(conn, address, ttl=0):
    """A receiver named and addressed C{address}, as the MQ Light client makes it."""
    return conn.create_receiver(address, name=address, options=Ttl(ttl))


def publisher(conn, topic):
    """A sender to the bare C{topic}, named the MQ Light client's way."""
    return conn.create_sender(topic, name=f"{topic}_{uuid.uuid4()}")


def detach(conn, receiver):
    """Detach without closing (the client's unsubscribe that keeps the subscription
    for its time-to-live), and wait for the broker's answer."""
    link = receiver.link
    link.detach()
    # Proton's link state does not show a remote detach that is not a close; the
    # broker answers frames in order, so the attach of a later link is the proof.
    conn.create_sender(None, name=f"after-{link.name}").close()


def close(conn, receiver):
    """Detach with closed=true (the client's unsubscribe with ttl 0); the broker's
    answer must say closed too (the client refuses the unsubscribe otherwise)."""
    link = receiver.link
    link.close()
    conn.wait(lambda: link.state & Endpoint.REMOTE_CLOSED, msg=f"closing {link.name}")


def bodies(messages):
    return sorted(message.body for message in messages)


def test_private_wildcard_subscription_gets_what_matches(broker):
    """A private: subscription with + and # receives from a bare topic that a
    MQ Light-named sender publishes to (a topic, not the queue a bare name would be
    for another client); a topic the pattern does not match stays out."""
    with opened(broker, container_id="wild1") as conn:
        plus = subscribe(conn, "private:wild/+/goals")
        hash_ = subscribe(conn, "private:wild/#")
        publisher(conn, "wild/football/goals").send(Message(body="g1"))
        publisher(conn, "wild/football/cards").send(Message(body="c1"))
        publisher(conn, "wild").send(Message(body="w"))
        [goal] = receive_all(plus, 1)
        assert bodies(receive_all(hash_, 3)) == ["c1", "g1", "w"]
        assert drain(conn, plus) == []
    assert goal.body == "g1"


def test_a_plain_proton_sender_to_a_bare_name_still_makes_a_queue(broker):
    """Only MQ Light connections' bare targets are topics: on a connection that
    neither subscribes the MQ Light way nor names its senders so, a bare target keeps
    mqgate.destination.default_type's meaning (a queue)."""
    with opened(broker, container_id="mql-sub") as mql, \
            opened(broker, container_id="plain-client") as plain:
        sub = subscribe(mql, "private:plain/queue")
        plain.create_sender("plain/queue").send(Message(body="queued"))
        [got] = receive_all(plain.create_receiver("queue://plain/queue"), 1)
        assert drain(mql, sub) == []
    assert got.body == "queued"


def test_shared_subscription_splits_messages_among_subscribers(broker):
    """share:<name>:<pattern>: subscribers with different client ids split its
    messages, each message to exactly one of them."""
    with opened(broker, container_id="sharer1") as one, \
            opened(broker, container_id="sharer2") as two:
        first = one.create_receiver("share:split:split/+", name="share:split:split/+",
                                    credit=0, options=Ttl(0))
        second = two.create_receiver("share:split:split/+", name="share:split:split/+",
                                     credit=0, options=Ttl(0))
        first.link.flow(2)
        second.link.flow(2)
        sender = publisher(one, "split/a")
        for n in range(4):
            sender.send(Message(body=n))
        got_one = receive_all(first, 2)
        got_two = receive_all(second, 2)
    assert bodies(got_one + got_two) == [0, 1, 2, 3]


def test_subscription_with_a_ttl_keeps_messages_while_its_client_is_away(broker):
    """S8.3: detached (not closed) with a time-to-live, the subscription keeps what
    is published; the same client id resubscribing gets it all."""
    with opened(broker, container_id="keeper") as conn:
        detach(conn, subscribe(conn, "private:keep/+", ttl=60))
    with opened(broker, container_id="pub-keep") as conn:
        sender = publisher(conn, "keep/x")
        for n in range(3):
            sender.send(Message(body=n))
    with opened(broker, container_id="keeper") as conn:
        receiver = subscribe(conn, "private:keep/+", ttl=60)
        assert bodies(receive_all(receiver, 3)) == [0, 1, 2]
        close(conn, receiver)


def test_ttl_zero_and_closed_detach_remove_the_subscription(broker):
    """S8.3: a subscription with a time-to-live of 0 goes when its subscriber
    detaches; one with a time-to-live goes at once when it is closed (closed=true,
    answered closed=true); what is published meanwhile is not kept for anybody."""
    with opened(broker, container_id="leaver") as conn:
        detach(conn, subscribe(conn, "private:leave/zero", ttl=0))
        close(conn, subscribe(conn, "private:leave/closed", ttl=60))
        sender = publisher(conn, "leave/zero")
        sender.send(Message(body="lost"))
        publisher(conn, "leave/closed").send(Message(body="lost"))
        assert drain(conn, subscribe(conn, "private:leave/zero")) == []
        assert drain(conn, subscribe(conn, "private:leave/closed")) == []


def test_a_private_subscription_is_its_client_ids_own(broker):
    """A private subscription belongs to its client id: another id subscribing to the
    same pattern gets a subscription of its own, and misses what came before."""
    with opened(broker, container_id="owner1") as conn:
        detach(conn, subscribe(conn, "private:own/t", ttl=60))
        publisher(conn, "own/t").send(Message(body="mine"))
    with opened(broker, container_id="owner2") as conn:
        assert drain(conn, subscribe(conn, "private:own/t")) == []
    with opened(broker, container_id="owner1") as conn:
        [got] = receive_all(subscribe(conn, "private:own/t"), 1)
    assert got.body == "mine"


def test_a_second_connection_with_the_client_id_replaces_the_first(broker):
    """S8.5: one connection per MQ Light client id: the first is closed with
    amqp:link:stolen (the client's ReplacedError) and the second resumes its
    subscription."""
    with opened(broker, container_id="replaced") as first:
        subscribe(first, "private:stolen/t", ttl=60)
        with opened(broker, container_id="replaced") as second:
            with pytest.raises(ConnectionClosed) as replaced:
                first.wait(lambda: False, msg="waiting to be replaced")
            assert replaced.value.connection.remote_condition.name == "amqp:link:stolen"
            receiver = subscribe(second, "private:stolen/t", ttl=60)
            publisher(second, "stolen/t").send(Message(body="to the new one"))
            [got] = receive_all(receiver, 1)
            close(second, receiver)
    assert got.body == "to the new one"


def test_other_clients_share_a_container_id_without_replacing(broker):
    """Clients that are not MQ Light's keep their connections when another opens
    with the same container-id (Proton's default ids, our benchmarks')."""
    with opened(broker, container_id="bench-presettled") as first, \
            opened(broker, container_id="bench-presettled") as second:
        first.create_sender("queue://twins").send(Message(body="1"))
        second.create_sender("queue://twins").send(Message(body="2"))
        assert bodies(receive_all(first.create_receiver("queue://twins"), 2)) == ["1", "2"]


def test_bad_subscription_address_is_refused_saying_the_form(broker):
    """A share: address without a pattern is refused with the form to write."""
    with opened(broker, container_id="badaddr") as conn:
        with pytest.raises(Exception) as refused:
            subscribe(conn, "share:nopattern")
    assert "share:<name>:<pattern>" in str(refused.value)


def test_persistent_messages_survive_a_restart_within_the_ttl(broker_factory, tmp_path):
    """S8.3, S8.4: a subscription with a time-to-live keeps the persistent messages
    published while its client was away across a broker restart (its time-to-live
    starts again then); non-persistent ones are lost with the broker's memory."""
    varhome = tmp_path / "varhome"
    broker = broker_factory(varhome=varhome)
    with opened(broker, container_id="restarter") as conn:
        detach(conn, subscribe(conn, "private:restart/#", ttl=600))
        sender = publisher(conn, "restart/a")
        sender.send(Message(body="kept", durable=True))
        sender.send(Message(body="gone"))
    assert broker.terminate() == 0
    broker = broker_factory(varhome=varhome)
    with opened(broker, container_id="restarter") as conn:
        receiver = subscribe(conn, "private:restart/#", ttl=600)
        [got] = receive_all(receiver, 1)
        assert drain(conn, receiver) == []
    assert got.body == "kept"


class MaxMessageSize(LinkOption):
    """A receiver advertising the MQ Light client's max-message-size of 10,000."""

    def apply(self, link):
        link.max_message_size = 10000


def test_qos_round_trips_and_an_advisory_max_message_size(broker):
    """S8.1: qos 0 pre-settled both ways; qos 1 settled by the broker (Proton's
    blocking send returns only once the broker settled it, Accepted); a message over
    the subscriber's advertised max-message-size of 10,000 bytes still reaches it
    (FACTS 3.3: advisory for this client)."""
    big = "x" * 50_000
    with opened(broker, container_id="qos") as conn:
        at_most_once = conn.create_receiver(
            "private:qos/zero", name="private:qos/zero", options=[Ttl(0), AtMostOnce()])
        at_least_once = conn.create_receiver(
            "private:qos/one", name="private:qos/one", options=[Ttl(0), MaxMessageSize()])
        zero = conn.create_sender("qos/zero", name=f"qos/zero_{uuid.uuid4()}",
                                  options=AtMostOnce())
        zero.send(Message(body="fire and forget"))
        one = publisher(conn, "qos/one")
        delivery = one.send(Message(body=big))
        assert delivery.remote_state == delivery.ACCEPTED and delivery.settled
        [got_zero] = receive_all(at_most_once, 1, settle=None)
        [got_one] = receive_all(at_least_once, 1)
    assert got_zero.body == "fire and forget" and got_one.body == big


def test_a_second_subscriber_to_a_private_subscription_is_refused_as_not_allowed(broker):
    """FACTS 3.3: the refusal has a condition the client maps (amqp:not-allowed, its
    NotPermittedError), and says what to do. (Ids with a dash are not the client's,
    so the second connection does not replace the first.)"""
    with opened(broker, container_id="dup-id") as first, \
            opened(broker, container_id="dup-id") as second:
        subscribe(first, "private:dup/t")
        with pytest.raises(LinkDetached) as refused:
            subscribe(second, "private:dup/t")
        assert first.conn.state & Endpoint.LOCAL_ACTIVE
    # Proton keeps the condition's name, and its text in the message.
    assert refused.value.condition == "amqp:not-allowed"
    assert "unsubscribe first" in str(refused.value)
