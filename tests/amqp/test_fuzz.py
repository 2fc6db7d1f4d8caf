"""The fuzz invariant of the AMQP engine (S10.4, docs/design.md): whatever bytes arrive,
receive_data returns events or finishes the connection with an error; it never raises,
and whatever the engine writes in answer is well-formed.

Hypothesis runs derandomized (the same examples on every run) so that CI stays
deterministic; the example counts are kept small for the suite's time budget.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqgate.amqp import codec
from mqgate.amqp.connection import Connection
from mqgate.amqp.events import ConnectionClosed
from mqgate.amqp.frames import AMQP_HEADER, EMPTY_FRAME, SASL_FRAME, SASL_HEADER
from mqgate.amqp.performatives import SENDER, Open
from mqgate.amqp.types import Array, Described, Symbol, UInt, ULong

from tests.amqp.helpers import decode_stream, frame, link_pair, opened_pair, raw_frame

FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def feed(engine, data, chunks=None):
    """Feed data (split at the given points), asserting the fuzz invariant."""
    points = sorted(set(chunks or [])) + [len(data)]
    events = []
    start = 0
    for point in points:
        try:
            events += engine.receive_data(data[start:point])
        except Exception as error:  # the invariant under test: nothing escapes
            pytest.fail(f"receive_data raised {type(error).__name__}: {error} "
                        f"on input {bytes(data)!r}")
        start = point
    if engine.finished:
        closed_by_peer = any(isinstance(e, ConnectionClosed) for e in events)
        assert engine.error is not None or closed_by_peer, events
    try:
        engine.tick(1.0)
        written = engine.data_to_send()
    except Exception as error:
        pytest.fail(f"the engine raised {type(error).__name__} after input: {error}")
    assert_well_formed(written)
    return events


def assert_well_formed(written):
    """What the engine writes decodes as headers and frames (it never writes garbage)."""
    pos = 0
    while pos < len(written):
        if written[pos:pos + 4] == b"AMQP":
            pos += 8
            continue
        size = int.from_bytes(written[pos:pos + 4], "big")
        assert size >= 8 and pos + size <= len(written)
        decode_stream(written[pos:pos + size])
        pos += size


# -- strategies ---------------------------------------------------------------------------

_field = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(0, 5), st.integers(-2**63, 2**64 - 1),
        st.integers(0, 2**32 - 1).map(UInt), st.text(max_size=8), st.binary(max_size=8),
        st.sampled_from(["PLAIN", "ANONYMOUS", "q1", "amqp:accepted:list"]).map(Symbol),
        st.lists(st.sampled_from(["a", "PLAIN"]).map(Symbol), min_size=1,
                 max_size=3).map(Array),
        st.sampled_from([0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x1D, 0x99]).map(
            lambda code: Described(ULong(code), [])),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text("ab:", max_size=3).map(Symbol), children, max_size=3),
        st.builds(Described, st.sampled_from([0x1D, 0x28, 0x29, 0x23, 0x27]).map(ULong),
                  st.lists(children, max_size=4)),
    ),
    max_leaves=10,
)

_performative_body = st.builds(
    lambda code, fields, payload: b"\x00\x53" + bytes([code]) + codec.encode(fields) + payload,
    st.integers(0x10, 0x18), st.lists(_field, max_size=12), st.binary(max_size=16))

_any_body = st.one_of(_performative_body, st.binary(max_size=24))

_frames = st.lists(st.tuples(st.integers(0, 3), _any_body), min_size=1, max_size=6).map(
    lambda frames: b"".join(raw_frame(body, channel) for channel, body in frames))


def split_points(data):
    return st.lists(st.integers(0, len(data)), max_size=4)


def anonymous_server():
    server = Connection(server=True)
    server.receive_data(AMQP_HEADER)
    server.sasl_outcome(True)
    server.data_to_send()
    return server


# -- the invariant ------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=200), st.data())
def test_random_bytes_from_the_start(data, draw):
    """S10.4: random bytes from the first byte on never make the server raise."""
    feed(Connection(server=True), data, draw.draw(split_points(data)))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_after_a_sasl_header(data):
    """S10.4: random bytes where SASL frames belong never make the server raise."""
    feed(Connection(server=True), SASL_HEADER + data)


@FUZZ
@given(st.lists(_field, max_size=5), st.integers(0x40, 0x44))
def test_random_sasl_frames(fields, code):
    """S10.4: SASL frames with random field values never make the server raise."""
    body = b"\x00\x53" + bytes([code]) + codec.encode(fields)
    feed(Connection(server=True), SASL_HEADER + raw_frame(body, frame_type=SASL_FRAME))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_after_no_sasl_header(data):
    """S10.4: random bytes after a plain AMQP header (held, then released by the
    authentication outcome) never make the server raise."""
    server = Connection(server=True)
    server.receive_data(AMQP_HEADER + data)
    try:
        server.sasl_outcome(True)
    except Exception as error:
        pytest.fail(f"sasl_outcome raised {type(error).__name__}: {error}")
    assert_well_formed(server.data_to_send())


@FUZZ
@given(st.lists(_field, max_size=10))
def test_random_open(fields):
    """S10.4: an open with random field values never makes the server raise."""
    server = anonymous_server()
    feed(server, raw_frame(b"\x00\x53\x10" + codec.encode(fields)))


@FUZZ
@given(st.binary(max_size=200), st.data())
def test_random_bytes_after_open(data, draw):
    """S10.4: random bytes after SASL and the open exchange never make the server raise."""
    pair = opened_pair()
    feed(pair.server, data, draw.draw(split_points(data)))


@FUZZ
@given(_frames, st.data())
def test_random_frames_after_open(data, draw):
    """S10.4: well-framed random performatives after the open never make the server
    raise."""
    pair = opened_pair()
    feed(pair.server, data, draw.draw(split_points(data)))


@FUZZ
@given(_frames)
def test_random_frames_with_a_session(data):
    """S10.4: random performatives on a begun session never make the server raise."""
    pair = opened_pair()
    pair.begin()
    feed(pair.server, data)


@FUZZ
@given(_frames)
def test_random_frames_with_links(data):
    """S10.4: random performatives (transfers, flows, dispositions ...) hitting attached
    links with credit, both ways, never make either engine raise."""
    pair, client_sender, server_receiver = link_pair(SENDER, credit=5)
    client_sender.send(b"unsettled", settled=False)
    pair.pump()
    feed(pair.server, data)
    feed(pair.client, data)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_to_a_client(data):
    """S10.4: random bytes where a client expects the server's SASL header and frames
    never make the client raise."""
    client = Connection(server=False, credentials=("u", "p"))
    client.data_to_send()
    feed(client, SASL_HEADER + data)


def test_fuzz_helper_detects_a_valid_stream():
    """P12: the invariant holds for a valid input too (an empty frame after the open), so
    the checks above are not vacuous."""
    pair = opened_pair()
    assert feed(pair.server, EMPTY_FRAME) == []
    assert not pair.server.finished
    events = feed(anonymous_server(), frame(Open(container_id="x")))
    assert [type(e).__name__ for e in events] == ["ConnectionOpened"]
