"""STOMP transactions are bounded (S10.2, design rule 4): how many a connection
may have open, and how many frames and bytes they may hold until COMMIT.

The real core and STOMP adapter on StringTransports (L{tests.glue.stomp_harness}).
"""

import pytest

from mqgate.glue.ingress import IngressBudget
from mqgate.glue.stomp import StompGlueConfig, TransactionLimits

from tests.glue.stomp_harness import Gateway

KIB = b"x" * 1024


def gateway_with(tmp_path, **limits):
    return Gateway(tmp_path, glue_config=StompGlueConfig(
        tx_limits=TransactionLimits(**limits)))


def error_of(peer):
    (error,) = peer.errors()
    assert peer.closed   # STOMP 1.2: the server closes the connection after ERROR
    return error


def test_a_begin_past_max_open_is_an_error_naming_the_setting(tmp_path):
    """One BEGIN more than mqgate.stomp.transaction.max_open gets an ERROR that names
    the setting, and the connection is closed."""
    gateway = gateway_with(tmp_path, max_open=2)
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:t1")
    peer.send("BEGIN", "transaction:t2")
    assert peer.errors() == []
    peer.send("BEGIN", "transaction:t3")
    error = error_of(peer)
    assert error.get("message") == "too many transactions"
    assert b"mqgate.stomp.transaction.max_open" in error.body


@pytest.mark.parametrize("limits,setting", [
    ({"max_bytes": 10 * 1024}, "mqgate.stomp.transaction.max_bytes"),
    ({"max_frames": 10}, "mqgate.stomp.transaction.max_frames"),
    ({"max_connection_bytes": 10 * 1024}, "mqgate.stomp.transaction.max_connection_bytes"),
])
def test_a_transaction_past_its_limit_is_aborted_and_nothing_delivered(
        tmp_path, limits, setting):
    """SENDs past a transaction limit: an ERROR naming the limit and its setting, the
    transaction is aborted (a subscriber gets none of it), the connection closed, and
    another connection goes on."""
    gateway = gateway_with(tmp_path, **limits)
    subscriber = gateway.stomp()
    subscriber.subscribe("/queue/q")
    other = gateway.stomp()
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:t")
    for n in range(20):
        peer.send("SEND", "destination:/queue/q", "transaction:t", body=KIB)
        if peer.closed:
            break
    error = error_of(peer)
    assert error.get("message") == "transaction limit exceeded"
    assert setting.encode() in error.body
    assert peer.protocol.glue.transactions == {}
    assert peer.protocol.glue.held_transaction_bytes == 0
    peer.send("COMMIT", "transaction:t")   # too late: the connection is gone
    assert subscriber.messages() == []
    other.send("SEND", "destination:/queue/q", body=b"fine")
    assert [m.body for m in subscriber.messages()] == [b"fine"]


def test_open_transactions_share_the_connection_bytes(tmp_path):
    """The bytes of all of a connection's open transactions count against
    max_connection_bytes together; one within its own max_bytes can still pass it."""
    gateway = gateway_with(tmp_path, max_bytes=8 * 1024, max_connection_bytes=12 * 1024)
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:a")
    peer.send("BEGIN", "transaction:b")
    for _ in range(5):
        peer.send("SEND", "destination:/queue/q", "transaction:a", body=KIB)
    for _ in range(7):
        peer.send("SEND", "destination:/queue/q", "transaction:b", body=KIB)
        if peer.closed:
            break
    assert b"max_connection_bytes" in error_of(peer).body


def test_commit_and_abort_give_their_bytes_back(tmp_path):
    """A committed or aborted transaction no longer counts: a connection may run any
    number of transactions one after another, each within the limits."""
    gateway = gateway_with(tmp_path, max_bytes=4 * 1024, max_connection_bytes=4 * 1024)
    subscriber = gateway.stomp()
    subscriber.subscribe("/queue/q")
    peer = gateway.stomp()
    for n in range(6):
        name = f"t{n}"
        peer.send("BEGIN", f"transaction:{name}")
        for _ in range(3):
            peer.send("SEND", "destination:/queue/q", f"transaction:{name}", body=KIB)
        peer.send("COMMIT" if n % 2 else "ABORT", f"transaction:{name}")
    assert peer.errors() == [] and not peer.closed
    assert len(subscriber.messages()) == 9
    assert peer.protocol.glue.held_transaction_bytes == 0


def test_a_send_too_large_for_a_message_is_refused_when_it_arrives(tmp_path):
    """A SEND over mqgate.message.max_size inside a transaction gets its ERROR at once,
    not at COMMIT after being held."""
    gateway = Gateway(tmp_path, glue_config=StompGlueConfig(max_message_size=100))
    peer = gateway.stomp()
    peer.send("BEGIN", "transaction:t")
    peer.send("SEND", "destination:/queue/q", "transaction:t", body=b"x" * 200)
    assert error_of(peer).get("message") == "message too large"


def test_transactions_of_all_connections_share_the_broker_budget(tmp_path):
    """Open transactions of every connection take their bytes from the broker-wide
    ingress budget: the SEND that would pass it aborts its transaction with an ERROR
    naming mqgate.ingress.buffer.budget, the other connection's transaction commits,
    and the bytes come back."""
    gateway = gateway_with(tmp_path)
    budget = gateway.factory.egress.ingress_budget = IngressBudget(6 * 1024)
    subscriber = gateway.stomp()
    subscriber.subscribe("/queue/q")
    first, second = gateway.stomp(), gateway.stomp()
    first.send("BEGIN", "transaction:a")
    second.send("BEGIN", "transaction:b")
    for _ in range(4):
        first.send("SEND", "destination:/queue/q", "transaction:a", body=KIB)
    held = budget.held
    assert held > 4 * 1024
    for _ in range(4):
        second.send("SEND", "destination:/queue/q", "transaction:b", body=KIB)
        if second.closed:
            break
    error = error_of(second)
    assert error.get("message") == "transaction limit exceeded"
    assert b"mqgate.ingress.buffer.budget" in error.body
    assert budget.held == held
    first.send("COMMIT", "transaction:a")
    assert len(subscriber.messages()) == 4
    assert budget.held == 0
