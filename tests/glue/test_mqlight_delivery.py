"""What the MQ Light client needs on every delivery (S8.5): a header section, and a
C{properties.to}: the publisher's when it is a string, otherwise the service and the
subscription's pattern; every other section's bytes are kept."""

import pytest

from mqgate.amqp import codec
from mqgate.amqp.message import (
    AMQP_VALUE, Header, Properties, encode_message, parse_message, amended,
)
from mqgate.amqp.types import Described, Symbol
from mqgate.core.message import BrokerMessage
from mqgate.glue.mqlight_delivery import for_client, is_mqlight_link, pattern_of, service_url

SERVICE = "amqp://127.0.0.1:5672"


def message(**sections):
    return BrokerMessage(parse_message(encode_message("hello", **sections)))


def sections_after_properties(encoded):
    """The bytes of the application properties and body (after any properties)."""
    data = encoded.data
    pos = encoded.bare_start
    if data[pos:pos + 3] == b"\x00\x53\x73":
        pos = codec.skip(data, pos + 3)
    return data[pos:]


@pytest.mark.parametrize("name, pattern", [
    ("private:sports/+", "sports/+"),
    ("private:a:b", "a:b"),                      # only a share name stops at a colon
    ("share:fans:sports/#", "sports/#"),
    ("share:fans:a:b", "a:b"),
])
def test_pattern_of_link_names(name, pattern):
    assert is_mqlight_link(name)
    assert pattern_of(name) == pattern


@pytest.mark.parametrize("name", ["sports/football", "topic://x", "sub_1", None, "PRIVATE:x"])
def test_other_links_are_not_mqlight(name):
    assert not is_mqlight_link(name)


def test_service_url():
    assert service_url("127.0.0.1", 5672) == "amqp://127.0.0.1:5672"
    assert service_url("::1", 5671, tls=True) == "amqps://[::1]:5671"


def test_publishers_to_is_kept_as_is():
    """An MQ Light publisher's message goes out unchanged, bytes and all."""
    sent = message(header=Header(ttl=5000),
                   properties=Properties(to="amqp://host:5672/sports/football"))
    assert for_client(sent, SERVICE, "sports/+") is sent.payload


def test_message_without_header_gets_one():
    """A STOMP SEND converted to AMQP may have no header, on which the client fails;
    it gets an empty one, its to (a string) and body kept."""
    sent = message(properties=Properties(to="/topic/sports"))
    assert not sent.payload.has_header
    out = for_client(sent, SERVICE, "sports")
    assert out.has_header and out.header == Header()
    assert out.properties.to == "/topic/sports"
    assert out.body_sections() == [(AMQP_VALUE, "hello")]
    wire = parse_message(b"".join(bytes(c) for c in out.for_delivery(0)))
    assert wire.has_header and wire.properties.to == "/topic/sports"


def test_message_without_properties_gets_an_address():
    """A Proton sender that named the topic only as its link target: the client
    would fail on the missing to; it gets the service and pattern."""
    sent = message(header=Header(durable=True, ttl=5000),
                   message_annotations={Symbol("x-opt-a"): 1},
                   application_properties={"n": 5})
    out = for_client(sent, SERVICE, "sports/football")
    assert out.properties.to == "amqp://127.0.0.1:5672/sports/football"
    assert out.header == sent.payload.header == Header(durable=True, ttl=5000)
    assert out.message_annotations == {Symbol("x-opt-a"): 1}
    assert out.application_properties == {"n": 5}
    assert out.body_sections() == [(AMQP_VALUE, "hello")]
    assert sections_after_properties(out) == sections_after_properties(sent.payload)


def test_other_properties_are_kept():
    sent = message(properties=Properties(message_id="m1", subject="s",
                                         content_type=Symbol("text/plain")))
    out = for_client(sent, SERVICE, "news")
    assert (out.properties.to, out.properties.message_id, out.properties.subject,
            out.properties.content_type) == (f"{SERVICE}/news", "m1", "s", "text/plain")
    assert out.body_sections() == [(AMQP_VALUE, "hello")]


def test_to_that_is_not_a_string_is_replaced():
    """The client calls a string method on to: a binary address is as bad as none."""
    sent = message(properties=Properties(to=b"sports"))
    assert for_client(sent, SERVICE, "sports").properties.to == f"{SERVICE}/sports"


def test_delivery_annotations_are_still_dropped_on_the_way_out():
    data = (b"\x00\x53\x71" + codec.encode({Symbol("x-hop"): 1})
            + codec.encode(Described(AMQP_VALUE, "hi")))
    out = amended(parse_message(data), "amqp://h:1/t")
    sent = parse_message(b"".join(bytes(c) for c in out.for_delivery(0)))
    assert sent.properties.to == "amqp://h:1/t"
    assert sent.body_sections() == [(AMQP_VALUE, "hi")]
    assert b"x-hop" not in b"".join(bytes(c) for c in out.for_delivery(0))
