"""A topic consumer in a child process, for the egress tests (S9): the test stops it
with SIGSTOP so that it stops reading its socket, then lets it go on with SIGCONT.

    python -m tests.e2e.egress_consumer URL ADDRESS OUTFILE

It attaches an at-most-once (pre-settled) receiver with a large credit, prints
``ready`` once attached, then writes one line per message to OUTFILE: the message's
``seq`` application property and whether it carried the discard indication annotation
(``x-opt-discard-indication``). A message whose body is ``END`` ends it.
"""

import sys

from proton import symbol
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

DISCARD_INDICATION = symbol("x-opt-discard-indication")


def main(url, address, outfile):
    connection = BlockingConnection(url, timeout=60)
    receiver = connection.create_receiver(address, credit=100_000, options=AtMostOnce())
    print("ready", flush=True)
    with open(outfile, "w", encoding="ascii") as out:
        while True:
            message = receiver.receive(timeout=120)
            if message.body == "END":
                break
            flagged = bool((message.annotations or {}).get(DISCARD_INDICATION))
            out.write(f"{message.properties['seq']} {int(flagged)}\n")
    connection.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
