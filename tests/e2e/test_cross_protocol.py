"""AMQP and STOMP on the same (sniffed) port, with messages crossing between them (S10.2,
S1.1).

Everything here goes through the C{jms} service, which tells an AMQP client from a STOMP
one by its first bytes: python-qpid-proton on one side, stomp.py on the other. The
mapping under test is docs/stomp-mapping.md; tests/glue/test_stomp_mapping.py checks it
row by row without a broker, these tests check that it holds on the wire.
"""

import random

import pytest
from proton import Message

from tests.e2e.proton_client import DEFAULT_TIMEOUT, opened
from tests.e2e.stomp_client import clients, unique


@pytest.fixture(scope="module")
def broker(module_broker):
    """One broker for the module, on the shipped configuration and OS-chosen ports."""
    return module_broker


@pytest.fixture
def open_client():
    """Open stomp.py clients; closed after the test."""
    with clients() as open_:
        yield open_


def amqp_receive(conn, address):
    """Receive one message from C{address} over AMQP and accept it."""
    receiver = conn.create_receiver(address)
    message = receiver.receive(timeout=DEFAULT_TIMEOUT)
    receiver.accept()
    receiver.close()
    return message


def test_amqp_binary_message_reaches_stomp_byte_for_byte(broker, open_client):
    """S10.2: an AMQP message with a 100 KiB data-section body and application properties
    arrives over STOMP with the same bytes as its body and the properties as headers."""
    name = unique("amqp-to-stomp")
    body = random.Random(5).randbytes(100 * 1024) + b"\x00\x00end"
    stomp = open_client(broker.address("jms"), "1.2")
    stomp.subscribe(f"/queue/{name}")
    with opened(broker) as conn:
        # inferred=True: a bytes body is sent as a data section, not an amqp-value
        # holding a binary (proton's Message.inferred).
        conn.create_sender(f"queue://{name}").send(Message(
            body=body, inferred=True, correlation_id="corr-7",
            properties={"colour": "red", "count": 42, "flag": True}))
    [message] = stomp.collector.wait_for_messages(1)
    assert bytes(message.body) == body
    headers = message.headers
    assert (headers["colour"], headers["count"], headers["flag"]) == ("red", "42", "true")
    assert headers["correlation-id"] == "corr-7"
    assert headers["destination"] == f"/queue/{name}"
    assert "transformation" not in headers


def test_stomp_send_reaches_amqp_with_properties_and_fields(broker, open_client):
    """S10.2: a STOMP SEND's custom headers arrive over AMQP as application properties,
    and persistent, priority, correlation-id, reply-to and content-type as the AMQP
    header and properties fields."""
    name = unique("stomp-to-amqp")
    stomp = open_client(broker.address("jms"), "1.2")
    stomp.send(f"/queue/{name}", b"payload \x00 bytes", **{
        "colour": "green", "x-count": "5", "persistent": "true", "priority": "7",
        "correlation-id": "corr-9", "reply-to": "/queue/replies",
        "content-type": "application/x-test"})
    with opened(broker) as conn:
        message = amqp_receive(conn, f"queue://{name}")
    assert message.properties == {"colour": "green", "x-count": "5"}
    assert bytes(message.body) == b"payload \x00 bytes"
    assert message.durable is True
    assert message.priority == 7
    assert message.correlation_id == "corr-9"
    assert message.reply_to == "/queue/replies"
    assert message.content_type == "application/x-test"
    assert message.address == f"/queue/{name}"


def test_amqp_value_string_arrives_as_text(broker, open_client):
    """S10.2: an AMQP amqp-value string body arrives over STOMP as UTF-8 text, marked
    with transformation:amqp-value-string and a text content-type."""
    name = unique("value")
    stomp = open_client(broker.address("jms"), "1.2")
    stomp.subscribe(f"/queue/{name}")
    with opened(broker) as conn:
        conn.create_sender(f"queue://{name}").send(Message(body="héllo wörld"))
    [message] = stomp.collector.wait_for_messages(1)
    assert bytes(message.body) == "héllo wörld".encode("utf-8")
    assert message.headers["transformation"] == "amqp-value-string"
    assert message.headers["content-type"].startswith("text/plain")


def test_amqp_and_stomp_clients_share_the_port(broker, open_client):
    """S1.1: an AMQP client and a STOMP client connected to the same port at once both
    work, each receiving what the other sends."""
    to_amqp, to_stomp = unique("to-amqp"), unique("to-stomp")
    stomp = open_client(broker.address("jms"), "1.2")
    stomp.subscribe(f"/queue/{to_stomp}")
    with opened(broker) as conn:
        receiver = conn.create_receiver(f"queue://{to_amqp}")
        stomp.send(f"/queue/{to_amqp}", b"stomp says hi")
        got = receiver.receive(timeout=DEFAULT_TIMEOUT)
        receiver.accept()
        assert bytes(got.body) == b"stomp says hi"
        conn.create_sender(f"queue://{to_stomp}").send(
            Message(body=b"amqp says hi", inferred=True))
        stomp.collector.wait_for_body(b"amqp says hi")
        # Both still connected and working: one more exchange each way.
        stomp.send(f"/queue/{to_amqp}", b"again")
        again = receiver.receive(timeout=DEFAULT_TIMEOUT)
        receiver.accept()
        assert bytes(again.body) == b"again"
    assert stomp.connection.is_connected()
