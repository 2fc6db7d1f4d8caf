"""A lean AMQP client on mqgate's own engine, on Twisted, over any stream endpoint.

The same client over TCP (C{amqp://host:port}) or WebSocket (C{ws://…}, C{wss://…},
through L{mqgate.ws.client.WebSocketClientEndpoint}): only the endpoint differs, so
the e2e tests show AMQP working over WebSocket with mqgate's own client engine, and
the WebSocket benchmark (bench/ws_throughput.py) compares the two transports with one
generator. Run as a script, one role per process:

    python tests/ws/engine_peer.py consume URL --address q --messages N
    python tests/ws/engine_peer.py produce URL --address q --messages N [--unsettled]

A consumer prints C{ready} once attached, then one JSON line (C{received},
C{seconds}, C{msgs_per_s}, C{bodies}: the first few, with C{--show}); a producer one
JSON line (C{sent}, C{settled}, C{seconds}, C{msgs_per_s}). Any failure prints a JSON
line with C{error} and exits 1; nothing waits without a deadline (C{--timeout}).
"""

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from twisted.internet import defer, endpoints, ssl, task  # noqa: E402
from twisted.internet.protocol import Factory, Protocol  # noqa: E402

from mqgate.amqp.connection import Connection  # noqa: E402
from mqgate.amqp.events import (  # noqa: E402
    ConnectionClosed, DeliveriesSettled, LinkAttached, LinkDetached, MessageReceived,
    SaslCompleted)
from mqgate.amqp.message import encode_message, parse_message  # noqa: E402
from mqgate.amqp.performatives import (  # noqa: E402
    RECEIVER, SENDER, SND_SETTLED, SND_UNSETTLED, Accepted, Source, Target)
from mqgate.ws.client import WebSocketClientEndpoint  # noqa: E402

BATCH = 200


class PeerError(Exception):
    pass


class EnginePeer(Protocol):
    """Drive one AMQP connection: attach one link, then produce or consume."""

    def __init__(self, options, done):
        self.options = options
        self.done = done
        self.engine = Connection(server=False, container_id=f"ws-peer-{options.role}",
                                 credentials=_credentials(options), idle_timeout=None)
        self.link = None
        self.sent = self.settled = self.received = 0
        self.first = self.last = None
        self.bodies = []
        self.payload = encode_message(options.body.encode() or b"x" * options.size)
        self.accepted = Accepted()
        self.lost = defer.Deferred()

    def connectionMade(self):
        self.flush()

    def dataReceived(self, data):
        try:
            events = self.engine.receive_data(data)
            if self.engine.error is not None:
                raise PeerError(f"protocol error: {self.engine.error}")
            for event in events:
                self.handle(event)
            self.step()
        except PeerError as e:
            self.finish(error=str(e))
        self.flush()

    def connectionLost(self, reason):
        self.finish(error=f"connection lost: {reason.getErrorMessage()}")
        self.lost.callback(None)

    def handle(self, event):
        if isinstance(event, SaslCompleted) and not event.ok:
            raise PeerError("authentication failed")
        if isinstance(event, (ConnectionClosed, LinkDetached)) and event.error:
            raise PeerError(f"{type(event).__name__}: {event.error}")
        if isinstance(event, LinkAttached) and self.options.role == "consume":
            self.link.flow(self.options.prefetch)
            print("ready", flush=True)
        elif isinstance(event, MessageReceived):
            self.received += 1
            self.last = time.perf_counter()
            self.first = self.first or self.last
            if len(self.bodies) < self.options.show:
                self.bodies.append(_body_text(event))
            if not event.settled:
                self.link.settle(event.delivery_id, self.accepted)
        elif isinstance(event, DeliveriesSettled):
            self.settled += len(event.deliveries)

    def step(self):
        options = self.options
        if self.link is None and self.engine.ready:
            self.attach()
        if self.link is None:
            return
        if options.role == "consume":
            if self.link.credit < options.prefetch // 2:
                self.link.flow(options.prefetch)
            if self.received >= options.messages:
                self.finish()
            return
        batch = 0
        while self.link.credit and self.sent < options.messages and batch < BATCH:
            self.link.send(self.payload, settled=not options.unsettled)
            self.sent += 1
            batch += 1
            self.first = self.first or time.perf_counter()
        if not options.unsettled:
            self.settled = self.sent
        if self.settled >= options.messages:
            self.last = time.perf_counter()
            self.finish()
        elif batch == BATCH:
            # More credit may be left: go on in the next turn, after reading.
            from twisted.internet import reactor
            reactor.callLater(0, self._go_on)

    def _go_on(self):
        if not self.done.called:
            self.step()
            self.flush()

    def attach(self):
        mode = SND_UNSETTLED if self.options.unsettled else SND_SETTLED
        role = RECEIVER if self.options.role == "consume" else SENDER
        self.link = self.engine.begin_session().attach_link(
            f"ws-peer-{self.options.role}", role)
        address = self.options.address
        if role is SENDER:
            self.link.attach(source=Source(), target=Target(address=address),
                             snd_settle_mode=mode)
        else:
            self.link.attach(source=Source(address=address), target=Target(),
                             snd_settle_mode=mode)

    def flush(self):
        data = self.engine.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def finish(self, error=None):
        if self.done.called:
            return
        seconds = (self.last or 0) - (self.first or 0)
        count = self.received if self.options.role == "consume" else self.sent
        result = {"role": self.options.role, "sent": self.sent, "settled": self.settled,
                  "received": self.received, "seconds": round(seconds, 4),
                  "msgs_per_s": round(count / seconds, 1) if seconds > 0 else None}
        if self.bodies:
            result["bodies"] = self.bodies
        if error is not None:
            result["error"] = error
        self.done.callback(result)


def _credentials(options):
    return (options.user, options.password) if options.user else "ANONYMOUS"


def _body_text(event):
    try:
        sections = parse_message(event.payload).body_sections()
    except Exception:   # a test helper: show what it can
        return None
    parts = [value for _code, value in sections]
    if len(parts) == 1 and isinstance(parts[0], (bytes, bytearray)):
        return bytes(parts[0]).decode("utf-8", "replace")
    return repr(parts)


def endpoint_for(reactor, url, options):
    """A TCP endpoint for amqp://, the WebSocket endpoint for ws:// and wss://."""
    parts = urlsplit(url)
    if parts.scheme == "amqp":
        return endpoints.TCP4ClientEndpoint(reactor, parts.hostname, parts.port)
    tls = None
    if parts.scheme == "wss" and options.cafile:
        with open(options.cafile, "rb") as f:
            authority = ssl.Certificate.loadPEM(f.read())
        tls = ssl.optionsForClientTLS(options.tls_name or parts.hostname,
                                      trustRoot=authority)
    return WebSocketClientEndpoint(reactor, url, subprotocol=options.subprotocol,
                                   tls_context=tls, origin=options.origin)


async def run(reactor, options):
    done = defer.Deferred()
    factory = Factory.forProtocol(lambda: EnginePeer(options, done))
    endpoint = endpoint_for(reactor, options.url, options)
    timeout = reactor.callLater(options.timeout, lambda: done.called or done.callback(
        {"role": options.role, "error": f"no result within {options.timeout} s"}))
    try:
        protocol = await endpoint.connect(factory)
    except Exception as e:
        result = {"role": options.role, "error": f"connect failed: {e}"}
    else:
        result = await done
        if result.get("error") is None:
            # Close, and wait until it is closed: the reactor stopping earlier could
            # leave what was written (the last transfers) unsent.
            protocol.engine.close()
            protocol.flush()
            protocol.transport.loseConnection()
            await protocol.lost
    if timeout.active():
        timeout.cancel()
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("consume", "produce"))
    parser.add_argument("url")
    parser.add_argument("--address", default="ws.peer")
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--body", default="")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--unsettled", action="store_true")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="admin")
    parser.add_argument("--subprotocol", default="amqp")
    parser.add_argument("--origin", default=None)
    parser.add_argument("--cafile", default=None)
    parser.add_argument("--tls-name", default=None)
    parser.add_argument("--show", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)

    def react(reactor):
        return defer.ensureDeferred(run(reactor, options)).addCallback(_exit)

    task.react(react)


def _exit(code):
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
