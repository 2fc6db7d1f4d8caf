"""
A full disk under a running broker (S3.6: a full disk is a normal operating
condition, and tested as one).

The broker's store directory (the file store's, or SQLite's) is a small tmpfs mounted
for the test. A producer sends numbered persistent messages over mqgate's own AMQP
engine while the test fills the file system to the last byte, then frees it again,
without restarting the broker. Then the broker is killed with SIGKILL at a random point
under load and restarted. What must hold:

 - while the disk is full, persistent messages are rejected with
   C{amqp:resource-limit-exceeded} and a description naming the cause, at once (a
   STOMP SEND gets an ERROR frame instead of its RECEIPT);
 - no rejected message is ever delivered, before or after the restart; every accepted
   one is delivered;
 - non-persistent traffic goes on meanwhile: a probe client round-trips a message
   every 50 ms on its own connection, each under 100 ms, throughout, a flood of
   persistent messages to the full disk included;
 - the log says so when it starts, then at most once a second, and when it is over;
   the admin's health view shows it;
 - once space is freed, persistent messages are accepted again, by the same broker;
 - after SIGKILL and restart the queue holds exactly the messages acknowledged to the
   producer and not yet consumed, plus perhaps some sent but never answered.
"""

import json
import random
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest

from mqgate.amqp.events import DeliveriesSettled, MessageReceived
from mqgate.amqp.message import Header, encode_message
from mqgate.amqp.performatives import RECEIVER, SENDER, Accepted, Rejected

from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.broker import REPO_ROOT, BrokerError, BrokerProcess, broker_environment
from tests.e2e.engine_client import EngineClient
from tests.e2e.stomp_client import open_client
from tests.e2e.test_crash import body_of, identify
from tests.e2e.users import seed_default_users
from tests.store.test_full_disk import own_postgres, pg_start, pg_stop  # noqa: F401
from tests.store.tmpfs import SmallFilesystem

DEADLINE = 20.0
SEED = random.randrange(1 << 30)
QUEUE = "queue://faults"
#: Where each store keeps its files under the instance directory.
STORES = {
    "file": ("filestore", {}),
    "file-sync": ("filestore", {"mqgate.persist.file.sync.enabled": "true"}),
    "sqlite": ("dbstore", {"mqgate.persist.store": "jdbc",
                           "mqgate.persist.jdbc.dbVendor": "sqlite"}),
}
FULL = "amqp:resource-limit-exceeded"


class Sender:
    """A producer link that sends numbered messages and keeps their outcomes."""

    def __init__(self, address, name, queue, durable=True):
        self.client = EngineClient(address, name, timeout=DEADLINE)
        self.link = self.client.open_link(SENDER, queue)
        self.header = Header(durable=durable)
        self.sent = 0
        self.accepted = set()
        self.rejected = {}         # number -> the Rejected outcome's error

    def send(self, count):
        """Send C{count} more messages and wait for every outcome; return the numbers."""
        numbers = list(range(self.sent, self.sent + count))
        for number in numbers:
            self._send_one(number)
        self.client.flush()
        self.wait_for(numbers)
        return numbers

    def _send_one(self, number):
        deadline = time.monotonic() + DEADLINE
        while not self.link.credit:
            assert time.monotonic() < deadline, "no credit from the broker"
            self.client.flush()
            self._read()
        self.link.send(encode_message(body_of(0, number), header=self.header),
                       settled=False, context=number)
        self.sent = max(self.sent, number + 1)

    def wait_for(self, numbers):
        deadline = time.monotonic() + DEADLINE
        while not all(n in self.accepted or n in self.rejected for n in numbers):
            assert time.monotonic() < deadline, "outcomes did not come"
            self._read()

    def _read(self):
        for event in self.client.read():
            if isinstance(event, DeliveriesSettled):
                for number in event.deliveries:
                    if isinstance(event.state, Accepted):
                        self.accepted.add(number)
                    else:
                        assert isinstance(event.state, Rejected), event.state
                        self.rejected[number] = event.state.error


def receive_all(address, name, queue, batch=500, credentials=("admin", "admin")):
    """Accept everything C{queue} holds now; return the message numbers, in order.
    Ends on the broker's answer to a drain flow."""
    client = EngineClient(address, name, timeout=DEADLINE, credentials=credentials)
    try:
        link = client.open_link(RECEIVER, queue)
        numbers = []
        while True:
            link.flow(batch, drain=True)
            client.flush()
            got = 0
            while link.credit > 0:
                for event in client.read():
                    if isinstance(event, MessageReceived):
                        numbers.append(identify(event.payload)[1])
                        link.settle(event.delivery_id, Accepted())
                        got += 1
                client.flush()
            if got < batch:
                return numbers
    finally:
        client.close()


#: Persistent messages a second producer sends as fast as it can to the full disk.
FLOOD = 4000


def flood(address, count):
    """Send C{count} persistent messages as fast as the broker answers, from another
    process (so that its loop does not share this process's GIL with the probe);
    return what it counted."""
    program = (
        "import json, sys\n"
        "from tests.hostile.test_store_faults import Sender\n"
        f"s = Sender({tuple(address)!r}, 'flood', 'queue://flood')\n"
        f"while s.sent < {count}: s.send(50)\n"
        "print(json.dumps({'sent': s.sent, 'rejected': len(s.rejected)}))\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=str(REPO_ROOT),
                          env=broker_environment(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_stomp_refused(broker):
    """A persistent STOMP SEND asking for a receipt gets an ERROR naming the cause
    instead of the RECEIPT; the message is not queued."""
    client = open_client(broker.address("stomp"), name="faults-stomp")
    try:
        client.connection.send("/queue/stomp-faults", b"lost",
                               headers={"persistent": "true", "receipt": "r-lost"})
        error = client.collector.wait_for_error()
        assert error.headers["message"] == "message not stored", error.headers
        assert error.headers.get("receipt-id") == "r-lost"
        assert b"cannot write" in bytes(error.body)
        assert "r-lost" not in client.collector.receipts
    finally:
        client.close()
    assert receive_all(broker.address("jms"), "faults-stomp-rx",
                       "queue://stomp-faults") == []


def saw_line(broker, pattern, wait=0.05):
    """Whether the broker has logged a line matching C{pattern}, waiting up to
    C{wait} seconds for it."""
    try:
        broker.wait_for_line(pattern, wait)
    except BrokerError:
        return False
    return True


def store_log_times(broker, pattern):
    """The times of the broker's log lines matching C{pattern} (seconds)."""
    times = []
    for line in broker.output:
        if re.search(pattern, line):
            stamp = line.split(" ", 1)[0]
            times.append(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp())
    return times


@pytest.fixture
def filled_store(tmp_path, request):
    """C{(varhome, fs, defines)}: a VARHOME whose store directory is a 2 MB tmpfs."""
    directory, defines = STORES[request.param]
    varhome = tmp_path / "varhome"
    fs = SmallFilesystem(varhome / "instances" / "mqgate" / directory)
    try:
        fs.mount()
    except OSError as e:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {e.strerror}")
    yield varhome, fs, defines
    fs.umount()


@pytest.mark.parametrize("filled_store", sorted(STORES), indirect=True)
def test_a_full_disk_refuses_persistent_messages_and_recovers(filled_store, passfile,
                                                              probe):
    """S3.6: on a full disk persistent messages are rejected (resource-limit-exceeded)
    and never delivered, non-persistent ones go on, the log says so at most once a
    second; freed, the same broker accepts them again; SIGKILL then restart keeps
    exactly what was acknowledged and not consumed."""
    varhome, fs, defines = filled_store
    rng = random.Random(SEED)
    started = []

    def start():
        seed_default_users(varhome, defines)
        broker = BrokerProcess(varhome, defines=dict(defines))
        started.append(broker)
        return broker.start(timeout=DEADLINE)

    try:
        broker = start()
        address = broker.address("jms")
        producer = Sender(address, "faults-producer", QUEUE)
        assert len(producer.send(50)) == 50 and not producer.rejected

        # -- the disk fills up ----------------------------------------------------------
        watcher = probe(broker)
        fs.fill()
        while not producer.rejected:
            producer.send(20)
            assert producer.sent < 5000, "the broker never noticed the full disk"
        burst = producer.send(200)
        assert all(n in producer.rejected for n in burst), "a full disk took messages"
        error = producer.rejected[burst[-1]]
        assert str(error.condition) == FULL
        assert "No space left on device" in error.description or \
            "full" in error.description
        assert "persistent messages are refused until it recovers" in error.description
        # The failure goes on: the log repeats it (at most once a second) while
        # messages keep being refused, and the admin shows it. (One message at a time,
        # with a pause on the log: a tight loop of refusals would measure the CPU
        # share of this test, not the broker.)
        deadline = time.monotonic() + DEADLINE
        while not saw_line(broker, r"still cannot write"):
            (number,) = producer.send(1)
            assert number in producer.rejected
            assert time.monotonic() < deadline, "the log never said it again"
        # (The probe pauses while `mqgate cmd` starts a Python process: on a small
        # machine that start competes with the broker for the CPU.)
        watcher.stop()
        watcher.assert_responsive(limit=0.1)
        worst = watcher.worst
        shown = mqgate_cmd(broker, passfile, "show", "client", "*", "slow-subscriber")
        assert shown.returncode == 0, shown.stderr
        assert "Message store: FAILING" in shown.stdout, shown.stdout
        assert "free disk space" in shown.stdout
        watcher = probe(broker)
        flooded = flood(address, FLOOD)
        assert flooded == {"sent": FLOOD, "rejected": FLOOD}, flooded
        check_stomp_refused(broker)
        direct = Sender(address, "faults-direct", "queue://direct", durable=False)
        direct.send(100)
        assert len(direct.accepted) == 100
        assert sorted(receive_all(address, "faults-direct-rx", "queue://direct")) == \
            list(range(100))

        # -- space is freed: the same broker takes persistent messages again ----------
        fs.free()
        deadline = time.monotonic() + DEADLINE
        while True:
            (number,) = producer.send(1)
            if number in producer.accepted:
                break
            saw_line(broker, r"can write again")
            assert time.monotonic() < deadline, "the store did not recover"
        after = producer.send(50)
        assert all(n in producer.accepted for n in after)
        broker.wait_for_line(r"can write again", DEADLINE)
        watcher.stop()
        watcher.assert_responsive(limit=0.1)
        worst = max(worst, watcher.worst)

        delivered = receive_all(address, "faults-consumer", QUEUE)
        assert not set(delivered) & set(producer.rejected), "a rejected message came"
        assert set(delivered) == producer.accepted
        assert delivered == sorted(delivered), "out of order"

        failed = store_log_times(broker, r"cannot write: ")
        still = store_log_times(broker, r"still cannot write")
        assert len(failed) == 1 and still, "said once only"
        times = failed + still
        assert all(b - a >= 1 for a, b in zip(times, times[1:])), "more than once a second"
        assert any("free disk space" in line for line in broker.output
                   if "cannot write" in line)

        # -- SIGKILL under load, at a random point -------------------------------------
        # The barrier: once accepted, the removals of what was consumed are written
        # (the store writes in call order).
        (barrier,) = producer.send(1)
        assert barrier in producer.accepted
        before_kill = set(producer.accepted)
        kill_after = rng.randint(1, 300)
        while len(producer.accepted) - len(before_kill) < kill_after:
            producer.send(10)
        for number in range(producer.sent, producer.sent + 50):
            producer._send_one(number)
        producer.client.flush()
        broker.kill()
        producer.client.close(grace=0.5)
        acknowledged = producer.accepted - set(delivered)

        broker = start()
        survivors = receive_all(broker.address("jms"), "faults-after", QUEUE)
        assert acknowledged <= set(survivors), "an acknowledged message was lost"
        assert set(survivors) <= acknowledged | set(range(producer.sent)) - \
            set(producer.rejected) - set(delivered)
        assert len(survivors) == len(set(survivors)), "delivered twice"
    finally:
        for started_broker in started:
            started_broker.kill()
    print(f"\nseed {SEED}: accepted {len(producer.accepted)}, rejected "
          f"{len(producer.rejected)}, consumed {len(delivered)}, after the kill "
          f"{len(survivors)}; log lines while failing: {len(failed) + len(still)}; "
          f"probe worst round trip {worst * 1000:.0f} ms")


def test_postgresql_stopped_and_started_under_load(tmp_path, own_postgres, probe):
    """S3.6: with the SQL store on PostgreSQL, stopping the server under load gets
    persistent messages rejected (amqp:internal-error, saying the store cannot write)
    while non-persistent ones go on; started again, the same broker reconnects by
    itself and accepts them; no rejected message is ever delivered."""
    cluster = own_postgres
    defines = {"mqgate.persist.store": "jdbc",
               "mqgate.persist.jdbc.dbVendor": "postgresql",
               "mqgate.persist.jdbc.opendburl": cluster.dsn(cluster.create_database())}
    seed_default_users(tmp_path / "varhome", defines)
    broker = BrokerProcess(tmp_path / "varhome", defines=defines)
    try:
        broker.start(timeout=DEADLINE)
        address = broker.address("jms")
        producer = Sender(address, "pg-producer", QUEUE)
        producer.send(50)
        watcher = probe(broker)
        pg_stop(cluster)
        deadline = time.monotonic() + DEADLINE
        while not producer.rejected:
            producer.send(10)
            assert time.monotonic() < deadline, "the broker never noticed"
        burst = producer.send(50)
        assert all(n in producer.rejected for n in burst)
        error = producer.rejected[burst[-1]]
        assert str(error.condition) == "amqp:internal-error"
        assert error.description.startswith("the message store cannot write: ")
        direct = Sender(address, "pg-direct", "queue://direct", durable=False)
        direct.send(100)
        assert len(direct.accepted) == 100
        pg_start(cluster)
        while True:
            (number,) = producer.send(1)
            if number in producer.accepted:
                break
            saw_line(broker, r"can write again")
            assert time.monotonic() < deadline + DEADLINE, "the store did not recover"
        after = producer.send(50)
        assert all(n in producer.accepted for n in after)
        watcher.stop()
        watcher.assert_responsive(limit=0.1)
        delivered = receive_all(address, "pg-consumer", QUEUE)
        assert set(delivered) == producer.accepted
        assert not set(delivered) & set(producer.rejected)
    finally:
        broker.kill()
    print(f"\npostgresql: accepted {len(producer.accepted)}, rejected "
          f"{len(producer.rejected)}; probe worst round trip {watcher.worst * 1000:.0f} ms")
