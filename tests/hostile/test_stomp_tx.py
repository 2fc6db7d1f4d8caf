"""One uncommitted STOMP transaction of 400 x 1 MiB against the real broker (S10.2,
design rule 4): it gets an ERROR before the broker grows past its limit plus a
constant, and nobody else notices.

Before the limits, the same transaction grew the broker by 403 MiB with no ERROR.
"""

import socket

from mqgate.stomp.frames import encode_frame

from tests.e2e.stomp_client import RawStomp, open_client
from tests.hostile.probe import broker_rss

MIB = 1 << 20
#: The shipped mqgate.stomp.transaction.max_bytes and max_connection_bytes.
LIMIT = 64 * MIB
#: What the broker may grow beyond the bytes the limit lets it hold: the frame being
#: read when the limit is passed, the parser's buffer, allocator slack.
SLACK = 48 * MIB


def test_a_huge_transaction_is_aborted_before_it_costs_more_than_its_limit(broker, probe):
    """400 SENDs of 1 MiB in one transaction: an ERROR naming the limit and its setting
    arrives after about 64 MiB, the broker's RSS never grew more than the limit plus a
    constant, nothing of the transaction is delivered, and the probe and another client
    go on unaffected."""
    address = broker.address("stomp")
    subscriber = open_client(address, name="tx-subscriber")
    try:
        subscriber.subscribe("/queue/tx-target")
        watcher = probe(broker)
        before = peak = broker_rss(broker)
        offender = RawStomp(address, timeout=30)
        assert offender.connect().command == "CONNECTED"
        offender.send(encode_frame("BEGIN", [("transaction", "big")]))
        body = b"x" * MIB
        frame = encode_frame("SEND", [("destination", "/queue/tx-target"),
                                      ("transaction", "big")], body)
        sent = 0
        try:
            for sent in range(1, 401):
                offender.send(frame)
                if sent % 8 == 0:
                    peak = max(peak, broker_rss(broker))
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass    # the broker closed the connection after its ERROR
        peak = max(peak, broker_rss(broker))
        frames = offender.read_until_closed(timeout=30)
        offender.close()
        errors = [f for f in frames if f.command == "ERROR"]
        assert [e.get("message") for e in errors] == ["transaction limit exceeded"]
        assert b"mqgate.stomp.transaction.max_bytes" in errors[0].body
        assert sent < 400
        growth = peak - before
        assert growth < LIMIT + SLACK, f"the broker grew by {growth / MIB:.0f} MiB"
        subscriber.send("/queue/tx-target", b"after")
        subscriber.collector.wait_for_body(b"after")
        assert subscriber.collector.bodies() == [b"after"]     # nothing of the transaction
        watcher.assert_responsive(limit=0.1)
    finally:
        subscriber.close()
