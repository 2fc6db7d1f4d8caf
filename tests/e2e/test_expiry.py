"""Expiry across a restart of the real broker on the file store (S2.9, S3.1): a
persistent message's time-to-live counts from when it was sent, not again from the
restart."""

import time

from proton import Message

from tests.e2e.proton_client import DEFAULT_TIMEOUT, drain, opened


def test_a_ttl_keeps_counting_across_a_restart(broker_factory, tmp_path):
    """A persistent message with a 2 s ttl, sent before a stop and read 3 s after it was
    sent from the restarted broker, is not delivered: it expired at its time, and is on
    mq.sys.dmq (reason EXPIRED), still after one more restart; its neighbour without a
    ttl is delivered."""
    varhome = tmp_path / "varhome"
    broker = broker_factory(varhome=varhome)
    with opened(broker) as conn:
        sender = conn.create_sender("queue://ttl")
        sender.send(Message(id="short", body="2 s", ttl=2.0, durable=True))
        sender.send(Message(id="keep", body="no ttl", durable=True))
    sent = time.monotonic()
    assert broker.terminate() == 0
    # Waiting on the clock is the point here: the ttl must run out while the broker is
    # down (or starting), before the restarted broker is asked.
    time.sleep(max(0.0, sent + 3.0 - time.monotonic()))
    broker = broker_factory(varhome=varhome)
    with opened(broker) as conn:
        receiver = conn.create_receiver("queue://ttl", credit=None)
        kept = drain(conn, receiver)
        assert [m.id for m in kept] == ["keep"]
        receiver.accept()
    # The dead copy is persistent on the DMQ: it is there after another restart.
    assert broker.terminate() == 0
    broker = broker_factory(varhome=varhome)
    with opened(broker) as conn:
        receiver = conn.create_receiver("queue://mq.sys.dmq", credit=10)
        dead = receiver.receive(timeout=DEFAULT_TIMEOUT)
        receiver.accept()
        assert drain(conn, conn.create_receiver("queue://ttl")) == []
    assert dead.id == "short" and dead.durable
    assert dead.annotations["x-opt-dead-reason"] == "EXPIRED"
    assert dead.annotations["x-opt-original-address"] == "queue://ttl"
