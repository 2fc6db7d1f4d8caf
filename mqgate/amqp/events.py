"""
Events an AMQP engine reports, in order, from C{receive_data} (docs/design.md).

They are plain slotted value objects; the ones about a session or a link carry the engine
object so that the glue can answer through it (C{link.attach(...)}, C{link.flow(...)}).
"""

from dataclasses import dataclass

__all__ = [
    "AuthenticationRequested", "SaslCompleted", "ConnectionOpened", "ConnectionClosed",
    "SessionBegun", "SessionEnded", "LinkAttached", "LinkDetached", "CreditGranted",
    "MessageReceived", "DeliveriesSettled", "TransferAborted", "IngressRefused",
    "WindowOpened",
]


@dataclass(frozen=True, slots=True)
class AuthenticationRequested:
    """A client asked to authenticate (server side). Answer with C{sasl_outcome(ok)}.

    C{mechanism} is "PLAIN" or "ANONYMOUS"; C{username}/C{password} are None for ANONYMOUS.
    """
    mechanism: str
    username: object
    password: object
    hostname: object


@dataclass(frozen=True, slots=True)
class SaslCompleted:
    """The SASL exchange ended (client side: the server's outcome)."""
    ok: bool
    code: int


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """The peer's open arrived. C{open} is the L{Open} performative."""
    open: object


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection (C{error} is an L{Error} or None)."""
    error: object


@dataclass(frozen=True, slots=True)
class SessionBegun:
    """The peer began a session (answer with C{session.begin()}), or answered ours."""
    session: object


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """The peer ended a session; every link of it (listed in C{links}) is gone."""
    session: object
    error: object
    links: list


@dataclass(frozen=True, slots=True)
class LinkAttached:
    """The peer attached a link (answer with C{link.attach(...)} or C{link.refuse(...)})."""
    link: object


@dataclass(frozen=True, slots=True)
class LinkDetached:
    """The peer detached a link. The engine has answered; C{closed} as the peer sent it."""
    link: object
    closed: bool
    error: object


@dataclass(frozen=True, slots=True)
class CreditGranted:
    """The receiver at the other end of one of our sending links changed its credit.

    C{link.credit} is what we may now send; C{link.drain} asks us to use it or give it up.
    """
    link: object


@dataclass(frozen=True, slots=True)
class WindowOpened:
    """The peer opened its session window again: C{links}, our sending links that the
    shut window held back (L{mqgate.amqp.link.Link.writable} was false), may send."""
    session: object
    links: list


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A whole message arrived on one of our receiving links.

    C{payload} is bytes (all frames joined). C{settled} is True for a pre-settled
    (at-most-once) transfer; otherwise answer with C{link.settle(delivery_id, state)}.
    """
    link: object
    delivery_id: int
    delivery_tag: bytes
    settled: bool
    payload: bytes
    state: object


@dataclass(frozen=True, slots=True)
class IngressRefused:
    """S9.5: a message on C{link} passed its ingress limit (C{size} > C{limit} bytes;
    C{guaranteed} or direct); the engine is closing the connection."""
    link: object
    size: int
    limit: int
    guaranteed: bool


@dataclass(frozen=True, slots=True)
class TransferAborted:
    """The sender aborted a multi-frame delivery; its partial bytes were discarded."""
    link: object
    delivery_id: int


@dataclass(frozen=True, slots=True)
class DeliveriesSettled:
    """The peer changed the state of deliveries we sent.

    C{deliveries} lists the C{context} objects given to C{link.send()}, in delivery order;
    C{state} is the outcome (L{Accepted} ...) or None; C{settled} says whether the peer
    has forgotten them.
    """
    link: object
    deliveries: list
    state: object
    settled: bool
