"""
AMQP 1.0 type system values (OASIS AMQP 1.0 Part 1, "Types").

Theory of operation: Python's own types carry the common cases without wrapping, so the
codec stays fast where it matters (performatives, message properties):

    None -> null, bool -> boolean, int -> long, float -> double, str -> string,
    bytes -> binary, list -> list, dict -> map, uuid.UUID -> uuid

A value that needs another AMQP type says so with one of the thin wrappers below
(``UInt(5)``, ``Symbol("x-opt-foo")``, ``Timestamp(ms)``). Decoding returns plain ``int``
and ``float`` for every integer and floating type, because the broker never re-encodes a
message it only routes; the wrappers it keeps on decode are those whose meaning differs
from the plain type: Symbol, Timestamp, Char, the decimals, Described and Array.

Constructor codes are named here, in hex, once (Part 1 section 1.6).
"""

__all__ = [
    "Symbol", "Described", "Array", "UByte", "UShort", "UInt", "ULong", "Byte", "Short",
    "Int", "Long", "Float32", "Char", "Timestamp", "Decimal32", "Decimal64", "Decimal128",
]

# -- constructor codes (Part 1 section 1.6) ------------------------------------------------
DESCRIBED = 0x00
NULL = 0x40
TRUE = 0x41
FALSE = 0x42
BOOLEAN = 0x56
UBYTE = 0x50
USHORT = 0x60
UINT = 0x70
SMALLUINT = 0x52
UINT0 = 0x43
ULONG = 0x80
SMALLULONG = 0x53
ULONG0 = 0x44
BYTE = 0x51
SHORT = 0x61
INT = 0x71
SMALLINT = 0x54
LONG = 0x81
SMALLLONG = 0x55
FLOAT = 0x72
DOUBLE = 0x82
DECIMAL32 = 0x74
DECIMAL64 = 0x84
DECIMAL128 = 0x94
CHAR = 0x73
TIMESTAMP = 0x83
UUID = 0x98
VBIN8 = 0xA0
VBIN32 = 0xB0
STR8 = 0xA1
STR32 = 0xB1
SYM8 = 0xA3
SYM32 = 0xB3
LIST0 = 0x45
LIST8 = 0xC0
LIST32 = 0xD0
MAP8 = 0xC1
MAP32 = 0xD1
ARRAY8 = 0xE0
ARRAY32 = 0xF0


class Symbol(str):
    """An AMQP symbol: ASCII text used for names (conditions, capabilities, keys)."""

    __slots__ = ()

    def __repr__(self):
        return f"Symbol({str.__repr__(self)})"


class Described:
    """A described type: a descriptor (ulong code or Symbol) and the value it describes."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor, value):
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other):
        if not isinstance(other, Described):
            return NotImplemented
        return self.descriptor == other.descriptor and self.value == other.value

    def __hash__(self):
        return hash((self.descriptor, repr(self.value)))

    def __repr__(self):
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array(list):
    """An AMQP array: every element has the same constructor.

    @ivar code: the element constructor code, or None to infer it from the first element.
    """

    def __init__(self, items=(), code=None):
        super().__init__(items)
        self.code = code

    def __repr__(self):
        return f"Array({list.__repr__(self)}, code={self.code!r})"


def _int_type(name, lo, hi):
    def __new__(cls, value=0):
        value = int.__new__(cls, value)
        if not lo <= value <= hi:
            raise ValueError(f"{name} out of range [{lo}, {hi}]: {int(value)}")
        return value

    def __repr__(self):
        return f"{name}({int(self)})"

    return type(name, (int,), {"__slots__": (), "__new__": __new__, "__repr__": __repr__})


UByte = _int_type("UByte", 0, 0xFF)
UShort = _int_type("UShort", 0, 0xFFFF)
UInt = _int_type("UInt", 0, 0xFFFFFFFF)
ULong = _int_type("ULong", 0, 0xFFFFFFFFFFFFFFFF)
Byte = _int_type("Byte", -0x80, 0x7F)
Short = _int_type("Short", -0x8000, 0x7FFF)
Int = _int_type("Int", -0x80000000, 0x7FFFFFFF)
Long = _int_type("Long", -0x8000000000000000, 0x7FFFFFFFFFFFFFFF)
Timestamp = _int_type("Timestamp", -0x8000000000000000, 0x7FFFFFFFFFFFFFFF)
Timestamp.__doc__ = "Milliseconds since the Unix epoch (AMQP timestamp)."


class Float32(float):
    """An IEEE 754 single-precision value (AMQP float)."""

    __slots__ = ()


class Char(str):
    """One Unicode code point (AMQP char, UTF-32BE on the wire)."""

    __slots__ = ()

    def __new__(cls, value):
        if len(value) != 1:
            raise ValueError(f"Char takes exactly one code point, got {value!r}")
        return str.__new__(cls, value)


class _Decimal(bytes):
    """An IEEE 754 decimal kept as its raw bytes: the broker never computes with them."""

    width = 0

    def __new__(cls, raw):
        if len(raw) != cls.width:
            raise ValueError(f"{cls.__name__} takes {cls.width} bytes, got {len(raw)}")
        return bytes.__new__(cls, raw)


class Decimal32(_Decimal):
    width = 4


class Decimal64(_Decimal):
    width = 8


class Decimal128(_Decimal):
    width = 16
