"""Expiry (S2.2, S2.9): the reaper, expiry at delivery, and the absolute expiry kept
across a restart."""

from mqgate.core import BrokerMessage
from mqgate.core.expiry import ExpiryReaper

from tests.core import consume, make_broker, send
from tests.core.test_persistence import held, restart, stored_broker


def test_the_reaper_removes_expired_messages_every_interval_to_the_dmq():
    """With nobody consuming, expired messages leave at the next tick (not before),
    to the DMQ; the others stay."""
    broker, clock = make_broker()
    reaper = ExpiryReaper(broker, clock, 60)
    reaper.start()
    send(broker, "queue://q", b"short", expiry=30)
    send(broker, "queue://q", b"long", expiry=500)
    send(broker, "queue://q", b"never")
    clock.advance(59)
    assert broker.queue("q").depth == 3
    clock.advance(1)
    queue = broker.queue("q")
    assert (queue.depth, queue.expired, broker.dmq.held, reaper.reaped) == (2, 1, 1, 1)
    clock.advance(480)          # t=540: the long one has expired since t=500
    assert queue.depth == 1 and broker.dmq.held == 2
    reaper.stop()
    assert not clock.getDelayedCalls()


def test_an_expired_message_is_never_delivered_even_between_ticks():
    """A message past its expiry when a consumer asks is not delivered (without any
    reaper); the live one behind it is."""
    broker, clock = make_broker()
    send(broker, "queue://q", b"old", expiry=5)
    send(broker, "queue://q", b"new", expiry=50)
    clock.advance(10)
    _, target = consume(broker, "queue://q", credit=5)
    assert target.payloads == [b"new"]


def test_the_reaper_looks_only_at_queues_whose_earliest_expiry_passed():
    """A tick with nothing due removes nothing and leaves every queue as it was; the
    expiry index stays bounded by what waits although many messages came and went."""
    broker, clock = make_broker()
    _, target = consume(broker, "queue://busy", credit=0)
    producer = broker.open_producer("queue://busy")
    for n in range(1000):
        producer.send(BrokerMessage(b"x", expiry=10_000))
        target.consumer.set_credit(1)      # each taken at once, settled
        target.settle_all()
    queue = broker.queue("busy")
    assert queue.depth == 0
    assert queue.reap(clock.seconds()) == 0
    assert queue.backlog.expiry_index_size <= 2 * queue.depth + 64


def test_priority_and_requeued_messages_expire_too():
    """Messages of every priority, and one given back (released) after a delivery,
    expire from the queue at their time."""
    broker, clock = make_broker()
    send(broker, "queue://q", b"p9", priority=9, expiry=10)
    send(broker, "queue://q", b"p0", priority=0, expiry=10)
    consumer, target = consume(broker, "queue://q", credit=1)
    consumer.settle(target.deliveries[0], "released")
    consumer.close()
    clock.advance(11)
    assert broker.queue("q").reap(clock.seconds()) == 2
    assert broker.queue("q").depth == 0 and broker.dmq.held == 2


def test_absolute_expiry_is_kept_across_a_restart():
    """A stored message keeps its absolute expiry in its record: after a restart it
    expires when it would have, not a ttl later."""
    broker, store, clock, _ = stored_broker()
    clock.advance(1000)
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True, expiry=1030))
    [(_, data, _)] = held(store, "queue://q")
    assert data.endswith(b"m") and data != b"m"      # the record carries the expiry
    again, _, summary = restart(store)
    [message] = again.queue("q").backlog.messages()
    assert message.expiry == 1030 and not summary.warnings


def test_a_record_without_expiry_is_read_as_before():
    """A message without expiry is stored as the glue's bytes alone (as older stores
    hold every message), and read back unchanged."""
    broker, store, _, _ = stored_broker()
    broker.open_producer("queue://q").send(BrokerMessage(b"plain", durable=True))
    assert held(store, "queue://q")[0][1] == b"plain"
    again, _, _ = restart(store)
    assert again.queue("q").backlog.messages()[0].payload == b"plain"
