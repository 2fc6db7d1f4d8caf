"""Bad input gets a clear AMQP error, and the broker goes on serving others (S10.4).

Two kinds of peer misbehave here: a raw socket that speaks broken AMQP (built and read
with mqgate's own frame and codec modules, so the test sees exactly what went over the
wire), and Proton clients that ask for things the broker must refuse (a missing queue,
an oversize message).
"""

import socket
import time

import pytest
from proton import Message, ProtonException
from proton.utils import LinkDetached

from mqgate.amqp import codec
from mqgate.amqp.frames import (
    AMQP_HEADER, SASL_FRAME, SASL_HEADER, FrameReader, encode_frame, split_body)
from mqgate.amqp.performatives import (
    Close, Open, SaslInit, SaslMechanisms, SaslOutcome, encode_composite, from_described)
from mqgate.amqp.types import Symbol

from tests.e2e.proton_client import DEFAULT_TIMEOUT, opened, receive_all

NOT_FOUND = "amqp:not-found"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
#: The conditions that say "your bytes make no sense" (Part 2 sections 2.8.15, 2.8.16).
BROKEN_STREAM = ("amqp:decode-error", "amqp:connection:framing-error")


class RawPeer:
    """A plain TCP socket speaking AMQP by hand, every read bounded by a deadline."""

    def __init__(self, address, timeout=DEFAULT_TIMEOUT):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.timeout = timeout
        self.reader = FrameReader(1 << 24)
        self.frames = []
        self.pending = b""  # bytes read but not yet framed (protocol headers)

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _recv(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            return self.sock.recv(65536)
        except ConnectionResetError:
            return b""

    def read_header(self):
        """The 8-byte protocol header the broker sends first."""
        deadline = time.monotonic() + self.timeout
        while len(self.pending) < 8:
            data = self._recv(deadline)
            if not data:
                raise AssertionError(f"closed after {self.pending!r}, no protocol header")
            self.pending += data
        header, rest = self.pending[:8], self.pending[8:]
        self.pending = b""
        self.frames.extend(self.reader.feed(rest))
        return header

    def read_performative(self):
        """The next non-empty frame's performative (heart-beats are skipped)."""
        deadline = time.monotonic() + self.timeout
        while True:
            while self.frames:
                _type, _channel, body = self.frames.pop(0)
                if len(body):
                    value, _payload = split_body(body, codec.decode)
                    return from_described(value)
            data = self._recv(deadline)
            if not data:
                raise AssertionError("the broker closed the socket before the next frame")
            self.frames.extend(self.reader.feed(data))

    def read_until_closed(self):
        """Everything the broker sends until it closes the socket (within the timeout)."""
        deadline = time.monotonic() + self.timeout
        received = self.pending
        while time.monotonic() < deadline:
            try:
                data = self._recv(deadline)
            except socket.timeout:
                break
            if not data:
                return received
            received += data
        raise AssertionError(f"socket still open after {self.timeout} s; got {received!r}")

    def sasl_login_then_open(self):
        """Do the SASL PLAIN exchange (admin) and the open handshake correctly."""
        self.send(SASL_HEADER)
        assert self.read_header() == SASL_HEADER
        mechanisms = self.read_performative()
        assert isinstance(mechanisms, SaslMechanisms)
        self.send(encode_frame(encode_composite(SaslInit(
            mechanism=Symbol("PLAIN"), initial_response=b"\x00admin\x00admin")),
            frame_type=SASL_FRAME))
        outcome = self.read_performative()
        assert isinstance(outcome, SaslOutcome) and outcome.code == 0, outcome
        self.send(AMQP_HEADER + encode_frame(encode_composite(
            Open(container_id="raw-peer", max_frame_size=65536))))
        assert self.read_header() == AMQP_HEADER
        opened_ = self.read_performative()
        assert isinstance(opened_, Open), opened_


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker for the garbage tests: each breaks only its own connection, which is
    what they show."""
    return module_broker_factory()


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: mqgate\r\n\r\n",
    b"AMQP\x09\x09\x09\x09",
    b"\x00" * 64,
])
def test_garbage_instead_of_a_protocol_header_gets_ours_and_a_close(broker, garbage):
    """S10.4/S10.1: bytes that are no AMQP header get the broker's header, then EOF."""
    peer = RawPeer(broker.address())
    try:
        peer.send(garbage)
        answer = peer.read_until_closed()
    finally:
        peer.close()
    assert answer[:8] in (AMQP_HEADER, SASL_HEADER), answer
    assert len(answer) == 8, f"nothing but the header is expected: {answer!r}"


@pytest.mark.parametrize("name,frame", [
    ("unknown constructor", encode_frame(b"\xff\xfe\xfd")),
    ("unknown descriptor", encode_frame(b"\x00\x53\x7f\x45")),
    ("truncated list", encode_frame(b"\x00\x53\x10\xc0\x10\x05\xa1")),
    ("bad frame header", b"\x00\x00\x00\x04\x02\x00\x00\x00"),
])
def test_garbage_frame_after_open_gets_a_close_with_an_error(broker, name, frame):
    """S10.4: a broken frame after a good open is answered by close(error), then EOF."""
    with opened(broker) as bystander:
        peer = RawPeer(broker.address())
        try:
            peer.sasl_login_then_open()
            peer.send(frame)
            close = peer.read_performative()
            rest = peer.read_until_closed()
        finally:
            peer.close()
        assert isinstance(close, Close), f"{name}: expected close, got {close!r}"
        assert close.error is not None, f"{name}: close without an error"
        assert str(close.error.condition) in BROKEN_STREAM, close.error
        assert close.error.description, close.error
        assert rest == b"", f"{name}: bytes after close: {rest!r}"
        # Another client was connected all along and still works.
        queue = "queue://bystander-" + name.replace(" ", "-")
        bystander.create_sender(queue).send(Message(body=name))
        [got] = receive_all(bystander.create_receiver(queue), 1)
        assert got.body == name


def test_receiver_on_missing_queue_is_refused_with_not_found(broker_factory):
    """S10.4/S2.1: with auto-creation off, attaching to a missing queue gets not-found."""
    broker = broker_factory({"mqgate.autocreate.queue": "false"})
    with opened(broker) as conn:
        with pytest.raises(LinkDetached) as info:
            conn.create_receiver("queue://no-such-queue")
        assert info.value.condition == NOT_FOUND, str(info.value)
        # The refusal ends that link only; the connection goes on.
        topic = conn.create_receiver("topic://still-fine")
        conn.create_sender("topic://still-fine").send(Message(body="alive"))
        assert topic.receive(timeout=DEFAULT_TIMEOUT).body == "alive"


def test_oversize_message_is_refused_and_others_keep_working(broker_factory):
    """S2.2/S10.4: a message above mqgate.message.max_size gets message-size-exceeded."""
    broker = broker_factory({"mqgate.message.max_size": "64k"})
    with opened(broker) as conn:
        sender = conn.create_sender("queue://limited")
        assert sender.link.remote_max_message_size == 64 * 1024
        with pytest.raises(ProtonException) as info:
            sender.send(Message(body=b"x" * (64 * 1024 + 1)))
        assert getattr(info.value, "condition", None) == MESSAGE_SIZE_EXCEEDED, \
            str(info.value)
        # message-size-exceeded is a link error (Part 2 section 2.8.18): the link is
        # detached, the connection stays open.
        assert isinstance(info.value, LinkDetached), \
            f"the connection was closed instead of the link detached: {info.value}"
        conn.create_sender("queue://limited", name="small").send(
            Message(body=b"y" * 1000))
        [small] = receive_all(conn.create_receiver("queue://limited"), 1)
        assert bytes(small.body) == b"y" * 1000


def test_other_connections_keep_working_after_an_oversize_message(broker_factory):
    """S10.4: whatever the broker does to the offender, another connection is unaffected."""
    broker = broker_factory({"mqgate.message.max_size": "64k"})
    with opened(broker) as bystander:
        receiver = bystander.create_receiver("queue://unaffected", credit=2)
        bystander.create_sender("queue://unaffected").send(Message(body="before"))
        with opened(broker) as offender:
            with pytest.raises(ProtonException):
                offender.create_sender("queue://unaffected").send(
                    Message(body=b"x" * (128 * 1024)))
        bystander.create_sender("queue://unaffected", name="later").send(
            Message(body="after"))
        got = [receiver.receive(timeout=DEFAULT_TIMEOUT).body for _ in range(2)]
        receiver.accept()
        receiver.accept()
    assert got == ["before", "after"]
