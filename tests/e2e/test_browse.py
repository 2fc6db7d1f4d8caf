"""Queue browsing through the real broker (S2.1): a Proton receiver with
distribution-mode copy and a stomp.py SUBSCRIBE with browser:true see the queue's
messages, highest priority first, and leave it as it was: a consumer afterwards
counts every message, none of them redelivered."""

from proton import Message
from proton.reactor import Copy

from tests.e2e.proton_client import drain, opened, receive_all
from tests.e2e.stomp_client import clients, unique

BODIES = ["low", "high", "mid", "plain"]
PRIORITIES = [1, 9, 5, 4]
IN_ORDER = ["high", "mid", "plain", "low"]


def fill(broker, address):
    with opened(broker) as conn:
        sender = conn.create_sender(address)
        for body, priority in zip(BODIES, PRIORITIES):
            sender.send(Message(body=body, priority=priority))


def consume_all(broker, address):
    """What a consumer takes from C{address}: bodies and delivery counts."""
    with opened(broker) as conn:
        receiver = conn.create_receiver(address, credit=None)
        taken = drain(conn, receiver)
        for _ in taken:
            receiver.accept()
        return [m.body for m in taken], [m.delivery_count for m in taken]


def test_proton_copy_receiver_browses_without_taking(module_broker):
    """Two copying receivers each see all four messages (the drain completes after
    them); a consumer then takes all four, delivery count 0, and the queue is empty."""
    address = f"queue://{unique('browse').replace('-', '_')}"
    fill(module_broker, address)
    with opened(module_broker) as conn:
        for name in ("browser1", "browser2"):
            browser = conn.create_receiver(address, name=name, credit=None,
                                           options=Copy())
            seen = drain(conn, browser)
            for _ in seen:
                browser.accept()    # settling a browsed message takes nothing
            assert [m.body for m in seen] == IN_ORDER
    assert consume_all(module_broker, address) == (IN_ORDER, [0, 0, 0, 0])
    assert consume_all(module_broker, address) == ([], [])


def test_stomp_browser_sees_the_queue_then_browser_end(module_broker):
    """SUBSCRIBE browser:true gets the four messages and then a MESSAGE with
    browser:end and no body; the queue keeps them all for a consumer."""
    name = unique("sbrowse").replace("-", "_")
    fill(module_broker, f"queue://{name}")
    with clients() as open_client:
        client = open_client(module_broker.address("stomp"))
        client.subscribe(f"/queue/{name}", browser="true")
        frames = client.collector.wait_for_messages(5)
        assert [bytes(f.body).decode() for f in frames[:4]] == IN_ORDER
        end = frames[4]
        assert end.headers.get("browser") == "end" and bytes(end.body) == b""
        assert end.headers.get("subscription") is not None
    with opened(module_broker) as conn:
        receiver = conn.create_receiver(f"queue://{name}", credit=10)
        taken = receive_all(receiver, 4)
        assert [m.body for m in taken] == IN_ORDER
        assert not any(m.delivery_count for m in taken)


def test_stomp_browser_of_an_empty_queue_gets_browser_end_at_once(module_broker):
    """Browsing an empty queue ends at once with the browser:end MESSAGE."""
    with clients() as open_client:
        client = open_client(module_broker.address("stomp"))
        client.subscribe(f"/queue/{unique('empty').replace('-', '_')}", browser="true")
        (end,) = client.collector.wait_for_messages(1)
        assert end.headers.get("browser") == "end"
