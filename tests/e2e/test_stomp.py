"""STOMP 1.0/1.1/1.2 on the real broker, with stomp.py and raw sockets (S10.2, S10.4).

One broker serves the whole module (it starts in half a second, but the tests are many);
every test uses destinations and names of its own (L{unique}), so the tests do not see
each other's messages. The broker's shipped configuration has a STOMP-only service
(C{stomp}) and the sniffing C{jms} service; the malformed-input tests run on both.

"Nothing else arrives" is never checked by waiting for a while: the test sends a marker
message behind the ones that must not come back, on the same queue, and checks that the
marker is the first (or next) thing the consumer sees. A queue hands messages out in
order, and the marker is sent only after the earlier connection has gone (DISCONNECT with
a receipt), when anything it gave back is on the queue already; so a message wrongly
kept or wrongly redelivered shows up before the marker.
"""

import socket
import time

import pytest

from tests.e2e.stomp_client import (
    DeadlineExceeded, RawStomp, clients, unique,
)

VERSIONS = ("1.0", "1.1", "1.2")
#: The services that take STOMP: the STOMP-only one and the sniffing one (S1.1).
SERVICES = ("stomp", "jms")


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker for the module, on the shipped configuration and OS-chosen ports, with
    1 s STOMP heart-beats so the heart-beat tests take seconds, not tens of them."""
    return module_broker_factory({"mqgate.stomp.heartbeat": "1000"},
                                 listening=("stomp", "jms"))


@pytest.fixture
def address(broker):
    """The STOMP-only service's C{(host, port)}."""
    return broker.address("stomp")


@pytest.fixture
def open_client():
    """Open stomp.py clients (L{tests.e2e.stomp_client.open_client}); closed after."""
    with clients() as open_:
        yield open_


def expect_marker_next(client, destination, sender=None):
    """Send a marker to C{destination} and wait until C{client} receives it.

    @param sender: the client that sends the marker (default: C{client}).
    @return: the bodies C{client} received up to the marker, the marker last; a
        test asserts on what came before it.
    """
    marker = unique("marker").encode()
    (sender or client).send(destination, marker)
    client.collector.wait_for_body(marker)
    received = client.collector.bodies()
    return received[:received.index(marker) + 1]


# -- round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_queue_round_trip(address, open_client, version):
    """S10.2: a SEND to /queue/X reaches a subscriber with its body and custom headers."""
    queue = f"/queue/{unique('rt')}"
    client = open_client(address, version)
    client.subscribe(queue)
    client.send(queue, b"hello \x00 world", colour="blue")
    [message] = client.collector.wait_for_messages(1)
    assert bytes(message.body) == b"hello \x00 world"
    assert message.headers["colour"] == "blue"
    assert message.headers["destination"] == queue
    assert message.headers["message-id"]


@pytest.mark.parametrize("version", VERSIONS)
def test_topic_round_trip_two_subscribers(address, open_client, version):
    """S10.2, S2.1: a SEND to /topic/X reaches every subscriber of the topic once."""
    topic = f"/topic/{unique('rt')}"
    first = open_client(address, version, name="first")
    second = open_client(address, version, name="second")
    first.subscribe(topic)
    second.subscribe(topic)
    first.send(topic, b"one")
    first.send(topic, b"two")
    for client in (first, second):
        client.collector.wait_for_messages(2)
        assert client.collector.bodies() == [b"one", b"two"]
        assert client.messages[0].headers["destination"] == topic


# -- ack modes ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_ack_auto_is_at_most_once(address, open_client, version):
    """S10.2: with ack:auto a message is consumed on delivery: never redelivered."""
    queue = f"/queue/{unique('auto')}"
    consumer = open_client(address, version)
    consumer.subscribe(queue, ack="auto")
    consumer.send(queue, b"m1")
    consumer.collector.wait_for_messages(1)
    consumer.disconnect()
    again = open_client(address, version)
    again.subscribe(queue, ack="client-individual")
    assert len(expect_marker_next(again, queue)) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_ack_client_is_cumulative(address, open_client, version):
    """S10.2: with ack:client, an ACK of the 3rd of 3 messages acknowledges all three."""
    queue = f"/queue/{unique('client')}"
    consumer = open_client(address, version)
    consumer.subscribe(queue, ack="client")
    for body in (b"m1", b"m2", b"m3"):
        consumer.send(queue, body)
    messages = consumer.collector.wait_for_messages(3)
    assert [bytes(m.body) for m in messages] == [b"m1", b"m2", b"m3"]
    consumer.ack(messages[2])
    consumer.disconnect()
    again = open_client(address, version)
    again.subscribe(queue, ack="client")
    assert len(expect_marker_next(again, queue)) == 1  # none of the three came back


@pytest.mark.parametrize("version", VERSIONS)
def test_ack_client_individual_acks_one_message(address, open_client, version):
    """S10.2: with ack:client-individual an ACK settles only the message it names; the
    unacknowledged one comes back to the next subscriber with redelivered:true."""
    queue = f"/queue/{unique('individual')}"
    consumer = open_client(address, version)
    consumer.subscribe(queue, ack="client-individual")
    for body in (b"m1", b"m2", b"m3"):
        consumer.send(queue, body)
    messages = consumer.collector.wait_for_messages(3)
    consumer.ack(messages[0])
    consumer.ack(messages[2])
    consumer.disconnect()
    again = open_client(address, version)
    again.subscribe(queue, ack="client-individual")
    received = expect_marker_next(again, queue)
    assert received[0] == b"m2" and len(received) == 2, received
    assert again.messages[0].headers.get("redelivered") == "true"
    assert "redelivered" not in again.messages[1].headers


@pytest.mark.parametrize("version", ("1.1", "1.2"))
def test_nack_redelivers_with_redelivered_header(address, open_client, version):
    """S10.2: a NACKed message is delivered again, to the next consumer in line, with
    redelivered:true."""
    queue = f"/queue/{unique('nack')}"
    client = open_client(address, version)
    # Two consumers with room for one message each: whichever gets the message first,
    # the other (or the same one, its credit back) is next in line for it.
    client.subscribe(queue, ack="client-individual", **{"activemq.prefetchSize": "1"})
    client.subscribe(queue, ack="client-individual", **{"activemq.prefetchSize": "1"})
    client.send(queue, b"m1")
    [message] = client.collector.wait_for_messages(1)
    assert "redelivered" not in message.headers
    client.nack(message)
    first, again = client.collector.wait_for_messages(2)
    assert bytes(again.body) == b"m1"
    assert again.headers.get("redelivered") == "true"
    client.ack(again)
    assert len(expect_marker_next(client, queue)) == 3


# -- transactions ------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_transactional_send_is_held_until_commit(address, open_client, version):
    """S10.2: a SEND inside a transaction is not delivered before COMMIT, and is after."""
    queue = f"/queue/{unique('tx')}"
    consumer = open_client(address, version, name="consumer")
    consumer.subscribe(queue)
    producer = open_client(address, version, name="producer")
    tx = unique("tx")
    producer.frame("begin", tx)
    producer.send(queue, b"in-tx", transaction=tx)
    # The marker is sent after the transactional SEND, outside the transaction: had
    # the SEND been published, it would be delivered before the marker.
    assert len(expect_marker_next(consumer, queue, sender=producer)) == 1
    producer.frame("commit", tx)
    consumer.collector.wait_for_body(b"in-tx")
    assert consumer.collector.bodies()[-1] == b"in-tx"


@pytest.mark.parametrize("version", VERSIONS)
def test_abort_discards_transactional_sends(address, open_client, version):
    """S10.2: ABORT throws away the SENDs of the transaction: nothing is delivered."""
    queue = f"/queue/{unique('abort')}"
    consumer = open_client(address, version, name="consumer")
    consumer.subscribe(queue)
    producer = open_client(address, version, name="producer")
    tx = unique("tx")
    producer.frame("begin", tx)
    producer.send(queue, b"aborted-1", transaction=tx)
    producer.send(queue, b"aborted-2", transaction=tx)
    producer.frame("abort", tx)
    assert len(expect_marker_next(consumer, queue, sender=producer)) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_ack_in_aborted_transaction_leaves_message_unacknowledged(
        address, open_client, version):
    """S10.2: an ACK inside a transaction that is aborted has no effect: the message is
    redelivered after the consumer disconnects."""
    queue = f"/queue/{unique('txack')}"
    consumer = open_client(address, version)
    consumer.subscribe(queue, ack="client-individual")
    consumer.send(queue, b"m1")
    [message] = consumer.collector.wait_for_messages(1)
    tx = unique("tx")
    consumer.frame("begin", tx)
    consumer.ack(message, transaction=tx)
    consumer.frame("abort", tx)
    consumer.disconnect()
    again = open_client(address, version)
    again.subscribe(queue, ack="client-individual")
    received = expect_marker_next(again, queue)
    assert received[0] == b"m1" and len(received) == 2, received
    assert again.messages[0].headers.get("redelivered") == "true"


@pytest.mark.parametrize("version", VERSIONS)
def test_ack_in_committed_transaction_takes_effect(address, open_client, version):
    """S10.2: an ACK inside a committed transaction settles the message."""
    queue = f"/queue/{unique('txack')}"
    consumer = open_client(address, version)
    consumer.subscribe(queue, ack="client-individual")
    consumer.send(queue, b"m1")
    [message] = consumer.collector.wait_for_messages(1)
    tx = unique("tx")
    consumer.frame("begin", tx)
    consumer.ack(message, transaction=tx)
    consumer.frame("commit", tx)
    consumer.disconnect()
    again = open_client(address, version)
    again.subscribe(queue, ack="client-individual")
    assert len(expect_marker_next(again, queue)) == 1


# -- receipts ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_receipts_for_send_subscribe_disconnect(address, open_client, version):
    """S10.2: SUBSCRIBE, SEND and DISCONNECT with a receipt header are each answered by a
    RECEIPT naming it; the DISCONNECT receipt comes before the broker closes."""
    queue = f"/queue/{unique('receipt')}"
    client = open_client(address, version)
    conn, collector = client.connection, client.collector
    conn.subscribe(queue, id="s1", ack="auto", headers={"receipt": "r-subscribe"})
    collector.wait_for_receipt("r-subscribe")
    conn.send(queue, b"m1", headers={"receipt": "r-send"})
    collector.wait_for_receipt("r-send")
    collector.wait_for_messages(1)
    conn.disconnect(receipt="r-disconnect")
    collector.wait_for_receipt("r-disconnect")
    collector.wait_for(lambda: collector.disconnected, "disconnection")
    assert collector.receipts == ["r-subscribe", "r-send", "r-disconnect"]
    assert collector.errors == []


def test_wrong_password_gets_error(address):
    """S4.2, S10.2: a CONNECT with a wrong passcode is answered with an ERROR naming the
    authentication failure, and the connection is closed."""
    raw = RawStomp(address)
    try:
        raw.send(b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:admin\n"
                 b"passcode:wrong\n\n\x00")
        frames = raw.read_until_closed()
    finally:
        raw.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "authentication" in frames[0].get("message"), frames[0]


# -- heart-beats -------------------------------------------------------------------------

def test_heartbeats_keep_an_idle_connection_open(address, open_client):
    """S10.2: a client that negotiated heart-beats stays connected while idle for 3 s and
    can still exchange messages afterwards."""
    queue = f"/queue/{unique('idle')}"
    client = open_client(address, "1.2", heartbeats=(1000, 1000))
    collector = client.collector
    assert collector.connected.headers.get("heart-beat", "0,0") != "0,0"
    client.subscribe(queue)
    # The clock of this test: a wait for the connection to break, which must not end.
    with pytest.raises(DeadlineExceeded):
        collector.wait_for(
            lambda: collector.disconnected or collector.heartbeat_timeout or
            collector.errors, "a broken connection", timeout=3.0)
    assert client.connection.is_connected()
    client.send(queue, b"still here")
    collector.wait_for_body(b"still here")


def test_silent_client_gets_heartbeat_error(address):
    """S10.2, S10.4: a client that promised heart-beats and then goes silent is sent an
    ERROR and disconnected, no sooner than one agreed interval and within a few."""
    raw = RawStomp(address)
    try:
        connected = raw.connect("1.2", "heart-beat:500,0")
        assert connected.command == "CONNECTED"
        # The agreed interval is the larger of what we offer (500 ms) and what the
        # broker wants (the second number of its heart-beat header). The broker asks
        # for 10 s and has no setting to change that, so this test takes 20 s.
        wanted = int(connected.get("heart-beat", "0,0").split(",")[1])
        interval = max(500, wanted) / 1000.0
        assert interval > 0
        start = time.monotonic()
        error = raw.read_frame(timeout=3 * interval + 2)
        elapsed = time.monotonic() - start
        assert error.command == "ERROR"
        assert "heart-beat" in error.get("message"), error
        assert elapsed >= interval, elapsed
        raw.read_until_closed()
    finally:
        raw.close()


# -- prefetch ----------------------------------------------------------------------------

@pytest.mark.parametrize("header", ("activemq.prefetchSize", "prefetch-count"))
def test_prefetch_limits_unacknowledged_messages(address, open_client, header):
    """S10.2, S6.2: with a prefetch of 2 and client acks, a consumer holds at most two
    unacknowledged messages; an ACK lets the next one in."""
    queue = f"/queue/{unique('prefetch')}"
    producer = open_client(address, "1.2", name="producer")
    limited = open_client(address, "1.2", name="limited")
    limited.subscribe(queue, ack="client-individual", **{header: "2"})
    for n in range(1, 5):
        producer.send(queue, f"m{n}".encode())
    first_two = limited.collector.wait_for_messages(2)
    assert [bytes(m.body) for m in first_two] == [b"m1", b"m2"]
    # A competing consumer with room for one takes m3: had the limited consumer been
    # sent more than two, m3 would be gone already.
    other = open_client(address, "1.2", name="other")
    other.subscribe(queue, ack="client-individual", **{header: "1"})
    [m3] = other.collector.wait_for_messages(1)
    assert bytes(m3.body) == b"m3"
    assert len(limited.messages) == 2
    limited.ack(first_two[0])
    limited.collector.wait_for_body(b"m4")
    assert limited.collector.bodies() == [b"m1", b"m2", b"m4"]


# -- durable subscriptions ---------------------------------------------------------------

@pytest.mark.parametrize("header",
                         ("activemq.subscriptionName", "durable-subscription-name"))
def test_durable_subscription_keeps_backlog(address, open_client, header):
    """S2.9, S10.2: a durable topic subscription (client-id + subscription name) survives
    a disconnect and delivers what was published meanwhile."""
    topic = f"/topic/{unique('durable')}"
    client_id = unique("client")
    name = unique("sub")
    subscriber = open_client(address, "1.2", **{"client-id": client_id})
    subscriber.subscribe(topic, ack="client-individual", **{header: name})
    subscriber.disconnect()
    producer = open_client(address, "1.2", name="producer")
    for body in (b"b1", b"b2", b"b3"):
        producer.send(topic, body)
    back = open_client(address, "1.2", name="back", **{"client-id": client_id})
    back.subscribe(topic, ack="client-individual", **{header: name})
    back.collector.wait_for_messages(3)
    assert back.collector.bodies() == [b"b1", b"b2", b"b3"]


# -- malformed input ---------------------------------------------------------------------

#: The body limit of the STOMP frame parser (mqgate.stomp.frames.FrameLimits).
MAX_BODY = 64 * 1024 * 1024
CONNECT_12 = (b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:admin\n"
              b"passcode:admin\n\n\x00")


MALFORMED = {
    # name: (bytes after CONNECT, expected words in the ERROR message header)
    "content-length body without NUL":
        (b"SEND\ndestination:/queue/malformed\ncontent-length:3\n\nabcX\x00",
         "malformed frame"),
    "oversize header line":
        (b"SEND\ndestination:/queue/malformed\nbig:" + b"x" * 9000 + b"\n\n\x00",
         "header line longer than 8192"),
    "bad escape in 1.2":
        (b"SEND\ndestination:/queue/malformed\nbad:a\\tb\n\n\x00",
         "undefined escape sequence"),
    "unknown command":
        (b"FROB\nfoo:bar\n\n\x00", "unknown command"),
    "binary noise after CONNECT":
        (bytes(range(128, 256)) * 4 + b"\n\n\x00", "malformed frame"),
}


def assert_still_serving(address, open_client):
    """A stomp.py client on the same service still does a round trip."""
    queue = f"/queue/{unique('after')}"
    client = open_client(address, "1.2", name="after")
    client.subscribe(queue)
    client.send(queue, b"alive")
    client.collector.wait_for_body(b"alive")


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_gets_error(broker, open_client, service, case):
    """S10.4: malformed bytes after CONNECT get an ERROR whose message header names the
    problem, the connection is closed, and the broker goes on serving others."""
    data, expected = MALFORMED[case]
    address = broker.address(service)
    raw = RawStomp(address)
    try:
        # CONNECT and the bad bytes in one write: the broker holds what follows the
        # CONNECT until it has answered it, then parses it.
        raw.send(CONNECT_12 + data)
        assert raw.read_frame().command == "CONNECTED"
        frames = raw.read_until_closed()
    finally:
        raw.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert expected in frames[0].get("message"), frames[0]
    assert_still_serving(address, open_client)


def test_unmappable_header_gets_error(address, open_client):
    """S10.4: a SEND whose header AMQP cannot carry (a non-ASCII content-type: AMQP
    symbols are ASCII) gets an ERROR naming the header, not a silent disconnect."""
    raw = RawStomp(address, timeout=5)
    try:
        raw.send(CONNECT_12)
        assert raw.read_frame().command == "CONNECTED"
        raw.send("SEND\ndestination:/queue/malformed\ncontent-type:téxt/plain\n"
                 "receipt:r1\n\nhi\x00".encode("utf-8"))
        frames = raw.read_until_closed()
    finally:
        raw.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "header" in frames[0].get("message"), frames[0]
    assert frames[0].get("receipt-id") == "r1"
    assert_still_serving(address, open_client)


@pytest.mark.parametrize("service", SERVICES)
def test_body_without_nul_past_the_limit_gets_error(broker, open_client, service):
    """S10.4: a frame body with no NUL that grows past the body limit is refused with an
    ERROR naming the limit as soon as it passes it."""
    address = broker.address(service)
    raw = RawStomp(address, timeout=30)
    try:
        raw.send(CONNECT_12)
        assert raw.read_frame().command == "CONNECTED"
        raw.send(b"SEND\ndestination:/queue/malformed\n\n")
        # Exactly one octet more than the limit, and no NUL: the broker reads it all
        # before it answers, so its close is a clean one and the ERROR is not lost.
        chunk = b"x" * (1 << 20)
        for _ in range(MAX_BODY // len(chunk)):
            raw.send(chunk)
        raw.send(b"x")
        frames = raw.read_until_closed()
    finally:
        raw.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].get("message") == "CLIENT_CLIENT_MESSAGE_TOO_BIG", frames[0]
    assert_still_serving(address, open_client)


@pytest.mark.parametrize("service", SERVICES)
def test_eof_inside_a_frame_delivers_nothing(broker, open_client, service):
    """S10.4: a connection that ends in the middle of a SEND (no NUL yet) is closed and
    the partial frame is not delivered."""
    address = broker.address(service)
    queue = f"/queue/{unique('eof')}"
    consumer = open_client(address, "1.2")
    consumer.subscribe(queue)
    raw = RawStomp(address)
    try:
        raw.send(CONNECT_12)
        assert raw.read_frame().command == "CONNECTED"
        raw.send(f"SEND\ndestination:{queue}\n\npartial body".encode())
        raw.sock.shutdown(socket.SHUT_WR)
        raw.read_until_closed()
    finally:
        raw.close()
    assert len(expect_marker_next(consumer, queue)) == 1
