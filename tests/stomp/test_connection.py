"""Tests of the STOMP server connection engine (S10.2, S10.4, docs/design.md-P4)."""

import pytest

from mqgate.errors import ConfigError
from mqgate.stomp.connection import (
    DEFAULT_UNAUTHENTICATED_BYTES, HEARTBEAT_TOLERANCE, StompConnection, StompState,
)
from mqgate.stomp.errors import FrameError, StompLocalError, StompProtocolError
from mqgate.stomp.events import (
    Abort, Ack, Begin, Commit, ConnectRequested, Disconnect, Nack, Send, Subscribe,
    Unsubscribe,
)
from mqgate.stomp.frames import HEARTBEAT, FrameLimits, FrameParser, encode_frame


# -- a hand-written client side ------------------------------------------------------------

def frame(command, *headers, body=b"", version="1.2"):
    """Client frame bytes; headers given as "name:value" strings (split at the first colon)."""
    pairs = [tuple(h.split(":", 1)) for h in headers]
    return encode_frame(command, pairs, body, version)


def read(conn):
    """Parse what the server wrote, as frames (heart-beat EOLs kept as HEARTBEAT)."""
    parser = FrameParser(conn.version or "1.0")
    items = parser.feed(conn.data_to_send())
    while parser.paused:
        items += parser.resume(conn.version or "1.0")
    return items


def connect(accept_version="1.0,1.1,1.2", *extra, accept=True, **kwargs):
    """A connection after CONNECT (and accept() unless told not to); output drained."""
    conn = StompConnection(**kwargs)
    headers = [f"accept-version:{accept_version}"] if accept_version is not None else []
    headers += ["host:localhost", *extra]
    events = conn.receive_data(frame("CONNECT", *headers, version="1.0"))
    assert isinstance(events[0], ConnectRequested), read(conn)
    if accept:
        conn.accept("sess-1")
        conn.data_to_send()
    return conn


def assert_error(conn, message, receipt_id=None):
    """The connection wrote one ERROR frame with this message (and receipt-id) and finished."""
    (error,) = [f for f in read(conn) if f is not HEARTBEAT]
    assert error.command == "ERROR"
    assert error.get("message") == message
    assert error.get("receipt-id") == receipt_id
    assert conn.finished and conn.state is StompState.DISCONNECTED
    return error


# -- connecting ----------------------------------------------------------------------------

@pytest.mark.parametrize("accept_version,expected", [
    (None, "1.0"), ("1.0", "1.0"), ("1.1", "1.1"), ("1.1,1.2", "1.2"),
    ("1.0,1.1,2.0", "1.1"), ("1.2, 1.0", "1.2"),
])
def test_version_negotiation(accept_version, expected):
    """S10.2: the highest version both sides speak is chosen; no accept-version means 1.0."""
    conn = connect(accept_version, accept=False)
    assert conn.version == expected
    conn.accept("s")
    (connected,) = read(conn)
    assert connected.command == "CONNECTED" and connected.get("version") == expected


def test_version_negotiation_respects_our_versions():
    """S10.2: a server limited to 1.0 and 1.1 answers a 1.1,1.2 client with 1.1."""
    conn = connect("1.1,1.2", accept=False, versions=("1.0", "1.1"))
    assert conn.version == "1.1"


def test_no_common_version_is_an_error_with_a_version_header():
    """S10.2: no common version -> ERROR listing ours in a version header, finished."""
    conn = StompConnection()
    events = conn.receive_data(frame("CONNECT", "accept-version:1.3", "host:h"))
    assert events == []
    error = assert_error(conn, "unsupported STOMP version")
    assert error.get("version") == "1.0,1.1,1.2"
    assert b"Supported protocol versions are 1.0 1.1 1.2" in error.body
    assert isinstance(conn.error, StompProtocolError)


def test_connect_requested_fields():
    """S10.2: ConnectRequested carries login, passcode, host, version, heart-beat, headers."""
    conn = StompConnection()
    (event,) = conn.receive_data(frame(
        "STOMP", "accept-version:1.2", "host:vh", "login:bob", "passcode:se:cret",
        "heart-beat:1000,2000", version="1.0"))
    assert event == ConnectRequested(
        "bob", "se:cret", "vh", "1.2", (1000, 2000),
        [("accept-version", "1.2"), ("host", "vh"), ("login", "bob"),
         ("passcode", "se:cret"), ("heart-beat", "1000,2000")])
    assert conn.state is StompState.AUTHENTICATING


def test_connect_without_host_is_accepted():
    """S10.2: a CONNECT without host is let in with host None (one virtual host)."""
    conn = StompConnection()
    (event,) = conn.receive_data(frame("CONNECT", "accept-version:1.2"))
    assert event.host is None and event.login is None


def test_connect_headers_are_not_unescaped():
    """S10.2: CONNECT headers are literal: a backslash in a passcode stays a backslash."""
    conn = StompConnection()
    (event,) = conn.receive_data(b"CONNECT\naccept-version:1.2\npasscode:a\\tb\n\n\x00")
    assert event.passcode == "a\\tb"


def test_accept_writes_connected():
    """S10.2: accept() writes CONNECTED with version, heart-beat, session and server."""
    conn = connect("1.2", accept=False, server_name="mqgate/9", heartbeat=(500, 700))
    assert conn.accept("s-42") == []
    (connected,) = read(conn)
    assert connected.headers == [("version", "1.2"), ("heart-beat", "500,700"),
                                 ("session", "s-42"), ("server", "mqgate/9")]
    assert conn.state is StompState.CONNECTED


def test_accept_on_1_0_has_no_heart_beat_header():
    """S10.2: STOMP 1.0 has no heart-beats, so CONNECTED carries none."""
    conn = connect(None, "heart-beat:1000,1000", accept=False)
    conn.accept("s")
    (connected,) = read(conn)
    assert connected.get("heart-beat") is None and connected.get("session") == "s"
    assert (conn.heartbeat_send_ms, conn.heartbeat_receive_ms) == (0, 0)


def test_refuse_writes_error_and_finishes():
    """S10.2: refuse() writes ERROR with the message and detail and finishes."""
    conn = connect(accept=False)
    conn.refuse("access denied", "bad credentials for bob")
    error = assert_error(conn, "access denied")
    assert error.body == b"bad credentials for bob"
    assert conn.error is None  # the client broke no rule


def test_accept_twice_is_a_local_error():
    """P4: accept() outside AUTHENTICATING is the caller's mistake, a StompLocalError."""
    conn = connect()
    with pytest.raises(StompLocalError):
        conn.accept("again")


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE", "CONNECTED", "FOO"])
def test_frames_before_connect_are_an_error(command):
    """S10.2: the first frame must be CONNECT or STOMP; anything else -> ERROR, finished.
    The ERROR comes at the command line, before the headers are read, so it carries no
    receipt-id."""
    conn = StompConnection()
    assert conn.receive_data(frame(command, "destination:/q", "receipt:r1")) == []
    error = assert_error(conn, "not connected")
    assert command.encode() in error.body


def test_a_frame_before_connect_is_refused_at_its_command_line():
    """S10.4: a SEND before CONNECT is refused as soon as its command line is in: its
    headers and body are never waited for."""
    conn = StompConnection()
    conn.receive_data(b"SEND\ndestination:/q\ncontent-length:33554432\n")
    error = assert_error(conn, "not connected")
    assert b"'SEND'" in error.body
    assert conn.receive_data(b"x" * 4096) == [] and conn.data_to_send() == b""


def test_a_big_first_frame_is_refused_after_the_unauthenticated_budget():
    """S10.4: a CONNECT whose headers or body would pass the bytes a client may send
    before it is logged in gets an ERROR once the budget is passed, not at its end."""
    conn = StompConnection(max_unauthenticated_bytes=1024)
    conn.receive_data(b"CONNECT\naccept-version:1.2\nx:" + b"a" * 900)
    assert not conn.finished
    conn.receive_data(b"a" * 200)
    error = assert_error(conn, "too much data before CONNECTED")
    assert b"1024 bytes" in error.body


def test_one_oversized_read_is_refused_without_parsing_it():
    """S10.4: a single read larger than the budget is refused before the parser sees it
    (an oversized CONNECT body sent in one go)."""
    conn = StompConnection(max_unauthenticated_bytes=2048)
    events = conn.receive_data(frame("CONNECT", "accept-version:1.2", body=b"b" * 4096))
    assert events == []
    assert_error(conn, "too much data before CONNECTED")


def test_a_wrong_first_frame_in_an_oversized_read_is_named_as_such():
    """A SEND before CONNECT arriving in one read larger than the budget is reported as
    "not connected" (what is wrong with it), not as too much data."""
    conn = StompConnection(max_unauthenticated_bytes=1024)
    assert conn.receive_data(frame("SEND", "destination:/q", body=b"b" * 4096)) == []
    assert_error(conn, "not connected")


def test_the_budget_ends_with_connected():
    """S10.2: once CONNECTED is written the unauthenticated budget no longer applies:
    a logged-in client may send frames of any size its frame limits allow."""
    conn = connect(max_unauthenticated_bytes=1024)
    (send,) = conn.receive_data(frame("SEND", "destination:/q", body=b"m" * 10000))
    assert len(send.body) == 10000 and not conn.finished


def test_a_nonpositive_budget_is_a_config_error():
    """The budget must be a positive number of bytes."""
    with pytest.raises(ConfigError):
        StompConnection(max_unauthenticated_bytes=0)


def test_frames_pipelined_behind_connect_wait_for_accept():
    """S10.2: frames sent right after CONNECT are held, then reported by accept()."""
    conn = StompConnection()
    data = frame("CONNECT", "accept-version:1.2", "host:h") + frame(
        "SEND", "destination:/q/a:b", body=b"x")
    events = conn.receive_data(data[:-3])
    events += conn.receive_data(data[-3:])
    assert [type(e) for e in events] == [ConnectRequested]
    (send,) = conn.accept("s")
    assert send.destination == "/q/a:b" and send.body == b"x"


def test_too_much_data_before_accept_is_an_error():
    """P5: an unauthenticated client cannot make us hold more than its budget, CONNECT
    frame included."""
    conn = connect(accept=False)
    sent = len(frame("CONNECT", "accept-version:1.0,1.1,1.2", "host:localhost",
                     version="1.0"))
    conn.receive_data(b"x" * (DEFAULT_UNAUTHENTICATED_BYTES - sent))
    assert not conn.finished
    conn.receive_data(b"x")
    assert_error(conn, "too much data before CONNECTED")


def test_connect_twice_is_an_error():
    """S10.2: a second CONNECT on a connected session is an ERROR."""
    conn = connect()
    conn.receive_data(frame("CONNECT", "accept-version:1.2"))
    assert_error(conn, "already connected")


def test_bad_heart_beat_header_is_an_error():
    """S10.2: a heart-beat header that is not two numbers is an ERROR."""
    conn = StompConnection()
    conn.receive_data(frame("CONNECT", "accept-version:1.2", "heart-beat:soon"))
    assert_error(conn, "bad heart-beat header")


def test_configuration_is_checked():
    """P4: bad constructor arguments raise ConfigError naming them."""
    with pytest.raises(ConfigError, match="versions"):
        StompConnection(versions=("1.3",))
    with pytest.raises(ConfigError, match="heartbeat"):
        StompConnection(heartbeat=(-1, 0))
    with pytest.raises(ConfigError, match="server"):
        StompConnection(server=False)


# -- client frames -------------------------------------------------------------------------

V12_FRAMES = [
    (frame("SEND", "destination:/queue/a", "transaction:t1", "receipt:r", "x-y:1",
           body=b"hello\x00"),
     Send("/queue/a", [("destination", "/queue/a"), ("transaction", "t1"),
                       ("receipt", "r"), ("x-y", "1"), ("content-length", "6")],
          b"hello\x00", "t1", "r")),
    (frame("SEND", "receipt:r1", "destination:/q/1", "transaction:t1", "destination:/q/2",
           "receipt:r2", "transaction:t2"),
     Send("/q/1", [("receipt", "r1"), ("destination", "/q/1"), ("transaction", "t1"),
                   ("destination", "/q/2"), ("receipt", "r2"), ("transaction", "t2")],
          b"", "t1", "r1")),
    (frame("SUBSCRIBE", "id:0", "destination:/topic/t", "ack:client-individual",
           "selector:a = 1"),
     Subscribe("0", "/topic/t", "client-individual",
               [("id", "0"), ("destination", "/topic/t"), ("ack", "client-individual"),
                ("selector", "a = 1")], None)),
    (frame("SUBSCRIBE", "id:1", "destination:/q"),
     Subscribe("1", "/q", "auto", [("id", "1"), ("destination", "/q")], None)),
    (frame("UNSUBSCRIBE", "id:0", "receipt:u"), Unsubscribe("0", "u")),
    (frame("ACK", "id:a7", "transaction:t"), Ack("a7", None, None, "t", None)),
    (frame("NACK", "id:a8", "receipt:n"), Nack("a8", None, None, None, "n")),
    (frame("BEGIN", "transaction:t"), Begin("t", None)),
    (frame("COMMIT", "transaction:t", "receipt:c"), Commit("t", "c")),
    (frame("ABORT", "transaction:t"), Abort("t", None)),
]


@pytest.mark.parametrize("data,event", V12_FRAMES)
def test_client_frames_become_events(data, event):
    """S10.2: each client frame becomes its event, with its headers (STOMP 1.2)."""
    conn = connect("1.2")
    assert conn.receive_data(data) == [event]
    assert conn.data_to_send() == b"" and not conn.finished


def test_ack_1_1_uses_message_id_and_subscription():
    """S10.2: in 1.1 ACK/NACK name the message by message-id and subscription."""
    conn = connect("1.1")
    events = conn.receive_data(frame("ACK", "message-id:m1", "subscription:s", version="1.1")
                               + frame("NACK", "message-id:m2", "subscription:s",
                                       version="1.1"))
    assert events == [Ack("m1", "s", "m1", None, None), Nack("m2", "s", "m2", None, None)]


def test_ack_1_0_subscription_is_optional():
    """S10.2: in 1.0 ACK needs only message-id."""
    conn = connect(None)
    assert conn.receive_data(frame("ACK", "message-id:m1", version="1.0")) == [
        Ack("m1", None, "m1", None, None)]


def test_subscribe_1_0_without_id_uses_the_destination():
    """S10.2: a 1.0 SUBSCRIBE without id is named by its destination, as is UNSUBSCRIBE."""
    conn = connect(None)
    events = conn.receive_data(frame("SUBSCRIBE", "destination:/q", version="1.0")
                               + frame("UNSUBSCRIBE", "destination:/q", version="1.0"))
    assert events == [Subscribe("/q", "/q", "auto", [("destination", "/q")], None),
                      Unsubscribe("/q", None)]


def test_frames_are_unescaped_by_the_agreed_version():
    """S10.2: after CONNECTED, headers are unescaped by the agreed version (1.0: not at all)."""
    data = b"SEND\ndestination:/a\\cb\n\n\x00"
    assert connect("1.2").receive_data(data)[0].destination == "/a:b"
    assert connect(None).receive_data(data)[0].destination == "/a\\cb"


@pytest.mark.parametrize("version,data,missing", [
    ("1.2", frame("SEND", "receipt:r1"), "destination"),
    ("1.2", frame("SEND", "destination:", "receipt:r1"), "destination"),
    ("1.2", frame("SUBSCRIBE", "destination:/q", "receipt:r1"), "id"),
    ("1.2", frame("SUBSCRIBE", "id:1", "receipt:r1"), "destination"),
    ("1.2", frame("UNSUBSCRIBE", "receipt:r1"), "id"),
    ("1.2", frame("ACK", "message-id:m", "subscription:s", "receipt:r1"), "id"),
    ("1.1", frame("ACK", "message-id:m", "receipt:r1", version="1.1"), "subscription"),
    ("1.1", frame("NACK", "subscription:s", "receipt:r1", version="1.1"), "message-id"),
    ("1.0", frame("ACK", "receipt:r1", version="1.0"), "message-id"),
    ("1.0", frame("UNSUBSCRIBE", "receipt:r1", version="1.0"), "destination"),
    ("1.2", frame("BEGIN", "receipt:r1"), "transaction"),
    ("1.2", frame("COMMIT", "receipt:r1"), "transaction"),
    ("1.2", frame("ABORT", "receipt:r1"), "transaction"),
])
def test_missing_required_header_is_an_error(version, data, missing):
    """S10.2: a missing required header -> ERROR naming it, with receipt-id, finished."""
    conn = connect(version if version != "1.0" else None)
    assert conn.receive_data(data) == []
    error = assert_error(conn, f"missing header {missing!r}", "r1")
    assert data.split(b"\n")[0] in error.body


def test_bad_ack_mode_is_an_error():
    """S10.2: an ack mode other than auto, client, client-individual -> ERROR naming it."""
    conn = connect()
    conn.receive_data(frame("SUBSCRIBE", "id:1", "destination:/q", "ack:sometimes",
                            "receipt:r"))
    error = assert_error(conn, "bad ack mode", "r")
    assert b"'sometimes'" in error.body


def test_nack_in_1_0_is_an_error():
    """S10.2: NACK does not exist in STOMP 1.0."""
    conn = connect(None)
    conn.receive_data(frame("NACK", "message-id:m", version="1.0"))
    assert_error(conn, "NACK is not part of STOMP 1.0")


def test_unknown_command_is_an_error():
    """S10.2: an unknown command -> ERROR naming it."""
    conn = connect()
    conn.receive_data(frame("PUBLISH", "receipt:p"))
    error = assert_error(conn, "unknown command", "p")
    assert b"'PUBLISH'" in error.body


def test_frame_error_becomes_error_frame():
    """S10.4: malformed bytes -> ERROR frame with the FrameError's message, finished."""
    conn = connect()
    conn.receive_data(b"SEND\nh:\\t\n\n\x00")
    assert_error(conn, "undefined escape sequence")
    assert isinstance(conn.error, FrameError)


def test_limit_error_names_the_limit():
    """P5, S10.4: a limit exceeded on a connection -> ERROR naming the limit and its value."""
    conn = connect(limits=FrameLimits(max_header_line=64))
    conn.receive_data(b"SEND\nh:" + b"v" * 100)
    assert_error(conn, "header line longer than 64 bytes")


def test_frames_before_a_bad_one_are_reported():
    """S10.4: good frames ahead of garbage in the same read still become events."""
    conn = connect()
    events = conn.receive_data(frame("BEGIN", "transaction:t") + b"SEND\nbad\n\n\x00")
    assert events == [Begin("t", None)]
    assert_error(conn, "malformed frame")


def test_nothing_is_read_after_an_error():
    """S10.4: once finished, input is ignored and nothing more is written."""
    conn = connect()
    conn.receive_data(b"JUNK\n\n\x00")
    conn.data_to_send()
    assert conn.receive_data(frame("BEGIN", "transaction:t")) == []
    assert conn.data_to_send() == b""


# -- glue methods --------------------------------------------------------------------------

def test_message_frame_1_2_with_ack():
    """S10.2: message() writes MESSAGE with subscription, message-id, destination, ack."""
    conn = connect("1.2")
    assert conn.message("0", "/q/a", "m-1", [("destination", "/dup"), ("p", "x:y")],
                        b"b\x00dy", ack_id="k1")
    (message,) = read(conn)
    assert message.command == "MESSAGE"
    assert message.headers == [("subscription", "0"), ("message-id", "m-1"),
                               ("destination", "/q/a"), ("ack", "k1"), ("p", "x:y"),
                               ("content-length", "4")]
    assert message.body == b"b\x00dy"


def test_message_frame_1_1_has_no_ack_header():
    """S10.2: before 1.2 the client acks by message-id, so no ack header is sent."""
    conn = connect("1.1")
    conn.message("0", "/q", "m", [], b"", ack_id="k")
    (message,) = read(conn)
    assert message.get("ack") is None and message.get("message-id") == "m"


def test_message_after_disconnect_is_refused():
    """S10.2: message() returns False once the client has disconnected (caller requeues)."""
    conn = connect()
    conn.receive_data(frame("DISCONNECT", "receipt:d"))
    assert conn.message("0", "/q", "m", [], b"x") is False
    assert conn.data_to_send() == b""


def test_receipt_frame():
    """S10.2: receipt() writes RECEIPT with receipt-id."""
    conn = connect()
    conn.receipt("r-9")
    (receipt,) = read(conn)
    assert (receipt.command, receipt.headers) == ("RECEIPT", [("receipt-id", "r-9")])


def test_send_error_fatal_and_not():
    """S10.2: send_error() writes ERROR with receipt-id; fatal finishes the connection."""
    conn = connect()
    conn.send_error("queue full", "try later", receipt_id="r1", fatal=False)
    (error,) = read(conn)
    assert (error.get("message"), error.get("receipt-id"), error.body) == (
        "queue full", "r1", b"try later")
    assert not conn.finished
    conn.send_error("bye")
    assert_error(conn, "bye")


def test_disconnect_with_receipt():
    """S10.2: DISCONNECT with receipt: the event, then the glue's receipt finishes it."""
    conn = connect()
    events = conn.receive_data(frame("DISCONNECT", "receipt:77") + frame("BEGIN",
                                                                          "transaction:t"))
    assert events == [Disconnect("77")]
    assert conn.state is StompState.DISCONNECTING and not conn.finished
    assert conn.receive_data(frame("SEND", "destination:/q")) == []
    conn.receipt("77")
    (receipt,) = read(conn)
    assert receipt.get("receipt-id") == "77"
    assert conn.finished and conn.state is StompState.DISCONNECTED


def test_disconnect_without_receipt_finishes_at_once():
    """S10.2: DISCONNECT without receipt finishes the connection with nothing to say."""
    conn = connect()
    assert conn.receive_data(frame("DISCONNECT")) == [Disconnect(None)]
    assert conn.finished and conn.data_to_send() == b""


def test_connection_lost():
    """P1: connection_lost() finishes the engine; later input is ignored."""
    conn = connect()
    conn.connection_lost()
    assert conn.finished and conn.receive_data(frame("BEGIN", "transaction:t")) == []


# -- heart-beats ---------------------------------------------------------------------------

@pytest.mark.parametrize("ours,theirs,send_ms,receive_ms", [
    ((10000, 10000), (5000, 20000), 20000, 10000),
    ((10000, 10000), (0, 0), 0, 0),
    ((0, 0), (1000, 1000), 0, 0),
    ((1000, 0), (1000, 1000), 1000, 0),
    ((0, 3000), (1000, 1000), 0, 3000),
    ((500, 500), (2000, 100), 500, 2000),
])
def test_heartbeat_negotiation(ours, theirs, send_ms, receive_ms):
    """S10.2: each direction is the max of the two sides' values, or off if either is 0."""
    conn = connect("1.2", "heart-beat:%d,%d" % theirs, heartbeat=ours)
    assert (conn.heartbeat_send_ms, conn.heartbeat_receive_ms) == (send_ms, receive_ms)


def test_no_heartbeats_means_no_ticks():
    """P2: with heart-beats off both ways, tick() asks for no further tick."""
    conn = connect("1.2", heartbeat=(0, 0))
    assert conn.tick(0.0) is None


def test_tick_before_connected_asks_for_nothing():
    """P2: no heart-beats are agreed before CONNECTED."""
    conn = connect("1.2", "heart-beat:1000,1000", accept=False)
    assert conn.tick(0.0) is None and conn.data_to_send() == b""


def test_tick_sends_eol_when_we_were_silent():
    """S10.2: tick() sends an EOL once we have written nothing for half our interval."""
    conn = connect("1.2", "heart-beat:0,4000", heartbeat=(4000, 0))
    assert conn.tick(100.0) == 102.0
    assert conn.data_to_send() == b""
    assert conn.tick(102.0) == 104.0
    assert conn.data_to_send() == b"\n"


def test_traffic_postpones_the_heartbeat():
    """S10.2: a frame written since the last tick counts as a heart-beat."""
    conn = connect("1.2", "heart-beat:0,4000", heartbeat=(4000, 0))
    conn.tick(100.0)
    conn.receipt("r")
    conn.data_to_send()
    assert conn.tick(102.0) == 104.0
    assert conn.data_to_send() == b""
    conn.tick(104.0)
    assert conn.data_to_send() == b"\n"


def test_silent_peer_times_out():
    """S10.2: nothing from the client for TOLERANCE x its interval -> ERROR, finished."""
    conn = connect("1.2", "heart-beat:1000,0", heartbeat=(0, 1000))
    timeout = 1.0 * HEARTBEAT_TOLERANCE
    deadline = conn.tick(50.0)
    assert deadline == 50.5
    while deadline is not None and deadline < 50.0 + timeout:
        deadline = conn.tick(deadline)
    assert not conn.finished
    assert conn.tick(50.0 + timeout) is None
    error = assert_error(conn, "heart-beat timeout")
    assert b"2000 ms" in error.body


def test_heartbeats_from_the_peer_keep_it_alive():
    """S10.2: EOLs from the client count as traffic and produce no events."""
    conn = connect("1.2", "heart-beat:1000,0", heartbeat=(0, 1000))
    conn.tick(0.0)
    for step in range(1, 20):
        assert conn.receive_data(b"\n") == []
        conn.tick(step * 1.0)
    assert not conn.finished and conn.data_to_send() == b""
