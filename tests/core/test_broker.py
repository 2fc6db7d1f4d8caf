"""Broker-level behaviour: auto-creation, anonymous producers, temporary destinations
(S2.1, S2.5)."""

import pytest

from mqgate.core import AddressError, BrokerMessage, CoreConfig, NotFound
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import ConfigError

from tests.core import consume, make_broker, send


def test_autocreate_on_first_use():
    """S2.5: naming an unknown destination creates it by default."""
    broker, _ = make_broker()
    broker.open_producer("queue://q")
    consume(broker, "topic://t")
    assert broker.queues() == ["q"] and broker.topics() == ["t"]


@pytest.mark.parametrize("address, config", [
    ("queue://q", {"autocreate_queue": False}),
    ("topic://t", {"autocreate_topic": False}),
])
def test_autocreate_disabled_not_found(address, config):
    """S2.5: with auto-creation disabled, an attach to an unknown destination fails
    with amqp:not-found, for producers and consumers alike."""
    broker, _ = make_broker(**config)
    with pytest.raises(NotFound) as caught:
        broker.open_producer(address)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    with pytest.raises(NotFound):
        consume(broker, address)
    assert broker.queues() == [] and broker.topics() == []


def test_autocreate_disabled_existing_destination_works():
    """S2.5: auto-creation settings do not affect destinations created explicitly."""
    broker, _ = make_broker(autocreate_queue=False, autocreate_topic=False)
    broker.create_queue("q")
    broker.create_topic("t")
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"1")
    subscriber, subscribed = consume(broker, "topic://t", credit=1)
    send(broker, "topic://t", b"2")
    assert target.payloads == [b"1"] and subscribed.payloads == [b"2"]
    assert broker.create_queue("q") is broker.queue("q")


def test_bare_address_uses_default_type():
    """S2.1: a bare name resolves to the configured default kind."""
    broker, _ = make_broker(default_type="topic")
    producer = broker.open_producer("news")
    assert producer.address == "topic://news"
    assert broker.open_producer("orders", capabilities=["queue"]).address == "queue://orders"


def test_bad_default_type_is_config_error():
    """S2.1: the default type is queue or topic; anything else names the key."""
    with pytest.raises(ConfigError) as caught:
        CoreConfig(default_type="exchange")
    assert caught.value.key == "default_type"


def test_anonymous_producer_routes_by_to():
    """S2.1: an anonymous producer's messages go where their 'to' address says."""
    broker, _ = make_broker()
    queue_consumer, queue_target = consume(broker, "queue://q", credit=10)
    topic_consumer, topic_target = consume(broker, "topic://t", credit=10)
    producer = broker.open_producer(None)
    assert producer.address is None
    producer.send(BrokerMessage(b"1", to="queue://q"))
    producer.send(BrokerMessage(b"2", to="topic://t"))
    producer.send(BrokerMessage(b"3", to="q"))
    assert queue_target.payloads == [b"1", b"3"] and topic_target.payloads == [b"2"]


def test_anonymous_producer_unknown_to_not_found():
    """S2.5: an anonymous producer's message to an unknown destination, with
    auto-creation disabled, is refused with amqp:not-found."""
    broker, _ = make_broker(autocreate_queue=False)
    producer = broker.open_producer(None)
    with pytest.raises(NotFound):
        producer.send(BrokerMessage(b"1", to="queue://nowhere"))
    with pytest.raises(AddressError):
        producer.send(BrokerMessage(b"1"))


def test_closed_producer_refuses_to_send():
    """S2.1: sending on a closed producer is a protocol error."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    producer.close()
    with pytest.raises(CoreError):
        producer.send(BrokerMessage(b"1"))


def test_dynamic_queue():
    """S2.1: a dynamic attach makes a uniquely named temporary queue that receives what
    is sent to its address and is deleted when its consumer closes."""
    broker, _ = make_broker()
    first, target = consume(broker, None, credit=10, dynamic=True)
    second, _ = consume(broker, None, dynamic=True)
    assert first.address.startswith("queue://mqgate.tmp.")
    assert first.address != second.address
    send(broker, first.address, b"reply")
    anonymous = broker.open_producer(None)
    anonymous.send(BrokerMessage(b"via-to", to=first.address))
    assert target.payloads == [b"reply", b"via-to"]
    producer = broker.open_producer(first.address)
    first.close()
    assert broker.queues() == [second.address.split("://")[1]]
    with pytest.raises(NotFound):
        producer.send(BrokerMessage(b"late"))


def test_dynamic_temporary_topic():
    """S2.1: a dynamic attach with the temporary-topic capability makes a temporary
    topic, subscribed by its creator, deleted when the creator closes."""
    broker, _ = make_broker()
    consumer, target = consume(broker, None, credit=10, dynamic=True,
                               capabilities=["temporary-topic"])
    assert consumer.address.startswith("topic://mqgate.tmp.")
    send(broker, consumer.address, b"1")
    assert target.payloads == [b"1"]
    consumer.close()
    assert broker.topics() == [] and broker.subscriptions() == []


def test_temporary_name_skips_existing_destination(monkeypatch):
    """S2.1: a temporary name never collides with an existing destination."""
    tokens = iter(["taken", "free"])
    monkeypatch.setattr("mqgate.core.broker.secrets.token_hex", lambda n: next(tokens))
    broker, _ = make_broker()
    broker.create_queue("mqgate.tmp.taken")
    consumer, _ = consume(broker, None, dynamic=True)
    assert consumer.address == "queue://mqgate.tmp.free"


def test_unknown_queue_lookup_not_found():
    """S2.1: introspecting a destination that does not exist raises not-found."""
    broker, _ = make_broker()
    with pytest.raises(NotFound):
        broker.queue("nope")
    with pytest.raises(NotFound):
        broker.topic("nope")


def test_broker_totals_survive_deletion():
    """S2.1: broker totals keep counting messages of destinations since deleted."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "topic://t", credit=10)
    send(broker, "topic://t", b"1", b"2")
    target.settle_all()
    consumer.close()
    stats = broker.stats
    assert stats["published"] == 2 and stats["acknowledged"] == 2
    assert stats["subscriptions"] == 0 and stats["held"] == 0
