"""
AMQP 1.0 composite types as field tables: performatives (Part 2 section 2.7), SASL frames
(Part 5 section 5.3.3), termini and delivery outcomes (Part 3 sections 3.4, 3.5), and the
error type (Part 2 section 2.8.14).

Each composite is declared once: its descriptor code and an ordered table of
``(field name, AMQP type, default)``. One generic writer and one generic reader serve them
all. A field left at ``None`` is written as null, and trailing nulls are dropped, as Part 1
section 1.3 allows for lists. On reading, a missing or null field takes its default.

Fields whose type is itself a composite (``error``, ``source``, ``target``, delivery states)
are turned into the matching class when read; anything not in the registry stays a
L{Described} value, which the layer above may reject.
"""

from mqgate.amqp import codec
from mqgate.amqp.codec import DecodeError
from mqgate.amqp.types import Described, Symbol

__all__ = [
    "Open", "Begin", "Attach", "Flow", "Transfer", "Disposition", "Detach", "End", "Close",
    "Error", "SaslMechanisms", "SaslInit", "SaslChallenge", "SaslResponse", "SaslOutcome",
    "Source", "Target", "Received", "Accepted", "Rejected", "Released", "Modified",
    "DeleteOnClose", "Coordinator", "Declare", "Discharge", "Declared",
    "TransactionalState", "from_described", "encode_composite",
]

_REGISTRY = {}

# Settlement modes, Part 2 section 2.8.2 and 2.8.3.
SND_UNSETTLED, SND_SETTLED, SND_MIXED = 0, 1, 2
RCV_FIRST, RCV_SECOND = 0, 1
# Link roles, Part 2 section 2.8.1: the boolean on attach/disposition.
SENDER, RECEIVER = False, True


class Composite:
    """Base of every table-declared composite. Subclasses are made by L{_composite}."""

    __slots__ = ()
    CODE = None
    NAME = None
    FIELDS = ()

    # __init__(field=default, ...) is generated per class (see _init_source): the
    # fields in table order, positional or by name.

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f[0]) == getattr(other, f[0]) for f in self.FIELDS)

    __hash__ = None

    def __repr__(self):
        parts = []
        for name, _type, default in self.FIELDS:
            value = getattr(self, name)
            if value != default:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def encode(self, out):
        """Append this composite, described by its code, to the bytearray C{out}."""
        values = [getattr(self, name) for name in self.__slots__]
        while values and values[-1] is None:
            values.pop()
        out += self._PREFIX
        count = len(values)
        if not count:
            out.append(0x45)
            return
        body = bytearray()
        for writer, value in zip(self._WRITERS, values):
            writer(body, value)
        if len(body) < 255 and count < 256:
            out.append(0xC0)
            out.append(len(body) + 1)
            out.append(count)
        else:
            out.append(0xD0)
            out += (len(body) + 4).to_bytes(4, "big") + count.to_bytes(4, "big")
        out += body

    @classmethod
    def from_fields(cls, values):
        """Build from a decoded field list, applying defaults and converting composites.

        Replaced per class by generated code (see L{_reader_source}); this is its spec.
        """
        raise NotImplementedError


def _convert(value, name, owner):
    if isinstance(value, Described):
        try:
            return from_described(value)
        except DecodeError:
            raise
        except Exception:
            raise DecodeError(f"{owner.__name__}.{name} holds a malformed value") from None
    raise DecodeError(f"{owner.__name__}.{name} must be a described type")


# Field types whose values are composites (objects with .encode(out)).
_COMPOSITE_TYPES = {"error", "source", "target", "state", "outcome"}


def _write_composite(out, value):
    if value is None:
        out.append(0x40)
    elif isinstance(value, Composite):
        value.encode(out)
    else:
        codec.encode_value(out, value)


# Per AMQP type: the check a decoded value must pass. The codec returns plain ints for
# every integer type, so a range check is all a uint needs (docs/design.md: a wrong type in a
# peer's frame is a decode error, never a TypeError deep in the engine).
_CHECKS = {
    "boolean": "x is True or x is False",
    "ubyte": "x.__class__ is int and 0 <= x <= 0xFF",
    "ushort": "x.__class__ is int and 0 <= x <= 0xFFFF",
    "uint": "x.__class__ is int and 0 <= x <= 0xFFFFFFFF",
    "ulong": "x.__class__ is int and 0 <= x <= 0xFFFFFFFFFFFFFFFF",
    "timestamp": "isinstance(x, int) and not isinstance(x, bool)",
    "string": "isinstance(x, str) and not isinstance(x, Symbol)",
    "symbol": "isinstance(x, Symbol)",
    "binary": "x.__class__ is bytes",
    "map": "x.__class__ is dict",
    "list": "x.__class__ is list",
}


def _init_source(fields):
    """Python source of an C{__init__} taking the fields in table order, with defaults."""
    params = ", ".join(f"{name}=D[{i}]" for i, (name, _t, _d) in enumerate(fields))
    lines = [f"def __init__(self{', ' if params else ''}{params}):"]
    lines += [f"    self.{name} = {name}" for name, _t, _d in fields] or ["    pass"]
    return "\n".join(lines)


def _reader_source(fields):
    """Python source of a C{from_fields} specialised to one field table.

    Generated once per class at import: one straight-line block per field, no loop and
    no table lookups, because performatives are decoded for every frame on the hot path.
    """
    lines = ["def from_fields(cls, v):",
             "    if v.__class__ is not list:",
             "        raise DecodeError(cls.__name__ + ' must be described as a list')",
             "    n = len(v)",
             "    self = _new(cls)"]
    for i, (name, type_, _default) in enumerate(fields):
        lines.append(f"    x = v[{i}] if n > {i} else None")
        lines.append("    if x is None:")
        lines.append(f"        x = D[{i}]")
        if type_ in _COMPOSITE_TYPES:
            lines.append("    else:")
            lines.append(f"        x = _convert(x, {name!r}, cls)")
        elif type_ == "symbols":
            lines.append("    else:")
            lines.append(f"        x = _symbols(x, {name!r}, cls)")
        elif type_ in _CHECKS:
            lines.append(f"    elif not ({_CHECKS[type_]}):")
            lines.append(f"        _bad(cls, {name!r}, {type_!r}, x)")
        lines.append(f"    self.{name} = x")
    lines.append("    return self")
    return "\n".join(lines)


def _bad(cls, name, type_, value):
    raise DecodeError(f"{cls.__name__}.{name} must be a {type_}, "
                      f"not {type(value).__name__}")


def _symbols(value, name, cls):
    """symbol multiple="true": one symbol or an array of them (Part 1 section 1.3)."""
    if isinstance(value, Symbol):
        return (value,)
    if isinstance(value, list) and all(isinstance(x, Symbol) for x in value):
        return tuple(value)
    raise DecodeError(f"{cls.__name__}.{name} must be a symbol or an array of symbols")


def _composite(name, code, symbolic, fields, doc):
    """Declare a composite type from its field table."""
    names = tuple(f[0] for f in fields)
    writers = tuple(
        _write_composite if f[1] in _COMPOSITE_TYPES else codec.encode_as(f[1]) for f in fields)
    namespace = {"DecodeError": DecodeError, "Symbol": Symbol, "_convert": _convert,
                 "_symbols": _symbols, "_bad": _bad, "D": tuple(f[2] for f in fields)}
    exec(_reader_source(fields), namespace)  # noqa: S102 - our own generated source
    exec(_init_source(fields), namespace)  # noqa: S102
    cls = type(name, (Composite,), {
        "__slots__": names, "__doc__": doc, "CODE": code, "NAME": symbolic,
        "FIELDS": tuple(fields), "_WRITERS": writers,
        "_PREFIX": bytes((0x00, 0x53, code)), "__init__": namespace["__init__"],
    })
    namespace["_new"] = cls.__new__
    cls.from_fields = classmethod(namespace["from_fields"])
    _REGISTRY[code] = cls
    _REGISTRY[Symbol(symbolic)] = cls
    return cls


def from_described(value):
    """Turn a decoded L{Described} into its composite class, if we know it.

    @raise DecodeError: the descriptor is unknown or the value is not a list.
    """
    descriptor = value.descriptor
    # On the wire a descriptor may be any value; only a ulong or a symbol names a
    # type, and a list or map would not even be a key to look up.
    cls = _REGISTRY.get(descriptor) if isinstance(descriptor, (int, str)) else None
    if cls is None:
        raise DecodeError(f"unknown descriptor {value.descriptor!r}")
    return cls.from_fields(value.value)


def encode_composite(value):
    """Return the bytes of one composite."""
    out = bytearray()
    value.encode(out)
    return bytes(out)


U32 = 0xFFFFFFFF

# -- Part 2: transport ------------------------------------------------------------------------
Error = _composite("Error", 0x1D, "amqp:error:list", [
    ("condition", "symbol", None),
    ("description", "string", None),
    ("info", "map", None),
], "An error condition with a human description (Part 2 section 2.8.14).")

Open = _composite("Open", 0x10, "amqp:open:list", [
    ("container_id", "string", None),
    ("hostname", "string", None),
    ("max_frame_size", "uint", U32),
    ("channel_max", "ushort", 0xFFFF),
    ("idle_time_out", "uint", None),
    ("outgoing_locales", "symbols", None),
    ("incoming_locales", "symbols", None),
    ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None),
    ("properties", "map", None),
], "Negotiate connection parameters (section 2.7.1).")

Begin = _composite("Begin", 0x11, "amqp:begin:list", [
    ("remote_channel", "ushort", None),
    ("next_outgoing_id", "uint", None),
    ("incoming_window", "uint", None),
    ("outgoing_window", "uint", None),
    ("handle_max", "uint", U32),
    ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None),
    ("properties", "map", None),
], "Begin a session on a channel (section 2.7.2).")

Attach = _composite("Attach", 0x12, "amqp:attach:list", [
    ("name", "string", None),
    ("handle", "uint", None),
    ("role", "boolean", None),
    ("snd_settle_mode", "ubyte", SND_MIXED),
    ("rcv_settle_mode", "ubyte", RCV_FIRST),
    ("source", "source", None),
    ("target", "target", None),
    ("unsettled", "map", None),
    ("incomplete_unsettled", "boolean", False),
    ("initial_delivery_count", "uint", None),
    ("max_message_size", "ulong", None),
    ("offered_capabilities", "symbols", None),
    ("desired_capabilities", "symbols", None),
    ("properties", "map", None),
], "Attach a link to a session (section 2.7.3).")

Flow = _composite("Flow", 0x13, "amqp:flow:list", [
    ("next_incoming_id", "uint", None),
    ("incoming_window", "uint", None),
    ("next_outgoing_id", "uint", None),
    ("outgoing_window", "uint", None),
    ("handle", "uint", None),
    ("delivery_count", "uint", None),
    ("link_credit", "uint", None),
    ("available", "uint", None),
    ("drain", "boolean", False),
    ("echo", "boolean", False),
    ("properties", "map", None),
], "Update session and link flow state (section 2.7.4).")

Transfer = _composite("Transfer", 0x14, "amqp:transfer:list", [
    ("handle", "uint", None),
    ("delivery_id", "uint", None),
    ("delivery_tag", "binary", None),
    ("message_format", "uint", None),
    ("settled", "boolean", None),
    ("more", "boolean", False),
    ("rcv_settle_mode", "ubyte", None),
    ("state", "state", None),
    ("resume", "boolean", False),
    ("aborted", "boolean", False),
    ("batchable", "boolean", False),
], "Transfer a message, or a part of one (section 2.7.5).")

Disposition = _composite("Disposition", 0x15, "amqp:disposition:list", [
    ("role", "boolean", None),
    ("first", "uint", None),
    ("last", "uint", None),
    ("settled", "boolean", False),
    ("state", "state", None),
    ("batchable", "boolean", False),
], "Inform the peer of delivery state changes (section 2.7.6).")

Detach = _composite("Detach", 0x16, "amqp:detach:list", [
    ("handle", "uint", None),
    ("closed", "boolean", False),
    ("error", "error", None),
], "Detach a link (section 2.7.7).")

End = _composite("End", 0x17, "amqp:end:list", [
    ("error", "error", None),
], "End a session (section 2.7.8).")

Close = _composite("Close", 0x18, "amqp:close:list", [
    ("error", "error", None),
], "Close the connection (section 2.7.9).")

# -- Part 5: SASL -------------------------------------------------------------------------------
SaslMechanisms = _composite("SaslMechanisms", 0x40, "amqp:sasl-mechanisms:list", [
    ("sasl_server_mechanisms", "symbols", None),
], "The server's mechanisms (section 5.3.3.1).")

SaslInit = _composite("SaslInit", 0x41, "amqp:sasl-init:list", [
    ("mechanism", "symbol", None),
    ("initial_response", "binary", None),
    ("hostname", "string", None),
], "The client's chosen mechanism (section 5.3.3.2).")

SaslChallenge = _composite("SaslChallenge", 0x42, "amqp:sasl-challenge:list", [
    ("challenge", "binary", None),
], "A security challenge (section 5.3.3.3).")

SaslResponse = _composite("SaslResponse", 0x43, "amqp:sasl-response:list", [
    ("response", "binary", None),
], "A response to a challenge (section 5.3.3.4).")

SaslOutcome = _composite("SaslOutcome", 0x44, "amqp:sasl-outcome:list", [
    ("code", "ubyte", None),
    ("additional_data", "binary", None),
], "The result of the SASL exchange (section 5.3.3.5).")

# -- Part 3: messaging --------------------------------------------------------------------------
Received = _composite("Received", 0x23, "amqp:received:list", [
    ("section_number", "uint", None),
    ("section_offset", "ulong", None),
], "Partial receipt of a message (section 3.4.1).")

Accepted = _composite("Accepted", 0x24, "amqp:accepted:list", [],
                      "The message was processed (section 3.4.2).")

Rejected = _composite("Rejected", 0x25, "amqp:rejected:list", [
    ("error", "error", None),
], "The message is invalid and will not be processed (section 3.4.3).")

Released = _composite("Released", 0x26, "amqp:released:list", [],
                      "The message was not and will not be processed (section 3.4.4).")

Modified = _composite("Modified", 0x27, "amqp:modified:list", [
    ("delivery_failed", "boolean", None),
    ("undeliverable_here", "boolean", None),
    ("message_annotations", "map", None),
], "The message was modified but not processed (section 3.4.5).")

Source = _composite("Source", 0x28, "amqp:source:list", [
    ("address", "*", None),
    ("durable", "uint", 0),
    ("expiry_policy", "symbol", Symbol("session-end")),
    ("timeout", "uint", 0),
    ("dynamic", "boolean", False),
    ("dynamic_node_properties", "map", None),
    ("distribution_mode", "symbol", None),
    ("filter", "map", None),
    ("default_outcome", "outcome", None),
    ("outcomes", "symbols", None),
    ("capabilities", "symbols", None),
], "Where a link's messages come from (section 3.5.3).")

Target = _composite("Target", 0x29, "amqp:target:list", [
    ("address", "*", None),
    ("durable", "uint", 0),
    ("expiry_policy", "symbol", Symbol("session-end")),
    ("timeout", "uint", 0),
    ("dynamic", "boolean", False),
    ("dynamic_node_properties", "map", None),
    ("capabilities", "symbols", None),
], "Where a link's messages go (section 3.5.4).")

DeleteOnClose = _composite("DeleteOnClose", 0x2B, "amqp:delete-on-close:list", [],
                           "Lifetime policy of a dynamic node (section 3.5.10).")

# -- Part 4: transactions (section 4.5): the coordinator target, the control messages
# carried as amqp-value bodies on a link to it, and the two delivery states. -------------
Coordinator = _composite("Coordinator", 0x30, "amqp:coordinator:list", [
    ("capabilities", "symbols", None),
], "The target of a transaction controller link (Part 4 section 4.5.1).")

Declare = _composite("Declare", 0x31, "amqp:declare:list", [
    ("global_id", "*", None),
], "Ask the coordinator for a new transaction (section 4.5.2); a global-id asks for a "
   "distributed one.")

Discharge = _composite("Discharge", 0x32, "amqp:discharge:list", [
    ("txn_id", "binary", None),
    ("fail", "boolean", None),
], "End a transaction: commit, or roll back when fail is true (section 4.5.3).")

Declared = _composite("Declared", 0x33, "amqp:declared:list", [
    ("txn_id", "binary", None),
], "The outcome of a declare: the new transaction's id (section 4.5.4).")

TransactionalState = _composite("TransactionalState", 0x34, "amqp:transactional-state:list", [
    ("txn_id", "binary", None),
    ("outcome", "outcome", None),
], "A transfer or disposition that belongs to a transaction, with the outcome it will "
   "have if the transaction commits (section 4.5.5).")

# Frame body codes, for dispatch tables in the engine.
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
