"""
The core's errors reach each protocol in its own words (design: one table per glue):
every kind has an AMQP condition and a STOMP ERROR message, and the AMQP conditions
are the ones AMQP clients got before the core stopped speaking AMQP.
"""

import pytest

from mqgate.core.addresses import NotFound
from mqgate.core.errors import CoreError, ErrorKind
from mqgate.core.limits import ResourceLimitExceeded
from mqgate.errors import ProtocolError
from mqgate.glue import stomp
from mqgate.glue.amqp_errors import CONDITIONS, condition_of

# What the core raised before it had kinds: the wire must not change for AMQP clients.
_AMQP_BEFORE = {
    ErrorKind.INVALID: "amqp:invalid-field",
    ErrorKind.LIMIT_EXCEEDED: "amqp:resource-limit-exceeded",
    ErrorKind.NOT_FOUND: "amqp:not-found",
    ErrorKind.NOT_ALLOWED: "amqp:not-allowed",
    ErrorKind.UNAUTHORIZED: "amqp:unauthorized-access",
    ErrorKind.INTERNAL: "amqp:internal-error",
    ErrorKind.ILLEGAL_STATE: "amqp:illegal-state",
    ErrorKind.DELETED: "amqp:resource-deleted",
    ErrorKind.NOT_IMPLEMENTED: "amqp:not-implemented",
    ErrorKind.TX_UNKNOWN: "amqp:transaction:unknown-id",
    ErrorKind.TX_ROLLBACK: "amqp:transaction:rollback",
    ErrorKind.TX_TIMEOUT: "amqp:transaction:timeout",
    ErrorKind.TX_LIMIT_EXCEEDED: "amqp:resource-limit-exceeded",
}


def test_every_kind_has_an_amqp_condition_and_a_stomp_message():
    assert set(CONDITIONS) == set(ErrorKind)
    assert set(stomp.MESSAGES) == set(ErrorKind)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_amqp_condition_is_the_one_sent_before(kind):
    assert str(CONDITIONS[kind]) == _AMQP_BEFORE[kind]


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_stomp_message_is_words_not_an_amqp_symbol(kind):
    message = stomp.MESSAGES[kind]
    assert message and "amqp" not in message and ":" not in message


def test_condition_of_a_core_error_and_of_a_protocol_error():
    assert str(condition_of(NotFound("no queue q"))) == "amqp:not-found"
    assert str(condition_of(CoreError("gone", ErrorKind.DELETED))) == \
        "amqp:resource-deleted"
    # The glue's own protocol errors keep the condition they were raised with.
    assert str(condition_of(ProtocolError("bad", "amqp:decode-error"))) == \
        "amqp:decode-error"


def test_a_core_error_says_its_kind_and_description():
    error = ResourceLimitExceeded("queue q is full (maxNumMsgs 10)")
    assert error.kind is ErrorKind.LIMIT_EXCEEDED
    assert error.description == "queue q is full (maxNumMsgs 10)"
    assert str(error) == "limit exceeded: queue q is full (maxNumMsgs 10)"
