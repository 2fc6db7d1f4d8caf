"""Links and sessions (S10.1, S8.1; AMQP 1.0 Part 2 sections 2.5-2.6): attach, refuse,
credit and drain, settlement, dispositions, detach, multi-frame transfers, limits."""

import pytest

from mqgate.amqp.conditions import AmqpLocalError
from mqgate.amqp.events import (
    ConnectionClosed, CreditGranted, DeliveriesSettled, IngressRefused, LinkAttached,
    LinkDetached, MessageReceived, SessionBegun, SessionEnded, TransferAborted,
)
from mqgate.amqp.link import LinkState
from mqgate.amqp.message import Header, encode_message
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, SND_SETTLED, SND_UNSETTLED, Accepted, Attach, Detach, Disposition,
    Error, Flow, Modified, Rejected, Released, Source, Target, Transfer,
)
from mqgate.amqp.session import SessionState
from mqgate.amqp.types import Symbol

from tests.amqp.helpers import (
    EnginePair, frame, link_pair, names, opened_pair, performatives_of,
)


def closed_with(events):
    """The error of the single ConnectionClosed among some events."""
    closes = [e for e in events if isinstance(e, ConnectionClosed)]
    assert len(closes) == 1, events
    return closes[0].error


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


# -- attach ---------------------------------------------------------------------------------

@pytest.mark.parametrize("client_role", [SENDER, RECEIVER], ids=["client-sends",
                                                                  "client-receives"])
def test_attach_both_ways(client_role):
    """S10.1 (section 2.6.3): a link attached by the client is reported to the server with
    the client's terminus, the server's answer completes it, and the roles are opposite."""
    pair, client_link, server_link = link_pair(client_role, address="queue://orders")
    assert server_link.remote.source.address == "queue://orders"
    assert server_link.remote.target.address == "queue://orders"
    assert server_link.remote.name == "link-1"
    assert server_link.role is (not client_role)
    assert server_link.is_sender is (client_role == RECEIVER)
    assert client_link.state is LinkState.ATTACHED
    assert server_link.state is LinkState.ATTACHED
    assert client_link.remote.role is (not client_role)
    assert of(pair.client_events, LinkAttached)[0].link is client_link


def test_server_initiated_attach():
    """S10.1: the server can attach a link of its own; the client sees it as LinkAttached."""
    pair = opened_pair()
    _, server_session = pair.begin()
    link = server_session.attach_link("from-server", SENDER)
    link.attach(source=Source(address="s"), target=Target(address="t"))
    _, client_events = pair.pump()
    attached = of(client_events, LinkAttached)
    assert len(attached) == 1
    client_link = attached[0].link
    assert client_link.role is RECEIVER and client_link.remote.initial_delivery_count == 0
    client_link.attach(source=client_link.remote.source, target=client_link.remote.target)
    server_events, _ = pair.pump()
    assert of(server_events, LinkAttached)[0].link is link
    assert link.state is LinkState.ATTACHED


def test_sender_settle_mode_is_carried():
    """S8.1 (section 2.8.2): the receiver's choice of pre-settled delivery reaches the
    sender, whose link reports itself presettled."""
    pair, client_link, server_link = link_pair(RECEIVER, snd_settle_mode=SND_SETTLED)
    assert server_link.presettled is True
    pair, client_link, server_link = link_pair(RECEIVER, snd_settle_mode=SND_UNSETTLED)
    assert server_link.presettled is False


def test_refuse():
    """S10.4 (section 2.6.3): a refused link gets an attach with a null terminus, then a
    detach closed=true carrying the error; both ends end up detached."""
    pair = opened_pair()
    client_session, _ = pair.begin()
    client_link = client_session.attach_link("bad", SENDER)
    client_link.attach(source=Source(address="x"), target=Target(address="forbidden"))
    server_events, _ = pair.pump()
    server_link = of(server_events, LinkAttached)[0].link
    mark = pair.mark()
    server_link.refuse(Symbol("amqp:unauthorized-access"), "no send rights on forbidden")
    server_events, client_events = pair.pump()
    assert names(client_events) == ["LinkAttached", "LinkDetached"]
    detached = client_events[1]
    assert detached.closed is True
    assert detached.error == Error(Symbol("amqp:unauthorized-access"),
                                   "no send rights on forbidden")
    _, server_frames = pair.since(mark)
    attach, detach = performatives_of(server_frames)[:2]
    assert isinstance(attach, Attach) and attach.target is None
    assert attach.source.address == "x"
    assert isinstance(detach, Detach) and detach.closed is True
    assert client_link.state is LinkState.DETACHED
    assert server_link.state is LinkState.DETACHED
    # The refused link left the server's session at once: the peer's detach only
    # frees its handle, with nothing more to report.
    assert names(server_events) == []
    assert server_link not in server_link.session.links


def test_refuse_a_receiver():
    """S10.4 (section 2.6.3): refusing a link the peer receives on nulls the source."""
    pair = opened_pair()
    client_session, _ = pair.begin()
    client_session.attach_link("r", RECEIVER).attach(source=Source(address="nope"),
                                                     target=Target())
    server_events, _ = pair.pump()
    mark = pair.mark()
    of(server_events, LinkAttached)[0].link.refuse(Symbol("amqp:not-found"), "no node")
    pair.pump()
    attach = performatives_of(pair.since(mark)[1], Attach)[0]
    assert attach.source is None and attach.target is not None


def test_attach_with_a_handle_in_use():
    """S10.4 (section 2.7.3): a second attach on a handle in use closes the connection with
    amqp:session:handle-in-use."""
    pair, client_link, server_link = link_pair(SENDER)
    pair.inject("server", frame(Attach(name="other", handle=client_link.handle, role=SENDER,
                                       source=Source(), target=Target(),
                                       initial_delivery_count=0)))
    _, client_events = pair.pump()
    assert closed_with(client_events).condition == Symbol("amqp:session:handle-in-use")


def test_attach_missing_mandatory_fields():
    """S10.4 (section 2.7.3): an attach without name, handle or role is refused."""
    pair = opened_pair()
    pair.begin()
    pair.inject("server", frame(Attach(handle=0, role=SENDER)))
    _, client_events = pair.pump()
    assert closed_with(client_events).condition == Symbol("amqp:invalid-field")


# -- credit ---------------------------------------------------------------------------------

def test_no_send_without_credit():
    """S10.1 (section 2.6.7): a sender without credit cannot send (a local error)."""
    pair, client_link, server_link = link_pair(SENDER)
    assert client_link.credit == 0
    with pytest.raises(AmqpLocalError):
        client_link.send(b"x", settled=True)


def test_credit_arithmetic():
    """S10.1 (section 2.6.7): the sender's credit is the receiver's delivery-count plus
    its credit minus the sender's delivery-count, after every flow."""
    pair, sender, receiver = link_pair(SENDER)
    receiver.flow(10)
    _, client_events = pair.pump()
    assert of(client_events, CreditGranted)[0].link is sender
    assert sender.credit == 10
    for _ in range(3):
        sender.send(b"m", settled=True)
    assert sender.credit == 7 and sender.delivery_count == 3
    pair.pump()
    assert receiver.credit == 7 and receiver.delivery_count == 3
    receiver.flow(5)
    pair.pump()
    assert sender.credit == 5
    # Two messages in flight when the receiver grants again: its flow counts only what
    # it had received, and the sender subtracts what it has sent since.
    sender.send(b"a", settled=True)
    sender.send(b"b", settled=True)
    flow = Flow(next_incoming_id=3, incoming_window=1000, next_outgoing_id=0,
                outgoing_window=1000, handle=sender.remote_handle, delivery_count=3,
                link_credit=4)
    pair.inject("client", frame(flow))
    assert sender.credit == 2
    with pytest.raises(AmqpLocalError):
        for _ in range(3):
            sender.send(b"x", settled=True)


def test_credit_behind_the_sender_is_zero():
    """S10.1 (section 2.6.7): a flow whose delivery-count + credit is behind the sender's
    count leaves no credit (serial-number arithmetic, never a huge number)."""
    pair, sender, receiver = link_pair(SENDER, credit=5)
    for _ in range(5):
        sender.send(b"m", settled=True)
    pair.inject("client", frame(Flow(next_incoming_id=0, incoming_window=10,
                                     next_outgoing_id=0, outgoing_window=10,
                                     handle=sender.remote_handle, delivery_count=0,
                                     link_credit=2)))
    assert sender.credit == 0


def test_credit_granted_event_per_flow():
    """S10.1: each link flow to a sender is reported as CreditGranted."""
    pair, sender, receiver = link_pair(SENDER)
    receiver.flow(1)
    receiver.flow(2)
    _, client_events = pair.pump()
    assert names(client_events) == ["CreditGranted", "CreditGranted"]
    assert sender.credit == 2


def test_only_a_receiver_grants_credit():
    """S10.1: flow() on a sending link and drained() on a receiving link are local errors."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    with pytest.raises(AmqpLocalError):
        sender.flow(5)
    with pytest.raises(AmqpLocalError):
        receiver.drained()


def test_echo_flow_is_answered():
    """S10.1 (section 2.7.4): a flow with echo=true is answered with the sender's state."""
    pair, sender, receiver = link_pair(SENDER)
    receiver.flow(3, echo=True)
    mark = pair.mark()
    pair.pump()
    client_frames, _ = pair.since(mark)
    flows = performatives_of(client_frames, Flow)
    assert len(flows) == 1
    assert flows[0].handle == sender.handle and flows[0].link_credit == 3


def test_drain():
    """S10.1 (section 2.6.7): with drain set, drained() hands back the unused credit and
    advances the delivery-count; the receiver learns it from a flow and has no credit
    left out."""
    pair, sender, receiver = link_pair(SENDER)
    receiver.flow(10, drain=True)
    pair.pump()
    assert sender.drain is True and sender.credit == 10
    sender.send(b"a", settled=True)
    sender.send(b"b", settled=True)
    mark = pair.mark()
    sender.drained()
    assert sender.credit == 0 and sender.delivery_count == 10 and sender.drain is False
    server_events, _ = pair.pump()
    assert names(server_events) == ["MessageReceived", "MessageReceived"]
    client_frames, _ = pair.since(mark)
    flow = performatives_of(client_frames, Flow)[-1]
    assert flow.delivery_count == 10 and flow.link_credit == 0 and flow.drain is True
    assert receiver.delivery_count == 10
    assert receiver.credit == 0


def test_drained_with_no_credit_left():
    """S10.1 (section 2.6.7): drained() after the credit was used up still answers with a
    flow, and changes no counter."""
    pair, sender, receiver = link_pair(SENDER)
    receiver.flow(1, drain=True)
    pair.pump()
    sender.send(b"a", settled=True)
    sender.drained()
    assert sender.delivery_count == 1 and sender.credit == 0
    pair.pump()
    assert receiver.delivery_count == 1


# -- transfers and settlement ---------------------------------------------------------------

def test_presettled_transfer():
    """S8.1: an at-most-once (settled) transfer arrives settled; nothing stays unsettled and
    no disposition is exchanged."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    mark = pair.mark()
    delivery_id = sender.send(b"hello", settled=True, tag=b"t1")
    server_events, client_events = pair.pump()
    assert len(server_events) == 1
    event = server_events[0]
    assert isinstance(event, MessageReceived)
    assert (event.delivery_id, event.delivery_tag, event.settled, event.payload) == (
        delivery_id, b"t1", True, b"hello")
    assert sender.session.unsettled_out == 0
    client_frames, server_frames = pair.since(mark)
    assert not performatives_of(client_frames + server_frames, Disposition)
    assert client_events == []


def test_unsettled_transfer_settled_by_disposition():
    """S8.1: an at-least-once transfer stays unsettled until the receiver's disposition;
    the sender then gets DeliveriesSettled with the context it gave to send()."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    sender.send(b"hello", settled=False, context="ctx-1")
    server_events, _ = pair.pump()
    event = server_events[0]
    assert event.settled is False
    assert sender.session.unsettled_out == 1
    receiver.settle(event.delivery_id)
    _, client_events = pair.pump()
    assert client_events == [DeliveriesSettled(sender, ["ctx-1"], Accepted(), True)]
    assert sender.session.unsettled_out == 0


@pytest.mark.parametrize("state", [
    Rejected(error=Error(Symbol("amqp:not-allowed"), "bad")), Released(),
    Modified(delivery_failed=True)], ids=["rejected", "released", "modified"])
def test_outcome_reaches_the_sender(state):
    """S8.1 (section 3.4): the receiver's outcome is handed to the sender unchanged."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    sender.send(b"x", settled=False, context="c")
    server_events, _ = pair.pump()
    receiver.settle(server_events[0].delivery_id, state)
    _, client_events = pair.pump()
    assert client_events == [DeliveriesSettled(sender, ["c"], state, True)]


def test_default_delivery_tags_are_distinct():
    """S10.1 (section 2.7.5): without an explicit tag each delivery gets a distinct one."""
    pair, sender, receiver = link_pair(SENDER, credit=3)
    for _ in range(3):
        sender.send(b"x", settled=True)
    server_events, _ = pair.pump()
    tags = [e.delivery_tag for e in server_events]
    assert len(set(tags)) == 3


def test_payload_as_chunks():
    """S10.1: a payload given as a list of chunks arrives as their concatenation."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    sender.send([b"ab", memoryview(b"cd"), bytearray(b"ef")], settled=True)
    server_events, _ = pair.pump()
    assert server_events[0].payload == b"abcdef"


def test_dispositions_merged_into_ranges():
    """S8.1, S9.1: settling 100 consecutive deliveries writes one disposition range, and the
    sender gets every one of the 100 contexts, in order."""
    pair, sender, receiver = link_pair(SENDER, credit=100)
    for i in range(100):
        sender.send(b"m%d" % i, settled=False, context=i)
    server_events, _ = pair.pump()
    assert len(server_events) == 100
    mark = pair.mark()
    for event in server_events:
        receiver.settle(event.delivery_id)
    _, client_events = pair.pump()
    settled = of(client_events, DeliveriesSettled)
    assert [c for e in settled for c in e.deliveries] == list(range(100))
    assert all(e.state == Accepted() and e.settled for e in settled)
    _, server_frames = pair.since(mark)
    dispositions = performatives_of(server_frames, Disposition)
    assert len(dispositions) == 1
    assert (dispositions[0].first, dispositions[0].last) == (0, 99)
    assert sender.session.unsettled_out == 0


def test_dispositions_split_where_ids_or_outcomes_differ():
    """S8.1: a gap in the ids or a different outcome starts a new disposition range."""
    pair, sender, receiver = link_pair(SENDER, credit=6)
    for i in range(6):
        sender.send(b"m", settled=False, context=i)
    ids = [e.delivery_id for e in pair.pump()[0]]
    mark = pair.mark()
    receiver.settle(ids[0])
    receiver.settle(ids[1])
    receiver.settle(ids[2], Released())
    receiver.settle(ids[4])
    receiver.settle(ids[5])
    _, client_events = pair.pump()
    ranges = [(d.first, d.last, type(d.state).__name__)
              for d in performatives_of(pair.since(mark)[1], Disposition)]
    assert ranges == [(ids[0], ids[1], "Accepted"), (ids[2], ids[2], "Released"),
                      (ids[4], ids[5], "Accepted")]
    assert [c for e in client_events for c in e.deliveries] == [0, 1, 2, 4, 5]


def test_disposition_for_unknown_or_settled_delivery_is_ignored():
    """S8.5 (FACTS section 3.3): a disposition naming an unknown delivery, or one already
    settled, changes nothing and raises nothing."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    sender.send(b"x", settled=False, context="c")
    server_events, _ = pair.pump()
    receiver.settle(server_events[0].delivery_id)
    pair.pump()
    events = pair.inject("client", frame(Disposition(role=RECEIVER, first=0, settled=True,
                                                     state=Accepted())))
    assert events == []
    events = pair.inject("client", frame(Disposition(role=RECEIVER, first=500, last=600,
                                                     settled=True, state=Accepted())))
    assert events == []
    assert not pair.client.finished and pair.client.error is None


def test_disposition_over_a_huge_range():
    """S10.4: a disposition covering the whole id space settles what we hold, quickly."""
    pair, sender, receiver = link_pair(SENDER, credit=2)
    sender.send(b"x", settled=False, context="a")
    sender.send(b"y", settled=False, context="b")
    pair.pump()
    events = pair.inject("client", frame(Disposition(role=RECEIVER, first=1, last=0,
                                                     settled=True, state=Accepted())))
    assert [c for e in events for c in e.deliveries] == ["a", "b"]


def test_disposition_without_first_is_an_error():
    """S10.4, P4: a disposition lacking its mandatory first field closes the connection
    with an error condition; receive_data does not raise."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    pair.inject("client", frame(Disposition(role=RECEIVER, settled=True)))
    assert pair.client.finished
    assert pair.client.error is not None


def test_receiver_settle_mode_second():
    """S8.1 (section 2.8.3): when the receiver leaves a delivery unsettled with an outcome,
    the sender settles it and tells the receiver with a settled disposition."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    sender.send(b"x", settled=False, context="c")
    server_events, _ = pair.pump()
    mark = pair.mark()
    receiver.settle(server_events[0].delivery_id, settled=False)
    _, client_events = pair.pump()
    assert client_events == [DeliveriesSettled(sender, ["c"], Accepted(), True)]
    client_frames, _ = pair.since(mark)
    dispositions = performatives_of(client_frames, Disposition)
    assert len(dispositions) == 1
    assert dispositions[0].role is SENDER and dispositions[0].settled is True


# -- multi-frame transfers ------------------------------------------------------------------

def transfer_frames(link_handle, parts, delivery_id=0, tag=b"tag", settled=False,
                    aborted=False, channel=0):
    """Frames of one delivery split into C{parts} (more=true on all but the last)."""
    out = b""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        performative = Transfer(handle=link_handle, more=not last,
                                aborted=aborted and last)
        if i == 0:
            performative.delivery_id = delivery_id
            performative.delivery_tag = tag
            performative.message_format = 0
            performative.settled = settled
        out += frame(performative, channel, part)
    return out


@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_multi_frame_transfer_is_assembled(byte_at_a_time):
    """S10.1 (section 2.6.14): frames with more=true are joined into one message, reported
    once, when the last frame arrives."""
    pair, client_link, server_link = link_pair(
        SENDER, credit=3, pair=opened_pair(byte_at_a_time=byte_at_a_time))
    handle = client_link.handle
    events = pair.inject("server", transfer_frames(handle, [b"ab", b"cd"])[:-1])
    assert events == []
    assert server_link.partial_size == 2
    data = transfer_frames(handle, [b"ab", b"cd", b"", b"ef"], delivery_id=1)
    events = pair.inject("server", transfer_frames(handle, [b"ab", b"cd"])[-1:] + data)
    assert [(e.delivery_id, e.payload) for e in events] == [(0, b"abcd"), (1, b"abcdef")]
    assert server_link.partial_size == 0
    assert server_link.credit == 1


def test_aborted_transfer():
    """S10.1 (section 2.6.14): an aborted multi-frame delivery is reported as
    TransferAborted, its bytes are dropped, and the link goes on."""
    pair, client_link, server_link = link_pair(SENDER, credit=2)
    handle = client_link.handle
    events = pair.inject("server", transfer_frames(handle, [b"ab", b"cd"], delivery_id=7,
                                                   aborted=True))
    assert events == [TransferAborted(server_link, 7)]
    assert server_link.partial_size == 0
    events = pair.inject("server", transfer_frames(handle, [b"xy"], delivery_id=8))
    assert [(e.delivery_id, e.payload) for e in events] == [(8, b"xy")]
    assert not pair.server.finished


def test_transfer_beyond_credit():
    """S10.4 (section 2.6.7): a transfer the receiver gave no credit for closes the
    connection with amqp:link:transfer-limit-exceeded."""
    pair, client_link, server_link = link_pair(SENDER, credit=1)
    handle = client_link.handle
    pair.inject("server", transfer_frames(handle, [b"1"], delivery_id=0)
                + transfer_frames(handle, [b"2"], delivery_id=1))
    _, client_events = pair.pump()
    assert closed_with(client_events).condition == Symbol("amqp:link:transfer-limit-exceeded")
    assert pair.server.finished


def test_transfer_on_unattached_handle():
    """S10.4 (section 2.7.5): a transfer on a handle nobody attached closes the connection
    with amqp:session:unattached-handle."""
    pair, client_link, server_link = link_pair(SENDER, credit=1)
    pair.inject("server", transfer_frames(42, [b"x"]))
    _, client_events = pair.pump()
    assert closed_with(client_events).condition == Symbol("amqp:session:unattached-handle")


def test_transfer_to_a_sender():
    """S10.4: a transfer on a link where we are the sender is a protocol error."""
    pair, client_link, server_link = link_pair(RECEIVER, credit=1)
    pair.inject("server", transfer_frames(client_link.handle, [b"x"]))
    assert pair.server.finished
    assert pair.server.error.condition == "amqp:invalid-field"


def test_flow_on_unattached_handle():
    """S10.4: a flow naming a handle nobody attached closes the connection."""
    pair, client_link, server_link = link_pair(SENDER)
    pair.inject("client", frame(Flow(next_incoming_id=0, incoming_window=1,
                                     next_outgoing_id=0, outgoing_window=1, handle=99,
                                     delivery_count=0, link_credit=1)))
    assert pair.client.finished
    assert pair.client.error.condition == "amqp:session:unattached-handle"


def test_multi_frame_message_above_max_message_size():
    """S9.5, P5 (section 2.7.3): a multi-frame delivery growing past the link's
    max-message-size is refused with amqp:link:message-size-exceeded: the link is detached, the
    connection stays."""
    pair = EnginePair(server_kwargs={"max_frame_size": 512}).handshake()
    pair, sender, receiver = link_pair(SENDER, credit=1, pair=pair,
                                       server_attach={"max_message_size": 1000})
    assert sender.remote.max_message_size == 1000
    sender.send(bytes(5000), settled=True)
    server_events, client_events = pair.pump()
    assert not of(server_events, MessageReceived)
    _assert_link_refused_for_size(server_events, client_events, sender)


def _assert_link_refused_for_size(server_events, client_events, sender):
    """A link error detaches the link with the condition; the connection stays open."""
    size = Symbol("amqp:link:message-size-exceeded")
    # The server reports its own detach (so the glue lets go of the link), then the
    # client's answer to it.
    assert [e.error and e.error.condition for e in of(server_events, LinkDetached)] == [
        size, None]
    detached = of(client_events, LinkDetached)
    assert [(e.link, e.closed, e.error.condition) for e in detached] == [(sender, True, size)]
    assert not of(client_events, ConnectionClosed)


def test_single_frame_message_above_max_message_size():
    """S9.5, P5 (section 2.7.3): a message above the link's max-message-size is refused
    with amqp:link:message-size-exceeded even when it fits in one frame."""
    pair, sender, receiver = link_pair(SENDER, credit=1,
                                       server_attach={"max_message_size": 1000})
    sender.send(bytes(5000), settled=True)
    server_events, client_events = pair.pump()
    assert not of(server_events, MessageReceived)
    _assert_link_refused_for_size(server_events, client_events, sender)


# -- detach and end -------------------------------------------------------------------------

@pytest.mark.parametrize("closed", [True, False], ids=["close", "detach"])
def test_detach_is_answered_in_kind(closed):
    """S10.1 (section 2.6.6): a detach is answered with a detach carrying the same closed
    flag, and both ends become detached."""
    pair, client_link, server_link = link_pair(SENDER, credit=1)
    mark = pair.mark()
    client_link.detach(closed=closed)
    server_events, client_events = pair.pump()
    assert server_events == [LinkDetached(server_link, closed, None)]
    assert client_events == [LinkDetached(client_link, closed, None)]
    _, server_frames = pair.since(mark)
    assert [d.closed for d in performatives_of(server_frames, Detach)] == [closed]
    assert client_link.state is LinkState.DETACHED
    assert server_link.state is LinkState.DETACHED
    assert client_link not in client_link.session.links
    assert server_link not in server_link.session.links


def test_detach_with_an_error():
    """S10.4: a detach with an error condition reaches the peer with it."""
    pair, client_link, server_link = link_pair(SENDER, credit=1)
    server_link.detach(closed=True, condition=Symbol("amqp:resource-deleted"),
                       description="queue deleted")
    _, client_events = pair.pump()
    assert client_events == [LinkDetached(client_link, True, Error(
        Symbol("amqp:resource-deleted"), "queue deleted"))]


def test_handle_reusable_after_detach():
    """S10.1 (section 2.6.2): after a link is detached, the peer may attach a new link on
    the same handle."""
    pair, client_link, server_link = link_pair(SENDER, credit=1)
    client_link.detach()
    pair.pump()
    session = client_link.session
    again = session.attach_link("link-2", SENDER)
    assert again.handle == client_link.handle
    again.attach(source=Source(), target=Target(address="q"))
    server_events, _ = pair.pump()
    assert names(server_events) == ["LinkAttached"]
    assert not pair.server.finished


def test_session_end_is_answered():
    """S10.1 (section 2.5.5): an end is answered with an end, and both connections forget
    the session."""
    pair = opened_pair()
    client_session, server_session = pair.begin()
    assert server_session.state is SessionState.MAPPED
    client_session.end()
    server_events, client_events = pair.pump()
    assert server_events == [SessionEnded(server_session, None, [])]
    assert client_events == [SessionEnded(client_session, None, [])]
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_session_end_cleans_its_links():
    """S10.1 (section 2.5.5): ending a session detaches its links: none is left attached,
    and a send on one of them is a local error."""
    pair, sender, receiver = link_pair(SENDER, credit=5)
    sender.session.end()
    pair.pump()
    assert sender.state is LinkState.DETACHED
    assert receiver.state is LinkState.DETACHED
    assert sender.session.links == [] and receiver.session.links == []
    with pytest.raises(AmqpLocalError):
        sender.send(b"x", settled=True)


def test_session_end_with_error():
    """S10.4: an end carrying an error reaches the peer's SessionEnded."""
    pair = opened_pair()
    client_session, server_session = pair.begin()
    server_session.end(Symbol("amqp:session:window-violation"), "too many")
    _, client_events = pair.pump()
    assert client_events == [SessionEnded(client_session, Error(
        Symbol("amqp:session:window-violation"), "too many"), [])]


def test_two_sessions_are_independent():
    """S10.1: links on two sessions carry their own messages; ending one leaves the other."""
    pair = opened_pair()
    pair, sender_a, receiver_a = link_pair(SENDER, credit=1, pair=pair)
    pair, sender_b, receiver_b = link_pair(SENDER, credit=1, pair=pair)
    assert sender_a.session is not sender_b.session
    assert receiver_a.session.channel != receiver_b.session.channel
    sender_a.send(b"a", settled=True)
    sender_b.send(b"b", settled=True)
    server_events, _ = pair.pump()
    assert [(e.link, e.payload) for e in server_events] == [(receiver_a, b"a"),
                                                           (receiver_b, b"b")]
    sender_a.session.end()
    pair.pump()
    receiver_b.flow(1)
    pair.pump()
    sender_b.send(b"c", settled=True)
    server_events, _ = pair.pump()
    assert [(e.link, e.payload) for e in server_events] == [(receiver_b, b"c")]


def test_begin_session_reports_remote_session():
    """S10.1 (section 2.5.1): the server's answering begin is reported to the client as
    SessionBegun for the session it started."""
    pair = opened_pair()
    session = pair.client.begin_session()
    server_events, _ = pair.pump()
    of(server_events, SessionBegun)[0].session.begin()
    _, client_events = pair.pump()
    assert client_events == [SessionBegun(session)]
    assert session.state is SessionState.MAPPED


def test_frames_decode_as_written():
    """S10.1: the frames a link writes decode to the performatives the spec expects."""
    pair, sender, receiver = link_pair(SENDER, credit=1)
    mark = pair.mark()
    sender.send(b"payload", settled=False, tag=b"T")
    pair.pump()
    client_frames, _ = pair.since(mark)
    (channel, transfer, payload), = [f for f in client_frames if f[0] != "header"]
    assert isinstance(transfer, Transfer)
    assert (transfer.handle, transfer.delivery_tag, transfer.settled, transfer.more) == (
        sender.handle, b"T", False, False)
    assert payload == b"payload"
    assert channel == sender.session.channel


# -- S9.5 ingress limits ---------------------------------------------------------------------

def _ingress_pair(max_frame_size=None):
    pair = EnginePair(server_kwargs={"max_frame_size": max_frame_size}).handshake() \
        if max_frame_size else None
    kwargs = {"pair": pair} if pair is not None else {}
    pair, sender, receiver = link_pair(SENDER, credit=4, **kwargs)
    receiver.ingress_limits = (3000, 6000)    # guaranteed, direct
    return pair, sender, receiver


@pytest.mark.parametrize("durable,settled,size,refused", [
    (True, False, 3001, True),     # guaranteed over 3000
    (True, False, 2900, False),
    (True, True, 3500, True),      # pre-settled but durable: still guaranteed
    (False, False, 3500, True),    # unsettled: guaranteed
    (False, True, 3500, False),    # direct: up to 6000
    (False, True, 6500, True),
])
def test_ingress_limit_by_class(durable, settled, size, refused):
    """S9.5: a message over the limit of its class (guaranteed = durable or unsettled,
    direct = pre-settled and not durable) closes the connection with
    CLIENT_CLIENT_MESSAGE_TOO_BIG and an IngressRefused event; smaller ones arrive."""
    pair, sender, receiver = _ingress_pair()
    payload = encode_message(bytes(size), header=Header(durable=durable))
    sender.send(payload, settled=settled)
    server_events, client_events = pair.pump()
    if not refused:
        assert [e.payload for e in of(server_events, MessageReceived)] == [payload]
        return
    assert not of(server_events, MessageReceived)
    [event] = of(server_events, IngressRefused)
    assert (event.link, event.limit, event.guaranteed) == (
        receiver, 3000 if (durable or not settled) else 6000, durable or not settled)
    [closed] = of(client_events, ConnectionClosed)
    assert closed.error.condition == Symbol("amqp:link:message-size-exceeded")
    assert closed.error.description.startswith("CLIENT_CLIENT_MESSAGE_TOO_BIG")


def test_ingress_limit_is_checked_as_frames_arrive():
    """S9.5: a multi-frame guaranteed message is refused once the frames received pass
    the limit, before the rest is buffered."""
    pair, sender, receiver = _ingress_pair(max_frame_size=512)
    sender.send(encode_message(bytes(50_000), header=Header(durable=True)), settled=False)
    server_events, _ = pair.pump()
    [event] = of(server_events, IngressRefused)
    assert 3000 < event.size <= 3000 + 512
    assert pair.server.finished
