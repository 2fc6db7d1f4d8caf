"""
Errors of the STOMP engine (docs/design.md, S10.4).

A STOMP error is told to the peer in an ERROR frame: a short C{message} header and an
optional body with the details, plus C{receipt-id} when the offending frame asked for a
receipt. The error object carries exactly those, so the engine (or the adapter) can write
the frame without parsing a string. C{message} doubles as the L{ProtocolError}
C{condition}, which is what that class's docstring promises for STOMP.

    StompError                  (ProtocolError)
      FrameError                (+ RemoteProtocolError)  the bytes are not STOMP frames
      StompProtocolError        (+ RemoteProtocolError)  a good frame at the wrong time,
                                                         or without a required header
      StompLocalError           (+ LocalProtocolError)   the glue called the engine wrongly
"""

from mqgate.errors import LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = ["StompError", "FrameError", "MessageTooBig", "StompProtocolError",
           "StompLocalError"]


class StompError(ProtocolError):
    """Something went wrong that an ERROR frame reports.

    @ivar message: the ERROR frame's C{message} header (a short phrase).
    @ivar detail: the ERROR frame's body text (may be empty).
    @ivar receipt_id: the C{receipt} header of the offending frame, or None.
    @ivar headers: extra ERROR headers (e.g. C{version} when negotiation failed).
    """

    def __init__(self, message, detail="", receipt_id=None, headers=()):
        self.message = message
        self.detail = detail
        self.receipt_id = receipt_id
        self.headers = list(headers)
        super().__init__(detail or message, condition=message)

    def __str__(self):
        if self.detail and self.detail != self.message:
            return f"{self.message}: {self.detail}"
        return self.message


class FrameError(StompError, RemoteProtocolError):
    """The byte stream is not well-formed STOMP (or exceeds a size limit).

    The stream cannot be trusted after this: the connection ends (S10.4).
    """


class MessageTooBig(FrameError):
    """S9.5: a SEND's body passed the ingress limit of its class (persistent:true is
    guaranteed, anything else direct): CLIENT_CLIENT_MESSAGE_TOO_BIG, and the
    connection ends.

    @ivar size: the body size declared or read so far when the limit was passed.
    @ivar limit: the limit.
    @ivar guaranteed: whether the SEND was persistent.
    """

    def __init__(self, size, limit, guaranteed):
        kind = "guaranteed (persistent)" if guaranteed else "direct"
        super().__init__(
            "CLIENT_CLIENT_MESSAGE_TOO_BIG",
            f"a {kind} message of more than {limit} bytes; the broker takes {kind} "
            f"messages of at most {limit} bytes")
        self.size = size
        self.limit = limit
        self.guaranteed = guaranteed


class StompProtocolError(StompError, RemoteProtocolError):
    """A well-formed frame broke the protocol: wrong state, missing or bad header."""


class StompLocalError(StompError, LocalProtocolError):
    """The caller of the engine asked for something the current state forbids."""
