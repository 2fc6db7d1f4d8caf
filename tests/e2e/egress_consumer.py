"""A topic consumer in a child process, for the egress tests (S9): the test stops it
with SIGSTOP so that it stops reading its socket, then lets it go on with SIGCONT.

    python -m tests.e2e.egress_consumer URL ADDRESS OUTFILE
    python -m tests.e2e.egress_consumer stomp://HOST:PORT DESTINATION OUTFILE

Over AMQP (Proton) it attaches an at-most-once (pre-settled) receiver with a large
credit; over STOMP it subscribes with ``ack:auto``, as guest. It prints ``ready`` once
attached, then writes one line per message to OUTFILE: the message's ``seq``
application property (header) and whether it carried the discard indication (the
``x-opt-discard-indication`` annotation, the ``discard-indication:true`` header). A
message whose body is ``END`` ends it.
"""

import sys

from proton import symbol
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

DISCARD_INDICATION = symbol("x-opt-discard-indication")


def stomp_main(url, destination, outfile):
    from tests.e2e.stomp_client import RawStomp
    host, port = url[len("stomp://"):].rsplit(":", 1)
    raw = RawStomp((host, int(port)), timeout=120)
    raw.send(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
    assert raw.read_frame().command == "CONNECTED"
    raw.send(f"SUBSCRIBE\nid:1\ndestination:{destination}\nack:auto\nreceipt:r\n\n"
             .encode() + b"\x00")
    assert raw.read_frame().command == "RECEIPT"
    print("ready", flush=True)
    with open(outfile, "w", encoding="ascii") as out:
        while True:
            frame = raw.read_frame()
            if bytes(frame.body) == b"END":
                break
            flagged = frame.get("discard-indication") == "true"
            out.write(f"{frame.get('seq')} {int(flagged)}\n")
    raw.close()


def main(url, address, outfile):
    if url.startswith("stomp://"):
        return stomp_main(url, address, outfile)
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
