"""The client library's Twisted side against the server engine in memory (S6.1-S6.3):
the adapter, senders and their outcomes, receivers and their credit, the ack modes,
request/reply and reconnect, all on a task.Clock."""

import pytest

from mqgate.amqp.message import Properties, encode_message
from mqgate.amqp.performatives import Accepted, Error, Modified, Rejected
from mqgate.client import (
    CLIENT, DUPS_OK, AuthenticationError, ConnectError, ConnectionLostError,
    LinkError, SendError, connect,
)
from mqgate.client.connection import DUPS_OK_DELAY
from mqgate.client.message import ReceivedMessage
from tests.client.fakes import Clock, FakeEndpoint, break_connection, pump
from tests.deferreds import result


def opened(endpoint=None, urls="amqp://broker-a:5672", **kwargs):
    """A client connection through C{endpoint}, logged in and its session begun."""
    clock = Clock()
    endpoint = endpoint or FakeEndpoint()
    connecting = connect(urls, credentials=("u", "p"), reactor=clock,
                         endpoint_factory=endpoint.factory, **kwargs)
    pump(endpoint.broker)
    return clock, endpoint, result(connecting)


def test_connect_logs_in_and_sets_tcp_nodelay():
    """connect fires once the broker's open and begin came, and the socket has
    TCP_NODELAY."""
    _clock, endpoint, connection = opened()
    assert connection.connected and endpoint.broker.transport.nodelay
    assert str(connection.url) == "amqp://broker-a:5672"


def test_refused_login_fails_with_authentication_error():
    """A SASL outcome other than ok fails connect with AuthenticationError naming the
    user."""
    clock, endpoint = Clock(), FakeEndpoint(allow=False)
    connecting = connect("amqp://b", credentials=("bob", "wrong"), reactor=clock,
                         endpoint_factory=endpoint.factory)
    pump(endpoint.broker)
    with pytest.raises(AuthenticationError, match="'bob'"):
        result(connecting)


def test_at_least_once_send_fires_on_the_brokers_outcome():
    """An at-least-once send's Deferred waits for the broker's disposition: accepted
    fires it, rejected fails it with the broker's condition and description."""
    _clock, endpoint, connection = opened()
    sender = connection.sender("queue://q")
    pump(endpoint.broker)
    assert result(sender.ready) is sender
    broker = endpoint.broker
    broker.links[sender.name].flow(10)
    first = sender.send("one", {"k": 1})
    pump(broker)
    assert not first.called and len(broker.received) == 1
    broker.links[sender.name].settle(broker.received[0][1], Accepted())
    pump(broker)
    assert isinstance(result(first), Accepted)
    second = sender.send("two")
    pump(broker)
    broker.links[sender.name].settle(broker.received[1][1], Rejected(
        error=Error("amqp:unauthorized-access", "not yours")))
    pump(broker)
    with pytest.raises(SendError) as info:
        result(second)
    assert info.value.condition == "amqp:unauthorized-access"
    assert info.value.description == "not yours"
    message = ReceivedMessage(broker.received[0][2])
    assert (message.body, message.properties) == ("one", {"k": 1})


def test_sends_wait_for_credit_and_at_most_once_fires_when_written():
    """Without credit nothing is written; at-most-once sends go pre-settled once the
    broker grants credit, and their Deferreds fire then."""
    _clock, endpoint, connection = opened()
    sender = connection.sender("q", at_least_once=False)
    pump(endpoint.broker)
    sends = [sender.send(f"m{i}") for i in range(3)]
    pump(endpoint.broker)
    assert endpoint.broker.received == [] and not any(d.called for d in sends)
    endpoint.broker.links[sender.name].flow(2)
    pump(endpoint.broker)
    assert [d.called for d in sends] == [True, True, False]
    assert len(endpoint.broker.received) == 2


def test_refused_link_fails_ready_with_the_condition():
    """A link the broker refuses (null terminus, detach with an error) fails its ready
    Deferred with LinkError carrying the condition."""
    _clock, endpoint, connection = opened(FakeEndpoint(refuse={"queue://nope"}))
    sender = connection.sender("queue://nope")
    pump(endpoint.broker)
    with pytest.raises(LinkError) as info:
        result(sender.ready)
    assert info.value.condition == "amqp:not-found"
    assert sender.closed
    assert isinstance(result(sender.send("x").addErrback(lambda f: f.value)), LinkError)


def test_flow_limit_caps_credit_and_the_threshold_asks_for_the_next_batch():
    """A receiver with flow limit 10 (threshold 50 %) is given at most 10 messages;
    the next batch is asked for only when what it holds plus its credit falls to 5, and
    is 10 minus what it still holds."""
    _clock, endpoint, connection = opened()
    receiver = connection.receiver("queue://q", flow_limit=10, threshold=50)
    pump(endpoint.broker)
    broker = endpoint.broker
    link = broker.links[receiver.name]
    assert link.credit == 10
    assert broker.deliver(receiver.name, encode_message("x"), count=20) == 10
    pump(broker)
    assert receiver.flow.held == 10 and link.credit == 0
    for _ in range(4):
        result(receiver.get())
    pump(broker)
    assert link.credit == 0 and receiver.flow.held == 6      # 6 + 0 > 5: no batch yet
    result(receiver.get())
    pump(broker)
    assert receiver.flow.held == 5 and link.credit == 5      # 10 - 5 held
    assert broker.deliver(receiver.name, encode_message("x"), count=20) == 5


def test_connection_flow_limit_caps_all_receivers_together():
    """With a connection-wide cap of 6, two receivers with limit 5 are granted 5 and 1;
    the second gets more once the first settles."""
    _clock, endpoint, connection = opened(connection_flow_limit_enabled=True,
                                          connection_flow_limit=6)
    first = connection.receiver("q1", flow_limit=5)
    second = connection.receiver("q2", flow_limit=5)
    pump(endpoint.broker)
    broker = endpoint.broker
    assert (broker.links[first.name].credit, broker.links[second.name].credit) == (5, 1)
    broker.deliver(first.name, encode_message("x"), count=5)
    pump(broker)
    for _ in range(5):
        result(first.get())
    pump(broker)
    assert broker.links[first.name].credit + broker.links[second.name].credit + \
        first.flow.held + second.flow.held <= 6
    assert broker.links[second.name].credit > 1


def test_client_ack_settles_the_message_and_every_earlier_one():
    """CLIENT mode: nothing is settled on receipt; acknowledge() on the third message
    settles the first three, not the fourth."""
    _clock, endpoint, connection = opened()
    receiver = connection.receiver("q", ack_mode=CLIENT, flow_limit=10)
    pump(endpoint.broker)
    broker = endpoint.broker
    broker.deliver(receiver.name, encode_message("x"), count=4)
    pump(broker)
    messages = [result(receiver.get()) for _ in range(4)]
    pump(broker)
    session = broker.engine.sessions[0]
    assert receiver.flow.held == 4 and session.unsettled_out == 4
    messages[2].acknowledge()
    pump(broker)
    assert receiver.flow.held == 1 and session.unsettled_out == 1
    assert sorted(n for n, _ in broker.outcomes) == [0, 1, 2]


def test_auto_callback_settles_after_return_and_a_failing_one_gives_it_back():
    """AUTO with a callback: settled accepted when the callback returns; a callback
    that raises has its message settled modified (delivery-failed) for redelivery."""
    seen = []

    def callback(message):
        seen.append(message.body)
        if message.body == "bad":
            raise RuntimeError("the application failed")

    _clock, endpoint, connection = opened()
    receiver = connection.receiver("q", callback=callback)
    pump(endpoint.broker)
    broker = endpoint.broker
    broker.deliver(receiver.name, encode_message("good"))
    broker.deliver(receiver.name, encode_message("bad"))
    pump(broker)
    assert seen == ["good", "bad"] and receiver.flow.held == 0
    states = [state for _, state in broker.outcomes]
    assert isinstance(states[0], Accepted)
    assert isinstance(states[1], Modified) and states[1].delivery_failed


def test_dups_ok_settles_lazily_in_batches():
    """DUPS_OK: consumed messages are settled a batch (a quarter of the limit) at a
    time, or after a short delay when the batch does not fill."""
    clock, endpoint, connection = opened()
    receiver = connection.receiver("q", ack_mode=DUPS_OK, flow_limit=8)
    pump(endpoint.broker)
    broker = endpoint.broker
    broker.deliver(receiver.name, encode_message("x"), count=3)
    pump(broker)
    result(receiver.get())
    pump(broker)
    assert receiver.flow.held == 3                   # one consumed, not settled yet
    result(receiver.get())
    pump(broker)
    assert receiver.flow.held == 1                   # a batch of 2 settled
    result(receiver.get())
    pump(broker)
    assert receiver.flow.held == 1
    clock.advance(DUPS_OK_DELAY)
    pump(broker)
    assert receiver.flow.held == 0


def test_get_times_out_with_none():
    """get(timeout) fires with None when no message comes in time."""
    clock, endpoint, connection = opened()
    receiver = connection.receiver("q")
    pump(endpoint.broker)
    waiting = receiver.get(timeout=2.0)
    clock.advance(1.9)
    assert not waiting.called
    clock.advance(0.2)
    assert result(waiting) is None


def test_request_gets_the_reply_with_its_correlation_id():
    """request() sends with reply-to our dynamic queue and fires with the message whose
    correlation-id is the request's message-id."""
    _clock, endpoint, connection = opened()
    asking = connection.request("queue://service", "ping", timeout=5)
    pump(endpoint.broker)
    broker = endpoint.broker
    sender_name = next(n for n in broker.links if "sender" in n)
    broker.links[sender_name].flow(5)
    pump(broker)
    request = ReceivedMessage(broker.received[0][2])
    assert request.reply_to == "tmp.reply.1" and request.body == "ping"
    reply_name = next(n for n in broker.links if "receiver" in n)
    broker.deliver(reply_name, encode_message("not for us"))
    broker.deliver(reply_name, encode_message(
        "pong", properties=Properties(correlation_id=request.message_id)))
    broker.links[sender_name].settle(broker.received[0][1], Accepted())
    pump(broker)
    assert result(asking).body == "pong"


def test_failover_tries_the_next_address_when_the_first_refuses():
    """With an address list, a refused first address is passed over for the second."""
    endpoint = FakeEndpoint(refusals=[True])
    clock = Clock()
    connecting = connect("amqp://a:1, amqp://b:2", credentials=("u", "p"), reactor=clock,
                         endpoint_factory=endpoint.factory)
    pump(endpoint.broker)
    assert str(result(connecting).url) == "amqp://b:2"


def test_all_addresses_refused_names_each_reason():
    """When no address answers, ConnectError lists each address with its reason."""
    endpoint = FakeEndpoint(refusals=[True, True])
    connecting = connect(["amqp://a:1", "amqp://b:2"], credentials=("u", "p"),
                         reactor=Clock(), endpoint_factory=endpoint.factory)
    with pytest.raises(ConnectError) as info:
        result(connecting)
    assert "amqp://a:1" in str(info.value) and "amqp://b:2" in str(info.value)


def test_reconnect_redoes_links_and_resends_unsettled_messages():
    """After a break, with reconnection on, the client waits the interval, connects
    again, re-attaches its sender and receiver, and sends again the at-least-once
    message the broker never settled; its Deferred fires on the new outcome."""
    clock, endpoint, connection = opened(properties={
        "imqReconnectEnabled": "true", "imqReconnectAttempts": "3",
        "imqReconnectInterval": "2000"})
    sender = connection.sender("q")
    receiver = connection.receiver("q2", flow_limit=4)
    pump(endpoint.broker)
    first = endpoint.broker
    first.links[sender.name].flow(5)
    sending = sender.send("precious")
    pump(first)
    assert len(first.received) == 1
    break_connection(first)
    assert not connection.connected and not sending.called
    clock.advance(1.9)
    assert len(endpoint.brokers) == 1                 # the interval is not over
    clock.advance(0.2)
    second = endpoint.broker
    assert second is not first
    pump(second)
    assert connection.connected and connection.reconnects == 1
    assert second.links[receiver.name].credit == 4    # the receiver is back, with credit
    second.links[sender.name].flow(5)
    pump(second)
    assert [ReceivedMessage(p).body for _, _, p in second.received] == ["precious"]
    second.links[sender.name].settle(second.received[0][1], Accepted())
    pump(second)
    assert isinstance(result(sending), Accepted)


def test_without_reconnect_a_break_fails_what_waits():
    """Reconnection off: a break fails pending sends and gets with
    ConnectionLostError, and on_lost listeners hear of it."""
    _clock, endpoint, connection = opened()
    sender = connection.sender("q")
    receiver = connection.receiver("q2")
    pump(endpoint.broker)
    endpoint.broker.links[sender.name].flow(5)
    sending, waiting, lost = sender.send("x"), receiver.get(), []
    connection.on_lost(lost.append)
    pump(endpoint.broker)
    break_connection(endpoint.broker)
    for deferred in (sending, waiting):
        with pytest.raises(ConnectionLostError, match="reconnection is off"):
            result(deferred)
    assert len(lost) == 1


def test_close_detaches_nothing_left_waiting():
    """close() sends the close, fires once the broker answered, and the connection is
    no longer connected."""
    _clock, endpoint, connection = opened()
    closing = connection.close()
    pump(endpoint.broker)
    assert result(closing) is None and not connection.connected


def test_a_message_handed_over_is_settled_before_a_close_it_triggers():
    """AUTO: a get() waiter that closes the connection at once still has its message
    settled (the disposition goes before the close, not after it)."""
    _clock, endpoint, connection = opened()
    receiver = connection.receiver("q")
    pump(endpoint.broker)
    waiting = receiver.get()
    waiting.addCallback(lambda _message: connection.close())
    endpoint.broker.deliver(receiver.name, encode_message("last"))
    pump(endpoint.broker)
    assert [type(state) for _, state in endpoint.broker.outcomes] == [Accepted]


def test_closing_a_durable_receiver_keeps_the_subscription_unsubscribe_ends_it():
    """close() of a durable subscription's receiver detaches with closed=false (the
    broker keeps it); unsubscribe() and a plain receiver's close() with closed=true."""
    _clock, endpoint, connection = opened()
    durable = connection.receiver("topic://t", durable_name="sub")
    other = connection.receiver("topic://t", durable_name="sub2")
    plain = connection.receiver("q")
    pump(endpoint.broker)
    closing = [durable.close(), other.unsubscribe(), plain.close()]
    pump(endpoint.broker)
    assert endpoint.broker.detached == [("sub", False), ("sub2", True),
                                        (plain.name, True)]
    assert all(result(d) is None for d in closing)
