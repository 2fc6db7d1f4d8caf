"""
Limits on what the broker holds: per destination (S2.3: how much a queue may hold and
what a full queue does to its producers) and broker-wide (S2.2). One L{Limits} value
describes both; a queue in L{mqgate.core.destinations} counts its own messages against
its limits and, at the same points, the broker's in its L{SystemLimits}, which the
producer asks before it routes a message.
"""

import sys

from twisted.logger import Logger

from mqgate.core.errors import CoreError, ErrorKind

__all__ = ["FLOW_CONTROL", "REJECT_NEWEST", "REMOVE_OLDEST", "REMOVE_LOW_PRIORITY",
           "LIMIT_BEHAVIORS", "REMOVING", "Limits", "UNLIMITED",
           "ResourceLimitExceeded", "StoreBacklog", "SystemLimits", "limits_attributes",
           "limits_from_attributes", "names_limits"]

#: What a full destination does to its producers (S2.3; FACTS 1.6 names the others).
FLOW_CONTROL = "FLOW_CONTROL"
REJECT_NEWEST = "REJECT_NEWEST"
REMOVE_OLDEST = "REMOVE_OLDEST"
REMOVE_LOW_PRIORITY = "REMOVE_LOW_PRIORITY"
LIMIT_BEHAVIORS = (FLOW_CONTROL, REJECT_NEWEST, REMOVE_OLDEST, REMOVE_LOW_PRIORITY)
#: The behaviours that make room by removing waiting messages (to the DMQ, S2.4):
#: such a queue never holds its producers back nor refuses them.
REMOVING = (REMOVE_OLDEST, REMOVE_LOW_PRIORITY)

# A queue that filled up under FLOW_CONTROL lets its producers go again once it is down
# to 90 % of its limit: waking them at the limit itself would block them again after one
# message, a flow frame per message.
_LOW_WATER_PERCENT = 90
_UNLIMITED = sys.maxsize


class ResourceLimitExceeded(CoreError):
    """A limit refused something: a REJECT_NEWEST destination is full (S2.3), the broker
    holds as much as it may (S2.2), or it may create no more destinations; nothing was
    enqueued or created."""

    kind = ErrorKind.LIMIT_EXCEEDED


class Limits:
    """What one queue may hold, and what happens when it is full (S2.3); with the other
    per-destination properties (FACTS 1.6) that are not about its size.

    @ivar max_count: messages held (waiting plus in flight); -1 means no limit.
    @ivar max_bytes: bytes of the messages held (waiting plus in flight); -1 means no
        limit.
    @ivar behavior: one of L{LIMIT_BEHAVIORS}.
    @ivar max_message_bytes: the largest message the destination takes
        (C{maxBytesPerMsg}); -1 means no limit beyond the broker's.
    @ivar max_producers: producers attached to the destination by name
        (C{maxNumProducers}); -1 means no limit.
    @ivar consumer_flow_limit: deliveries one consumer may hold unsettled (or be
        granted at once) from the destination (C{consumerFlowLimit}); -1 means what
        the client's credit says.
    @ivar use_dmq: messages removed or dead go to the dead message queue (C{useDMQ},
        S2.4); C{False}: they are dropped (and counted).
    @ivar max_delivery_count: failed deliveries after which a message is dead
        (C{maxDeliveryCount}); 0 means no limit.
    @ivar drops: with REJECT_NEWEST only: a full queue drops a new message silently
        (counted in its C{dropped}) instead of refusing it; what an address setting
        with full policy DROP makes (L{mqgate.core.settings}). Not a destination
        property an operator sets, so never stored.
    """

    __slots__ = ("max_count", "max_bytes", "behavior", "full_count", "full_bytes",
                 "low_count", "low_bytes", "removes", "max_message_bytes",
                 "max_producers", "consumer_flow_limit", "use_dmq",
                 "max_delivery_count", "drops")

    def __init__(self, max_count=-1, max_bytes=-1, behavior=FLOW_CONTROL, *,
                 max_message_bytes=-1, max_producers=-1, consumer_flow_limit=-1,
                 use_dmq=True, max_delivery_count=0, drops=False):
        if behavior not in LIMIT_BEHAVIORS:
            raise ValueError(f"limit behavior {behavior!r} is not one of {LIMIT_BEHAVIORS}")
        if drops and behavior != REJECT_NEWEST:
            raise ValueError("only a REJECT_NEWEST queue drops new messages instead")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.behavior = behavior
        self.removes = behavior in REMOVING
        # Precomputed thresholds, so publishing only compares. full_count is one less
        # than the limit because the queue compares what it held before the message.
        self.full_count = _UNLIMITED if max_count < 0 else max_count - 1
        self.full_bytes = _UNLIMITED if max_bytes < 0 else max_bytes
        self.low_count = _low_water(max_count, behavior)
        self.low_bytes = _low_water(max_bytes, behavior)
        self.max_message_bytes = _UNLIMITED if max_message_bytes < 0 else max_message_bytes
        self.max_producers = max_producers
        self.consumer_flow_limit = consumer_flow_limit if consumer_flow_limit > 0 else -1
        self.use_dmq = bool(use_dmq)
        self.max_delivery_count = max(0, max_delivery_count)
        self.drops = bool(drops)

    def __repr__(self):
        return (f"<Limits max_count={self.max_count} max_bytes={self.max_bytes}"
                f" {self.behavior}{' drops' if self.drops else ''}>")

    def replace(self, **changes):
        """A copy with C{changes} (keyword names of L{__init__}) applied."""
        values = dict(max_count=self.max_count, max_bytes=self.max_bytes,
                      behavior=self.behavior,
                      max_message_bytes=-1 if self.max_message_bytes == _UNLIMITED
                      else self.max_message_bytes,
                      max_producers=self.max_producers,
                      consumer_flow_limit=self.consumer_flow_limit,
                      use_dmq=self.use_dmq, max_delivery_count=self.max_delivery_count,
                      drops=self.drops)
        values.update(changes)
        if values["behavior"] != REJECT_NEWEST:
            values["drops"] = False
        return Limits(values.pop("max_count"), values.pop("max_bytes"),
                      values.pop("behavior"), **values)

    def check_message(self, size, destination):
        """Refuse a message of C{size} bytes larger than C{maxBytesPerMsg}.

        @raise ResourceLimitExceeded: naming the limit and C{destination}.
        """
        if size > self.max_message_bytes:
            raise ResourceLimitExceeded(
                f"a message of {size} bytes is larger than {destination} accepts"
                f" ({self.max_message_bytes} bytes, maxBytesPerMsg); it was not"
                " accepted")


def _low_water(limit, behavior):
    if limit < 0:
        return _UNLIMITED
    if behavior == REJECT_NEWEST:
        return limit  # room for one more is all a rejecting queue waits for
    return max(1, limit * _LOW_WATER_PERCENT // 100)


UNLIMITED = Limits()

# The destination properties (FACTS 1.6 names) a Limits holds, as the store keeps them
# with a destination an operator created or updated (S11.1).
_MAX_NUM_MSGS, _MAX_TOTAL_MSG_BYTES, _LIMIT_BEHAVIOR = (
    "maxNumMsgs", "maxTotalMsgBytes", "limitBehavior")
# The other properties, by their FACTS 1.6 names (maxDeliveryCount is mqgate's), and
# the keyword of Limits each one sets.
_OTHER_ATTRIBUTES = {
    "maxBytesPerMsg": "max_message_bytes", "maxNumProducers": "max_producers",
    "consumerFlowLimit": "consumer_flow_limit", "useDMQ": "use_dmq",
    "maxDeliveryCount": "max_delivery_count"}


def limits_attributes(limits):
    """C{limits} as the JSON-able attributes stored with a destination."""
    attributes = {_MAX_NUM_MSGS: limits.max_count, _MAX_TOTAL_MSG_BYTES: limits.max_bytes,
                  _LIMIT_BEHAVIOR: limits.behavior}
    for name, keyword in _OTHER_ATTRIBUTES.items():
        value = getattr(limits, keyword)
        attributes[name] = -1 if value == _UNLIMITED else value
    return attributes


def names_limits(attributes):
    """Whether stored C{attributes} give the destination limits of its own (an
    operator's C{update dst}), rather than leaving them to the defaults and address
    settings."""
    names = (_MAX_NUM_MSGS, _MAX_TOTAL_MSG_BYTES, _LIMIT_BEHAVIOR, *_OTHER_ATTRIBUTES)
    return any(name in attributes for name in names)


def limits_from_attributes(attributes, default):
    """The L{Limits} of stored C{attributes}; what they do not name comes from
    C{default}.

    @raise ValueError: a value that makes no limit.
    """
    count = int(attributes.get(_MAX_NUM_MSGS, default.max_count))
    size = int(attributes.get(_MAX_TOTAL_MSG_BYTES, default.max_bytes))
    for value in (count, size):
        if value < -1 or value == 0:
            raise ValueError(f"limit {value} is neither -1 (no limit) nor positive")
    others = {keyword: attributes[name] for name, keyword in _OTHER_ATTRIBUTES.items()
              if name in attributes}
    for keyword, value in others.items():
        if keyword != "use_dmq":
            others[keyword] = int(value)
    return default.replace(max_count=count, max_bytes=size,
                           behavior=attributes.get(_LIMIT_BEHAVIOR, default.behavior),
                           **others)


class SystemLimits:
    """The broker-wide limits (S2.2) and what the broker holds against them.

    Every queue (plain, subscription, temporary) adds to C{count} and C{bytes} as it
    adds to its own counts, so the totals cost two additions per message and checking
    them is two comparisons. A message fanned out to several subscriptions is counted
    once per subscription: each holds it, and the limit stays on the safe side.

    @ivar limits: the L{Limits} (REJECT_NEWEST: a full broker refuses, it cannot block
        one producer for another's messages).
    @ivar max_message_size: C{mqgate.message.max_size}, -1 for none.
    @ivar count: messages held, waiting or in flight.
    @ivar bytes: bytes of the messages held, waiting or in flight (as
        C{maxTotalMsgBytes} counts them).
    @ivar refusing: the setting that made the last message refused, until one is
        accepted again (the log says when each period starts and ends, not each
        refusal).
    """

    __slots__ = ("limits", "max_message_size", "count", "bytes", "refusing")

    log = Logger(namespace="mqgate.limits")

    def __init__(self, max_count=-1, max_bytes=-1, max_message_size=-1):
        self.limits = Limits(max_count, max_bytes, REJECT_NEWEST)
        self.max_message_size = _UNLIMITED if max_message_size < 0 else max_message_size
        self.count = 0
        self.bytes = 0
        self.refusing = None

    def __repr__(self):
        return f"<SystemLimits count={self.count} bytes={self.bytes} {self.limits!r}>"

    def admit(self, size):
        """Refuse a message of C{size} bytes when it is too large or the broker holds
        as much as it may (S2.2); it takes messages again once it has drained below.

        @raise ResourceLimitExceeded: with a description naming the setting.
        """
        if size > self.max_message_size:
            raise ResourceLimitExceeded(
                f"a message of {size} bytes is larger than the broker accepts"
                f" ({self.max_message_size} bytes, mqgate.message.max_size)")
        limits = self.limits
        if self.count > limits.full_count:
            self._refuse("mqgate.system.max_count", limits.max_count,
                         f"{self.count} messages")
        if self.bytes >= limits.full_bytes:
            self._refuse("mqgate.system.max_size", limits.max_bytes,
                         f"{self.bytes} bytes of messages")
        if self.refusing is not None:
            self.log.info("the broker accepts messages again (under {setting})",
                          setting=self.refusing)
            self.refusing = None

    def _refuse(self, setting, limit, held):
        if self.refusing != setting:
            self.refusing = setting
            self.log.warn("the broker holds {held} as {setting}={limit} allows: new "
                          "messages are refused until consumers take some; raise "
                          "{setting} if the broker should hold more",
                          held=held, setting=setting, limit=limit)
        raise ResourceLimitExceeded(
            f"the broker holds {held}, all that {setting}={limit} allows; the message"
            " was not accepted, try again once consumers have taken some")


class StoreBacklog:
    """What one connection's producers have waiting for the store, and its bound
    (S2.7, design rule 4).

    A persistent message is enqueued only once stored (S3.6); until then it waits in
    its producer (with the messages sent after it, which keep their order behind it)
    and in the store's pending writes. A STOMP client sending persistent messages
    without receipts, or an AMQP client that settles its sends itself, would otherwise
    let that grow as fast as the store is slow. Every L{mqgate.core.broker.Producer}
    of a connection counts its waiting messages here; once the bound is reached the
    glue stops reading the connection's socket (STOMP) or withholds credit (AMQP),
    and goes on when the store has answered for a quarter of them: back-pressure, not
    refusals.

    @ivar max_count: messages waiting before L{over}; at least 1.
    @ivar max_bytes: their bytes before L{over}; at least 1 (a single larger message
        still goes through: the bound holds back what follows it).
    @ivar count: messages waiting now.
    @ivar bytes: their bytes.
    """

    __slots__ = ("max_count", "max_bytes", "count", "bytes", "_low_count", "_low_bytes",
                 "_callbacks")

    def __init__(self, max_count=1000, max_bytes=16 << 20):
        if max_count < 1 or max_bytes < 1:
            raise ValueError("a store backlog bound must be at least 1")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        # Going on at three quarters, not at the bound itself: one flow frame (or one
        # socket read) per stored message would cost more than the messages.
        self._low_count = max_count * 3 // 4
        self._low_bytes = max_bytes * 3 // 4
        self._callbacks = None

    def __repr__(self):
        return (f"<StoreBacklog count={self.count}/{self.max_count}"
                f" bytes={self.bytes}/{self.max_bytes}>")

    @property
    def over(self):
        """C{True} once the connection's producers may send no more for now."""
        return self.count >= self.max_count or self.bytes >= self.max_bytes

    def add(self, size):
        """A message of C{size} bytes waits for the store (or behind one that does)."""
        self.count += 1
        self.bytes += size

    def remove(self, size):
        """It no longer waits (stored and enqueued, or refused); may call back."""
        self.count -= 1
        self.bytes -= size
        if self._callbacks is not None and self._eased():
            callbacks, self._callbacks = self._callbacks, None
            for callback in callbacks:
                callback()

    def when_eased(self, callback):
        """Call C{callback()} once the backlog is down to three quarters of its bound
        (at once if it is)."""
        if self._eased():
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def _eased(self):
        return self.count <= self._low_count and self.bytes <= self._low_bytes
