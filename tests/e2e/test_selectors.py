"""
End to end: message selectors from real clients (S2.8).

A STOMP subscription's ``selector`` header and an AMQP receiver's
``apache.org:selector-filter:string`` source filter reach the core's selectors; a message
goes only to consumers whose selector is true, and the others stay for other consumers.
"""

import pytest
from proton import Message
from proton.reactor import Filter
from proton import symbol, Described as ProtonDescribed

from tests.e2e.proton_client import connect, drain, receive_all
from tests.e2e.stomp_client import clients, unique

pytestmark = pytest.mark.e2e

SELECTOR_FILTER = symbol("apache.org:selector-filter:string")


def selector_filter(text):
    """The source filter Qpid JMS sends for a selector (FACTS section 5)."""
    return Filter({symbol("jms-selector"): ProtonDescribed(SELECTOR_FILTER, text)})


def test_amqp_selector_filter_picks_matching_messages(broker):
    """S2.8: an AMQP receiver with a selector filter gets only the matching messages; a
    plain receiver of the same queue still gets the rest, in order."""
    address = "queue://" + unique("sel")
    connection = connect(broker)
    try:
        red = connection.create_receiver(address, name="red",
                                         options=selector_filter("color = 'red'"))
        assert red.link.remote_source.filter is not None  # the filter is echoed
        sender = connection.create_sender(address)
        for i, color in enumerate(["red", "blue", "red", "green"]):
            sender.send(Message(body=f"m{i}", properties={"color": color}))
        got = receive_all(red, 2)
        assert [m.body for m in got] == ["m0", "m2"]
        plain = connection.create_receiver(address, name="plain")
        assert [m.body for m in receive_all(plain, 2)] == ["m1", "m3"]
        assert drain(connection, red, limit=10) == []
    finally:
        connection.close()


def test_amqp_invalid_selector_refuses_the_link(broker):
    """S2.8, S10.4: a selector that does not parse refuses the link with
    amqp:invalid-field and a description naming the position."""
    from proton import LinkException
    connection = connect(broker)
    try:
        with pytest.raises(LinkException) as info:
            connection.create_receiver("queue://" + unique("bad"),
                                       options=selector_filter("color = "))
        assert "invalid-field" in str(info.value) or "selector" in str(info.value)
        # The connection is still usable.
        address = "queue://" + unique("after")
        receiver = connection.create_receiver(address)
        connection.create_sender(address).send(Message(body="ok"))
        assert receive_all(receiver, 1)[0].body == "ok"
    finally:
        connection.close()


def test_stomp_selector_header_filters_a_subscription(broker):
    """S2.8, S10.2: a STOMP subscription with a selector receives only matching
    messages; a subscription without one gets the others."""
    destination = "/queue/" + unique("ssel")
    with clients() as open_client:
        client = open_client(broker.address("stomp"))
        client.subscribe(destination, ack="auto", selector="kind = 'urgent'")
        other = open_client(broker.address("stomp"))
        for i, kind in enumerate(["urgent", "normal", "urgent"]):
            client.send(destination, f"s{i}", kind=kind)
        client.collector.wait_for_messages(2)
        other.subscribe(destination, ack="auto")
        other.collector.wait_for_messages(1)
        assert client.collector.bodies() == [b"s0", b"s2"]
        assert other.collector.bodies() == [b"s1"]


def test_stomp_invalid_selector_gets_an_error_frame(broker):
    """S2.8, S10.4: a selector that does not parse is answered with an ERROR frame
    whose message says so."""
    with clients() as open_client:
        client = open_client(broker.address("stomp"))
        client.connection.subscribe("/queue/x", id="1", ack="auto",
                                    headers={"selector": "a = = 1"})
        error = client.collector.wait_for_error()
        assert error.headers["message"] == "invalid selector"
        assert "position" in error.body.decode()
