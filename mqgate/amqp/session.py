"""
One AMQP session endpoint (Part 2 section 2.5): windows, transfer and delivery ids, the
handle map of its links, dispositions.

Session flow control (section 2.5.6), from our side:

- we advertise a large incoming window and refresh it before half of it is used, so the
  session window never limits a producer; link credit does that job (S2.7);
- we track the peer's incoming window and, when it is shut, hold our transfer frames in
  a bounded way: they can only be as many as the link credit the peer granted.

Dispositions we owe are queued and written as ranges when the connection is flushed:
a consumer settling a burst of deliveries costs one frame, not one per message.

Handles (section 2.6.2): we announce a handle-max in our begin (the connection's
C{handle_max}, a setting on the broker) and hold the peer to it: an attach above it is
a framing error of the connection (section 2.7.2, begin, handle-max), an attach on a
handle still in use is C{amqp:session:handle-in-use} (section 2.7.3). Our own handles
come from a L{NumberPool} bounded by the peer's handle-max, so finding one is O(log n)
and running out is a refusal, never a search. Every per-attach lookup is a dictionary
access (links we are attaching are kept by name): a churn of attaches and detaches
costs the same per link however many links the session has had.

A link the glue refused (attach, then detach with an error) leaves the session at once:
only its two handle numbers are remembered (C{_refused}) until the peer's detach frees
them, so a peer that never answers holds a few bytes per handle, not a link.

When the peer's incoming window is shut, a transfer we write waits in C{_blocked}; the
link then reports itself not L{Link.writable} and is remembered as held back
(C{_stalled}), so the layer above stops handing it messages (they wait in its own,
bounded, queues). When the window opens again the held-back links are reported in one
L{WindowOpened} event. Each link therefore leaves at most the one message it was
writing in C{_blocked}.
"""

import collections
import enum
import struct

from mqgate.amqp import conditions as c
from mqgate.amqp.codec import encode_as
from mqgate.amqp.conditions import AmqpLocalError, AmqpRemoteError
from mqgate.amqp.events import (
    CreditGranted, DeliveriesSettled, IngressRefused, LinkAttached, LinkDetached,
    MessageReceived, SessionEnded, TransferAborted, WindowOpened,
)
from mqgate.amqp.handles import NumberPool
from mqgate.amqp.link import Link, LinkError, LinkState, MessageTooBig
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Accepted, Begin, Disposition, End, Error, Flow, Modified, Rejected,
    Released, TransactionalState, Transfer,
)

__all__ = ["Session", "SessionState", "INCOMING_WINDOW"]

# The hot path's transfer performative, written without the generic encoder: handle,
# delivery-id (uint, 4 bytes), a 4-byte delivery-tag, message-format 0, settled.
_TRANSFER_TAIL = struct.Struct(">BIBB4sBB")
_HANDLE_PREFIX = {}


def _transfer_head(handle, delivery_id, tag, settled):
    prefix = _HANDLE_PREFIX.get(handle)
    if prefix is None:
        encoded = bytearray()
        encode_as("uint")(encoded, handle)
        # list8: size = count byte + handle + 5 (id) + 6 (tag) + 1 (format) + 1 (settled)
        prefix = bytes((0x00, 0x53, 0x14, 0xC0, 14 + len(encoded), 5)) + bytes(encoded)
        if handle < 1024:
            _HANDLE_PREFIX[handle] = prefix
    return prefix + _TRANSFER_TAIL.pack(0x70, delivery_id, 0xA0, 4, tag, 0x43,
                                        0x41 if settled else 0x42)

_MASK = 0xFFFFFFFF
# The outcomes of section 3.4: a delivery in one of these states is done with.
_TERMINAL = frozenset((Accepted, Rejected, Released, Modified))
# Large enough that the session window never throttles a link (credit does that), small
# enough to stay clear of serial-number wrap ambiguity (RFC 1982: less than 2**31).
INCOMING_WINDOW = 0x7FFFFFFF
OUTGOING_WINDOW = 0x7FFFFFFF
#: The handle-max a session announces unless told otherwise: links per session.
HANDLE_MAX = 1023


class SessionState(enum.Enum):
    UNMAPPED = "UNMAPPED"
    BEGIN_SENT = "BEGIN_SENT"
    BEGIN_RCVD = "BEGIN_RCVD"
    MAPPED = "MAPPED"
    END_SENT = "END_SENT"
    END_RCVD = "END_RCVD"
    DISCARDING = "DISCARDING"


class Session:
    """A session endpoint of ours, bound to one channel of a L{Connection}."""

    def __init__(self, connection, channel):
        self.connection = connection
        self.channel = channel
        self.remote_channel = None
        self.state = SessionState.UNMAPPED
        self.context = None
        self.handle_max = connection.handle_max   # what we announce and enforce
        self._links = {}            # local handle -> Link
        self._remote_links = {}     # remote handle -> Link
        self._attaching = {}        # name -> our link waiting for the peer's attach
        self._refused = {}          # remote handle -> local handle of a refused link
        # Our handles, up to the peer's handle-max once its begin says it (section 2.7.2).
        self._handles = NumberPool(_MASK)
        self._stalled = {}          # sending links held back by the peer's window
        self.next_outgoing_id = 0
        self.next_incoming_id = None
        self.remote_incoming_window = 0
        self._incoming_since_flow = 0
        self._next_delivery_id = 0
        self._unsettled_out = {}    # our delivery id -> (link, context)
        self._low = 0               # no unsettled delivery id is older than this
        self._dispositions = []     # pending (role, delivery id, state, settled)
        self._blocked = collections.deque()   # transfer frames waiting for the peer's window

    def __repr__(self):
        return f"<Session channel={self.channel} {self.state.name}>"

    @property
    def links(self):
        """Our links on this session, in attach order."""
        return list(self._links.values())

    @property
    def unsettled_out(self):
        """How many deliveries we sent that the peer has not settled."""
        return len(self._unsettled_out)

    # -- local actions ---------------------------------------------------------------------

    def begin(self):
        """Send our begin (answering the peer's, or starting a session)."""
        if self.state not in (SessionState.UNMAPPED, SessionState.BEGIN_RCVD):
            raise AmqpLocalError(f"cannot begin a session in state {self.state.name}")
        self._emit(Begin(remote_channel=self.remote_channel,
                         next_outgoing_id=self.next_outgoing_id,
                         incoming_window=INCOMING_WINDOW, outgoing_window=OUTGOING_WINDOW,
                         handle_max=self.handle_max))
        self.state = (SessionState.MAPPED if self.state is SessionState.BEGIN_RCVD
                      else SessionState.BEGIN_SENT)

    def _unmap(self):
        """The session is over: so are its links (section 2.5.5)."""
        for link in self._links.values():
            link.state = LinkState.DETACHED
            link.drop_partial()
        self._links.clear()
        self._remote_links.clear()
        self._attaching.clear()
        self._refused.clear()
        self._stalled.clear()
        self._blocked.clear()
        self.state = SessionState.UNMAPPED
        self.connection._forget_session(self)

    def end(self, condition=None, description=None):
        """End the session (with an error condition when it is our complaint)."""
        if self.state in (SessionState.END_SENT, SessionState.UNMAPPED,
                          SessionState.DISCARDING):
            return
        self._emit(End(error=Error(condition, description) if condition else None))
        if self.state is SessionState.END_RCVD:
            self._unmap()
        else:
            self.state = SessionState.END_SENT

    def attach_link(self, name, role):
        """Create a link that we initiate; call C{link.attach(...)} on it next.

        @raise AmqpLocalError: every handle the peer's handle-max allows is in use.
        """
        handle = self._handles.take()
        if handle is None:
            raise AmqpLocalError(f"no free handle: the session already has "
                                 f"{len(self._handles)} links, the peer's handle-max "
                                 f"allows {self._handles.limit + 1}")
        link = Link(self, name, handle, role)
        self._links[handle] = link
        return link

    @property
    def window_open(self):
        """Whether a transfer we write now goes out at once (the peer's incoming window
        has room and nothing waits before it, section 2.5.6)."""
        return self.remote_incoming_window > 0 and not self._blocked

    # -- writing (called by links) ---------------------------------------------------------

    def _emit(self, performative, payload=None):
        if self._dispositions:
            self._flush_dispositions()
        self.connection._write_frame(self.channel, performative, payload)

    def _flow_performative(self, link=None, drain=False, echo=False):
        flow = Flow(next_incoming_id=self.next_incoming_id, incoming_window=INCOMING_WINDOW,
                    next_outgoing_id=self.next_outgoing_id, outgoing_window=OUTGOING_WINDOW,
                    echo=echo)
        if link is not None:
            flow.handle = link.handle
            flow.delivery_count = link.delivery_count
            flow.link_credit = link.credit
            flow.drain = drain or (link.drain if link.is_sender else False)
            if link.is_sender:
                flow.available = link.available
        return flow

    def _send_flow(self, link=None, drain=False, echo=False):
        self._incoming_since_flow = 0
        self._emit(self._flow_performative(link, drain, echo))

    def _send_transfer(self, link, payload, settled, context, tag, message_format):
        if link.state is not LinkState.ATTACHED:
            raise AmqpLocalError(f"link {link.name!r} is not attached")
        delivery_id = self._next_delivery_id
        self._next_delivery_id = (delivery_id + 1) & _MASK
        if tag is None:
            tag = delivery_id.to_bytes(4, "big")
        if not settled:
            self._unsettled_out[delivery_id] = (link, context)
        chunks = payload if isinstance(payload, list) else [payload]
        size = sum(len(chunk) for chunk in chunks)
        if len(tag) == 4 and message_format == 0:
            head = _transfer_head(link.handle, delivery_id, tag, settled)
            if size <= self.connection.remote_max_frame_size - 8 - len(head):
                self._write_transfer_frame(link, head, chunks, size)
                return delivery_id
        transfer = Transfer(handle=link.handle, delivery_id=delivery_id, delivery_tag=tag,
                            message_format=message_format, settled=settled)
        head = bytearray()
        transfer.encode(head)
        max_frame = self.connection.remote_max_frame_size
        if size <= max_frame - 8 - len(head):
            self._write_transfer_frame(link, head, chunks, size)
            return delivery_id
        # Multi-frame delivery (section 2.6.14): every frame but the last says more=true;
        # continuation frames carry only the handle.
        data = memoryview(b"".join(chunks))
        transfer.more = True
        head = bytearray()
        transfer.encode(head)
        more_head = bytearray()
        Transfer(handle=link.handle, more=True).encode(more_head)
        last_head = bytearray()
        Transfer(handle=link.handle).encode(last_head)
        pos = 0
        while True:
            end = pos + max_frame - 8 - len(head)
            if end >= size:  # never on the first frame: the message did not fit one
                self._write_transfer_frame(link, last_head, [data[pos:]], size - pos)
                return delivery_id
            self._write_transfer_frame(link, head, [data[pos:end]], end - pos)
            pos = end
            head = more_head

    def _write_transfer_frame(self, link, head, chunks, size):
        # Pending dispositions are about the peer's deliveries, not ours: a transfer may
        # overtake them, so a consumer's burst does not cost one disposition frame each.
        if self.remote_incoming_window > 0 and not self._blocked:
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
            self.connection._write_raw(self.channel, head, chunks, size)
        else:
            self._blocked.append((link, head, chunks, size))

    def _note_sent(self, link):
        """After a transfer of C{link}: remember it as held back if the window shut."""
        if self.remote_incoming_window <= 0 or self._blocked:
            self._stalled[link] = None

    def _release_blocked(self):
        while self._blocked and self.remote_incoming_window > 0:
            _link, head, chunks, size = self._blocked.popleft()
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
            self.connection._write_raw(self.channel, head, chunks, size)

    def _drop_blocked(self, link):
        """C{link} detached: its transfers still waiting for the window must not follow
        its detach (at most the one message it was writing, see the module doc)."""
        self._stalled.pop(link, None)
        if self._blocked:
            self._blocked = collections.deque(
                entry for entry in self._blocked if entry[0] is not link)

    def _queue_disposition(self, delivery_id, state, settled, role=RECEIVER):
        if not self._dispositions:
            self.connection._disposing.append(self)
        self._dispositions.append((role, delivery_id, state, settled))

    def _flush_dispositions(self):
        """Write pending dispositions, merging runs of consecutive ids with one outcome."""
        pending = self._dispositions
        self._dispositions = []
        write = self.connection._write_frame
        run = None
        for role, delivery_id, state, settled in pending:
            if (run is not None and run[0] == role and run[3] == settled
                    and delivery_id == ((run[2] + 1) & _MASK) and type(run[4]) is type(state)
                    and run[4] == state):
                run[2] = delivery_id
                continue
            if run is not None:
                write(self.channel, Disposition(role=run[0], first=run[1], last=run[2],
                                                settled=run[3], state=run[4]), None)
            run = [role, delivery_id, delivery_id, settled, state]
        if run is not None:
            write(self.channel, Disposition(role=run[0], first=run[1], last=run[2],
                                            settled=run[3], state=run[4]), None)

    def _forget_link(self, link):
        """C{link} is detached both ways: its handles are free again."""
        if self._links.pop(link.handle, None) is link:
            self._handles.give_back(link.handle)
        if link.remote_handle is not None:
            self._remote_links.pop(link.remote_handle, None)
        if self._attaching.get(link.name) is link:
            del self._attaching[link.name]
        self._drop_blocked(link)

    def _forget_refused(self, link):
        """C{link} was refused (attach then detach sent): keep only its handle numbers
        until the peer's detach, so a peer that never answers holds no link."""
        self._links.pop(link.handle, None)
        self._remote_links.pop(link.remote_handle, None)
        self._refused[link.remote_handle] = link.handle
        self._drop_blocked(link)
        link.drop_partial()

    # -- frames from the peer (called by the connection) -----------------------------------

    def on_begin(self, begin):
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_incoming_window = begin.incoming_window or 0
        if begin.handle_max is not None:
            self._handles.limit = begin.handle_max
        if self.state is SessionState.BEGIN_SENT:
            self.state = SessionState.MAPPED
        else:
            self.state = SessionState.BEGIN_RCVD

    def on_end(self, end, events):
        events.append(SessionEnded(self, end.error, self.links))
        if self.state is SessionState.END_SENT:
            self._unmap()
        else:
            self.state = SessionState.END_RCVD
            self.end()

    def on_attach(self, attach, events):
        handle = attach.handle
        if attach.role is None or attach.name is None or handle is None:
            raise AmqpRemoteError("attach lacks name, handle or role", c.INVALID_FIELD)
        if handle > self.handle_max:
            # Section 2.7.2 (begin, handle-max): a handle outside the range we announced
            # is a framing error of the whole connection.
            raise AmqpRemoteError(
                f"attach on handle {handle}, above the handle-max {self.handle_max} this "
                f"session announced{self.connection.setting_hint('handle_max')}",
                c.FRAMING_ERROR)
        if handle in self._remote_links or handle in self._refused:
            raise AmqpRemoteError(f"handle {handle} is already in use", c.HANDLE_IN_USE)
        link = self._attaching.pop(attach.name, None)
        if link is None:
            local = self._handles.take()
            if local is None:
                raise AmqpRemoteError(
                    f"no handle left to answer attach {attach.name!r}: this session has "
                    f"{len(self._handles)} links, all the handle-max of the peer's begin "
                    f"allows", c.RESOURCE_LIMIT_EXCEEDED)
            link = Link(self, attach.name, local, not attach.role)
            self._links[local] = link
        self._remote_links[handle] = link
        link.on_attach(attach)
        events.append(LinkAttached(link))

    def _link(self, handle):
        link = self._remote_links.get(handle)
        if link is None:
            raise AmqpRemoteError(f"handle {handle} is not attached", c.UNATTACHED_HANDLE)
        return link

    def on_detach(self, detach, events):
        local = self._refused.pop(detach.handle, None)
        if local is not None:
            self._handles.give_back(local)   # the peer answered our refusal
            return
        link = self._link(detach.handle)
        events.append(LinkDetached(link, bool(detach.closed), detach.error))
        if link.state is LinkState.DETACH_SENT:
            link.state = LinkState.DETACHED
            self._forget_link(link)
        else:
            link.state = LinkState.DETACH_RCVD
            link.detach(closed=bool(detach.closed))

    def on_flow(self, flow, events):
        next_in = flow.next_incoming_id
        if next_in is None:
            next_in = 0
        self.remote_incoming_window = (next_in + (flow.incoming_window or 0)
                                       - self.next_outgoing_id) & _MASK
        if self.remote_incoming_window > 0x7FFFFFFF:
            self.remote_incoming_window = 0
        if flow.handle is not None:
            if flow.handle not in self._refused:   # else: a flow crossing our refusal
                link = self._link(flow.handle)
                if link.on_flow(flow):
                    events.append(CreditGranted(link))
                    if link.credit > 0 and not self.window_open:
                        # Credit it cannot use yet: say so when the window opens.
                        self._stalled[link] = None
        elif flow.echo:
            self._send_flow()
        if self._blocked:
            self._release_blocked()
        if self._stalled and self.window_open:
            self._wake_stalled(events)

    def _wake_stalled(self, events):
        stalled, self._stalled = self._stalled, {}
        events.append(WindowOpened(self, list(stalled)))

    def on_transfer(self, transfer, payload, events):
        if self.next_incoming_id is not None:
            self.next_incoming_id = (self.next_incoming_id + 1) & _MASK
        self._incoming_since_flow += 1
        if self._incoming_since_flow > INCOMING_WINDOW // 2:
            self._send_flow()
        if transfer.handle in self._refused:
            return  # the rest of a delivery on a link we refused
        link = self._link(transfer.handle)
        if link.state is LinkState.DETACH_SENT:
            return  # the rest of a delivery we refused: the peer has not seen our detach yet
        try:
            done = link.on_transfer(transfer, payload)
        except MessageTooBig as error:
            # Said as an event before the connection closes, so the glue can log and
            # count it (S9.5); the connection's error handling then closes.
            events.append(IngressRefused(link, error.size, error.limit, error.guaranteed))
            raise
        except LinkError as error:
            # A link-level error ends the link, not the session or the connection
            # (Part 2 section 2.8.18; FACTS section 5, link errors detach).
            link.detach(closed=True, condition=error.condition,
                        description=error.description)
            events.append(LinkDetached(link, True, Error(error.condition, error.description)))
            return
        if done is None:
            return
        if done[0] == "aborted":
            events.append(TransferAborted(link, done[1]))
            return
        delivery_id, tag, settled, data, state = done
        events.append(MessageReceived(link, delivery_id, tag, settled, data, state))

    def on_disposition(self, disposition, events):
        """The peer's word on deliveries we sent (section 2.7.6).

        Settled, or not settled but with a terminal outcome (the receiver's
        rcv-settle-mode second): the deliveries are forgotten here, settled on our side
        if needed, and reported. Neither (no state, or the non-terminal received state):
        nothing changes and nothing is reported; the deliveries stay unsettled until the
        peer says more. Nothing is kept for a disposition beyond the deliveries' own
        entries, which leave with their settlement.
        """
        if disposition.role is SENDER or disposition.role is False:
            return  # the peer settling its own deliveries: we settle on first receipt
        first = disposition.first
        if first is None:
            raise AmqpRemoteError("disposition lacks the mandatory first", c.INVALID_FIELD)
        settled = bool(disposition.settled)
        state = disposition.state
        transactional = type(state) is TransactionalState
        if not settled and type(state) not in _TERMINAL and not transactional:
            return
        last = first if disposition.last is None else disposition.last
        unsettled = self._unsettled_out
        by_link = {}
        for delivery_id in self._unsettled_in_range(first, ((last - first) & _MASK) + 1):
            entry = unsettled.pop(delivery_id, None)
            if entry is None:
                continue  # already settled or unknown: ignore (FACTS section 3.3)
            by_link.setdefault(entry[0], []).append(entry[1])
            if not settled and not transactional:
                # The receiver wants us to settle (rcv-settle-mode second): do it now.
                # A transactional outcome (Part 4 section 4.4.2) is reported but not
                # settled here: it takes effect when its transaction commits, and the
                # peer settles it when it likes (Proton leaves it unsettled).
                self._queue_disposition(delivery_id, state, True, SENDER)
        for link, contexts in by_link.items():
            events.append(DeliveriesSettled(link, contexts, state, True))

    def _unsettled_in_range(self, first, count):
        """The delivery ids from C{first} (C{count} of them, serial numbers) that may be
        unsettled, in delivery order, at a cost bounded by the unsettled deliveries:
        only ids between the oldest unsettled one and the next to be sent can be, and
        a range wider than the unsettled map is answered by walking the map."""
        unsettled = self._unsettled_out
        if not unsettled:
            return ()
        low = self._oldest_unsettled()
        window = (self._next_delivery_id - low) & _MASK
        # Positions in the window (0 = low) the range covers: up to two stretches, the
        # second one when the range wraps round the id space past low.
        offset = (first - low) & _MASK
        wrap_end = offset + count - (_MASK + 1)
        stretches = []
        if wrap_end > 0:
            stretches.append((0, min(wrap_end, window, offset)))
        if offset < window:
            stretches.append((offset, min(window, offset + count)))
        n = sum(end - begin for begin, end in stretches)
        if n <= len(unsettled):
            return [(low + w) & _MASK for begin, end in stretches for w in range(begin, end)]
        # Ids are given in sequence, so the map's order is delivery order.
        return [i for i in unsettled if ((i - first) & _MASK) < count]

    def _oldest_unsettled(self):
        """The oldest delivery id still unsettled (or the next id when none is); the
        pointer only moves forward, so this is O(1) per delivery sent."""
        unsettled = self._unsettled_out
        low = self._low
        end = self._next_delivery_id
        if not unsettled:
            low = end
        while low != end and low not in unsettled:
            low = (low + 1) & _MASK
        self._low = low
        return low
