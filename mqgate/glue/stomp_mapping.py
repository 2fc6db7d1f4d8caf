"""
STOMP frames to the broker's message form and back (ARCHITECTURE rule 2, S10.2).

The broker holds every message as AMQP 1.0 bytes; a STOMP SEND is converted here, at the
edge, and an AMQP message leaving on a STOMP subscription is converted back. The table
in docs/stomp-mapping.md is the contract; each row has a test.

    STOMP header          AMQP field
    body                  one data section (bytes, as sent)
    content-type          properties.content-type
    message-id (SEND)     properties.message-id
    correlation-id        properties.correlation-id
    reply-to              properties.reply-to
    destination           properties.to
    expires (epoch ms)    properties.absolute-expiry-time
    expiration (ms TTL)   header.ttl (RabbitMQ's spelling)
    priority (0-9)        header.priority
    persistent:true       header.durable
    subject               properties.subject
    anything else         application-properties (string values)

On the way out, the application properties become headers (values as text, booleans as
true/false), and a body that is not data sections is rendered with a content-type and a
``transformation`` header saying what was done (amqp-value string -> UTF-8 text, binary
-> bytes, anything else -> JSON).
"""

import json
import uuid

from mqgate.amqp.message import (
    AMQP_SEQUENCE, AMQP_VALUE, DATA, Header, Properties, build_message,
)
from mqgate.amqp.types import Described, Symbol, Timestamp, UInt, UByte
from mqgate.errors import ProtocolError

__all__ = ["REDELIVERED", "frame_to_message", "message_to_headers", "MappingError"]

# Headers that steer the frame itself, never copied into the message.
_FRAME_HEADERS = frozenset((
    "destination", "receipt", "transaction", "content-length", "ack", "id",
    "subscription", "redelivered",
))
_MAPPED = frozenset((
    "content-type", "message-id", "correlation-id", "reply-to", "expires", "expiration",
    "priority", "persistent", "subject",
))


class MappingError(ProtocolError):
    """A SEND header cannot be carried over (a priority that is not 0-9, say)."""

    condition = "invalid header"


def _int_header(name, value, low, high):
    try:
        number = int(value)
    except ValueError:
        raise MappingError(f"header {name}:{value} is not a whole number") from None
    if not low <= number <= high:
        raise MappingError(f"header {name}:{value} is outside {low}..{high}")
    return number


def _content_type(value):
    """AMQP carries the content-type as a symbol, which is ASCII (Part 3 3.2.4)."""
    if value is None:
        return None
    if not value.isascii():
        raise MappingError(f"header content-type:{value} is not ASCII; AMQP cannot carry it")
    return Symbol(value)


def frame_to_message(destination, headers, body):
    """The AMQP message of a STOMP SEND.

    @param headers: the frame's headers, C{[(name, value), ...]}, first occurrence wins.
    @return: an L{EncodedMessage} (its bytes and routing fields).
    @raise MappingError: a mapped header has a value AMQP cannot take.
    """
    seen = {}
    app = {}
    for name, value in headers:
        if name in seen or name in _FRAME_HEADERS:
            continue
        seen[name] = value
        if name not in _MAPPED:
            app[name] = value
    header = None
    durable = seen.get("persistent", "").lower() == "true"
    priority = seen.get("priority")
    ttl = seen.get("expiration")
    if durable or priority is not None or ttl is not None:
        header = Header(
            durable=durable,
            priority=UByte(_int_header("priority", priority, 0, 9)) if priority else 4,
            ttl=UInt(_int_header("expiration", ttl, 0, 0xFFFFFFFF)) if ttl else None)
    expires = seen.get("expires")
    properties = Properties(
        message_id=seen.get("message-id"), to=destination, subject=seen.get("subject"),
        reply_to=seen.get("reply-to"), correlation_id=seen.get("correlation-id"),
        content_type=_content_type(seen.get("content-type")),
        absolute_expiry_time=Timestamp(_int_header("expires", expires, 0, 2**62))
        if expires and expires != "0" else None)
    return build_message(bytes(body), header=header, properties=properties,
                         application_properties=app or None)


def _text(value):
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def _json_ready(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {_text(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, Described):
        return {"descriptor": _text(value.descriptor), "value": _json_ready(value.value)}
    if isinstance(value, (uuid.UUID, Symbol)):
        return str(value)
    return value


def _body(encoded):
    """Return C{(body_bytes, content_type or None, transformation or None)}."""
    sections = encoded.body_sections()
    if not sections:
        return b"", None, None
    if all(code == DATA for code, _value in sections):
        return b"".join(value for _code, value in sections), None, None
    code, value = sections[0]
    if code == AMQP_VALUE and isinstance(value, str):
        return value.encode("utf-8"), "text/plain; charset=utf-8", "amqp-value-string"
    if code == AMQP_VALUE and isinstance(value, bytes):
        return value, "application/octet-stream", "amqp-value-binary"
    if code == AMQP_SEQUENCE:
        value = [item for _code, seq in sections for item in seq]
    kind = "amqp-sequence-json" if code == AMQP_SEQUENCE else "amqp-value-json"
    return (json.dumps(_json_ready(value), separators=(",", ":")).encode("utf-8"),
            "application/json", kind)


#: The header of a message delivered before (S2.9).
REDELIVERED = ("redelivered", "true")


def message_to_headers(encoded, delivery_count=0):
    """The headers and body of a MESSAGE frame for an AMQP message.

    @param encoded: an L{EncodedMessage}.
    @return: C{(headers, body)}; the glue adds destination, subscription, message-id
        and ack.
    """
    props = encoded.properties
    header = encoded.header
    headers = []
    body, content_type, transformation = _body(encoded)
    content_type = props.content_type or content_type
    if content_type:
        headers.append(("content-type", str(content_type)))
    if transformation:
        headers.append(("transformation", transformation))
    if props.message_id is not None:
        headers.append(("amqp-message-id", _text(props.message_id)))
    if props.correlation_id is not None:
        headers.append(("correlation-id", _text(props.correlation_id)))
    if props.reply_to is not None:
        headers.append(("reply-to", _text(props.reply_to)))
    if props.subject is not None:
        headers.append(("subject", props.subject))
    if props.absolute_expiry_time:
        headers.append(("expires", str(int(props.absolute_expiry_time))))
    if header.priority != 4:
        headers.append(("priority", str(header.priority)))
    if header.durable:
        headers.append(("persistent", "true"))
    if delivery_count:
        headers.append(REDELIVERED)
    for name, value in encoded.application_properties.items():
        name = _text(name)
        if name not in _FRAME_HEADERS:
            headers.append((name, _text(value)))
    return headers, body

