"""Work per turn for STOMP (S10.4): a read of many pipelined frames is acted on a budget
at a time, one reactor turn after another, in order, with the socket paused meanwhile
(StringTransport and task.Clock: each clock.advance(0) runs the turns that are due)."""

import pytest

from mqgate.core.addresses import NotFound
from mqgate.net.stomp import EVENT_BUDGET, READ_SLICE
from tests.net.test_flow_control import StompPeer, stomp_frame


class Collect:
    """A consumer target that keeps the bodies it is given, in order."""

    def __init__(self):
        self.bodies = []

    def deliver(self, delivery):
        self.bodies.append(delivery.message.payload.body_sections()[0][1])


def sends(first, count, **headers):
    return b"".join(stomp_frame("SEND", b"m%d" % i, destination="/queue/q", **headers)
                    for i in range(first, first + count))


def drained(peer):
    collect = Collect()
    peer.broker.open_consumer("queue://q", collect, presettled=True).set_credit(100_000)
    return collect.bodies


def test_pipelined_sends_are_acted_on_a_budget_per_turn_in_order(tmp_path):
    """2,000 SENDs in one read: the first turn acts on at most the budget and pauses the
    socket; later turns do the rest, in order, and the socket is read again after."""
    peer = StompPeer(tmp_path)
    peer.protocol.dataReceived(sends(0, 2000))
    queue = peer.broker.queue("q")
    assert 0 < queue.held <= EVENT_BUDGET.total       # all 2,000 before the budget
    assert peer.paused
    peer.clock.advance(0)
    assert queue.held == 2000 and not peer.paused
    assert drained(peer) == [b"m%d" % i for i in range(2000)]


def test_a_receipt_behind_pipelined_sends_comes_after_all_of_them(tmp_path):
    """The RECEIPT of the last SEND of a long read is written only once every SEND before
    it was acted on: the budget changes when, not in which order."""
    peer = StompPeer(tmp_path)
    peer.protocol.dataReceived(sends(0, 600) + sends(600, 1, receipt="last"))
    assert b"RECEIPT" not in peer.transport.value()
    peer.clock.advance(0)
    assert b"receipt-id:last" in peer.transport.value()
    assert peer.broker.queue("q").held == 601


def test_bytes_that_arrive_while_work_waits_queue_behind_it(tmp_path):
    """Bytes handed in while earlier frames still wait (the pool delivers them although
    the socket is paused) are acted on after those frames, not before."""
    peer = StompPeer(tmp_path)
    peer.protocol.dataReceived(sends(0, 1000))
    peer.protocol.process_inbound(sends(1000, 10))
    peer.clock.advance(0)
    assert drained(peer) == [b"m%d" % i for i in range(1010)]


def test_one_turn_parses_at_most_a_slice_of_a_read(tmp_path):
    """A read larger than the read slice is given to the engine a slice per turn, so a
    flood of tiny frames is not all parsed in one turn."""
    peer = StompPeer(tmp_path)
    data = sends(0, 10000)
    assert len(data) > 4 * READ_SLICE
    parsed = []
    receive = peer.protocol.engine.receive_data
    peer.protocol.engine.receive_data = lambda chunk: parsed.append(len(chunk)) or receive(chunk)
    peer.protocol.dataReceived(data)
    assert parsed == [READ_SLICE]
    peer.clock.advance(0)
    assert max(parsed) == READ_SLICE and sum(parsed) == len(data)
    assert peer.broker.queue("q").held == 10000


def test_one_turn_parses_at_most_the_budgets_frames(tmp_path):
    """A read slice of tiny frames holds far more frames than the budget: the engine
    parses only the budget's worth a turn and keeps the bytes behind them unparsed,
    so a flood of tiny frames costs a turn what the budget's frames cost."""
    peer = StompPeer(tmp_path)
    data = sends(0, 2000)
    assert len(data) <= READ_SLICE    # one slice, two thousand frames
    parsed = []
    receive = peer.protocol.engine.receive_data

    def counting(chunk):
        events = receive(chunk)
        parsed.append(len(events))
        return events
    peer.protocol.engine.receive_data = counting
    peer.protocol.dataReceived(data)
    assert parsed == [EVENT_BUDGET.total] and peer.paused
    peer.clock.advance(0)
    assert max(parsed) == EVENT_BUDGET.total and sum(parsed) == 2000
    assert drained(peer) == [b"m%d" % i for i in range(2000)]
    assert not peer.paused


def test_persistent_sends_cost_four(tmp_path):
    """A persistent SEND counts four (a store record, and the consumers' ACKs must keep
    their share of the turns): a read of 100 acts on 32 in the first turn, the rest
    after, in order; plain SENDs behind them count one each again."""
    peer = StompPeer(tmp_path)
    peer.protocol.dataReceived(sends(0, 100, persistent="TRUE") + sends(100, 20))
    assert peer.broker.queue("q").held == 32
    peer.clock.advance(0)
    assert drained(peer) == [b"m%d" % i for i in range(120)]


def test_subscribes_cost_more_of_the_budget(tmp_path):
    """A SUBSCRIBE (a consumer to build) counts eight: a read of 100 acts on 16 of them
    in the first turn."""
    peer = StompPeer(tmp_path)
    peer.protocol.dataReceived(b"".join(
        stomp_frame("SUBSCRIBE", destination=f"/queue/s{i}", id=str(i)) for i in range(100)))
    assert len(peer.broker.queue("s15").consumers) == 1
    with pytest.raises(NotFound):
        peer.broker.queue("s16")
    peer.clock.advance(0)
    assert all(len(peer.broker.queue(f"s{i}").consumers) == 1 for i in range(100))
