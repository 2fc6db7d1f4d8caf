"""Composite types declared as field tables (S10.1; AMQP 1.0 Part 2 section 2.7, Part 3,
Part 5): round trips, defaults, trailing nulls, symbol-multiple fields, bad input."""

import pytest

from mqgate.amqp import codec
from mqgate.amqp import performatives as p
from mqgate.amqp.codec import DecodeError, decode
from mqgate.amqp.performatives import (
    Accepted, Attach, Begin, Close, Coordinator, DeleteOnClose, Detach, Disposition, End,
    Error, Flow, Modified, Open, Received, Rejected, Released, SaslChallenge, SaslInit,
    SaslMechanisms, SaslOutcome, SaslResponse, Source, Target, Transfer, encode_composite,
    from_described,
)
from mqgate.amqp.types import Array, Described, Symbol, ULong


def reread(composite):
    """Encode a composite and read it back through the generic decoder."""
    data = encode_composite(composite)
    value, end = decode(data)
    assert end == len(data)
    assert isinstance(value, Described)
    return from_described(value)


ERROR = Error(Symbol("amqp:not-found"), "no such queue", {Symbol("node"): "q1"})
SOURCE = Source(address="q1", durable=2, expiry_policy=Symbol("never"), timeout=30,
                dynamic=False, dynamic_node_properties={Symbol("x"): 1},
                distribution_mode=Symbol("move"),
                filter={Symbol("selector"): Described(Symbol("apache.org:selector-filter:string"),
                                                      "a = 1")},
                default_outcome=Released(),
                outcomes=(Symbol("amqp:accepted:list"), Symbol("amqp:released:list")),
                capabilities=(Symbol("queue"),))
TARGET = Target(address="topic://t", durable=1, expiry_policy=Symbol("link-detach"),
                timeout=5, dynamic=True, dynamic_node_properties={Symbol("y"): "z"},
                capabilities=(Symbol("topic"),))

COMPOSITES = [
    Open(container_id="c-1", hostname="h", max_frame_size=4096, channel_max=9,
         idle_time_out=30000, outgoing_locales=(Symbol("en-US"),),
         incoming_locales=(Symbol("en-US"), Symbol("fr")),
         offered_capabilities=(Symbol("ANONYMOUS-RELAY"),),
         desired_capabilities=(Symbol("DELAYED_DELIVERY"),),
         properties={Symbol("product"): "mqgate"}),
    Begin(remote_channel=3, next_outgoing_id=7, incoming_window=100, outgoing_window=200,
          handle_max=15, offered_capabilities=(Symbol("a"),),
          desired_capabilities=(Symbol("b"),), properties={Symbol("k"): 1}),
    Attach(name="link", handle=2, role=p.RECEIVER, snd_settle_mode=p.SND_SETTLED,
           rcv_settle_mode=p.RCV_SECOND, source=SOURCE, target=TARGET,
           unsettled={b"tag": Described(ULong(0x24), [])}, incomplete_unsettled=True,
           initial_delivery_count=10, max_message_size=2**40,
           offered_capabilities=(Symbol("x"),), desired_capabilities=(Symbol("y"),),
           properties={Symbol("p"): True}),
    Attach(name="coord", handle=0, role=p.SENDER, source=Source(), target=Coordinator(
        capabilities=(Symbol("amqp:local-transactions"),)), initial_delivery_count=0),
    Flow(next_incoming_id=1, incoming_window=2, next_outgoing_id=3, outgoing_window=4,
         handle=5, delivery_count=6, link_credit=7, available=8, drain=True, echo=True,
         properties={Symbol("f"): 0}),
    Transfer(handle=1, delivery_id=2**32 - 1, delivery_tag=b"\x00\x01", message_format=0,
             settled=True, more=True, rcv_settle_mode=p.RCV_FIRST,
             state=Received(section_number=1, section_offset=10), resume=True, aborted=False,
             batchable=True),
    Disposition(role=p.RECEIVER, first=1, last=100, settled=True,
                state=Rejected(error=ERROR), batchable=True),
    Disposition(role=p.SENDER, first=5, settled=False,
                state=Modified(delivery_failed=True, undeliverable_here=False,
                               message_annotations={Symbol("x-opt-a"): 1})),
    Detach(handle=4, closed=True, error=ERROR),
    End(error=ERROR),
    End(),
    Close(error=Error(Symbol("amqp:connection:forced"))),
    Close(),
    ERROR,
    SaslMechanisms(sasl_server_mechanisms=(Symbol("PLAIN"), Symbol("ANONYMOUS"))),
    SaslInit(mechanism=Symbol("PLAIN"), initial_response=b"\x00u\x00p", hostname="h"),
    SaslChallenge(challenge=b"c"),
    SaslResponse(response=b"r"),
    SaslOutcome(code=1, additional_data=b"why"),
    Received(section_number=0, section_offset=0),
    Accepted(), Released(), DeleteOnClose(),
    Rejected(), Modified(),
    SOURCE, TARGET,
]


@pytest.mark.parametrize("composite", COMPOSITES, ids=lambda c: type(c).__name__)
def test_round_trip(composite):
    """S10.1: every composite, with every field set, survives encode_composite and
    from_described unchanged (nested errors, termini and outcomes included)."""
    assert reread(composite) == composite


@pytest.mark.parametrize("cls", sorted({type(c) for c in COMPOSITES}, key=lambda c: c.CODE),
                         ids=lambda c: c.__name__)
def test_symbolic_descriptor(cls):
    """S10.1: a composite described by its symbolic name reads like the numeric code."""
    value = Described(Symbol(cls.NAME), [])
    assert type(from_described(value)) is cls
    assert type(from_described(Described(ULong(cls.CODE), []))) is cls


def test_descriptor_codes_match_the_spec():
    """S10.1: descriptor codes are those of Part 2 section 2.7 and Part 3/5."""
    codes = {Open: 0x10, Begin: 0x11, Attach: 0x12, Flow: 0x13, Transfer: 0x14,
             Disposition: 0x15, Detach: 0x16, End: 0x17, Close: 0x18, Error: 0x1D,
             Received: 0x23, Accepted: 0x24, Rejected: 0x25, Released: 0x26, Modified: 0x27,
             Source: 0x28, Target: 0x29, DeleteOnClose: 0x2B, Coordinator: 0x30,
             SaslMechanisms: 0x40, SaslInit: 0x41, SaslChallenge: 0x42, SaslResponse: 0x43,
             SaslOutcome: 0x44}
    for cls, code in codes.items():
        assert cls.CODE == code
        assert encode_composite(cls())[:3] == bytes([0x00, 0x53, code])


def test_defaults_for_missing_fields():
    """S10.1: fields absent from the encoded list take their spec defaults."""
    open_ = from_described(Described(ULong(0x10), ["c"]))
    assert open_.container_id == "c"
    assert open_.max_frame_size == 0xFFFFFFFF
    assert open_.channel_max == 0xFFFF
    assert open_.idle_time_out is None
    attach = from_described(Described(ULong(0x12), ["n", 0, True]))
    assert attach.snd_settle_mode == p.SND_MIXED
    assert attach.rcv_settle_mode == p.RCV_FIRST
    assert attach.incomplete_unsettled is False
    source = from_described(Described(ULong(0x28), []))
    assert source.durable == 0
    assert source.expiry_policy == Symbol("session-end")
    assert source.timeout == 0
    assert source.dynamic is False
    flow = from_described(Described(ULong(0x13), [None, 1, 0, 1]))
    assert flow.drain is False and flow.echo is False and flow.handle is None


def test_null_fields_take_defaults():
    """S10.1: a field encoded as null takes its default, like a missing one."""
    open_ = from_described(Described(ULong(0x10), ["c", None, None, None]))
    assert open_.max_frame_size == 0xFFFFFFFF
    assert open_.channel_max == 0xFFFF
    begin = from_described(Described(ULong(0x11), [None, 0, 1, 1, None]))
    assert begin.handle_max == 0xFFFFFFFF


def test_trailing_nulls_are_dropped():
    """S10.1 (Part 1 section 1.3): trailing null fields are not written; inner nulls are."""
    assert encode_composite(Error(Symbol("x"))) == b"\x00\x53\x1d\xc0\x04\x01\xa3\x01x"
    assert encode_composite(Error(None, "d")) == b"\x00\x53\x1d\xc0\x05\x02\x40\xa1\x01d"
    assert encode_composite(SaslInit(mechanism=Symbol("PLAIN"))) == (
        b"\x00\x53\x41\xc0\x08\x01\xa3\x05PLAIN")
    assert encode_composite(Close()) == b"\x00\x53\x18\x45"
    assert encode_composite(Accepted()) == b"\x00\x53\x24\x45"


def test_declared_field_types_are_used():
    """S10.1: a plain int in a uint field is written as uint, in a ushort field as ushort."""
    data = encode_composite(Begin(remote_channel=1, next_outgoing_id=5, incoming_window=0,
                                  outgoing_window=300, handle_max=None))
    fields = data[3:]
    # list8, size, count 4, ushort 1, smalluint 5, uint0, uint 300
    assert fields == b"\xc0\x0c\x04\x60\x00\x01\x52\x05\x43\x70\x00\x00\x01\x2c"


def test_large_composite_uses_list32():
    """S10.1: a composite whose fields exceed 255 bytes is written as a list32."""
    big = Open(container_id="c" * 300)
    data = encode_composite(big)
    assert data[3] == 0xD0
    assert reread(big) == big


def test_symbol_multiple_accepts_one_symbol():
    """S10.1 (Part 1 section 1.3): a multiple symbol field holding one symbol reads as a
    one-element tuple."""
    data = (b"\x00\x53\x40" + codec.encode([Symbol("PLAIN")]))
    mechanisms = from_described(decode(data)[0])
    assert mechanisms.sasl_server_mechanisms == (Symbol("PLAIN"),)
    assert encode_composite(SaslMechanisms(sasl_server_mechanisms=Symbol("PLAIN"))) == data


def test_symbol_multiple_accepts_an_array():
    """S10.1: a multiple symbol field holding an array reads as a tuple of symbols."""
    data = b"\x00\x53\x40" + codec.encode([Array([Symbol("PLAIN"), Symbol("ANONYMOUS")])])
    mechanisms = from_described(decode(data)[0])
    assert mechanisms.sasl_server_mechanisms == (Symbol("PLAIN"), Symbol("ANONYMOUS"))
    assert isinstance(mechanisms.sasl_server_mechanisms, tuple)


def test_symbol_multiple_with_a_long_symbol():
    """S10.1: a multiple symbol field holding a 300-character symbol round trips (the
    array switches to sym32 elements)."""
    open_ = Open(container_id="c", offered_capabilities=(Symbol("a" * 300), Symbol("b")))
    assert reread(open_).offered_capabilities == (Symbol("a" * 300), Symbol("b"))


def test_unknown_descriptor():
    """S10.4: a descriptor no table declares raises DecodeError."""
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x99), []))
    with pytest.raises(DecodeError):
        from_described(Described(Symbol("example:nope:list"), []))


def test_composite_must_be_a_list():
    """S10.4: a known descriptor around something other than a list raises DecodeError."""
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x10), "not a list"))
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x10), {"a": 1}))


def test_composite_field_must_be_described():
    """S10.4: a terminus, error or outcome field holding a plain value raises DecodeError."""
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x12), ["n", 0, True, None, None, "plain"]))
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x18), [5]))


def test_composite_field_with_bad_contents():
    """S10.4: a nested composite that is itself malformed raises DecodeError."""
    bad_source = Described(ULong(0x28), "nope")
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x12), ["n", 0, True, None, None, bad_source]))
    unknown = Described(ULong(0x77777), [])
    with pytest.raises(DecodeError):
        from_described(Described(ULong(0x15), [True, 0, 0, True, unknown]))


def test_constructor_rejects_unknown_fields():
    """S10.1: a composite cannot be built with a field its table does not declare."""
    with pytest.raises(TypeError):
        Open(container_id="c", no_such_field=1)


def test_positional_construction_and_repr():
    """S10.1: fields can be given in table order; repr names the non-default ones."""
    error = Error(Symbol("amqp:not-found"), "gone")
    assert error.condition == Symbol("amqp:not-found") and error.description == "gone"
    assert repr(error) == "Error(condition=Symbol('amqp:not-found'), description='gone')"
    assert repr(Flow()) == "Flow()"


def test_equality_is_by_type_and_fields():
    """S10.1: composites compare by type and field values."""
    assert Accepted() == Accepted()
    assert Accepted() != Released()
    assert Error(Symbol("a")) != Error(Symbol("b"))
    assert Error(Symbol("a")) != "Error"
