"""Diverts: exclusive ones move, copying ones copy, exclusive first, selectors (S7.1)."""

import pytest

from mqgate.core import BrokerMessage, NotAllowed, NotFound
from mqgate.core.limits import REJECT_NEWEST, Limits

from tests.admin.test_destinations import stored_broker, stored_keys
from tests.core import consume, make_broker, send
from tests.core.test_selector_dispatch import Payload


def test_copying_divert_copies_and_the_original_goes_on():
    """S7.1: a non-exclusive divert copies each message to its target, which stores
    and delivers it like any message; the original's consumers get exactly what they
    got without it."""
    broker, _ = make_broker()
    broker.create_divert("audit", "queue://orders", "queue://orders.audit")
    _, production = consume(broker, "queue://orders", credit=10)
    _, audit = consume(broker, "queue://orders.audit", credit=10)
    send(broker, "queue://orders", b"1", b"2")
    assert production.payloads == [b"1", b"2"]
    assert audit.payloads == [b"1", b"2"]
    assert audit.deliveries[0].message is not production.deliveries[0].message
    assert broker.diverts.table.get("audit").taken == 2


def test_copy_waits_on_its_target_when_nobody_consumes():
    """S7.1: the copy is really enqueued on the target (it waits there)."""
    broker, _ = make_broker()
    broker.create_divert("d", "topic://prices", "queue://prices.copy")
    send(broker, "topic://prices", b"a", b"b", b"c")
    assert broker.queue("prices.copy").depth == 3


def test_exclusive_divert_moves():
    """S7.1: an exclusive divert sends the message to its target instead."""
    broker, _ = make_broker()
    broker.create_divert("away", "queue://in", "queue://elsewhere", exclusive=True)
    _, original = consume(broker, "queue://in", credit=10)
    _, moved = consume(broker, "queue://elsewhere", credit=10)
    send(broker, "queue://in", b"x")
    assert original.payloads == [] and moved.payloads == [b"x"]


def test_exclusive_applies_first_and_stops_copies():
    """S7.1: when an exclusive divert took a message, no copying divert of that
    address runs; a message it did not take is copied."""
    broker, _ = make_broker()
    broker.create_divert("copy", "queue://in", "queue://copies")
    broker.create_divert("red", "queue://in", "queue://reds", exclusive=True,
                         selector="colour = 'red'")
    producer = broker.open_producer("queue://in")
    producer.send(BrokerMessage(Payload("r", colour="red")))
    producer.send(BrokerMessage(Payload("b", colour="blue")))
    assert broker.queue("reds").depth == 1
    assert broker.queue("copies").depth == 1
    assert broker.queue("in").depth == 1


def test_selector_narrows_a_copying_divert():
    """S7.1: a divert with a selector copies only what it accepts."""
    broker, _ = make_broker()
    broker.create_divert("hi", "queue://q", "queue://urgent", selector="JMSPriority > 6")
    send(broker, "queue://q", b"low", priority=1)
    send(broker, "queue://q", b"high", priority=9)
    _, urgent = consume(broker, "queue://urgent", credit=10)
    assert urgent.payloads == [b"high"]


def test_moved_message_meets_the_targets_copying_diverts():
    """A message moved to an address is copied by that address's copying diverts
    (one hop: a copy is never diverted again)."""
    broker, _ = make_broker()
    broker.create_divert("move", "queue://a", "queue://b", exclusive=True)
    broker.create_divert("tap", "queue://b", "queue://b.tap")
    broker.create_divert("again", "queue://b.tap", "queue://b.tap.tap")
    send(broker, "queue://a", b"m")
    assert broker.queue("b").depth == 1 and broker.queue("b.tap").depth == 1
    assert broker.would_create("queue", "b.tap.tap")


def test_divert_made_before_its_address_applies_once_it_exists():
    """S7.1: a divert may be put on an address that has no destination yet."""
    broker, _ = make_broker()
    broker.create_divert("early", "queue://later", "queue://copy")
    send(broker, "queue://later", b"1")
    assert broker.queue("copy").depth == 1


def test_destroyed_divert_stops_copying():
    """S7.1: removing a divert stops it at once; copies already made stay."""
    broker, _ = make_broker()
    broker.create_divert("d", "queue://q", "queue://c")
    send(broker, "queue://q", b"1")
    broker.destroy_divert("d")
    send(broker, "queue://q", b"2")
    assert broker.queue("c").depth == 1 and broker.queue("q").depth == 2
    with pytest.raises(NotFound, match="no divert called 'd'"):
        broker.destroy_divert("d")


def test_full_rejecting_target_never_refuses_the_original():
    """A copy the target refuses is counted on the divert; the producer of the
    original hears nothing of it."""
    broker, _ = make_broker()
    broker.create_divert("d", "queue://q", "queue://small")
    broker.create_queue("small").set_limits(Limits(1, -1, REJECT_NEWEST))
    send(broker, "queue://q", b"1", b"2", b"3")
    assert broker.queue("q").depth == 3
    assert broker.queue("small").depth == 1
    assert broker.diverts.table.get("d").failed == 2


def test_duplicate_and_self_diverts_refused():
    """A divert name is unique, and a divert cannot forward an address to itself."""
    broker, _ = make_broker()
    broker.create_divert("d", "queue://q", "queue://c")
    with pytest.raises(NotAllowed, match="already exists .*queue://q"):
        broker.create_divert("d", "queue://x", "queue://y")
    with pytest.raises(NotAllowed, match="to itself"):
        broker.create_divert("e", "queue://q", "queue://q")


def test_transaction_commit_copies():
    """S7.1: a message published at a transaction's commit is copied then."""
    broker, _ = make_broker()
    broker.create_divert("d", "queue://q", "queue://c")
    producer = broker.open_producer("queue://q")
    message = BrokerMessage(b"t")
    destination = producer.admit(message)
    message.seq = broker.next_seq()
    assert broker.would_create("queue", "c")   # nothing copied before the commit
    producer.enqueue_committed(destination, None, message)
    assert broker.queue("c").depth == 1


def test_persistent_copy_is_stored_on_its_target():
    """S7.1: a persistent message's copy on a queue that keeps its messages is stored
    there (under its own seq), as any message sent there would be."""
    broker, store, _ = stored_broker()
    broker.create_queue("orders")
    broker.create_queue("audit")
    broker.create_divert("d", "queue://orders", "queue://audit")
    send(broker, "queue://orders", b"p", durable=True)
    copy = broker.queue("audit")
    assert copy.depth == 1
    assert len(stored_keys(store, "queue://audit")) == 1
    assert stored_keys(store, "queue://audit") != stored_keys(store, "queue://orders")
