"""
The message as the broker core holds it (design rule 2).

The core never decodes a message body: the protocol glue stores the encoded message in
C{payload} and copies out the handful of fields routing needs (S2.1 address, S2.9
priority and time-to-live, S8.4 durability, the ids and reply-to the capture and admin
views show). Everything else rides along opaquely.
"""

#: The lowest and highest priorities (S2.9: 0-9, default 4).
MIN_PRIORITY = 0
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 4


class BrokerMessage:
    """A message as the broker holds it: opaque encoded bytes + the few routing fields.

    One C{BrokerMessage} may be shared by every subscription a topic fans it out to, so
    nothing about a particular delivery attempt is ever written here after it has been
    enqueued: the per-attempt delivery count lives on the delivery (see
    L{mqgate.core.deliveries.Delivery}).

    @ivar payload: whatever the glue put there (usually the encoded AMQP message); the
        core never looks inside.
    @ivar durable: S8.4 persistence flag.
    @ivar priority: S2.9 priority, clamped to 0..9.
    @ivar expiry: absolute expiry time on the injected clock's C{seconds()} scale, or
        C{None} for "never".
    @ivar size: C{len(payload)} when the payload has a length, else 0 (for limits and
        metrics).
    @ivar to: the C{properties.to} address, used by anonymous producers.
    @ivar reply_to: C{properties.reply-to}.
    @ivar message_id: C{properties.message-id}.
    @ivar correlation_id: C{properties.correlation-id}.
    @ivar delivery_count: failed delivery attempts before the broker received it (the
        AMQP header's delivery-count on the incoming transfer).
    @ivar seq: assigned by the broker when the message is first enqueued: a monotonic
        int giving arrival order; C{None} until then.
    @ivar cos: the egress class of service (S9.1, 1-3), worked out by the egress glue
        the first time the message is filed; C{None} until then.
    @ivar arrived: when the message began to wait in a queue (the clock's
        C{seconds()}), stamped only when it cannot be handed to a consumer at once: the
        oldest waiting message's age is a metric (S5.1); C{None} until then.
    @ivar paged: its payload was dropped from memory while it waited (S2.6, memory
        state ORANGE or RED; L{mqgate.core.paging}): C{payload} is C{None} and the
        store holds the bytes until they are read back. The routing fields above stay.
    @ivar rendered: the message in another protocol's form, made by that protocol's
        glue the first time it delivers the message (the STOMP headers and body), so
        that a message fanned out to many subscribers is converted once; C{None}
        until then.
    """

    __slots__ = ("payload", "durable", "priority", "expiry", "size", "to", "reply_to",
                 "message_id", "correlation_id", "delivery_count", "seq", "cos",
                 "rendered", "arrived", "paged")

    def __init__(self, payload, *, durable=False, priority=DEFAULT_PRIORITY, expiry=None,
                 to=None, reply_to=None, message_id=None, correlation_id=None,
                 delivery_count=0):
        self.payload = payload
        self.durable = durable
        # S2.9: the AMQP header allows 0..255; anything above 9 is treated as 9.
        if priority is None:
            priority = DEFAULT_PRIORITY
        elif priority > MAX_PRIORITY:
            priority = MAX_PRIORITY
        elif priority < MIN_PRIORITY:
            priority = MIN_PRIORITY
        self.priority = int(priority)
        self.expiry = expiry
        try:
            self.size = len(payload)
        except TypeError:
            self.size = 0
        self.to = to
        self.reply_to = reply_to
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.delivery_count = delivery_count
        self.seq = None
        self.cos = None
        self.rendered = None
        self.arrived = None
        self.paged = False

    def __repr__(self):
        return (f"<BrokerMessage seq={self.seq} to={self.to!r} priority={self.priority}"
                f" size={self.size} durable={self.durable}>")
