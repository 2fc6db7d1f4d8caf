"""An AMQP client on mqgate's own engine over the HTTP tunnel, as a subprocess.

The e2e tests (tests/e2e/test_tunnel.py) and the tunnel benchmark
(bench/tunnel_throughput.py) run it; it prints one JSON object a line on stdout:

- C{{"event": "ready"}} once its links are attached;
- C{{"event": "progress", "sent": .., "settled": .., "received": ..}} every
  C{--progress} messages;
- C{{"event": "done", ...}} at the end: what was sent and settled (accepted), how many
  distinct message ids came back, which were missing or duplicated, and the seconds.
- C{{"event": "error", "message": ..}} when something failed.

Messages carry C{ID:<n>|} in their body so that the consumer can tell each apart.
With C{--abandon K} the client takes K messages without settling them, prints
C{{"event": "abandoned"}} and then stops talking (no close, no more pulls) until it is
killed: the broker must give those K back after its connection timeout.

    python -m tests.tunnel.driver --url http://127.0.0.1:PORT/tunnel [--proxy URL]
        [--ca cert.pem] --address q --send N --receive N [--size 256] [--credit 200]
"""

import argparse
import json
import re
import sys
import time

from twisted.internet import defer, reactor, ssl
from twisted.internet.protocol import Factory, Protocol

from mqgate.amqp.connection import Connection
from mqgate.amqp.events import (
    ConnectionClosed, DeliveriesSettled, LinkAttached, LinkDetached, MessageReceived)
from mqgate.amqp.message import encode_message
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, SND_UNSETTLED, Accepted, Source, Target)
from mqgate.net.tunnel_client import TunnelClientEndpoint

_ID = re.compile(rb"ID:(\d+)\|")


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Driver(Protocol):
    """Send C{--send} at-least-once messages and take C{--receive}, on one connection."""

    def __init__(self, options, done):
        self.o = options
        self.done = done
        self.sent = self.settled = 0
        self.received = {}            # id -> times received
        self.sender = self.receiver = None
        self.attached = 0
        self.started = None
        self.abandoned = False
        self.unsettled_taken = 0
        self.first_sent = self.first_received = self.last_received = None
        self.last_settled = None

    def connectionMade(self):
        self.engine = Connection(server=False, container_id="tunnel-driver",
                                 credentials=("admin", "admin"), idle_timeout=None)
        self.flush()

    def flush(self):
        if self.abandoned:
            return
        data = self.engine.data_to_send()
        if data:
            self.transport.write(data)

    def dataReceived(self, data):
        if self.abandoned:
            return
        events = self.engine.receive_data(data)
        if self.engine.error is not None:
            return self.fail(f"protocol error: {self.engine.error}")
        if self.engine.ready and self.sender is None:
            self.open_links()
        for event in events:
            self.handle(event)
        self.pump()
        self.flush()

    def open_links(self):
        session = self.engine.begin_session()
        o = self.o
        if o.send:
            self.sender = session.attach_link("tunnel-driver-out", SENDER)
            self.sender.attach(source=Source(), target=Target(address=o.address),
                               snd_settle_mode=SND_UNSETTLED)
        if o.receive or o.abandon:
            self.receiver = session.attach_link("tunnel-driver-in", RECEIVER)
            self.receiver.attach(source=Source(address=o.address), target=Target(),
                                 snd_settle_mode=SND_UNSETTLED)
        self.sender = self.sender or False

    def handle(self, event):
        o = self.o
        if isinstance(event, LinkAttached):
            self.attached += 1
            if event.link is self.receiver:
                self.receiver.flow(o.abandon or o.credit)
            if self.attached == bool(o.send) + bool(o.receive or o.abandon):
                self.started = time.perf_counter()
                emit(event="ready")
        elif isinstance(event, MessageReceived):
            self.last_received = time.perf_counter()
            self.first_received = self.first_received or self.last_received
            found = _ID.search(event.payload)
            key = int(found.group(1)) if found else -1
            self.received[key] = self.received.get(key, 0) + 1
            if o.abandon:
                self.unsettled_taken += 1
                if self.unsettled_taken == o.abandon:
                    self.abandoned = True
                    emit(event="abandoned", taken=self.unsettled_taken)
                return
            if not event.settled:
                self.receiver.settle(event.delivery_id, Accepted())
            self.progress()
            if self.receiver.credit < o.credit // 2:
                self.receiver.flow(o.credit)
        elif isinstance(event, DeliveriesSettled):
            self.settled += len(event.deliveries)
            self.last_settled = time.perf_counter()
            self.progress()
        elif isinstance(event, (ConnectionClosed, LinkDetached)) and event.error:
            self.fail(f"{type(event).__name__}: {event.error}")

    def pump(self):
        link, o = self.sender, self.o
        if not link or self.sent >= o.send:
            self.check_done()
            return
        self.first_sent = self.first_sent or time.perf_counter()
        while (link.credit > 0 and self.sent < o.send
               and self.sent - self.settled < o.credit):
            body = b"ID:%d|" % self.sent
            link.send(encode_message(body + b"x" * max(0, o.size - len(body))),
                      settled=False)
            self.sent += 1
        self.check_done()

    def progress(self):
        every = self.o.progress
        count = self.settled + len(self.received)
        if every and count % every == 0:
            emit(event="progress", sent=self.sent, settled=self.settled,
                 received=len(self.received))

    def check_done(self):
        o = self.o
        if self.done.called or o.abandon:
            return   # an abandoning client never finishes: it is killed
        if self.settled >= o.send and len(self.received) >= o.receive:
            seconds = time.perf_counter() - (self.started or time.perf_counter())
            expected = set(range(o.receive)) if o.receive else set()
            result = dict(event="done", sent=self.sent, settled=self.settled,
                          received=sum(self.received.values()),
                          distinct=len(self.received),
                          missing=sorted(expected - set(self.received))[:20],
                          duplicates=sorted(k for k, n in self.received.items()
                                            if n > 1)[:20],
                          seconds=round(seconds, 3),
                          send_per_s=_rate(self.settled, self.first_sent,
                                           self.last_settled),
                          receive_per_s=_rate(len(self.received), self.first_received,
                                              self.last_received),
                          msgs_per_s=round((self.settled + len(self.received))
                                           / seconds) if seconds else None)
            self.engine.close()
            self.flush()
            self.done.callback(result)

    def fail(self, message):
        if not self.done.called:
            self.done.errback(RuntimeError(message))

    def connectionLost(self, reason):
        if not self.done.called and not self.abandoned:
            self.done.errback(RuntimeError(f"connection lost: {reason.getErrorMessage()}"))


def _rate(count, first, last):
    """Messages a second between the first and the last, or None."""
    if not count or first is None or last is None or last <= first:
        return None
    return round(count / (last - first))


def parse_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--proxy", default=None, help="proxy URL; '' for none")
    parser.add_argument("--ca", default=None, help="PEM file of the CA to trust")
    parser.add_argument("--address", default="tunnel.q")
    parser.add_argument("--send", type=int, default=0)
    parser.add_argument("--receive", type=int, default=0)
    parser.add_argument("--abandon", type=int, default=0)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--credit", type=int, default=500)
    parser.add_argument("--progress", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_args(argv)
    tls = None
    if options.ca:
        with open(options.ca, "rb") as f:
            authority = ssl.Certificate.loadPEM(f.read())
        from twisted.web.client import BrowserLikePolicyForHTTPS
        tls = BrowserLikePolicyForHTTPS(trustRoot=authority)
    endpoint = TunnelClientEndpoint(reactor, options.url, proxy=options.proxy,
                                    tls_context=tls)
    done = defer.Deferred()
    status = []

    def finished(result):
        emit(**result)
        status.append(0)

    def failed(failure):
        emit(event="error", message=failure.getErrorMessage())
        status.append(1)

    d = endpoint.connect(Factory.forProtocol(lambda: Driver(options, done)))
    d.addErrback(lambda f: done.called or done.errback(f))
    done.addTimeout(options.timeout, reactor)
    done.addCallbacks(finished, failed)
    done.addBoth(lambda _: reactor.callLater(0.5, reactor.stop))
    reactor.run()
    return status[0] if status else 1


if __name__ == "__main__":
    sys.exit(main())
