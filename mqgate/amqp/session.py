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
"""

import collections
import enum
import struct

from mqgate.amqp import conditions as c
from mqgate.amqp.codec import encode_as
from mqgate.amqp.conditions import AmqpLocalError, AmqpRemoteError
from mqgate.amqp.events import (
    CreditGranted, DeliveriesSettled, IngressRefused, LinkAttached, LinkDetached,
    MessageReceived, SessionEnded, TransferAborted,
)
from mqgate.amqp.link import Link, LinkError, LinkState, MessageTooBig
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Begin, Disposition, End, Error, Flow, Transfer,
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
# Large enough that the session window never throttles a link (credit does that), small
# enough to stay clear of serial-number wrap ambiguity (RFC 1982: less than 2**31).
INCOMING_WINDOW = 0x7FFFFFFF
OUTGOING_WINDOW = 0x7FFFFFFF
HANDLE_MAX = 0xFFFF


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
        self._links = {}            # local handle -> Link
        self._remote_links = {}     # remote handle -> Link
        self.next_outgoing_id = 0
        self.next_incoming_id = None
        self.remote_incoming_window = 0
        self._incoming_since_flow = 0
        self._next_delivery_id = 0
        self._unsettled_out = {}    # our delivery id -> (link, context)
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
                         handle_max=HANDLE_MAX))
        self.state = (SessionState.MAPPED if self.state is SessionState.BEGIN_RCVD
                      else SessionState.BEGIN_SENT)

    def _unmap(self):
        """The session is over: so are its links (section 2.5.5)."""
        for link in self._links.values():
            link.state = LinkState.DETACHED
        self._links.clear()
        self._remote_links.clear()
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
        """Create a link that we initiate; call C{link.attach(...)} on it next."""
        link = Link(self, name, self._free_handle(), role)
        self._links[link.handle] = link
        return link

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
                self._write_transfer_frame(head, chunks, size)
                return delivery_id
        transfer = Transfer(handle=link.handle, delivery_id=delivery_id, delivery_tag=tag,
                            message_format=message_format, settled=settled)
        head = bytearray()
        transfer.encode(head)
        max_frame = self.connection.remote_max_frame_size
        if size <= max_frame - 8 - len(head):
            self._write_transfer_frame(head, chunks, size)
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
                self._write_transfer_frame(last_head, [data[pos:]], size - pos)
                return delivery_id
            self._write_transfer_frame(head, [data[pos:end]], end - pos)
            pos = end
            head = more_head

    def _write_transfer_frame(self, head, chunks, size):
        # Pending dispositions are about the peer's deliveries, not ours: a transfer may
        # overtake them, so a consumer's burst does not cost one disposition frame each.
        if self.remote_incoming_window > 0 and not self._blocked:
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
            self.connection._write_raw(self.channel, head, chunks, size)
        else:
            self._blocked.append((head, chunks, size))

    def _release_blocked(self):
        while self._blocked and self.remote_incoming_window > 0:
            head, chunks, size = self._blocked.popleft()
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
            self.connection._write_raw(self.channel, head, chunks, size)

    def _queue_disposition(self, delivery_id, state, settled, role=RECEIVER):
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

    def _free_handle(self):
        handle = len(self._links)
        while handle in self._links:
            handle = (handle + 1) % (HANDLE_MAX + 1)
        return handle

    def _forget_link(self, link):
        self._links.pop(link.handle, None)
        if link.remote_handle is not None:
            self._remote_links.pop(link.remote_handle, None)

    # -- frames from the peer (called by the connection) -----------------------------------

    def on_begin(self, begin):
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_incoming_window = begin.incoming_window or 0
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
        if attach.handle in self._remote_links:
            raise AmqpRemoteError(f"handle {attach.handle} is already in use", c.HANDLE_IN_USE)
        link = None
        for candidate in self._links.values():
            if candidate.name == attach.name and candidate.state is LinkState.ATTACH_SENT:
                link = candidate
                break
        if link is None:
            if attach.role is None or attach.name is None or attach.handle is None:
                raise AmqpRemoteError("attach lacks name, handle or role", c.INVALID_FIELD)
            link = Link(self, attach.name, self._free_handle(), not attach.role)
            self._links[link.handle] = link
        self._remote_links[attach.handle] = link
        link.on_attach(attach)
        events.append(LinkAttached(link))

    def _link(self, handle):
        link = self._remote_links.get(handle)
        if link is None:
            raise AmqpRemoteError(f"handle {handle} is not attached", c.UNATTACHED_HANDLE)
        return link

    def on_detach(self, detach, events):
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
            link = self._link(flow.handle)
            if link.on_flow(flow):
                events.append(CreditGranted(link))
        elif flow.echo:
            self._send_flow()
        if self._blocked:
            self._release_blocked()

    def on_transfer(self, transfer, payload, events):
        if self.next_incoming_id is not None:
            self.next_incoming_id = (self.next_incoming_id + 1) & _MASK
        self._incoming_since_flow += 1
        if self._incoming_since_flow > INCOMING_WINDOW // 2:
            self._send_flow()
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
        if disposition.role is SENDER or disposition.role is False:
            return  # the peer settling its own deliveries: we settle on first receipt
        first = disposition.first
        if first is None:
            raise AmqpRemoteError("disposition lacks the mandatory first", c.INVALID_FIELD)
        last = first if disposition.last is None else disposition.last
        count = ((last - first) & _MASK) + 1
        unsettled = self._unsettled_out
        if count <= len(unsettled):
            ids = [(first + i) & _MASK for i in range(count)]
        else:  # a huge range: walk what we hold instead
            ids = sorted(i for i in unsettled if ((i - first) & _MASK) < count)
        settled = bool(disposition.settled)
        by_link = {}
        for delivery_id in ids:
            entry = unsettled.pop(delivery_id, None) if settled else unsettled.get(delivery_id)
            if entry is None:
                continue  # already settled or unknown: ignore (FACTS section 3.3)
            by_link.setdefault(entry[0], []).append(entry[1])
            if not settled and disposition.state is not None:
                # The receiver wants us to settle (rcv-settle-mode second): do it now.
                unsettled.pop(delivery_id, None)
                self._queue_disposition(delivery_id, disposition.state, True, SENDER)
        for link, contexts in by_link.items():
            events.append(DeliveriesSettled(link, contexts, disposition.state, True))
