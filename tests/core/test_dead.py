"""The dead message queue mq.sys.dmq (S2.4): what goes there, annotated how, and how
persistent dead messages move in the store."""

from twisted.internet import defer
from twisted.logger import capturedLogs

from mqgate.core import BrokerMessage
from mqgate.core.dead import (
    DMQ_NAME, EXPIRED, ORIGINAL_ADDRESS, REASON, REJECTED, TIME, UNDELIVERABLE,
    UNRENDERABLE)
from mqgate.store import MemoryStore

from tests.core import consume, make_broker, send
from tests.core.test_persistence import held, restart, stored_broker


def _annotating(broker):
    """Make dead copies record their annotations: payload -> (payload, annotations,
    keep_body)."""
    broker.set_annotate(lambda payload, annotations, keep: (payload, annotations, keep))


def _dead(broker, credit=10):
    _, target = consume(broker, f"queue://{DMQ_NAME}", credit=credit)
    return target


def test_a_rejected_message_arrives_on_the_dmq_annotated_with_why_when_and_where():
    """A REJECTED message is on mq.sys.dmq with its reason, time (ms) and address."""
    broker, clock = make_broker()
    _annotating(broker)
    clock.advance(1000.5)
    consumer, target = consume(broker, "queue://orders", credit=1)
    send(broker, "queue://orders", b"bad", message_id="m-1", priority=7)
    consumer.settle(target.deliveries[0], "rejected")
    dead = _dead(broker)
    [delivery] = dead.deliveries
    payload, annotations, keep_body = delivery.message.payload
    assert payload == b"bad" and keep_body is True
    assert annotations == {REASON: REJECTED, TIME: 1000500,
                           ORIGINAL_ADDRESS: "queue://orders"}
    assert (delivery.message.message_id, delivery.message.priority) == ("m-1", 7)
    queue = broker.queue("orders")
    assert (queue.held, queue.rejected, queue.dead) == (0, 1, 1)


def test_delivered_too_often_goes_to_the_dmq_after_max_delivery_count():
    """maxDeliveryCount=3: the third failed delivery (NACK-like MODIFIED) makes it dead,
    not redelivered."""
    broker, _ = make_broker(max_delivery_count=3)
    _annotating(broker)
    consumer, target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"poison")
    for attempt in range(3):
        assert len(target.deliveries) == attempt + 1
        consumer.settle(target.deliveries[-1], "modified", delivery_failed=True)
    assert len(target.deliveries) == 3
    [delivery] = _dead(broker).deliveries
    assert delivery.message.payload[1][REASON] == UNDELIVERABLE
    assert broker.queue("q").held == 0


def test_undeliverable_here_counts_a_delivery_too():
    """MODIFIED(undeliverable-here) is a failed delivery: with maxDeliveryCount=1 the
    message is dead at once, not parked for another consumer."""
    broker, _ = make_broker(max_delivery_count=1)
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"x")
    consumer.settle(target.deliveries[0], "modified", undeliverable_here=True)
    assert broker.queue("q").depth == 0 and len(_dead(broker).deliveries) == 1


def test_a_consumer_leaving_with_it_unsettled_counts_and_can_make_it_dead():
    """Closing a consumer raises the count of what it held; past the maximum it goes
    to the DMQ, the rest goes back to the queue."""
    broker, _ = make_broker(max_delivery_count=2)
    consumer, target = consume(broker, "queue://q", credit=3)
    send(broker, "queue://q", b"a")
    consumer.settle(target.deliveries[0], "modified", delivery_failed=True)
    send(broker, "queue://q", b"b")
    assert [d.message.payload for d in target.deliveries] == [b"a", b"a", b"b"]
    consumer.close()
    queue = broker.queue("q")
    assert queue.depth == 1 and queue.in_flight == 0
    _, again = consume(broker, "queue://q", credit=5)
    assert again.payloads == [b"b"]
    assert [d.message.payload for d in _dead(broker).deliveries] == [b"a"]


def test_zero_max_delivery_count_redelivers_for_ever():
    """maxDeliveryCount 0 means no limit."""
    broker, _ = make_broker(max_delivery_count=0)
    consumer, target = consume(broker, "queue://q", credit=100)
    send(broker, "queue://q", b"x")
    for _ in range(50):
        consumer.settle(target.deliveries[-1], "modified", delivery_failed=True)
    assert len(target.deliveries) == 51 and broker.dmq.held == 0


def test_unrenderable_is_a_reason_the_glue_gives():
    """The glue rejects a message its protocol cannot carry with reason UNRENDERABLE."""
    broker, _ = make_broker()
    _annotating(broker)
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"x")
    consumer.settle(target.deliveries[0], "rejected", reason=UNRENDERABLE)
    [delivery] = _dead(broker).deliveries
    assert delivery.message.payload[1][REASON] == UNRENDERABLE


def test_use_dmq_false_drops_and_counts():
    """A destination with useDMQ=false drops its dead messages (counted), none on the
    DMQ."""
    broker, _ = make_broker(use_dmq=False)
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"x")
    consumer.settle(target.deliveries[0], "rejected")
    assert broker.dmq.held == 0
    assert (broker.queue("q").dropped, broker.dead_letters.dropped) == (1, 1)


def test_truncate_body_asks_for_the_headers_only():
    """DMQ.truncateBody: the annotate call is told to leave the body out."""
    broker, _ = make_broker(dmq_truncate_body=True)
    _annotating(broker)
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"x")
    consumer.settle(target.deliveries[0], "rejected")
    assert _dead(broker).deliveries[0].message.payload[2] is False


def test_the_dmq_removes_its_oldest_and_never_blocks():
    """The DMQ past its maxNumMsgs removes its oldest (dropped): rejecting never
    stops, and the DMQ holds the newest."""
    broker, _ = make_broker(dmq_max_num_msgs=3)
    consumer, target = consume(broker, "queue://q", credit=100)
    for n in range(10):
        send(broker, "queue://q", b"%d" % n)
    target.settle_all("rejected")
    dmq = broker.dmq
    assert dmq.held == 3 and broker.dead_letters.dropped == 7
    assert [d.message.payload for d in _dead(broker).deliveries] == [b"7", b"8", b"9"]


def test_log_dead_messages_logs_id_origin_and_reason_never_the_body():
    """logDeadMsgs: one line per dead message naming its id, origin and reason."""
    broker, _ = make_broker(log_dead_messages=True)
    consumer, target = consume(broker, "queue://q", credit=1)
    send(broker, "queue://q", b"secret-body", message_id="id-42")
    with capturedLogs() as events:
        consumer.settle(target.deliveries[0], "rejected")
    lines = [e for e in events if e.get("log_namespace") == "mqgate.dmq"]
    assert len(lines) == 1
    text = lines[0]["log_format"].format(**lines[0])
    assert "id-42" in text and "queue://q" in text and "REJECTED" in text
    assert "secret" not in text


def test_a_dead_subscription_message_names_its_topic():
    """A message rejected on a topic subscription comes from topic://NAME."""
    broker, _ = make_broker()
    _annotating(broker)
    sub, target = consume(broker, "topic://prices", credit=1)
    send(broker, "topic://prices", b"x")
    sub.settle(target.deliveries[0], "rejected")
    [delivery] = _dead(broker).deliveries
    assert delivery.message.payload[1][ORIGINAL_ADDRESS] == "topic://prices"


def test_a_persistent_dead_message_moves_in_one_transaction_and_survives_a_restart():
    """The store holds a rejected persistent message under the DMQ's key only, and a
    restart puts it back on mq.sys.dmq, not on its queue."""
    broker, store, _, _ = stored_broker()
    consumer, target = consume(broker, "queue://q", credit=1)
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    consumer.settle(target.deliveries[0], "rejected")
    assert held(store, "queue://q") == []
    assert [data for _, data, _ in held(store, f"queue://{DMQ_NAME}")][0].endswith(b"m")
    again, _, summary = restart(store)
    assert again.queue("q").held == 0 and again.dmq.held == 1
    assert not summary.warnings


def test_a_crash_before_the_move_commits_leaves_the_message_where_it_was():
    """An uncommitted move (open transaction at the crash) is rolled back: the
    message is on its queue again, and not on the DMQ."""
    store = MemoryStore()
    broker, store, _, _ = stored_broker(store)
    consumer, target = consume(broker, "queue://q", credit=1)
    broker.open_producer("queue://q").send(BrokerMessage(b"m", durable=True))
    store.commit = lambda txn: _never()            # the crash comes before the commit
    consumer.settle(target.deliveries[0], "rejected")
    again, _, _ = restart(store)
    assert again.queue("q").held == 1 and again.dmq.held == 0


def _never():
    return defer.Deferred()


def test_expired_goes_to_the_dmq_with_reason_expired():
    """A message found expired at dispatch is on the DMQ with reason EXPIRED."""
    broker, clock = make_broker()
    _annotating(broker)
    send(broker, "queue://q", b"old", expiry=5)
    clock.advance(10)
    _, target = consume(broker, "queue://q", credit=1)
    assert target.deliveries == []
    [delivery] = _dead(broker).deliveries
    assert delivery.message.payload[1][REASON] == EXPIRED
    assert delivery.message.expiry is None
