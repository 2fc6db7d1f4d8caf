"""
The core's errors, in no protocol's words.

The core refuses things (a full queue, a bad selector, a name nobody may use) for
clients of every protocol, so it says what kind of refusal it is, never how a protocol
puts it on the wire: each glue maps an L{ErrorKind} to its protocol in one table
(L{mqgate.glue.amqp_errors} to an AMQP condition, L{mqgate.glue.stomp} to an ERROR
frame's C{message} header), and sends the L{CoreError}'s description with it.
"""

import enum

from mqgate.errors import MqgateError

__all__ = ["ErrorKind", "CoreError"]


class ErrorKind(enum.Enum):
    """What kind of refusal a core error is; the value is how a log line names it."""

    #: a name, address or selector the core cannot make sense of
    INVALID = "invalid"
    #: a limit refused it (a full destination, too many names, a full store)
    LIMIT_EXCEEDED = "limit exceeded"
    #: the named destination or subscription does not exist
    NOT_FOUND = "not found"
    #: it exists but cannot be used this way (e.g. a subscription in use)
    NOT_ALLOWED = "not allowed"
    #: the requester may not use what it names
    UNAUTHORIZED = "unauthorized"
    #: the broker failed (e.g. the store could not write)
    INTERNAL = "internal error"
    #: asked of something that is closed or in the wrong state (a glue's mistake)
    ILLEGAL_STATE = "illegal state"
    #: an operator destroyed the destination in use
    DELETED = "deleted"
    #: asked for something the core does not do (e.g. an unknown outcome)
    NOT_IMPLEMENTED = "not implemented"
    #: no open transaction has that id
    TX_UNKNOWN = "unknown transaction"
    #: the transaction was rolled back instead of committed
    TX_ROLLBACK = "transaction rolled back"
    #: the transaction was idle too long and was rolled back
    TX_TIMEOUT = "transaction timed out"
    #: a transaction would hold more than its limits allow
    TX_LIMIT_EXCEEDED = "transaction limit exceeded"


class CoreError(MqgateError):
    """The core refused something.

    @ivar kind: the L{ErrorKind}; a subclass sets its own, an instance may override it.
    @ivar description: what happened, for the human at the other end (it names the
        setting to change when a limit refused it).
    """

    kind = ErrorKind.INTERNAL

    def __init__(self, description, kind=None):
        if kind is not None:
            self.kind = kind
        self.description = description
        super().__init__(f"{self.kind.value}: {description}")
