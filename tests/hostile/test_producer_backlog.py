"""Hostile producers against what the core holds for them, on the real broker (S2.2,
S2.7):

- an at-most-once (pre-settled) AMQP producer that keeps sending into a broker that
  refuses its messages (C{mqgate.system.max_count}) is told the only way AMQP allows:
  its link is detached with amqp:resource-limit-exceeded naming the setting, after
  C{mqgate.amqp.max_presettled_refusals} refusals in a row; the broker logs it, keeps
  exactly what it accepted, and the probe's round trip stays under 100 ms;
- a STOMP producer writing persistent SENDs without receipts as fast as its socket
  takes them, into the SQLite store (slower than the socket): the connection's
  messages waiting for the store are bounded (C{mqgate.persist.max_unstored_messages})
  by no longer reading its socket, so the broker does not hold what it read; every
  message arrives once, in order, and the probe stays under 100 ms.

Clients: mqgate's own AMQP engine client (tests/e2e/engine_client.py) and a raw STOMP
socket; the probe of tests/hostile/probe.py round-trips on its own connection.
"""

import select
import threading
import time

import pytest

from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import SENDER, SND_SETTLED

from tests.e2e.engine_client import EngineClient
from tests.e2e.stomp_client import RawStomp
from tests.e2e.test_crash import body_of
from tests.hostile.probe import broker_rss, wait_until
from tests.hostile.test_store_faults import receive_all

DEADLINE = 30.0


def test_presettled_producer_into_a_full_broker_is_detached(broker_factory, probe):
    """A pre-settled producer past mqgate.system.max_count loses each refused message
    (AMQP cannot reject a settled transfer) but is detached with
    amqp:resource-limit-exceeded naming the setting after 50 refusals in a row; the
    log names the producer and the setting; the 20 accepted messages are all there."""
    # Guests on jms: the checking client below logs in at once, without a password
    # hash, so the broker is full only briefly. While it is full every client's message
    # is refused (that is the limit), so the probe checks the broker afterwards: it
    # answers at once when the flood is over.
    broker = broker_factory({"mqgate.system.max_count": "20",
                             "mqgate.amqp.max_presettled_refusals": "50",
                             "mqgate.jms.allow_anonymous": "true"})
    address = broker.address("jms")
    client = EngineClient(address, "at-most-once", timeout=DEADLINE)
    link = client.open_link(SENDER, "queue://telemetry", settle_mode=SND_SETTLED)
    sent = 0
    deadline = time.monotonic() + DEADLINE
    with pytest.raises(ConnectionError) as caught:
        while time.monotonic() < deadline:
            if link.credit > 0 and sent < 5000:
                link.send(encode_message(body_of(1, sent)), settled=True)
                sent += 1
                client.flush()
            if link.credit <= 0 or sent >= 5000 or \
                    select.select([client.sock], [], [], 0)[0]:
                client.read()      # raises once the broker detaches the link
    client.sock.close()
    error = str(caught.value)
    assert "LinkDetached" in error and "amqp:resource-limit-exceeded" in error
    assert "mqgate.system.max_count" in error
    assert 70 <= sent < 5000, sent
    broker.wait_for_line(r"pre-settled message\(s\) from .*\(at-most-once\) refused and "
                         r"lost, the latest on link .* to queue://telemetry: .*"
                         r"mqgate\.system\.max_count", timeout=10)
    broker.wait_for_line(r"detached link .*at-most-once.*50 pre-settled messages in a "
                         r"row refused \(mqgate\.amqp\.max_presettled_refusals\)",
                         timeout=10)
    numbers = receive_all(address, "check", "queue://telemetry", credentials="ANONYMOUS")
    assert numbers == list(range(20))
    watcher = probe(broker)
    wait_until(lambda: len(watcher.samples) >= 10, 10, "10 probe round trips")
    watcher.assert_responsive(limit=0.1)


def stomp_sends(first, count):
    """C{count} persistent SENDs without receipts, numbered from C{first}."""
    frame = (b"SEND\ndestination:/queue/backlog\npersistent:true\n"
             b"content-length:%d\n\n%s\x00")
    bodies = (body_of(7, n) for n in range(first, first + count))
    return b"".join(frame % (len(body), body) for body in bodies)


def test_stomp_persistent_flood_without_receipts_is_held_back(broker_factory, probe):
    """S2.7: 20,000 persistent 4 KiB SENDs written without receipts into the SQLite
    store, with mqgate.persist.max_unstored_messages=64: the broker stops reading the
    socket while the store is behind instead of holding what it read (its RSS grew by
    18 MiB; 39 MiB with the bound lifted), all arrive once and in order, and the probe
    stays under 100 ms."""
    broker = broker_factory({"mqgate.persist.store": "jdbc",
                             "mqgate.persist.jdbc.dbVendor": "sqlite",
                             "mqgate.persist.max_unstored_messages": "64"})
    watcher = probe(broker, protocol="amqp")
    wait_until(lambda: len(watcher.samples) >= 5, 10, "5 probe round trips")
    producer = RawStomp(broker.address("stomp"), timeout=DEADLINE)
    assert producer.connect().command == "CONNECTED"
    before = broker_rss(broker)
    total, batch = 20_000, 500
    start = time.monotonic()
    with _PeakRss(broker) as rss:
        for first in range(0, total, batch):
            producer.send(stomp_sends(first, batch))
        written = time.monotonic()
        producer.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert producer.read_frame(timeout=120).command == "RECEIPT"
        read = time.monotonic()
    producer.close()
    watcher.stop()
    peak = rss.peak
    # receive_all checks each body (tests.e2e.test_crash.identify).
    numbers = receive_all(broker.address("jms"), "drain", "queue://backlog")
    assert numbers == list(range(total))
    grown = peak - before
    print(f"broker RSS grew by {grown / 2**20:.1f} MiB while 80 MB were sent in "
          f"{written - start:.2f} s, all read in {read - start:.2f} s")
    assert grown < 28 << 20
    watcher.assert_responsive(limit=0.1)


class _PeakRss:
    """The broker's highest RSS, read every 10 ms by a thread while in the block."""

    def __init__(self, broker):
        self.broker = broker
        self.peak = broker_rss(broker)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._done.wait(0.01):
            self.peak = max(self.peak, broker_rss(self.broker))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
