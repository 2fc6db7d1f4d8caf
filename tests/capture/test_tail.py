"""
The live tail's readers (S7.6): lines as they come, a bounded backlog while a reader
is paused, a line saying how many it missed, heartbeats only when nothing waits.
"""

import json

from mqgate.capture.tail import PREVIEW_CHARS, TailHub, TailReader


def summary(n, address="orders", subscription="s1", body="x", routed_to=None):
    return {"id": n, "address": address, "subscription": subscription,
            "routed_to": routed_to, "body_text": body}


def lines(written):
    return [json.loads(chunk) for chunk in written]


def test_a_reader_gets_each_message_as_one_json_line():
    written = []
    hub = TailHub()
    hub.add(TailReader(written.append))
    hub.publish(summary(1))
    hub.publish(summary(2))
    assert all(chunk.endswith(b"\n") and chunk.count(b"\n") == 1 for chunk in written)
    assert [(l["type"], l["id"]) for l in lines(written)] == [("message", 1),
                                                             ("message", 2)]


def test_a_paused_reader_keeps_its_backlog_and_is_told_what_it_missed():
    """A slow reader costs at most its backlog: past it, messages are counted, and
    once it reads again it gets the backlog, then one line with the count."""
    written = []
    hub = TailHub()
    reader = TailReader(written.append, max_backlog=3)
    hub.add(reader)
    reader.pause()
    for n in range(1, 11):
        hub.publish(summary(n))
    assert written == []
    reader.resume()
    got = lines(written)
    assert [l.get("id") for l in got[:3]] == [1, 2, 3]
    assert got[3] == {"type": "dropped", "count": 7, "reason": "slow reader"}
    hub.publish(summary(11))
    assert lines(written)[-1]["id"] == 11


def test_readers_see_only_their_address_or_subscription():
    by_address, by_queue, by_sub = [], [], []
    hub = TailHub()
    hub.add(TailReader(by_address.append, address="orders"))
    hub.add(TailReader(by_queue.append, address="fan.2"))
    hub.add(TailReader(by_sub.append, subscription="s2"))
    hub.publish(summary(1, address="orders"))
    hub.publish(summary(2, address="fan", routed_to=["fan.1", "fan.2"]))
    hub.publish(summary(3, address="other", subscription="s2"))
    assert [l["id"] for l in lines(by_address)] == [1]
    assert [l["id"] for l in lines(by_queue)] == [2]
    assert [l["id"] for l in lines(by_sub)] == [3]


def test_heartbeats_only_while_nothing_waits_and_drops_upstream_are_told():
    written = []
    hub = TailHub()
    reader = TailReader(written.append)
    hub.add(reader)
    reader.heartbeat(5.0)
    reader.pause()
    reader.heartbeat(6.0)
    reader.resume()
    hub.dropped_upstream("s1", "ring", 4)
    assert lines(written) == [
        {"type": "heartbeat", "at": 5.0},
        {"type": "dropped", "count": 4, "reason": "ring", "subscription": "s1"}]


def test_a_long_body_is_shown_as_a_preview():
    written = []
    hub = TailHub()
    hub.add(TailReader(written.append))
    hub.publish(summary(1, body="y" * (PREVIEW_CHARS + 10)))
    (line,) = lines(written)
    assert len(line["body_text"]) == PREVIEW_CHARS and line["preview"] is True


def test_a_removed_reader_gets_nothing_more():
    written = []
    hub = TailHub()
    reader = TailReader(written.append)
    hub.add(reader)
    hub.remove(reader)
    hub.publish(summary(1))
    assert written == [] and hub.readers == 0


def test_a_bare_address_matches_what_capture_writes():
    written = []
    hub = TailHub()
    hub.add(TailReader(written.append, address="orders"))
    hub.publish(summary(1, address="queue://orders", routed_to=["orders"]))
    hub.publish(summary(2, address="topic://orders"))
    hub.publish(summary(3, address="queue://other"))
    assert [l["id"] for l in lines(written)] == [1, 2]
