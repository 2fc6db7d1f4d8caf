"""
STOMP frames to the broker's message form and back (design rule 2, S10.2).

The broker holds every message as AMQP 1.0 bytes; a STOMP SEND is converted here, at the
edge, and an AMQP message leaving on a STOMP subscription is converted back. The table
in docs/stomp-mapping.md is the contract; each row has a test.

    STOMP header          AMQP field
    body                  one data section (bytes, as sent)
    content-type          properties.content-type
    message-id (SEND)     properties.message-id
    correlation-id        properties.correlation-id
    reply-to              properties.reply-to
    destination           properties.to
    expires (epoch ms)    properties.absolute-expiry-time
    expiration (ms TTL)   header.ttl (RabbitMQ's spelling)
    priority (0-9)        header.priority
    persistent:true       header.durable
    subject               properties.subject
    anything else         application-properties (string values)

On the way out, the application properties become headers (values as text, booleans as
true/false), and a body that is not data sections is rendered with a content-type and a
``transformation`` header saying what was done (amqp-value string -> UTF-8 text, binary
-> bytes, anything else -> JSON).
"""

import io
import json
import struct
import uuid

from mqgate.amqp import codec
from mqgate.amqp import types as t
from mqgate.amqp.message import (
    AMQP_SEQUENCE, AMQP_VALUE, DATA, Header, Properties, bare_sections, finish_message,
)
from mqgate.amqp.types import Described, Symbol, Timestamp, UInt, UByte
from mqgate.errors import ProtocolError

__all__ = ["REDELIVERED", "RenderLimits", "UNMAPPED_HEADER", "frame_to_message",
           "message_to_headers", "send_to_message", "MappingError", "SectionCache"]

# Headers that steer the frame itself, never copied into the message.
_FRAME_HEADERS = frozenset((
    "destination", "receipt", "transaction", "content-length", "ack", "id",
    "subscription", "redelivered",
))
_MAPPED = frozenset((
    "content-type", "message-id", "correlation-id", "reply-to", "expires", "expiration",
    "priority", "persistent", "subject",
))


class MappingError(ProtocolError):
    """A SEND header cannot be carried over (a priority that is not 0-9, say)."""

    condition = "invalid header"


def _int_header(name, value, low, high):
    try:
        number = int(value)
    except ValueError:
        raise MappingError(f"header {name}:{value} is not a whole number") from None
    if not low <= number <= high:
        raise MappingError(f"header {name}:{value} is outside {low}..{high}")
    return number


def _content_type(value):
    """AMQP carries the content-type as a symbol, which is ASCII (Part 3 3.2.4)."""
    if value is None:
        return None
    if not value.isascii():
        raise MappingError(f"header content-type:{value} is not ASCII; AMQP cannot carry it")
    return Symbol(value)


def frame_to_message(destination, headers, body):
    """The AMQP message of a STOMP SEND.

    @param headers: the frame's headers, C{[(name, value), ...]}, first occurrence wins.
    @return: an L{EncodedMessage} (its bytes and routing fields).
    @raise MappingError: a mapped header has a value AMQP cannot take.
    """
    return _frame_to_message(destination, headers, body)[0]


def send_to_message(destination, headers, body, limits=None, cache=None):
    """The AMQP message of a STOMP SEND and, made in the same pass over its headers,
    the headers and body its MESSAGE frames carry: what L{message_to_headers} would
    read back from the AMQP form, without reading it back (a message from STOMP to
    STOMP is converted once, design rule 2).

    @param limits: the L{RenderLimits} of the rendering.
    @param cache: the connection's L{SectionCache}, or None.
    @return: C{(encoded, (headers, body))}; the body is a view of the message's bytes.
    @raise MappingError: as L{frame_to_message}.
    """
    encoded, app = _frame_to_message(destination, headers, body, cache)
    out = _Headers(limits or DEFAULT_RENDER_LIMITS)
    _mapped_headers(out, encoded.properties, encoded.header, 0, None, None)
    for key, value in app.items():   # strings all: no decoding, no stepping over
        if out.full:
            out.leave_out("application-properties")
            break
        if key and _carriable(key):
            out.add(key, value)
        else:
            out.leave_out(_part_name(key), _PROPERTY_COST)
    data = encoded.data
    # The data section is the message's last: its binary value ends the bytes.
    view = memoryview(data)[len(data) - len(body):] if body else b""
    return encoded, (out.finish(), view)


class SectionCache:
    """The encoded header and properties sections of one connection's recent SENDs.

    A producer's SENDs mostly differ only in their bodies and application properties:
    the same destination, persistence and priority, no message-id. Their header and
    properties sections are then the same bytes, encoded once and kept here (at most
    C{limit} kinds; a SEND with a message-id, unique by nature, is not kept).
    """

    __slots__ = ("limit", "_kept")

    def __init__(self, limit=64):
        self.limit = limit
        self._kept = {}

    def sections(self, key, make, *args):
        """C{(prefix bytes, bare_start, header, properties)} for C{key}, made by
        C{make(*args)} (which raises for values AMQP cannot take) when not kept."""
        kept = self._kept.get(key)
        if kept is None:
            kept = make(*args)
            if len(self._kept) >= self.limit:
                self._kept.clear()
            self._kept[key] = kept
        return kept


def _frame_to_message(destination, headers, body, cache=None):
    """L{frame_to_message}, and the application properties (C{app}) it was made from;
    with a L{SectionCache}, the header and properties sections come from it when it
    has them."""
    seen = {}
    app = {}
    mapped = [destination]   # the cache's key: what the two sections are made of
    for name, value in headers:
        if name in seen or name in _FRAME_HEADERS:
            continue
        seen[name] = value
        if name in _MAPPED:
            mapped.append(name)
            mapped.append(value)
        else:
            app[name] = value
    if cache is None or "message-id" in seen:
        prefix, bare_start, header, properties = _sections(destination, seen)
    else:
        # The same values in another order make another key, and the same sections.
        prefix, bare_start, header, properties = cache.sections(
            tuple(mapped), _sections, destination, seen)
    encoded = finish_message(bytearray(prefix), bare_start, None, header, properties,
                             app or None, bytes(body))
    return encoded, app


def _sections(destination, seen):
    """The encoded header and properties sections of a SEND whose headers (first of
    each) are C{seen}: C{(bytes, bare_start, header, properties)}."""
    get = seen.get
    durable = get("persistent", "").lower() == "true"
    priority = get("priority")
    ttl = get("expiration")
    header = None
    if durable or priority is not None or ttl is not None:
        header = Header(
            durable=durable,
            priority=UByte(_int_header("priority", priority, 0, 9)) if priority else 4,
            ttl=UInt(_int_header("expiration", ttl, 0, 0xFFFFFFFF)) if ttl else None)
    expires = get("expires")
    properties = Properties(
        message_id=get("message-id"), to=destination, subject=get("subject"),
        reply_to=get("reply-to"), correlation_id=get("correlation-id"),
        content_type=_content_type(get("content-type")),
        absolute_expiry_time=Timestamp(_int_header("expires", expires, 0, 2**62))
        if expires and expires != "0" else None)
    out = bytearray()
    if header is not None:
        header.encode(out)
    bare_start = len(out)
    properties.encode(out)
    return bytes(out), bare_start, header, properties


def _text(value):
    """Text of a simple AMQP value: C{true}/C{false}, decimal, hex for binary."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# -- AMQP to STOMP: a rendering that never raises (S10.4) --------------------------------
#
# The one place deciding what a message STOMP cannot fully carry becomes: it is
# delivered with the parts that cannot be mapped left out, and the header
# UNMAPPED_HEADER naming them (docs/stomp-mapping.md, "Parts a MESSAGE cannot carry").
# A part is left out when it is not a simple value (a described value, a list, a map or
# an array as an application property; a data section that is not binary), when its
# bytes do not decode (a string that is not UTF-8), when its text cannot travel in a
# STOMP header (a lone surrogate, a NUL), or when it is over the rendering limits.
# Everything is read straight from the message bytes, one value at a time, so what
# rendering allocates is bounded by those limits and by the message's own size, not by
# how many objects a hostile encoding could unfold into.

#: The header naming what a MESSAGE frame leaves out.
UNMAPPED_HEADER = "mqgate-unmapped"
# Longest UNMAPPED_HEADER value; the names past it are summed up as "...".
_UNMAPPED_MAX = 1024
# Longest property name quoted in UNMAPPED_HEADER.
_NAME_MAX = 64


class RenderLimits:
    """How much text a MESSAGE frame's mapped headers may take (S10.4).

    @ivar max_value: characters of one rendered header value (an application property
        or a mapped field); a longer one is left out.
    @ivar max_total: characters of all mapped headers together, names included; the
        properties past it are left out. Every property looked at costs at least
        L{_PROPERTY_COST} of it, so it also bounds the work of a huge property map.
    @ivar max_json_values: values a JSON body may hold (an amqp-value that is not a
        string or binary, amqp-sequence items); a body with more is left out. Turning a
        value into JSON takes microseconds: this bounds the time one message may hold
        the reactor.
    """

    __slots__ = ("max_value", "max_total", "max_json_values")

    def __init__(self, max_value=8192, max_total=65536, max_json_values=10000):
        self.max_value = max_value
        self.max_total = max_total
        self.max_json_values = max_json_values


DEFAULT_RENDER_LIMITS = RenderLimits()

# A JSON body may be this many times its AMQP section, plus _JSON_SLACK characters:
# enough for any value a client means (a described value or a UUID spells out longer
# than it encodes), not for an encoding built to unfold into far more text.
_JSON_FACTOR = 8
_JSON_SLACK = 64 * 1024
# Arrays are decoded whole (each element shares one constructor): only up to this size.
_JSON_ARRAY_MAX = 64 * 1024
_JSON_DEPTH = 32
# The least a property looked at costs of RenderLimits.max_total, mapped or not.
_PROPERTY_COST = 16

_COMPOUND = frozenset((t.LIST8, t.LIST32, t.MAP8, t.MAP32, t.ARRAY8, t.ARRAY32, t.LIST0,
                       t.DESCRIBED))
_TEXTUAL = frozenset((t.STR8, t.STR32, t.SYM8, t.SYM32))
_BINARY = frozenset((t.VBIN8, t.VBIN32))


class _Unmappable(Exception):
    """A part that cannot be carried; its name goes into UNMAPPED_HEADER."""


def _carriable(text):
    """Whether C{text} can be a STOMP header value: encodable as UTF-8 (no lone
    surrogate) and without NUL, which ends a frame for many clients."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _simple_text(value):
    """Header text of a simple value, or None when it has none (a described value,
    list, map, array, or text that cannot travel)."""
    if isinstance(value, (Described, list, dict, tuple)):
        return None
    if isinstance(value, uuid.UUID):
        return str(value)
    text = _text(value)
    return text if _carriable(text) else None


class _Headers:
    """Mapped headers as they are added, within L{RenderLimits}, and what was left out."""

    def __init__(self, limits):
        self.limits = limits
        self.items = []
        self.unmapped = []
        self.total = 0
        self.body = b""

    def add(self, name, value, part=None):
        """Add header C{name} with the simple value C{value}; C{part} names it in
        UNMAPPED_HEADER when it cannot be carried (by default, as the application
        property C{name})."""
        text = _simple_text(value)
        if text is None or len(text) > self.limits.max_value:
            self.leave_out(part or _part_name(name), _PROPERTY_COST)
            return
        cost = max(len(name) + len(text) + 2, _PROPERTY_COST)
        if self.total + cost > self.limits.max_total:
            # Charged all the same: a long run of large properties must end the walk.
            self.leave_out(part or _part_name(name), _PROPERTY_COST)
            return
        self.total += cost
        self.items.append((name, text))

    def leave_out(self, part, cost=0):
        self.unmapped.append(part)
        self.total += cost

    @property
    def full(self):
        return self.total >= self.limits.max_total

    def finish(self):
        if self.unmapped:
            self.items.append((UNMAPPED_HEADER, _unmapped_value(self.unmapped)))
        return self.items


def _unmapped_value(parts):
    kept, size = [], 0
    for part in parts:
        size += len(part) + 1
        if size > _UNMAPPED_MAX:
            kept.append("...")
            break
        kept.append(part)
    return ",".join(kept)


def _part_name(name):
    """How UNMAPPED_HEADER names application property C{name}."""
    if len(name) <= _NAME_MAX and "," not in name and _carriable(name):
        return f"application-properties.{name}"
    return "application-properties"


def _application_properties(encoded, headers):
    """Add one header per application property, read from the message bytes: a
    property that is not a simple value is stepped over, never decoded."""
    if encoded.app_span is None:
        return
    data = encoded.data
    start, end = encoded.app_span
    try:
        pos = codec.skip(data, start + 1)          # past the section's descriptor
        code = data[pos]
        if code in (t.MAP8, t.MAP32):
            width = 1 if code == t.MAP8 else 4
            count = int.from_bytes(data[pos + 1 + width:pos + 1 + 2 * width], "big")
            pos += 1 + 2 * width
        elif code == t.NULL:
            return
        else:
            raise _Unmappable()
        if count % 2:
            raise _Unmappable()
        for _ in range(count // 2):
            if pos >= end:
                raise _Unmappable()
            if headers.full:
                headers.leave_out("application-properties")   # the rest of them
                return
            pos = _one_property(data, pos, end, headers)
    except (_Unmappable, codec.DecodeError, IndexError):
        headers.leave_out("application-properties")


def _one_property(data, pos, end, headers):
    """Map the property at C{pos}; return the offset past it."""
    key = None
    if data[pos] in _TEXTUAL:
        try:
            key, value_pos = codec.decode(data, pos)
        except codec.DecodeError:
            pass   # a key that is not UTF-8
    if key is None:
        # The spec allows string keys only: a key we cannot name.
        headers.leave_out("application-properties", _PROPERTY_COST)
        value_end = codec.skip(data, codec.skip(data, pos))
    elif data[value_pos] in _COMPOUND:
        headers.leave_out(_part_name(key), _PROPERTY_COST)
        value_end = codec.skip(data, value_pos)
    else:
        try:
            value, value_end = codec.decode(data, value_pos)
        except codec.DecodeError:
            headers.leave_out(_part_name(key), _PROPERTY_COST)
            value_end = codec.skip(data, value_pos)
        else:
            if key in _FRAME_HEADERS:
                headers.total += _PROPERTY_COST   # it cannot pose as a broker header
            elif key and _carriable(key):
                headers.add(key, value)
            else:
                headers.leave_out(_part_name(key), _PROPERTY_COST)
    if value_end > end:
        raise _Unmappable()
    return value_end


def _body(encoded, headers):
    """Return C{(body_bytes, content_type or None, transformation or None)}; a body
    that cannot be rendered is left out (empty) and named in UNMAPPED_HEADER."""
    try:
        sections = [s for s in bare_sections(encoded) if s[0] in _BODY_CODES]
        if not sections:
            return b"", None, None
        kind = sections[0][0]
        if kind == DATA:
            # A view of the message's bytes: the body of one section is not copied
            # here, only once into the MESSAGE frame.
            data = memoryview(encoded.data)
            if len(sections) == 1:
                return _binary_of(data, sections[0]), None, None
            return b"".join(_binary_of(data, s) for s in sections), None, None
        if kind == AMQP_VALUE:
            return _value_body(encoded.data, sections[0], headers.limits)
        return _json_body(encoded.data, sections, "[", "]", headers.limits), \
            "application/json", "amqp-sequence-json"
    except (_Unmappable, codec.DecodeError, IndexError, RecursionError):
        headers.leave_out("body")
        return b"", None, None


_BODY_CODES = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE))


def _binary_of(data, section):
    """The bytes of a binary value, sliced from the message (no decoding)."""
    _code, start, end = section
    code = data[start]
    if code == t.VBIN8:
        return data[start + 2:end]
    if code == t.VBIN32:
        return data[start + 5:end]
    raise _Unmappable()   # a data section holding something other than binary


def _value_body(data, section, limits):
    _code, start, _end = section
    code = data[start]
    if code in _BINARY:
        return _binary_of(data, section), "application/octet-stream", "amqp-value-binary"
    if code in (t.STR8, t.STR32):
        text, _ = codec.decode(data, start)   # checks the UTF-8
        return text.encode("utf-8"), "text/plain; charset=utf-8", "amqp-value-string"
    return _json_body(data, [section], "", "", limits), "application/json", \
        "amqp-value-json"


class _Json:
    """JSON text written piece by piece into one buffer (a list of pieces would cost
    far more than the text itself), within a budget of characters and of values."""

    def __init__(self, budget, values):
        self.text = io.StringIO()
        self.left = budget
        self.values = values

    def count(self, values=1):
        self.values -= values
        if self.values < 0:
            raise _Unmappable()

    def write(self, text):
        self.left -= len(text)
        if self.left < 0:
            raise _Unmappable()
        self.text.write(text)


def _json_body(data, sections, opening, closing, limits):
    size = sum(end - start for _code, start, end in sections)
    out = _Json(_JSON_FACTOR * size + _JSON_SLACK, limits.max_json_values)
    out.write(opening)
    first = True
    for _code, start, end in sections:
        if opening:   # a sequence: the items of each list, in one array
            code = data[start]
            if code == t.LIST0:
                continue
            if code not in (t.LIST8, t.LIST32):
                raise _Unmappable()
            width = 1 if code == t.LIST8 else 4
            count = int.from_bytes(data[start + 1 + width:start + 1 + 2 * width], "big")
            pos = start + 1 + 2 * width
            for _ in range(count):
                if pos >= end:
                    raise _Unmappable()
                if not first:
                    out.write(",")
                first = False
                pos = _json_value(data, pos, out, 0)
            if pos != end:
                raise _Unmappable()
        else:
            _json_value(data, start, out, 0)
    out.write(closing)
    return out.text.getvalue().encode("utf-8")


def _json_value(data, pos, out, depth):
    """Write the value at C{pos} as JSON; return the offset past it."""
    if depth > _JSON_DEPTH:
        raise _Unmappable()
    out.count()
    code = data[pos]
    fast = _JSON_SCALARS.get(code)
    if fast is not None:
        # The common small values, read in place: most of a large body is these.
        text, end = fast(data, pos + 1)
        out.write(text)
        return end
    if code == t.DESCRIBED:
        descriptor, pos = _json_scalar_text(data, pos + 1)
        out.write('{"descriptor":' + descriptor + ',"value":')
        pos = _json_value(data, pos, out, depth + 1)
        out.write("}")
        return pos
    if code in (t.LIST8, t.LIST32, t.MAP8, t.MAP32):
        width = 1 if code in (t.LIST8, t.MAP8) else 4
        count = int.from_bytes(data[pos + 1 + width:pos + 1 + 2 * width], "big")
        end = codec.skip(data, pos)
        is_map = code in (t.MAP8, t.MAP32)
        if is_map and count % 2:
            raise _Unmappable()
        pos += 1 + 2 * width
        out.write("{" if is_map else "[")
        for index in range(count):
            if pos >= end:
                raise _Unmappable()
            if index and (not is_map or index % 2 == 0):
                out.write(",")
            if is_map and index % 2 == 0:
                key, pos = _json_scalar_text(data, pos)
                out.write(key + ":")
            else:
                pos = _json_value(data, pos, out, depth + 1)
        out.write("}" if is_map else "]")
        if pos != end:
            raise _Unmappable()
        return pos
    end = codec.skip(data, pos)
    if code in (t.ARRAY8, t.ARRAY32) and end - pos > _JSON_ARRAY_MAX:
        raise _Unmappable()
    value, end = codec.decode(data, pos)
    if code in (t.ARRAY8, t.ARRAY32):
        out.count(len(value))
    out.write(json.dumps(_json_ready(value)))
    return end


def _json_scalar_text(data, pos):
    """A map key or a descriptor as a JSON string, and the offset past it: JSON keys
    are strings, so a scalar is written as its text; anything else is not mapped (a
    compound key would have to be decoded whole)."""
    if data[pos] in _COMPOUND:
        raise _Unmappable()
    value, end = codec.decode(data, pos)
    return json.dumps(_text(value)), end


def _constant_json(text):
    return lambda data, pos: (text, pos)


def _int_json(fmt):
    unpack = struct.Struct(fmt).unpack_from
    width = struct.calcsize(fmt)

    def read(data, pos):
        if pos + width > len(data):
            raise _Unmappable()
        return str(unpack(data, pos)[0]), pos + width
    return read


# Constructor -> reader of the JSON text of a scalar that needs no decoding.
_JSON_SCALARS = {
    t.NULL: _constant_json("null"), t.TRUE: _constant_json("true"),
    t.FALSE: _constant_json("false"), t.UINT0: _constant_json("0"),
    t.ULONG0: _constant_json("0"),
    t.UBYTE: _int_json(">B"), t.SMALLUINT: _int_json(">B"), t.SMALLULONG: _int_json(">B"),
    t.BYTE: _int_json(">b"), t.SMALLINT: _int_json(">b"), t.SMALLLONG: _int_json(">b"),
    t.USHORT: _int_json(">H"), t.SHORT: _int_json(">h"), t.UINT: _int_json(">I"),
    t.INT: _int_json(">i"), t.ULONG: _int_json(">Q"), t.LONG: _int_json(">q"),
}


def _json_ready(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {_text(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, Described):
        return {"descriptor": _text(value.descriptor), "value": _json_ready(value.value)}
    if isinstance(value, (uuid.UUID, Symbol)):
        return str(value)
    return value


#: The header of a message delivered before (S2.9).
REDELIVERED = ("redelivered", "true")


def message_to_headers(encoded, delivery_count=0, limits=DEFAULT_RENDER_LIMITS):
    """The headers and body of a MESSAGE frame for an AMQP message. Never raises: what
    cannot be carried is left out and named in the L{UNMAPPED_HEADER} header.

    @param encoded: an L{EncodedMessage}.
    @param limits: the L{RenderLimits}.
    @return: C{(headers, body)} (the body may be a memoryview of the message's
        bytes); the glue adds destination, subscription, message-id
        and ack.
    """
    headers = _Headers(limits)
    try:
        _map_message(encoded, delivery_count, headers)
    except Exception:   # noqa: BLE001 - the last guard: never fail a delivery
        headers.items = []
        headers.unmapped = ["message"]
        return headers.finish(), b""
    return headers.finish(), headers.body


def _map_message(encoded, delivery_count, headers):
    body, content_type, transformation = _body(encoded, headers)
    headers.body = body
    _mapped_headers(headers, encoded.properties, encoded.header, delivery_count,
                    content_type, transformation)
    _application_properties(encoded, headers)


def _mapped_headers(headers, props, header, delivery_count, content_type,
                    transformation):
    """The headers mapped from the header and properties sections, in their order
    (the application properties follow them)."""
    content_type = props.content_type or content_type
    if content_type:
        headers.add("content-type", content_type, "properties.content-type")
    if transformation:
        headers.add("transformation", transformation, "transformation")
    for name, value, part in (
            ("amqp-message-id", props.message_id, "properties.message-id"),
            ("correlation-id", props.correlation_id, "properties.correlation-id"),
            ("reply-to", props.reply_to, "properties.reply-to"),
            ("subject", props.subject, "properties.subject")):
        if value is not None:
            headers.add(name, value, part)
    if props.absolute_expiry_time:
        headers.add("expires", int(props.absolute_expiry_time),
                    "properties.absolute-expiry-time")
    if header.priority != 4:
        headers.add("priority", int(header.priority), "header.priority")
    if header.durable:
        headers.items.append(("persistent", "true"))
    if delivery_count:
        headers.items.append(REDELIVERED)
