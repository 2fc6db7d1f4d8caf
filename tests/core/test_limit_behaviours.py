"""The limit behaviours and the other per-destination limits (S2.3): REMOVE_OLDEST,
REMOVE_LOW_PRIORITY, maxBytesPerMsg, maxNumProducers, consumerFlowLimit."""

import pytest

from mqgate.core import BrokerMessage
from mqgate.core.limits import ResourceLimitExceeded
from mqgate.core.dead import LOW_PRIORITY, OLDEST, REASON
from mqgate.core.errors import ErrorKind

from tests.core import consume, make_broker, send


def _annotating(broker):
    broker.set_annotate(lambda payload, annotations, keep: (payload, annotations))


def _dmq(broker):
    _, target = consume(broker, "queue://mq.sys.dmq", credit=100)
    return [(d.message.payload[0], d.message.payload[1][REASON]) for d in target.deliveries]


def test_remove_oldest_keeps_the_newest_and_the_producer_never_waits():
    """REMOVE_OLDEST with maxNumMsgs=3: ten sends all go through, the queue keeps the
    last three, the seven oldest are on the DMQ in order."""
    broker, _ = make_broker(max_num_msgs=3, limit_behavior="REMOVE_OLDEST")
    _annotating(broker)
    producer = broker.open_producer("queue://q")
    for n in range(10):
        producer.send(BrokerMessage(b"%d" % n))
        assert not producer.blocked
    queue = broker.queue("q")
    assert (queue.held, queue.removed) == (3, 7)
    _, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"7", b"8", b"9"]
    assert _dmq(broker) == [(b"%d" % n, OLDEST) for n in range(7)]


def test_remove_low_priority_removes_the_lowest_first_then_the_oldest_of_it():
    """REMOVE_LOW_PRIORITY: the lowest priority goes first, the oldest of that
    priority before the newer ones."""
    broker, _ = make_broker(max_num_msgs=3, limit_behavior="REMOVE_LOW_PRIORITY")
    _annotating(broker)
    producer = broker.open_producer("queue://q")
    for payload, priority in ((b"p5", 5), (b"p1-old", 1), (b"p9", 9), (b"p1-new", 1),
                              (b"p3", 3)):
        producer.send(BrokerMessage(payload, priority=priority))
    _, target = consume(broker, "queue://q", credit=10)
    assert target.payloads == [b"p9", b"p5", b"p3"]
    assert _dmq(broker) == [(b"p1-old", LOW_PRIORITY), (b"p1-new", LOW_PRIORITY)]


def test_remove_oldest_by_bytes():
    """maxTotalMsgBytes counts too: the oldest go until the bytes fit."""
    broker, _ = make_broker(max_total_msg_bytes=10, limit_behavior="REMOVE_OLDEST")
    send(broker, "queue://q", b"aaaa", b"bbbb", b"cccc")
    queue = broker.queue("q")
    assert queue.held_bytes == 8 and queue.removed == 1


def test_in_flight_messages_are_never_removed():
    """Only waiting messages can be removed: a queue whose messages are all in flight
    takes one more (over its limit) rather than take back a delivery."""
    broker, _ = make_broker(max_num_msgs=2, limit_behavior="REMOVE_OLDEST")
    _, target = consume(broker, "queue://q", credit=2)
    send(broker, "queue://q", b"1", b"2", b"3")
    assert target.payloads == [b"1", b"2"]
    assert broker.queue("q").held == 3 and broker.queue("q").removed == 0


def test_max_bytes_per_msg_refuses_naming_the_limit():
    """A message larger than maxBytesPerMsg is refused with an error naming it; a
    smaller one goes through."""
    broker, _ = make_broker(max_bytes_per_msg=4)
    producer = broker.open_producer("queue://q")
    with pytest.raises(ResourceLimitExceeded, match="maxBytesPerMsg") as caught:
        producer.send(BrokerMessage(b"12345"))
    assert caught.value.kind is ErrorKind.LIMIT_EXCEEDED
    producer.send(BrokerMessage(b"1234"))
    assert broker.queue("q").held == 1


def test_max_num_producers_refuses_one_more_until_one_goes():
    """maxNumProducers=2: the third producer is refused (naming the property); once
    one closes a new one may attach."""
    broker, _ = make_broker(max_num_producers=2)
    first = broker.open_producer("queue://q")
    broker.open_producer("queue://q")
    with pytest.raises(ResourceLimitExceeded, match="maxNumProducers=2"):
        broker.open_producer("queue://q")
    first.close()
    broker.open_producer("queue://q")


def test_consumer_flow_limit_caps_what_one_consumer_holds_unsettled():
    """consumerFlowLimit=2: a consumer asking for 10 holds at most 2 unsettled; each
    settlement lets one more come, up to the credit it asked for."""
    broker, _ = make_broker(consumer_flow_limit=2)
    send(broker, "queue://q", *[b"%d" % n for n in range(6)])
    consumer, target = consume(broker, "queue://q", credit=4)
    assert target.payloads == [b"0", b"1"]
    consumer.settle(target.deliveries[0], "accepted")
    assert target.payloads == [b"0", b"1", b"2"]
    target.settle_all()
    assert target.payloads == [b"0", b"1", b"2", b"3"]   # the 4 it asked for
    target.settle_all()
    assert consumer.credit == 0 and broker.queue("q").depth == 2


def test_update_to_remove_oldest_makes_room_at_once():
    """Changing a full FLOW_CONTROL queue to REMOVE_OLDEST removes what is over and lets
    its blocked producer go on."""
    broker, _ = make_broker(max_num_msgs=3)
    producer = broker.open_producer("queue://q")
    for n in range(3):
        producer.send(BrokerMessage(b"%d" % n))
    assert producer.blocked
    limits = broker.limits_of(broker.queue("q"))
    broker.set_limits("queue", "q", limits.replace(max_count=2, behavior="REMOVE_OLDEST"))
    assert not producer.blocked and broker.queue("q").held == 2


def test_max_bytes_per_msg_refuses_a_transactional_send_when_it_is_sent():
    """A transaction's message larger than maxBytesPerMsg is refused by the send that
    carries it, as outside a transaction, and the commit publishes the rest."""
    from mqgate.core.transactions import Transactions
    broker, _ = make_broker(max_bytes_per_msg=4)
    txn = Transactions(broker, broker.clock).declare()
    producer = broker.open_producer("queue://q")
    with pytest.raises(ResourceLimitExceeded, match="maxBytesPerMsg"):
        txn.publish(producer, BrokerMessage(b"12345"))
    txn.publish(producer, BrokerMessage(b"1234"))
    txn.commit()
    assert broker.queue("q").held == 1
