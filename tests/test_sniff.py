"""Tests for protocol sniffing on shared ports (S1.1: AMQP and STOMP on one port)."""

import pytest
from hypothesis import given, strategies as st

from mqgate.sniff import (
    AMQP, AMQP_SASL, AMQP_TLS, HTTP, HTTP_METHODS, NEED_MORE, SNIFF_BUDGET, STOMP, TLS,
    UNKNOWN, Kind, sniff)

CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"

#: One whole example per pattern alternative, each followed by what a client sends next.
EXAMPLES = [
    (b"AMQP\x00\x01\x00\x00", AMQP, b"\x00\x00\x00\x8f\x02\x00\x00\x00"),
    (b"AMQP\x03\x01\x00\x00", AMQP_SASL, b"\x00\x00\x00\x21"),
    (b"AMQP\x02\x01\x00\x00", AMQP_TLS, CLIENT_HELLO),
    (b"CONNECT\n", STOMP, b"accept-version:1.2\nhost:/\n\n\x00"),
    (b"CONNECT\r", STOMP, b"\naccept-version:1.2\r\n\r\n\x00"),
    (b"STOMP\n", STOMP, b"accept-version:1.2\n\n\x00"),
    (b"STOMP\r", STOMP, b"\n\r\n\x00"),
    (b"\nCONNECT\n", STOMP, b"\n\x00"),
    (b"\r\n\n\r\nSTOMP\r", STOMP, b"\n\r\n\x00"),
    (CLIENT_HELLO[:6], TLS, CLIENT_HELLO[6:]),
] + [(method + b" ", HTTP, b"/ HTTP/1.1\r\nHost: x\r\n\r\n") for method in HTTP_METHODS]

#: The examples whose bytes are all fixed and that start with their command (not TLS,
#: whose length bytes are free, nor the STOMP frames after heart-beats).
LITERALS = [head for head, kind, _ in EXAMPLES if kind is not TLS and head[:1] not in b"\r\n"]

IDS = [repr(head) for head, _, _ in EXAMPLES]


@pytest.mark.parametrize("head, kind, tail", EXAMPLES, ids=IDS)
def test_every_proper_prefix_of_a_pattern_needs_more(head, kind, tail):
    """Every proper prefix of every pattern (the empty one too) is NEED_MORE (S1.1)."""
    for n in range(len(head)):
        assert sniff(head[:n]) is NEED_MORE, head[:n]


@pytest.mark.parametrize("head, kind, tail", EXAMPLES, ids=IDS)
def test_whole_pattern_classifies_with_or_without_what_follows(head, kind, tail):
    """A whole pattern is classified, alone or with the protocol bytes after it (S1.1)."""
    assert sniff(head) is kind
    assert sniff(head + tail) is kind


@pytest.mark.parametrize("head, kind, tail", EXAMPLES, ids=IDS)
def test_byte_at_a_time_decides_exactly_at_the_end_of_the_pattern(head, kind, tail):
    """Fed one byte at a time, the answer turns from NEED_MORE to the kind at the
    pattern's last byte and stays there (S1.1)."""
    data = head + tail
    answers = [sniff(data[:n]) for n in range(1, len(data) + 1)]
    assert answers == [NEED_MORE] * (len(head) - 1) + [kind] * (len(data) - len(head) + 1)


@pytest.mark.parametrize("view", [bytearray, memoryview])
def test_accepts_bytearray_and_memoryview(view):
    """The prefix may be a bytearray or a memoryview of the receive buffer."""
    assert sniff(view(b"AMQP\x03\x01\x00\x00")) is AMQP_SASL


def test_exhaustive_next_byte_after_every_literal_prefix():
    """After every proper prefix of a fixed pattern, each of the 256 next bytes gives
    NEED_MORE or a kind exactly when it continues some pattern, else UNKNOWN at once."""
    prefixes = {head[:n] for head in LITERALS for n in range(len(head))}
    for prefix in sorted(prefixes):
        for byte in range(256):
            data = prefix + bytes((byte,))
            continues = any(head.startswith(data) for head in LITERALS)
            if not prefix and byte in b"\r\n\x16":
                continues = True        # a heart-beat EOL, or a TLS record
            answer = sniff(data)
            assert (answer is not UNKNOWN) == continues, (data, answer)


@pytest.mark.parametrize("eols", [b"\n", b"\r\n", b"\n\r\n\n"])
def test_exhaustive_next_byte_after_heart_beats(eols):
    """After leading EOLs only another EOL or the start of CONNECT/STOMP may follow."""
    for byte in range(256):
        expected = NEED_MORE if byte in b"CS\r\n" else UNKNOWN
        assert sniff(eols + bytes((byte,))) is expected, byte


def test_exhaustive_first_byte():
    """Only the first bytes of some pattern (or an EOL) keep the sniffer waiting."""
    starts = set(b"ACSGPHOD\r\n\x16")
    for byte in range(256):
        expected = NEED_MORE if byte in starts else UNKNOWN
        assert sniff(bytes((byte,))) is expected, byte


@pytest.mark.parametrize("minor", range(5))
def test_tls_versions_3_0_to_3_4_are_tls(minor):
    """A handshake record of version 3.0..3.4 starting a ClientHello is TLS."""
    assert sniff(b"\x16\x03" + bytes((minor,)) + b"\xff\xff\x01") is TLS


@pytest.mark.parametrize("data", [
    b"\x16\x02",                        # version 2.x
    b"\x16\x03\x05",                    # version 3.5 does not exist
    b"\x16\x03\x03\x00\x10\x02",        # a ServerHello, not a ClientHello
    b"\x17\x03\x03",                    # application data, not a handshake
])
def test_tls_lookalikes_are_unknown(data):
    """TLS is recognised only as a handshake record carrying a ClientHello."""
    assert sniff(data) is UNKNOWN


@pytest.mark.parametrize("data", [
    b"AMQP\x00\x00\x09\x01",            # AMQP 0-9-1: answered with our header (s2.2)
    b"AMQP\x00\x01\x00\x01",            # AMQP 1.0.1
    b"AMQP\x04",
    b"CONNECT host:443 HTTP/1.1",       # the HTTP CONNECT method is not in the list
    b"connect\n",                       # STOMP commands are case-sensitive
    b"CONNECTED\n",
    b"STOMP \n",
    b"GET\t/",
    b"get /",
    b"TRACE /",
    b"\nGET /",                         # after heart-beat EOLs only STOMP may follow
    b"\nAMQP",
    b"\rX",                             # a CR that is not part of CR LF
    b"\x00\x00\x00\x00",
    b"SSH-2.0-OpenSSH",
])
def test_garbage_is_unknown(data):
    """Bytes that cannot become any pattern are UNKNOWN."""
    assert sniff(data) is UNKNOWN


def test_unknown_is_decided_at_the_first_impossible_byte():
    """The sniffer says UNKNOWN at the first byte that leaves every pattern, not later."""
    assert sniff(b"AMQP\x00\x00") is UNKNOWN
    assert sniff(b"AMQP\x00") is NEED_MORE
    assert sniff(b"PUX") is UNKNOWN
    assert sniff(b"PU") is NEED_MORE


def test_heart_beats_within_budget_need_more():
    """Leading EOLs (STOMP heart-beats) keep the sniffer waiting below the budget."""
    assert sniff(b"\n" * (SNIFF_BUDGET - 1)) is NEED_MORE
    assert sniff(b"\r\n" * ((SNIFF_BUDGET - 2) // 2) + b"\r") is NEED_MORE
    assert sniff(b"\n" * (SNIFF_BUDGET - 8) + b"CONNECT") is NEED_MORE


def test_budget_turns_need_more_into_unknown():
    """After SNIFF_BUDGET bytes without a decision the answer is UNKNOWN (docs/design.md)."""
    assert sniff(b"\n" * SNIFF_BUDGET) is UNKNOWN
    assert sniff(b"\n" * (SNIFF_BUDGET - 4) + b"CONN") is UNKNOWN


def test_budget_answer_does_not_depend_on_arrivals():
    """Only the first SNIFF_BUDGET bytes count: a pattern completed past the budget is
    UNKNOWN whether the bytes came at once or in pieces (found by tests/fuzz)."""
    data = b"\n" * SNIFF_BUDGET + b"STOMP\n"
    assert sniff(data) is UNKNOWN
    assert sniff(data[:SNIFF_BUDGET]) is UNKNOWN
    assert sniff(b"\n" * (SNIFF_BUDGET - 6) + b"STOMP\n") is STOMP


def test_budget_covers_every_pattern():
    """Every pattern fits well inside the budget, so a real client is never cut short."""
    assert max(len(head) for head, _, _ in EXAMPLES) < SNIFF_BUDGET // 4


def test_kinds_are_configuration_names():
    """Kinds compare equal to the names a configuration uses (S1.1 protocols list)."""
    assert STOMP == "stomp" and AMQP_SASL == "amqp-sasl" and Kind("http") is HTTP


@given(st.binary(max_size=80), st.binary(max_size=20))
def test_answers_never_change_once_decided(data, more):
    """Once a prefix is a kind or UNKNOWN, any longer prefix gets the same answer."""
    first = sniff(data)
    assert isinstance(first, Kind)
    if first is not NEED_MORE:
        assert sniff(data + more) is first


@given(st.sampled_from(EXAMPLES), st.binary(max_size=30))
def test_any_bytes_after_a_pattern_keep_its_kind(example, tail):
    """What follows a whole pattern never changes its kind."""
    head, kind, _ = example
    assert sniff(head + tail) is kind
