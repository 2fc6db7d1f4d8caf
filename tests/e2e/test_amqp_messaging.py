"""Messaging through the real broker with python-qpid-proton clients (S2.1, S8.1, S10.1).

The tests share one ``twistd -n mqgate`` (the module's C{broker} below; each test uses
addresses no other uses, and leaves its queues empty) and talk to it over loopback with Proton's BlockingConnection or an event-driven Container
(tests/e2e/proton_client.py). Checks for "nothing else arrived" use a drain flow, so no
test waits for something not to happen.
"""

import os

import pytest
from proton import Delivery, Message
from proton.reactor import AtLeastOnce, AtMostOnce, DurableSubscription

from tests.e2e.proton_client import (
    Capabilities, Scenario, drain, fixed_credit_receiver, opened, receive_all,
    run_container, take)

#: One MiB: bigger than Proton's default max-frame-size (32 KiB) and than the broker's
#: default (1 MiB, once the frame and transfer headers are added): multi-frame both ways.
MIB = 1 << 20


def body_of(message):
    """The body as a comparable value: Proton hands binary bodies out as memoryviews."""
    body = message.body
    return bytes(body) if isinstance(body, memoryview) else body


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker on the shipped configuration for the module's tests."""
    return module_broker_factory()


# -- queues -------------------------------------------------------------------------------

BODIES = {
    "string": "grüße, mqgate",
    "binary": bytes(range(256)) * 4,
    "map": {"name": "widget", "count": 3, "price": 9.5, "tags": ["a", "b"], "ok": True},
    "list": [1, "two", 3.0, None, False, {"k": "v"}],
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_queue_round_trip_keeps_properties_and_body(broker, kind):
    """S2.1/S10.1: a message sent to a queue arrives with its properties and body intact."""
    sent = Message(
        id="msg-1", correlation_id="corr-1", subject="greeting", reply_to="queue://replies",
        content_type="application/x-test", group_id="group-7", durable=True, priority=7,
        properties={"colour": "blue", "size": 42, "ratio": 0.25, "flag": True},
        annotations={"x-opt-origin": "e2e"}, body=BODIES[kind])
    with opened(broker) as conn:
        conn.create_sender(f"queue://round-trip-{kind}").send(sent)
        receiver = conn.create_receiver(f"queue://round-trip-{kind}")
        [got] = receive_all(receiver, 1)
    assert body_of(got) == BODIES[kind]
    assert (got.id, got.correlation_id, got.subject, got.reply_to, got.group_id) == \
        ("msg-1", "corr-1", "greeting", "queue://replies", "group-7")
    assert got.content_type == "application/x-test"
    assert got.durable is True and got.priority == 7
    assert got.properties == {"colour": "blue", "size": 42, "ratio": 0.25, "flag": True}
    assert got.annotations.get("x-opt-origin") == "e2e"
    assert got.delivery_count == 0


def test_bare_name_is_a_queue_shared_by_competing_consumers(broker):
    """S2.1: a bare address is a queue: two consumers share its messages, none twice."""
    with opened(broker) as conn:
        sender = conn.create_sender("shared")
        # A fixed credit of 2 each: 4 messages must be split 2 and 2, each exactly once.
        receivers = [fixed_credit_receiver(conn, "shared", name, 2)
                     for name in ("first", "second")]
        for i in range(4):
            sender.send(Message(id=f"m{i}", body=i))
        arrived = take(conn, receivers, 4)
    assert sorted(message.id for _, message in arrived) == ["m0", "m1", "m2", "m3"]
    assert sorted(name for name, _ in arrived) == ["first", "first", "second", "second"]


@pytest.mark.parametrize("address", ["queue://waiting", "topic://waiting"])
def test_waiting_consumer_gets_a_message_sent_on_another_connection(broker, address):
    """S2.1: a consumer already holding credit gets a message another connection sends."""
    address += "-" + address.split(":")[0]
    with opened(broker) as consumer, opened(broker) as producer:
        # Credit granted once, before the message exists; the consumer then sends
        # nothing more, so only the broker's own push can bring the message.
        receiver = fixed_credit_receiver(consumer, address, "waiting", 1)
        producer.create_sender(address).send(Message(id="cross", body="from afar"))
        [(_, got)] = take(consumer, [receiver], 1)
    assert (got.id, got.body) == ("cross", "from afar")


# -- topics -------------------------------------------------------------------------------

def test_topic_delivers_every_message_to_each_subscriber(broker):
    """S2.1: each subscriber of a topic gets every message published after it subscribed."""
    with opened(broker) as conn:
        subscribers = [conn.create_receiver("topic://news", name=f"sub-{i}", credit=10)
                       for i in range(2)]
        sender = conn.create_sender("topic://news")
        for i in range(5):
            sender.send(Message(id=f"n{i}", body=f"headline {i}"))
        for subscriber in subscribers:
            got = receive_all(subscriber, 5)
            assert [m.id for m in got] == [f"n{i}" for i in range(5)]
            assert [m.body for m in got] == [f"headline {i}" for i in range(5)]


def test_topic_wildcards_match_one_or_any_levels(broker):
    """S2.1: ``topic://a.*`` matches one more level, ``topic://a.#`` any number of levels."""
    with opened(broker) as conn:
        one = conn.create_receiver("topic://a.*", name="one-level")
        any_ = conn.create_receiver("topic://a.#", name="any-level")
        for name in ("a.b", "a.b.c", "b.a", "ab.c"):
            conn.create_sender(f"topic://{name}", name=f"to-{name}").send(
                Message(id=name, body=name))
        assert sorted(m.id for m in drain(conn, one)) == ["a.b"]
        assert sorted(m.id for m in drain(conn, any_)) == ["a.b", "a.b.c"]


class _CapabilityTopic(Scenario):
    """Two receivers and a sender on the bare name C{news} with the C{topic} capability."""

    timeout = 20.0

    def __init__(self, broker, count):
        super().__init__(prefetch=10)
        self.broker = broker
        self.count = count
        self.received = {"left": [], "right": []}
        self.opened = 0
        self.sent = 0

    def begin(self, container):
        conn = self.connect_to(container, self.broker)
        for name in self.received:
            container.create_receiver(conn, "news", name=name,
                                      options=Capabilities("topic"))
        self.progress = "attaching"

    def on_link_opened(self, event):
        if event.receiver is None:
            return
        self.opened += 1
        if self.opened == len(self.received):
            # Publish only once both subscriptions exist: a topic keeps nothing for
            # subscribers that come later.
            event.container.create_sender(event.connection, "news", name="publisher",
                                          options=Capabilities("topic"))

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.count:
            event.sender.send(Message(id=f"c{self.sent}", body=self.sent))
            self.sent += 1
        self.progress = f"sent {self.sent}"

    def on_message(self, event):
        self.received[event.receiver.name].append(event.message.id)
        if all(len(ids) == self.count for ids in self.received.values()):
            self.finish()


def test_topic_capability_makes_a_bare_name_a_topic(broker):
    """S2.1: a bare address with the ``topic`` terminus capability resolves to a topic."""
    scenario = run_container(_CapabilityTopic(broker, 5))
    assert scenario.errors == []
    expected = [f"c{i}" for i in range(5)]
    assert scenario.received == {"left": expected, "right": expected}


@pytest.mark.parametrize("address,options", [
    ("plain-queue", None),
    ("news", Capabilities("topic")),
])
def test_attach_reply_keeps_the_requested_address(broker, address, options):
    """S2.1/S8.6: a bare address is echoed in the attach reply, which Proton requires."""
    # Proton's BlockingReceiver refuses a link whose source comes back with another
    # address than it asked for ("source does not match").
    with opened(broker) as conn:
        receiver = conn.create_receiver(address, name="echo", options=options)
        assert receiver.link.remote_source.address == address


# -- settlement modes ---------------------------------------------------------------------

MODES = {"at-most-once": AtMostOnce, "at-least-once": AtLeastOnce}


@pytest.mark.parametrize("sender_mode", sorted(MODES))
@pytest.mark.parametrize("receiver_mode", sorted(MODES))
def test_settlement_modes(broker, sender_mode, receiver_mode):
    """S8.1: pre-settled and unsettled links on each end; only unsettled ones redeliver."""
    with opened(broker) as conn:
        queue = f"queue://qos-{sender_mode}-{receiver_mode}"
        sender = conn.create_sender(queue, options=MODES[sender_mode]())
        expected_mode = 1 if sender_mode == "at-most-once" else 0
        assert sender.link.remote_snd_settle_mode == expected_mode
        deliveries = [sender.send(Message(id=f"q{i}", body=i)) for i in range(3)]
        if sender_mode == "at-least-once":
            # The broker settled each transfer with accepted once it had the message.
            assert [d.remote_state for d in deliveries] == [Delivery.ACCEPTED] * 3
        receiver = conn.create_receiver(queue, options=MODES[receiver_mode]())
        got = receive_all(receiver, 3, settle=None)
        assert [m.id for m in got] == ["q0", "q1", "q2"]
        # Go away without settling anything.
    with opened(broker) as conn:
        again = drain(conn, conn.create_receiver(queue))
    if receiver_mode == "at-most-once":
        assert again == []  # the broker forgot them when it sent them
    else:
        assert [(m.id, m.delivery_count) for m in again] == \
            [("q0", 1), ("q1", 1), ("q2", 1)]


# -- large messages -----------------------------------------------------------------------

@pytest.mark.parametrize("max_frame", [None, 4096])
def test_one_mebibyte_message_crosses_in_many_frames(broker_factory, max_frame):
    """S10.1: a 1 MiB body is split into frames both ways and arrives byte for byte."""
    defines = {} if max_frame is None else {"mqgate.amqp.max_frame_size": str(max_frame)}
    broker = broker_factory(defines)
    payload = os.urandom(MIB)
    with opened(broker, timeout=30) as conn:
        assert conn.conn.transport.remote_max_frame_size == (max_frame or MIB)
        # Proton's own max-frame-size (32 KiB by default) splits it on the way out.
        assert conn.conn.transport.max_frame_size < MIB
        conn.create_sender("queue://big").send(Message(id="big", body=payload))
        [got] = receive_all(conn.create_receiver("queue://big"), 1, timeout=30)
    assert got.id == "big"
    assert len(body_of(got)) == MIB
    assert body_of(got) == payload


# -- request / reply ----------------------------------------------------------------------

def test_request_reply_through_a_dynamic_queue(broker):
    """S2.1: a reply sent by anonymous relay to a dynamic queue reaches the requester."""
    with opened(broker) as requester, opened(broker) as responder:
        replies = requester.create_receiver(None, dynamic=True, name="replies")
        reply_to = replies.link.remote_source.address
        assert reply_to, "the attach reply must carry the dynamic queue's address"
        requests = responder.create_receiver("queue://requests")
        relay = responder.create_sender(None, name="relay")  # null target: anonymous relay

        requester.create_sender("queue://requests").send(
            Message(id="req-1", reply_to=reply_to, body="ping"))
        [request] = receive_all(requests, 1)
        relay.send(Message(address=request.reply_to, correlation_id=request.id,
                           body=request.body.replace("ping", "pong")))
        [reply] = receive_all(replies, 1)
    assert reply.correlation_id == "req-1"
    assert reply.body == "pong"


# -- durable subscriptions ----------------------------------------------------------------

@pytest.mark.parametrize("leave", ["detach", "disconnect"])
def test_durable_subscription_keeps_backlog_while_away(broker, leave):
    """S2.1: a durable subscription collects messages while its subscriber is away."""
    identity = {"container_id": f"durable-client-{leave}"}
    with opened(broker, **identity) as conn:
        subscription = conn.create_receiver("topic://prices", name="prices-sub",
                                            options=DurableSubscription())
        if leave == "detach":
            # Detach without closing (closed=false): a closing detach would end the
            # subscription. Then the connection closes, which detaches nothing more.
            subscription.link.detach()
    with opened(broker) as publisher:
        sender = publisher.create_sender("topic://prices")
        for i in range(5):
            sender.send(Message(id=f"p{i}", body=100 + i))
    with opened(broker, **identity) as conn:
        subscription = conn.create_receiver("topic://prices", name="prices-sub",
                                            options=DurableSubscription())
        got = receive_all(subscription, 5)
    assert [m.id for m in got] == [f"p{i}" for i in range(5)]
    assert [m.body for m in got] == [100 + i for i in range(5)]


# -- volume -------------------------------------------------------------------------------

class _Stream(Scenario):
    """One connection producing C{count} numbered messages and consuming them back."""

    timeout = 60.0

    def __init__(self, broker, count):
        super().__init__(prefetch=200)
        self.broker = broker
        self.count = count
        self.sent = 0
        self.accepted = 0
        self.received = []

    def begin(self, container):
        conn = self.connect_to(container, self.broker)
        container.create_receiver(conn, "queue://stream", name="stream-in")
        container.create_sender(conn, "queue://stream", name="stream-out")

    def on_sendable(self, event):
        sender = event.sender
        while sender.credit and self.sent < self.count:
            sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        self._check()

    def on_message(self, event):
        self.received.append(event.message.body)
        self._check()

    def _check(self):
        self.progress = f"sent {self.sent}, accepted {self.accepted}, " \
                        f"received {len(self.received)}"
        if len(self.received) >= self.count and self.accepted >= self.count:
            self.finish()


def test_ten_thousand_messages_through_one_queue_in_order(broker):
    """S2.1/S10.1: 10,000 messages sent and consumed at once all arrive, in order."""
    count = 10_000
    scenario = run_container(_Stream(broker, count))
    assert scenario.errors == []
    assert scenario.accepted == count
    assert scenario.received == list(range(count))
