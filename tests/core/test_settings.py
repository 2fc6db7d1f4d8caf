"""Address settings apply to the queues they match (S7.1, mqgate.core.settings): their
bounds and full policy become the queue's limits, their expiry delay gives messages
without an expiry one; an operator's own limits and a ring's win."""

import json

import pytest

from mqgate.core import BrokerMessage
from mqgate.core.addresses import QUEUE, TOPIC
from mqgate.core.limits import FLOW_CONTROL, REJECT_NEWEST, Limits, ResourceLimitExceeded
from mqgate.core.runtime import restore, snapshot
from mqgate.core.settings import AddressSetting
from mqgate.core.transactions import Transactions

from tests.core import consume, make_broker, send
from tests.core.test_persistence import held, stored_broker


def fail_after(match, count):
    return AddressSetting(match, "FAIL", max_messages=count)


def test_fail_refuses_past_the_bound_on_a_queue_that_existed_and_not_after_removal():
    """A FAIL setting made while the queue exists bounds it at once: the send past
    the bound is refused with the queue and the bound named; other queues are not
    touched; removing the setting lets the sends through again."""
    broker, _ = make_broker()
    broker.create_queue("orders.eu")
    broker.set_address_setting(fail_after("orders.#", 2))
    producer = broker.open_producer("queue://orders.eu")
    producer.send(BrokerMessage(b"1"))
    producer.send(BrokerMessage(b"2"))
    with pytest.raises(ResourceLimitExceeded) as refused:
        producer.send(BrokerMessage(b"3"))
    assert "orders.eu" in str(refused.value) and "REJECT_NEWEST" in str(refused.value)
    send(broker, "queue://invoices", b"a", b"b", b"c")       # not matched: unbounded
    assert broker.queue("invoices").held == 3

    broker.remove_setting("address", "orders.#")
    producer.send(BrokerMessage(b"3"))
    assert broker.queue("orders.eu").held == 3


def test_a_queue_made_later_gets_the_setting_and_the_most_specific_wins():
    broker, _ = make_broker()
    broker.set_address_setting(fail_after("orders.#", 5))
    broker.set_address_setting(AddressSetting("orders.eu", "BLOCK", max_bytes=100))
    eu = broker.create_queue("orders.eu")
    us = broker.create_queue("orders.us")
    assert (eu.limits.max_bytes, eu.limits.max_count, eu.limits.behavior) == (
        100, -1, FLOW_CONTROL)
    assert (us.limits.max_count, us.limits.behavior) == (5, REJECT_NEWEST)


def test_block_holds_the_producer_back_until_the_queue_drains():
    broker, _ = make_broker()
    broker.set_address_setting(AddressSetting("work", "BLOCK", max_messages=3))
    producer = broker.open_producer("queue://work")
    for n in range(3):
        producer.send(BrokerMessage(b"%d" % n))
    assert producer.blocked
    released = []
    producer.when_unblocked(lambda: released.append(True))
    consume(broker, "queue://work", credit=10, settle="accepted")
    assert released == [True] and not producer.blocked


def test_drop_takes_the_send_and_drops_the_message_counted():
    """DROP: the sender is not refused; what is past the bound goes nowhere and is
    counted in the queue's dropped; the consumer gets the first ones."""
    broker, _ = make_broker()
    broker.set_address_setting(AddressSetting("feed", "DROP", max_messages=2))
    producer = broker.open_producer("queue://feed")
    for n in range(5):
        assert producer.send(BrokerMessage(b"%d" % n)) is None
    queue = broker.queue("feed")
    assert (queue.held, queue.dropped) == (2, 3)
    _, target = consume(broker, "queue://feed", credit=10, settle="accepted")
    assert target.payloads == [b"0", b"1"]
    producer.send(BrokerMessage(b"5"))           # room again
    assert target.payloads[-1] == b"5"


def test_an_operators_limits_and_a_rings_win_over_a_setting():
    broker, _ = make_broker()
    broker.create_queue("orders.mine")
    broker.set_limits(QUEUE, "orders.mine", Limits(50, -1, FLOW_CONTROL))
    ring = broker.create_ring_queue("orders.ring", 4)
    broker.set_address_setting(fail_after("orders.#", 1))
    assert broker.queue("orders.mine").limits.max_count == 50
    assert ring.limits.max_count == 4 and not ring.limits.use_dmq
    broker.remove_setting("address", "orders.#")
    assert broker.queue("orders.mine").limits.max_count == 50


def test_topic_subscriptions_by_their_pattern_unless_the_topic_has_limits():
    """A subscription's queue is bounded by the setting matching the topic name or
    pattern it subscribes to, now and when made later; limits an operator gave the
    topic win."""
    broker, _ = make_broker()
    early, _ = consume(broker, "topic://prices.eu", credit=0)
    broker.set_address_setting(fail_after("prices.#", 1))
    late, _ = consume(broker, "topic://prices.us", credit=0)
    assert early.queue.limits.max_count == 1 and late.queue.limits.max_count == 1
    send(broker, "topic://prices.eu", b"1")
    with pytest.raises(ResourceLimitExceeded):
        send(broker, "topic://prices.eu", b"2")

    broker.create_topic("prices.us")
    broker.set_limits(TOPIC, "prices.us", Limits(9, -1, FLOW_CONTROL))
    broker.set_address_setting(fail_after("prices.#", 2))
    assert late.queue.limits.max_count == 9 and early.queue.limits.max_count == 2


def test_expiry_delay_gives_messages_without_one_an_expiry():
    """A message sent to a matching queue or topic without an expiry gets one, the
    delay from when it is sent; one with its own keeps it; unmatched ones get none."""
    broker, clock = make_broker()
    clock.advance(1000)
    broker.set_address_setting(AddressSetting("short.#", "DROP", 30))
    news, sub = consume(broker, "topic://short.news", credit=0)
    send(broker, "queue://short.q", b"plain")
    send(broker, "queue://short.q", b"own", expiry=5000.0)
    send(broker, "queue://long.q", b"kept")
    send(broker, "topic://short.news", b"news")
    _, long_target = consume(broker, "queue://long.q", credit=10)
    assert [d.message.expiry for d in long_target.deliveries] == [None]

    clock.advance(31)
    _, target = consume(broker, "queue://short.q", credit=10)
    assert target.payloads == [b"own"] and broker.queue("short.q").expired == 1
    assert target.deliveries[0].message.expiry == 5000.0
    news.set_credit(10)
    assert sub.payloads == [] and news.queue.expired == 1
    send(broker, "topic://short.news", b"fresh")
    assert [d.message.expiry for d in sub.deliveries] == [1061.0]


def test_restored_settings_apply_to_the_queues_there_are():
    """The runtime catalog keeps the bounds; restoring it bounds the queues the store
    gave back (made before it) as it bounds new ones."""
    broker, _ = make_broker()
    broker.set_address_setting(AddressSetting("orders.#", "FAIL", 60, max_bytes=1024,
                                              max_messages=3))
    document = json.loads(json.dumps(snapshot(broker)))
    assert document["address_settings"][0]["max_messages"] == 3

    again, _ = make_broker()
    recovered = again.create_queue("orders.eu")
    assert restore(again, document) == []
    assert (recovered.limits.max_count, recovered.limits.max_bytes) == (3, 1024)
    assert recovered.expiry_delay == 60.0


@pytest.mark.parametrize("kwargs, words", [
    (dict(full_policy="PAGE", max_bytes=10), "PAGE takes no max size"),
    (dict(max_messages=0), "max size messages 0"),
    (dict(max_bytes=-5), "max size bytes -5"),
    (dict(full_policy="SPILL"), "'SPILL'"),
])
def test_bad_values_are_refused_naming_them(kwargs, words):
    with pytest.raises(ValueError) as refused:
        AddressSetting("x.#", **kwargs)
    assert words in str(refused.value)


def test_drop_in_a_transaction_drops_at_the_send_and_stores_nothing():
    """A transacted send to a full DROP queue goes nowhere, as outside a transaction:
    the commit neither enqueues nor stores it."""
    broker, store, clock, _ = stored_broker(None, autocreate_queue=True)
    broker.set_address_setting(AddressSetting("feed", "DROP", max_messages=1))
    producer = broker.open_producer("queue://feed")
    producer.send(BrokerMessage(b"first", durable=True))
    txn = Transactions(broker, clock).declare()
    txn.publish(producer, BrokerMessage(b"second", durable=True))
    assert txn.commit().called
    queue = broker.queue("feed")
    assert (queue.held, queue.dropped) == (1, 1)
    assert [data for _, data, _ in held(store, "queue://feed")] == [b"first"]
