"""The annotations of a dead message's copy as the broker writes them into the AMQP
bytes (S2.4): spliced into the message annotations, the body untouched or left out."""

from mqgate.amqp.message import DATA, Header, Properties, build_message
from mqgate.amqp.types import Symbol, UInt
from mqgate.service import _dead_annotations


def _original():
    return build_message(
        b"the body", header=Header(True, 7, UInt(5000), False, UInt(2)),
        message_annotations={Symbol("x-opt-jms-msg-type"): 3},
        properties=Properties(message_id="m-1", to="queue://orders"),
        application_properties={"colour": "red"})


DEAD = {"x-opt-dead-reason": "REJECTED", "x-opt-dead-time": 1_700_000_000_123,
        "x-opt-original-address": "queue://orders"}


def test_the_copy_carries_the_three_annotations_beside_the_old_ones_and_its_body():
    """Symbol keys, the time an AMQP timestamp, the client's annotation kept; header
    without ttl; properties, application properties and body as they were."""
    copy = _dead_annotations(_original(), DEAD, True)
    annotations = copy.message_annotations
    assert annotations == {Symbol("x-opt-jms-msg-type"): 3,
                           Symbol("x-opt-dead-reason"): "REJECTED",
                           Symbol("x-opt-dead-time"): 1_700_000_000_123,
                           Symbol("x-opt-original-address"): "queue://orders"}
    assert all(isinstance(key, Symbol) for key in annotations)
    header = copy.header
    assert (header.durable, header.priority, header.ttl, header.delivery_count) == (
        True, 7, None, 2)
    assert copy.properties.message_id == "m-1"
    assert copy.application_properties == {"colour": "red"}
    assert copy.body_sections() == [(DATA, b"the body")]


def test_truncated_the_copy_has_an_empty_body_and_keeps_the_properties():
    """truncateBody: an empty data section instead of the body; the properties and
    application properties stay."""
    copy = _dead_annotations(_original(), DEAD, False)
    assert copy.body_sections() == [(DATA, b"")]
    assert copy.properties.message_id == "m-1"
    assert copy.application_properties == {"colour": "red"}
    assert b"the body" not in copy.data


def test_a_payload_that_is_not_an_amqp_message_is_kept_as_it_is():
    """Anything else (a test's bytes) goes to the DMQ unchanged."""
    assert _dead_annotations(b"raw", DEAD, True) == b"raw"
