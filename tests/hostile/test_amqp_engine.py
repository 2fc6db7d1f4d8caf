"""Hostile AMQP clients against the real broker: the engine's limits hold end to end
(S10.4, S2.2).

Each offender is mqgate's own AMQP engine (or raw bytes) on a plain socket, doing what a
hostile client would: churning links, passing the announced handle-max, cutting a large
frame into 1-byte reads, asking for heart-beats every millisecond, flooding bytes before
its login, starting multi-frame deliveries it never finishes, shutting its session
window under a busy subscription. For each one, while it acts, a probe client on its own
connection keeps its round trip under 100 ms; the offender gets the named error the
spec or the setting prescribes; and the broker's memory stays within the budget plus a
constant.
"""

import socket
import time

import pytest

from mqgate.amqp.connection import Connection
from mqgate.amqp.events import (
    ConnectionClosed, DeliveriesSettled, LinkAttached, MessageReceived,
    SessionBegun,
)
from mqgate.amqp.frames import AMQP_HEADER, SASL_HEADER, FrameReader, frame_header
from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import (
    ATTACH, CLOSE, DETACH, RECEIVER, SENDER, SND_SETTLED, Attach, Close, Detach, Flow,
    Open, SaslInit, SaslOutcome, Source, Target, Transfer,
)
from mqgate.amqp.types import Symbol

from tests.amqp.helpers import decode_stream, frame, performatives_of
from tests.hostile.probe import broker_rss, wait_until

pytestmark = pytest.mark.slow

MiB = 1 << 20
FRAMING_ERROR = Symbol("amqp:connection:framing-error")
LIMIT = Symbol("amqp:resource-limit-exceeded")


class Offender:
    """A hostile AMQP client: mqgate's engine on a raw socket, driven by the test.

    @ivar events: every event its engine reported.
    @ivar eof: the broker closed the socket.
    """

    def __init__(self, broker, name="offender", credentials=("guest", "guest"), **kwargs):
        self.sock = socket.create_connection(broker.address("jms"), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.engine = Connection(server=False, container_id=name, credentials=credentials,
                                 **({"idle_timeout": None} | kwargs))
        self.events = []
        self.received = 0
        self.eof = False

    def flush(self):
        data = self.engine.data_to_send()
        if data:
            self.sock.settimeout(10.0)   # reads leave a short timeout behind
            self.sock.sendall(data)

    def read(self, timeout=0.5):
        """Read once (up to C{timeout} seconds); feed the engine."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 18)
        except TimeoutError:
            return
        except ConnectionError:
            data = b""
        if not data:
            self.eof = True
            return
        self.received += len(data)
        self.events += self.engine.receive_data(data)

    def until(self, predicate, what, timeout=30.0):
        """Flush and read until C{predicate()} is true."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.eof or time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s (eof={self.eof}, "
                                     f"last events {self.events[-3:]})")
            self.flush()
            self.read()

    def count(self, kind):
        return sum(1 for e in self.events if isinstance(e, kind))

    def opened(self):
        """Wait for the broker's open; begin a session and return it once begun."""
        self.until(lambda: self.engine.ready, "the broker's open")
        session = self.engine.begin_session()
        self.until(lambda: self.count(SessionBegun), "the broker's begin")
        return session

    def closed_with(self, timeout=30.0):
        """Wait for the broker's close; return its error."""
        self.until(lambda: self.count(ConnectionClosed), "the broker's close", timeout)
        return [e for e in self.events if isinstance(e, ConnectionClosed)][0].error

    def close(self):
        self.sock.close()


def probing(broker, probe):
    """A running AMQP probe that has made a few round trips already."""
    watcher = probe(broker, protocol="amqp")
    wait_until(lambda: len(watcher.samples) >= 5, 10, "the probe's first round trips")
    return watcher


def check_probe(watcher):
    """A few more round trips after the offender acted, then the 100 ms limit."""
    count = len(watcher.samples)
    wait_until(lambda: len(watcher.samples) >= count + 5, 10, "round trips after")
    watcher.assert_responsive(limit=0.1)


def rss_mib(broker):
    return broker_rss(broker) / MiB


def attach_producers(offender, session, count, prefix, address="queue://hostile.churn"):
    """Attach C{count} sending links in one write and wait for every answer."""
    before = offender.count(LinkAttached)
    links = []
    for i in range(count):
        link = session.attach_link(f"{prefix}-{i}", SENDER)
        link.attach(source=Source(), target=Target(address=address))
        links.append(link)
    offender.until(lambda: offender.count(LinkAttached) >= before + count,
                   f"{count} attaches answered")
    return links


class RawCounter:
    """Counts the broker's frames by performative on a socket the engine no longer
    drives (cheap for the offender, so the churn measures the broker, not the client).
    """

    def __init__(self, sock):
        self.sock = sock
        self.reader = FrameReader(1 << 20)
        self.counts = {}
        self.bodies = []

    def until(self, code, count, what, timeout=30.0):
        """Read until C{count} frames of performative C{code} have come."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while self.counts.get(code, 0) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            data = self.sock.recv(1 << 18)
            if not data:
                raise AssertionError(f"{what}: the broker closed the connection")
            for _, _, body in self.reader.feed(data):
                if len(body) > 2:
                    self.counts[body[2]] = self.counts.get(body[2], 0) + 1
                    self.bodies.append(bytes(body))


def test_attach_detach_churn_and_handle_max(broker, probe):
    """65,536 attach/detach cycles on one session, pipelined 256 at a time, keep every
    other client served and the broker's memory flat; an attach above the announced
    handle-max then closes the offender's connection with
    amqp:connection:framing-error naming the setting."""
    watcher = probing(broker, probe)
    offender = Offender(broker)
    session = offender.opened()
    channel = session.channel
    batch = 256
    attaches = b"".join(
        frame(Attach(name=f"c{h}", handle=h, role=SENDER, source=Source(),
                     target=Target(address="queue://hostile.churn"),
                     initial_delivery_count=0), channel) for h in range(batch))
    detaches = b"".join(frame(Detach(handle=h, closed=True), channel) for h in range(batch))
    raw = RawCounter(offender.sock)
    baseline = rss_mib(broker)
    for round_ in range(65536 // batch):
        offender.sock.sendall(attaches)
        raw.until(ATTACH, batch * (round_ + 1), "the attaches answered")
        offender.sock.sendall(detaches)
        raw.until(DETACH, batch * (round_ + 1), "the detaches answered")
    grown = rss_mib(broker) - baseline
    offender.sock.sendall(frame(Attach(name="far", handle=1024, role=SENDER,
                                       source=Source(), target=Target(address="q"),
                                       initial_delivery_count=0), channel))
    raw.until(CLOSE, 1, "the broker's close")
    close = performatives_of(decode_stream(
        frame_header(len(raw.bodies[-1])) + raw.bodies[-1]), Close)[0]
    check_probe(watcher)
    assert close.error.condition == FRAMING_ERROR
    assert "handle-max 1023" in close.error.description
    assert "mqgate.amqp.handle_max" in close.error.description
    assert grown < 40, f"the broker grew by {grown:.0f} MiB over the churn"


def test_large_frame_in_one_byte_segments(broker, probe):
    """A 1 MiB transfer frame sent one byte per segment is read in linear time: other
    clients are served throughout and the message arrives whole."""
    watcher = probing(broker, probe)
    offender = Offender(broker)
    session = offender.opened()
    (link,) = attach_producers(offender, session, 1, "bytewise")
    offender.until(lambda: link.credit > 0, "producer credit")
    body = bytes(MiB - 200)
    transfer = bytearray()
    Transfer(handle=link.handle, delivery_id=0, delivery_tag=b"1", message_format=0,
             settled=True).encode(transfer)
    payload = encode_message(body)
    data = frame_header(len(transfer) + len(payload), session.channel) + transfer + payload
    assert len(data) <= MiB
    start = time.monotonic()
    for i in range(len(data)):
        offender.sock.send(data[i:i + 1])
    sent_in = time.monotonic() - start
    receiver = Offender(broker, name="reader")
    rsession = receiver.opened()
    rlink = rsession.attach_link("reader", RECEIVER)
    rlink.attach(source=Source(address="queue://hostile.churn"), target=Target())
    receiver.until(lambda: receiver.count(LinkAttached), "the reader's attach")
    rlink.flow(1)
    receiver.until(lambda: receiver.received > len(body), "the 1 MiB message", timeout=60)
    check_probe(watcher)
    assert not offender.eof, f"sent in {sent_in:.1f} s"


def test_one_millisecond_idle_timeout_gets_one_heartbeat_a_second(broker, probe):
    """A client announcing an idle-time-out of 1 ms gets empty frames at the broker's
    floor (one a second by default), not four thousand a second."""
    watcher = probing(broker, probe)
    offender = Offender(broker, idle_timeout=0.001)
    offender.opened()
    start = offender.received
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        offender.read(0.1)
    heartbeats = (offender.received - start) // 8
    check_probe(watcher)
    assert 2 <= heartbeats <= 6, heartbeats


def sasl_init(user, password):
    body = bytearray()
    SaslInit(mechanism=Symbol("PLAIN"),
             initial_response=b"\0" + user.encode() + b"\0" + password.encode()).encode(body)
    return frame_header(len(body), 0, 1) + bytes(body)


def flood(sock, data, total, piece=64 << 10):
    """Send C{total} bytes of C{data}'s kind in C{piece}s, reading whatever the broker
    says in between (read once it has closed, its answer could be lost to the reset
    that our unread bytes cause); return C{(what it said, bytes sent)} once it closed
    or all was sent."""
    answer = bytearray()
    sent = 0
    while True:
        sock.settimeout(0.0)
        try:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return bytes(answer), sent
            answer += chunk
        except BlockingIOError:
            pass
        except ConnectionError:
            return bytes(answer), sent
        if sent >= total:
            break
        sock.settimeout(10.0)
        try:
            sock.sendall(data[:piece])
        except ConnectionError:
            return bytes(answer), sent
        sent += piece
    return bytes(answer) + read_all(sock), sent


def read_all(sock, timeout=10.0):
    """Everything the broker writes until it closes the socket."""
    sock.settimeout(timeout)
    out = bytearray()
    while True:
        try:
            data = sock.recv(1 << 16)
        except ConnectionError:
            return bytes(out)
        if not data:
            return bytes(out)
        out += data


def test_bytes_before_login_are_capped(broker, probe):
    """Eight sockets each trying to send 32 MiB behind their SASL init, while the broker
    checks the password, are dropped long before (the broker does not hold their bytes);
    a client stopping just past the budget reads the SASL outcome naming the setting."""
    watcher = probing(broker, probe)
    baseline = rss_mib(broker)
    socks = []
    for _ in range(8):
        sock = socket.create_connection(broker.address("jms"), timeout=10)
        sock.sendall(SASL_HEADER + sasl_init("guest", "guest"))
        socks.append(sock)
    junk = bytes(64 << 10)
    sent = []
    for sock in socks:
        sent.append(flood(sock, junk, 32 * MiB)[1])
        sock.close()
    grown = rss_mib(broker) - baseline
    # One byte over the budget (16 KiB by default), and nothing more: the broker reads
    # all of it, so its answer is not lost to a reset for unread bytes.
    login = SASL_HEADER + sasl_init("guest", "guest")
    sock = socket.create_connection(broker.address("jms"), timeout=10)
    sock.sendall(login + bytes(16385 - len(login)))
    answer = read_all(sock)
    sock.close()
    check_probe(watcher)
    assert max(sent) < 16 * MiB, [n // MiB for n in sent]
    outcome = performatives_of(decode_stream(answer[8:]), SaslOutcome)[0]
    assert outcome.code == 2
    assert b"mqgate.authentication.client.max_bytes" in outcome.additional_data
    assert grown < 20, f"the broker grew by {grown:.0f} MiB"


def test_bytes_before_an_anonymous_login_get_a_close(broker_factory):
    """Without SASL, a client flooding before its anonymous login is answered with an
    open and a close carrying amqp:resource-limit-exceeded."""
    broker = broker_factory({"mqgate.jms.allow_anonymous": "true"})   # guests (S4.2)
    sock = socket.create_connection(broker.address("jms"), timeout=10)
    sock.sendall(AMQP_HEADER)
    answer, _ = flood(sock, bytes(64 << 10), MiB, piece=4096)
    sock.close()
    frames = decode_stream(answer)
    assert frames[0] == ("header", AMQP_HEADER)
    assert isinstance(frames[1][1], Open)
    assert frames[2][1].error.condition == LIMIT


def start_unfinished_deliveries(broker, links=40, chunk=512 << 10, rounds=4):
    """A guest starting a multi-frame delivery on each of C{links} links and adding
    C{chunk}-byte frames to all of them, finishing none; returns the broker's close
    error and the most the broker grew meanwhile (MiB over where it started)."""
    baseline = rss_mib(broker)
    offender = Offender(broker)
    session = offender.opened()
    producers = attach_producers(offender, session, links, "partial")
    offender.until(lambda: all(link.credit > 0 for link in producers), "producer credit")
    data = bytes(chunk)
    peak = 0
    for round_ in range(rounds):
        for i, link in enumerate(producers):
            transfer = Transfer(handle=link.handle, more=True)
            if round_ == 0:
                transfer = Transfer(handle=link.handle, delivery_id=i,
                                    delivery_tag=b"%d" % i, message_format=0,
                                    settled=True, more=True)
            try:
                offender.sock.sendall(frame(transfer, session.channel, data))
            except ConnectionError:
                break
            peak = max(peak, rss_mib(broker) - baseline)
        offender.read(0.05)
        if offender.eof or offender.count(ConnectionClosed):
            break
    error = offender.closed_with()
    offender.close()
    return error, peak


def test_unfinished_multi_frame_deliveries_are_bounded_per_connection(broker_factory,
                                                                      probe):
    """A guest starting multi-frame deliveries on 40 links and finishing none is closed
    with amqp:resource-limit-exceeded naming mqgate.ingress.partial.max_bytes once they
    hold more than that together; the broker grows by about the budget, and a second
    offender after the first reuses that memory rather than adding to it; others are
    served throughout."""
    broker = broker_factory({"mqgate.ingress.partial.max_bytes": "16m"})
    watcher = probing(broker, probe)
    baseline = rss_mib(broker)
    error, peak = start_unfinished_deliveries(broker)
    again, _ = start_unfinished_deliveries(broker)
    grown = rss_mib(broker) - baseline
    check_probe(watcher)
    for refusal in (error, again):
        assert refusal.condition == LIMIT
        assert "mqgate.ingress.partial.max_bytes" in refusal.description
    assert peak < 16 + 16, f"the broker grew by {peak:.0f} MiB"
    assert grown < 16 + 16, f"the broker grew by {grown:.0f} MiB after two offenders"


def publish(producer, link, body, count, last):
    """Send C{count} pre-settled copies of C{body} on C{link}, as credit allows, then
    C{last} unsettled: its outcome says the broker has routed all of them."""
    sent = 0
    while sent < count:
        producer.until(lambda: link.credit > 0, "producer credit")
        while link.credit > 0 and sent < count:
            link.send(body, settled=True)
            sent += 1
            if sent % 50 == 0:
                producer.flush()
        producer.flush()
        producer.read(0.01)
    producer.until(lambda: link.credit > 0, "producer credit")
    before = producer.count(DeliveriesSettled)
    link.send(last, settled=False)
    producer.until(lambda: producer.count(DeliveriesSettled) > before,
                   "the last message's outcome")


def test_shut_session_window_under_a_busy_subscription(broker, probe):
    """A pre-settled topic://# subscriber with a million credit whose session window
    stays shut (incoming window 0) while 200 MiB are published: the broker holds for it
    no more than its egress queues' depth (40 MiB by default: about 400 of these
    messages, the oldest discarded), where it used to pile every transfer up in the
    session; when the window opens, that is what arrives, the newest message last;
    every other client is served throughout.
"""
    watcher = probing(broker, probe)
    offender = Offender(broker)
    session = offender.opened()
    link = session.attach_link("everything", RECEIVER)
    link.attach(source=Source(address="topic://#"), target=Target(),
                snd_settle_mode=SND_SETTLED)
    offender.until(lambda: offender.count(LinkAttached), "the subscriber's attach")
    # A million credit, then the window shut: next-incoming-id as far as the broker
    # has sent, incoming-window 0.
    link.flow(1_000_000)
    offender.flush()
    offender.sock.sendall(frame(Flow(next_incoming_id=session.next_incoming_id,
                                     incoming_window=0,
                                     next_outgoing_id=session.next_outgoing_id,
                                     outgoing_window=1000), session.channel))
    producer = Offender(broker, name="producer")
    psession = producer.opened()
    (plink,) = attach_producers(producer, psession, 1, "topic", "topic://hostile.t")
    last = encode_message(b"the newest")
    baseline = rss_mib(broker)
    publish(producer, plink, encode_message(bytes(100 << 10)), 2000, last)
    grown = rss_mib(broker) - baseline
    check_probe(watcher)
    assert grown < 40 + 40, f"the broker grew by {grown:.0f} MiB"
    # Open the window and take what the broker kept.
    offender.sock.sendall(frame(Flow(next_incoming_id=session.next_incoming_id,
                                     incoming_window=1_000_000,
                                     next_outgoing_id=session.next_outgoing_id,
                                     outgoing_window=1000), session.channel))
    received = []
    offender.until(lambda: _payloads(offender, received) and
                   received[-1].endswith(b"the newest"), "the newest message")
    assert len(received) <= 450, f"the broker held {len(received)} messages"
    assert len(received) >= 100


def _payloads(offender, received):
    """Collect the payloads of messages received so far into C{received}."""
    events, offender.events = offender.events, []
    received += [e.payload for e in events if isinstance(e, MessageReceived)]
    return bool(received)
