"""The fuzz invariant of the STOMP engine (S10.4, docs/design.md): whatever bytes arrive,
receive_data returns events or finishes the connection with an ERROR frame; it never
raises, and whatever it writes parses as server frames.

Hypothesis runs derandomized (the same examples on every run) so the suite stays
deterministic.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqgate.stomp import events as ev
from mqgate.stomp.connection import StompConnection
from mqgate.stomp.frames import HEARTBEAT, FrameLimits, FrameParser, encode_frame

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

EVENT_TYPES = tuple(getattr(ev, name) for name in ev.__all__)
SERVER_COMMANDS = {"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"}
SMALL = FrameLimits(max_body_size=512, max_headers=8, max_header_line=128,
                    max_command_line=32)


def connected(accept_version):
    """A connection after an accepted CONNECT, its output drained."""
    conn = StompConnection(limits=SMALL)
    headers = [("accept-version", accept_version), ("heart-beat", "1000,1000")]
    conn.receive_data(encode_frame("CONNECT", headers, b"", "1.0"))
    conn.accept("s")
    conn.data_to_send()
    return conn


def feed(conn, data, cuts=()):
    """Feed data split at cuts, asserting the invariant; return the events."""
    events, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        try:
            events += conn.receive_data(data[start:cut])
        except Exception as error:  # the invariant under test: nothing escapes
            pytest.fail(f"receive_data raised {type(error).__name__}: {error} on {data!r}")
        start = cut
    assert all(isinstance(e, EVENT_TYPES) for e in events), events
    if conn.finished:
        disconnected = any(isinstance(e, ev.Disconnect) for e in events)
        assert conn.error is not None or disconnected, events
    try:
        conn.tick(1.0)
        conn.tick(100.0)
        written = conn.data_to_send()
    except Exception as error:
        pytest.fail(f"the engine raised {type(error).__name__} after input: {error}")
    assert_well_formed(written, conn.version or "1.0")
    return events


def assert_well_formed(written, version):
    """What the engine writes parses as server frames (it never writes garbage)."""
    parser = FrameParser(version)
    items = parser.feed(written)
    while parser.paused:
        items += parser.resume(version)
    assert parser.error is None
    assert all(i is HEARTBEAT or i.command in SERVER_COMMANDS for i in items), items


VALID = (encode_frame("SEND", [("destination", "/q/a:b"), ("receipt", "1")], b"x\x00y")
         + b"\n" + encode_frame("SUBSCRIBE", [("id", "0"), ("destination", "/t"),
                                              ("ack", "client")], b"")
         + encode_frame("ACK", [("id", "a"), ("transaction", "t")], b"")
         + encode_frame("NACK", [("id", "m"), ("subscription", "0")], b"")
         + encode_frame("BEGIN", [("transaction", "t")], b"")
         + encode_frame("DISCONNECT", [("receipt", "bye")], b""))


@FUZZ
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=5))
def test_random_bytes_before_connect(data, cuts):
    """S10.4: random bytes on a fresh connection give events or ERROR + finished."""
    feed(StompConnection(limits=SMALL), data, [c for c in cuts if c <= len(data)])


@FUZZ
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), data=st.binary(max_size=300))
def test_random_bytes_after_connected(version, data):
    """S10.4: random bytes on a connected session give events or ERROR + finished."""
    feed(connected(version), data)


def mutate(data, edits):
    out = bytearray(data)
    for kind, pos, byte in edits:
        pos %= len(out) + 1
        if kind == 0:
            out.insert(pos, byte)
        elif out and pos < len(out):
            if kind == 1:
                out[pos] = byte
            else:
                del out[pos]
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000),
                           st.sampled_from(b"\x00\n\r:\\cnrt9A-")), max_size=6)


@FUZZ
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), edits=EDITS,
       cuts=st.lists(st.integers(0, len(VALID)), max_size=5))
def test_mutated_valid_streams(version, edits, cuts):
    """S10.4: a valid client stream with a few octets inserted, changed or removed never
    makes the engine raise."""
    data = mutate(VALID, edits)
    feed(connected(version), data, [c for c in cuts if c <= len(data)])


@FUZZ
@given(edits=EDITS)
def test_mutated_connect(edits):
    """S10.4: a damaged CONNECT frame never makes the engine raise."""
    connect = encode_frame("CONNECT", [("accept-version", "1.1,1.2"), ("host", "h"),
                                       ("heart-beat", "10,20")], b"", "1.0")
    conn = StompConnection(limits=SMALL)
    events = feed(conn, mutate(connect, edits) + VALID)
    if events and isinstance(events[0], ev.ConnectRequested) and not conn.finished:
        try:
            more = conn.accept("s")
        except Exception as error:
            pytest.fail(f"accept raised {type(error).__name__}: {error}")
        assert all(isinstance(e, EVENT_TYPES) for e in more)
        assert_well_formed(conn.data_to_send(), conn.version)


def test_valid_stream_gives_the_expected_events():
    """The fuzz corpus itself is valid: unmutated, it gives one event per frame (1.2)."""
    events = feed(connected("1.2"), VALID)
    assert [type(e).__name__ for e in events] == [
        "Send", "Subscribe", "Ack", "Nack", "Begin", "Disconnect"]


def parse_outcome(version, data, pieces):
    """The frames a parser makes of C{data} fed in C{pieces} octets at a time (all at
    once for None), and the error that stopped it (type and text), or None."""
    parser = FrameParser(version, SMALL)
    items, step = [], pieces or max(len(data), 1)
    try:
        for start in range(0, len(data), step):
            items += parser.feed(data[start:start + step])
        items += parser.feed(b"")   # an error kept behind the frames before it
    except Exception as error:
        return items, (type(error).__name__, str(error))
    return items, None


@FUZZ
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), edits=EDITS)
def test_whole_frames_and_single_octets_parse_alike(version, edits):
    """S10.2, S10.4: whether a frame arrives in one piece (its headers read in one pass)
    or an octet at a time (line by line), the same frames come out and the same error
    stops the parser: CRs, escapes, colons and NULs put anywhere change nothing."""
    data = mutate(VALID, edits).replace(b"SUBSCRIBE", "SUBSCRIBE\nh:é".encode())
    assert parse_outcome(version, data, None) == parse_outcome(version, data, 1)
