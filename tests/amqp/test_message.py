"""Encoded messages (S10.1; AMQP 1.0 Part 3 section 3.2; design rule 2): parse only
what routing needs, never decode the body, rewrite only header and annotations."""

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.amqp import codec
from mqgate.amqp.codec import DecodeError
from mqgate.amqp.message import (
    AMQP_SEQUENCE, AMQP_VALUE, DATA, Header, Properties, encode_message, parse_message,
)
from mqgate.amqp.types import Described, Symbol, Timestamp, ULong

PROPERTIES = Properties(
    message_id="id-1", user_id=b"admin", to="queue://q1", subject="s", reply_to="queue://r",
    correlation_id=b"corr", content_type=Symbol("text/plain"),
    content_encoding=Symbol("utf-8"), absolute_expiry_time=Timestamp(2_000_000),
    creation_time=Timestamp(1_000_000), group_id="g", group_sequence=3,
    reply_to_group_id="rg")
HEADER = Header(durable=True, priority=7, ttl=1000, first_acquirer=True, delivery_count=2)


def delivery_annotations(value):
    """A delivery-annotations section (encode_message has no parameter for it)."""
    return b"\x00\x53\x71" + codec.encode(value)


def full_message(body=b"body bytes"):
    return encode_message(
        body, header=HEADER, message_annotations={Symbol("x-opt-a"): 1},
        properties=PROPERTIES, application_properties={"color": "red", "n": 5})


def joined(chunks):
    return b"".join(bytes(c) for c in chunks)


# -- parsing --------------------------------------------------------------------------------

def test_parse_every_section():
    """S10.1: header, annotations, properties, application properties and a data body are
    all found in a message built by encode_message."""
    data = full_message()
    msg = parse_message(data)
    assert msg.header == HEADER
    assert msg.properties == PROPERTIES
    assert msg.message_annotations == {Symbol("x-opt-a"): 1}
    assert msg.application_properties == {"color": "red", "n": 5}
    assert msg.body_sections() == [(DATA, b"body bytes")]
    assert msg.pristine is True
    assert len(msg) == len(data)
    assert data[msg.bare_start:msg.bare_start + 3] == b"\x00\x53\x73"


def test_amqp_value_body():
    """S10.1: a non-bytes body becomes an amqp-value section and reads back."""
    msg = parse_message(encode_message({"a": [1, 2]}))
    assert msg.body_sections() == [(AMQP_VALUE, {"a": [1, 2]})]
    assert msg.bare_start == 0


def test_amqp_sequence_body():
    """S10.1: body_type selects an amqp-sequence section."""
    msg = parse_message(encode_message([1, "two"], body_type=AMQP_SEQUENCE))
    assert msg.body_sections() == [(AMQP_SEQUENCE, [1, "two"])]


def test_null_amqp_value_body():
    """S10.1: encode_message() with no body writes an amqp-value null."""
    data = encode_message()
    assert data == b"\x00\x53\x77\x40"
    assert parse_message(data).body_sections() == [(AMQP_VALUE, None)]


def test_defaults_without_header_or_properties():
    """S10.1 (section 3.2.1): a message without a header has the default one (not durable,
    priority 4, delivery count 0) and empty properties."""
    msg = parse_message(encode_message(b"x"))
    assert msg.header.durable is False
    assert msg.header.priority == 4
    assert msg.header.delivery_count == 0
    assert msg.properties.to is None
    assert msg.application_properties == {}
    assert msg.message_annotations == {}
    assert msg.annotations is None and msg.app_span is None


def test_empty_message():
    """S10.1: an empty byte string parses as a message with no sections."""
    msg = parse_message(b"")
    assert msg.bare_start == 0 and msg.body_sections() == []


def test_symbolic_section_descriptors():
    """S10.1: sections described by their symbolic names read like numeric ones."""
    data = (codec.encode(Described(Symbol("amqp:header:list"), [True, 9]))
            + codec.encode(Described(Symbol("amqp:properties:list"), ["m", None, "q"]))
            + codec.encode(Described(Symbol("amqp:data:binary"), b"b")))
    msg = parse_message(data)
    assert msg.header.durable is True and msg.header.priority == 9
    assert msg.properties.to == "q"
    assert msg.body_sections() == [(DATA, b"b")]


def test_several_data_sections_and_footer():
    """S10.1 (section 3.2): several data sections are the body; the footer is not."""
    data = (encode_message(b"a") + codec.encode(Described(ULong(0x75), b"b"))
            + codec.encode(Described(ULong(0x78), {Symbol("f"): 1})))
    assert parse_message(data).body_sections() == [(DATA, b"a"), (DATA, b"b")]


def test_body_is_never_decoded():
    """design rule 2: parsing and for_delivery succeed on a message whose body section
    is not even valid AMQP, and carry those bytes unchanged."""
    body = b"\x00\x53\x77\xff\xfe\xfd"  # amqp-value with an unknown constructor
    data = encode_message(None, header=HEADER, properties=PROPERTIES, body_type=DATA)
    data += body
    msg = parse_message(data)
    assert msg.properties == PROPERTIES
    out = joined(msg.for_delivery(delivery_count=5))
    assert out.endswith(body)
    with pytest.raises(DecodeError):
        msg.body_sections()


def test_application_properties_are_decoded_lazily():
    """S10.1: application-properties are only skipped by parse_message; a map there
    that does not decode reads as empty when (and only when) the properties are read."""
    data = encode_message(b"x")
    bad = b"\x00\x53\x74\xc1\x02\x01\x40" + data  # map8 with one element: odd count
    msg = parse_message(bad)
    assert msg.app_span == (0, 7)
    assert msg.application_properties == {}


def test_application_properties_decoded_once():
    """S10.1: application-properties are decoded on first use and then kept."""
    msg = parse_message(full_message())
    assert msg.application_properties is msg.application_properties


# -- for_delivery ---------------------------------------------------------------------------

def test_first_delivery_sends_the_original_bytes():
    """S10.1: a first delivery with nothing to change is the received bytes object itself."""
    data = full_message()
    msg = parse_message(data)
    chunks = msg.for_delivery(delivery_count=2)  # the count the header already carries
    assert len(chunks) == 1 and chunks[0] is data
    bare = parse_message(encode_message(b"y"))
    assert bare.for_delivery()[0] is bare.data


def test_redelivery_rewrites_only_the_delivery_count():
    """S8.1: a redelivery rewrites the header's delivery-count, keeps its other fields, and
    sends the bare message bytes unchanged."""
    data = full_message(body=b"B" * 5000)
    msg = parse_message(data)
    chunks = msg.for_delivery(delivery_count=3)
    out = joined(chunks)
    again = parse_message(out)
    assert again.header == Header(True, 7, 1000, True, 3)
    assert again.message_annotations == {Symbol("x-opt-a"): 1}
    assert out[again.bare_start:] == data[msg.bare_start:]
    assert bytes(chunks[-1]) == data[msg.bare_start:]


def test_redelivery_adds_a_header_when_there_was_none():
    """S8.1: a message that arrived without a header gets one carrying the delivery count."""
    data = encode_message(b"x", properties=Properties(to="q"))
    msg = parse_message(data)
    out = joined(msg.for_delivery(delivery_count=1))
    again = parse_message(out)
    assert again.header.delivery_count == 1
    assert again.header.durable is False and again.header.priority == 4
    assert out.endswith(data)


def test_delivery_annotations_are_stripped():
    """S10.1 (section 3.2.2): delivery annotations are for the next hop (us) and are not
    forwarded; the rest of the message is."""
    tail = encode_message(b"x", message_annotations={Symbol("x-opt-m"): "keep"},
                          properties=Properties(to="q"))
    header = encode_message(None, header=HEADER, body_type=DATA)
    data = header + delivery_annotations({Symbol("x-opt-d"): "drop"}) + tail
    msg = parse_message(data)
    assert msg.pristine is False
    out = joined(msg.for_delivery(delivery_count=HEADER.delivery_count))
    assert b"x-opt-d" not in out
    again = parse_message(out)
    assert again.pristine is True
    assert again.header == HEADER
    assert again.message_annotations == {Symbol("x-opt-m"): "keep"}
    assert out[again.bare_start:] == data[msg.bare_start:]


def test_annotation_added_next_to_existing_ones():
    """S9.2: an added message annotation (the discard indication) joins the existing ones;
    the header and the bare message are unchanged."""
    data = full_message()
    msg = parse_message(data)
    out = joined(msg.for_delivery(delivery_count=2,
                                  annotations={Symbol("x-opt-discards"): 4}))
    again = parse_message(out)
    assert again.message_annotations == {Symbol("x-opt-a"): 1, Symbol("x-opt-discards"): 4}
    assert again.header == HEADER
    assert out[again.bare_start:] == data[msg.bare_start:]


def test_annotation_added_to_a_message_without_any():
    """S9.2: a message without annotations gets a message-annotations section in the right
    place (after the header, before the bare message)."""
    data = encode_message(b"x", header=Header(durable=True), properties=Properties(to="q"))
    msg = parse_message(data)
    out = joined(msg.for_delivery(annotations={Symbol("x-opt-discards"): 1}))
    again = parse_message(out)
    assert again.message_annotations == {Symbol("x-opt-discards"): 1}
    assert again.header.durable is True
    assert again.properties.to == "q"


def test_added_annotation_overrides_one_of_the_same_key():
    """S9.2: an added annotation replaces an existing one with the same key."""
    data = encode_message(b"x", message_annotations={Symbol("x-opt-discards"): 1})
    out = joined(parse_message(data).for_delivery(annotations={Symbol("x-opt-discards"): 9}))
    assert parse_message(out).message_annotations == {Symbol("x-opt-discards"): 9}


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.booleans(),
       st.dictionaries(st.text("abc", min_size=1, max_size=5).map(lambda s: Symbol("x-" + s)),
                       st.integers(-5, 5), max_size=3),
       st.binary(max_size=600))
def test_property_bare_message_is_preserved(count, with_header, with_da, extra, body):
    """S10.1: whatever is rewritten, the bare message bytes are sent unchanged and the
    header carries the requested delivery count."""
    head = encode_message(None, header=Header(priority=1), body_type=DATA) if with_header else b""
    da = delivery_annotations({Symbol("x-d"): 1}) if with_da else b""
    tail = encode_message(body, properties=Properties(to="t"),
                          application_properties={"k": 1})
    data = head + da + tail
    msg = parse_message(data)
    out = joined(msg.for_delivery(delivery_count=count, annotations=extra or None))
    again = parse_message(out)
    assert out[again.bare_start:] == tail
    assert again.header.delivery_count == count
    assert again.pristine
    for key, value in extra.items():
        assert again.message_annotations[key] == value


# -- malformed messages ---------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"\x40",                                               # not a described section
    b"\x00\x53\x99\x45",                                   # unknown section code
    b"\x00\xa3\x03xyz\x45",                                # unknown symbolic descriptor
    b"\x00\x53\x70",                                       # header without a value
    b"\x00\x53\x70\xc0\x05\x01",                           # truncated header list
    b"\x00\x53\x70\x41",                                   # header is not a list
    b"\x00\x53\x73\xa1\x01x",                              # properties are not a list
    b"\x00\x53\x71\xc1\x09\x02",                           # truncated delivery annotations
    b"\x00\x53\x72\xd1\x00\x00",                           # truncated message annotations
    b"\x00\x53\x74\xc1\x05",                               # truncated application properties
    encode_message(None, properties=Properties(to="q"), body_type=DATA)
    + encode_message(None, header=Header(), body_type=DATA),   # header after properties
], ids=["not-described", "unknown-code", "unknown-symbol", "no-value", "truncated-header",
        "header-not-list", "properties-not-list", "truncated-da", "truncated-ma",
        "truncated-ap", "out-of-order"])
def test_malformed_sections(data):
    """S10.4: a malformed or misplaced section before the body raises DecodeError."""
    with pytest.raises(DecodeError):
        parse_message(data)


@pytest.mark.parametrize("data", [
    b"\x00\x45\x40",               # the descriptor is a list
    b"\x00\xc1\x01\x00\x40",       # the descriptor is a map
], ids=["list-descriptor", "map-descriptor"])
def test_unhashable_section_descriptor(data):
    """S10.4, P4: a section whose descriptor is a list or map raises DecodeError, not
    TypeError."""
    with pytest.raises(DecodeError):
        parse_message(data)


def test_every_truncation_of_the_sections_before_the_body():
    """S10.4, P4: cutting a message inside its header, annotations, properties or
    application properties raises DecodeError; a cut between sections is a shorter message."""
    data = full_message()
    msg = parse_message(data)
    boundaries = set()
    pos = 0
    while pos < msg.app_span[1]:
        boundaries.add(pos)
        pos = codec.skip(data, pos)
    assert len(boundaries) == 4
    for cut in range(1, msg.app_span[1]):
        if cut in boundaries:
            assert parse_message(data[:cut]).header == HEADER
        else:
            with pytest.raises(DecodeError):
                parse_message(data[:cut])


def test_malformed_maps_read_as_empty_and_the_message_goes_on_unchanged():
    """S10.4: annotation and application-property maps are only walked on arrival; one
    whose contents do not decode (a string that is not UTF-8) reads as empty wherever
    the broker looks, and the message is still delivered as it came."""
    good = encode_message(b"hi", message_annotations={Symbol("x-opt-k"): "ok"},
                          application_properties={"p": "ok"})
    bad = good.replace(b"ok", b"\xff\xfe")
    message = parse_message(bad)
    assert message.message_annotations == {}
    assert message.application_properties == {}
    assert b"".join(message.for_delivery()) == bad
    flagged = b"".join(bytes(c) for c in message.for_delivery(
        annotations={Symbol("x-opt-discard-indication"): True}))
    # The client's entry is carried over as it came (never decoded), the flag after it.
    span = parse_message(flagged).annotations
    assert flagged[span[0]:span[1]] == (
        b"\x00\x53\x72" + _map8(b"\xa3\x07x-opt-k\xa1\x02\xff\xfe"
                           + codec.encode(Symbol("x-opt-discard-indication"))
                           + codec.encode(True), 4))


def _map8(body, count):
    return bytes((0xC1, len(body) + 1, count)) + body


# An annotations map holding an array of described values, as a client may send it:
# the codec reads it, but could not write it again.
_DESCRIBED_ARRAY = (bytes((0xE0, 1 + 3 + 1 + 8, 2, 0x00, 0x53, 0x10, 0x71))
                    + (1).to_bytes(4, "big") + (2).to_bytes(4, "big"))
_DISCARD = {Symbol("x-opt-discard-indication"): True}


def test_annotations_with_described_array_take_the_discard_indication():
    """S9.2, S10.4: annotations holding an array of described values (which the broker
    could not encode again) still take the discard indication and a new delivery count;
    the client's entry goes out byte for byte."""
    entry = b"\xa3\x05x-opt" + _DESCRIBED_ARRAY
    data = b"\x00\x53\x72" + _map8(entry, 2) + encode_message(b"hi")
    message = parse_message(data)
    out = joined(message.for_delivery(delivery_count=3, annotations=_DISCARD))
    again = parse_message(out)
    assert again.header.delivery_count == 3
    assert entry in out
    annotations = again.message_annotations
    assert annotations[Symbol("x-opt-discard-indication")] is True
    assert [v.value for v in annotations[Symbol("x-opt")]] == [1, 2]
    assert again.body_sections() == [(DATA, b"hi")]


def test_added_annotation_replaces_a_sym32_key_and_keeps_the_rest_in_order():
    """S9.2: an entry of the same key is replaced whichever symbol encoding the client
    used (here sym32), the entries around it stay as they came, in order."""
    key32 = b"\xb3" + len(b"x-opt-discard-indication").to_bytes(4, "big") + \
        b"x-opt-discard-indication"
    first, last = b"\xa3\x03x-a\x54\x01", b"\xa3\x03x-b\x54\x02"
    entries = first + key32 + b"\x42" + last
    data = b"\x00\x53\x72" + _map8(entries, 6) + encode_message(b"x")
    out = joined(parse_message(data).for_delivery(annotations=_DISCARD))
    annotations = parse_message(out).message_annotations
    assert list(annotations.items()) == [
        (Symbol("x-a"), 1), (Symbol("x-b"), 2), (Symbol("x-opt-discard-indication"), True)]
    assert first + last in out


def test_added_annotations_leave_a_huge_key_alone_and_replace_a_ulong_key():
    """S9.2, S10.4: a key that is neither a symbol nor ours (here a 100,000-entry list) is
    carried over as it came, never decoded; a ulong key of ours replaces the client's."""
    huge = codec.encode(list(range(100_000)))
    entries = huge + b"\x41" + codec.encode(ULong(7)) + b"\xa1\x03old"
    data = b"\x00\x53\x72" + b"\xd1" + (len(entries) + 4).to_bytes(4, "big") + \
        (4).to_bytes(4, "big") + entries + encode_message(b"x")
    out = joined(parse_message(data).for_delivery(annotations={ULong(7): "new"}))
    assert huge + b"\x41" in out and b"old" not in out
    again = parse_message(out)
    start, end = again.annotations
    value = out[start + 3:end]
    assert value[0] == 0xD1 and int.from_bytes(value[5:9], "big") == 4   # two entries
    assert value.endswith(codec.encode(ULong(7)) + codec.encode("new"))


def test_annotations_grow_from_map8_to_map32():
    """S9.2: an added entry that takes the map past 255 bytes switches it to map32."""
    data = encode_message(b"x", message_annotations={Symbol("x-opt-a"): "v" * 240})
    out = joined(parse_message(data).for_delivery(
        annotations={Symbol("x-opt-discard-indication"): "w" * 20}))
    assert parse_message(out).message_annotations == {
        Symbol("x-opt-a"): "v" * 240, Symbol("x-opt-discard-indication"): "w" * 20}


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=40), st.integers(0, 6), st.booleans())
def test_property_any_accepted_annotations_take_an_added_entry(body, count, wide):
    """S10.4: whatever annotations section the arrival parse accepts, adding the discard
    indication raises nothing and leaves a message that parses again with the bare
    message unchanged."""
    if wide:
        value = b"\xd1" + (len(body) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + body
    else:
        value = bytes((0xC1, len(body) + 1, count)) + body
    data = b"\x00\x53\x72" + value + encode_message(b"tail")
    try:
        message = parse_message(data)
    except DecodeError:
        return
    out = joined(message.for_delivery(delivery_count=1, annotations=_DISCARD))
    again = parse_message(out)
    assert out[again.bare_start:] == data[message.bare_start:]
    assert again.message_annotations.get(Symbol("x-opt-discard-indication"), True) is True


# -- the body prefix capture keeps (data_body) --------------------------------------

@pytest.mark.parametrize("body", [b"", b"x", b"y" * 255, b"z" * 70_000])
@pytest.mark.parametrize("limit", [0, 1, 256, 1 << 20])
def test_data_body_gives_the_prefix_and_the_whole_length(body, limit):
    message = parse_message(full_message(body))
    assert message.data_body(limit) == (body[:limit], len(body))


def test_data_body_joins_data_sections_up_to_the_limit():
    two = encode_message(b"ab", properties=PROPERTIES) + b"\x00\x53\x75\xa0\x02cd"
    assert parse_message(two).data_body(3) == (b"abc", 4)
    assert parse_message(two).data_body(10) == (b"abcd", 4)


def test_data_body_leaves_other_bodies_to_body_sections():
    assert parse_message(encode_message("text")).data_body(10) is None
    assert parse_message(encode_message([1, 2], body_type=AMQP_SEQUENCE)) \
        .data_body(10) is None


def test_data_body_refuses_a_data_section_cut_short():
    cut = parse_message(encode_message(b"abcdef")[:-2])
    with pytest.raises(DecodeError, match="past the end"):
        cut.data_body(10)
