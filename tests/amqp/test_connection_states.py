"""The AMQP connection's state table (AMQP 1.0 Part 2 section 2.4.6): the legal paths are
accepted, anything else is a named error, and only the engine changes its state (S10.4)."""

import pytest

from mqgate.amqp import connection as conn
from mqgate.amqp.connection import (
    R_CLOSE, R_HDR, R_OPEN, S_CLOSE, S_HDR, S_OPEN, Connection, ConnectionState,
    IllegalTransition, next_state,
)
from mqgate.amqp.performatives import Close, Open, Transfer
from mqgate.amqp.types import Symbol
from mqgate.errors import RemoteProtocolError

from tests.amqp.helpers import decode_stream, frame, opened_pair, performatives_of

_S = ConnectionState

# Paths through the diagram of section 2.4.6, from START to END, as the engine keeps them
# (the pipelined OPEN_PIPE is kept as OPEN_SENT, CLOSE_PIPE as CLOSE_SENT).
SPEC_PATHS = {
    "server answers, peer closes": [
        (R_HDR, _S.HDR_RCVD), (S_HDR, _S.HDR_EXCH), (R_OPEN, _S.OPEN_RCVD),
        (S_OPEN, _S.OPENED), (R_CLOSE, _S.CLOSE_RCVD), (S_CLOSE, _S.END)],
    "client waits for the header, closes first": [
        (S_HDR, _S.HDR_SENT), (R_HDR, _S.HDR_EXCH), (S_OPEN, _S.OPEN_SENT),
        (R_OPEN, _S.OPENED), (S_CLOSE, _S.CLOSE_SENT), (R_CLOSE, _S.END)],
    "client pipelines its open": [
        (S_HDR, _S.HDR_SENT), (S_OPEN, _S.OPEN_SENT), (R_HDR, _S.OPEN_SENT),
        (R_OPEN, _S.OPENED), (R_CLOSE, _S.CLOSE_RCVD), (S_CLOSE, _S.END)],
    "refusal: an open and a close before the peer's open": [
        (R_HDR, _S.HDR_RCVD), (S_HDR, _S.HDR_EXCH), (S_OPEN, _S.OPEN_SENT),
        (S_CLOSE, _S.CLOSE_SENT), (R_CLOSE, _S.END)],
}


@pytest.mark.parametrize("path", SPEC_PATHS.values(), ids=list(SPEC_PATHS))
def test_spec_paths_accepted(path):
    """Each path of the section 2.4.6 diagram goes from START to END, state by state."""
    state = _S.START
    for step, expected in path:
        state = next_state(state, step)
        assert state is expected, (step, state)
    assert state is _S.END


@pytest.mark.parametrize("state, step", [
    (_S.START, S_OPEN), (_S.HDR_RCVD, R_OPEN), (_S.OPENED, R_OPEN), (_S.OPENED, S_OPEN),
    (_S.CLOSE_SENT, S_CLOSE), (_S.END, R_CLOSE), (_S.END, S_OPEN), (_S.END, R_HDR),
])
def test_illegal_transition_is_named(state, step):
    """A step the diagram does not have raises IllegalTransition naming step and state."""
    with pytest.raises(IllegalTransition) as raised:
        next_state(state, step)
    assert step in str(raised.value) and state.name in str(raised.value)


def test_accepted_frames_agree_with_the_table():
    """Every state that accepts an open or a close has the step it takes in the table,
    so a frame a state accepts can never be refused half-way as an illegal transition."""
    for state, accepted in conn._ACCEPTS.items():
        if Open in accepted:
            next_state(state, R_OPEN)
        if Close in accepted:
            next_state(state, R_CLOSE)


def test_frame_after_close_is_framing_error():
    """A frame the engine meets after the peer's close is refused as amqp:connection:framing-error."""
    pair = opened_pair()
    pair.client.close()
    pair.pump()
    assert pair.server.state is _S.END and pair.server.finished
    with pytest.raises(RemoteProtocolError) as raised:
        pair.server._on_amqp_frame(0, 0, frame(Transfer(handle=0))[8:], [])
    assert raised.value.condition == "amqp:connection:framing-error"
    assert "after the close" in raised.value.description


def test_bytes_after_close_are_not_acted_on():
    """A transfer sent behind a close in the same read reports nothing after the close."""
    pair = opened_pair()
    events = pair.server.receive_data(frame(Close()) + frame(Transfer(handle=0)))
    assert [type(e).__name__ for e in events] == ["ConnectionClosed"]
    assert pair.server.finished and pair.server.state is _S.END


def test_open_twice_is_illegal_state():
    """A second open from the peer closes the connection with amqp:illegal-state."""
    pair = opened_pair()
    pair.server.receive_data(frame(Open(container_id="again")))
    closes = performatives_of(decode_stream(pair.server.data_to_send()), Close)
    assert closes[0].error.condition == Symbol("amqp:illegal-state")
    assert pair.server.finished


def test_callers_cannot_set_finished_or_state():
    """finished and state are read-only: callers end a connection with abort()."""
    server = Connection(server=True)
    with pytest.raises(AttributeError):
        server.finished = True
    with pytest.raises(AttributeError):
        server.state = _S.END


def test_abort_closes_with_condition_and_finishes():
    """abort() writes a close carrying the condition and leaves the engine finished,
    without waiting for the peer's close."""
    pair = opened_pair()
    pair.server.abort("amqp:resource-limit-exceeded", "too slow")
    closes = performatives_of(decode_stream(pair.server.data_to_send()), Close)
    assert closes[0].error.condition == Symbol("amqp:resource-limit-exceeded")
    assert closes[0].error.description == "too slow"
    assert pair.server.finished and pair.server.state is _S.CLOSE_SENT
    pair.server.abort("amqp:internal-error", "again")   # a second abort says nothing
    assert pair.server.data_to_send() == b""
