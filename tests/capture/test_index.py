"""
The capture index (S7.5, S7.4): one row per routed message, found again by address,
queue, time, property and correlation id; bodies bounded and marked; retention by age
and by stored size; drops counted when the database cannot keep up. Real SQLite
files; the search and retention cases also on a real PostgreSQL database.
"""

import sqlite3

from twisted.internet.task import Clock

from mqgate.capture.index import CaptureQuery, QueryError
from tests.capture.conftest import copy
from tests.deferreds import result

import pytest


def search(index, **kwargs):
    return result(index.search(CaptureQuery(**kwargs)))


def ids(page):
    return [m["id"] for m in page["messages"]]


def test_every_copy_is_one_row_found_by_address_and_queue(any_opener):
    """S7.5: each copy is one row; a search by address finds the messages sent there,
    by queue those that reached it, newest first."""
    index, _ = any_opener.index()
    index.ingest(copy("orders", body=b"a", at=1000.0))
    index.ingest(copy("audit", body=b"b", at=1001.0))
    index.ingest(copy("prices", kind="topic", routed_to=None, body=b"c", at=1002.0))
    index.ingest(copy("fan", routed_to=("fan.1", "fan.2"), body=b"d", at=1003.0))
    result(index.drained())
    assert index.written == 4
    page = search(index, address="orders")
    assert [m["body_text"] for m in page["messages"]] == ["a"]
    assert page["messages"][0]["routed_to"] == ["orders"]
    assert [m["body_text"] for m in search(index, queue="fan.2")["messages"]] == ["d"]
    assert [m["body_text"] for m in search(index)["messages"]] == ["d", "c", "b", "a"]
    topic = search(index, address="prices")["messages"][0]
    assert topic["kind"] == "topic" and topic["routed_to"] is None
    assert "cannot tell which subscriptions" in topic["note"]          # S7.7
    assert "note" not in page["messages"][0]


def test_search_by_time_property_and_correlation_id(any_opener):
    """S7.5: a time range (from inclusive, to exclusive), application properties
    (all must match) and the correlation id narrow the search."""
    index, _ = any_opener.index()
    index.ingest(copy(at=1000.0, properties={"region": "emea", "n": 1}))
    index.ingest(copy(at=1010.0, properties={"region": "apac", "n": 2},
                      correlation_id="c-7"))
    index.ingest(copy(at=1020.0, properties={"region": "emea", "n": 3, "vip": True}))
    result(index.drained())
    assert ids(search(index, start=1010.0, end=1020.0)) == [2]
    assert ids(search(index, properties=[("region", "emea")])) == [3, 1]
    assert ids(search(index, properties=[("region", "emea"), ("vip", "true")])) == [3]
    assert ids(search(index, properties=[("n", "2")])) == [2]
    assert ids(search(index, correlation_id="c-7")) == [2]
    assert ids(search(index, correlation_id="c-8")) == []


def test_pages_go_on_from_next_until_none(opener):
    """Search results come a page at a time; C{next} pages on, None on the last."""
    index, _ = opener.index()
    for i in range(5):
        index.ingest(copy(at=1000.0 + i))
    result(index.drained())
    first = search(index, limit=2)
    second = search(index, limit=2, before=first["next"])
    third = search(index, limit=2, before=second["next"])
    assert ids(first) == [5, 4] and ids(second) == [3, 2] and ids(third) == [1]
    assert third["next"] is None


def test_a_bad_search_is_refused_saying_why():
    with pytest.raises(QueryError, match="from 1 to 1000"):
        CaptureQuery(limit=5000)
    with pytest.raises(QueryError, match="'from' must be before 'to'"):
        CaptureQuery(start=10.0, end=5.0)


def test_a_long_body_is_cut_and_marked(opener):
    """S7.4: a body longer than the bound is never stored whole: its first bytes are
    kept and the row says how long it was."""
    index, _ = opener.index(max_body=10)
    index.ingest(copy(body=b"0123456789abcdef"))
    index.ingest(copy(body=b"short"))
    result(index.drained())
    short, long_ = search(index)["messages"]
    assert long_["body_text"] == "0123456789" and long_["body_size"] == 16
    assert long_["truncated"] is True
    assert short["body_text"] == "short" and short["truncated"] is False
    raw = sqlite3.connect(opener.url)
    assert max(len(b) for (b,) in raw.execute("SELECT BODY FROM CAPMSG_b1")) == 10
    raw.close()


def test_verify_is_offered_with_the_original_id_or_disabled_with_a_reason(opener):
    """S7.5: with the original's id the action is offered; without, the row says why
    not (the core's reason, or the index's own)."""
    index, _ = opener.index()
    index.ingest(copy(original_id="42"))
    index.ingest(copy(verify_reason="the divert copied no id"))
    index.ingest(copy())
    result(index.drained())
    plain, told, offered = (m["verify"] for m in search(index)["messages"])
    assert offered == {"offered": True, "original_id": "42", "reason": None}
    assert told["offered"] is False and told["reason"] == "the divert copied no id"
    assert plain["offered"] is False and "carries no id" in plain["reason"]


def test_numbering_goes_on_after_a_reopen(opener):
    """Rows kept by an earlier run keep their ids; new rows number on after them,
    and the stored size per subscription is read back."""
    index, _ = opener.index()
    index.ingest(copy(body=b"first"))
    result(index.drained())
    result(index.close())
    again, _ = opener.index()
    again.ingest(copy(body=b"second"))
    result(again.drained())
    assert ids(search(again)) == [2, 1]
    assert again.bytes["s1"] > 0


def test_a_full_backlog_drops_and_counts(opener):
    """S7: capture never makes production wait: while C{max_pending} copies wait for
    the database, a new copy is dropped and counted."""
    index, reactor = opener.index(max_pending=3)
    # Hold the writer: the inline pool answers at once, so stall it by hand.
    index._writer.stalled = True
    for _ in range(5):
        index.ingest(copy())
    assert index.status()["dropped"] == {"s1": {"backlog": 2}}
    index._writer.resume()
    result(index.drained())
    assert index.written == 3


def test_drops_reported_by_the_core_are_counted_per_subscription(opener):
    index, _ = opener.index()
    index.dropped("s1", "ring", 7)
    index.dropped("s1", "ring", 3)
    index.dropped("s2", "rate", 1)
    assert index.status()["dropped"] == {"s1": {"ring": 10}, "s2": {"rate": 1}}


def test_a_failed_write_drops_counts_and_writing_goes_on(opener):
    """A transaction that fails (here: the table gone) drops its copies, counted as
    write-failed; after the retry interval the index writes again."""
    index, reactor = opener.index()
    raw = sqlite3.connect(opener.url)
    raw.execute("ALTER TABLE CAPMSG_b1 RENAME TO HIDDEN")
    raw.commit()
    index.ingest(copy())
    assert index.status()["dropped"] == {"s1": {"write-failed": 1}}
    assert "CAPMSG_b1" in index.status()["last_error"]
    raw.execute("ALTER TABLE HIDDEN RENAME TO CAPMSG_b1")
    raw.commit()
    raw.close()
    reactor.run_later()          # the retry interval has passed
    index.ingest(copy())
    result(index.drained())
    assert index.written == 1


def test_the_copies_of_one_turn_are_one_write_and_fail_counted_each(opener):
    """The copies ingested in one reactor turn are written together; a failed
    write counts each of its copies against its own subscription."""
    index, reactor = opener.index()
    turn = Clock()            # the index's end of turn, moved by hand here
    index._clock = turn
    for subscription in ("s1", "s1", "s2"):
        index.ingest(copy(subscription=subscription, properties={"k": 1}))
    assert (index.written, index.status()["pending"]) == (0, 3)
    turn.advance(0)
    result(index.drained())
    assert (index.written, index.status()["pending"]) == (3, 0)
    assert ids(search(index, properties=[("k", "1")])) == [3, 2, 1]

    raw = sqlite3.connect(opener.url)
    raw.execute("ALTER TABLE CAPMSG_b1 RENAME TO HIDDEN")
    raw.commit()
    raw.close()
    for subscription in ("s1", "s2", "s2"):
        index.ingest(copy(subscription=subscription))
    turn.advance(0)
    assert index.status()["dropped"] == {"s1": {"write-failed": 1},
                                         "s2": {"write-failed": 2}}
    assert (index.written, index.status()["pending"]) == (3, 0)


def test_retention_removes_rows_older_than_it_in_batches(any_opener):
    """S7.4: rows older than the retention go, oldest first, a batch per
    transaction; newer rows and their properties stay."""
    now = [1000.0]
    index, _ = any_opener.index(now=lambda: now[0], retention=100, prune_batch=2)
    for i in range(5):
        index.ingest(copy(at=1000.0 + i, properties={"i": i}))
    index.ingest(copy(at=1150.0, properties={"i": 99}))
    result(index.drained())
    now[0] = 1200.0
    result(index.prune())
    assert ids(search(index)) == [6]
    assert index.pruned["age"] == 5
    assert ids(search(index, properties=[("i", "3")])) == []
    assert ids(search(index, properties=[("i", "99")])) == [6]
    assert index.bytes["s1"] > 0


def test_a_subscription_over_its_stored_size_loses_its_oldest_rows(opener):
    """S7.4: a subscription holding more than its stored size has its oldest rows
    removed until it fits; another subscription keeps all of its rows, and the status
    says which was cut back."""
    index, _ = opener.index()
    for i in range(10):
        index.ingest(copy(body=b"x" * 1000, at=1000.0 + i, subscription="big"))
    index.ingest(copy(body=b"y", subscription="small"))
    result(index.drained())
    per_row = index.bytes["big"] // 10
    index.max_bytes = per_row * 4
    result(index.prune())
    kept = search(index, subscription="big")["messages"]
    assert len(kept) == 4 and [m["captured_at"] for m in kept][-1] == 1006.0
    assert len(search(index, subscription="small")["messages"]) == 1
    assert index.bytes["big"] <= index.max_bytes
    assert index.status()["trimmed"] == ["big"]
    assert index.pruned["size"] == 6


def test_the_tail_sees_each_row_with_its_id(opener, hub):
    lines = []
    from mqgate.capture.tail import TailReader
    reader = TailReader(lines.append)
    hub.add(reader)
    index, _ = opener.index(tail=hub)
    index.ingest(copy(body=b"live"))
    assert len(lines) == 1 and b'"id":1' in lines[0] and b'"body_text":"live"' in lines[0]


def test_the_figures_reach_prometheus(opener):
    """Drops (the core's and the index's own), writes and stored bytes are exported
    per subscription in /metrics' text."""
    from prometheus_client.parser import text_string_to_metric_families

    from mqgate.admin.requests import AdminContext
    from mqgate.core import Broker
    from mqgate.egress.clients import ClientRegistry
    from mqgate.metrics.prometheus import exposition
    from mqgate.metrics.snapshot import MetricsSources
    from mqgate.store.memory import MemoryStore

    from mqgate.core.capture import CaptureConfig, Captures

    index, _ = opener.index(max_pending=1)
    index.ingest(copy(subscription="s1"))
    result(index.drained())
    index.dropped("s1", "ring", 4)      # counted by the core's own figures
    index._writer.stalled = True
    index.ingest(copy(subscription="s1"))
    index.ingest(copy(subscription="s1"))   # the backlog is full: dropped
    clock = Clock()
    broker = Broker(clock)
    broker.captures = Captures(broker, clock, CaptureConfig(node="n1"), index)
    context = AdminContext(broker, ClientRegistry(), None,
                           metrics=MetricsSources(clock, 0, store=MemoryStore()))
    context.capture_index = index
    text = exposition(context)[0].decode("utf-8")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text)
               for s in family.samples}
    assert samples[("mqgate_capture_dropped_total", (
        ("node", "n1"), ("reason", "backlog"), ("subscription", "s1")))] == 1
    assert not any(name == "mqgate_capture_dropped_total" and ("reason", "ring") in labels
                   for name, labels in samples)
    assert samples[("mqgate_capture_index_written_messages_total", ())] == 1
    assert samples[("mqgate_capture_index_stored_bytes", (("subscription", "s1"),))] > 0
    assert samples[("mqgate_capture_index_pending_messages", ())] == 1


def test_each_subscription_has_its_own_bounds(opener):
    """S7.4: the body, retention and stored-size bounds are the subscription's
    (L{CaptureBounds}); a subscription without (removed since) has the defaults."""
    from mqgate.core.capture import CaptureBounds

    now = [1000.0]
    tight = CaptureBounds(body_bytes=3, retention=10.0)
    index, _ = opener.index(now=lambda: now[0],
                            bounds_of=lambda name: tight if name == "tight" else None)
    index.ingest(copy(body=b"abcdef", subscription="tight", at=1000.0))
    index.ingest(copy(body=b"abcdef", subscription="loose", at=1000.0))
    result(index.drained())
    assert [m["body_text"] for m in search(index, subscription="tight")["messages"]] \
        == ["abc"]
    now[0] = 1050.0
    result(index.prune())
    assert search(index, subscription="tight")["messages"] == []
    assert [m["body_text"] for m in search(index, subscription="loose")["messages"]] \
        == ["abcdef"]


def test_a_bare_name_finds_either_kind_a_prefixed_one_its_own(opener):
    """Capture writes addresses as queue://NAME or topic://NAME; an operator searching
    for "orders" finds both, "topic://orders" only the topic's."""
    index, _ = opener.index()
    index.ingest(copy("queue://orders", routed_to=("orders",)))
    index.ingest(copy("topic://orders", kind="topic"))
    result(index.drained())
    assert ids(search(index, address="orders")) == [2, 1]
    assert ids(search(index, address="topic://orders")) == [2]
    assert ids(search(index, queue="orders")) == [1]


def test_figures_per_subscription_for_query_capture(opener):
    """The figures `query capture` shows of the sink: copies kept, bodies cut, bytes,
    drops; forgotten with the subscription (its rows stay until their retention)."""
    index, _ = opener.index(max_body=2)
    index.ingest(copy(body=b"abc", subscription="s1"))
    index.ingest(copy(body=b"a", subscription="s1"))
    index.dropped("s1", "rate", 2)
    result(index.drained())
    figures = index.figures("s1")
    assert (figures["copies"], figures["truncated"], figures["dropped"],
            figures["degraded"]) == (2, 1, {"rate": 2}, False)
    assert figures["stored_bytes"] > 0
    index.forget("s1")
    assert index.figures("s1")["copies"] == 0
    assert len(search(index, subscription="s1")["messages"]) == 2


def test_copies_before_the_index_is_open_are_kept_until_it_is(opener):
    """At start, restored captures may copy before the database is open: those copies
    wait (within max_pending) and are written once it is."""
    from mqgate.capture.index import CaptureIndex
    from mqgate.capture.schema import CaptureSchema
    from mqgate.store.sqldialects import DIALECTS

    first, _ = opener.index()
    pool = first._pool
    index = CaptureIndex(pool, CaptureSchema(DIALECTS["sqlite"], "b2"), first._clock,
                         max_pending=2)
    for n in range(3):
        index.ingest(copy(body=b"early %d" % n))
    assert index.status()["dropped"] == {"s1": {"backlog": 1}}
    result(index.open())
    result(index.drained())
    assert [m["body_text"] for m in search(index)["messages"]] == ["early 1", "early 0"]
