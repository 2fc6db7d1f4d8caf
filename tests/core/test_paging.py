"""Paging persistent message bodies out at ORANGE and RED and reading them back (S2.6),
with the memory store and a Clock (mqgate/core/paging.py)."""

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from mqgate.core import BrokerMessage
from mqgate.core.browse import open_browser
from mqgate.core.memory import GREEN, ORANGE, MemoryConfig, MemoryStates
from mqgate.core.paging import Pager
from mqgate.net.memory_watch import MemoryWatchService
from mqgate.store import MemoryStore, StoreError

from tests.core import consume
from tests.core.test_persistence import stored_broker

SIZE = 100


class SlowReads(MemoryStore):
    """A memory store whose reads answer only when told (a disk taking its time), or
    fail while C{failing} is set."""

    def __init__(self):
        super().__init__()
        self.reads = []
        self.failing = False

    def read_message(self, destination, message_id):
        if self.failing:
            return defer.fail(StoreError("the disk said no"))
        d = defer.Deferred()
        self.reads.append((super().read_message(destination, message_id), d))
        return d

    def release(self):
        """Answer every read asked so far; return how many."""
        reads, self.reads = self.reads, []
        for done, d in reads:
            done.chainDeferred(d)
        return len(reads)


def paging_broker(store=None, keep=3, reads=2, limit=1100):
    """A broker with a store, memory states (no overhead) and a pager."""
    broker, store, clock, _ = stored_broker(store)
    memory = MemoryStates(MemoryConfig(limit=limit, overhead=0), broker.holdings)
    broker.memory = memory
    return broker, store, Pager(broker, memory, keep=keep, reads=reads)


def body(n):
    return b"%03d" % n + b"." * (SIZE - 3)


def send_all(broker, address, numbers, **fields):
    producer = broker.open_producer(address)
    messages = []
    for n in numbers:
        message = BrokerMessage(body(n), **fields)
        producer.send(message)
        messages.append(message)
    return messages


def pressure(broker, pager, expect=True):
    """Check the memory state (it rises) and let the pager look; C{expect}: it is
    ORANGE or above, and something was paged."""
    broker.memory.check()
    pager.tick()
    if expect:
        assert pager.count > 0 and pager.paging


def test_orange_pages_out_all_but_the_head_and_the_state_falls():
    """At ORANGE the persistent messages beyond the first page_keep of a queue lose
    their bodies, keep their fields, and no longer count: the state falls to GREEN."""
    broker, _, pager = paging_broker()
    messages = send_all(broker, "queue://q", range(10), durable=True, priority=6)
    assert broker.memory.check() == 2 and broker.memory.state == ORANGE
    with capturedLogs() as events:
        pager.tick()
    assert [m.paged for m in messages] == [False] * 3 + [True] * 7
    assert all(m.payload is None for m in messages[3:])
    assert [m.priority for m in messages] == [6] * 10 and messages[9].size == SIZE
    assert (pager.count, pager.bytes) == (7, 7 * SIZE)
    assert broker.holdings.bytes == 10 * SIZE      # the queue's own limits still count it
    broker.memory.check()
    assert broker.memory.state == GREEN and broker.memory.used == 3 * SIZE
    text = [e["log_format"].format(**e) for e in events]
    assert any("paging out" in line and "7 messages, 700 bytes" in line for line in text)


def test_nothing_is_paged_below_orange_nor_non_persistent_messages():
    """Below ORANGE nothing is paged; at ORANGE non-persistent messages keep their
    bodies (they are nowhere else)."""
    broker, _, pager = paging_broker(limit=100 * SIZE)
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager, expect=False)
    assert pager.count == 0
    broker, _, pager = paging_broker()
    fleeting = send_all(broker, "queue://q", range(5))
    kept = send_all(broker, "queue://q", range(5, 10), durable=True)
    pressure(broker, pager)
    assert not any(m.paged for m in fleeting)
    assert [m.paged for m in kept] == [True] * 5


def test_topic_subscriptions_are_not_paged():
    """A message fanned out to subscriptions is shared by them: never paged."""
    broker, _, pager = paging_broker()
    consume(broker, "topic://t", durable_name="d", container_id="c")
    send_all(broker, "topic://t", range(10), durable=True)
    pressure(broker, pager, expect=False)
    assert broker.memory.state == ORANGE
    assert pager.count == 0


def test_consuming_reads_everything_back_in_order_once():
    """A consumer gets every message once, in order, with its own body, and the paged
    count falls to nothing."""
    broker, _, pager = paging_broker()
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    _, target = consume(broker, "queue://q", credit=100, settle="accepted")
    assert target.payloads == [body(n) for n in range(10)]
    assert (pager.count, pager.bytes, pager.read_total) == (0, 0, 7)
    assert broker.queue("q").depth == 0


def test_dispatch_waits_for_reads_never_hands_a_paged_message():
    """With a slow store the consumer gets the head at once, then each body as it is
    read back (at most page_reads in flight), in order, never a body-less message."""
    broker, store, pager = paging_broker(SlowReads(), keep=3, reads=2)
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    _, target = consume(broker, "queue://q", credit=100)
    assert target.payloads == [body(n) for n in range(3)]
    assert len(store.reads) == 2
    rounds = 0
    while store.release():
        rounds += 1
        assert None not in target.payloads
        assert len(store.reads) <= 2
    assert target.payloads == [body(n) for n in range(10)]
    assert rounds == 4 and pager.count == 0


def test_the_head_window_is_read_back_before_dispatch_reaches_it():
    """As a consumer takes the head, the paged messages that come within page_keep
    are read back ahead of it: a consumer taking one at a time never waits."""
    broker, store, pager = paging_broker(SlowReads(), keep=3, reads=2, limit=650)
    send_all(broker, "queue://q", range(6), durable=True)
    pressure(broker, pager)
    consumer, target = consume(broker, "queue://q", credit=1)
    assert target.payloads == [body(0)]
    store.release()                       # 3 and 4 come back while 1 and 2 wait
    for n in range(1, 6):
        consumer.set_credit(1)
        assert target.payloads[-1] == body(n), n
        store.release()


def test_priority_order_is_kept():
    """Higher priority first, FIFO within a priority, exactly as without paging."""
    broker, _, pager = paging_broker(keep=2)
    for n in range(12):
        send_all(broker, "queue://q", [n], durable=True, priority=9 if n % 3 else 1)
    pressure(broker, pager)
    assert pager.count == 10
    _, target = consume(broker, "queue://q", credit=100, settle="accepted")
    expected = [n for n in range(12) if n % 3] + [n for n in range(12) if not n % 3]
    assert target.payloads == [body(n) for n in expected]


def test_a_selector_consumer_gets_its_messages_in_order():
    """A queue consumer with a selector is served in order as bodies come back."""
    broker, store, pager = paging_broker(SlowReads())
    producer = broker.open_producer("queue://q")
    for n in range(10):
        producer.send(BrokerMessage(body(n), durable=True, priority=4 + n % 2))
    pressure(broker, pager)
    _, target = consume(broker, "queue://q", credit=100, selector="JMSPriority = 5")
    while store.release():
        assert None not in target.payloads
    assert target.payloads == [body(n) for n in range(1, 10, 2)]


def test_a_failed_read_is_logged_and_tried_again():
    """A read that fails leaves the message paged, logged once; the next look reads
    it, and the log says reading works again."""
    broker, store, pager = paging_broker(SlowReads(), limit=650)
    send_all(broker, "queue://q", range(6), durable=True)
    pressure(broker, pager)
    store.failing = True
    with capturedLogs() as events:
        _, target = consume(broker, "queue://q", credit=100)
    assert target.payloads == [body(n) for n in range(3)] and pager.failures == 2
    assert sum("could not read the body" in e["log_format"] for e in events) == 1
    store.failing = False
    with capturedLogs() as events:
        pager.tick()
        while store.release():
            pass
    assert target.payloads == [body(n) for n in range(6)]
    assert any("read back from the store again, after 2 reads that failed"
               in e["log_format"].format(**e) for e in events)


def test_paged_messages_leaving_are_no_longer_counted():
    """Purging or deleting a queue with paged messages takes them out of the paged
    figures (the state is not left too low)."""
    broker, _, pager = paging_broker()
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    assert broker.queue("q").purge() == 10
    assert (pager.count, pager.bytes) == (0, 0)
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    assert pager.count == 7
    broker.queue("q").discard()
    assert (pager.count, pager.bytes) == (0, 0)


def test_an_expired_paged_message_reaches_the_dmq_with_its_body():
    """A paged message that expires is read back and moved to the DMQ whole."""
    broker, _, pager = paging_broker()
    clock = broker.clock
    send_all(broker, "queue://q", range(10), durable=True, expiry=clock.seconds() + 5)
    pressure(broker, pager)
    clock.advance(10)
    assert broker.queue("q").reap(clock.seconds()) == 10
    _, target = consume(broker, "queue://mq.sys.dmq", credit=100)
    assert len(target.deliveries) == 10 and None not in target.payloads
    assert pager.count == 0


def test_paging_stops_when_the_state_falls_below_orange():
    """Paging out is logged when it starts and when it stops, with the counts."""
    broker, _, pager = paging_broker()
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    assert pager.paging
    with capturedLogs() as events:
        pressure(broker, pager, expect=False)    # the state fell (paging did it)
    assert not pager.paging
    text = [e["log_format"].format(**e) for e in events]
    assert any("paging out stopped; 7 messages (700 bytes)" in line for line in text)
    assert broker.memory.snapshot()["memory_paged_messages"] == 7


@pytest.mark.parametrize("keep", [0, 1])
def test_a_tiny_head_window_still_delivers_everything(keep):
    """Even with page_keep 0 or 1 every message arrives once, in order."""
    broker, store, pager = paging_broker(SlowReads(), keep=keep, reads=1, limit=850)
    send_all(broker, "queue://q", range(8), durable=True)
    pressure(broker, pager)
    _, target = consume(broker, "queue://q", credit=100)
    while store.release():
        pass
    assert target.payloads == [body(n) for n in range(8)]


def test_a_new_message_does_not_overtake_paged_ones_for_a_selector_consumer():
    """A message published while older matching ones wait paged out is delivered
    after them."""
    broker, store, pager = paging_broker(SlowReads())
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    _, target = consume(broker, "queue://q", credit=100, selector="JMSPriority = 4")
    send_all(broker, "queue://q", [10], durable=True)
    while store.release():
        pass
    assert target.payloads == [body(n) for n in range(11)]


def test_a_browser_shows_what_is_in_memory_and_changes_nothing():
    """A queue browser skips paged messages (never a body-less copy); the queue's
    consumer still gets them all afterwards."""
    broker, _, pager = paging_broker()
    send_all(broker, "queue://q", range(10), durable=True)
    pressure(broker, pager)
    seen = RecordingBrowse()
    browser = open_browser(broker, "queue://q", seen)
    browser.set_credit(100)
    assert seen.payloads == [body(n) for n in range(3)] and browser.finished
    _, target = consume(broker, "queue://q", credit=100)
    assert target.payloads == [body(n) for n in range(10)]


class RecordingBrowse:
    """A browser's target: the payloads of the copies it is handed."""

    def __init__(self):
        self.payloads = []

    def deliver(self, delivery):
        self.payloads.append(delivery.message.payload)


def test_the_memory_timer_pages_out_and_survives_a_failing_pager():
    """The memory watch's timer lets the pager look after each check; a pager that
    raises is logged and the timer goes on checking."""
    broker, _, pager = paging_broker()
    service = MemoryWatchService(broker.memory, 1)
    service.clock = clock = Clock()
    service.pager = pager
    send_all(broker, "queue://q", range(10), durable=True)
    with capturedLogs() as events:
        service.startService()
        try:
            assert pager.count == 7                    # the timer looks at once
            pager.tick = None                          # not callable: tick raises
            clock.advance(1)
            assert service.running and service._loop.running
            assert any("paging message bodies out failed" in e["log_format"]
                       for e in events)
        finally:
            service.stopService()
