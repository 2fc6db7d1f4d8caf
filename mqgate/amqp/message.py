"""
AMQP 1.0 messages as the broker keeps them: encoded bytes plus what routing needs.

Part 3 section 3.2 lays a message out as sections: header, delivery-annotations,
message-annotations, then the *bare message* (properties, application-properties, the
body, footer). The broker parses only as far as routing needs (design rule 2):

- the header (durable, priority, ttl, delivery-count),
- the properties (to, reply-to, message-id, correlation-id ...),
- the spans of the message-annotations and application-properties (decoded lazily),

and never decodes the body. On the way out only the header and the message annotations
are rewritten (delivery count, discard indication); the bare message bytes go out as they
came in, and a message seen for the first time with nothing to change goes out unchanged.
Delivery annotations are addressed to the next hop, which is us, so they are dropped.
"""

import struct

from mqgate.amqp import codec
from mqgate.amqp.codec import DecodeError
from mqgate.amqp.performatives import _composite
from mqgate.amqp.types import VBIN8, VBIN32, Described, Symbol, UInt
from mqgate.errors import ProtocolError

__all__ = ["EncodedMessage", "dead_copy", "declares_durable", "parse_message",
           "amended",
           "build_message", "finish_message", "encode_message", "Header",
           "Properties", "bare_sections", "check_sections"]

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78

_SYMBOLIC = {
    Symbol("amqp:header:list"): HEADER,
    Symbol("amqp:delivery-annotations:map"): DELIVERY_ANNOTATIONS,
    Symbol("amqp:message-annotations:map"): MESSAGE_ANNOTATIONS,
    Symbol("amqp:properties:list"): PROPERTIES,
    Symbol("amqp:application-properties:map"): APPLICATION_PROPERTIES,
    Symbol("amqp:data:binary"): DATA,
    Symbol("amqp:amqp-sequence:list"): AMQP_SEQUENCE,
    Symbol("amqp:amqp-value:*"): AMQP_VALUE,
    Symbol("amqp:footer:map"): FOOTER,
}

Header = _composite("Header", HEADER, "amqp:header:list", [
    ("durable", "boolean", False),
    ("priority", "ubyte", 4),
    ("ttl", "uint", None),
    ("first_acquirer", "boolean", False),
    ("delivery_count", "uint", 0),
], "Transport headers of a message (Part 3 section 3.2.1).")

Properties = _composite("Properties", PROPERTIES, "amqp:properties:list", [
    ("message_id", "*", None),
    ("user_id", "binary", None),
    ("to", "*", None),
    ("subject", "string", None),
    ("reply_to", "*", None),
    ("correlation_id", "*", None),
    ("content_type", "symbol", None),
    ("content_encoding", "symbol", None),
    ("absolute_expiry_time", "timestamp", None),
    ("creation_time", "timestamp", None),
    ("group_id", "string", None),
    ("group_sequence", "uint", None),
    ("reply_to_group_id", "string", None),
], "Immutable properties of the bare message (Part 3 section 3.2.4).")

_DEFAULT_HEADER = Header()
_DEFAULT_PROPERTIES = Properties()


class EncodedMessage:
    """A received message: its bytes and the parsed routing fields.

    @ivar data: the message bytes as they arrived.
    @ivar header: the parsed L{Header} (defaults when the message had none).
    @ivar properties: the parsed L{Properties} (defaults when absent).
    @ivar bare_start: offset of the bare message in C{data}.
    @ivar annotations: C{(start, end)} of the message-annotations section, or None.
    @ivar app_span: C{(start, end)} of the application-properties section, or None.
    @ivar pristine: True when C{data} can be forwarded as is for a first delivery
        (no delivery annotations to strip).
    """

    __slots__ = ("data", "header", "properties", "bare_start", "annotations", "app_span",
                 "pristine", "_app_properties")

    def __init__(self, data, header, properties, bare_start, annotations, app_span, pristine):
        self.data = data
        self.header = header
        self.properties = properties
        self.bare_start = bare_start
        self.annotations = annotations
        self.app_span = app_span
        self.pristine = pristine
        self._app_properties = None

    def __len__(self):
        return len(self.data)

    @property
    def has_header(self):
        """Whether the message came with a header section (L{header} is the default
        one otherwise)."""
        return self.header is not _DEFAULT_HEADER

    @property
    def application_properties(self):
        """The application-properties map, decoded on first use (for selectors, STOMP)."""
        if self._app_properties is None:
            if self.app_span is None:
                self._app_properties = {}
            else:
                self._app_properties = _section_map(self.data, self.app_span[0])
        return self._app_properties

    @property
    def message_annotations(self):
        """The message-annotations map, decoded on demand."""
        if self.annotations is None:
            return {}
        return _section_map(self.data, self.annotations[0])

    def body_sections(self):
        """Decode and return the body sections as C{[(code, value), ...]} (STOMP mapping)."""
        sections = []
        # The sections are in order, so the body starts after the application
        # properties when there are some: the properties are not decoded again.
        pos = self.bare_start if self.app_span is None else self.app_span[1]
        data = self.data
        while pos < len(data):
            code, value_start = _section_code(data, pos)
            value, pos = codec.decode(data, value_start)
            if code in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
                sections.append((code, value))
        return sections

    def data_body(self, limit):
        """C{(prefix, size)}: the first C{limit} bytes of a body made of data sections
        and its whole length, read straight from the encoded bytes (only the prefix is
        copied); C{None} when the body has a section of another kind (a value, a
        sequence, a footer): then L{body_sections} says what it holds.

        @raise DecodeError: a data section runs past the end of the message.
        """
        data = self.data
        end = len(data)
        pos = self.bare_start if self.app_span is None else self.app_span[1]
        spans = []
        size = 0
        while pos < end:
            code, value_start = _section_code(data, pos)
            if code < DATA:
                pos = codec.skip(data, value_start)   # properties, when not skipped yet
                continue
            if code != DATA or value_start >= end:
                return None
            constructor = data[value_start]
            if constructor == VBIN8 and value_start + 2 <= end:
                start = value_start + 2
                pos = start + data[value_start + 1]
            elif constructor == VBIN32 and value_start + 5 <= end:
                start = value_start + 5
                pos = start + int.from_bytes(data[value_start + 1:start], "big")
            else:
                return None
            if pos > end:
                raise DecodeError("data section runs past the end of the message", start)
            if size < limit:
                spans.append((start, min(pos, start + limit - size)))
            size += pos - start
        prefix = b"".join(data[a:b] for a, b in spans) if len(spans) != 1 else \
            bytes(data[spans[0][0]:spans[0][1]])
        return prefix, size

    def for_delivery(self, delivery_count=0, annotations=None):
        """The bytes to send to a consumer, as a list of chunks.

        @param delivery_count: prior failed delivery attempts, written into the header.
        @param annotations: extra message annotations to add (e.g. the discard
            indication of S9.2), or None.
        """
        if (self.pristine and annotations is None
                and delivery_count == self.header.delivery_count):
            return [self.data]
        header = self.header
        if delivery_count != header.delivery_count:
            header = Header(header.durable, header.priority, header.ttl,
                            header.first_acquirer, UInt(delivery_count))
        out = bytearray()
        if header != _DEFAULT_HEADER or self.header is not _DEFAULT_HEADER:
            header.encode(out)
        data = memoryview(self.data)
        if annotations:
            _annotations_with(out, self.data, self.annotations, annotations)
        elif self.annotations is not None:
            out += data[self.annotations[0]:self.annotations[1]]
        return [bytes(out), data[self.bare_start:]]


def _annotations_with(out, data, span, extra):
    """Append to C{out} a message-annotations section: the one at C{span} of C{data}
    (or none) with the entries of C{extra} added, replacing entries of the same keys.

    The existing entries are spliced in as bytes, stepped over (L{codec.skip}) and
    never decoded: they came from a client and may hold what we could not encode again
    (an array of described values, say), and a redelivery should not cost a decode.
    Only the map's size and count are written anew. Annotations that are not a
    well-formed map were never readable (L{EncodedMessage.message_annotations} shows
    them as none), so they give way to a map of C{extra} alone.
    """
    added = bytearray()
    for key, value in extra.items():
        codec.encode_value(added, key)
        codec.encode_value(added, value)
    kept = _kept_entries(data, span, extra) if span is not None else None
    if kept is None:
        kept, count = (), 0
    else:
        kept, count = kept
    size = sum(len(chunk) for chunk in kept) + len(added)
    count += 2 * len(extra)
    out += b"\x00\x53\x72"
    if size + 1 <= 255 and count <= 255:
        out += bytes((_MAP8, size + 1, count))
    else:
        out.append(_MAP32)
        out += _U32_PAIR.pack(size + 4, count)
    for chunk in kept:
        out += chunk
    out += added


_MAP8, _MAP32 = 0xC1, 0xD1
_SYM8, _SYM32 = 0xA3, 0xB3
_U32_PAIR = struct.Struct(">II")


def _kept_entries(data, span, extra):
    """C{(chunks, count)}: the entries of the annotations map at C{span} whose keys are
    not in C{extra}, as memoryview runs, and how many keys and values they hold; None
    when the section's value is not a well-formed map."""
    start, end = span
    try:
        _code, pos = _section_code(data, start)
        constructor = data[pos]
        if constructor == _MAP8:
            count, pos = data[pos + 2], pos + 3
        elif constructor == _MAP32:
            count, pos = _U32_PAIR.unpack_from(data, pos + 1)[1], pos + 9
        else:
            return None
        if count % 2 or count > end - pos:
            return None
        view = memoryview(data)
        keys = _encoded_keys(extra)
        chunks = []
        run = pos        # start of the run of kept entries
        kept = count
        for _ in range(count // 2):
            key_end = codec.skip(data, pos)
            entry_end = codec.skip(data, key_end)
            if entry_end > end:
                return None
            if _key_in(data, pos, key_end, keys):
                if run < pos:
                    chunks.append(view[run:pos])
                run = entry_end
                kept -= 2
            pos = entry_end
        if pos != end:
            return None
        if run < end:
            chunks.append(view[run:end])
        return chunks, kept
    except (DecodeError, IndexError, struct.error):
        return None


def _key_in(data, pos, key_end, keys):
    """Whether the encoded key at C{pos} is one of C{keys} (see L{_encoded_keys}).

    Annotation keys are symbols or ulongs (Part 3 section 3.2.3); a symbol may come as
    sym8 or sym32, so its text is compared. Nothing is decoded: a hostile key may be a
    huge value, and this runs for every redelivery."""
    symbols, others = keys
    constructor = data[pos]
    if constructor == _SYM8:
        return bytes(data[pos + 2:key_end]) in symbols
    if constructor == _SYM32:
        return bytes(data[pos + 5:key_end]) in symbols
    # Other keys (ulongs) are compared as we would encode them.
    return bool(others) and bytes(data[pos:key_end]) in others


def _encoded_keys(extra):
    """C{(symbol texts, other keys encoded)} of C{extra}'s keys, for L{_key_in}."""
    symbols, others = set(), set()
    for key in extra:
        if isinstance(key, Symbol):
            symbols.add(key.encode("ascii"))
        else:
            others.add(codec.encode(key))
    return symbols, others


def _section_code(data, pos):
    """Return (section code, offset of the section's value) for the section at C{pos}."""
    if data[pos] != 0x00:
        raise DecodeError("message section is not a described type", pos)
    if len(data) > pos + 2 and data[pos + 1] == 0x53:   # smallulong: the usual form
        code = data[pos + 2]
        if code not in _KNOWN_SECTIONS:
            raise DecodeError(f"unknown message section {code:#x}", pos)
        return code, pos + 3
    descriptor, value_start = codec.decode(data, pos + 1)
    if not isinstance(descriptor, (int, Symbol)):
        raise DecodeError("message section descriptor is not a ulong or symbol", pos)
    if isinstance(descriptor, Symbol):
        descriptor = _SYMBOLIC.get(descriptor)
    if descriptor not in _KNOWN_SECTIONS:
        raise DecodeError(f"unknown message section {descriptor!r}", pos)
    return descriptor, value_start


_KNOWN_SECTIONS = frozenset(range(HEADER, FOOTER + 1))

#: Sections a bare message may have. Clients send a handful (properties, application
#: properties, one body section, perhaps a footer); a message of thousands of empty
#: amqp-sequence sections would cost a step per section wherever it is read.
MAX_SECTIONS = 1024


def _section_value(data, pos):
    _code, value_start = _section_code(data, pos)
    return codec.decode(data, value_start)[0]


def _section_map(data, pos):
    """The map of the section at C{pos}; empty when it is not a well-formed map.

    These sections are only walked (L{codec.skip}) when the message arrives, so their
    contents may still be bad (a string that is not UTF-8, say). The message goes on
    as it came; what the broker reads of it, a selector or a STOMP header, sees nothing
    there rather than failing wherever it is read.
    """
    try:
        value = _section_value(data, pos)
    except DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def declares_durable(data):
    """Whether a message's first bytes carry a header with C{durable=true}.

    Read from the first transfer frame, before the rest of a large message arrives
    (S9.5 tells a guaranteed message from a direct one as frames arrive). Anything this
    cannot read at once (no header, an unusual encoding) counts as not durable; the
    full parse later is the one that matters for routing.
    """
    try:
        if len(data) < 4 or data[0] != 0x00:
            return False
        code, pos = _section_code(data, 0)
        if code != HEADER:
            return False
        constructor = data[pos]
        if constructor == 0x45:          # list0: every field at its default (false)
            return False
        if constructor == 0xC0:          # list8: size, count, then the fields
            count, first = data[pos + 2], pos + 3
        elif constructor == 0xD0:        # list32
            count, first = int.from_bytes(data[pos + 5:pos + 9], "big"), pos + 9
        else:
            return False
        if count == 0:
            return False
        marker = data[first]
        if marker == 0x41:               # true
            return True
        if marker == 0x56:               # boolean with a byte
            return data[first + 1] != 0
        return False
    except (IndexError, DecodeError):
        return False


def parse_message(data):
    """Parse the routing fields of an encoded message.

    @param data: the message bytes (a transfer's payload, all frames joined).
    @raise DecodeError: the sections before the body are malformed, or out of order.
    """
    header = _DEFAULT_HEADER
    properties = _DEFAULT_PROPERTIES
    annotations = app_span = None
    pristine = True
    bare_start = None
    pos = 0
    n = len(data)
    last = 0
    while pos < n:
        code, value_start = _section_code(data, pos)
        if code < last or (code == last and code < DATA):
            raise DecodeError("message sections out of order or repeated", pos)
        last = code
        if code == HEADER:
            value, end = codec.decode(data, value_start)
            header = Header.from_fields(value)
        elif code == DELIVERY_ANNOTATIONS:
            end = codec.skip(data, value_start)
            pristine = False
        elif code == MESSAGE_ANNOTATIONS:
            end = codec.skip(data, value_start)
            annotations = (pos, end)
        else:
            if bare_start is None:
                bare_start = pos
            if code == PROPERTIES:
                value, end = codec.decode(data, value_start)
                properties = Properties.from_fields(value)
            elif code == APPLICATION_PROPERTIES:
                end = codec.skip(data, value_start)
                app_span = (pos, end)
            else:
                break  # the body and footer: never looked at
        pos = end
    if bare_start is None:
        bare_start = n
    return EncodedMessage(data, header, properties, bare_start, annotations, app_span, pristine)


def bare_sections(message):
    """The sections of the bare message, as C{[(code, value_start, end), ...]}, their
    framing checked (see L{check_sections}).

    @param message: an L{EncodedMessage}.
    @raise DecodeError, ProtocolError: as L{check_sections}.
    """
    sections = []
    _walk_sections(message.data, message.bare_start, 0, sections)
    return sections


def check_sections(message):
    """Check the framing of everything L{parse_message} left unread: the body and the
    footer.

    Each section must be a known described type in the order Part 3 section 3.2 gives
    (data sections, or amqp-sequence sections, or one amqp-value; then a footer), its
    value whole, and nothing may follow the last one. The values themselves are only
    stepped over (L{codec.skip}: a data section costs a length read), and the walk
    starts after the sections L{parse_message} read already, so this is cheap enough
    for every message on arrival; a message that passes can be walked section by
    section later without surprises.

    @param message: an L{EncodedMessage}.
    @raise DecodeError: a section is truncated, unknown, out of order or followed by
        bytes that are not a section.
    @raise ProtocolError: amqp:resource-limit-exceeded, the bare message has more than
        L{MAX_SECTIONS} sections.
    """
    if message.app_span is not None:
        _walk_sections(message.data, message.app_span[1], APPLICATION_PROPERTIES, None)
    else:
        _walk_sections(message.data, message.bare_start, 0, None)


def _walk_sections(data, pos, last, sections):
    # Step over the sections from C{pos} (the one before it had code C{last}),
    # appending (code, value_start, end) to C{sections} unless it is None.
    n = len(data)
    body = None
    count = 0
    while pos < n:
        count += 1
        if count > MAX_SECTIONS:
            raise ProtocolError(f"a message may have at most {MAX_SECTIONS} sections",
                                "amqp:resource-limit-exceeded")
        code, value_start = _section_code(data, pos)
        if code < PROPERTIES or code < last or (
                code == last and code not in (DATA, AMQP_SEQUENCE)):
            raise DecodeError("message sections out of order or repeated", pos)
        if code in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
            # Part 3 section 3.2: data sections, or sequence sections, or one value.
            if body is not None and (code != body or code == AMQP_VALUE):
                raise DecodeError("message body mixes section kinds, or has more than "
                                  "one amqp-value", pos)
            body = code
        end = codec.skip(data, value_start)
        if sections is not None:
            sections.append((code, value_start, end))
        last = code
        pos = end


def build_message(body=None, *, header=None, message_annotations=None, properties=None,
                  application_properties=None, body_type=None):
    """Encode a message and return it as an L{EncodedMessage}, spans already known.

    Used where the broker makes a message itself (the STOMP mapping): nothing needs
    parsing back.

    @param body: bytes become one data section; anything else an amqp-value, unless
        C{body_type} names the section code to use.
    """
    out = bytearray()
    if header is not None:
        header.encode(out)
    annotations = None
    if message_annotations:
        start = len(out)
        out += b"\x00\x53\x72"
        codec.encode_value(out, message_annotations)
        annotations = (start, len(out))
    bare_start = len(out)
    if properties is not None:
        properties.encode(out)
    return finish_message(out, bare_start, annotations, header, properties,
                          application_properties, body, body_type)


# A data section's descriptor and binary constructor (vbin8, vbin32), as
# codec.encode_value writes them.
_DATA_HEAD8 = bytes((0x00, 0x53, DATA, 0xa0))
_DATA_HEAD32 = bytes((0x00, 0x53, DATA, 0xb0))


def finish_message(out, bare_start, annotations, header, properties,
                   application_properties=None, body=None, body_type=None):
    """The rest of L{build_message}: C{out} holds the header, annotations and properties
    sections already (encoded by the caller, who may have kept them from an earlier
    message: a STOMP connection's SENDs often share them); append the application
    properties and the body, and return the L{EncodedMessage}."""
    app_span = None
    if application_properties:
        start = len(out)
        out += b"\x00\x53\x74"
        codec.encode_value(out, application_properties)
        app_span = (start, len(out))
    if body_type is None:
        body_type = DATA if isinstance(body, (bytes, bytearray, memoryview)) else AMQP_VALUE
    if type(body) is bytes and body_type == DATA:
        # The common case (every STOMP SEND): the data section's head written in place
        # and the message's bytes made in one join, the body copied once.
        size = len(body)
        head = (_DATA_HEAD8 + bytes((size,)) if size < 256
                else _DATA_HEAD32 + size.to_bytes(4, "big"))
        data = b"".join((out, head, body))
    else:
        if body is not None or body_type == AMQP_VALUE:
            codec.encode_value(out, Described(body_type, body))
        data = bytes(out)
    message = EncodedMessage(data, header or _DEFAULT_HEADER,
                             properties or _DEFAULT_PROPERTIES, bare_start, annotations,
                             app_span, True)
    if application_properties:
        message._app_properties = dict(application_properties)
    return message


def encode_message(body=None, **sections):
    """The bytes of a message (tools and tests); see L{build_message} for the arguments."""
    return build_message(body, **sections).data


#: An empty data section: the body of a dead message kept without its body (S2.4).
_EMPTY_BODY = b"\x00\x53\x75\xa0\x00"


def amended(message, to=None, header=False):
    """C{message} with what a peer insists on, as a new L{EncodedMessage}: its
    C{properties.to} set to C{to} (when given) and a header section (when C{header}
    and it had none).

    For a peer that needs both on every message it receives (the MQ Light client,
    L{mqgate.glue.mqlight_delivery}). Only the properties section is written anew (or
    added, first in the bare message, when there was none) and the header added;
    every other section keeps its bytes.
    """
    data = message.data
    start = end = message.bare_start
    out = bytearray()
    if header and not message.has_header:
        Header().encode(out)
    out += data[:start]
    if to is not None:
        if start < len(data):
            code, value_start = _section_code(data, start)
            if code == PROPERTIES:
                end = codec.skip(data, value_start)
        props = message.properties
        Properties(*[to if name == "to" else getattr(props, name)
                     for name, *_ in Properties.FIELDS]).encode(out)
    out += data[end:]
    return parse_message(bytes(out))


def dead_copy(message, annotations, keep_body=True):
    """The bytes of a dead message's copy for the dead message queue (S2.4).

    C{message} (an L{EncodedMessage}) with the message annotations C{annotations}
    added (spliced in as L{EncodedMessage.for_delivery} does, the others kept as they
    came), its header without a ttl (a dead message does not expire again), and its
    bare message as it was, or (C{keep_body} false) only its properties and
    application properties and an empty data section. Nothing of the body is decoded.
    """
    header = message.header
    out = bytearray()
    Header(header.durable, header.priority, None, header.first_acquirer,
           header.delivery_count).encode(out)
    data = message.data
    _annotations_with(out, data, message.annotations, annotations)
    if keep_body:
        out += memoryview(data)[message.bare_start:]
        return bytes(out)
    pos = message.bare_start
    while pos < len(data):
        code, value_start = _section_code(data, pos)
        if code not in (PROPERTIES, APPLICATION_PROPERTIES):
            break
        end = codec.skip(data, value_start)
        out += memoryview(data)[pos:end]
        pos = end
    out += _EMPTY_BODY
    return bytes(out)
