"""
Encoder and decoder for the AMQP 1.0 type system (Part 1).

Decoding reads from ``bytes`` or a ``memoryview`` through a 256-entry table indexed by
constructor byte; each entry takes ``(buf, offset)`` with the offset just past the
constructor and returns ``(value, offset)``. Every read is bounds-checked: truncated or
malformed input raises L{DecodeError} carrying the offset, never ``IndexError`` or
``struct.error`` (docs/design.md).

Encoding appends to a ``bytearray``. Plain Python values pick their natural AMQP type
(see L{mqgate.amqp.types}); ``encode_as(type_name)`` gives the writer for a named AMQP type,
which the performative tables use so that a field declared ``uint`` is written as a uint
without wrapping every integer.

Nothing here knows about frames or messages.
"""

import struct
import uuid

from mqgate.errors import RemoteProtocolError
from mqgate.amqp import types as t
from mqgate.amqp.types import (
    Array, Byte, Char, Decimal32, Decimal64, Decimal128, Described, Float32, Int, Long,
    Short, Symbol, Timestamp, UByte, UInt, ULong, UShort,
)

__all__ = ["DecodeError", "decode", "decode_all", "encode", "encode_value", "encode_as",
           "skip", "EncodeError"]

# A nesting limit keeps a hostile peer from exhausting the stack with lists in lists.
# Real messages nest a handful of levels; 64 is far beyond any client we know of.
MAX_DEPTH = 64

_u8 = struct.Struct(">B")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_f32 = struct.Struct(">f")
_f64 = struct.Struct(">d")
_u8u8 = struct.Struct(">BB")
_u32u32 = struct.Struct(">II")


class DecodeError(RemoteProtocolError):
    """The peer's bytes are not a valid AMQP encoding.

    @ivar offset: where in the buffer decoding failed.
    """

    condition = "amqp:decode-error"

    def __init__(self, description, offset=None):
        self.offset = offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(description + where)


class EncodeError(ValueError):
    """A value cannot be represented in AMQP (a programming error on our side)."""


# -- decoding -------------------------------------------------------------------------------

def _need(buf, offset, n):
    if offset + n > len(buf):
        raise DecodeError(f"truncated value: need {n} bytes", offset)


def _fixed(struct_, convert=None):
    size = struct_.size
    unpack = struct_.unpack_from

    def read(buf, offset, depth):
        if offset + size > len(buf):
            raise DecodeError(f"truncated value: need {size} bytes", offset)
        value = unpack(buf, offset)[0]
        return (convert(value) if convert else value), offset + size

    return read


def _constant(value):
    def read(buf, offset, depth):
        return value, offset
    return read


def _read_bool(buf, offset, depth):
    _need(buf, offset, 1)
    byte = buf[offset]
    if byte > 1:
        raise DecodeError(f"boolean byte must be 0 or 1, got {byte}", offset)
    return byte == 1, offset + 1


def _read_char(buf, offset, depth):
    _need(buf, offset, 4)
    code = _u32.unpack_from(buf, offset)[0]
    if code > 0x10FFFF:
        raise DecodeError(f"char code point out of range: {code:#x}", offset)
    return Char(chr(code)), offset + 4


def _raw(width, wrap):
    def read(buf, offset, depth):
        _need(buf, offset, width)
        return wrap(bytes(buf[offset:offset + width])), offset + width
    return read


def _read_uuid(buf, offset, depth):
    _need(buf, offset, 16)
    return uuid.UUID(bytes=bytes(buf[offset:offset + 16])), offset + 16


def _variable(size_struct, convert):
    width = size_struct.size
    unpack = size_struct.unpack_from

    def read(buf, offset, depth):
        if offset + width > len(buf):
            raise DecodeError("truncated size field", offset)
        n = unpack(buf, offset)[0]
        start = offset + width
        end = start + n
        if end > len(buf):
            raise DecodeError(f"truncated value: size {n} exceeds buffer", offset)
        return convert(buf, start, end), end

    return read


def _to_bytes(buf, start, end):
    return bytes(buf[start:end])


def _to_str(buf, start, end):
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8 in string: {e.reason}", start) from None


def _to_symbol(buf, start, end):
    try:
        return Symbol(str(buf[start:end], "ascii"))
    except UnicodeDecodeError:
        raise DecodeError("symbol is not ASCII", start) from None


def _compound(size_struct, build):
    """List and map share a layout: size, count, then count encoded values."""
    pair = _u8u8 if size_struct is _u8 else _u32u32
    width = pair.size // 2

    def read(buf, offset, depth):
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply", offset)
        if offset + 2 * width > len(buf):
            raise DecodeError("truncated compound header", offset)
        size, count = pair.unpack_from(buf, offset)
        end = offset + width + size
        if end > len(buf) or size < width:
            raise DecodeError(f"compound size {size} does not fit the buffer", offset)
        pos = offset + 2 * width
        items = []
        append = items.append
        for _ in range(count):
            if pos >= end:
                raise DecodeError("compound holds fewer values than its count", pos)
            code = buf[pos]
            reader = _READERS[code]
            if reader is None:
                raise DecodeError(f"unknown constructor {code:#04x}", pos)
            value, pos = reader(buf, pos + 1, depth + 1)
            append(value)
        if pos != end:
            raise DecodeError("compound size does not match its contents", pos)
        return build(items, offset), end

    return read


def _build_map(items, offset):
    if len(items) % 2:
        raise DecodeError("map has an odd number of elements", offset)
    it = iter(items)
    try:
        return dict(zip(it, it))
    except TypeError:
        raise DecodeError("map key is not hashable", offset) from None


def _build_list(items, offset):
    return items


def _array(size_struct):
    pair = _u8u8 if size_struct is _u8 else _u32u32
    width = pair.size // 2

    def read(buf, offset, depth):
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply", offset)
        if offset + 2 * width > len(buf):
            raise DecodeError("truncated array header", offset)
        size, count = pair.unpack_from(buf, offset)
        end = offset + width + size
        if end > len(buf) or size < width:
            raise DecodeError(f"array size {size} does not fit the buffer", offset)
        if count > size:
            # Even zero-width elements (nulls) cannot outnumber the array's bytes in any
            # encoder we know; a bigger count is a way to make us build a huge list.
            raise DecodeError(f"array count {count} exceeds its size {size}", offset)
        pos = offset + 2 * width
        descriptor = _NO_DESCRIPTOR
        _need(buf, pos, 1)
        code = buf[pos]
        if code == t.DESCRIBED:
            descriptor, pos = decode(buf, pos + 1, depth + 1)
            _need(buf, pos, 1)
            code = buf[pos]
        reader = _READERS[code]
        if reader is None or code == t.DESCRIBED:
            raise DecodeError(f"unknown array element constructor {code:#04x}", pos)
        pos += 1
        items = Array(code=code)
        for _ in range(count):
            if pos > end:
                raise DecodeError("array holds fewer values than its count", pos)
            value, pos = reader(buf, pos, depth + 1)
            items.append(value if descriptor is _NO_DESCRIPTOR else Described(descriptor, value))
        if pos != end:
            raise DecodeError("array size does not match its contents", pos)
        if descriptor is not _NO_DESCRIPTOR:
            items.descriptor = descriptor
        return items, end

    return read


_NO_DESCRIPTOR = object()


def _read_described(buf, offset, depth):
    if depth >= MAX_DEPTH:
        raise DecodeError("values nested too deeply", offset)
    descriptor, offset = decode(buf, offset, depth + 1)
    value, offset = decode(buf, offset, depth + 1)
    return Described(descriptor, value), offset


_READERS = [None] * 256
_READERS[t.DESCRIBED] = _read_described
_READERS[t.NULL] = _constant(None)
_READERS[t.TRUE] = _constant(True)
_READERS[t.FALSE] = _constant(False)
_READERS[t.BOOLEAN] = _read_bool
_READERS[t.UBYTE] = _fixed(_u8)
_READERS[t.USHORT] = _fixed(_u16)
_READERS[t.UINT] = _fixed(_u32)
_READERS[t.SMALLUINT] = _fixed(_u8)
_READERS[t.UINT0] = _constant(0)
_READERS[t.ULONG] = _fixed(_u64)
_READERS[t.SMALLULONG] = _fixed(_u8)
_READERS[t.ULONG0] = _constant(0)
_READERS[t.BYTE] = _fixed(_i8)
_READERS[t.SHORT] = _fixed(_i16)
_READERS[t.INT] = _fixed(_i32)
_READERS[t.SMALLINT] = _fixed(_i8)
_READERS[t.LONG] = _fixed(_i64)
_READERS[t.SMALLLONG] = _fixed(_i8)
_READERS[t.FLOAT] = _fixed(_f32)
_READERS[t.DOUBLE] = _fixed(_f64)
_READERS[t.DECIMAL32] = _raw(4, Decimal32)
_READERS[t.DECIMAL64] = _raw(8, Decimal64)
_READERS[t.DECIMAL128] = _raw(16, Decimal128)
_READERS[t.CHAR] = _read_char
_READERS[t.TIMESTAMP] = _fixed(_i64, Timestamp)
_READERS[t.UUID] = _read_uuid
_READERS[t.VBIN8] = _variable(_u8, _to_bytes)
_READERS[t.VBIN32] = _variable(_u32, _to_bytes)
_READERS[t.STR8] = _variable(_u8, _to_str)
_READERS[t.STR32] = _variable(_u32, _to_str)
_READERS[t.SYM8] = _variable(_u8, _to_symbol)
_READERS[t.SYM32] = _variable(_u32, _to_symbol)
_READERS[t.LIST0] = lambda buf, offset, depth: ([], offset)
_READERS[t.LIST8] = _compound(_u8, _build_list)
_READERS[t.LIST32] = _compound(_u32, _build_list)
_READERS[t.MAP8] = _compound(_u8, _build_map)
_READERS[t.MAP32] = _compound(_u32, _build_map)
_READERS[t.ARRAY8] = _array(_u8)
_READERS[t.ARRAY32] = _array(_u32)


def decode(buf, offset=0, depth=0):
    """Decode one value.

    @param buf: bytes or memoryview.
    @param offset: where the value's constructor starts.
    @return: C{(value, offset_after_value)}.
    @raise DecodeError: the bytes are truncated or not a valid encoding.
    """
    if offset >= len(buf):
        raise DecodeError("expected a value, found end of data", offset)
    code = buf[offset]
    reader = _READERS[code]
    if reader is None:
        raise DecodeError(f"unknown constructor {code:#04x}", offset)
    return reader(buf, offset + 1, depth)


def decode_all(buf):
    """Decode consecutive values until the buffer ends; returns them as a list."""
    values = []
    offset = 0
    while offset < len(buf):
        value, offset = decode(buf, offset)
        values.append(value)
    return values


# Widths of the fixed-size encodings after the constructor byte, for skip().
_FIXED_WIDTH = {
    t.NULL: 0, t.TRUE: 0, t.FALSE: 0, t.UINT0: 0, t.ULONG0: 0, t.LIST0: 0,
    t.BOOLEAN: 1, t.UBYTE: 1, t.BYTE: 1, t.SMALLUINT: 1, t.SMALLULONG: 1, t.SMALLINT: 1,
    t.SMALLLONG: 1, t.USHORT: 2, t.SHORT: 2, t.UINT: 4, t.INT: 4, t.FLOAT: 4, t.CHAR: 4,
    t.DECIMAL32: 4, t.ULONG: 8, t.LONG: 8, t.DOUBLE: 8, t.TIMESTAMP: 8, t.DECIMAL64: 8,
    t.UUID: 16, t.DECIMAL128: 16,
}


_VARIABLE_1 = frozenset((t.VBIN8, t.STR8, t.SYM8, t.LIST8, t.MAP8, t.ARRAY8))
_VARIABLE_4 = frozenset((t.VBIN32, t.STR32, t.SYM32, t.LIST32, t.MAP32, t.ARRAY32))


def skip(buf, offset=0, depth=0):
    """Return the offset just past the value starting at C{offset}, without decoding it.

    This is how the broker walks a message's sections without touching the body (S10.1,
    design rule 2).

    @raise DecodeError: the value is truncated or its constructor unknown.
    """
    n = len(buf)
    if offset >= n:
        raise DecodeError("expected a value, found end of data", offset)
    code = buf[offset]
    offset += 1
    if code == t.DESCRIBED:
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply", offset)
        return skip(buf, skip(buf, offset, depth + 1), depth + 1)
    width = _FIXED_WIDTH.get(code)
    if width is not None:
        end = offset + width
    elif code in _VARIABLE_1:
        if offset + 1 > n:
            raise DecodeError("truncated size field", offset)
        end = offset + 1 + buf[offset]
    elif code in _VARIABLE_4:
        if offset + 4 > n:
            raise DecodeError("truncated size field", offset)
        end = offset + 4 + _u32.unpack_from(buf, offset)[0]
    else:
        raise DecodeError(f"unknown constructor {code:#04x}", offset - 1)
    if end > n:
        raise DecodeError("truncated value", offset)
    return end


# -- encoding -------------------------------------------------------------------------------

def _w_null(out, value):
    out.append(t.NULL)


def _w_bool(out, value):
    out.append(t.TRUE if value else t.FALSE)


def _w_ubyte(out, value):
    out.append(t.UBYTE)
    out.append(value)


def _w_ushort(out, value):
    out.append(t.USHORT)
    out += _u16.pack(value)


def _unsigned(zero, small, wide, fmt):
    """uint and ulong share a shape: a zero-width 0, a one-byte form, the full width."""
    def write(out, value):
        if value == 0:
            out.append(zero)
        elif value < 256:
            out.append(small)
            out.append(value)
        else:
            out.append(wide)
            out += fmt.pack(value)
    return write


_w_uint = _unsigned(t.UINT0, t.SMALLUINT, t.UINT, _u32)
_w_ulong = _unsigned(t.ULONG0, t.SMALLULONG, t.ULONG, _u64)


def _w_byte(out, value):
    out.append(t.BYTE)
    out += _i8.pack(value)


def _w_short(out, value):
    out.append(t.SHORT)
    out += _i16.pack(value)


def _w_int(out, value):
    if -128 <= value <= 127:
        out.append(t.SMALLINT)
        out += _i8.pack(value)
    else:
        out.append(t.INT)
        out += _i32.pack(value)


def _w_long(out, value):
    if -128 <= value <= 127:
        out.append(t.SMALLLONG)
        out += _i8.pack(value)
    elif -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        out.append(t.LONG)
        out += _i64.pack(value)
    elif 0 <= value <= 0xFFFFFFFFFFFFFFFF:
        _w_ulong(out, value)
    else:
        raise EncodeError(f"integer out of AMQP range: {value}")


def _w_float(out, value):
    out.append(t.FLOAT)
    out += _f32.pack(value)


def _w_double(out, value):
    out.append(t.DOUBLE)
    out += _f64.pack(value)


def _w_char(out, value):
    out.append(t.CHAR)
    out += _u32.pack(ord(value))


def _w_timestamp(out, value):
    out.append(t.TIMESTAMP)
    out += _i64.pack(value)


def _w_uuid(out, value):
    if not isinstance(value, uuid.UUID):
        value = uuid.UUID(bytes=bytes(value))
    out.append(t.UUID)
    out += value.bytes


def _w_decimal(code):
    def write(out, value):
        out.append(code)
        out += value
    return write


def _w_variable(short_code, long_code, to_bytes):
    def write(out, value):
        data = to_bytes(value)
        n = len(data)
        if n < 256:
            out.append(short_code)
            out.append(n)
        else:
            out.append(long_code)
            out += _u32.pack(n)
        out += data
    return write


_w_binary = _w_variable(t.VBIN8, t.VBIN32, lambda v: v)
_w_string = _w_variable(t.STR8, t.STR32, lambda v: v.encode("utf-8"))
_w_symbol = _w_variable(t.SYM8, t.SYM32, lambda v: v.encode("ascii"))


def _compound_header(out, short_code, long_code, count, body, wide=False):
    size = len(body)
    if not wide and size + 1 <= 255 and count <= 255:
        out.append(short_code)
        out.append(size + 1)
        out.append(count)
    else:
        out.append(long_code)
        out += _u32u32.pack(size + 4, count)
    out += body


def _list_body(value):
    body = bytearray()
    for item in value:
        encode_value(body, item)
    return body


def _map_body(value):
    body = bytearray()
    for key, item in value.items():
        encode_value(body, key)
        encode_value(body, item)
    return body


def _w_list(out, value, wide=False):
    if not value and not wide:
        out.append(t.LIST0)
        return
    _compound_header(out, t.LIST8, t.LIST32, len(value), _list_body(value), wide)


def _w_map(out, value, wide=False):
    _compound_header(out, t.MAP8, t.MAP32, 2 * len(value), _map_body(value), wide)


def _w_described(out, value):
    out.append(t.DESCRIBED)
    descriptor = value.descriptor
    if isinstance(descriptor, Symbol):
        _w_symbol(out, descriptor)
    else:
        _w_ulong(out, descriptor)
    encode_value(out, value.value)


# Element writers for arrays: the constructor is written once, the bodies without it.
def _array_element_code(items):
    first = items[0]
    if isinstance(first, Symbol):
        return t.SYM32 if any(len(x) > 255 for x in items) else t.SYM8
    if isinstance(first, str):
        return t.STR32
    if isinstance(first, (bytes, bytearray)):
        return t.VBIN32
    if isinstance(first, bool):
        return t.BOOLEAN
    for wrapper, code in _ARRAY_INT_CODES:
        if isinstance(first, wrapper):
            return code
    if isinstance(first, int):
        return t.LONG
    if isinstance(first, Float32):
        return t.FLOAT
    if isinstance(first, float):
        return t.DOUBLE
    if isinstance(first, uuid.UUID):
        return t.UUID
    raise EncodeError(f"cannot encode an array of {type(first).__name__}")


def _element_body(code, value):
    """Encode C{value} with constructor C{code} and strip the constructor byte."""
    scratch = bytearray()
    writer = _ELEMENT_WRITERS.get(code)
    if writer is None:
        raise EncodeError(f"unsupported array element constructor {code:#04x}")
    writer(scratch, value)
    return scratch[1:]


def _w_array(out, value):
    items = list(value)
    code = value.code if isinstance(value, Array) and value.code is not None else (
        _array_element_code(items) if items else t.SYM8)
    body = bytearray([code])
    for item in items:
        body += _element_body(code, item)
    count = len(items)
    if len(body) + 1 <= 255 and count <= 255:
        out.append(t.ARRAY8)
        out.append(len(body) + 1)
        out.append(count)
    else:
        out.append(t.ARRAY32)
        out += _u32u32.pack(len(body) + 4, count)
    out += body


def _wide(code, fmt):
    def write(out, value):
        out.append(code)
        out += fmt.pack(value)
    return write


def _wide_variable(code, to_bytes):
    """A variable-width writer fixed to one constructor (arrays need one for all)."""
    size = _u32 if code in _VARIABLE_4 else _u8

    def write(out, value):
        data = to_bytes(value)
        out.append(code)
        out += size.pack(len(data))
        out += data
    return write


_ELEMENT_WRITERS = {
    t.SYM8: _wide_variable(t.SYM8, lambda v: v.encode("ascii")),
    t.SYM32: _wide_variable(t.SYM32, lambda v: v.encode("ascii")),
    t.STR8: _wide_variable(t.STR8, lambda v: v.encode("utf-8")),
    t.STR32: _wide_variable(t.STR32, lambda v: v.encode("utf-8")),
    t.VBIN8: _wide_variable(t.VBIN8, bytes),
    t.VBIN32: _wide_variable(t.VBIN32, bytes),
    t.BOOLEAN: lambda out, v: out.extend((t.BOOLEAN, 1 if v else 0)),
    t.UBYTE: _wide(t.UBYTE, _u8), t.USHORT: _wide(t.USHORT, _u16),
    t.UINT: _wide(t.UINT, _u32), t.ULONG: _wide(t.ULONG, _u64),
    t.BYTE: _wide(t.BYTE, _i8), t.SHORT: _wide(t.SHORT, _i16),
    t.INT: _wide(t.INT, _i32), t.LONG: _wide(t.LONG, _i64),
    t.FLOAT: _wide(t.FLOAT, _f32), t.DOUBLE: _wide(t.DOUBLE, _f64),
    t.TIMESTAMP: _wide(t.TIMESTAMP, _i64),
    t.UUID: _w_uuid, t.CHAR: _w_char,
    t.LIST32: lambda out, v: _w_list(out, v, wide=True),
    t.MAP32: lambda out, v: _w_map(out, v, wide=True),
}


_ARRAY_INT_CODES = (
    (UByte, t.UBYTE), (UShort, t.USHORT), (UInt, t.UINT), (ULong, t.ULONG),
    (Byte, t.BYTE), (Short, t.SHORT), (Int, t.INT), (Timestamp, t.TIMESTAMP), (Long, t.LONG),
)

# Dispatch on the exact Python type first (fast), then on isinstance for subclasses.
_WRITERS = {
    type(None): _w_null, bool: _w_bool, int: _w_long, float: _w_double, str: _w_string,
    bytes: _w_binary, bytearray: _w_binary, memoryview: lambda out, v: _w_binary(out, bytes(v)),
    list: _w_list, tuple: _w_list, dict: _w_map, uuid.UUID: _w_uuid,
    Symbol: _w_symbol, Described: _w_described, Array: _w_array,
    UByte: _w_ubyte, UShort: _w_ushort, UInt: _w_uint, ULong: _w_ulong, Byte: _w_byte,
    Short: _w_short, Int: _w_int, Long: _w_long, Float32: _w_float, Char: _w_char,
    Timestamp: _w_timestamp, Decimal32: _w_decimal(t.DECIMAL32),
    Decimal64: _w_decimal(t.DECIMAL64), Decimal128: _w_decimal(t.DECIMAL128),
}


def encode_value(out, value):
    """Append the encoding of C{value} to the bytearray C{out}."""
    writer = _WRITERS.get(type(value))
    if writer is None:
        for kind, candidate in _WRITERS.items():
            if kind is not type(None) and isinstance(value, kind):
                writer = candidate
                break
        else:
            raise EncodeError(f"cannot encode {type(value).__name__} as AMQP")
    writer(out, value)


def encode(value):
    """Return the encoding of one value as bytes."""
    out = bytearray()
    encode_value(out, value)
    return bytes(out)


def _nullable(writer):
    def write(out, value):
        if value is None:
            out.append(t.NULL)
        else:
            writer(out, value)
    return write


def _w_symbol_multiple(out, value):
    """A field declared C{symbol multiple="true"}: one symbol or an array of them."""
    if isinstance(value, (list, tuple)):
        _w_array(out, Array([Symbol(v) for v in value]))
    else:
        _w_symbol(out, value)


# Writers by AMQP type name, for field tables (performatives, message sections).
_BY_NAME = {
    "boolean": _w_bool, "ubyte": _w_ubyte, "ushort": _w_ushort, "uint": _w_uint,
    "ulong": _w_ulong, "byte": _w_byte, "short": _w_short, "int": _w_int, "long": _w_long,
    "float": _w_float, "double": _w_double, "char": _w_char, "timestamp": _w_timestamp,
    "uuid": _w_uuid, "binary": _w_binary, "string": _w_string, "symbol": _w_symbol,
    "symbols": _w_symbol_multiple, "list": _w_list, "map": _w_map, "*": encode_value,
}


def encode_as(type_name):
    """Return a writer C{(out, value)} that encodes a value as the named AMQP type.

    C{None} is written as null for every type. C{"*"} means any type (the value's own).
    C{"symbols"} is a symbol field with C{multiple="true"}.
    """
    try:
        return _nullable(_BY_NAME[type_name])
    except KeyError:
        raise EncodeError(f"unknown AMQP type name {type_name!r}") from None
