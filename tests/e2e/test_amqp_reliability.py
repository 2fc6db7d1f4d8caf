"""Delivery reliability with Proton clients against the real broker (S8.1, rule 3).

A delivery is in flight from the moment the broker hands it to a consumer until the
consumer settles it. These tests check the three ways that can end: many competing
consumers each settling their share exactly once, a consumer vanishing with messages
unsettled (they come back, marked redelivered), and explicit released / rejected
outcomes.
"""

import threading
from collections import Counter

from proton import Message

from tests.e2e.proton_client import (
    DEFAULT_TIMEOUT, DeadlineExceeded, HoldingConsumer, Scenario, broker_url, drain,
    opened, receive_all, run_container, run_in_threads)


class _CompetingConsumers(Scenario):
    """C{connections} x C{per_connection} receivers on one queue, auto-accepting.

    Sets C{attached} once every receiver's attach is answered, so the producer starts
    with all consumers in place; finishes when C{expected} distinct ids have arrived.
    """

    timeout = 30.0  # about 4 s on a 2-core machine

    def __init__(self, broker, address, connections, per_connection, expected):
        super().__init__(prefetch=10)
        self.broker = broker
        self.address = address
        self.shape = (connections, per_connection)
        self.expected = expected
        self.attached = threading.Event()
        self.opened = 0
        self.by_consumer = {}
        self.ids = Counter()

    def begin(self, container):
        connections, per_connection = self.shape
        for c in range(connections):
            conn = self.connect_to(container, self.broker)
            for r in range(per_connection):
                name = f"consumer-{c}-{r}"
                self.by_consumer[name] = []
                container.create_receiver(conn, self.address, name=name)
        self.progress = "attaching"

    def on_link_opened(self, event):
        self.opened += 1
        if self.opened == len(self.by_consumer):
            self.attached.set()
            self.progress = "all attached, receiving"

    def on_message(self, event):
        message_id = event.message.id
        self.by_consumer[event.receiver.name].append(message_id)
        self.ids[message_id] += 1
        self.progress = f"{len(self.ids)} distinct of {self.expected} received"
        if len(self.ids) == self.expected:
            self.finish()


def _produce(broker, address, ids, ready):
    """Send one message per id on one connection, once C{ready} is set."""
    if not ready.wait(DEFAULT_TIMEOUT * 3):
        raise DeadlineExceeded("consumers never all attached")
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for message_id in ids:
            sender.send(Message(id=message_id, body=message_id))


def test_fifty_competing_consumers_get_each_message_exactly_once(broker):
    """S8.1/S2.1: 5,000 messages over 50 consumers on 5 connections: each id exactly once."""
    ids = [f"id-{i:05d}" for i in range(5000)]
    consumers = _CompetingConsumers(broker, "queue://work", connections=5,
                                    per_connection=10, expected=len(ids))
    run_in_threads([
        lambda: run_container(consumers),
        lambda: _produce(broker, "queue://work", ids, consumers.attached),
    ], timeout=60)
    assert consumers.errors == []
    duplicates = {i: n for i, n in consumers.ids.items() if n != 1}
    assert duplicates == {}
    assert sorted(consumers.ids) == ids
    # Competing consumers: the queue spreads its messages over all of them.
    idle = [name for name, got in consumers.by_consumer.items() if not got]
    assert idle == []
    # Everything was accepted: nothing is left in the queue.
    with opened(broker) as conn:
        assert drain(conn, conn.create_receiver("queue://work")) == []


def test_unsettled_messages_of_a_killed_consumer_are_redelivered(broker):
    """Rule 3/S8.1: a consumer killed holding N unsettled messages: another gets them again."""
    count = 5
    with opened(broker) as conn:
        sender = conn.create_sender("queue://orders")
        for i in range(count):
            sender.send(Message(id=f"o{i}", body=i))
    holder = HoldingConsumer(broker_url(broker, user="admin", password="admin"),
                             "queue://orders", count)
    try:
        holder.start()
        assert holder.held == [(f"o{i}", 0) for i in range(count)]
        with opened(broker) as conn:
            # While the holder lives its deliveries are in flight, not in the queue.
            assert drain(conn, conn.create_receiver("queue://orders")) == []
    finally:
        holder.kill()  # SIGKILL: the broker sees the socket die, no detach, no close
    with opened(broker) as conn:
        receiver = conn.create_receiver("queue://orders", credit=count)
        got = receive_all(receiver, count)
    assert sorted(m.id for m in got) == [f"o{i}" for i in range(count)]
    assert all(m.delivery_count >= 1 for m in got), [(m.id, m.delivery_count) for m in got]
    assert all(m.first_acquirer is False for m in got)


def test_released_message_comes_back_with_delivery_count_unchanged(broker):
    """S8.1: a released message is delivered again, its delivery-count not raised."""
    with opened(broker) as conn:
        conn.create_sender("queue://released").send(Message(id="r1", body="again"))
        receiver = conn.create_receiver("queue://released")
        [first] = receive_all(receiver, 1, settle="release")
        [second] = receive_all(receiver, 1)
    assert (first.id, first.delivery_count) == ("r1", 0)
    assert (second.id, second.delivery_count, second.body) == ("r1", 0, "again")


def test_rejected_message_is_gone(broker):
    """S8.1: a rejected message is settled for good: not redelivered, not in the queue."""
    with opened(broker) as conn:
        sender = conn.create_sender("queue://rejected")
        sender.send(Message(id="bad", body="poison"))
        sender.send(Message(id="good", body="fine"))
        receiver = conn.create_receiver("queue://rejected")
        [bad] = receive_all(receiver, 1, settle="reject")
        [good] = receive_all(receiver, 1)
        assert (bad.id, good.id) == ("bad", "good")
    # A new connection: whatever the broker kept would now be delivered.
    with opened(broker) as conn:
        assert drain(conn, conn.create_receiver("queue://rejected")) == []


def test_killed_consumer_loses_nothing_of_a_partly_consumed_queue(broker):
    """Rule 3/S8.1: a killed consumer held 7 of 20: all 20 arrive, those 7 redelivered."""
    with opened(broker) as conn:
        sender = conn.create_sender("queue://flow")
        for i in range(20):
            sender.send(Message(id=f"f{i:02d}", body=i))
    holder = HoldingConsumer(broker_url(broker, user="admin", password="admin"),
                             "queue://flow", 7)
    try:
        holder.start()
    finally:
        holder.kill()
    # The 7 held come back (redelivered) alongside the 13 never sent.
    with opened(broker) as conn:
        got = receive_all(conn.create_receiver("queue://flow", credit=20), 20)
    assert sorted(m.id for m in got) == [f"f{i:02d}" for i in range(20)]
    redelivered = sorted(m.id for m in got if m.delivery_count >= 1)
    assert redelivered == sorted(i for i, _ in holder.held)
