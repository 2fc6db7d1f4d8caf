"""Paging persistent message bodies out through the real broker (S2.6), on the file
store: with a small mqgate.memory.limit and no consumer, a Proton producer sends more
persistent messages than the limit holds; the broker pages their bodies out at ORANGE,
its state falls, the producer goes on, and a consumer then gets every message in order
with its own body."""

import time
import uuid

import pytest
from proton import Message
from proton.utils import SendException

from tests.e2e.proton_client import opened, receive_all

LIMIT = 256 * 1024
COUNT = 150
SIZE = 2000


def body(n):
    return f"{n:05d}" + "x" * (SIZE - 5)


@pytest.fixture(scope="module")
def paging_broker(module_broker_factory):
    """A broker whose messages may use 256 KiB, keeping the first 20 of a queue."""
    return module_broker_factory(
        {"mqgate.memory.limit": str(LIMIT), "mqgate.memory.check_interval": "1",
         "mqgate.memory.page_keep": "20"},
        listening=("jms",))


def send_through(sender, message, deadline):
    """Send C{message}, again after a pause while the broker refuses it (RED, until
    paging lets the state fall)."""
    while True:
        try:
            sender.send(message, timeout=10)
            return
        except SendException:
            assert time.monotonic() < deadline, "still refused: paging did not help"
            time.sleep(0.2)


def test_persistent_bodies_paged_out_and_read_back_in_order(paging_broker):
    """More persistent bytes than mqgate.memory.limit are taken with no consumer (the
    log says paging started), then all of them are consumed in order, intact."""
    address = f"queue://page-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 60
    with opened(paging_broker) as conn:
        sender = conn.create_sender(address)
        for n in range(COUNT):
            send_through(sender, Message(body=body(n), durable=True), deadline)
    assert COUNT * SIZE > LIMIT
    started = paging_broker.wait_for_line(
        r"paging out the bodies of persistent messages waiting beyond the first 20"
        r" of each queue \(mqgate.memory.page_keep\): (\d+) messages, (\d+) bytes")
    # Bodies dropped from memory: only the store has them now.
    assert int(started.group(1)) >= 50 and int(started.group(2)) >= 50 * SIZE
    with opened(paging_broker) as conn:
        receiver = conn.create_receiver(address, credit=COUNT)
        bodies = [m.body for m in receive_all(receiver, COUNT)]
    assert bodies == [body(n) for n in range(COUNT)]
    paging_broker.wait_for_line(r"paging out stopped; \d+ messages")
