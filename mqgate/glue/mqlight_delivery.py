"""What the MQ Light client requires of every message it receives (S8.5).

The client (the ``mqlight`` npm package) reads ``properties.to`` of each delivery to
tell the application the message's topic: it strips an ``amqp://host:port/`` or
``amqps://host:port/`` prefix and shows the rest, and it fails on a message without a
``to`` (it calls a string method on it). MQ Light publishers always set it
(``amqp://host:port/<topic>``), but a message from a Proton or rhea sender that named
the topic only as its link's target has none, and a ``to`` that is not a string is as
bad.

So on the links only the MQ Light client makes (named ``private:<pattern>`` or
``share:<name>:<pattern>``) a delivery keeps the publisher's ``to`` when it is a string
and otherwise gets ``<service>/<pattern>``, the subscription's topic pattern: the
broker keeps no other record of the topic a message was sent to (its producer's link
target), so for a wildcard subscription the application sees the pattern as the
topic of such a message. Other clients' links are never touched: there the bare
message goes out as it came in (design rule 2).

The client also reads the header of every message (its ``ttl``) and fails on a
message without a header section, which the broker's own messages (a STOMP SEND
converted to AMQP) may lack: such a message gets an empty header (every field its
default) on these links.

The client matches a delivery to its subscription by the receiving link's name, not
by ``to``, so nothing more is needed for the subscription itself.
"""

from mqgate.amqp.message import amended

__all__ = ["PRIVATE", "SHARE", "is_mqlight_link", "pattern_of", "service_url",
           "for_client"]

PRIVATE, SHARE = "private:", "share:"


def is_mqlight_link(name):
    """Whether a link of this name is an MQ Light subscription."""
    return isinstance(name, str) and name.startswith((PRIVATE, SHARE))


def pattern_of(name):
    """The topic pattern of an MQ Light link name: C{private:<pattern>} or
    C{share:<name>:<pattern>} (a share name has no C{:})."""
    if name.startswith(PRIVATE):
        return name[len(PRIVATE):]
    rest = name[len(SHARE):]
    return rest.partition(":")[2] if ":" in rest else rest


def service_url(host, port, tls=False):
    """The service as the client writes it in a C{to}: C{amqp://host:port}."""
    if ":" in host:
        host = f"[{host}]"   # an IPv6 address
    return f"{'amqps' if tls else 'amqp'}://{host}:{port}"


def for_client(message, service, pattern):
    """The payload to deliver to an MQ Light subscription: the message's own when it
    has a header and a string C{properties.to}; else a copy with a header added and
    C{to} set to C{<service>/<pattern>} where it was not a string.

    @param message: the core's L{BrokerMessage}.
    @param service: L{service_url} of the connection.
    @param pattern: the subscription's topic pattern (L{pattern_of}).
    """
    payload = message.payload
    to = None if isinstance(payload.properties.to, str) else f"{service}/{pattern}"
    if to is None and payload.has_header:
        return payload
    return amended(payload, to=to, header=True)
