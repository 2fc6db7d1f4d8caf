# -*- test-case-name: tests.ws.test_policy -*-
"""
Who may open a WebSocket on a gateway service and in which subprotocol (S10.3): pure
decisions, no I/O, so that the rules are tested on their own.

Subprotocols (RFC 6455 s1.9, s4.2.2): a client lists those it speaks in
C{Sec-WebSocket-Protocol}; the server answers with one of them, spelled as offered, or
with none. Clients check the answer strictly (Node's C{ws}, which rhea uses in Node,
and browsers fail a connection whose answer was not offered, or that got none while
offering some), so the answer is always one of the offered names:

- C{amqp}: the AMQP WebSocket Binding (AMQP frames in binary messages). rhea users
  offer C{binary, AMQPWSB10, amqp}; qpid-jms offers C{amqp}. C{AMQPWSB10} (the
  binding's draft name, which some services still ask for) is answered when it is
  offered without C{amqp};
- C{v10.stomp}, C{v11.stomp}, C{v12.stomp}: STOMP; the highest offered is answered;
- nothing offered: the byte stream is sniffed as on TCP (stomp.py's WebSocket
  connection offers none).

When both families are offered, the one the client lists first wins. An offer with
none of these is refused (400 Bad Request, naming what is served).

Origins (RFC 6455 s10.2): a browser sends the page's origin, and sends its cookies to
any site, so a page from anywhere could otherwise use a logged-in browser to talk to
the broker. A service's C{allowed_origins} lists the origins allowed (or C{*}); an
empty list allows the same origin only (the Origin's host and port are the Host
header's). A request without Origin is not from a browser and is allowed. A refused
origin is answered 403 Forbidden, as s10.2 suggests.
"""

from urllib.parse import urlsplit

import attrs

__all__ = ["AMQP", "STOMP", "Refused", "Choice", "choose_subprotocol",
           "origin_allowed", "parse_origins"]

AMQP, STOMP = "amqp", "stomp"

_AMQP_NAMES = ("amqp", "AMQPWSB10")          # in order of preference
_STOMP_NAMES = ("v12.stomp", "v11.stomp", "v10.stomp")   # highest first
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


class Refused(Exception):
    """The handshake is refused: C{status} is the HTTP status, C{reason} says why."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@attrs.frozen
class Choice:
    """The subprotocol answered (None: none) and the protocol it carries (L{AMQP},
    L{STOMP}, or None: sniffed from the first bytes)."""

    subprotocol: str | None
    family: str | None


def choose_subprotocol(offered):
    """The answer to the subprotocols a client C{offered} (in its order).

    @raise Refused: (400) none of them is served.
    """
    offered = [name.strip() for name in offered if name.strip()]
    if not offered:
        return Choice(None, None)
    amqp = [name for name in _AMQP_NAMES if name in offered]
    stomp = [name for name in _STOMP_NAMES if name in offered]
    if amqp and stomp:
        first_amqp = min(offered.index(name) for name in amqp)
        first_stomp = min(offered.index(name) for name in stomp)
        if first_stomp < first_amqp:
            amqp = []
    if amqp:
        return Choice(amqp[0], AMQP)
    if stomp:
        return Choice(stomp[0], STOMP)
    served = ", ".join(_AMQP_NAMES[:1] + _STOMP_NAMES)
    raise Refused(400, f"no subprotocol offered is served here (offered "
                       f"{', '.join(offered)[:200]}; served: {served})")


def parse_origins(items):
    """The allow-list from C{mqgate.SERVICE.ws.allowed_origins}'s items: a set of
    C{(scheme, host, port)}, or None for C{*} (any origin).

    @raise ValueError: an item that is not C{scheme://host[:port]} nor C{*}.
    """
    allowed = set()
    for item in items:
        if item.strip() == "*":
            return None
        origin = _origin(item.strip())
        if origin is None:
            raise ValueError(f"{item!r} is not an origin (scheme://host[:port]) nor *")
        allowed.add(origin)
    return frozenset(allowed)


def origin_allowed(origin, host, allowed, secure):
    """Whether a handshake with Origin C{origin} and Host C{host} may go on.

    @param origin: the Origin header's value, or None when absent.
    @param host: the Host header's value (may be None).
    @param allowed: from L{parse_origins}: a set (empty: same origin only) or None (any).
    @param secure: the service is HTTPS (a Host without a port means 443).
    """
    if origin is None or allowed is None:
        return True
    parsed = _origin(origin)
    if parsed is None:
        return False     # "null" (a sandboxed or file: page) or garbage
    if allowed:
        return parsed in allowed
    return host is not None and parsed[1:] == _host_port(host, secure)


def _origin(text):
    """C{(scheme, host, port)} of an origin text, or None if it is not one."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _host_port(host, secure):
    """C{(host, port)} of a Host header (IPv6 in brackets), its port defaulted."""
    try:
        parts = urlsplit("//" + host.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port or (443 if secure else 80)
