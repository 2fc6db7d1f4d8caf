"""Topics and subscriptions: fan-out, wildcards, durable subscriptions (S2.1, S8.3)."""

import pytest

from mqgate.core import BrokerMessage, NotAllowed, NotFound
from mqgate.core.errors import ErrorKind

from tests.core import consume, make_broker, send


def test_fan_out_to_every_subscription():
    """S2.1: every subscription of a topic gets each message."""
    broker, _ = make_broker()
    targets = [consume(broker, "topic://news", credit=10)[1] for _ in range(3)]
    send(broker, "topic://news", b"1", b"2")
    assert all(t.payloads == [b"1", b"2"] for t in targets)
    assert broker.topic("news").messages_out == 6


def test_fan_out_shares_message_and_counts_per_delivery():
    """S2.1: subscriptions share one message object; a redelivery on one subscription
    does not change the delivery count seen on another."""
    broker, _ = make_broker()
    a, ta = consume(broker, "topic://news", credit=10)
    b, tb = consume(broker, "topic://news", credit=10)
    send(broker, "topic://news", b"1")
    assert ta.deliveries[0].message is tb.deliveries[0].message
    a.settle(ta.deliveries[0], "modified", delivery_failed=True)
    assert ta.deliveries[1].delivery_count == 1
    assert tb.deliveries[0].delivery_count == 0
    assert ta.deliveries[0].message.delivery_count == 0


@pytest.mark.parametrize("pattern, receives", [
    ("topic://prices.*", [b"prices.eur", b"prices.usd"]),
    ("topic://prices.#", [b"prices", b"prices.eur", b"prices.usd", b"prices.eur.spot"]),
    ("topic://*.eur", [b"prices.eur"]),
    ("topic://#", [b"prices", b"prices.eur", b"prices.usd", b"prices.eur.spot",
                   b"other"]),
])
def test_wildcard_subscriptions(pattern, receives):
    """S2.1: '*' subscribes to one level below, '#' to any number of levels."""
    broker, _ = make_broker()
    consumer, target = consume(broker, pattern, credit=100)
    for topic in ("prices", "prices.eur", "prices.usd", "prices.eur.spot", "other"):
        send(broker, "topic://" + topic, topic.encode())
    assert target.payloads == receives


def test_wildcard_subscription_sees_topics_created_later():
    """S2.1: a pattern subscription matches topics that did not exist when it was made."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "topic://a.*", credit=10)
    assert broker.topics() == []
    send(broker, "topic://a.new", b"x")
    assert target.payloads == [b"x"]


def test_topic_without_subscription_drops():
    """S2.1: a message published on a topic nobody subscribes to is dropped, counted."""
    broker, _ = make_broker()
    send(broker, "topic://empty", b"1", b"2")
    consumer, target = consume(broker, "topic://empty", credit=10)
    assert target.payloads == []
    assert broker.topic("empty").dropped == 2
    assert broker.stats["dropped"] == 2


def test_non_durable_subscription_deleted_on_close():
    """S2.1: a non-durable subscription and its backlog go away with its consumer."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "topic://t")
    send(broker, "topic://t", b"1")
    assert len(broker.subscriptions()) == 1
    consumer.close()
    assert broker.subscriptions() == []
    send(broker, "topic://t", b"2")
    assert broker.topic("t").dropped == 1


def test_durable_subscription_keeps_backlog_while_detached():
    """S2.1, S8.3: a durable subscription accumulates messages while its subscriber is
    away and resumes with the backlog on reattach."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "topic://t", credit=10,
                               durable_name="sub", container_id="client-1")
    send(broker, "topic://t", b"1")
    target.settle_all()
    consumer.close()
    send(broker, "topic://t", b"2", b"3")
    assert broker.subscription("client-1", "sub").depth == 2
    again, target2 = consume(broker, "topic://t", credit=10,
                             durable_name="sub", container_id="client-1")
    assert target2.payloads == [b"2", b"3"]


def test_durable_unsettled_redelivered_on_reattach():
    """S8.1: an unsettled delivery on a durable subscription comes back, redelivered,
    when the subscriber reattaches."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", credit=10,
                          durable_name="sub", container_id="c")
    send(broker, "topic://t", b"1")
    consumer.close()
    again, target = consume(broker, "topic://t", credit=10,
                            durable_name="sub", container_id="c")
    assert target.payloads == [b"1"] and target.deliveries[0].redelivered


def test_second_attach_to_active_durable_subscription_refused():
    """S2.1: a durable subscription has at most one consumer: a second attach with the
    same container id and name is refused with amqp:not-allowed."""
    broker, _ = make_broker()
    consume(broker, "topic://t", durable_name="sub", container_id="c")
    with pytest.raises(NotAllowed) as caught:
        consume(broker, "topic://t", durable_name="sub", container_id="c")
    assert caught.value.kind is ErrorKind.NOT_ALLOWED


def test_same_durable_name_other_container_is_separate():
    """S2.1: durable subscriptions are identified by container id and name together."""
    broker, _ = make_broker()
    consume(broker, "topic://t", durable_name="sub", container_id="a")
    consume(broker, "topic://t", durable_name="sub", container_id="b")
    assert len(broker.subscriptions()) == 2


def test_close_with_remove_deletes_durable_subscription():
    """S8.3: detach with closed=true (remove=True) deletes a durable subscription."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", durable_name="sub", container_id="c")
    consumer.close(remove=True)
    with pytest.raises(NotFound):
        broker.subscription("c", "sub")


def test_destroy_durable():
    """S2.1: an inactive durable subscription can be destroyed; an active or unknown
    one cannot."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://t", durable_name="sub", container_id="c")
    with pytest.raises(NotAllowed):
        broker.destroy_durable("c", "sub")
    consumer.close()
    send(broker, "topic://t", b"1")
    broker.destroy_durable("c", "sub")
    assert broker.subscriptions() == []
    with pytest.raises(NotFound):
        broker.destroy_durable("c", "sub")
    assert broker.stats["dropped"] == 1


def test_durable_resubscribe_to_other_topic_replaces():
    """S2.1: reattaching a durable name to another topic replaces the subscription."""
    broker, _ = make_broker()
    consumer, _ = consume(broker, "topic://a", durable_name="sub", container_id="c")
    consumer.close()
    send(broker, "topic://a", b"old")
    again, target = consume(broker, "topic://b", credit=10,
                            durable_name="sub", container_id="c")
    send(broker, "topic://b", b"new")
    assert target.payloads == [b"new"]


def test_subscriber_closing_during_fan_out():
    """S2.1: a subscriber that closes inside deliver does not disturb the fan-out to
    the other subscriptions."""
    broker, _ = make_broker()
    closer, closing = consume(broker, "topic://t", credit=10)
    closing.on_deliver = lambda target, delivery: target.consumer.close()
    others = [consume(broker, "topic://t", credit=10)[1] for _ in range(2)]
    broker.open_producer("topic://t").send(BrokerMessage(b"1"))
    assert closing.payloads == [b"1"]
    assert [t.payloads for t in others] == [[b"1"], [b"1"]]
    assert len(broker.subscriptions()) == 2
