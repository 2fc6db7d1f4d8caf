"""STOMP transactions on the core's transactions (S10.2, S6.3): the real core and STOMP
adapter on StringTransports and a Clock (L{tests.glue.stomp_harness})."""

from mqgate.core.transactions import TransactionLimits

from tests.glue.stomp_harness import Gateway


def _gateway(tmp_path, **limits):
    gateway = Gateway(tmp_path)
    gateway.broker.transaction_limits = TransactionLimits(**limits)
    return gateway


def test_an_idle_transaction_times_out_and_its_next_frame_is_an_error(tmp_path):
    """A transaction left unused for mqgate.transaction.timeout seconds is rolled
    back: nothing of it is delivered and its next SEND gets an ERROR naming the
    setting."""
    gateway = _gateway(tmp_path, timeout=10)
    subscriber = gateway.stomp()
    subscriber.subscribe("/queue/q")
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:t")
    peer.send("SEND", "destination:/queue/q", "transaction:t", body=b"early")
    gateway.clock.advance(11)
    peer.send("SEND", "destination:/queue/q", "transaction:t", body=b"late")
    (error,) = peer.errors()
    assert error.get("message") == "transaction timed out"
    assert b"mqgate.transaction.timeout" in error.body
    assert subscriber.messages() == []


def test_a_send_to_a_refused_destination_fails_at_once_and_commit_keeps_the_rest(
        tmp_path):
    """In a transaction, a SEND the broker refuses (the admin address) gets its ERROR
    when it is sent; a SEND to another connection's good transaction commits."""
    gateway = _gateway(tmp_path)
    subscriber = gateway.stomp()
    subscriber.subscribe("/queue/q")
    good = gateway.stomp()
    good.send("BEGIN", "transaction:g")
    good.send("SEND", "destination:/queue/q", "transaction:g", body=b"kept")
    bad = gateway.stomp()
    bad.send("BEGIN", "transaction:b")
    bad.send("SEND", "destination:/queue/q", "transaction:b", body=b"never")
    bad.send("SEND", "destination:mqgate.admin", "transaction:b", body=b"x")
    (error,) = bad.errors()
    assert error.get("message") == "access refused"
    assert subscriber.messages() == []
    good.send("COMMIT", "transaction:g", "receipt:c")
    assert good.read()[-1].command == "RECEIPT"
    assert [m.body for m in subscriber.messages()] == [b"kept"]


def test_transactions_per_connection_share_the_core_limit(tmp_path):
    """A BEGIN past mqgate.transaction.max_per_connection gets an ERROR naming it."""
    gateway = _gateway(tmp_path, max_per_connection=1)
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:a")
    peer.send("BEGIN", "transaction:b")
    (error,) = peer.errors()
    assert error.get("message") == "transaction limit exceeded"
    assert b"mqgate.transaction.max_per_connection" in error.body


def test_losing_the_connection_rolls_back_and_redelivers(tmp_path):
    """A connection lost with an open transaction: its SENDs are dropped and the
    messages it acknowledged in it go to another subscriber, redelivered."""
    gateway = _gateway(tmp_path)
    peer = gateway.stomp()
    peer.subscribe("/queue/q", ack="client-individual")
    gateway.stomp().send("SEND", "destination:/queue/q", body=b"work")
    (message,) = peer.messages()
    peer.send("BEGIN", "transaction:t")
    peer.send("ACK", f"id:{message.get('ack')}", "transaction:t")
    peer.send("SEND", "destination:/queue/q", "transaction:t", body=b"dropped")
    other = gateway.stomp()
    other.subscribe("/queue/q", ack="client-individual")
    peer.lose()
    (again,) = other.messages()
    assert again.body == b"work" and again.get("redelivered") == "true"
