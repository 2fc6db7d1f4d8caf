"""Tests for the Twisted AMQP adapter: EngineProtocol with AmqpServerFactory, Flusher.

Every connection here is a protocol on a StringTransport with a task.Clock; the peer is
a client-side engine (docs/design.md: no sockets, no reactor, no sleeps). Bytes move only when
a test calls L{Peer.pump}, so a test can tell whether the adapter wrote something on its
own (a flush, a heart-beat, a close) or because the peer spoke.
"""

import pytest
from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.amqp import conditions as c
from mqgate.amqp.connection import Connection
from mqgate.amqp.events import ConnectionOpened, MessageReceived, SaslCompleted
from mqgate.amqp.frames import AMQP_HEADER, EMPTY_FRAME, SASL_HEADER
from mqgate.amqp.message import Properties, encode_message, parse_message
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Accepted, Attach, Close, Detach, Disposition, Open, SaslOutcome,
    Source, Target,
)
from mqgate.amqp.types import Symbol
from mqgate.config import Settings
from mqgate.core.broker import Broker
from mqgate.glue.amqp import GlueConfig
from mqgate.net.amqp import AmqpServerFactory, Flusher
from mqgate.net.engine import EngineProtocol
from mqgate.security.auth import AuthenticationFailed, Principal
from tests.amqp.helpers import decode_stream, frame, performatives_of, raw_frame

ADMIN = Principal("admin", {"admin"})
HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"


class FakeAuthenticator:
    """An authenticator whose answers the test gives, when it wants to.

    @ivar requests: C{(credentials, Deferred)} per call; credentials is C{(user,
        password)} or C{None} for an anonymous login.
    """

    def __init__(self):
        self.requests = []

    def authenticate(self, username, password, source=None, service=None):
        d = defer.Deferred()
        self.requests.append(((username, password), d))
        return d

    def authenticate_anonymous(self, source=None, service=None):
        d = defer.Deferred()
        self.requests.append((None, d))
        return d

    def succeed_all(self, principal=ADMIN):
        """Answer every pending request with C{principal}."""
        pending, self.requests = self.requests, []
        for _credentials, d in pending:
            d.callback(principal)


class Peer:
    """One AMQP connection to the factory: a protocol on a StringTransport, and a client
    engine standing in for the remote end.

    @ivar written: every byte the protocol wrote, in order (for L{frames}).
    @ivar events: every event the client engine reported.
    """

    def __init__(self, factory, *, port=40000, **client_kwargs):
        self.factory = factory
        self.protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
        self.transport = StringTransport(
            peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        self.protocol.makeConnection(self.transport)
        kwargs = {"server": False, "container_id": f"peer-{port}",
                  "credentials": ("admin", "admin"), "idle_timeout": None}
        kwargs.update(client_kwargs)
        self.client = Connection(**kwargs)
        self.written = bytearray()
        self.events = []

    def collect(self):
        """Hand what the protocol wrote to the client engine; return those events."""
        data = self.transport.value()
        self.transport.clear()
        self.written += data
        events = self.client.receive_data(data) if data else []
        self.events += events
        return events

    def pump(self, rounds=20):
        """Move bytes both ways until both ends are quiet."""
        for _ in range(rounds):
            moved = bool(self.collect())
            data = self.client.data_to_send()
            if data:
                moved = True
                self.protocol.dataReceived(data)
            if not moved and not self.transport.value():
                return
        raise AssertionError("the connection never went quiet")

    def frames(self, since=0):
        """The frames the protocol wrote (from byte offset C{since})."""
        return decode_stream(bytes(self.written[since:]))

    def performatives(self, kind=None, since=0):
        return performatives_of(self.frames(since), kind)

    def lose(self):
        """The transport reports the connection gone."""
        self.protocol.connectionLost(Failure(ConnectionDone()))


class Harness:
    """A factory with a fake authenticator, a core broker, a Flusher and one Clock."""

    def __init__(self, tmp_path, overrides=None, **factory_kwargs):
        self.clock = task.Clock()
        self.settings = Settings.from_properties([], overrides or {}, varhome=str(tmp_path))
        self.broker = Broker(self.clock)
        self.authenticator = FakeAuthenticator()
        self.flusher = Flusher(self.clock)
        kwargs = {"container_id": "mqgate:test"} | factory_kwargs
        self.factory = AmqpServerFactory(
            settings=self.settings, broker=self.broker, authenticator=self.authenticator,
            clock=self.clock, flusher=self.flusher, glue_config=GlueConfig(), **kwargs)

    def connect(self, **kwargs):
        return Peer(self.factory, **kwargs)

    def opened(self, **kwargs):
        """A peer past SASL PLAIN (answered with admin) and the open exchange."""
        peer = self.connect(**kwargs)
        peer.pump()
        self.authenticator.succeed_all()
        self.clock.advance(0)  # the SASL outcome is written by the Flusher
        peer.pump()
        assert any(isinstance(e, ConnectionOpened) for e in peer.events), peer.events
        return peer


@pytest.fixture
def harness(tmp_path):
    return Harness(tmp_path)


def attach(peer, role, address, credit=0, name=None, **terminus):
    """Begin a session (once per peer) and attach a link; return the client's link."""
    sessions = peer.client.sessions
    session = sessions[0] if sessions else peer.client.begin_session()
    link = session.attach_link(name or f"{address}-{'rcv' if role else 'snd'}", role)
    source = terminus.get("source", Source(address=address))
    target = terminus.get("target", Target(address=address))
    link.attach(source=source, target=target)
    peer.pump()
    if credit:
        link.flow(credit)
        peer.pump()
    return link


def run_for(clock, seconds, step=0.25):
    """Advance C{clock} in small steps, as a reactor would run: one big C{advance} runs
    every due call at the final time, so a timer would see its "now" late."""
    end = clock.seconds() + seconds
    while clock.seconds() + step < end:
        clock.advance(step)
    clock.advance(end - clock.seconds())


def received(peer):
    return [e for e in peer.events if isinstance(e, MessageReceived)]


def closes(peer, since=0):
    return peer.performatives(Close, since)


# -- a whole exchange -------------------------------------------------------------------


def test_sasl_waits_for_the_authenticator_then_open_is_answered(harness):
    """SASL PLAIN credentials go to the authenticator; nothing past the mechanisms is
    written until its Deferred fires, then the outcome and our open follow (S4.2)."""
    peer = harness.connect()
    peer.pump()
    assert [creds for creds, _d in harness.authenticator.requests] == [("admin", "admin")]
    mark = len(peer.written)
    harness.clock.advance(5)
    peer.pump()
    assert len(peer.written) == mark
    harness.authenticator.succeed_all()
    harness.clock.advance(0)
    peer.pump()
    assert [e.ok for e in peer.events if isinstance(e, SaslCompleted)] == [True]
    assert [e for e in peer.events if isinstance(e, ConnectionOpened)]
    assert isinstance(peer.protocol, EngineProtocol)
    assert peer.protocol.glue.principal == ADMIN
    assert not peer.transport.disconnecting


def test_message_from_another_connection_is_flushed_without_consumer_input(harness):
    """A message sent on one connection is written to the consumer's transport by the
    Flusher at the next reactor turn, with no byte from the consumer (regression: a
    delivery caused by another connection must be flushed)."""
    consumer = harness.opened(port=40001)
    producer = harness.opened(port=40002)
    attach(consumer, RECEIVER, "q1", credit=10)
    sender = attach(producer, SENDER, "q1")
    assert sender.credit > 0
    sender.send(encode_message(b"hello", properties=Properties(message_id="m1")),
                settled=False)
    producer.protocol.dataReceived(producer.client.data_to_send())
    assert consumer.transport.value() == b""
    harness.clock.advance(0)
    assert consumer.transport.value() != b""
    events = consumer.collect()
    messages = [e for e in events if isinstance(e, MessageReceived)]
    assert len(messages) == 1
    assert parse_message(messages[0].payload).properties.message_id == "m1"
    assert not consumer.transport.disconnecting


def test_producer_gets_accepted_and_credit_topped_up(harness):
    """An unsettled transfer is answered with accepted, and a producer that used half
    its credit is given the full amount again (S8.1, S2.7)."""
    harness.factory.glue_config = GlueConfig(producer_credit=4)
    producer = harness.opened()
    sender = attach(producer, SENDER, "q1")
    assert sender.credit == 4
    delivery = sender.send(encode_message(b"x"), settled=False)
    producer.pump()
    dispositions = producer.performatives(Disposition)
    assert [(d.first, type(d.state)) for d in dispositions] == [(delivery, Accepted)]
    assert sender.credit == 3
    sender.send(encode_message(b"y"), settled=True)
    producer.pump()
    assert sender.credit == 4
    assert harness.broker.queue("q1").depth == 2


# -- authentication ---------------------------------------------------------------------


def test_authentication_failure_writes_outcome_auth_and_drops(harness):
    """A refused login is answered with SASL outcome code 1 (auth) and the transport is
    lost; no open is ever written (S4.2, Part 5 section 5.3.3.6)."""
    peer = harness.connect()
    peer.pump()
    (_creds, d), = harness.authenticator.requests
    d.errback(AuthenticationFailed("admin", "wrong password"))
    harness.clock.advance(0)
    peer.collect()
    outcomes = peer.performatives(SaslOutcome)
    assert [o.code for o in outcomes] == [1]
    assert peer.transport.disconnecting
    assert [e.ok for e in peer.events if isinstance(e, SaslCompleted)] == [False]
    assert not peer.performatives(Open)


def test_anonymous_login_asks_the_authenticator(harness):
    """SASL ANONYMOUS goes to authenticate_anonymous and its principal is kept (S4.2)."""
    peer = harness.connect(credentials="ANONYMOUS")
    peer.pump()
    assert [creds for creds, _d in harness.authenticator.requests] == [None]
    guest = Principal("guest", {"anonymous"}, anonymous=True)
    harness.authenticator.succeed_all(guest)
    harness.clock.advance(0)
    peer.pump()
    assert peer.protocol.glue.principal == guest
    assert [e for e in peer.events if isinstance(e, ConnectionOpened)]


def test_admin_only_service_refuses_a_user_outside_group_admin(tmp_path):
    """On an admin service a user not in group admin logs in (SASL outcome ok), and
    its open is answered with open and a close carrying amqp:unauthorized-access: an
    authorization error, not a failed login (S1.1, S4.5)."""
    h = Harness(tmp_path)
    h.factory.glue_config = GlueConfig(admin_only=True, service="admin")
    peer = h.connect()
    peer.pump()
    h.authenticator.succeed_all(Principal("alice", {"user"}))
    h.clock.advance(0)
    peer.pump()
    assert [o.code for o in peer.performatives(SaslOutcome)] == [0]
    assert [type(p) for p in peer.performatives() if type(p) in (Open, Close)] == \
        [Open, Close]
    [close] = peer.performatives(Close)
    assert close.error.condition == c.UNAUTHORIZED_ACCESS
    assert "alice" in close.error.description and "admin" in close.error.description


# -- timers -----------------------------------------------------------------------------


def test_heartbeats_start_at_the_open(harness):
    """A peer advertising idle-time-out 4000 ms gets an empty frame about 1 s after the
    open, not at the set-up deadline (regression, S1.7, Part 2 section 2.4.5)."""
    peer = harness.opened(idle_timeout=4.0)
    assert peer.performatives(Open)[0].idle_time_out == 60000
    assert peer.transport.value() == b""
    harness.clock.advance(0.5)
    assert peer.transport.value() == b""
    harness.clock.advance(0.5)
    assert peer.transport.value() == HEARTBEAT == EMPTY_FRAME
    peer.transport.clear()
    harness.clock.advance(1.0)
    assert peer.transport.value() == HEARTBEAT
    assert not peer.transport.disconnecting


def test_heartbeats_start_at_an_open_pipelined_behind_sasl(harness):
    """An open that arrived behind the SASL init, while the authenticator was busy, starts
    the heart-beats when it is processed, as an open read on its own does (S1.7)."""
    peer = harness.connect()
    peer.pump()
    pipelined = Connection(server=False, container_id="pipelining", idle_timeout=4.0)
    peer.protocol.dataReceived(pipelined.data_to_send())  # AMQP header + open, held
    harness.authenticator.succeed_all()
    harness.clock.advance(0)
    after_sasl = decode_stream(peer.transport.value())
    assert isinstance(after_sasl[-1][1], Open)
    peer.transport.clear()
    run_for(harness.clock, 1.0)
    assert peer.transport.value() == HEARTBEAT


def test_no_heartbeats_when_the_peer_has_no_idle_timeout(harness):
    """A peer without idle-time-out is sent no empty frames (Part 2 section 2.4.5)."""
    peer = harness.opened()
    harness.clock.advance(30)
    assert peer.transport.value() == b""


def test_silent_peer_is_closed_after_our_idle_timeout(tmp_path):
    """With mqgate.amqp.idle_timeout=10, a peer silent after the open is sent a close
    with amqp:resource-limit-exceeded after 10 s and the transport is lost (S1.7)."""
    h = Harness(tmp_path, {"mqgate.amqp.idle_timeout": "10"})
    peer = h.opened()
    assert peer.performatives(Open)[0].idle_time_out == 10000
    mark = len(peer.written)
    run_for(h.clock, 9.5)
    assert peer.transport.value() == b""
    assert not peer.transport.disconnecting
    run_for(h.clock, 0.5)
    peer.collect()
    (close,) = closes(peer, mark)
    assert close.error.condition == c.RESOURCE_LIMIT_EXCEEDED
    assert peer.transport.disconnecting


def test_idle_close_counts_from_the_last_frame(tmp_path):
    """A peer whose last frame (an attach) came 1 s after the open is closed about 10 s
    after that frame, not a whole idle timeout later (S1.7: "silent beyond the
    negotiated idle timeout"); a quarter of the timeout is allowed for tick granularity."""
    h = Harness(tmp_path, {"mqgate.amqp.idle_timeout": "10"})
    peer = h.opened()
    h.clock.advance(1)
    attach(peer, RECEIVER, "q1", credit=1)
    last_frame = h.clock.seconds()
    run_for(h.clock, 9.9)
    assert not peer.transport.disconnecting
    run_for(h.clock, 2.5)
    assert peer.transport.disconnecting, (
        f"still open {h.clock.seconds() - last_frame:g} s after the peer's last frame")
    peer.collect()
    assert [cl.error.condition for cl in closes(peer)] == [c.RESOURCE_LIMIT_EXCEEDED]


def test_peer_traffic_resets_our_idle_timeout(tmp_path):
    """Any frame from the peer, a heart-beat too, keeps the connection alive (S1.7)."""
    h = Harness(tmp_path, {"mqgate.amqp.idle_timeout": "10"})
    peer = h.opened()
    for _ in range(3):
        h.clock.advance(8)
        peer.protocol.dataReceived(EMPTY_FRAME)
    assert not closes(peer)
    assert not peer.transport.disconnecting


def test_idle_timeout_gives_unsettled_deliveries_back(tmp_path):
    """Deliveries a timed-out connection left unsettled go back to the queue and reach
    the next consumer with delivery-count raised (S1.7, design rule 3)."""
    h = Harness(tmp_path, {"mqgate.amqp.idle_timeout": "10"})
    silent = h.opened(port=40001)
    attach(silent, RECEIVER, "q1", credit=5)
    producer = h.opened(port=40002)
    sender = attach(producer, SENDER, "q1")
    sender.send(encode_message(b"one"), settled=False)
    producer.pump()
    h.clock.advance(0)
    silent.collect()
    assert len(received(silent)) == 1
    queue = h.broker.queue("q1")
    assert (queue.depth, queue.in_flight) == (0, 1)
    run_for(h.clock, 20)  # how soon: test_idle_close_counts_from_the_last_frame
    assert silent.transport.disconnecting
    silent.lose()  # the reactor reports the transport gone
    assert (queue.depth, queue.in_flight) == (1, 0)
    again = h.opened(port=40003)
    attach(again, RECEIVER, "q1", credit=5)
    h.clock.advance(0)
    again.collect()
    (message,) = received(again)
    assert parse_message(message.payload).header.delivery_count == 1


def test_connection_without_open_is_closed_at_the_setup_deadline(tmp_path):
    """A connection that never sends anything is dropped after
    mqgate.authentication.client.response.timeout seconds."""
    h = Harness(tmp_path, {"mqgate.authentication.client.response.timeout": "5"})
    peer = h.connect()
    h.clock.advance(4.9)
    assert not peer.transport.disconnecting
    h.clock.advance(0.1)
    assert peer.transport.disconnecting
    assert h.clock.getDelayedCalls() == []


def test_header_without_open_gets_a_close_at_the_setup_deadline(tmp_path):
    """A peer past SASL that sends the AMQP header but no open is sent open + close
    (amqp:unauthorized-access: it never finished logging in) at the login deadline,
    and dropped."""
    h = Harness(tmp_path, {"mqgate.authentication.client.response.timeout": "5"})
    peer = h.connect()
    peer.pump()
    h.authenticator.succeed_all()
    h.clock.advance(0)
    peer.collect()
    header_and_open = peer.client.data_to_send()
    assert header_and_open[:8] == AMQP_HEADER
    peer.protocol.dataReceived(header_and_open[:8])
    mark = len(peer.written)
    h.clock.advance(5)
    peer.collect()
    assert [type(p) for p in peer.performatives(since=mark)] == [Open, Close]
    error = closes(peer, mark)[0].error
    assert error.condition == c.UNAUTHORIZED_ACCESS and "not logged in" in error.description
    assert peer.transport.disconnecting


def _deadline_harness(tmp_path):
    return Harness(tmp_path, {"mqgate.authentication.client.response.timeout": "5"})


def test_a_client_without_sasl_init_hears_auth_at_the_login_deadline(tmp_path):
    """A client that sent its SASL header and never its credentials gets a SASL outcome
    "auth" saying it was not logged in in time, at the login deadline, and is dropped
    (S4.2; Part 5 section 5.3.3.6)."""
    h = _deadline_harness(tmp_path)
    peer = h.connect()
    peer.protocol.dataReceived(SASL_HEADER)
    mark = len(peer.transport.value())
    h.clock.advance(5)
    outcomes = decode_stream(peer.transport.value()[mark:])
    assert [o.code for o in performatives_of(outcomes, SaslOutcome)] == [1]
    assert b"not logged in" in performatives_of(outcomes, SaslOutcome)[0].additional_data
    assert peer.transport.disconnecting


def test_a_client_whose_check_is_pending_hears_sys_temp_at_the_login_deadline(tmp_path):
    """A client whose password check has not answered by the login deadline gets a SASL
    outcome "sys-temp" (the broker did not finish; it may try again), and the late
    answer writes nothing more (S4.2)."""
    h = _deadline_harness(tmp_path)
    peer = h.connect()
    peer.pump()
    assert h.authenticator.requests
    mark = len(peer.written)
    h.clock.advance(5)
    peer.collect()
    (outcome,) = peer.performatives(SaslOutcome, mark)
    assert outcome.code == 4 and b"not logged in" in outcome.additional_data
    assert [e.ok for e in peer.events if isinstance(e, SaslCompleted)] == [False]
    assert peer.transport.disconnecting
    h.authenticator.succeed_all()
    h.clock.advance(0)
    assert peer.transport.value() == b""


def test_an_anonymous_client_without_sasl_hears_a_close_at_the_login_deadline(tmp_path):
    """A client that came without SASL (its anonymous login still being checked) gets
    our header, an open and a close with amqp:unauthorized-access at the deadline."""
    h = _deadline_harness(tmp_path)
    peer = h.connect(credentials=None)
    peer.pump()
    assert h.authenticator.requests == [(None, h.authenticator.requests[0][1])]
    h.clock.advance(5)
    peer.collect()
    assert [type(p) for p in peer.performatives()] == [Open, Close]
    error = closes(peer)[0].error
    assert error.condition == c.UNAUTHORIZED_ACCESS and "not logged in" in error.description
    assert peer.transport.disconnecting


def test_shutdown_during_sasl_says_sys_temp(harness):
    """A broker shutting down while a client's password is checked tells it with a SASL
    outcome "sys-temp" naming the shutdown (S0.4)."""
    peer = harness.connect()
    peer.pump()
    mark = len(peer.written)
    harness.factory.shutdown()
    peer.collect()
    (outcome,) = peer.performatives(SaslOutcome, mark)
    assert outcome.code == 4 and b"shutting down" in outcome.additional_data
    assert peer.transport.disconnecting


def test_connection_lost_cancels_the_tick(harness):
    """After connectionLost no delayed call of the connection remains on the clock."""
    peer = harness.opened(idle_timeout=4.0)
    assert harness.clock.getDelayedCalls() != []
    peer.lose()
    assert harness.clock.getDelayedCalls() == []
    assert peer.protocol not in harness.factory.connections


def test_connection_lost_before_open_cancels_the_deadline(harness):
    """A connection lost during SASL leaves no set-up deadline behind."""
    peer = harness.connect()
    peer.pump()
    peer.lose()
    assert harness.clock.getDelayedCalls() == []
    # A late authentication answer for a lost connection writes nothing and raises nothing.
    harness.authenticator.succeed_all()
    harness.clock.advance(0)
    assert peer.transport.value() == b""


# -- errors and shutdown ----------------------------------------------------------------


def test_garbage_after_open_closes_only_that_connection(harness):
    """Bytes that are not a frame get a close with an error condition and the transport
    is dropped; another connection of the same factory goes on working (S10.1)."""
    other = harness.opened(port=40001)
    bad = harness.opened(port=40002)
    mark = len(bad.written)
    bad.protocol.dataReceived(raw_frame(b"\xff" * 8))  # 0xff is no type code
    bad.collect()
    (close,) = closes(bad, mark)
    assert close.error.condition == c.DECODE_ERROR
    assert bad.transport.disconnecting
    bad.lose()
    attach(other, RECEIVER, "q1", credit=1)
    sender = attach(other, SENDER, "q1")
    sender.send(encode_message(b"still here"), settled=True)
    other.pump()
    harness.clock.advance(0)
    other.pump()
    assert len(received(other)) == 1
    assert not other.transport.disconnecting


def test_factory_shutdown_closes_every_connection_with_connection_forced(harness):
    """factory.shutdown() writes a close with amqp:connection:forced on every open
    connection and drops each transport (S0.4)."""
    peers = [harness.opened(port=40001 + i) for i in range(2)]
    marks = [len(p.written) for p in peers]
    harness.factory.shutdown()
    for peer, mark in zip(peers, marks):
        peer.collect()
        (close,) = closes(peer, mark)
        assert close.error.condition == c.CONNECTION_FORCED
        assert peer.transport.disconnecting
    for peer in peers:
        peer.lose()
    assert harness.factory.connections == set()
    assert harness.clock.getDelayedCalls() == []


def test_no_transfer_after_our_close(harness):
    """Once we have sent our close, a message routed from another connection is not
    written behind it (Part 2 section 2.7.9: no frames after close); it stays in the
    queue, not in flight to a connection that is going away (rule 3)."""
    victim = harness.opened(port=40001)
    attach(victim, RECEIVER, "q1", credit=5)
    producer = harness.opened(port=40002)
    sender = attach(producer, SENDER, "q1")
    victim.protocol.shutdown()
    victim.collect()
    mark = len(victim.written)
    assert victim.transport.disconnecting
    sender.send(encode_message(b"late"), settled=False)
    producer.pump()
    harness.clock.advance(0)
    victim.collect()
    assert victim.performatives(since=mark) == []
    queue = harness.broker.queue("q1")
    assert (queue.depth, queue.in_flight) == (1, 0)


def test_open_and_close_in_one_read_after_sasl(harness):
    """An open and a close arriving in the same read after SASL are answered with open
    and close, without an exception (regression)."""
    peer = harness.connect()
    peer.pump()
    harness.authenticator.succeed_all()
    harness.clock.advance(0)
    peer.collect()
    mark = len(peer.written)
    peer.protocol.dataReceived(peer.client.data_to_send() + frame(Close()))
    peer.collect()
    assert [type(p) for p in peer.performatives(since=mark)] == [Open, Close]
    assert closes(peer, mark)[0].error is None
    assert peer.transport.disconnecting


# -- links ------------------------------------------------------------------------------


def test_sender_without_target_is_the_anonymous_relay(harness):
    """A sender attach with no target at all (rhea's open_sender()) is accepted and each
    message is routed by its `to` (ANONYMOUS-RELAY)."""
    peer = harness.opened()
    offered = peer.performatives(Open)[0].offered_capabilities or ()
    assert Symbol("ANONYMOUS-RELAY") in offered
    attach(peer, RECEIVER, "q2", credit=1)
    session = peer.client.sessions[0]
    sender = session.attach_link("relay", SENDER)
    sender.attach(source=Source(), target=None)
    peer.pump()
    replies = [a for a in peer.performatives(Attach) if a.name == "relay"]
    assert len(replies) == 1 and replies[0].target is None
    assert not peer.performatives(Detach)
    assert sender.credit > 0
    sender.send(encode_message(b"routed", properties=Properties(to="q2")), settled=False)
    peer.pump()
    harness.clock.advance(0)
    peer.pump()
    (message,) = received(peer)
    assert parse_message(message.payload).properties.to == "q2"
    assert [type(d.state) for d in peer.performatives(Disposition)] == [Accepted]


def test_flusher_writes_each_marked_connection_once_per_turn():
    """Flusher.mark schedules one call per reactor turn however many marks it gets."""
    clock = task.Clock()
    flusher = Flusher(clock)
    flushed = []

    class Marked:
        def __init__(self, name):
            self.name = name

        def flush(self):
            flushed.append(self.name)

    a, b = Marked("a"), Marked("b")
    for target in (a, b, a, a):
        flusher.mark(target)
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(0)
    assert sorted(flushed) == ["a", "b"]
    flusher.mark(a)
    flusher.stop()
    assert clock.getDelayedCalls() == []
