"""
The STOMP 1.0/1.1/1.2 engine (S10.2): frames and the server connection, no I/O.

Re-exports the public names of L{frames}, L{connection}, L{events} and L{errors}.
"""

from mqgate.stomp.connection import ACK_MODES, StompConnection, StompState
from mqgate.stomp.errors import FrameError, StompError, StompLocalError, StompProtocolError
from mqgate.stomp.events import (
    Abort, Ack, Begin, Commit, ConnectRequested, Disconnect, Nack, Send, Subscribe,
    Unsubscribe,
)
from mqgate.stomp.frames import (
    DEFAULT_LIMITS, HEARTBEAT, VERSIONS, Frame, FrameLimits, FrameParser, Heartbeat,
    encode_frame, serialize,
)

__all__ = [
    "ACK_MODES", "StompConnection", "StompState",
    "FrameError", "StompError", "StompLocalError", "StompProtocolError",
    "Abort", "Ack", "Begin", "Commit", "ConnectRequested", "Disconnect", "Nack", "Send",
    "Subscribe", "Unsubscribe",
    "DEFAULT_LIMITS", "HEARTBEAT", "VERSIONS", "Frame", "FrameLimits", "FrameParser",
    "Heartbeat", "encode_frame", "serialize",
]
