"""Address resolution and topic pattern matching (S2.1)."""

import pytest

from mqgate.core.addresses import (
    QUEUE, TOPIC, AddressError, canonical, is_pattern, resolve, topic_matches)
from mqgate.core.message import BrokerMessage
from mqgate.core.errors import CoreError, ErrorKind


@pytest.mark.parametrize("address, expected", [
    ("queue://orders", (QUEUE, "orders")),
    ("topic://prices.eur", (TOPIC, "prices.eur")),
    ("/queue/orders", (QUEUE, "orders")),
    ("/topic/prices.eur", (TOPIC, "prices.eur")),
])
def test_prefixed_addresses(address, expected):
    """S2.1: queue:// and topic:// (and STOMP's /queue/, /topic/) name the kind."""
    assert resolve(address) == expected


@pytest.mark.parametrize("capability, kind", [
    ("queue", QUEUE), ("topic", TOPIC),
    ("temporary-queue", QUEUE), ("temporary-topic", TOPIC),
])
def test_bare_name_takes_kind_from_capability(capability, kind):
    """S2.1: a bare name takes the kind named by a terminus capability."""
    assert resolve("x", ["other", capability]) == (kind, "x")


def test_single_symbol_capability():
    """S2.1: a capabilities field holding one symbol instead of a list still counts."""
    assert resolve("x", "topic") == (TOPIC, "x")


def test_bare_name_uses_default_type():
    """S2.1: a bare name without capabilities resolves by configuration."""
    assert resolve("x") == (QUEUE, "x")
    assert resolve("x", (), default_type=TOPIC) == (TOPIC, "x")


def test_prefix_wins_over_capability():
    """S2.1: an explicit queue:// prefix is not overridden by a topic capability."""
    assert resolve("queue://x", ["topic"]) == (QUEUE, "x")


@pytest.mark.parametrize("address", ["", "queue://", "topic://", "/queue/", None])
def test_empty_name_is_an_address_error(address):
    """S2.1: an address that names nothing is an amqp:invalid-field protocol error."""
    with pytest.raises(AddressError) as caught:
        resolve(address)
    assert isinstance(caught.value, CoreError)
    assert caught.value.kind is ErrorKind.INVALID


def test_canonical():
    """S2.1: the canonical address is kind://name."""
    assert canonical(TOPIC, "a.b") == "topic://a.b"


@pytest.mark.parametrize("pattern, name, matches", [
    ("a.b", "a.b", True),
    ("a.b", "a.c", False),
    ("a.*", "a.b", True),
    ("a.*", "a", False),
    ("a.*", "a.b.c", False),
    ("*.b", "a.b", True),
    ("a.*.c", "a.x.c", True),
    ("a.#", "a", True),
    ("a.#", "a.b", True),
    ("a.#", "a.b.c", True),
    ("a.#", "b.a", False),
    ("#", "anything.at.all", True),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "a.b.d", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.#.z", "a.b.z", True),
    ("a.#.*", "a", False),
    ("a.#.*", "a.b", True),
    ("a*", "ab", False),
])
def test_topic_matches(pattern, name, matches):
    """S2.1: '*' matches exactly one dotted level and '#' zero or more."""
    assert topic_matches(pattern, name) is matches


def test_is_pattern():
    """S2.1: only names with a '*' or '#' are wildcard patterns."""
    assert is_pattern("a.*") and is_pattern("#") and not is_pattern("a.b")


def test_message_fields():
    """S2.9: priority is clamped to 0..9 (default 4) and size is the payload length."""
    assert BrokerMessage(b"abc").priority == 4
    assert BrokerMessage(b"abc", priority=200).priority == 9
    assert BrokerMessage(b"abc", priority=-1).priority == 0
    assert BrokerMessage(b"abc").size == 3
    assert BrokerMessage(object()).size == 0
    assert BrokerMessage(b"").seq is None
