"""
Events the STOMP engine reports, in order, from C{receive_data} (docs/design.md, S10.2).

One event per client frame, after the engine has checked the frame's required headers
for the agreed version. C{receipt} is the frame's C{receipt} header (or None): the glue
answers it with C{connection.receipt(receipt)} once the frame has been processed (for a
SEND of a persistent message: once the store has it). C{headers} are the frame's
headers as received, C{(name, value)} pairs in wire order with repeats kept.
"""

from dataclasses import dataclass

__all__ = [
    "ConnectRequested", "Send", "Subscribe", "Unsubscribe", "Ack", "Nack", "Begin",
    "Commit", "Abort", "Disconnect", "IngressRefused",
]


@dataclass(frozen=True, slots=True)
class ConnectRequested:
    """A CONNECT (or STOMP) frame arrived and the version is agreed.

    Authenticate C{login}/C{passcode} (None when absent), then answer with
    C{connection.accept(session_id)} or C{connection.refuse(message, detail)}.
    C{heartbeat_client} is the client's C{(cx, cy)} in ms (C{(0, 0)} when absent or in
    1.0). C{host} is None when the client sent none.
    """
    login: object
    passcode: object
    host: object
    version: str
    heartbeat_client: tuple
    headers: list


# Send and Ack, one per message, are not frozen: a frozen dataclass sets each field
# through object.__setattr__, which made a Send cost 0.9 us to build against 0.15 us,
# a fifth of parsing its frame. Nothing changes an event once the engine has made it.
@dataclass(slots=True)
class Send:
    """SEND: publish C{body} to C{destination} (within C{transaction} if not None).
    C{persistent}: the frame says C{persistent:true} (any case), so the broker must
    store the message before its receipt."""
    destination: str
    headers: list
    body: bytes
    transaction: object
    receipt: object
    persistent: bool = False


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE: C{ack} is "auto", "client" or "client-individual".

    In 1.0 the C{id} header is optional; without it C{id} is the destination.
    """
    id: str
    destination: str
    ack: str
    headers: list
    receipt: object


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE the subscription C{id} (1.0: the destination when no id was sent)."""
    id: str
    receipt: object


@dataclass(slots=True)   # not frozen: see Send
class Ack:
    """ACK a message.

    C{id} always names the acknowledged message: the C{id} header in 1.2 (the MESSAGE's
    C{ack} header), the C{message-id} header in 1.0 and 1.1. C{subscription} and
    C{message_id} are those headers as sent (None when absent; 1.2 sends neither).
    """
    id: str
    subscription: object
    message_id: object
    transaction: object
    receipt: object


@dataclass(frozen=True, slots=True)
class Nack:
    """NACK a message (1.1 and 1.2 only); the fields are those of L{Ack}."""
    id: str
    subscription: object
    message_id: object
    transaction: object
    receipt: object


@dataclass(frozen=True, slots=True)
class Begin:
    """BEGIN a transaction."""
    transaction: str
    receipt: object


@dataclass(frozen=True, slots=True)
class Commit:
    """COMMIT a transaction."""
    transaction: str
    receipt: object


@dataclass(frozen=True, slots=True)
class Abort:
    """ABORT a transaction."""
    transaction: str
    receipt: object


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT: the client is leaving; nothing after it is read.

    With a C{receipt}, the glue finishes what it has in hand, then calls
    C{connection.receipt(receipt)}; the engine is finished once that RECEIPT is written.
    Without one, the engine is finished at once.
    """
    receipt: object


@dataclass(frozen=True, slots=True)
class IngressRefused:
    """S9.5: a SEND passed its ingress limit (C{size} > C{limit} bytes; C{guaranteed}
    when persistent); the engine sent an ERROR and is finished."""
    size: int
    limit: int
    guaranteed: bool
