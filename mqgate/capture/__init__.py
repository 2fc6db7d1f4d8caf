"""
The capture index and its views (S7.5-S7.7): what keeps the copies capture in the core
hands over (L{mqgate.core.taps}), finds them again, and shows them live.

    record.py   a captured copy as one row: decoded, its body bounded
    schema.py   the index's tables on SQLite or PostgreSQL, and its queries
    index.py    the index: batched writes, search, retention, drops
    tail.py     the live tail: readers, each with a bounded backlog
    trace.py    request/reply pairing
    client.py   the command line (`mqgate capture tail|search`) over the HTTP API
"""
