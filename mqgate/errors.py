"""
The root of every error mqgate raises on purpose.

Errors are values with names (design rule 7): a protocol error carries the wire
condition its protocol puts on the close/detach/ERROR frame, and a configuration error
carries the key, the value and what is allowed, so that whoever catches it can tell the
operator or the peer exactly what went wrong without parsing a string.
"""


class MqgateError(Exception):
    """Root of all mqgate errors."""


class ConfigError(MqgateError):
    """A configuration value is not acceptable.

    @ivar key: the configuration key, as the operator wrote it.
    @ivar value: the offending value (as text).
    @ivar allowed: a short phrase saying what would be accepted.
    """

    def __init__(self, key, value, allowed, source=None):
        self.key = key
        self.value = value
        self.allowed = allowed
        self.source = source
        where = f" ({source})" if source else ""
        super().__init__(
            f"bad value for {key}{where}: {value!r}; allowed: {allowed}")


class ProtocolError(MqgateError):
    """A wire protocol was violated.

    @ivar condition: the protocol's error condition (an AMQP condition symbol, or the
        STOMP ERROR frame's C{message} header), as text.
    @ivar description: a human description sent to the peer.
    """

    condition = "amqp:internal-error"

    def __init__(self, description, condition=None):
        if condition is not None:
            self.condition = condition
        self.description = description
        super().__init__(f"{self.condition}: {description}")


class LocalProtocolError(ProtocolError):
    """We (the caller of an engine) tried to do something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


def printable(text):
    """C{text} with its control characters escaped (C{\\r} as C{\\\\r}, ESC as
    C{\\\\x1b}), for a log line or a message that quotes what a client sent: written raw,
    a name could forge a log line or drive the operator's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
