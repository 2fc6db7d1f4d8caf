# -*- test-case-name: tests.capture.test_verify -*-
"""
"Verify on broker" (S7.5, S7.7): is a captured message still on the broker now?

Capture copies a message as it is routed; by the time an operator looks, the original
may have been consumed, expired, or still wait in its queue. Where the copy carries the
original's id, the queues it reached are looked through (a browse: nothing is taken or
changed) for a message of that id. The answer says what was checked and what could
not be: a message being delivered to a consumer is not waiting in its queue, and a
topic's copy cannot tell which subscriptions got the original (S7.7).
"""

from mqgate.core.browse import snapshot
from mqgate.core.addresses import NotFound

__all__ = ["verify_on_broker"]


def verify_on_broker(broker, summary):
    """Look for the original of a captured message (its L{CaptureRecord.summary}).

    @return: C{{"offered": bool, "reason": why not | None, "checked": [queue...],
        "found_in": [queue...], "missing": [queue: why...], "note": text}}.
    """
    verify = summary["verify"]
    answer = {"offered": verify["offered"], "reason": verify["reason"],
              "original_id": verify["original_id"], "checked": [], "found_in": [],
              "missing": {}, "note": None}
    if not verify["offered"]:
        return answer
    queues = summary["routed_to"]
    if queues is None:
        answer["offered"] = False
        answer["reason"] = (f"{summary['address']} is a topic: capture keeps one copy "
                            "per routed message and cannot tell which subscriptions "
                            "got it")
        return answer
    original = verify["original_id"]
    for name in queues:
        answer["checked"].append(name)
        try:
            queue = broker.queue(name)
        except NotFound:
            answer["missing"][name] = "the queue no longer exists"
            continue
        if any(_is_original(message, original) for message, _ in snapshot(queue)):
            answer["found_in"].append(name)
        else:
            answer["missing"][name] = ("not waiting there: consumed, being delivered "
                                       "to a consumer, expired or purged")
    if not answer["found_in"]:
        answer["note"] = "the original is not waiting in any queue it reached"
    return answer


def _is_original(message, original):
    # Capture copies the producer's message-id as the original's id (the broker's own
    # sequence numbers are not kept across a restart, so they are not offered).
    return message.message_id is not None and str(message.message_id) == original
