"""
One AMQP link endpoint (Part 2 section 2.6): credit, delivery count, settlement,
multi-frame assembly.

States follow the spec's names (DETACHED, ATTACH_SENT, ATTACH_RCVD, ATTACHED, DETACH_SENT,
DETACH_RCVD). The link knows nothing about sockets or the broker: the session hands it
frames, and it writes frames through its session.

Credit arithmetic (section 2.6.7), from the sender's side:
    link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)
All counters are sequence numbers modulo 2**32 (RFC 1982).
"""

import enum

from mqgate.amqp import conditions as c
from mqgate.amqp.conditions import AmqpLocalError, AmqpRemoteError
from mqgate.amqp.message import declares_durable
from mqgate.amqp.performatives import (
    RCV_FIRST, SENDER, SND_MIXED, SND_SETTLED, Accepted, Attach, Detach, Error,
)

__all__ = ["Link", "LinkState", "MessageTooBig"]

_MASK = 0xFFFFFFFF


class LinkState(enum.Enum):
    DETACHED = "DETACHED"
    ATTACH_SENT = "ATTACH_SENT"
    ATTACH_RCVD = "ATTACH_RCVD"
    ATTACHED = "ATTACHED"
    DETACH_SENT = "DETACH_SENT"
    DETACH_RCVD = "DETACH_RCVD"


class Link:
    """A link endpoint of ours: a sender (we transfer) or a receiver (we are sent to).

    @ivar role: our role, L{SENDER} (False) or L{RECEIVER} (True), as on the wire.
    @ivar remote: the peer's L{Attach}, once received.
    @ivar credit: sender: deliveries we may still send; receiver: credit we granted.
    @ivar drain: sender: the receiver asked us to use up or return our credit.
    @ivar context: free for the layer above (the glue keeps its consumer/producer here).
    """

    def __init__(self, session, name, handle, role):
        self.session = session
        self.name = name
        self.handle = handle
        self.role = role
        self.remote_handle = None
        self.remote = None
        self.state = LinkState.DETACHED
        self.snd_settle_mode = SND_MIXED
        self.rcv_settle_mode = RCV_FIRST
        self.source = None
        self.target = None
        self.delivery_count = 0
        self.credit = 0
        self.drain = False
        self.available = 0
        self.max_message_size = None
        # S9.5: (guaranteed, direct) byte limits on one incoming message, or None. Unlike
        # max-message-size (a link detach), a message over these ends the connection.
        self.ingress_limits = None
        self._ingress_limit = None   # (limit, guaranteed) of the delivery in progress
        self.context = None
        # Assembly of a multi-frame incoming delivery (section 2.6.14): the bytes so far
        # in one growing buffer (a list of chunks would cost ~50 bytes for each frame,
        # however small), counted against the connection's partial-delivery budget.
        self._partial = None
        self._partial_size = 0
        self._partial_first = None

    def __repr__(self):
        role = "receiver" if self.role else "sender"
        return f"<Link {self.name!r} {role} handle={self.handle} {self.state.name}>"

    @property
    def is_sender(self):
        return self.role is SENDER

    @property
    def writable(self):
        """Sender: whether a message sent now goes out at once: the link is attached,
        has credit, and the session's outgoing transfers are not held back by the
        peer's incoming window (section 2.5.6). While it is false, the layer above
        keeps its messages; a L{CreditGranted} or L{WindowOpened} event says when to
        look again (asking while only the window stands in the way is what enrolls
        the link for the next L{WindowOpened})."""
        if self.credit <= 0 or self.state is not LinkState.ATTACHED:
            return False
        session = self.session
        if session.window_open:
            return True
        session._stalled[self] = None
        return False

    @property
    def presettled(self):
        """True when the receiver asked for pre-settled deliveries (at-most-once, S8.1)."""
        return self.snd_settle_mode == SND_SETTLED

    # -- local actions ---------------------------------------------------------------------

    def attach(self, source=None, target=None, *, snd_settle_mode=None, rcv_settle_mode=None,
               max_message_size=None, properties=None, offered_capabilities=None):
        """Send our attach (answering the peer's, or starting a link we initiate)."""
        if self.state not in (LinkState.DETACHED, LinkState.ATTACH_RCVD):
            raise AmqpLocalError(f"cannot attach a link in state {self.state.name}")
        if snd_settle_mode is not None:
            self.snd_settle_mode = snd_settle_mode
        if rcv_settle_mode is not None:
            self.rcv_settle_mode = rcv_settle_mode
        self.source = source
        self.target = target
        self.max_message_size = max_message_size
        if self.state is LinkState.DETACHED:
            # Ours to begin: the peer's answer finds us by name (section 2.6.3).
            self.session._attaching[self.name] = self
        self.session._emit(Attach(
            name=self.name, handle=self.handle, role=self.role,
            snd_settle_mode=self.snd_settle_mode, rcv_settle_mode=self.rcv_settle_mode,
            source=source, target=target,
            initial_delivery_count=self.delivery_count if self.is_sender else None,
            max_message_size=max_message_size, offered_capabilities=offered_capabilities,
            properties=properties))
        self.state = (LinkState.ATTACHED if self.state is LinkState.ATTACH_RCVD
                      else LinkState.ATTACH_SENT)

    def refuse(self, condition, description):
        """Refuse the peer's attach: attach with a null terminus, then detach with an error.

        Part 2 section 2.6.3 (figure 2.33): clients wait for an attach before they read the
        detach, so skipping the attach makes some of them hang (FACTS section 5).
        """
        if self.is_sender:
            self.attach(source=None, target=self.remote.target)
        else:
            self.attach(source=self.remote.source, target=None)
        self.detach(closed=True, condition=condition, description=description)
        # Nothing more happens on a refused link: the session keeps its handle numbers
        # until the peer's detach, not the link (a peer could otherwise hold one per
        # handle, with its attach's terminus and properties, for as long as it likes).
        self.remote = None
        self.state = LinkState.DETACHED
        self.session._forget_refused(self)

    def detach(self, closed=True, condition=None, description=None):
        """Detach the link; C{closed} ends it for good (section 2.6.6)."""
        if self.state in (LinkState.DETACHED, LinkState.DETACH_SENT):
            return
        self.drop_partial()  # a delivery cut short by the detach is gone
        self.session._drop_blocked(self)
        error = Error(condition, description) if condition else None
        self.session._emit(Detach(handle=self.handle, closed=closed, error=error))
        if self.state is LinkState.DETACH_RCVD:
            self.state = LinkState.DETACHED
            self.session._forget_link(self)
        else:
            self.state = LinkState.DETACH_SENT

    def flow(self, credit, *, drain=False, echo=False):
        """Receiver: grant C{credit} (replacing what was granted before)."""
        if self.is_sender:
            raise AmqpLocalError("only a receiving link grants credit")
        self.credit = credit
        self.session._send_flow(self, drain=drain, echo=echo)

    def send(self, payload, *, settled, context=None, tag=None, message_format=0):
        """Sender: transfer one message (split into frames as max-frame-size requires).

        @param payload: bytes, or a list of bytes-like chunks that together are the message.
        @param settled: True to send it pre-settled (at-most-once).
        @param context: kept with the delivery and handed back in L{DeliveriesSettled}.
        @return: the delivery id.
        """
        if self.state is not LinkState.ATTACHED:
            raise AmqpLocalError(f"link {self.name!r} is not attached")
        if self.credit <= 0:
            raise AmqpLocalError(f"no credit to send on link {self.name!r}")
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & _MASK
        session = self.session
        delivery_id = session._send_transfer(self, payload, settled, context, tag,
                                             message_format)
        session._note_sent(self)
        return delivery_id

    def drained(self):
        """Sender: nothing more to send while draining; give the rest of the credit back."""
        if not self.is_sender:
            raise AmqpLocalError("only a sending link is drained")
        if self.credit:
            self.delivery_count = (self.delivery_count + self.credit) & _MASK
            self.credit = 0
        self.drain = False
        self.session._send_flow(self, drain=True)

    def settle(self, delivery_id, state=None, settled=True):
        """Receiver: tell the sender the outcome of a delivery (accepted by default)."""
        self.session._queue_disposition(delivery_id, Accepted() if state is None else state,
                                        settled)

    # -- frames from the peer (called by the session) --------------------------------------

    def on_attach(self, attach):
        self.remote = attach
        self.remote_handle = attach.handle
        if self.is_sender:
            # The receiver's settle-mode choice is ours to honour (section 2.6.12).
            self.snd_settle_mode = attach.snd_settle_mode
            self.rcv_settle_mode = attach.rcv_settle_mode
        else:
            self.snd_settle_mode = attach.snd_settle_mode
            if attach.initial_delivery_count is None and attach.source is not None:
                raise AmqpRemoteError("a sender's attach must carry initial-delivery-count",
                                      c.INVALID_FIELD)
            self.delivery_count = attach.initial_delivery_count or 0
        if self.state is LinkState.ATTACH_SENT:
            self.state = LinkState.ATTACHED
        else:
            self.state = LinkState.ATTACH_RCVD

    def on_flow(self, flow):
        """Apply a link flow. Returns True when a sender's credit changed."""
        if self.is_sender:
            rcv_count = flow.delivery_count
            if rcv_count is None:
                rcv_count = self.delivery_count
            credit = (rcv_count + (flow.link_credit or 0) - self.delivery_count) & _MASK
            # A result "behind" our count (serial arithmetic) means no credit at all.
            self.credit = 0 if credit > 0x7FFFFFFF else credit
            self.drain = flow.drain
            if flow.echo:
                self.session._send_flow(self)
            return True
        if flow.delivery_count is not None:
            # A sender that drained advanced its count: that much of our credit is gone.
            advance = (flow.delivery_count - self.delivery_count) & _MASK
            if advance <= 0x7FFFFFFF:
                self.credit = max(0, self.credit - advance)
            self.delivery_count = flow.delivery_count
        self.available = flow.available or 0
        if flow.echo:
            self.session._send_flow(self)
        return False

    def on_transfer(self, transfer, payload):
        # Raises LinkError for what only ends this link (too big), AmqpRemoteError for
        # what breaks the session's bookkeeping (credit, delivery ids).
        """Add one transfer frame; returns the completed delivery tuple or None.

        @return: C{(delivery_id, tag, settled, payload_bytes, state)} when the last frame
            arrived, C{("aborted", delivery_id)} for an aborted delivery, else None.
        """
        if self.is_sender:
            raise AmqpRemoteError("transfer received on a link where the peer is receiver",
                                  c.INVALID_FIELD)
        if self._partial is None:
            if self.credit <= 0:
                raise AmqpRemoteError(f"transfer on link {self.name!r} exceeds its credit",
                                      c.TRANSFER_LIMIT_EXCEEDED)
            if transfer.delivery_id is None:
                raise AmqpRemoteError("first transfer frame lacks a delivery-id",
                                      c.INVALID_FIELD)
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & _MASK
            if self.ingress_limits is not None:
                self._ingress_limit = self._limit_for(transfer, payload)
                if len(payload) > self._ingress_limit[0]:
                    raise MessageTooBig(self, len(payload), *self._ingress_limit)
            if not transfer.more and not transfer.aborted:
                if self.max_message_size and len(payload) > self.max_message_size:
                    raise _TooBig(self, len(payload), self.max_message_size)
                return (transfer.delivery_id, transfer.delivery_tag,
                        bool(transfer.settled), bytes(payload), transfer.state)
            self._partial = bytearray()
            self._partial_size = 0
            self._partial_first = transfer
        if transfer.aborted:
            first = self._partial_first
            self.drop_partial()
            return ("aborted", first.delivery_id)
        size = self._partial_size + len(payload)
        if self.ingress_limits is not None and size > self._ingress_limit[0]:
            self.drop_partial()
            raise MessageTooBig(self, size, *self._ingress_limit)
        limit = self.max_message_size
        if limit and size > limit:
            raise _TooBig(self, size, limit)
        if transfer.more:
            # Raises before anything is added when the connection holds too much.
            self.session.connection._hold_partial(len(payload))
            self._partial += payload
            self._partial_size = size
            return None
        first = self._partial_first
        self._partial += payload
        data = bytes(self._partial)
        self.drop_partial()
        settled = bool(transfer.settled) or bool(first.settled)
        return first.delivery_id, first.delivery_tag, settled, data, transfer.state

    def drop_partial(self):
        """Forget a multi-frame delivery in progress (done, aborted, refused or cut
        short) and give its bytes back to the connection's budget."""
        if self._partial is not None:
            self.session.connection._release_partial(self._partial_size)
            self._partial = None
            self._partial_size = 0

    def _limit_for(self, transfer, payload):
        # A pre-settled, non-durable message is direct; anything else is guaranteed.
        guaranteed_max, direct_max = self.ingress_limits
        if transfer.settled and not declares_durable(payload):
            return direct_max, False
        return guaranteed_max, True

    @property
    def partial_size(self):
        """Bytes of a multi-frame delivery received so far (0 when none is in progress)."""
        return self._partial_size if self._partial is not None else 0


class LinkError(AmqpRemoteError):
    """The peer broke a rule of one link: that link is detached, the rest goes on."""


class MessageTooBig(AmqpRemoteError):
    """S9.5: an incoming message grew beyond the ingress limit of its class. The
    connection is closed (CLIENT_CLIENT_MESSAGE_TOO_BIG), not only the link.

    @ivar size: bytes received when the limit was passed.
    @ivar limit: the limit.
    @ivar guaranteed: whether the message was guaranteed (else direct).
    """

    def __init__(self, link, size, limit, guaranteed):
        kind = "guaranteed" if guaranteed else "direct"
        super().__init__(
            f"CLIENT_CLIENT_MESSAGE_TOO_BIG: a {kind} message of more than {limit} bytes "
            f"on link {link.name!r}; the broker takes {kind} messages of at most {limit} "
            f"bytes", c.MESSAGE_SIZE_EXCEEDED)
        self.link = link
        self.size = size
        self.limit = limit
        self.guaranteed = guaranteed


class _TooBig(LinkError):
    """A delivery grew beyond the link's max-message-size."""

    def __init__(self, link, size, limit):
        super().__init__(f"message of more than {limit} bytes refused on link {link.name!r}",
                         c.MESSAGE_SIZE_EXCEEDED)
        self.link = link
        self.size = size
