"""
Destination addresses and topic patterns (S2.1), and the errors a bad name produces.

An address names a kind of destination and a name: C{queue://orders},
C{topic://prices.eur}, the STOMP-style C{/queue/orders} and C{/topic/prices.eur}, or a
bare name whose kind comes from the AMQP terminus capabilities (C{queue}, C{topic},
C{temporary-queue}, C{temporary-topic}) or, failing those, from configuration.

Topic names are dotted; a subscription pattern may use C{*} for exactly one level and
C{#} for zero or more levels.
"""

from mqgate.errors import ProtocolError

QUEUE = "queue"
TOPIC = "topic"

_PREFIXES = (
    ("queue://", QUEUE),
    ("topic://", TOPIC),
    ("/queue/", QUEUE),
    ("/topic/", TOPIC),
)

_CAPABILITY_KINDS = {
    "queue": QUEUE,
    "temporary-queue": QUEUE,
    "topic": TOPIC,
    "temporary-topic": TOPIC,
}


class AddressError(ProtocolError):
    """An address cannot be resolved to a destination (empty or malformed name)."""

    condition = "amqp:invalid-field"


class NotFound(ProtocolError):
    """The named destination or subscription does not exist and may not be created
    (S2.5: the attach fails with a not-found error)."""

    condition = "amqp:not-found"


class NotAllowed(ProtocolError):
    """The request names something that exists but cannot be used this way (e.g. a
    durable subscription already in use)."""

    condition = "amqp:not-allowed"


def canonical(kind, name):
    """Return the canonical address text for C{(kind, name)}: C{'queue://a'}."""
    return f"{kind}://{name}"


def _kind_from_capabilities(capabilities):
    if not capabilities:
        return None
    # An AMQP "multiple" field may arrive as a single symbol rather than a list.
    if isinstance(capabilities, str):
        capabilities = (capabilities,)
    for capability in capabilities:
        kind = _CAPABILITY_KINDS.get(str(capability))
        if kind is not None:
            return kind
    return None


def resolve(address, capabilities=(), default_type=QUEUE):
    """Resolve an address to C{(kind, name)} (S2.1).

    C{'queue://a'} -> C{('queue', 'a')}; C{'topic://a.b'} -> C{('topic', 'a.b')}; the
    prefixes C{/queue/} and C{/topic/} are accepted too. A bare name takes the kind named
    by a terminus capability, or else C{default_type}. An explicit prefix wins over the
    capabilities.

    @raise AddressError: the address is missing or names nothing.
    """
    if not isinstance(address, str):
        raise AddressError(f"address must be text, not {address!r}")
    for prefix, kind in _PREFIXES:
        if address.startswith(prefix):
            name = address[len(prefix):]
            break
    else:
        kind = _kind_from_capabilities(capabilities) or default_type
        name = address
    if not name:
        raise AddressError(f"empty destination name in address {address!r}")
    return kind, name


def is_pattern(name):
    """Tell whether a topic name contains a wildcard level (C{*} or C{#})."""
    return "*" in name or "#" in name


def topic_matches(pattern, name):
    """Tell whether the topic C{name} matches the subscription C{pattern} (S2.1).

    Levels are separated by dots; C{*} matches exactly one level and C{#} zero or more
    levels. Wildcards only count as whole levels: C{a*} is a literal level.
    """
    if pattern == name:
        return True
    if "*" not in pattern and "#" not in pattern:
        return False
    return _match_levels(pattern.split("."), 0, name.split("."), 0)


def _match_levels(pattern, i, name, j):
    while i < len(pattern):
        level = pattern[i]
        if level == "#":
            # Consecutive '#' levels mean the same as one.
            while i + 1 < len(pattern) and pattern[i + 1] == "#":
                i += 1
            if i + 1 == len(pattern):
                return True
            return any(_match_levels(pattern, i + 1, name, k)
                       for k in range(j, len(name) + 1))
        if j >= len(name):
            return False
        if level != "*" and level != name[j]:
            return False
        i += 1
        j += 1
    return j == len(name)
