"""
The broker-wide ingress budget: message data the broker holds for its clients before
the messages reach a destination.

Two things hold such data: an AMQP message arriving in several transfer frames, kept
until its last frame (per connection at most C{mqgate.ingress.partial.max_bytes}), and
the SENDs of an open STOMP transaction, kept until COMMIT (per connection at most
C{mqgate.stomp.transaction.max_connection_bytes}). Per-connection limits alone would
let a thousand connections hold a thousand times as much, so every connection also
takes its bytes from this one budget (C{mqgate.ingress.buffer.budget}) and gives them
back when the message is complete, aborted, committed or the connection goes. A
connection that would take more than is left is refused with a named error; the
others go on.
"""

__all__ = ["IngressBudget"]


class IngressBudget:
    """Bytes of incoming message data held broker-wide, against a limit.

    @ivar limit: the most bytes held at once, or -1 for no limit.
    @ivar held: bytes held now.
    @ivar refused: how many takes were refused.
    """

    __slots__ = ("limit", "held", "refused")

    #: The setting behind the limit, for errors that name it.
    SETTING = "mqgate.ingress.buffer.budget"

    def __init__(self, limit=-1):
        self.limit = limit
        self.held = 0
        self.refused = 0

    def __repr__(self):
        return f"<IngressBudget held={self.held} limit={self.limit}>"

    def take(self, size):
        """Hold C{size} more bytes if the budget has room; C{False} (nothing taken)
        when it has not."""
        if 0 <= self.limit < self.held + size:
            self.refused += 1
            return False
        self.held += size
        return True

    def give(self, size):
        """Give back C{size} bytes taken earlier."""
        self.held -= size

    def refusal(self, size):
        """The words for a client whose C{size} bytes did not fit."""
        return (f"the broker already holds {self.held} bytes of unfinished incoming "
                f"messages for its clients; {size} more would pass its budget of "
                f"{self.limit} ({self.SETTING}); finish or abort what is open and try "
                "again later")
