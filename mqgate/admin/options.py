"""
The options of an admin command, in imqcmd's form (S11.1).

An admin request carries its command as words, C{VERB OBJECT ARGUMENT...}, and the
arguments of the destination, durable, service, connection and broker commands are
imqcmd's options: C{-t q -n orders -o maxNumMsgs=1000 -o limitBehavior=REMOVE_OLDEST}.
Every command reads them with L{parse_options}, so that an unknown option, a missing
value or a value given twice is refused in the same words everywhere, naming the
option and the command's usage.

    options = parse_options(arguments, "pause dst -t q|t -n NAME [-pst WHAT]",
                            values={"-t", "-n", "-pst"}, required={"-t", "-n"})
    kind = destination_type(options["-t"])
"""

from mqgate.admin.requests import BadRequest

__all__ = ["parse_options", "destination_type", "property_pairs", "PAUSE_TARGETS"]

#: What C{pause dst -pst} may name (imqcmd's default is ALL).
PAUSE_TARGETS = ("PRODUCERS", "CONSUMERS", "ALL")

_TYPES = {"q": "queue", "queue": "queue", "t": "topic", "topic": "topic"}


def parse_options(arguments, usage, *, values=(), flags=(), repeated=(), required=()):
    """Read C{arguments} (a list of words) as options.

    @param usage: the command's usage line, quoted in every error.
    @param values: options followed by one value (C{-n NAME}).
    @param flags: options that stand alone (C{-tmp}); their value is C{True}.
    @param repeated: options with a value that may be given more than once (C{-o}); their
        value is the list of what was given, in order (empty when absent).
    @param required: options that must be given.
    @return: a dict from option (C{"-n"}) to its value; an absent value or flag option
        is absent from it.
    @raise BadRequest: an unknown option, a word that is not an option, a missing value,
        an option given twice, a required option missing.
    """
    options = {name: [] for name in repeated}
    words = list(arguments)
    while words:
        word = words.pop(0)
        if word in flags:
            _once(options, word, True, usage)
        elif word in values or word in repeated:
            if not words:
                raise BadRequest(f"{word} needs a value; usage: {usage}")
            value = words.pop(0)
            if word in repeated:
                options[word].append(value)
            else:
                _once(options, word, value, usage)
        elif word.startswith("-"):
            raise BadRequest(f"unknown option {word!r}; usage: {usage}")
        else:
            raise BadRequest(f"unexpected word {word!r}; usage: {usage}")
    missing = [name for name in sorted(required) if name not in options]
    if missing:
        raise BadRequest(f"missing {', '.join(missing)}; usage: {usage}")
    return options


def _once(options, name, value, usage):
    if name in options:
        raise BadRequest(f"{name} given twice; usage: {usage}")
    options[name] = value


def destination_type(value):
    """C{"queue"} or C{"topic"} for imqcmd's C{-t} value (C{q}, C{t}, or the words).

    @raise BadRequest: anything else.
    """
    try:
        return _TYPES[value.lower()]
    except KeyError:
        raise BadRequest(f"destination type {value!r}: use q (queue) or t (topic)") \
            from None


def property_pairs(pairs, usage):
    """The C{-o name=value} options as a dict, in the order given.

    @raise BadRequest: a pair without C{=} or with an empty name, or a name given twice.
    """
    result = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise BadRequest(f"-o takes name=value, not {pair!r}; usage: {usage}")
        if name in result:
            raise BadRequest(f"property {name} given twice; usage: {usage}")
        result[name] = value.strip()
    return result
