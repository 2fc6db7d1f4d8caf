"""
Consumer flow control of the client library (S6.2), as pure accounting: what a consumer
holds, what it has asked the broker for, and when to ask for more. No I/O; the
connection asks L{ConsumerFlow.top_up} after every change and grants the link credit it
returns.

S6.2 in AMQP terms:

- a consumer I{holds} a message from its arrival until it is settled (in AUTO mode when
  the callback returned, CLIENT when acknowledged, DUPS_OK when its batch is settled);
- C{held + credit <= limit} always: the broker can never have the consumer hold more
  than its C{imqConsumerFlowLimit}, whatever it sends;
- when C{held + credit} falls to the threshold (C{imqConsumerFlowThreshold} percent of
  the limit), the next batch is asked for: the credit becomes C{limit - held};
- with a connection-wide cap (C{imqConnectionFlowLimit}), the consumers of one
  connection together hold and have asked for at most that many; a consumer the cap
  holds back gets its batch once another one settles.
"""

__all__ = ["ConnectionFlow", "ConsumerFlow"]


class ConnectionFlow:
    """The connection-wide cap: C{limit} messages, or None for no cap."""

    def __init__(self, limit=None):
        self.limit = limit
        self.consumers = []

    @property
    def committed(self):
        """Messages held plus credit outstanding, all consumers together."""
        return sum(c.held + c.credit for c in self.consumers)

    def room(self):
        """How much more credit the cap allows (None: no cap)."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.committed)


class ConsumerFlow:
    """One consumer's accounting.

    @param limit: the most messages the consumer holds (C{imqConsumerFlowLimit}).
    @param threshold: percent of C{limit} (C{imqConsumerFlowThreshold}).
    @param connection: the L{ConnectionFlow} it shares with the connection's others.
    @ivar held: messages received and not settled.
    @ivar credit: messages asked for and not received yet.
    """

    def __init__(self, limit, threshold=50, connection=None):
        if limit < 1:
            raise ValueError(f"flow limit {limit}: give 1 or more")
        self.limit = limit
        self.threshold = threshold
        self.level = limit * threshold / 100.0
        self.connection = connection or ConnectionFlow()
        self.connection.consumers.append(self)
        self.held = 0
        self.credit = 0

    def received(self):
        """A message arrived (it used one credit)."""
        self.held += 1
        self.credit = max(0, self.credit - 1)

    def settled(self, count=1):
        """C{count} held messages were settled (or dropped with their connection)."""
        self.held = max(0, self.held - count)

    def reset(self):
        """The link is gone (a new one will be made after a reconnect): nothing is held
        (the broker requeued it) and nothing asked for."""
        self.held = 0
        self.credit = 0

    def drained(self, credit):
        """The broker said how much credit is left (after a drain)."""
        self.credit = credit

    def close(self):
        """The consumer is closed: its share of the connection's cap is free."""
        if self in self.connection.consumers:
            self.connection.consumers.remove(self)

    def top_up(self):
        """The credit to grant now (a new absolute link credit), or None to wait.

        A batch is asked for once C{held + credit} is at or below the threshold; it is
        C{limit - held}, less what the connection's cap does not allow.
        """
        if self.held + self.credit > self.level:
            return None
        want = self.limit - self.held
        room = self.connection.room()
        if room is not None:
            want = min(want, self.credit + room)
        if want <= self.credit:
            return None
        self.credit = want
        return want
