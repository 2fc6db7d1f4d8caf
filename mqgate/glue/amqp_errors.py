"""
The core's errors in AMQP's words: the one table from L{ErrorKind} to the AMQP 1.0
error condition a refused attach, a Rejected outcome or a detach carries (Part 2 section
2.8.15, Part 4 section 4.5.7 for the transaction kinds).

The AMQP glue catches L{REFUSALS}: the core's errors and the protocol errors the glue
and the engine raise themselves (those already carry their condition).
"""

from mqgate.amqp import conditions as c
from mqgate.amqp.types import Symbol
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import ProtocolError

__all__ = ["CONDITIONS", "REFUSALS", "condition_of"]

CONDITIONS = {
    ErrorKind.INVALID: c.INVALID_FIELD,
    ErrorKind.LIMIT_EXCEEDED: c.RESOURCE_LIMIT_EXCEEDED,
    ErrorKind.NOT_FOUND: c.NOT_FOUND,
    ErrorKind.NOT_ALLOWED: c.NOT_ALLOWED,
    ErrorKind.UNAUTHORIZED: c.UNAUTHORIZED_ACCESS,
    ErrorKind.INTERNAL: c.INTERNAL_ERROR,
    ErrorKind.ILLEGAL_STATE: c.ILLEGAL_STATE,
    ErrorKind.DELETED: c.RESOURCE_DELETED,
    ErrorKind.NOT_IMPLEMENTED: c.NOT_IMPLEMENTED,
    ErrorKind.TX_UNKNOWN: c.TRANSACTION_UNKNOWN_ID,
    ErrorKind.TX_ROLLBACK: c.TRANSACTION_ROLLBACK,
    ErrorKind.TX_TIMEOUT: c.TRANSACTION_TIMEOUT,
    ErrorKind.TX_LIMIT_EXCEEDED: c.RESOURCE_LIMIT_EXCEEDED,
}

#: What a glue call into the core (or the glue itself) refuses with.
REFUSALS = (CoreError, ProtocolError)


def condition_of(error):
    """The AMQP condition (a L{Symbol}) to send for C{error}, one of L{REFUSALS}."""
    if isinstance(error, CoreError):
        return CONDITIONS[error.kind]
    return Symbol(error.condition)
