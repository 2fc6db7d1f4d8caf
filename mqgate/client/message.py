"""
Messages as the client library's users see them: a body, application properties and the
few standard fields people set (S6.1), encoded with the broker's own message code.

A body of C{bytes} travels as one AMQP data section (a JMS BytesMessage, a STOMP body
as is); C{str}, numbers, lists and dicts as an amqp-value (a str is a JMS TextMessage
and reaches a STOMP subscriber as its UTF-8 text).
"""

from mqgate.amqp.message import (
    AMQP_SEQUENCE, AMQP_VALUE, DATA, Header, Properties, build_message, parse_message,
)
from mqgate.amqp.types import Symbol, UInt

__all__ = ["Message", "ReceivedMessage"]


class Message:
    """A message to send.

    @param body: bytes, str, or any AMQP-encodable value (numbers, lists, dicts).
    @param properties: application properties (str keys; str, number or bool values):
        what selectors and STOMP headers see.
    @param durable: persistent (stored by the broker before it accepts it).
    @param priority: 0..9 (JMS), default 4.
    @param ttl: seconds to live, or None.
    """

    def __init__(self, body=None, properties=None, *, subject=None, message_id=None,
                 correlation_id=None, reply_to=None, to=None, content_type=None,
                 durable=False, priority=None, ttl=None):
        self.body = body
        self.properties = dict(properties or {})
        self.subject = subject
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.to = to
        self.content_type = content_type
        self.durable = durable
        self.priority = priority
        self.ttl = ttl

    def __repr__(self):
        return f"<Message body={self.body!r} properties={self.properties!r}>"

    def encode(self):
        """The message's bytes, as they go into a transfer."""
        header = None
        if self.durable or self.priority is not None or self.ttl is not None:
            header = Header(durable=bool(self.durable),
                            priority=4 if self.priority is None else self.priority,
                            ttl=None if self.ttl is None else UInt(int(self.ttl * 1000)))
        fields = (self.message_id, self.to, self.subject, self.reply_to,
                  self.correlation_id, self.content_type)
        properties = None
        if any(f is not None for f in fields):
            properties = Properties(
                message_id=self.message_id, to=self.to, subject=self.subject,
                reply_to=self.reply_to, correlation_id=self.correlation_id,
                content_type=None if self.content_type is None
                else Symbol(self.content_type))
        return build_message(self.body, header=header, properties=properties,
                             application_properties=self.properties or None).data


class ReceivedMessage(Message):
    """A message a receiver got; L{acknowledge} settles it in CLIENT mode.

    @ivar redelivered: the broker delivered it before (its delivery count is above 0).
    @ivar receiver: the L{mqgate.client.connection.Receiver} it came from.
    """

    def __init__(self, data, receiver=None, delivery=None):
        parsed = parse_message(data)
        props = parsed.properties
        header = parsed.header
        super().__init__(
            _body_of(parsed), dict(parsed.application_properties),
            subject=props.subject, message_id=props.message_id,
            correlation_id=props.correlation_id, reply_to=props.reply_to, to=props.to,
            content_type=None if props.content_type is None else str(props.content_type),
            durable=bool(header.durable), priority=header.priority,
            ttl=None if header.ttl is None else header.ttl / 1000.0)
        self.redelivered = bool(header.delivery_count)
        self.receiver = receiver
        self._delivery = delivery

    def acknowledge(self):
        """CLIENT mode: settle this message and every earlier one the connection
        received and has not settled (as JMS's Message.acknowledge does). In the other
        modes the library settles by itself and this does nothing."""
        if self.receiver is not None and self._delivery is not None:
            self.receiver._connection._acknowledge_upto(self._delivery)


def _body_of(parsed):
    sections = parsed.body_sections()
    if not sections:
        return None
    code = sections[0][0]
    if code == DATA:
        return b"".join(bytes(value) for _, value in sections)
    if code == AMQP_SEQUENCE:
        return [item for _, value in sections for item in value]
    if code == AMQP_VALUE:
        return sections[0][1]
    return None
