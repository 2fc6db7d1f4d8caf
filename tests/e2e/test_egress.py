"""Per-client egress queues end to end (S9): a subscriber that stops reading costs the
broker a bounded amount of memory, the others keep their pace, the stalled one is
reported slow and its losses counted, and its first message after the losses says so;
a message over the ingress limit gets its client disconnected (S9.5).

The stalled subscriber is a real Proton client in a child process, stopped with SIGSTOP:
it stops reading its socket, the kernel's buffers fill, the broker's transport pauses
its writes (S9.3) and the subscriber's D queue starts discarding (S9.2).
"""

import os
import signal
import subprocess
import sys
import threading
import time

from proton import Message
from proton.utils import LinkDetached
from proton.reactor import AtMostOnce
import pytest

from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import broker_url, opened, run_in_threads
from tests.e2e.stomp_client import RawStomp
from tests.e2e.admin_cmd import cmd_json, mqgate_cmd

TOPIC = "topic://egress.prices"
COUNT = 20_000
BODY = "p" * 4000     # two work units each (S9.2)

#: The stalled subscriber logs in as guest, whose profile keeps a D-1 of 100 work units
#: (200 KiB: 50 of these messages); the other one as admin, whose D-1 holds all the
#: test sends, so that its Python client may lag behind the producer and lose nothing.
#: A client counts as slow after 3 s of the last minute.
DEFINES = {
    "mqgate.client_profile.small.d1.max_depth": "100",
    "mqgate.client_profile.assign.guest": "small",
    "mqgate.client_profile.big.d1.max_depth": "262144",
    "mqgate.client_profile.assign.admin": "big",
    "mqgate.egress.slow_subscriber.threshold": "5",
}


def produce(broker, seqs, end=True):
    """Send pre-settled (direct) messages to TOPIC as fast as Proton goes, then END."""
    with opened(broker, timeout=60) as conn:
        sender = conn.create_sender(TOPIC, options=AtMostOnce())
        for seq in seqs:
            sender.send(Message(body=BODY, properties={"seq": seq}))
        if end:
            sender.send(Message(body="END"))
        # Proton keeps pre-settled messages it has no credit for: they must have left
        # before the connection closes.
        conn.wait(lambda: sender.link.queued == 0, timeout=120,
                  msg="sending the last messages")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def wait_until(condition, what, timeout=30.0):
    """Poll C{condition()} until it returns something true; fail after C{timeout}."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def client_of(broker, passfile, user):
    rows = cmd_json(broker, passfile, "show", "client", "*", "stats", "queue")
    return next((row for row in rows if row["user"] == user), None)


def test_a_stalled_subscriber_is_bounded_reported_and_told(broker_factory, passfile,
                                                          tmp_path):
    """S9.1-S9.4, S9.7: while a SIGSTOPped subscriber of a topic stops reading, a
    producer sends 80 MB of direct messages at full speed: the broker's memory grows by
    far less than that; another subscriber then receives all of the next 80 MB while
    the stalled one still reads nothing; the stalled one is
    reported slow with its discards counted, and once it reads again the first message
    after the gap carries x-opt-discard-indication."""
    broker = broker_factory(DEFINES)
    out = tmp_path / "slow.txt"
    slow = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.egress_consumer",
         broker_url(broker, user="guest", password="guest"), TOPIC, str(out)],
        cwd=str(REPO_ROOT), env=broker_environment(), stdout=subprocess.PIPE, text=True)
    try:
        assert slow.stdout.readline().strip() == "ready"
        os.kill(slow.pid, signal.SIGSTOP)
        before = rss_bytes(broker.pid)
        # 80 MB at full speed past a subscriber that reads nothing: the broker keeps a
        # bounded part of it (its D-1 of 200 KiB and the socket buffers), no backlog.
        run_in_threads([lambda: produce(broker, range(COUNT), end=False)], timeout=120)
        grown = rss_bytes(broker.pid) - before
        assert grown < 40 * 2**20, f"broker grew by {grown} bytes"

        # Meanwhile another subscriber of the topic gets every message, in order.
        attached = threading.Event()

        def consume():
            # Proton objects stay in the thread that made them.
            with opened(broker, timeout=60) as conn:
                receiver = conn.create_receiver(TOPIC, credit=1000, options=AtMostOnce())
                attached.set()
                seqs = []
                while True:
                    message = receiver.receive(timeout=60)
                    if message.body == "END":
                        return seqs
                    seqs.append(message.properties["seq"])

        def produce_again():
            assert attached.wait(30), "the second subscriber never attached"
            produce(broker, range(COUNT, 2 * COUNT))

        _, received = run_in_threads([produce_again, consume], timeout=240)
        assert received == list(range(COUNT, 2 * COUNT))

        stalled = wait_until(lambda: client_of(broker, passfile, "guest"),
                             "the stalled client in show client * stats queue")
        d1 = next(q for q in stalled["queues"] if q["queue"] == "D-1")
        assert d1["discards"] > 0, stalled
        assert d1["max_depth"] == 100 and d1["length_units"] <= 100, d1
        wait_until(lambda: [row for row in cmd_json(broker, passfile, "show", "client",
                                                    "*", "slow-subscriber")
                            if row["user"] == "guest" and row["slow"]],
                   "the stalled client to be listed as a slow subscriber")
        text = mqgate_cmd(broker, passfile, "show", "client", stalled["client"], "stats",
                          "queue").stdout
        assert "Slow Subscriber" in text and "Yes" in text, text
    finally:
        os.kill(slow.pid, signal.SIGCONT)
    assert slow.wait(timeout=120) == 0
    rows = [tuple(map(int, line.split())) for line in out.read_text().splitlines()]
    seqs = [seq for seq, _ in rows]
    assert seqs == sorted(seqs) and len(seqs) < COUNT
    # The flag is on the first message after each gap, and nowhere else (S9.2).
    gaps = {seqs[i] for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1}
    assert gaps, "the stalled subscriber lost nothing"
    assert {seq for seq, flagged in rows if flagged} == gaps


def test_message_over_the_guaranteed_limit_disconnects_its_client(broker):
    """S9.5: a 31 MB persistent message gets its client disconnected with
    CLIENT_CLIENT_MESSAGE_TOO_BIG (logged), while another client goes on working."""
    with opened(broker) as other:
        queue = other.create_receiver("queue://egress.big")
        with pytest.raises(Exception) as failed:
            with opened(broker, timeout=60) as conn:
                sender = conn.create_sender("queue://egress.big")
                sender.send(Message(body=b"x" * 31_000_000, durable=True))
        assert "CLIENT_CLIENT_MESSAGE_TOO_BIG" in str(failed.value), failed.value
        broker.wait_for_line(r"CLIENT_CLIENT_MESSAGE_TOO_BIG: .* sent a guaranteed "
                             r"message of more than 30000000 bytes", timeout=10)
        with opened(broker) as conn:
            conn.create_sender("queue://egress.big").send(Message(body="small"))
        assert queue.receive(timeout=10).body == "small"
        queue.accept()


def test_stomp_send_over_the_guaranteed_limit_is_refused_at_its_headers(broker):
    """S9.5: a persistent STOMP SEND declaring 31 MB is refused as soon as its headers
    end, with an ERROR naming CLIENT_CLIENT_MESSAGE_TOO_BIG."""
    raw = RawStomp(broker.address("jms"), timeout=30)
    try:
        raw.send(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
        assert raw.read_frame().command == "CONNECTED"
        raw.send(b"SEND\ndestination:/queue/egress.big\npersistent:true\n"
                 b"content-length:31000000\n\n" + b"x" * 1000)
        frames = raw.read_until_closed()
    finally:
        raw.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].get("message") == "CLIENT_CLIENT_MESSAGE_TOO_BIG"


def test_profile_flow_limits_refuse_with_the_key(broker_factory):
    """S9.7: a client profile's max_egress_flows and max_subscriptions refuse the
    consumer beyond them with amqp:resource-limit-exceeded naming the setting; the
    connection and its other links go on."""
    broker = broker_factory({"mqgate.client_profile.few.max_egress_flows": "2",
                             "mqgate.client_profile.few.max_subscriptions": "1",
                             "mqgate.client_profile.assign.guest": "few"})
    with opened(broker, user="guest", password="guest") as conn:
        first = conn.create_receiver("topic://egress.limits")
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("topic://egress.other")
        assert "max_subscriptions" in str(refused.value)
        conn.create_receiver("queue://egress.limits")
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("queue://egress.more")
        assert "max_egress_flows" in str(refused.value)
        conn.create_sender("topic://egress.limits").send(Message(body="still here"))
        assert first.receive(timeout=10).body == "still here"


def test_the_admin_address_is_no_destination(broker):
    """S11.1: on the jms service nobody receives from mqgate.admin (AMQP), and STOMP
    can neither send to it nor subscribe to it."""
    with opened(broker) as conn:
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("mqgate.admin")
        assert "admin requests" in str(refused.value)
    for frame in (b"SEND\ndestination:/queue/mqgate.admin\n\nhello\x00",
                  b"SUBSCRIBE\nid:1\ndestination:/queue/mqgate.admin\n\n\x00"):
        raw = RawStomp(broker.address("jms"), timeout=30)
        try:
            raw.send(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest"
                     b"\n\n\x00")
            assert raw.read_frame().command == "CONNECTED"
            raw.send(frame)
            frames = raw.read_until_closed()
        finally:
            raw.close()
        assert [f.command for f in frames] == ["ERROR"], frames
        assert "reserved for admin requests" in bytes(frames[0].body).decode() + \
            str(frames[0].headers)


def test_over_budget_the_slow_subscriber_is_disconnected(broker_factory, tmp_path):
    """S9.6: when the egress buffers pass their budget the load factor event is
    logged and the slow subscriber holding them is disconnected (its socket dropped,
    since it reads nothing), while a subscriber that keeps up goes on."""
    broker = broker_factory({
        "mqgate.egress.buffer.budget": "1m",
        "mqgate.egress.slow_subscriber.threshold": "5",
        "mqgate.client_profile.deep.d1.max_depth": "262144",
        "mqgate.client_profile.assign.guest": "deep"})
    slow = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.egress_consumer",
         broker_url(broker, user="guest", password="guest"), TOPIC,
         str(tmp_path / "slow.txt")],
        cwd=str(REPO_ROOT), env=broker_environment(), stdout=subprocess.PIPE, text=True)
    try:
        assert slow.stdout.readline().strip() == "ready"
        os.kill(slow.pid, signal.SIGSTOP)
        attached = threading.Event()

        def keep_up():
            # Proton objects stay in the thread that made them.
            with opened(broker, timeout=60) as conn:
                receiver = conn.create_receiver(TOPIC, credit=1000, options=AtMostOnce())
                attached.set()
                seqs = []
                while 9999 not in seqs:
                    seqs.append(receiver.receive(timeout=60).properties["seq"])
                return seqs

        def load():
            assert attached.wait(30), "the keeping-up subscriber never attached"
            # 20 MB: the socket buffers fill (loopback's can take several MB), then
            # well over 1 MiB waits in the stalled subscriber's D-1 (it holds 512 MiB,
            # so nothing is discarded).
            produce(broker, range(5000), end=False)
            broker.wait_for_line(r"egress buffer load factor set", timeout=30)
            broker.wait_for_line(r"CLIENT_DISCONNECTED_SLOW_SUBSCRIBER: .*user guest",
                                 timeout=30)
            produce(broker, [9999], end=False)

        seqs, _ = run_in_threads([keep_up, load], timeout=120)
        assert seqs == list(range(5000)) + [9999]
        broker.wait_for_line(r"egress buffer load factor clear", timeout=10)
        assert not [line for line in broker.output
                    if "CLIENT_DISCONNECTED_SLOW_SUBSCRIBER" in line and "user admin" in line]
        # Let go, the stalled client finds its connection gone.
        os.kill(slow.pid, signal.SIGCONT)
        assert slow.wait(timeout=60) != 0
    finally:
        if slow.poll() is None:
            os.kill(slow.pid, signal.SIGCONT)
            slow.kill()
            slow.wait(timeout=30)


def test_a_stalled_stomp_subscriber_is_told_with_a_header(broker_factory, passfile,
                                                          tmp_path):
    """S9.2 over STOMP: a SIGSTOPped ack:auto subscriber's D-1 discards while 80 MB go
    past it; once it reads again, the first MESSAGE after each gap carries
    discard-indication:true, and no other does."""
    broker = broker_factory(DEFINES)
    host, port = broker.address("jms")
    out = tmp_path / "stomp.txt"
    slow = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.egress_consumer", f"stomp://{host}:{port}",
         "/topic/egress.prices", str(out)],
        cwd=str(REPO_ROOT), env=broker_environment(), stdout=subprocess.PIPE, text=True)
    try:
        assert slow.stdout.readline().strip() == "ready"
        os.kill(slow.pid, signal.SIGSTOP)
        run_in_threads([lambda: produce(broker, range(COUNT))], timeout=120)
        stalled = wait_until(lambda: client_of(broker, passfile, "guest"),
                             "the stalled client in show client * stats queue")
        assert stalled["protocol"] == "stomp"
        d1 = next(q for q in stalled["queues"] if q["queue"] == "D-1")
        assert d1["discards"] > 0 and d1["length_units"] <= 100, d1
    finally:
        os.kill(slow.pid, signal.SIGCONT)
    assert slow.wait(timeout=120) == 0
    rows = [tuple(map(int, line.split())) for line in out.read_text().splitlines()]
    seqs = [seq for seq, _ in rows]
    assert seqs == sorted(seqs) and len(seqs) < COUNT
    gaps = {seqs[i] for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1}
    assert gaps, "the stalled subscriber lost nothing"
    assert {seq for seq, flagged in rows if flagged} == gaps
