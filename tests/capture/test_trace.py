"""
Request/reply tracing (S7.6): requests paired with replies by reply-to and
correlation id, with latency; unanswered requests told apart from requests whose
reply address is not captured (S7.7).
"""

from mqgate.capture.index import CaptureQuery
from tests.capture.conftest import copy
from tests.deferreds import result


def test_pairs_latency_and_unanswered(any_opener):
    index, _ = any_opener.index(now=lambda: 1100.0)
    index.ingest(copy("svc", message_id="r1", reply_to="replies", at=1000.0))
    index.ingest(copy("svc", message_id="r2", reply_to="replies", at=1001.0))
    index.ingest(copy("svc", message_id="r3", reply_to="tmp.xyz", at=1002.0))
    index.ingest(copy("replies", correlation_id="r1", at=1000.25))
    index.ingest(copy("replies", correlation_id="r1", at=1000.5))    # a duplicate
    index.ingest(copy("elsewhere", correlation_id="r2", at=1001.5))  # wrong address
    result(index.drained())
    trace = result(index.trace(CaptureQuery(address="svc")))
    by_id = {p["request"]["message_id"]: p for p in trace["pairs"]}
    assert by_id["r1"]["status"] == "answered" and by_id["r1"]["latency"] == 0.25
    assert by_id["r1"]["reply"]["captured_at"] == 1000.25
    assert by_id["r1"]["duplicates"] == [5]
    assert by_id["r2"]["status"] == "unanswered" and by_id["r2"]["waiting"] == 99.0
    assert by_id["r3"]["status"] == "reply address not captured"
    assert (trace["answered"], trace["unanswered"], trace["unknown"]) == (1, 1, 1)
    assert trace["latency"]["median"] == 0.25


def test_a_reply_may_carry_the_requests_own_correlation_id(opener):
    index, _ = opener.index()
    index.ingest(copy("svc", message_id="m1", correlation_id="job-9",
                      reply_to="replies", at=1000.0))
    index.ingest(copy("replies", correlation_id="job-9", at=1002.0))
    result(index.drained())
    (pair,) = result(index.trace(CaptureQuery()))["pairs"]
    assert pair["status"] == "answered" and pair["latency"] == 2.0


def test_a_reply_to_as_the_client_wrote_it_meets_the_captured_address(opener):
    """The request says reply-to "replies"; capture writes the reply's address as
    queue://replies: they are the same place."""
    index, _ = opener.index()
    index.ingest(copy("queue://svc", message_id="r1", reply_to="replies", at=1000.0))
    index.ingest(copy("queue://replies", correlation_id="r1", at=1000.1))
    result(index.drained())
    (pair,) = result(index.trace(CaptureQuery(address="svc")))["pairs"]
    assert pair["status"] == "answered"
