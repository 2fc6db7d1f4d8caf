"""The AMQP connection engine (S10.1, S10.4; AMQP 1.0 Part 2 section 2.4, Part 5 SASL):
a client engine and a server engine joined in memory (docs/design.md)."""

import pytest

from mqgate.amqp import codec
from mqgate.amqp.conditions import AmqpLocalError
from mqgate.amqp.connection import Connection, ConnectionState
from mqgate.amqp.events import (
    AuthenticationRequested, ConnectionClosed, MessageReceived, SaslCompleted,
)
from mqgate.amqp.frames import AMQP_HEADER, EMPTY_FRAME, SASL_FRAME, SASL_HEADER
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Begin, Close, Error, Open, SaslInit, SaslMechanisms, SaslOutcome,
    Source, Target,
)
from mqgate.amqp.types import Described, Symbol, ULong

from tests.amqp.helpers import (
    EnginePair, decode_stream, frame, link_pair, names, opened_pair, performatives_of,
    raw_frame, raw_frames, summary,
)


def close_error(frames):
    """The error of the single close among some frames."""
    closes = performatives_of(frames, Close)
    assert len(closes) == 1, frames
    return closes[0].error


def server_output(pair):
    """Decode what the server has written and not yet sent."""
    return decode_stream(pair.server.data_to_send())


# -- SASL ---------------------------------------------------------------------------------

@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_sasl_plain_success(byte_at_a_time):
    """S10.1 (Part 5 section 5.3): PLAIN credentials reach the server as an
    AuthenticationRequested; after sasl_outcome(True) the open exchange completes."""
    pair = EnginePair(byte_at_a_time=byte_at_a_time)
    server_events, client_events = pair.pump()
    assert server_events == [AuthenticationRequested("PLAIN", "admin", "secret", None)]
    assert client_events == []
    assert pair.server.sasl_outcome(True) == []
    server_events, client_events = pair.pump()
    assert client_events[0] == SaslCompleted(True, 0)
    assert names(server_events) == ["ConnectionOpened"]
    assert server_events[0].open.container_id == "client"
    pair.server.open()
    _, client_events = pair.pump()
    assert names(client_events) == ["ConnectionOpened"]
    assert client_events[0].open.container_id == "broker"
    assert pair.server.state is ConnectionState.OPENED
    assert pair.client.state is ConnectionState.OPENED
    assert pair.server.authenticated == "PLAIN"
    frames = decode_stream(bytes(pair.to_client))
    assert frames[0] == ("header", SASL_HEADER)
    assert performatives_of(frames, SaslMechanisms)[0].sasl_server_mechanisms == (
        Symbol("PLAIN"), Symbol("ANONYMOUS"))
    assert performatives_of(frames, SaslOutcome) == [SaslOutcome(code=0)]
    assert ("header", AMQP_HEADER) in frames


@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_sasl_plain_failure(byte_at_a_time):
    """S10.1 (Part 5 section 5.3.3.6): a refused login sends outcome code 1 (auth) and both
    sides finish without any AMQP frame."""
    pair = EnginePair(byte_at_a_time=byte_at_a_time)
    pair.pump()
    pair.server.sasl_outcome(False)
    _, client_events = pair.pump()
    assert client_events == [SaslCompleted(False, 1)]
    assert pair.server.finished and pair.client.finished
    frames = decode_stream(bytes(pair.to_client))
    assert performatives_of(frames, SaslOutcome) == [SaslOutcome(code=1)]
    assert not performatives_of(frames, Open)
    assert not performatives_of(decode_stream(bytes(pair.to_server)), Open)


def test_sasl_anonymous():
    """S10.1: ANONYMOUS is reported without credentials and then opens normally."""
    pair = EnginePair(client_kwargs={"credentials": "ANONYMOUS"})
    server_events, _ = pair.pump()
    assert server_events == [AuthenticationRequested("ANONYMOUS", None, None, None)]
    assert pair.server.sasl_outcome(True) == []
    server_events, _ = pair.pump()
    assert names(server_events) == ["ConnectionOpened"]
    assert pair.server.authenticated == "ANONYMOUS"


def test_end_login_while_the_check_is_pending_gives_the_outcome_and_finishes():
    """S4.2 (Part 5 section 5.3.3.6): end_login during a pending check writes a SASL
    outcome with the code and the description as additional data; the client sees the
    failure, and a late answer to the check writes nothing."""
    pair = EnginePair()
    pair.pump()
    assert pair.server.authenticating
    assert pair.server.end_login(4, "too slow", "amqp:unauthorized-access") is True
    assert pair.server.finished and not pair.server.authenticating
    _, client_events = pair.pump()
    assert client_events == [SaslCompleted(False, 4)]
    (outcome,) = performatives_of(decode_stream(bytes(pair.to_client)), SaslOutcome)
    assert outcome.additional_data == b"too slow"
    assert pair.server.sasl_outcome(True) == [] and pair.server.data_to_send() == b""


def test_end_login_between_sasl_and_the_amqp_header_says_nothing():
    """S4.2: after a SASL success, before the client's AMQP header, no frame can be read
    by the client: end_login only finishes the connection and says so."""
    pair = EnginePair()
    pair.pump()
    pair.server.sasl_outcome(True)
    pair.server.data_to_send()
    assert pair.server.end_login(1, "late", "amqp:unauthorized-access") is False
    assert pair.server.finished and pair.server.data_to_send() == b""


def test_sasl_hostname_is_reported():
    """S10.1 (Part 5 section 5.3.3.2): the hostname of the sasl-init reaches the server."""
    pair = EnginePair(client_kwargs={"hostname": "vhost.example"})
    server_events, _ = pair.pump()
    assert server_events[0].hostname == "vhost.example"


def test_input_is_held_while_authentication_is_pending():
    """S10.1: frames arriving before sasl_outcome() are held, and the outcome's return
    value carries the events they cause."""
    pair = EnginePair(client_kwargs={"credentials": None})
    server_events, _ = pair.pump()
    assert server_events == [AuthenticationRequested("NONE", None, None, None)]
    # The client's open arrived with its header but must not be reported yet.
    assert pair.server.remote_open is None
    events = pair.server.sasl_outcome(True)
    assert names(events) == ["ConnectionOpened"]


def test_server_offers_only_configured_mechanisms():
    """S10.1: a client whose mechanism is not offered gives up without sending a
    sasl-init."""
    pair = EnginePair(server_kwargs={"sasl_mechanisms": ("ANONYMOUS",)})
    server_events, _ = pair.pump()
    assert server_events == []
    assert pair.client.finished
    assert pair.client.error is not None
    assert not performatives_of(decode_stream(bytes(pair.to_server)), SaslInit)


def sasl_client_bytes(init):
    return SASL_HEADER + raw_frame(_encode(init), frame_type=SASL_FRAME)


def _encode(performative):
    out = bytearray()
    performative.encode(out)
    return bytes(out)


@pytest.mark.parametrize("init", [
    SaslInit(mechanism=Symbol("CRAM-MD5"), initial_response=b"x"),
    SaslInit(mechanism=Symbol("PLAIN"), initial_response=b"no-nul-bytes"),
    SaslInit(mechanism=Symbol("PLAIN"), initial_response=b"\x00\xff\xfe\x00pw"),
    SaslInit(mechanism=None),
], ids=["not-offered", "plain-malformed", "plain-not-utf8", "no-mechanism"])
def test_bad_sasl_init_fails_with_auth_outcome(init):
    """S10.4 (Part 5 section 5.3.3.6): an unusable sasl-init gets outcome code 1 and the
    server finishes without asking for authentication."""
    server = Connection(server=True)
    events = server.receive_data(sasl_client_bytes(init))
    assert events == []
    assert server.finished
    frames = decode_stream(server.data_to_send())
    assert [o.code for o in performatives_of(frames, SaslOutcome)] == [1]


def test_amqp_frame_during_sasl():
    """S10.4: an AMQP frame where a SASL frame belongs ends the connection."""
    server = Connection(server=True)
    server.receive_data(SASL_HEADER + frame(Open(container_id="x")))
    assert server.finished
    assert server.error is not None


def test_oversized_sasl_frame():
    """S10.4, P5: a SASL frame claiming more than 64 KiB ends the connection at once."""
    server = Connection(server=True)
    server.receive_data(SASL_HEADER + (1 << 20).to_bytes(4, "big") + b"\x02\x01\x00\x00")
    assert server.finished


# -- no SASL ------------------------------------------------------------------------------

def test_no_sasl_allowed():
    """S10.1: a plain AMQP header is accepted as mechanism "NONE" once the server allows
    it, and the open exchange completes."""
    pair = EnginePair(client_kwargs={"credentials": None})
    server_events, _ = pair.pump()
    assert server_events == [AuthenticationRequested("NONE", None, None, None)]
    assert names(pair.server.sasl_outcome(True)) == ["ConnectionOpened"]
    pair.server.open()
    _, client_events = pair.pump()
    assert names(client_events) == ["ConnectionOpened"]
    assert pair.server.authenticated == "NONE"
    assert decode_stream(bytes(pair.to_client))[0] == ("header", AMQP_HEADER)


def test_no_sasl_refused():
    """S10.1, S10.4: refusing a no-SASL connection sends the AMQP header, an open and a
    close with amqp:unauthorized-access; both sides finish."""
    pair = EnginePair(client_kwargs={"credentials": None})
    pair.pump()
    pair.server.sasl_outcome(False, "anonymous access is not allowed")
    _, client_events = pair.pump()
    assert names(client_events) == ["ConnectionOpened", "ConnectionClosed"]
    assert client_events[1].error.condition == Symbol("amqp:unauthorized-access")
    assert client_events[1].error.description == "anonymous access is not allowed"
    assert pair.server.finished and pair.client.finished
    frames = decode_stream(bytes(pair.to_client))
    assert frames[0] == ("header", AMQP_HEADER)
    assert [type(f[1]).__name__ for f in frames[1:]] == ["Open", "Close"]


def test_no_sasl_header_when_not_allowed():
    """S10.1 (section 2.2): with allow_no_sasl off, a plain AMQP header is answered with
    the SASL header and the connection ends."""
    server = Connection(server=True, allow_no_sasl=False)
    events = server.receive_data(AMQP_HEADER)
    assert events == []
    assert server.data_to_send() == SASL_HEADER
    assert server.finished


def test_sasl_header_when_sasl_is_off():
    """S10.1 (section 2.2): a server without SASL answers a SASL header with the AMQP
    header and ends the connection."""
    server = Connection(server=True, sasl_mechanisms=None)
    server.receive_data(SASL_HEADER)
    assert server.data_to_send() == AMQP_HEADER
    assert server.finished


# -- protocol header ----------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"GET / HTTP/1.1\r\n\r\n", b"AMQP\x00\x02\x00\x00", b"AMQP\x01\x01\x00\x0a",
    b"AMQP\x00\x00\x09\x01", b"\x00\x00\x00\x08\x02\x00\x00\x00",
], ids=["http", "amqp-0-2", "amqp-0-10", "amqp-0-9-1", "frame"])
@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_bad_protocol_header(data, byte_at_a_time):
    """S10.1 (section 2.2), S10.4: an unsupported protocol header is answered with the
    header we support, and the connection finishes."""
    server = Connection(server=True)
    if byte_at_a_time:
        events = []
        for i in range(len(data)):
            events += server.receive_data(data[i:i + 1])
    else:
        events = server.receive_data(data)
    assert events == []
    assert server.data_to_send() == SASL_HEADER
    assert server.finished
    assert server.error is not None


def test_client_rejects_an_unexpected_server_header():
    """S10.4: a client that asked for SASL and gets a plain AMQP header gives up."""
    client = Connection(server=False, credentials=("u", "p"))
    client.data_to_send()
    client.receive_data(AMQP_HEADER)
    assert client.finished


# -- open ---------------------------------------------------------------------------------

def test_open_carries_our_parameters():
    """S10.1 (section 2.7.1): our open advertises container id, max frame size, channel max
    and idle timeout in milliseconds."""
    pair = EnginePair(server_kwargs={"max_frame_size": 8192, "channel_max": 7,
                                     "idle_timeout": 30}).handshake()
    open_ = pair.client.remote_open
    assert open_.container_id == "broker"
    assert open_.max_frame_size == 8192
    assert open_.channel_max == 7
    assert open_.idle_time_out == 30000
    assert pair.client.remote_max_frame_size == 8192
    assert pair.client.remote_idle_timeout == 30


def test_open_twice_is_an_error():
    """S10.4 (section 2.4): a second open closes the connection with an error."""
    pair = opened_pair()
    pair.server.receive_data(frame(Open(container_id="again")))
    assert pair.server.finished
    assert close_error(server_output(pair)).condition == Symbol("amqp:illegal-state")


def server_output_of(server):
    return decode_stream(server.data_to_send())


def anonymous_server(**kwargs):
    """A server past the no-SASL header exchange, waiting for the client's open."""
    server = Connection(server=True, **kwargs)
    server.receive_data(AMQP_HEADER)
    server.sasl_outcome(True)
    server.data_to_send()
    return server


def test_open_without_container_id():
    """S10.4 (section 2.7.1): an open without the mandatory container-id is refused."""
    server = anonymous_server()
    server.receive_data(frame(Open()))
    assert server.finished
    assert close_error(server_output_of(server)).condition == Symbol("amqp:invalid-field")


def test_max_frame_size_below_minimum():
    """S10.4 (section 2.7.1): a peer asking for frames under 512 bytes gets a close with
    amqp:frame-size-too-small."""
    server = anonymous_server()
    server.receive_data(frame(Open(container_id="c", max_frame_size=100)))
    assert close_error(server_output_of(server)).condition == Symbol(
        "amqp:frame-size-too-small")
    assert server.finished


def test_frame_before_open():
    """S10.4 (section 2.4.1): a begin before the open closes the connection, after an open
    so the peer can read the close."""
    server = anonymous_server()
    server.receive_data(frame(Begin(next_outgoing_id=0, incoming_window=1,
                                    outgoing_window=1)))
    frames = server_output_of(server)
    assert [type(p).__name__ for p in performatives_of(frames)] == ["Open", "Close"]
    assert close_error(frames).condition == Symbol("amqp:illegal-state")


def test_local_open_in_wrong_state():
    """S10.1: calling open() twice is a local error."""
    pair = opened_pair()
    with pytest.raises(AmqpLocalError):
        pair.server.open()


# -- pipelining ---------------------------------------------------------------------------

def test_pipelined_open_begin_attach():
    """S10.1 (section 2.4.1), S8.6: a client that writes open, begin and attach in one go
    (as Qpid Proton does) gets them reported in order once authentication succeeds."""
    pair = EnginePair(client_kwargs={"credentials": None})
    session = pair.client.begin_session()
    session.attach_link("pipelined", SENDER).attach(source=Source(), target=Target(
        address="q"))
    server_events, _ = pair.pump()
    assert names(server_events) == ["AuthenticationRequested"]
    events = pair.server.sasl_outcome(True)
    assert names(events) == ["ConnectionOpened", "SessionBegun", "LinkAttached"]
    assert not pair.server.finished


def test_pipelined_begin_after_sasl():
    """S10.1 (section 2.4.1), S8.6: after SASL succeeds, a begin written right behind the
    client's open is accepted before the server has sent its own open."""
    pair = EnginePair()
    pair.pump()
    pair.server.sasl_outcome(True)
    outcome = pair.server.data_to_send()
    pair.to_client += outcome
    pair.client.receive_data(outcome)  # the client now writes its AMQP header and open
    pair.client.begin_session()
    server_events, _ = pair.pump()
    assert names(server_events) == ["ConnectionOpened", "SessionBegun"]
    assert not pair.server.finished


# -- frame size ---------------------------------------------------------------------------

@pytest.mark.parametrize("small_side", ["client", "server"])
def test_max_frame_size_splits_a_large_message(small_side):
    """S10.1 (section 2.7.5): a 5,000-byte message to a peer with max-frame-size 512 is
    cut into frames of at most 512 bytes and reassembled whole."""
    small = {"max_frame_size": 512}
    pair = EnginePair(client_kwargs=small if small_side == "client" else None,
                      server_kwargs=small if small_side == "server" else None).handshake()
    # The small side receives: it is the receiver of the link.
    client_role = RECEIVER if small_side == "client" else SENDER
    pair, client_link, server_link = link_pair(client_role, credit=1, pair=pair)
    sender = server_link if small_side == "client" else client_link
    payload = bytes(range(256)) * 19 + b"tail"
    to_server, to_client = pair.mark()
    sender.send(payload, settled=True)
    server_events, client_events = pair.pump()
    received = client_events if small_side == "client" else server_events
    assert names(received) == ["MessageReceived"]
    assert received[0].payload == payload
    if small_side == "client":
        written = bytes(pair.to_client[to_client:])
    else:
        written = bytes(pair.to_server[to_server:])
    sizes = [len(f) for f in raw_frames(written)]
    assert len(sizes) >= 10
    assert max(sizes) <= 512


def test_frame_above_our_max_frame_size():
    """S10.4, P5: a frame bigger than our max-frame-size closes the connection with
    amqp:connection:framing-error."""
    pair = EnginePair(server_kwargs={"max_frame_size": 512}).handshake()
    pair.server.receive_data(raw_frame(bytes(1000)))
    assert pair.server.finished
    error = close_error(server_output(pair))
    assert error.condition == Symbol("amqp:connection:framing-error")
    assert "1008" in error.description


# -- idle timeout -------------------------------------------------------------------------

def test_empty_frames_at_a_quarter_of_the_peer_idle_timeout():
    """S10.1 (section 2.4.5): a silent engine sends an empty frame every quarter of the
    peer's idle timeout, when ticked at the times tick() returns and flushed after each."""
    pair = EnginePair(server_kwargs={"idle_timeout": 10},
                      client_kwargs={"idle_timeout": None}).handshake()
    client = pair.client
    sent_at = []
    now = 0.0
    for _ in range(8):
        deadline = client.tick(now)
        if client.data_to_send() == EMPTY_FRAME:
            sent_at.append(now)
        now = deadline
    assert sent_at == [2.5, 5.0, 7.5, 10.0, 12.5, 15.0, 17.5]


def test_no_empty_frames_while_we_are_talking():
    """S10.1 (section 2.4.5): output of our own resets the empty-frame timer."""
    pair = EnginePair(server_kwargs={"idle_timeout": 10},
                      client_kwargs={"idle_timeout": None}).handshake()
    client = pair.client
    assert client.tick(0) == 2.5
    client.begin_session()
    client.data_to_send()
    assert client.tick(2.0) == 4.5
    assert client.data_to_send() == b""


def test_idle_peer_is_closed_with_resource_limit_exceeded():
    """S10.1 (section 2.4.5): a peer silent for longer than our idle timeout gets a close
    with amqp:resource-limit-exceeded and the connection finishes."""
    pair = EnginePair(server_kwargs={"idle_timeout": 10},
                      client_kwargs={"idle_timeout": None}).handshake()
    server = pair.server
    # Ticks come every quarter timeout (traffic is noticed only when ticking), capped by
    # the moment the timeout would expire.
    assert server.tick(100) == 102.5
    assert server.tick(109.9) == 110
    assert not server.finished
    assert server.tick(110) is None
    assert server.finished
    error = close_error(server_output(pair))
    assert error.condition == Symbol("amqp:resource-limit-exceeded")
    assert server.tick(200) is None


def test_peer_traffic_resets_the_idle_timer():
    """S10.1 (section 2.4.5): any frame from the peer, an empty one included, restarts our
    idle timeout."""
    pair = EnginePair(server_kwargs={"idle_timeout": 10},
                      client_kwargs={"idle_timeout": None}).handshake()
    server = pair.server
    server.tick(0)
    server.receive_data(EMPTY_FRAME)
    assert server.tick(8) == 10.5      # ticks every quarter timeout
    assert server.tick(17) == 18       # ... until the timeout, counted from t=8
    assert not server.finished


def test_no_timers_without_idle_timeouts():
    """S10.1: with neither side advertising an idle timeout, tick() asks for nothing."""
    pair = EnginePair(server_kwargs={"idle_timeout": None},
                      client_kwargs={"idle_timeout": None}).handshake()
    assert pair.server.tick(0) is None
    assert pair.server.tick(10_000) is None
    assert pair.server.data_to_send() == b""


# -- bad input after open -----------------------------------------------------------------

@pytest.mark.parametrize("garbage, condition", [
    (b"\xff" * 20, "amqp:connection:framing-error"),
    (b"\x00\x00\x00\x08\x01\x00\x00\x00", "amqp:connection:framing-error"),
    (raw_frame(b"\x99\x99\x99"), "amqp:decode-error"),
    (raw_frame(b"\x00\x53\x13\xc0\x05\x09"), "amqp:decode-error"),
    (raw_frame(codec.encode("hello")), "amqp:connection:framing-error"),
    (raw_frame(b"\x00\x53\x30\x45"), "amqp:connection:framing-error"),
    (raw_frame(b"\x00\x53\x41\x45"), "amqp:connection:framing-error"),
    (raw_frame(b"\x00\x53\x10\xa1\x01x"), "amqp:decode-error"),
    (raw_frame(b"\x00\xa3\x01x\x45"), "amqp:decode-error"),
    (raw_frame(b"x", frame_type=1), "amqp:connection:framing-error"),
    (raw_frame(b"\x00"), None),
    (raw_frame(b"\x00\x53"), None),
], ids=["ff", "doff1", "not-amqp", "truncated-list", "string-body", "coordinator",
        "sasl-init", "not-a-list", "unknown-symbolic", "sasl-frame-type", "one-byte-body",
        "two-byte-body"])
@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_garbage_after_open(garbage, condition, byte_at_a_time):
    """S10.4: bytes that are not a valid frame or performative after the open make the
    engine close with an error condition (framing or decode error) and finish, without
    raising."""
    pair = opened_pair(byte_at_a_time=byte_at_a_time)
    pair.inject("server", garbage)
    _, client_events = pair.pump()
    assert pair.server.finished
    closes = [e for e in client_events if isinstance(e, ConnectionClosed)]
    assert len(closes) == 1
    if condition is not None:
        assert closes[0].error.condition == Symbol(condition)
    else:
        assert closes[0].error.condition in (Symbol("amqp:connection:framing-error"),
                                             Symbol("amqp:decode-error"))
    assert pair.server.error is not None


def _fields(code, fields):
    return raw_frame(b"\x00\x53" + bytes([code]) + codec.encode(fields))


WRONG_TYPES = [
    ("open-idle-time-out-string", False, _fields(0x10, ["c", None, None, None, "x"])),
    ("open-max-frame-size-described", False,
     _fields(0x10, ["c", None, Described(ULong(0x1D), [])])),
    ("begin-remote-channel-list", False, _fields(0x11, [[], 0, 10, 10])),
    ("flow-next-incoming-id-list", True, _fields(0x13, [[], 10, 0, 10])),
    ("transfer-handle-list", True, _fields(0x14, [[], 0, b"t"])),
    ("attach-handle-string", True, _fields(0x12, ["n", "h", True, None, None,
                                                  Described(ULong(0x28), []),
                                                  Described(ULong(0x29), [])])),
    ("end-error-not-described", True, _fields(0x17, ["oops"])),
]


@pytest.mark.parametrize("with_session, data", [w[1:] for w in WRONG_TYPES],
                         ids=[w[0] for w in WRONG_TYPES])
def test_performative_field_of_the_wrong_type(with_session, data):
    """S10.4, P4: a performative whose field has the wrong AMQP type (a string where a
    uint belongs, a list for a handle) closes the connection with a decode-error or
    invalid-field condition; receive_data never raises."""
    pair = opened_pair()
    if with_session:
        pair.begin()
    try:
        pair.server.receive_data(data)
    except Exception as error:
        pytest.fail(f"receive_data raised {type(error).__name__}: {error}")
    assert pair.server.finished
    assert close_error(server_output(pair)).condition in (
        Symbol("amqp:decode-error"), Symbol("amqp:invalid-field"))


def test_input_after_finish_is_ignored():
    """S10.4: once finished, the engine ignores further input and reports nothing."""
    pair = opened_pair()
    pair.server.receive_data(b"\xff" * 20)
    assert pair.server.finished
    pair.server.data_to_send()
    assert pair.server.receive_data(frame(Close())) == []
    assert pair.server.data_to_send() == b""


def test_connection_lost_finishes():
    """S10.1: connection_lost() marks the engine finished; later input is ignored."""
    pair = opened_pair()
    pair.server.connection_lost()
    assert pair.server.finished
    assert pair.server.receive_data(EMPTY_FRAME) == []


def test_begin_on_a_channel_above_channel_max():
    """S10.4 (section 2.7.1): a begin on a channel above our channel-max closes the
    connection."""
    pair = EnginePair(server_kwargs={"channel_max": 3}).handshake()
    pair.server.receive_data(frame(Begin(next_outgoing_id=0, incoming_window=1,
                                         outgoing_window=1), channel=4))
    assert pair.server.finished
    assert close_error(server_output(pair)).condition == Symbol(
        "amqp:connection:framing-error")


def test_begin_twice_on_one_channel():
    """S10.4 (section 2.5.1): a second begin on a channel in use closes the connection."""
    pair = opened_pair()
    pair.begin()
    pair.server.receive_data(frame(Begin(next_outgoing_id=0, incoming_window=1,
                                         outgoing_window=1)))
    assert close_error(server_output(pair)).condition == Symbol("amqp:illegal-state")


def test_begin_answering_a_session_we_did_not_begin():
    """S10.4 (section 2.7.2): a begin whose remote-channel names no session of ours closes
    the connection."""
    pair = opened_pair()
    pair.server.receive_data(frame(Begin(remote_channel=5, next_outgoing_id=0,
                                         incoming_window=1, outgoing_window=1)))
    assert close_error(server_output(pair)).condition == Symbol("amqp:illegal-state")


def test_frame_for_a_channel_without_session():
    """S10.4: an end on a channel with no session closes the connection."""
    pair = opened_pair()
    pair.server.receive_data(raw_frame(b"\x00\x53\x17\x45", channel=9))
    assert pair.server.finished
    assert close_error(server_output(pair)) is not None


# -- close --------------------------------------------------------------------------------

@pytest.mark.parametrize("closer", ["client", "server"])
def test_close_handshake(closer):
    """S10.1 (section 2.4.3): a close is answered with a close and both sides finish."""
    pair = opened_pair()
    getattr(pair, closer).close()
    server_events, client_events = pair.pump()
    other_events = server_events if closer == "client" else client_events
    closer_events = client_events if closer == "client" else server_events
    assert other_events == [ConnectionClosed(None)]
    assert closer_events == [ConnectionClosed(None)]
    assert pair.server.finished and pair.client.finished
    assert pair.server.state is ConnectionState.END
    assert pair.client.state is ConnectionState.END


def test_close_with_an_error_condition():
    """S10.4: a close carries the condition and description we give."""
    pair = opened_pair()
    pair.server.close(Symbol("amqp:connection:forced"), "shutting down")
    _, client_events = pair.pump()
    assert client_events == [ConnectionClosed(
        Error(Symbol("amqp:connection:forced"), "shutting down"))]
    assert pair.client.finished and pair.server.finished


def test_close_twice_writes_one_close():
    """S10.1: a second close() before the answer writes nothing more."""
    pair = opened_pair()
    mark = pair.mark()
    pair.client.close()
    pair.client.close()
    pair.pump()
    client_frames, _ = pair.since(mark)
    assert len(performatives_of(client_frames, Close)) == 1


def test_close_before_open_sends_an_open_first():
    """S10.1 (section 2.4.1): closing before our open was sent writes an open, then the
    close, so the peer can read it."""
    server = anonymous_server()
    server.receive_data(frame(Open(container_id="c")))
    server.close(Symbol("amqp:not-allowed"), "no")
    frames = server_output_of(server)
    assert [type(p).__name__ for p in performatives_of(frames)] == ["Open", "Close"]


def test_close_received_before_any_open():
    """S10.1 (section 2.4.1): a close arriving before either open is answered with our
    open and then our close, and the connection finishes."""
    server = anonymous_server()
    events = server.receive_data(frame(Close()))
    assert events == [ConnectionClosed(None)]
    frames = server_output_of(server)
    assert [type(p).__name__ for p in performatives_of(frames)] == ["Open", "Close"]
    assert server.finished


def test_begin_session_before_the_sasl_exchange_ends():
    """S10.1 (section 2.4.1): a session begun before SASL has finished never puts an AMQP
    frame into the SASL exchange: either begin_session() refuses (a local error) or the
    begin follows the AMQP header and open."""
    pair = EnginePair()
    pair.pump()
    try:
        pair.client.begin_session()
    except AmqpLocalError:
        pass
    pair.server.sasl_outcome(True)
    pair.pump()
    assert pair.server.error is None
    assert not pair.server.finished
    frames = decode_stream(bytes(pair.to_server))
    headers = [i for i, f in enumerate(frames) if f[0] == "header"]
    begins = [i for i, f in enumerate(frames) if isinstance(f[1], Begin)]
    assert all(i > headers[-1] for i in begins)


# -- everything at once, whole and byte by byte -------------------------------------------

def run_lifecycle(byte_at_a_time):
    """Open, begin, attach both ways, send, settle, detach, end, close; return the events."""
    pair = opened_pair(byte_at_a_time=byte_at_a_time)
    pair, client_sender, server_receiver = link_pair(SENDER, credit=5, pair=pair)
    client_sender.send(b"m" * 3000, settled=False, context="c1")
    client_sender.send(b"small", settled=True)
    server_events, _ = pair.pump()
    for event in server_events:
        if isinstance(event, MessageReceived) and not event.settled:
            server_receiver.settle(event.delivery_id)
    pair.pump()
    client_sender.detach(closed=True)
    pair.pump()
    pair.client.sessions[0].end()
    pair.pump()
    pair.client.close()
    pair.pump()
    assert pair.client.finished and pair.server.finished
    return summary(pair.server_events), summary(pair.client_events)


def test_byte_at_a_time_gives_the_same_events():
    """S10.1, P12: a whole connection's life fed one byte at a time gives exactly the
    events it gives when fed in whole chunks."""
    whole = run_lifecycle(False)
    bytewise = run_lifecycle(True)
    assert bytewise == whole
    server_names = [event[0] for event in whole[0]]
    assert server_names.count("MessageReceived") == 2
    assert "SessionEnded" in server_names and "ConnectionClosed" in server_names
    assert [event[0] for event in whole[1]].count("DeliveriesSettled") == 1
