"""STOMP BEGIN/COMMIT/ABORT on the core's transactions, end to end with stomp.py
(S10.2, S6.3): one broker shared by the module's tests, each test on destinations of
its own.

"Nothing else arrives" is checked with a marker sent behind, as tests/e2e/test_stomp.py
does: a message wrongly published shows up before the marker.
"""

import pytest

from tests.e2e.stomp_client import clients, unique


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker for the module (shipped configuration, file store)."""
    return module_broker_factory(listening=("stomp",))


@pytest.fixture
def open_client(broker):
    """Open stomp.py 1.2 clients on the STOMP service; closed after the test."""
    address = broker.address("stomp")
    with clients() as open_:
        yield lambda **kwargs: open_(address, "1.2", **kwargs)


def test_commit_delivers_all_abort_none(open_client):
    """A committed transaction's SENDs all arrive, in order; an aborted one's never."""
    queue = f"/queue/{unique('stx')}"
    consumer = open_client(name="consumer")
    consumer.subscribe(queue)
    producer = open_client(name="producer")
    producer.frame("begin", "t1")
    for n in range(3):
        producer.send(queue, f"kept-{n}", transaction="t1", persistent="true")
    producer.frame("begin", "t2")
    producer.send(queue, "dropped", transaction="t2", persistent="true")
    producer.frame("abort", "t2")
    producer.frame("commit", "t1")
    marker = unique("marker").encode()
    producer.send(queue, marker)
    consumer.collector.wait_for_body(marker)
    assert consumer.collector.bodies() == [b"kept-0", b"kept-1", b"kept-2", marker]


def test_a_bad_send_in_a_transaction_is_refused_when_sent(open_client):
    """A SEND with a malformed header inside a transaction gets an ERROR naming the
    header at once (not at COMMIT), and nothing of the transaction is delivered."""
    queue = f"/queue/{unique('sbad')}"
    consumer = open_client(name="consumer")
    consumer.subscribe(queue)
    producer = open_client(name="producer")
    producer.frame("begin", "t")
    producer.send(queue, "good", transaction="t")
    producer.connection.send(queue, "bad", headers={"transaction": "t", "priority": "99"})
    error = producer.collector.wait_for_error()
    assert error.headers.get("message").startswith("invalid header")
    assert "priority" in error.headers.get("message")
    marker = unique("marker").encode()
    open_client(name="other").send(queue, marker)
    consumer.collector.wait_for_body(marker)
    assert consumer.collector.bodies() == [marker]


def test_acks_in_an_aborted_transaction_redeliver(open_client):
    """Messages acknowledged in a transaction that is aborted come back, marked
    redelivered; acknowledged in a committed one they are gone."""
    queue = f"/queue/{unique('sack')}"
    client = open_client()
    client.send(queue, "m1")
    client.subscribe(queue, ack="client-individual")
    [first] = client.collector.wait_for_messages(1)
    client.frame("begin", "t1")
    client.ack(first, transaction="t1")
    client.frame("abort", "t1")
    client.collector.wait_for_messages(2)
    again = client.messages[1]
    assert bytes(again.body) == b"m1" and again.headers.get("redelivered") == "true"
    client.frame("begin", "t2")
    client.ack(again, transaction="t2")
    client.frame("commit", "t2")
    client.disconnect()
    other = open_client()
    other.subscribe(queue, ack="client-individual")
    marker = unique("marker").encode()
    other.send(queue, marker)
    other.collector.wait_for_body(marker)
    assert other.collector.bodies() == [marker]
