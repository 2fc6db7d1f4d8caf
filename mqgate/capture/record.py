# -*- test-case-name: tests.capture.test_record -*-
"""
A captured copy as the index keeps it: one L{CaptureRecord} per routed message (S7.5).

The core hands over the encoded message (L{mqgate.core.taps.CapturedCopy}); this is
where it is decoded, once, for the index and the live tail: the ids, reply-to and
application properties as text, and the body bounded to the index's body limit (S7.4:
a longer body is cut and marked, never stored whole).
"""

import json

import attr

from mqgate.amqp.message import DATA
from mqgate.core.addresses import QUEUE, TOPIC, AddressError, canonical, resolve

__all__ = ["CaptureRecord", "record_of", "address_forms", "DEFAULT_MAX_BODY"]

#: Bytes of a body kept at most (S7.4: 256 KiB); the rest is cut and the record says
#: how long the body was.
DEFAULT_MAX_BODY = 256 * 1024

#: Why "verify on broker" cannot be offered when the core gave neither an id nor a
#: reason (S7.5: the action is shown disabled with a reason, never hidden).
NO_ORIGINAL_ID = ("the copy carries no id of the original message, so the broker "
                  "cannot be asked for it")


#: What a topic's row cannot tell (S7.7), said in the row itself.
TOPIC_NOTE = ("one row per routed message: capture copies at the address and cannot "
              "tell which subscriptions got it")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CaptureRecord:
    """One routed message in the index.

    @ivar seq: the index's own number for it (arrival order), or C{None} before it is
        stored.
    @ivar captured_at: seconds since the epoch.
    @ivar routed_to: the queues the original reached, or C{None} where the core cannot
        tell (a topic: S7.7).
    @ivar properties: application properties, values as JSON-able scalars.
    @ivar body: the first bytes of the body (at most the body bound).
    @ivar body_size: the whole body's length in bytes.
    @ivar truncated: C{body} is shorter than the body was.
    """

    seq: int | None
    captured_at: float
    node: str
    subscription: str
    address: str
    kind: str
    routed_to: tuple | None
    message_id: str | None
    correlation_id: str | None
    reply_to: str | None
    original_id: str | None
    verify_reason: str | None
    properties: dict
    body: bytes
    body_size: int
    truncated: bool

    @property
    def stored_bytes(self):
        """What the row costs, roughly: the body kept plus the properties' JSON."""
        return len(self.body) + len(json.dumps(self.properties)) + 200

    def summary(self):
        """The record as JSON-able data, body as text where it is UTF-8 (else base64
        is not attempted: C{body_text} is C{None} and C{body_size} says how long)."""
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        summary = {
            "id": self.seq, "captured_at": self.captured_at, "node": self.node,
            "subscription": self.subscription, "address": self.address,
            "kind": self.kind,
            "routed_to": None if self.routed_to is None else list(self.routed_to),
            "message_id": self.message_id, "correlation_id": self.correlation_id,
            "reply_to": self.reply_to, "properties": self.properties,
            "body_text": text, "body_size": self.body_size,
            "truncated": self.truncated,
            "verify": {"offered": self.original_id is not None,
                       "original_id": self.original_id,
                       "reason": self.verify_reason},
        }
        if self.routed_to is None:
            summary["note"] = TOPIC_NOTE
        return summary


def record_of(copy, max_body=DEFAULT_MAX_BODY, seq=None):
    """The L{CaptureRecord} of a L{mqgate.core.taps.CapturedCopy}, numbered C{seq}.

    A payload that cannot be decoded still makes a record (its routing fields are
    known): its body and properties are empty, and a property C{mqgate.capture.error}
    says why, so the operator sees that the message went by.
    """
    message = copy.message
    properties = {}
    body, body_size = b"", 0
    try:
        payload = message.payload
        properties = {str(k): _scalar(v)
                      for k, v in payload.application_properties.items()}
        # Data sections (the usual body): only the kept prefix is copied out.
        found = payload.data_body(max_body)
        if found is None:
            whole = _body_bytes(payload)
            found = whole[:max_body], len(whole)
        body, body_size = found
    except Exception as e:   # a copy must never break the index: S7 bounds capture
        properties = {"mqgate.capture.error": f"the message could not be decoded: {e}"}
    reason = copy.verify_reason
    if copy.original_id is None and reason is None:
        reason = NO_ORIGINAL_ID
    return CaptureRecord(
        seq=seq, captured_at=copy.captured_at, node=copy.node,
        subscription=copy.subscription, address=copy.address, kind=copy.kind,
        routed_to=None if copy.routed_to is None else tuple(copy.routed_to),
        message_id=_text(message.message_id),
        correlation_id=_text(message.correlation_id),
        reply_to=_text(message.reply_to), original_id=copy.original_id,
        verify_reason=None if copy.original_id is not None else reason,
        properties=properties, body=bytes(body), body_size=body_size,
        truncated=body_size > max_body)


def _body_bytes(payload):
    """The body as bytes: data sections joined, a string value encoded as UTF-8,
    anything else (a map, a list) as JSON."""
    parts = []
    for code, value in payload.body_sections():
        if code == DATA:
            parts.append(bytes(value))
        elif isinstance(value, (bytes, bytearray, memoryview)):
            parts.append(bytes(value))
        elif isinstance(value, str):
            parts.append(value.encode("utf-8"))
        elif value is not None:
            parts.append(json.dumps(_scalar(value)).encode("utf-8"))
    return b"".join(parts)


def _text(value):
    """An id as text: AMQP ids may be strings, ulongs, uuids or binary."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


def _scalar(value):
    """A decoded AMQP value as JSON-able data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {str(k): _scalar(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scalar(v) for v in value]
    return str(value)


def address_forms(text):
    """The addresses C{text} may stand for, as capture writes them (C{queue://a},
    C{topic://a}): a prefixed address is itself; a bare name (an operator's search, a
    reply-to as a client wrote it) either kind, and itself."""
    try:
        kind, name = resolve(text)
    except AddressError:
        return (text,)
    if canonical(kind, name) != text and name == text:
        return (text, canonical(QUEUE, name), canonical(TOPIC, name))
    return (canonical(kind, name),)
