"""Queues: round trip, competing consumers, credit, priority, expiry (S2.1, S2.9, S8.1)."""

from mqgate.core import BrokerMessage

from tests.core import consume, make_broker, send


def test_queue_round_trip():
    """S2.1: a message sent to a queue reaches its consumer and leaves on accept."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"hello")
    assert target.payloads == [b"hello"]
    delivery = target.deliveries[0]
    assert delivery.consumer is consumer and delivery.delivery_count == 0
    assert not delivery.redelivered
    assert consumer.unsettled == 1
    consumer.settle(delivery)
    queue = broker.queue("q")
    assert (consumer.unsettled, queue.held, queue.messages_out) == (0, 0, 1)


def test_backlog_delivered_when_credit_arrives():
    """S2.1: messages sent before any credit wait in order and flow once credit comes."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q")
    send(broker, "queue://q", b"1", b"2", b"3")
    assert target.payloads == [] and broker.queue("q").depth == 3
    consumer.set_credit(10)
    assert target.payloads == [b"1", b"2", b"3"]


def test_competing_consumers_round_robin():
    """S2.1: competing consumers with credit are served in turn."""
    broker, _ = make_broker()
    targets = [consume(broker, "queue://q", credit=10)[1] for _ in range(3)]
    send(broker, "queue://q", *[b"%d" % i for i in range(6)])
    assert [t.payloads for t in targets] == [[b"0", b"3"], [b"1", b"4"], [b"2", b"5"]]


def test_round_robin_from_backlog():
    """S2.1: a backlog (here: a closed consumer's requeued deliveries) is shared in
    turn among the consumers that have credit."""
    broker, _ = make_broker()
    first, _ = consume(broker, "queue://q", credit=4)
    send(broker, "queue://q", *[b"%d" % i for i in range(4)])
    (a, ta), (b, tb) = consume(broker, "queue://q", credit=10), consume(broker, "queue://q")
    b.set_credit(10)
    first.close()
    assert ta.payloads == [b"0", b"2"] and tb.payloads == [b"1", b"3"]


def test_consumer_without_credit_is_skipped():
    """S2.1: a competing consumer out of credit receives nothing; the others do."""
    broker, _ = make_broker()
    a, ta = consume(broker, "queue://q", credit=1)
    b, tb = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1", b"2", b"3")
    assert ta.payloads == [b"1"] and tb.payloads == [b"2", b"3"]


def test_credit_respected_exactly():
    """S8.1: a consumer never gets more deliveries than its credit."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=3)
    send(broker, "queue://q", *[b"%d" % i for i in range(5)])
    assert len(target.deliveries) == 3 and consumer.credit == 0
    assert broker.queue("q").depth == 2


def test_set_credit_replaces():
    """S8.1: set_credit replaces the current credit instead of adding to it."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=5)
    consumer.set_credit(2)
    assert consumer.credit == 2
    send(broker, "queue://q", b"1", b"2", b"3")
    assert len(target.deliveries) == 2 and consumer.credit == 0
    consumer.set_credit(1)
    assert target.payloads == [b"1", b"2", b"3"]


def test_drain_returns_unused_credit():
    """S8.1: drain delivers what is available, then gives up and returns the rest."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q")
    send(broker, "queue://q", b"1", b"2")
    consumer.set_credit(5)
    assert consumer.drain() == 3
    assert consumer.credit == 0 and len(target.deliveries) == 2
    send(broker, "queue://q", b"3")
    assert len(target.deliveries) == 2


def test_priority_order():
    """S2.9: higher priority is delivered first, FIFO within one priority."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    for payload, priority in [(b"a", 4), (b"b", 9), (b"c", 0), (b"d", 9), (b"e", 4)]:
        producer.send(BrokerMessage(payload, priority=priority))
    consumer, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"b", b"d", b"a", b"e", b"c"]


def test_priority_after_partial_consumption():
    """S2.9: a higher-priority message arriving later overtakes the waiting ones."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    for payload in (b"a", b"b", b"c"):
        producer.send(BrokerMessage(payload, priority=1))
    consumer, target = consume(broker, "queue://q", credit=1)
    producer.send(BrokerMessage(b"urgent", priority=8))
    consumer.set_credit(10)
    assert target.payloads == [b"a", b"urgent", b"b", b"c"]


def test_expired_messages_dropped_at_dispatch():
    """S2.9: a message whose expiry has passed is dropped, counted, when dispatched."""
    broker, clock = make_broker()
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"short", expiry=5))
    producer.send(BrokerMessage(b"long", expiry=50))
    producer.send(BrokerMessage(b"forever"))
    clock.advance(10)
    consumer, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"long", b"forever"]
    assert broker.queue("q").expired == 1
    assert broker.stats["expired"] == 1


def test_expired_on_fast_path():
    """S2.9: an already expired message sent to a waiting consumer is not delivered."""
    broker, clock = make_broker()
    clock.advance(100)
    consumer, target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"stale", expiry=99)
    send(broker, "queue://q", b"fresh", expiry=101)
    assert target.payloads == [b"fresh"] and consumer.credit == 9


def test_seq_assigned_in_arrival_order():
    """S2.1: the broker numbers messages in arrival order when first enqueued."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"1", b"2")
    first, second = (d.message.seq for d in target.deliveries)
    assert first < second


def test_counters():
    """S2.1: a queue counts messages in, out, delivered and held."""
    broker, _ = make_broker()
    consumer, target = consume(broker, "queue://q", credit=2)
    send(broker, "queue://q", b"1", b"2", b"3")
    consumer.settle(target.deliveries[0])
    stats = broker.queue("q").stats()
    assert stats["messages_in"] == 3 and stats["messages_out"] == 1
    assert stats["delivered"] == 2 and stats["held"] == 2 and stats["depth"] == 1
    assert broker.stats["published"] == 3 and broker.stats["acknowledged"] == 1
