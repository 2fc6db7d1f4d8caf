# -*- test-case-name: tests.capture.test_trace -*-
"""
Request/reply tracing (S7.6): which captured request got which captured reply, how
long it took, and which requests have no reply.

A request is a message with a reply-to. Its reply is a message sent to that reply-to
address whose correlation id is the request's message id (the usual convention) or,
failing that, the request's own correlation id (clients that pass one along). The
first such reply counts; later ones are listed as duplicates.

Capture is per address (S7.7): a reply is only seen when its address is captured too.
A request without a reply is therefore told apart by whether anything at all was
captured on its reply address: if not, the index cannot know (C{"reply address not
captured"}), which is not the same as no reply.
"""

from mqgate.capture.record import address_forms

__all__ = ["pair_requests"]


def pair_requests(requests, replies, captured_addresses, *, now):
    """Pair C{requests} with C{replies} (L{mqgate.capture.record.CaptureRecord}s).

    @param captured_addresses: addresses (as capture writes them, or as the
        requests' reply-to say) on which anything was captured.
    @param now: seconds since the epoch, for the age of unanswered requests.
    @return: C{{"pairs": [...], "unanswered": N, "unknown": N, "latency": {...}}};
        each pair has C{request}, C{reply} (or None), C{latency} seconds (or None),
        C{status}: C{"answered"}, C{"unanswered"} or C{"reply address not captured"},
        and C{duplicates}: ids of further replies.
    """
    by_key = {}
    for reply in sorted(replies, key=lambda r: (r.captured_at, r.seq or 0)):
        by_key.setdefault((reply.address, reply.correlation_id), []).append(reply)
    pairs = []
    latencies = []
    unanswered = unknown = 0
    for request in requests:
        found = []
        # A client writes reply-to "replies", capture writes queue://replies.
        forms = address_forms(request.reply_to)
        for key in (request.message_id, request.correlation_id):
            if key is not None:
                found = [r for form in forms for r in by_key.get((form, key), ())
                         if r.seq != request.seq]
                found.sort(key=lambda r: (r.captured_at, r.seq or 0))
                if found:
                    break
        entry = {"request": request.summary(), "reply": None, "latency": None,
                 "duplicates": []}
        if found:
            reply = found[0]
            entry["reply"] = reply.summary()
            entry["latency"] = round(reply.captured_at - request.captured_at, 6)
            entry["duplicates"] = [r.seq for r in found[1:]]
            entry["status"] = "answered"
            latencies.append(entry["latency"])
        elif captured_addresses.intersection(forms):
            entry["status"] = "unanswered"
            entry["waiting"] = round(now - request.captured_at, 3)
            unanswered += 1
        else:
            entry["status"] = "reply address not captured"
            unknown += 1
        pairs.append(entry)
    return {"pairs": pairs, "answered": len(latencies), "unanswered": unanswered,
            "unknown": unknown, "latency": _latency(latencies)}


def _latency(values):
    """Minimum, median, 95th percentile and maximum, in seconds (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return {"min": ordered[0], "median": ordered[n // 2],
            "p95": ordered[min(n - 1, int(n * 0.95))], "max": ordered[-1]}
