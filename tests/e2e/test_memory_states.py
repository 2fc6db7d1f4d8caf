"""Memory states through the real broker (S2.6): with a small mqgate.memory.limit, a
Proton producer is refused at RED (amqp:resource-limit-exceeded), a new producer gets
no credit, a STOMP SEND's receipt waits, and all of them go on once a consumer has
drained the queue; nothing is lost."""

import contextlib
import time
import uuid

import proton
import pytest
from proton import Message
from proton.utils import SendException

from tests.e2e.proton_client import opened, receive_all
from tests.e2e.stomp_client import clients, unique

LIMIT = 64 * 1024
BODY = "x" * 1000
#: A message's bytes as the states count them: its encoded size plus the overhead.
COUNTED = 1000 + 512


@pytest.fixture(scope="module")
def memory_broker(module_broker_factory):
    """A broker whose messages may use 64 KiB, looked at every second."""
    return module_broker_factory(
        {"mqgate.memory.limit": str(LIMIT), "mqgate.memory.check_interval": "1"},
        listening=("jms", "stomp"))


def fill_until_refused(sender, limit=200):
    """Send until the broker refuses; return C{(accepted, the refusal)}."""
    for sent in range(limit):
        try:
            sender.send(Message(body=BODY, durable=False))
        except SendException as refused:
            return sent, refused
    raise AssertionError(f"{limit} messages of {len(BODY)} bytes were all accepted")


def drain_queue(broker, address, count):
    """Receive and accept C{count} messages of C{address}; their bodies."""
    with opened(broker) as conn:
        receiver = conn.create_receiver(address)
        return [m.body for m in receive_all(receiver, count)]


def test_producer_refused_at_red_and_recovers(memory_broker):
    """At RED a transfer is rejected with amqp:resource-limit-exceeded naming the
    state and the setting; once a consumer has taken the messages the same producer
    sends again, and every accepted message is there."""
    address = f"queue://mem-{uuid.uuid4().hex[:8]}"
    with opened(memory_broker) as conn:
        sender = conn.create_sender(address)
        accepted, refused = fill_until_refused(sender)
        # RED is at 98 % of the limit: the refusal comes near it, not long before.
        assert LIMIT * 0.9 <= accepted * COUNTED <= LIMIT * 1.1, accepted
        error = refused.state
        assert error == proton.Delivery.REJECTED
        memory_broker.wait_for_line(r"memory state \w+ -> RED: messages use \d+ bytes")
        assert drain_queue(memory_broker, address, accepted) == [BODY] * accepted
        sender.send(Message(body="after"), timeout=10)
    assert drain_queue(memory_broker, address, 1) == ["after"]
    memory_broker.wait_for_line(r"memory state RED -> GREEN")


def test_new_producer_gets_credit_only_when_red_falls(memory_broker):
    """A producer attaching at RED is granted no credit; it gets some, without asking,
    within a check interval of a consumer draining the queue."""
    address = f"queue://mem-{uuid.uuid4().hex[:8]}"
    with opened(memory_broker) as conn:
        accepted, _ = fill_until_refused(conn.create_sender(address))
        late = conn.create_sender(address, name="late")
        # A second attach answered means the broker has dealt with the first one.
        conn.create_sender(address, name="barrier").close()
        assert late.link.credit == 0
        drain_queue(memory_broker, address, accepted)
        conn.wait(lambda: late.link.credit > 0, timeout=5,
                  msg="credit after the memory state fell")
        late.send(Message(body="late"))
    assert drain_queue(memory_broker, address, 1) == ["late"]


def test_stomp_receipt_waits_at_red(memory_broker):
    """At RED a STOMP SEND is neither refused nor lost: its receipt comes once a
    consumer has drained the queue, and the message is there."""
    address = f"queue://mem-{uuid.uuid4().hex[:8]}"
    with opened(memory_broker) as conn:
        accepted, _ = fill_until_refused(conn.create_sender(address))
    with clients() as open_client:
        client = open_client(memory_broker.address("stomp"))
        receipt = unique("send")
        client.connection.send(address, "from stomp", headers={"receipt": receipt})
        # Bounded look: the receipt must not come while the state is RED.
        with contextlib.suppress(AssertionError):
            client.collector.wait_for_receipt(receipt, timeout=1.5)
        assert receipt not in client.collector.receipts
        drain_queue(memory_broker, address, accepted)
        started = time.monotonic()
        client.collector.wait_for_receipt(receipt, timeout=10)
        assert time.monotonic() - started < 5
    assert drain_queue(memory_broker, address, 1) == [b"from stomp"]
