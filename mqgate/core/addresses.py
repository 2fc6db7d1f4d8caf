"""
Destination addresses and topic patterns (S2.1), and the errors a bad name produces.

An address names a kind of destination and a name: C{queue://orders},
C{topic://prices.eur}, the STOMP-style C{/queue/orders} and C{/topic/prices.eur}, or a
bare name whose kind comes from the AMQP terminus capabilities (C{queue}, C{topic},
C{temporary-queue}, C{temporary-topic}) or, failing those, from configuration.

Topic names are dotted; a subscription pattern may use C{*} for exactly one level and
C{#} for zero or more levels.
"""

from mqgate.core.errors import CoreError, ErrorKind

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


class AddressError(CoreError):
    """An address cannot be resolved to a destination (empty or malformed name)."""

    kind = ErrorKind.INVALID


class NameLimitExceeded(CoreError):
    """A destination name or topic pattern is longer, or deeper, than the broker takes
    (C{mqgate.destination.max_name_length}, C{mqgate.topic.max_levels})."""

    kind = ErrorKind.LIMIT_EXCEEDED


class NotFound(CoreError):
    """The named destination or subscription does not exist and may not be created
    (S2.5: the attach fails with a not-found error)."""

    kind = ErrorKind.NOT_FOUND


class NotAllowed(CoreError):
    """The request names something that exists but cannot be used this way (e.g. a
    durable subscription already in use)."""

    kind = ErrorKind.NOT_ALLOWED


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


def check_name(kind, name, max_length, max_levels):
    """Refuse a destination name (for a topic, a name or a pattern) longer than
    C{max_length} characters or, for a topic, with more than C{max_levels} levels.

    Run once per attach or per new route, never per message: it costs O(len(name)).

    @raise NameLimitExceeded: saying which limit and which setting raises it.
    """
    if len(name) > max_length:
        raise NameLimitExceeded(
            f"the {kind} name {_shown(name)} is {len(name)} characters long, more than"
            f" the broker takes ({max_length}, mqgate.destination.max_name_length)")
    if kind == TOPIC:
        levels = name.count(".") + 1
        if levels > max_levels:
            raise NameLimitExceeded(
                f"the topic {_shown(name)} has {levels} levels, more than the broker"
                f" takes ({max_levels}, mqgate.topic.max_levels)")


def _shown(name):
    # An error quotes a name, but not a megabyte of it.
    return repr(name) if len(name) <= 64 else repr(name[:64]) + "..."


def is_pattern(name):
    """Tell whether a topic name contains a wildcard level (C{*} or C{#})."""
    return "*" in name or "#" in name


def topic_matches(pattern, name):
    """Tell whether the topic C{name} matches the subscription C{pattern} (S2.1).

    Levels are separated by dots; C{*} matches exactly one level and C{#} zero or more
    levels. Wildcards only count as whole levels: C{a*} is a literal level.

    The cost is at most proportional to (pattern levels) x (name levels), whatever the
    number of C{#}: a pattern cannot make the broker search.
    """
    if pattern == name:
        return True
    if "*" not in pattern and "#" not in pattern:
        return False
    return _match_levels(pattern.split("."), name.split("."))


def _match_levels(pattern, name):
    # The C{#} levels cut the pattern into runs of fixed length (literal and C{*}
    # levels); consecutive C{#} give empty runs, which is why they mean one C{#}. The
    # first run is anchored at the start of the name unless the pattern starts with
    # C{#}, the last at its end unless it ends with one; each run in between is matched
    # at the earliest place after the previous one. Taking the earliest place is never
    # wrong: it leaves the most levels for the runs still to place, and a C{#} absorbs
    # whatever lies between. Each run is tried at most once per name level, so no
    # backtracking happens and the work is bounded by len(pattern) * len(name).
    runs = _runs(pattern)
    if len(runs) == 1:
        run = runs[0]
        return len(run) == len(name) and _run_at(run, name, 0)
    first, last = runs[0], runs[-1]
    end = len(name) - len(last)
    if end < len(first) or not _run_at(first, name, 0) or not _run_at(last, name, end):
        return False
    position = len(first)
    for run in runs[1:-1]:
        if not run:
            continue
        position = _find_run(run, name, position, end)
        if position < 0:
            return False
    return True


#: The level matcher, for another syntax of topics (mqgate.core.mqlight) to reuse: its
#: lists of levels, with C{*} for one level and C{#} for any number.
match_levels = _match_levels


def _runs(pattern):
    """The pattern's levels between its C{#} levels: C{a.#.b.*.#} -> [[a], [b, *], []]."""
    runs = [[]]
    for level in pattern:
        if level == "#":
            runs.append([])
        else:
            runs[-1].append(level)
    return runs


def _run_at(run, name, start):
    # Does every level of C{run} match the name level at the same offset from C{start}?
    for offset, level in enumerate(run):
        if level != "*" and level != name[start + offset]:
            return False
    return True


def _find_run(run, name, start, end):
    """The end of the earliest place at or after C{start} where C{run} matches and ends
    by C{end}; -1 when there is none."""
    for place in range(start, end - len(run) + 1):
        if _run_at(run, name, place):
            return place + len(run)
    return -1
