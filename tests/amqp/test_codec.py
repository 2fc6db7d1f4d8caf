"""The AMQP 1.0 type codec (S10.1; OASIS AMQP 1.0 Part 1): round trips, exact bytes, and
the promise that malformed input raises DecodeError and nothing else (S10.4, docs/design.md)."""

import math
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.amqp import codec
from mqgate.amqp import types as t
from mqgate.amqp.codec import DecodeError, EncodeError, decode, decode_all, encode, skip
from mqgate.amqp.types import (
    Array, Byte, Char, Decimal32, Decimal64, Decimal128, Described, Float32, Int, Long,
    Short, Symbol, Timestamp, UByte, UInt, ULong, UShort,
)


def typed(value):
    """A comparable form that keeps the AMQP type (Symbol is not str, True is not 1)."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Timestamp):
        return ("timestamp", int(value))
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, Symbol):
        return ("symbol", str(value))
    if isinstance(value, Char):
        return ("char", str(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (Decimal32, Decimal64, Decimal128)):
        return (type(value).__name__, bytes(value))
    if isinstance(value, (bytes, bytearray)):
        return ("binary", bytes(value))
    if isinstance(value, uuid.UUID):
        return ("uuid", value)
    if isinstance(value, Described):
        return ("described", typed(value.descriptor), typed(value.value))
    if isinstance(value, Array):
        return ("array", tuple(typed(v) for v in value))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(typed(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple((typed(k), typed(v)) for k, v in value.items()))
    raise AssertionError(f"no typed form for {value!r}")


def round_trip(value):
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data)
    assert skip(data) == len(data)
    return decoded


# -- round trips of every primitive -------------------------------------------------------

PRIMITIVES = [
    None, True, False,
    UByte(0), UByte(255), UShort(0), UShort(65535),
    UInt(0), UInt(1), UInt(255), UInt(256), UInt(2**32 - 1),
    ULong(0), ULong(255), ULong(256), ULong(2**64 - 1),
    Byte(-128), Byte(127), Short(-32768), Short(32767),
    Int(-128), Int(-129), Int(127), Int(128), Int(-2**31), Int(2**31 - 1),
    Long(-128), Long(-129), Long(2**63 - 1), Long(-2**63),
    0, -1, 127, 128, -128, -129, 2**63 - 1, -2**63, 2**63, 2**64 - 1,
    Float32(1.5), Float32(-0.25), 1.5, 1e300, -0.0, math.inf,
    Char("a"), Char("\u00e9"), Char("\U0001F600"),
    Timestamp(0), Timestamp(1_700_000_000_000), Timestamp(-1),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Decimal32(b"\x01\x02\x03\x04"), Decimal64(bytes(range(8))), Decimal128(bytes(range(16))),
    b"", b"\x00\xff", bytes(255), bytes(256), bytes(3000),
    "", "hello", "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600", "x" * 255, "x" * 256, "y" * 300,
    Symbol(""), Symbol("amqp:accepted:list"), Symbol("s" * 255), Symbol("s" * 300),
    [], [None], [1, "a", Symbol("b")], [[[]], [[1]]], list(range(300)),
    {}, {Symbol("k"): "v"}, {"a": {"b": [1, {}]}}, {i: i for i in range(200)},
    Array([Symbol("a"), Symbol("bc")]), Array([Symbol("s" * 300)]),
    Array([UInt(1), UInt(2**32 - 1)]), Array([Int(-5), Int(7)]), Array([1, -2, 2**62]),
    Array([True, False]), Array(["x", "yz"]), Array([b"a", b""]),
    Array([uuid.UUID(int=1)]), Array([1.5, 2.5]), Array([Timestamp(5)]),
    Array([], code=t.SYM8),
    Described(ULong(0x70), [True]), Described(0x1234567890, "x"),
    Described(Symbol("example:thing"), {"a": 1}), Described(ULong(1), Described(ULong(2), None)),
]


@pytest.mark.parametrize("value", PRIMITIVES, ids=lambda v: repr(v)[:40])
def test_round_trip(value):
    """S10.1: every primitive, compound and described value decodes to what was encoded,
    with its AMQP type, and skip() finds its end."""
    assert typed(round_trip(value)) == typed(value)


def test_array_keeps_its_element_constructor():
    """S10.1: a decoded array remembers its element constructor (uint stays uint)."""
    decoded = round_trip(Array([UInt(1), UInt(300)]))
    assert decoded.code == t.UINT
    assert round_trip(Array([Symbol("a")])).code == t.SYM8
    assert round_trip(Array([Int(1)])).code == t.INT
    assert round_trip(Array([1])).code == t.LONG


def test_float32_is_single_precision_and_double_is_double():
    """S10.1: Float32 is written as a 4-byte float, a Python float as an 8-byte double."""
    assert encode(Float32(1.5)) == b"\x72\x3f\xc0\x00\x00"
    assert encode(1.5) == b"\x82\x3f\xf8" + bytes(6)
    # 0.1 is not representable in 32 bits: the round trip is lossy only for Float32.
    assert decode(encode(Float32(0.1)))[0] != 0.1
    assert decode(encode(0.1))[0] == 0.1


def test_memoryview_input_decodes_like_bytes():
    """S10.1: the decoder reads a memoryview (a frame body) exactly as it reads bytes."""
    data = encode({"a": [1, Symbol("b"), b"c"]})
    assert decode(memoryview(data)) == decode(data)
    assert skip(memoryview(data)) == len(data)


def test_decode_all_reads_consecutive_values():
    """S10.1: decode_all returns every value of a buffer in order."""
    data = encode(1) + encode("two") + encode([3])
    assert decode_all(data) == [1, "two", [3]]


def test_decode_at_offset():
    """S10.1: decode(buf, offset) starts at the offset and returns the offset after."""
    data = b"\xff\xff" + encode(Symbol("x"))
    assert decode(data, 2) == (Symbol("x"), len(data))


# -- exact bytes (Part 1 section 1.6) --------------------------------------------------------

EXACT = [
    (None, b"\x40"),
    (True, b"\x41"),
    (False, b"\x42"),
    (UInt(0), b"\x43"),
    (UInt(5), b"\x52\x05"),
    (UInt(255), b"\x52\xff"),
    (UInt(256), b"\x70\x00\x00\x01\x00"),
    (UInt(2**32 - 1), b"\x70\xff\xff\xff\xff"),
    (ULong(0), b"\x44"),
    (ULong(7), b"\x53\x07"),
    (ULong(70000), b"\x80\x00\x00\x00\x00\x00\x01\x11\x70"),
    (UByte(255), b"\x50\xff"),
    (UShort(258), b"\x60\x01\x02"),
    (Byte(-1), b"\x51\xff"),
    (Short(-2), b"\x61\xff\xfe"),
    (Int(-1), b"\x54\xff"),
    (Int(1000), b"\x71\x00\x00\x03\xe8"),
    (-1, b"\x55\xff"),
    (-128, b"\x55\x80"),
    (-129, b"\x81" + (-129).to_bytes(8, "big", signed=True)),
    (2**63 - 1, b"\x81\x7f" + b"\xff" * 7),
    (2**63, b"\x80\x80" + bytes(7)),
    (Timestamp(1), b"\x83" + bytes(7) + b"\x01"),
    (Char("\u00e9"), b"\x73\x00\x00\x00\xe9"),
    (Symbol("a"), b"\xa3\x01a"),
    ("a", b"\xa1\x01a"),
    (b"a", b"\xa0\x01a"),
    ("x" * 300, b"\xb1\x00\x00\x01\x2c" + b"x" * 300),
    (Symbol("s" * 300), b"\xb3\x00\x00\x01\x2c" + b"s" * 300),
    (bytes(256), b"\xb0\x00\x00\x01\x00" + bytes(256)),
    ([], b"\x45"),
    ([1, "a"], b"\xc0\x06\x02\x55\x01\xa1\x01a"),
    ({}, b"\xc1\x01\x00"),
    ({Symbol("k"): None}, b"\xc1\x05\x02\xa3\x01k\x40"),
    (Array([Symbol("a"), Symbol("bc")]), b"\xe0\x07\x02\xa3\x01a\x02bc"),
    (Array([UInt(1)]), b"\xe0\x06\x01\x70\x00\x00\x00\x01"),
    (Described(ULong(0x24), []), b"\x00\x53\x24\x45"),
    (Described(Symbol("x"), 1), b"\x00\xa3\x01x\x55\x01"),
    (uuid.UUID(int=1), b"\x98" + bytes(15) + b"\x01"),
]


@pytest.mark.parametrize("value, data", EXACT, ids=lambda v: repr(v)[:30])
def test_exact_encoding(value, data):
    """S10.1: values are written in the smallest encoding Part 1 section 1.6 defines."""
    assert encode(value) == data
    assert typed(decode(data)[0]) == typed(value)


def test_list32_and_map32_when_large():
    """S10.1: a list or map over 255 bytes or 255 elements switches to the 32-bit form."""
    assert encode(list(range(300)))[0] == t.LIST32
    assert encode(["x" * 300])[0] == t.LIST32
    assert encode({i: None for i in range(128)})[0] == t.MAP32
    assert encode({i: None for i in range(10)})[0] == t.MAP8
    assert encode(Array([UInt(i) for i in range(100)]))[0] == t.ARRAY32


def test_other_spec_forms_decode():
    """S10.1: encodings we never write but peers may (0x56 boolean, wide forms of small
    values, list32/map32/array32 for few elements) decode to the same values."""
    assert decode(b"\x56\x01") == (True, 2)
    assert decode(b"\x56\x00") == (False, 2)
    assert decode(b"\x70\x00\x00\x00\x05")[0] == 5
    assert decode(b"\x80" + bytes(7) + b"\x05")[0] == 5
    assert decode(b"\x71\xff\xff\xff\xff")[0] == -1
    assert decode(b"\x81" + b"\xff" * 8)[0] == -1
    assert decode(b"\xb1\x00\x00\x00\x01a")[0] == "a"
    assert decode(b"\xb3\x00\x00\x00\x01a")[0] == Symbol("a")
    assert decode(b"\xd0\x00\x00\x00\x06\x00\x00\x00\x02\x41\x40")[0] == [True, None]
    assert decode(b"\xd1\x00\x00\x00\x06\x00\x00\x00\x02\x41\x40")[0] == {True: None}
    assert decode(b"\xf0\x00\x00\x00\x06\x00\x00\x00\x01\x52\x07")[0] == [7]
    assert decode(b"\xc0\x01\x00") == ([], 3)


def test_invalid_boolean_byte():
    """S10.4: the 0x56 boolean form only admits 0 and 1."""
    with pytest.raises(DecodeError):
        decode(b"\x56\x02")


def test_encode_refuses_values_without_an_amqp_type():
    """S10.1: integers beyond ulong and Python objects with no AMQP type raise EncodeError."""
    with pytest.raises(EncodeError):
        encode(2**64)
    with pytest.raises(EncodeError):
        encode(-2**63 - 1)
    with pytest.raises(EncodeError):
        encode(object())
    with pytest.raises(EncodeError):
        encode(Array([object()]))


def test_wrapper_ranges_are_checked():
    """S10.1: the integer wrappers refuse values outside their AMQP range."""
    for wrapper, bad in [(UByte, 256), (UByte, -1), (UInt, 2**32), (Byte, 128),
                         (Int, 2**31), (ULong, -1), (Long, 2**63)]:
        with pytest.raises(ValueError):
            wrapper(bad)
    with pytest.raises(ValueError):
        Char("ab")
    with pytest.raises(ValueError):
        Decimal32(b"\x00")


def test_encode_as_named_types():
    """S10.1: encode_as picks the declared AMQP type for a plain int, and null for None."""
    def written(type_name, value):
        out = bytearray()
        codec.encode_as(type_name)(out, value)
        return bytes(out)

    assert written("uint", 5) == b"\x52\x05"
    assert written("uint", 0) == b"\x43"
    assert written("ulong", 70000) == encode(ULong(70000))
    assert written("ushort", 1) == b"\x60\x00\x01"
    assert written("ubyte", 1) == b"\x50\x01"
    assert written("symbol", "abc") == b"\xa3\x03abc"
    assert written("uint", None) == b"\x40"
    assert written("symbols", Symbol("x")) == b"\xa3\x01x"
    assert written("symbols", ("x", "y")) == b"\xe0\x06\x02\xa3\x01x\x01y"
    assert written("*", Symbol("x")) == b"\xa3\x01x"
    with pytest.raises(EncodeError):
        codec.encode_as("no-such-type")


# -- malformed input --------------------------------------------------------------------

# One sample of every constructor family; each is a single, prefix-free value.
SAMPLES = [encode(v) for v in PRIMITIVES]


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: d[:6].hex())
def test_every_truncation_raises_decode_error(data):
    """S10.4, P4: every strict prefix of an encoded value raises DecodeError (never
    IndexError or struct.error), from decode() and from skip()."""
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode(data[:cut])
        with pytest.raises(DecodeError):
            skip(data[:cut])


def test_decode_error_carries_an_offset():
    """P4: a DecodeError says where decoding failed and has the decode-error condition."""
    with pytest.raises(DecodeError) as info:
        decode(b"\xc0\x03\x01\x41")  # a list8 whose size overruns the buffer
    assert info.value.offset is not None
    assert info.value.condition == "amqp:decode-error"


KNOWN_CODES = {value for name, value in vars(t).items()
               if name.isupper() and isinstance(value, int)}
UNKNOWN_CODES = [code for code in range(256) if code not in KNOWN_CODES]


def test_unknown_constructor_decode():
    """S10.4: decode() rejects every byte that is not an AMQP constructor."""
    for code in UNKNOWN_CODES:
        with pytest.raises(DecodeError):
            decode(bytes([code]) + bytes(16))


def test_unknown_constructor_skip():
    """S10.4: skip() rejects every byte that is not an AMQP constructor, as decode() does,
    so an invalid section is never waved through unread."""
    accepted = []
    for code in UNKNOWN_CODES:
        try:
            skip(bytes([code]) + bytes(16))
        except DecodeError:
            continue
        accepted.append(hex(code))
    assert accepted == []


def test_unknown_constructor_inside_a_list():
    """S10.4: an unknown constructor inside a compound is a DecodeError too."""
    with pytest.raises(DecodeError):
        decode(b"\xc0\x02\x01\x02")


def nested_lists(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_depth_limit():
    """S10.4, P5: values nested deeper than MAX_DEPTH are refused; shallower ones are not."""
    assert decode(encode(nested_lists(codec.MAX_DEPTH - 2)))[0] == nested_lists(
        codec.MAX_DEPTH - 2)
    with pytest.raises(DecodeError):
        decode(encode(nested_lists(codec.MAX_DEPTH + 5)))
    with pytest.raises(DecodeError):
        decode(b"\x00" * 100_000 + b"\x40")  # descriptors of descriptors
    with pytest.raises(DecodeError):
        decode(b"\xe0\x03\x01\x00\x00" * 1000)  # arrays of described arrays


def test_skip_depth_limit():
    """S10.4, P4: skip() over descriptors nested 100,000 deep raises DecodeError, not
    RecursionError (delivery annotations are walked with skip())."""
    with pytest.raises(DecodeError):
        skip(b"\x00" * 100_000 + b"\x40")


def test_invalid_utf8_string():
    """S10.4: a string that is not UTF-8 raises DecodeError."""
    with pytest.raises(DecodeError):
        decode(b"\xa1\x02\xc3\x28")
    with pytest.raises(DecodeError):
        decode(b"\xa1\x01\xff")


def test_symbol_must_be_ascii():
    """S10.4: a symbol with non-ASCII bytes raises DecodeError."""
    with pytest.raises(DecodeError):
        decode(b"\xa3\x01\xe9")


def test_map_with_odd_count():
    """S10.4: a map whose element count is odd raises DecodeError."""
    with pytest.raises(DecodeError):
        decode(b"\xc1\x02\x01\x40")
    with pytest.raises(DecodeError):
        decode(b"\xd1\x00\x00\x00\x07\x00\x00\x00\x03\x41\x41\x41")


def test_map_with_unhashable_key():
    """S10.4: a map keyed by a list or a map raises DecodeError, not TypeError."""
    with pytest.raises(DecodeError):
        decode(b"\xc1\x04\x02\x45\x40")
    with pytest.raises(DecodeError):
        decode(b"\xc1\x06\x02\xc1\x01\x00\x40")


@pytest.mark.parametrize("data", [
    b"\xc0\x05\x03\x41\x41",                    # count says 3, size holds 2
    b"\xc0\x04\x01\x41\x41\x41",                # size holds more than the count
    b"\xc0\x00\x00",                            # size smaller than the count field
    b"\xd0\x00\x00\x00\x02\x00\x00\x00\x00",    # list32 size smaller than its count field
    b"\xe0\x04\x03\x52\x01\x02",                # array count 3, 2 elements
    b"\xe0\x02\x01\x00",                        # array element constructor missing
    b"\xe0\x03\x01\x02\x00",                    # unknown array element constructor
    b"\xc0\x02\x01\xc0\x05\x01\x41",            # inner list overruns the outer
    b"\x73\x00\x11\x00\x00",                    # char above U+10FFFF
])
def test_inconsistent_sizes_and_counts(data):
    """S10.4: sizes and counts that disagree with the contents raise DecodeError."""
    with pytest.raises(DecodeError):
        decode(data)


@pytest.mark.timeout(20)
def test_array_count_of_empty_elements_is_bounded():
    """S10.4, P5: an 11-byte array claiming ten million zero-width elements (nulls) is
    refused, rather than building a ten-million-element list from nothing."""
    data = b"\xf0\x00\x00\x00\x05" + (10_000_000).to_bytes(4, "big") + b"\x40"
    with pytest.raises(DecodeError):
        decode(data)


# -- properties (Hypothesis) -----------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-2**63, max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(Float32),
    st.text(max_size=300), st.binary(max_size=300),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=300).map(
        Symbol),
    st.uuids(),
    st.integers(min_value=-2**63, max_value=2**63 - 1).map(Timestamp),
    st.characters().map(Char),
    st.integers(min_value=0, max_value=2**32 - 1).map(UInt),
    st.integers(min_value=-2**31, max_value=2**31 - 1).map(Int),
)
_keys = st.one_of(st.integers(min_value=-2**63, max_value=2**63 - 1), st.text(max_size=20),
                  st.text(alphabet="abcxyz:-", max_size=20).map(Symbol))
_descriptors = st.one_of(st.integers(min_value=0, max_value=2**64 - 1).map(ULong),
                         st.text(alphabet="abc:-", min_size=1, max_size=30).map(Symbol))
_arrays = st.one_of(
    st.lists(st.text(alphabet="abc", max_size=300).map(Symbol), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=2**32 - 1).map(UInt), min_size=1, max_size=40),
    st.lists(st.integers(min_value=-2**31, max_value=2**31 - 1).map(Int), min_size=1,
             max_size=40),
).map(Array)

values = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda children: st.one_of(
        st.lists(children, max_size=8),
        st.dictionaries(_keys, children, max_size=6),
        st.builds(Described, _descriptors, children),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(values)
def test_property_round_trip(value):
    """S10.1: for any value, decode(encode(v)) == v with its types, and skip finds the end."""
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data)
    assert typed(decoded) == typed(value)
    assert skip(data) == len(data)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(values, st.data())
def test_property_truncation(value, data):
    """S10.4: any strict prefix of any encoded value raises DecodeError and only that."""
    encoded = encode(value)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(DecodeError):
        decode(encoded[:cut])
    with pytest.raises(DecodeError):
        skip(encoded[:cut])


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=64))
def test_property_random_bytes(data):
    """S10.4, P4: decoding or skipping arbitrary bytes returns or raises DecodeError."""
    for operation in (decode, skip, decode_all):
        try:
            operation(data)
        except DecodeError:
            pass
