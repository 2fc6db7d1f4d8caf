"""The STOMP <-> AMQP mapping, one test per row of docs/stomp-mapping.md (S10.2).

Pure functions only: a SEND's headers go through L{frame_to_message} and are read back
with L{parse_message}; an AMQP message built with L{encode_message} goes through
L{message_to_headers}. Each row is tested in both directions where it has two, and the
rows that map one way only say so with a test of the direction that does nothing.
"""

import json
import uuid

import pytest

from mqgate.amqp.message import (
    AMQP_SEQUENCE, AMQP_VALUE, DATA, Header, Properties, encode_message, parse_message,
)
from mqgate.amqp.types import Described, Symbol, Timestamp, UByte, UInt, ULong
from mqgate.glue.stomp_mapping import MappingError, frame_to_message, message_to_headers


# -- helpers -----------------------------------------------------------------------------

def to_amqp(*headers, body=b"body", destination="/queue/q"):
    """The parsed AMQP message of a SEND with these C{(name, value)} headers."""
    return parse_message(frame_to_message(destination, list(headers), body).data)


def to_stomp(body=b"body", delivery_count=0, **sections):
    """C{(headers as a list, body)} of the MESSAGE frame for an AMQP message."""
    encoded = parse_message(encode_message(body, **sections))
    return message_to_headers(encoded, delivery_count)


def first(headers, name):
    """The first value of header C{name}, or None (1.2: the first occurrence wins)."""
    return next((value for key, value in headers if key == name), None)


def names(headers):
    return [name for name, _value in headers]


def round_trip(*headers, body=b"body"):
    """SEND headers -> AMQP -> MESSAGE headers."""
    return message_to_headers(to_amqp(*headers, body=body))


# -- body --------------------------------------------------------------------------------

def test_body_stomp_to_amqp_is_one_data_section():
    """S10.2: a SEND body becomes one data section holding the same bytes, NULs too."""
    message = to_amqp(body=b"a\x00b\xff")
    assert message.body_sections() == [(DATA, b"a\x00b\xff")]


def test_body_amqp_to_stomp_data_sections_are_joined():
    """S10.2: the data sections of an AMQP message are the MESSAGE body, concatenated,
    with no content-type or transformation added."""
    data = (encode_message(b"ab") + encode_message(b"cd"))
    headers, body = message_to_headers(parse_message(data))
    assert body == b"abcd"
    assert "content-type" not in names(headers)
    assert "transformation" not in names(headers)


def test_body_round_trip_keeps_bytes():
    """S10.2: STOMP -> AMQP -> STOMP gives back the body byte for byte."""
    _headers, body = round_trip(body=bytes(range(256)))
    assert body == bytes(range(256))


def test_empty_body_both_ways():
    """S10.2: an empty SEND body is an empty data section, and a message without a body
    section is an empty MESSAGE body."""
    assert to_amqp(body=b"").body_sections() == [(DATA, b"")]
    headers, body = message_to_headers(parse_message(encode_message(
        None, properties=Properties(subject="x"), body_type=DATA)))
    assert body == b""
    assert "transformation" not in names(headers)


# -- properties --------------------------------------------------------------------------

def test_content_type_stomp_to_amqp():
    """S10.2: content-type becomes properties.content-type (a symbol)."""
    message = to_amqp(("content-type", "text/plain"))
    assert message.properties.content_type == "text/plain"
    assert isinstance(message.properties.content_type, Symbol)


def test_content_type_amqp_to_stomp():
    """S10.2: properties.content-type becomes the content-type header."""
    headers, _body = to_stomp(properties=Properties(content_type=Symbol("image/png")))
    assert first(headers, "content-type") == "image/png"


def test_non_ascii_content_type_is_a_mapping_error():
    """S10.4: a content-type AMQP cannot carry (a symbol is ASCII) is refused with a
    MappingError, the ERROR the glue sends, not another exception."""
    with pytest.raises(MappingError):
        to_amqp(("content-type", "téxt/plain"))


def test_message_id_stomp_to_amqp():
    """S10.2: a SEND's message-id becomes properties.message-id."""
    assert to_amqp(("message-id", "m-1")).properties.message_id == "m-1"


def test_message_id_amqp_to_stomp_is_amqp_message_id():
    """S10.2: properties.message-id comes out as amqp-message-id; message-id itself is
    the broker's delivery id, written by the engine."""
    headers, _body = to_stomp(properties=Properties(message_id="m-1"))
    assert first(headers, "amqp-message-id") == "m-1"
    assert "message-id" not in names(headers)


def test_message_id_non_string_amqp_to_stomp():
    """S10.2: a ulong, UUID or binary message-id is written as text (decimal, the UUID's
    usual form, hex)."""
    for value, text in ((ULong(7), "7"), (uuid.UUID(int=1), str(uuid.UUID(int=1))),
                        (b"\x01\xff", "01ff")):
        headers, _body = to_stomp(properties=Properties(message_id=value))
        assert first(headers, "amqp-message-id") == text


def test_correlation_id_stomp_to_amqp():
    """S10.2: correlation-id becomes properties.correlation-id."""
    assert to_amqp(("correlation-id", "c-1")).properties.correlation_id == "c-1"


def test_correlation_id_amqp_to_stomp():
    """S10.2: properties.correlation-id becomes the correlation-id header (binary as
    hex)."""
    headers, _body = to_stomp(properties=Properties(correlation_id="c-1"))
    assert first(headers, "correlation-id") == "c-1"
    headers, _body = to_stomp(properties=Properties(correlation_id=b"\xab"))
    assert first(headers, "correlation-id") == "ab"


def test_reply_to_stomp_to_amqp():
    """S10.2: reply-to becomes properties.reply-to, unchanged."""
    assert to_amqp(("reply-to", "/queue/replies")).properties.reply_to == "/queue/replies"


def test_reply_to_amqp_to_stomp():
    """S10.2: properties.reply-to becomes the reply-to header."""
    headers, _body = to_stomp(properties=Properties(reply_to="queue://replies"))
    assert first(headers, "reply-to") == "queue://replies"


def test_destination_stomp_to_amqp_is_to():
    """S10.2: the SEND destination becomes properties.to and no application property."""
    message = to_amqp(destination="/topic/prices")
    assert message.properties.to == "/topic/prices"
    assert message.application_properties == {}


def test_destination_amqp_to_stomp_is_not_from_to():
    """S10.2: properties.to is not turned into a header: the MESSAGE destination is the
    subscription's, written by the engine."""
    headers, _body = to_stomp(properties=Properties(to="queue://elsewhere"))
    assert "destination" not in names(headers)


def test_expires_stomp_to_amqp():
    """S10.2: expires (epoch ms) becomes properties.absolute-expiry-time; 0 is never."""
    message = to_amqp(("expires", "1700000000000"))
    assert message.properties.absolute_expiry_time == 1700000000000
    assert to_amqp(("expires", "0")).properties.absolute_expiry_time is None


def test_expires_amqp_to_stomp():
    """S10.2: properties.absolute-expiry-time becomes expires (epoch ms)."""
    headers, _body = to_stomp(properties=Properties(
        absolute_expiry_time=Timestamp(1700000000000)))
    assert first(headers, "expires") == "1700000000000"


def test_bad_expires_is_a_mapping_error():
    """S10.4: an expires that is not a whole number of ms >= 0 is refused."""
    for value in ("soon", "-1"):
        with pytest.raises(MappingError):
            to_amqp(("expires", value))


def test_expiration_stomp_to_amqp_is_ttl():
    """S10.2: expiration (RabbitMQ's ms TTL) becomes header.ttl."""
    assert to_amqp(("expiration", "5000")).header.ttl == 5000


def test_ttl_amqp_to_stomp_is_not_mapped():
    """S10.2: header.ttl is not written back as a header (documented as not mapped)."""
    headers, _body = to_stomp(header=Header(ttl=UInt(5000)))
    assert "expiration" not in names(headers)
    assert "ttl" not in names(headers)


def test_bad_expiration_is_a_mapping_error():
    """S10.4: an expiration outside 0..2^32-1 ms is refused."""
    with pytest.raises(MappingError):
        to_amqp(("expiration", str(2 ** 32)))


def test_priority_stomp_to_amqp():
    """S10.2: priority 0-9 becomes header.priority."""
    assert to_amqp(("priority", "9")).header.priority == 9
    assert to_amqp(("priority", "0")).header.priority == 0


def test_priority_amqp_to_stomp():
    """S10.2: header.priority becomes the priority header, except the default 4."""
    headers, _body = to_stomp(header=Header(priority=UByte(7)))
    assert first(headers, "priority") == "7"
    headers, _body = to_stomp(header=Header(durable=True))
    assert "priority" not in names(headers)


def test_bad_priority_is_a_mapping_error():
    """S10.4: a priority that is not 0-9 is refused with a MappingError."""
    for value in ("10", "-1", "high"):
        with pytest.raises(MappingError):
            to_amqp(("priority", value))


def test_persistent_stomp_to_amqp():
    """S10.2: persistent:true (any case) sets header.durable; anything else does not."""
    assert to_amqp(("persistent", "true")).header.durable is True
    assert to_amqp(("persistent", "TRUE")).header.durable is True
    assert not to_amqp(("persistent", "false")).header.durable


def test_persistent_amqp_to_stomp():
    """S10.2: header.durable becomes persistent:true; a non-durable message has none."""
    headers, _body = to_stomp(header=Header(durable=True))
    assert first(headers, "persistent") == "true"
    headers, _body = to_stomp(header=Header(durable=False, priority=UByte(5)))
    assert "persistent" not in names(headers)


def test_subject_both_ways():
    """S10.2: subject <-> properties.subject."""
    assert to_amqp(("subject", "greeting")).properties.subject == "greeting"
    headers, _body = to_stomp(properties=Properties(subject="greeting"))
    assert first(headers, "subject") == "greeting"


def test_mapped_fields_round_trip():
    """S10.2: every mapped SEND header survives STOMP -> AMQP -> STOMP (message-id as
    amqp-message-id)."""
    headers, _body = round_trip(
        ("content-type", "text/plain"), ("message-id", "m"), ("correlation-id", "c"),
        ("reply-to", "/queue/r"), ("expires", "1700000000000"), ("priority", "8"),
        ("persistent", "true"), ("subject", "s"))
    assert dict(headers) == {
        "content-type": "text/plain", "amqp-message-id": "m", "correlation-id": "c",
        "reply-to": "/queue/r", "expires": "1700000000000", "priority": "8",
        "persistent": "true", "subject": "s"}


# -- application properties --------------------------------------------------------------

def test_other_headers_stomp_to_amqp_are_application_properties():
    """S10.2: any other SEND header becomes a string application property."""
    message = to_amqp(("colour", "red"), ("count", "3"), ("x-empty", ""))
    assert message.application_properties == {"colour": "red", "count": "3",
                                               "x-empty": ""}


def test_application_properties_amqp_to_stomp_are_headers():
    """S10.2: application properties become headers, values as text: booleans
    true/false, numbers in decimal, binary as hex."""
    headers, _body = to_stomp(application_properties={
        "s": "text", "yes": True, "no": False, "n": 42, "f": 1.5, "bin": b"\x00\x10"})
    assert dict(headers) == {"s": "text", "yes": "true", "no": "false", "n": "42",
                             "f": "1.5", "bin": "0010"}


def test_application_properties_round_trip():
    """S10.2: custom SEND headers come back as the same headers after AMQP."""
    headers, _body = round_trip(("colour", "red"), ("x-trace", "a:b\nc"))
    assert ("colour", "red") in headers
    assert ("x-trace", "a:b\nc") in headers


def test_frame_headers_are_not_copied_into_the_message():
    """S10.2: headers that steer the frame (receipt, transaction, content-length, ack,
    id, subscription, redelivered, destination) are not application properties."""
    message = to_amqp(*[(name, "v") for name in (
        "receipt", "transaction", "content-length", "ack", "id", "subscription",
        "redelivered", "destination")])
    assert message.application_properties == {}


def test_frame_header_names_in_application_properties_are_dropped():
    """S10.2: an AMQP application property named like a frame header (subscription,
    destination, ack ...) is not written, so it cannot impersonate one."""
    headers, _body = to_stomp(application_properties={
        "subscription": "forged", "destination": "/queue/forged", "ack": "x",
        "kept": "yes"})
    assert dict(headers) == {"kept": "yes"}


def test_repeated_header_first_occurrence_wins():
    """S10.2 (STOMP 1.2 "Repeated Header Entries"): only the first of repeated headers
    is mapped, for mapped fields and application properties alike."""
    message = to_amqp(("priority", "2"), ("priority", "8"), ("colour", "red"),
                      ("colour", "blue"))
    assert message.header.priority == 2
    assert message.application_properties == {"colour": "red"}


# -- redelivery --------------------------------------------------------------------------

def test_delivery_count_amqp_to_stomp_is_redelivered():
    """S10.2: a message delivered before (delivery count > 0) carries redelivered:true;
    a first delivery has no redelivered header."""
    headers, _body = to_stomp(delivery_count=1)
    assert first(headers, "redelivered") == "true"
    headers, _body = to_stomp(delivery_count=0)
    assert "redelivered" not in names(headers)


def test_redelivered_stomp_to_amqp_is_not_mapped():
    """S10.2: a redelivered header on a SEND is dropped (it is the broker's to say)."""
    message = to_amqp(("redelivered", "true"))
    assert message.header.delivery_count == 0
    assert message.application_properties == {}


# -- transformations (AMQP bodies that are not data) -------------------------------------

def test_amqp_value_string_is_utf8_text():
    """S10.2: an amqp-value string becomes its UTF-8 bytes, content-type
    text/plain; charset=utf-8, transformation:amqp-value-string."""
    headers, body = to_stomp("héllo")
    assert body == "héllo".encode("utf-8")
    assert first(headers, "content-type") == "text/plain; charset=utf-8"
    assert first(headers, "transformation") == "amqp-value-string"


def test_amqp_value_string_keeps_the_message_content_type():
    """S10.2: the message's own content-type wins over the one the transformation
    implies."""
    headers, _body = to_stomp('{"a":1}', properties=Properties(
        content_type=Symbol("application/json")))
    assert first(headers, "content-type") == "application/json"
    assert first(headers, "transformation") == "amqp-value-string"


def test_amqp_value_binary_is_bytes():
    """S10.2: an amqp-value binary becomes the bytes, content-type
    application/octet-stream, transformation:amqp-value-binary."""
    headers, body = to_stomp(b"\x00\x01", body_type=AMQP_VALUE)
    assert body == b"\x00\x01"
    assert first(headers, "content-type") == "application/octet-stream"
    assert first(headers, "transformation") == "amqp-value-binary"


def test_amqp_value_other_is_json():
    """S10.2: any other amqp-value (map, list, number, described ...) becomes JSON,
    transformation:amqp-value-json; binary inside is hex."""
    value = {"a": [1, True, None], "b": b"\xff", "c": Described(Symbol("x"), 3)}
    headers, body = to_stomp(value)
    assert json.loads(body) == {"a": [1, True, None], "b": "ff",
                                "c": {"descriptor": "x", "value": 3}}
    assert first(headers, "content-type") == "application/json"
    assert first(headers, "transformation") == "amqp-value-json"


def test_amqp_sequence_is_one_json_array():
    """S10.2: amqp-sequence sections become one JSON array of all their items,
    transformation:amqp-sequence-json."""
    data = (encode_message([1, 2], body_type=AMQP_SEQUENCE)
            + encode_message(["x"], body_type=AMQP_SEQUENCE))
    headers, body = message_to_headers(parse_message(data))
    assert json.loads(body) == [1, 2, "x"]
    assert first(headers, "transformation") == "amqp-sequence-json"


# -- not mapped --------------------------------------------------------------------------

def test_unmapped_amqp_fields_give_no_headers():
    """S10.2: user-id, content-encoding, creation-time, the group fields and message
    annotations are not mapped to headers (documented as not mapped)."""
    headers, _body = to_stomp(
        properties=Properties(user_id=b"admin", content_encoding=Symbol("gzip"),
                              creation_time=Timestamp(1), group_id="g",
                              group_sequence=UInt(2), reply_to_group_id="rg"),
        message_annotations={Symbol("x-opt-jms-type"): "t"})
    assert headers == []


# -- parts a MESSAGE cannot carry: mqgate-unmapped ----------------------------------------

def unmapped(headers):
    return first(headers, "mqgate-unmapped")


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], Described(Symbol("x"), 1)],
                         ids=["map", "list", "described"])
def test_a_compound_property_is_left_out_and_named(value):
    """S10.4: a map, list or described value as an application property has no header
    text: it is left out and named; the simple properties beside it still arrive."""
    headers, body = to_stomp(application_properties={"bad": value, "good": 1})
    assert first(headers, "good") == "1" and first(headers, "bad") is None
    assert unmapped(headers) == "application-properties.bad"
    assert body == b"body"


def test_a_property_with_a_nul_is_left_out():
    """S10.4: a NUL would end the frame for many clients: that property is left out."""
    headers, _body = to_stomp(application_properties={"n": "a\x00b"})
    assert first(headers, "n") is None
    assert unmapped(headers) == "application-properties.n"


def test_a_property_key_that_is_not_a_string_is_left_out():
    """S10.4: a non-string key cannot name a header: the entry is the section's name."""
    headers, _body = to_stomp(application_properties={7: "x", "k": "v"})
    assert first(headers, "k") == "v"
    assert unmapped(headers) == "application-properties"


def test_a_described_message_id_is_left_out():
    """S10.4: a mapped field with a value that has no text is left out and named."""
    headers, _body = to_stomp(properties=Properties(message_id=Described(1, [1])))
    assert first(headers, "amqp-message-id") is None
    assert unmapped(headers) == "properties.message-id"


def test_a_json_body_over_its_budget_is_left_out():
    """S10.4: a body whose JSON would be far larger than the message is left out (an
    empty body) and named, rather than rendered at any cost."""
    # An array of 20,000 described smallulongs: 1 byte each, ~30 characters of JSON each.
    elements = b"\x00\x53\x01\x53" + b"\x07" * 20000
    array = b"\xf0" + (4 + len(elements)).to_bytes(4, "big") + (20000).to_bytes(4, "big")
    headers, body = message_to_headers(parse_message(b"\x00\x53\x77" + array + elements))
    assert body == b"" and unmapped(headers) == "body"
    assert first(headers, "transformation") is None


def test_a_message_that_maps_completely_has_no_unmapped_header():
    """S10.2: mqgate-unmapped appears only when something was left out."""
    headers, _body = to_stomp(application_properties={"a": 1, "b": b"\x01"})
    assert "mqgate-unmapped" not in names(headers)


def test_a_property_key_that_is_not_utf8_is_left_out_alone():
    """S10.4: a key whose bytes do not decode is left out (named as the section); the
    properties after it are still read."""
    items = b"\xa1\x02\xc3\x28\xa1\x01v" + b"\xa1\x01k\xa1\x01w"
    section = b"\x00\x53\x74\xc1" + bytes([len(items) + 1, 4]) + items
    headers, _body = message_to_headers(parse_message(section + b"\x00\x53\x75\xa0\x00"))
    assert first(headers, "k") == "w"
    assert unmapped(headers) == "application-properties"


def test_json_map_keys_are_text_and_compound_keys_are_not_mapped():
    """S10.2, S10.4: JSON keys are the text of scalar keys (NULs and surrogates escaped
    by JSON); a map with a list as a key leaves the body out rather than decode it."""
    headers, body = to_stomp({"a\x00b": 1, 7: "x"})
    assert json.loads(body) == {"a\x00b": 1, "7": "x"}
    items = b"\xc0\x03\x02\x54\x01\x54\x02" + b"\x54\x01"          # {[1, 2]: 1}
    value = b"\xc1" + bytes([len(items) + 1, 2]) + items
    headers, body = message_to_headers(parse_message(b"\x00\x53\x77" + value))
    assert (body, unmapped(headers)) == (b"", "body")


def test_a_surrogate_char_or_bad_utf8_property_is_left_out():
    """S10.4: a char that is a lone surrogate cannot be written as UTF-8, a string that
    is not UTF-8 does not decode: each is left out and named, the others arrive."""
    items = (b"\xa1\x01c\x73\x00\x00\xdb\xff" + b"\xa1\x01u\xa1\x02\xc3\x28"
             + b"\xa1\x01k\xa1\x01v")
    section = b"\x00\x53\x74\xc1" + bytes([len(items) + 1, 6]) + items
    headers, _body = message_to_headers(parse_message(section))
    assert first(headers, "k") == "v"
    assert unmapped(headers) == "application-properties.c,application-properties.u"


def test_a_property_over_max_value_size_is_left_out():
    """S10.4: a property whose text is longer than the per-value limit is left out."""
    from mqgate.glue.stomp_mapping import RenderLimits
    encoded = parse_message(encode_message(b"", application_properties={
        "long": "x" * 100, "short": "y"}))
    headers, _body = message_to_headers(encoded, limits=RenderLimits(max_value=99))
    assert (first(headers, "long"), first(headers, "short")) == (None, "y")
    assert unmapped(headers) == "application-properties.long"


# -- a SEND's rendering, made with its message -----------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from mqgate.glue.stomp_mapping import (  # noqa: E402
    RenderLimits, SectionCache, send_to_message)

_NAMES = st.sampled_from([
    "content-type", "message-id", "correlation-id", "reply-to", "expires", "expiration",
    "priority", "persistent", "subject", "receipt", "destination", "redelivered", "app",
    "x-y", "", "a:b", "type"])
_VALUES = st.one_of(
    st.sampled_from(["", "0", "4", "7", "00", "true", "TRUE", "false", "1700000000000",
                     "text/plain", "é", "a\x00b", "x" * 120]),
    st.text(max_size=12))


# One cache for every example, as a connection's for all its SENDs: what it gives back
# for one SEND must be what that SEND would have made itself.
_SHARED = SectionCache(limit=8)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(headers=st.lists(st.tuples(st.one_of(_NAMES, st.text(max_size=6)), _VALUES),
                        max_size=12),
       body=st.binary(max_size=300), small=st.booleans())
def test_a_sends_rendering_is_what_its_message_renders_to(headers, body, small):
    """send_to_message renders a SEND's MESSAGE headers and body in the same pass that
    makes its AMQP message (the same message with a connection's SectionCache as
    without): exactly what message_to_headers reads back from that
    message, and from its bytes as the store gives them back, within the same limits
    (leaving out what they leave out)."""
    limits = RenderLimits(max_value=100, max_total=400) if small else RenderLimits()
    try:
        expected = message_to_headers(frame_to_message("/queue/q", headers, body),
                                      limits=limits)
    except MappingError:
        with pytest.raises(MappingError):
            send_to_message("/queue/q", headers, body, limits)
        return
    encoded, (rendered, view) = send_to_message("/queue/q", headers, body, limits,
                                                _SHARED)
    plain = frame_to_message("/queue/q", headers, body)
    assert (encoded.data, encoded.bare_start, encoded.app_span) == \
        (plain.data, plain.bare_start, plain.app_span)
    assert (encoded.header, encoded.properties) == (plain.header, plain.properties)
    assert rendered == expected[0]
    assert bytes(view) == bytes(expected[1]) == body
    stored_headers, stored_body = message_to_headers(parse_message(encoded.data),
                                                     limits=limits)
    assert stored_headers == rendered and bytes(stored_body) == body


def test_a_priority_is_rendered_as_a_number_from_stomp_to_stomp():
    """A SEND's priority reaches a STOMP subscriber as the number it was (the message as
    made, not read back, holds it as an AMQP ubyte: it once came out as UByte(7))."""
    headers, _body = message_to_headers(frame_to_message("/queue/q", [("priority", "7")],
                                                         b"x"))
    assert first(headers, "priority") == "7"
