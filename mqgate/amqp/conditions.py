"""
AMQP 1.0 error conditions (Part 2 section 2.8.15-2.8.18) and the errors that carry them.

An engine error knows its wire condition; the adapter turns it into a close, end or detach
carrying C{Error(condition, description)} in one place (docs/design.md).
"""

from mqgate.errors import LocalProtocolError, RemoteProtocolError
from mqgate.amqp.types import Symbol

# Part 2 section 2.8.15: amqp-error
INTERNAL_ERROR = Symbol("amqp:internal-error")
NOT_FOUND = Symbol("amqp:not-found")
UNAUTHORIZED_ACCESS = Symbol("amqp:unauthorized-access")
DECODE_ERROR = Symbol("amqp:decode-error")
RESOURCE_LIMIT_EXCEEDED = Symbol("amqp:resource-limit-exceeded")
NOT_ALLOWED = Symbol("amqp:not-allowed")
INVALID_FIELD = Symbol("amqp:invalid-field")
NOT_IMPLEMENTED = Symbol("amqp:not-implemented")
RESOURCE_LOCKED = Symbol("amqp:resource-locked")
PRECONDITION_FAILED = Symbol("amqp:precondition-failed")
RESOURCE_DELETED = Symbol("amqp:resource-deleted")
ILLEGAL_STATE = Symbol("amqp:illegal-state")
FRAME_SIZE_TOO_SMALL = Symbol("amqp:frame-size-too-small")
# Part 2 section 2.8.16: connection-error
CONNECTION_FORCED = Symbol("amqp:connection:forced")
FRAMING_ERROR = Symbol("amqp:connection:framing-error")
CONNECTION_REDIRECT = Symbol("amqp:connection:redirect")
# Part 2 section 2.8.17: session-error
WINDOW_VIOLATION = Symbol("amqp:session:window-violation")
ERRANT_LINK = Symbol("amqp:session:errant-link")
HANDLE_IN_USE = Symbol("amqp:session:handle-in-use")
UNATTACHED_HANDLE = Symbol("amqp:session:unattached-handle")
# Part 2 section 2.8.18: link-error
DETACH_FORCED = Symbol("amqp:link:detach-forced")
TRANSFER_LIMIT_EXCEEDED = Symbol("amqp:link:transfer-limit-exceeded")
MESSAGE_SIZE_EXCEEDED = Symbol("amqp:link:message-size-exceeded")
LINK_REDIRECT = Symbol("amqp:link:redirect")
STOLEN = Symbol("amqp:link:stolen")
# Part 4 section 4.5.7: transaction-error
TRANSACTION_UNKNOWN_ID = Symbol("amqp:transaction:unknown-id")
TRANSACTION_ROLLBACK = Symbol("amqp:transaction:rollback")
TRANSACTION_TIMEOUT = Symbol("amqp:transaction:timeout")


class AmqpRemoteError(RemoteProtocolError):
    """The peer broke the protocol; the whole connection closes with this condition."""

    condition = str(INTERNAL_ERROR)


class SessionError(AmqpRemoteError):
    """The peer broke a session's rules; the session ends with this condition."""

    def __init__(self, description, condition, channel):
        super().__init__(description, condition)
        self.channel = channel


class AmqpLocalError(LocalProtocolError):
    """We asked the engine to do something the protocol does not allow (a bug)."""

    condition = str(ILLEGAL_STATE)
