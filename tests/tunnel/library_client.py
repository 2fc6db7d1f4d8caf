"""The client library (mqgate.client, blocking API) over the HTTP tunnel, as a subprocess
of the tunnel's e2e tests: given only a tunnel URL and a proxy, it sends COUNT
at-least-once messages in batches and receives each batch back, printing JSON lines
(C{ready}, C{progress} after each batch, C{done} with the ids missing or repeated, or
C{error}).

    python -m tests.tunnel.library_client URL PROXY ADDRESS COUNT [BATCH]
"""

import json
import re
import sys
import time

from mqgate.client.blocking import connect

_ID = re.compile(r"ID:(\d+)\|")


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(url, proxy, address, count, batch=500):
    seen = {}
    started = time.perf_counter()
    with connect(url, credentials=("admin", "admin"), proxy=proxy) as connection:
        receiver = connection.receiver(address)
        sender = connection.sender(address)
        emit(event="ready")
        for first in range(0, count, batch):
            ids = range(first, min(first + batch, count))
            sender.send_many([f"ID:{i}|" + "x" * 240 for i in ids], timeout=60)
            for _ in ids:
                message = receiver.receive(timeout=60)
                if message is None:
                    emit(event="error", message=f"nothing received within 60 s after "
                                                f"{len(seen)} messages")
                    return 1
                key = int(_ID.search(message.body).group(1))
                seen[key] = seen.get(key, 0) + 1
            emit(event="progress", sent=ids[-1] + 1, received=len(seen))
        extra = receiver.receive(timeout=0.5)   # nothing may come twice
        if extra is not None:
            key = int(_ID.search(extra.body).group(1))
            seen[key] = seen.get(key, 0) + 1
    emit(event="done", sent=count, settled=count, received=sum(seen.values()),
         distinct=len(seen), missing=sorted(set(range(count)) - set(seen))[:20],
         duplicates=sorted(k for k, n in seen.items() if n > 1)[:20],
         seconds=round(time.perf_counter() - started, 3))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    try:
        sys.exit(main(args[0], args[1], args[2], int(args[3]),
                      *(int(a) for a in args[4:5])))
    except Exception as e:   # the test wants a line saying what went wrong
        emit(event="error", message=f"{type(e).__name__}: {e}")
        sys.exit(1)
