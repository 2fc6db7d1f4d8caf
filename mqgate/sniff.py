"""
Protocol sniffing for shared ports (S1.1, S10): which protocol do these first bytes speak?

Messaging services accept AMQP 1.0 and STOMP 1.2 on one port (S1.1), and a port may
also take HTTP (tunnel, WebSocket upgrade) or TLS. L{sniff} looks at the bytes a
client has sent so far and answers with a L{Kind}. It is pure (docs/design.md): the Twisted
side (L{mqgate.net.unify}) buffers, calls it again as bytes arrive and hands the
connection over.

The patterns, byte by byte (C{.} is any byte)::

    kind        first bytes                                   source
    ----------  --------------------------------------------  --------------------------
    AMQP        41 4D 51 50 00 01 00 00   "AMQP" 0 1 0 0      AMQP 1.0 part 2 s2.2
    AMQP_TLS    41 4D 51 50 02 01 00 00   "AMQP" 2 1 0 0      (FACTS 5)
    AMQP_SASL   41 4D 51 50 03 01 00 00   "AMQP" 3 1 0 0
    STOMP       EOL* "CONNECT" EOL  or  EOL* "STOMP" EOL      STOMP 1.2 (EOL = [CR] LF;
                                                              leading EOLs: heart-beats)
    HTTP        METHOD SP, METHOD one of GET POST PUT HEAD    RFC 9112 request line
                OPTIONS DELETE PATCH
    TLS         16 03 (00..04) . . 01                         TLS record: handshake (22),
                                                              version 3.x, 2 length bytes,
                                                              ClientHello (1)

Answers:
  - the kind, as soon as the start of C{prefix} matches a whole pattern (the bytes
    after it are the protocol's business);
  - L{NEED_MORE} while C{prefix} is a proper prefix of some pattern;
  - L{UNKNOWN} as soon as it cannot become any pattern, and also when
    L{SNIFF_BUDGET} bytes have arrived without a decision (only possible with a long
    run of leading EOLs), so that a caller's buffer stays bounded (docs/design.md).

The answer depends on the first L{SNIFF_BUDGET} bytes only, and once it is not
L{NEED_MORE} it stays the same however many bytes follow: sniffing is the same
whichever way the bytes were split into arrivals.

An AMQP header with another version (for instance 0-9-1, C{"AMQP" 0 0 9 1}) is
L{UNKNOWN}: the caller answers with the header it supports and closes (AMQP s2.2).
"""

import enum

__all__ = [
    "Kind", "AMQP", "AMQP_SASL", "AMQP_TLS", "STOMP", "HTTP", "TLS", "NEED_MORE",
    "UNKNOWN", "SNIFF_BUDGET", "PATTERNS", "HTTP_METHODS", "sniff",
]


class Kind(enum.StrEnum):
    """What L{sniff} found. The values are the names used in configuration."""

    AMQP = "amqp"
    AMQP_SASL = "amqp-sasl"
    AMQP_TLS = "amqp-tls"
    STOMP = "stomp"
    HTTP = "http"
    TLS = "tls"
    NEED_MORE = "need-more"
    UNKNOWN = "unknown"


AMQP = Kind.AMQP
AMQP_SASL = Kind.AMQP_SASL
AMQP_TLS = Kind.AMQP_TLS
STOMP = Kind.STOMP
HTTP = Kind.HTTP
TLS = Kind.TLS
NEED_MORE = Kind.NEED_MORE
UNKNOWN = Kind.UNKNOWN

#: Bytes after which an undecided prefix is UNKNOWN: the longest pattern (9 bytes,
#: "OPTIONS " / "CONNECT\r\n") plus room for heart-beat EOLs a STOMP client may send
#: before its CONNECT frame.
SNIFF_BUDGET = 64

#: The HTTP methods that mark a request line (each followed by one space).
HTTP_METHODS = (b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"PATCH")


def _literal(data):
    """A pattern position list matching exactly C{data}."""
    return tuple(frozenset((byte,)) for byte in data)


_ANY = frozenset(range(256))
_EOL_START = frozenset(b"\r\n")

#: Every pattern as (kind, positions): each position is the set of bytes allowed there.
#: STOMP's patterns are matched after the leading EOLs are skipped (see L{sniff}).
PATTERNS = (
    (AMQP, _literal(b"AMQP\x00\x01\x00\x00")),
    (AMQP_TLS, _literal(b"AMQP\x02\x01\x00\x00")),
    (AMQP_SASL, _literal(b"AMQP\x03\x01\x00\x00")),
    (STOMP, _literal(b"CONNECT") + (_EOL_START,)),
    (STOMP, _literal(b"STOMP") + (_EOL_START,)),
    (TLS, (frozenset((0x16,)), frozenset((0x03,)), frozenset(range(5)), _ANY, _ANY,
           frozenset((0x01,)))),
) + tuple((HTTP, _literal(method + b" ")) for method in HTTP_METHODS)

_STOMP_PATTERNS = tuple(p for p in PATTERNS if p[0] is STOMP)


def _skip_eols(data):
    """C{data} without its leading EOLs, and whether any were skipped.

    A lone trailing CR is kept: it may be the start of a CR LF still on its way.
    """
    start = 0
    while True:
        if data.startswith(b"\n", start):
            start += 1
        elif data.startswith(b"\r\n", start):
            start += 2
        else:
            return data[start:], start > 0


def _match(data, positions):
    """C{True} for a whole match, C{None} for a proper prefix, C{False} for neither."""
    for byte, allowed in zip(data, positions):
        if byte not in allowed:
            return False
    return True if len(data) >= len(positions) else None


def sniff(prefix):
    """Classify the first bytes a client sent (see the module docstring for patterns).

    @param prefix: every byte received so far (bytes, bytearray or memoryview).
    @return: a L{Kind}: a protocol, L{NEED_MORE} or L{UNKNOWN}.
    """
    # Only the first SNIFF_BUDGET bytes count: the answer must not depend on how the
    # bytes were split into arrivals (a 65-byte read must not find a STOMP frame that
    # a 64-byte read plus one more byte was already refused for), and the copy stays
    # small however much the caller has buffered.
    data = bytes(prefix[:SNIFF_BUDGET])
    rest, skipped = _skip_eols(data)
    if rest == b"\r":
        # A CR that may yet become an EOL before a STOMP frame: wait for its LF.
        maybe = True
    else:
        maybe = False
        for kind, positions in (_STOMP_PATTERNS if skipped else PATTERNS):
            found = _match(rest, positions)
            if found:
                return kind
            maybe = maybe or found is None
    if maybe and len(data) < SNIFF_BUDGET:
        return NEED_MORE
    return UNKNOWN
