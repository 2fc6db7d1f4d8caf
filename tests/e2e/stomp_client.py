"""Helpers for driving the real broker with stomp.py and with raw STOMP sockets (S10.2).

stomp.py runs a receiver thread per connection and calls listener methods from it. The
helpers here never sleep and hope: every frame the broker sends is recorded by a
L{FrameCollector}, and a test waits for the frame it expects on a C{threading.Condition}
with a deadline. A wait that runs out raises L{DeadlineExceeded} naming what was awaited
and listing what did arrive, so a failing test says why.

- L{StompClient} wraps a C{stomp.Connection10/11/12} with its collector and the few
  version-dependent calls (ACK and NACK name a message differently in each version);
- L{open_client} connects one (CONNECT/STOMP, waits for CONNECTED or ERROR) and
  L{clients} closes every client a test opened, whatever happened;
- L{RawStomp} is a plain socket speaking STOMP by hand, for the frames stomp.py will not
  send (malformed ones, a client that stops heart-beating); it reads the broker's frames
  with mqgate's own parser, so the test sees exactly what went over the wire.
"""

import contextlib
import itertools
import socket
import threading
import time

import stomp

from mqgate.stomp.frames import HEARTBEAT, FrameParser

__all__ = [
    "DEFAULT_TIMEOUT", "DeadlineExceeded", "FrameCollector", "StompClient", "open_client",
    "clients", "RawStomp", "unique", "CONNECTIONS",
]

#: The broker is local: a frame that takes ten seconds on the 2-core CI machine is not
#: coming.
DEFAULT_TIMEOUT = 10.0

#: The stomp.py connection class of each STOMP version.
CONNECTIONS = {
    "1.0": stomp.Connection10,
    "1.1": stomp.Connection11,
    "1.2": stomp.Connection12,
}

_counter = itertools.count(1)


def unique(prefix):
    """A name no other test of this run uses (destinations, receipts, client ids)."""
    return f"{prefix}-{next(_counter)}-{time.monotonic_ns() % 1000000}"


class DeadlineExceeded(AssertionError):
    """An awaited frame did not arrive in time; the message says what was awaited."""


class FrameCollector(stomp.ConnectionListener):
    """Records every frame stomp.py delivers and lets a test wait for one.

    @ivar messages: the MESSAGE frames, in arrival order.
    @ivar receipts: the C{receipt-id}s of the RECEIPT frames, in order.
    @ivar errors: the ERROR frames, in order.
    @ivar connected: the CONNECTED frame, or None.
    @ivar disconnected: True once stomp.py reported the connection gone.
    """

    def __init__(self, name="client"):
        self.name = name
        self.messages = []
        self.receipts = []
        self.errors = []
        self.connected = None
        self.disconnected = False
        self.heartbeat_timeout = False
        self._changed = threading.Condition()

    # -- stomp.py callbacks (receiver thread) ------------------------------------------

    def _record(self, update):
        with self._changed:
            update()
            self._changed.notify_all()

    def on_connected(self, frame):
        self._record(lambda: setattr(self, "connected", frame))

    def on_message(self, frame):
        self._record(lambda: self.messages.append(frame))

    def on_receipt(self, frame):
        self._record(lambda: self.receipts.append(frame.headers.get("receipt-id")))

    def on_error(self, frame):
        self._record(lambda: self.errors.append(frame))

    def on_disconnected(self):
        self._record(lambda: setattr(self, "disconnected", True))

    def on_heartbeat_timeout(self):
        self._record(lambda: setattr(self, "heartbeat_timeout", True))

    # -- waiting (test thread) ------------------------------------------------------

    def wait_for(self, predicate, what, timeout=DEFAULT_TIMEOUT):
        """Wait until C{predicate()} is true (checked under the lock); return its value.

        @raise DeadlineExceeded: C{timeout} seconds passed first.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeadlineExceeded(
                        f"{self.name}: no {what} within {timeout} s; got "
                        f"{len(self.messages)} messages {self._bodies()}, receipts "
                        f"{self.receipts}, errors {[e.headers for e in self.errors]}, "
                        f"disconnected={self.disconnected}")
                self._changed.wait(remaining)

    def _bodies(self):
        return [bytes(m.body)[:40] for m in self.messages]

    def wait_for_messages(self, count, timeout=DEFAULT_TIMEOUT):
        """Wait until at least C{count} messages arrived; return the first C{count}."""
        return self.wait_for(lambda: len(self.messages) >= count and
                             self.messages[:count], f"{count} messages", timeout)

    def wait_for_receipt(self, receipt_id, timeout=DEFAULT_TIMEOUT):
        """Wait for the RECEIPT of C{receipt_id}."""
        self.wait_for(lambda: receipt_id in self.receipts, f"receipt {receipt_id}",
                      timeout)

    def wait_for_error(self, timeout=DEFAULT_TIMEOUT):
        """Wait for the first ERROR frame and return it."""
        return self.wait_for(lambda: self.errors and self.errors[0], "ERROR frame",
                             timeout)

    def wait_for_body(self, body, timeout=DEFAULT_TIMEOUT):
        """Wait for a message with this body; return it."""
        def found():
            return next((m for m in self.messages if bytes(m.body) == body), None)
        return self.wait_for(found, f"message {body!r}", timeout)

    def bodies(self):
        """The bodies received so far, as bytes."""
        with self._changed:
            return [bytes(m.body) for m in self.messages]


class StompClient:
    """A stomp.py connection of one version plus its L{FrameCollector}.

    Every call that asks for a receipt waits for it, so that when it returns the broker
    has done what the frame asked (the spec's RECEIPT: "the server has processed").
    """

    def __init__(self, connection, collector, version):
        self.connection = connection
        self.collector = collector
        self.version = version

    @property
    def messages(self):
        return self.collector.messages

    def send(self, destination, body, receipt=True, **headers):
        """SEND C{body} (bytes or text); with C{receipt}, wait until the broker has it."""
        if receipt:
            headers["receipt"] = rid = unique("send")
        self.connection.send(destination, body, headers=headers)
        if receipt:
            self.collector.wait_for_receipt(rid)

    def subscribe(self, destination, sub_id=None, ack="auto", **headers):
        """SUBSCRIBE and wait for its receipt (the consumer exists when this returns)."""
        sub_id = sub_id or unique("sub")
        headers["receipt"] = rid = unique("subscribe")
        self.connection.subscribe(destination, id=sub_id, ack=ack, headers=headers)
        self.collector.wait_for_receipt(rid)
        return sub_id

    def _settle_args(self, message):
        # 1.2 names the message by the MESSAGE's ack header; 1.1 by message-id plus the
        # subscription; 1.0 by message-id alone (the spec's ACK frame, each version).
        headers = message.headers
        if self.version == "1.2":
            return (headers["ack"],)
        if self.version == "1.1":
            return headers["message-id"], headers["subscription"]
        return (headers["message-id"],)

    def ack(self, message, transaction=None, receipt=True):
        """ACK C{message} (a MESSAGE frame); with C{receipt}, wait until it is done."""
        rid = unique("ack") if receipt else None
        self.connection.ack(*self._settle_args(message), transaction=transaction,
                            receipt=rid)
        if rid:
            self.collector.wait_for_receipt(rid)

    def nack(self, message, transaction=None, receipt=True):
        """NACK C{message} (1.1/1.2); with C{receipt}, wait until it is done."""
        rid = unique("nack") if receipt else None
        self.connection.nack(*self._settle_args(message), transaction=transaction,
                             receipt=rid)
        if rid:
            self.collector.wait_for_receipt(rid)

    def frame(self, call, *args, **headers):
        """Run C{connection.call(*args, **headers)} with a receipt and wait for it.

        For BEGIN, COMMIT, ABORT, UNSUBSCRIBE: C{client.frame("commit", "tx1")}.
        """
        headers["receipt"] = rid = unique(call)
        getattr(self.connection, call)(*args, **headers)
        self.collector.wait_for_receipt(rid)

    def disconnect(self):
        """DISCONNECT with a receipt: the broker has cleaned up when this returns."""
        if self.connection.is_connected():
            rid = unique("disconnect")
            self.connection.disconnect(receipt=rid)
            self.collector.wait_for_receipt(rid)
        self.close()

    def close(self, timeout=DEFAULT_TIMEOUT):
        """Drop the socket (no DISCONNECT) and wait for stomp.py's receiver thread to
        notice; safe to call twice. (C{transport.stop()} would wait for that thread
        without a deadline.)"""
        with contextlib.suppress(Exception):
            self.connection.transport.disconnect_socket()
        collector = self.collector
        with contextlib.suppress(DeadlineExceeded):
            collector.wait_for(lambda: collector.disconnected, "disconnection", timeout)


def open_client(address, version="1.2", user="admin", passcode="admin", heartbeats=(0, 0),
                timeout=DEFAULT_TIMEOUT, name=None, **connect_headers):
    """Connect a stomp.py client and wait for CONNECTED.

    @param address: C{(host, port)}.
    @param user: the login, or None to send none (let in as guest only where the
        service allows guests, or as the user of a verified TLS client certificate).
    @param connect_headers: more CONNECT headers (C{**{"client-id": "x"}}).
    @raise DeadlineExceeded: no CONNECTED within C{timeout} (an ERROR is shown).
    """
    cls = CONNECTIONS[version]
    kwargs = dict(auto_decode=False, reconnect_attempts_max=1, timeout=timeout)
    if version != "1.0":
        kwargs["heartbeats"] = heartbeats
    connection = cls([address], **kwargs)
    collector = FrameCollector(name or f"stomp {version}")
    connection.set_listener("collector", collector)
    connection.connect(user, passcode if user is not None else None, wait=False,
                       headers=connect_headers)
    client = StompClient(connection, collector, version)
    try:
        collector.wait_for(lambda: collector.connected or collector.errors,
                           "CONNECTED", timeout)
    except BaseException:
        client.close()
        raise
    if collector.connected is None:
        client.close()
        raise DeadlineExceeded(f"CONNECT refused: {collector.errors[0].headers}")
    return client


@contextlib.contextmanager
def clients():
    """Yield an C{open(address, **kwargs)} that opens clients; all are closed after."""
    opened = []

    def open_(*args, **kwargs):
        client = open_client(*args, **kwargs)
        opened.append(client)
        return client
    try:
        yield open_
    finally:
        for client in opened:
            client.close()


class RawStomp:
    """A plain TCP socket speaking STOMP by hand; every read has a deadline.

    Frames from the broker are parsed with L{mqgate.stomp.frames.FrameParser}; heart-beat
    EOLs are counted in C{heartbeats} and otherwise skipped.
    """

    def __init__(self, address, timeout=DEFAULT_TIMEOUT):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.timeout = timeout
        self.parser = FrameParser(None)
        self.frames = []
        self.heartbeats = 0
        self.closed = False

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def connect(self, version="1.2", *headers):
        """Send CONNECT (admin/admin) and return the broker's answer (CONNECTED)."""
        lines = [f"accept-version:{version}", "host:localhost", "login:admin",
                 "passcode:admin", *headers]
        self.send(("CONNECT\n" + "\n".join(lines) + "\n\n").encode() + b"\x00")
        return self.read_frame()

    def _recv(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            return self.sock.recv(65536)
        except socket.timeout:
            return None
        except (ConnectionResetError, BrokenPipeError):
            return b""

    def _feed(self, data):
        items = self.parser.feed(data)
        while self.parser.paused:   # after CONNECTED: read the rest as 1.2 (a superset)
            items += self.parser.resume("1.2")
        for item in items:
            if item is HEARTBEAT:
                self.heartbeats += 1
            else:
                self.frames.append(item)

    def read_frame(self, timeout=None):
        """The broker's next frame.

        @raise DeadlineExceeded: none within the timeout.
        @raise AssertionError: the broker closed the socket first.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.frames:
            data = self._recv(deadline)
            if data is None:
                raise DeadlineExceeded(f"no frame within {timeout or self.timeout} s")
            if not data:
                self.closed = True
                raise AssertionError("the broker closed the socket before the next frame")
            self._feed(data)
        return self.frames.pop(0)

    def read_until_closed(self, timeout=None):
        """Read until the broker closes the socket; return the frames read meanwhile.

        @raise DeadlineExceeded: still open after the timeout.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.closed:
            data = self._recv(deadline)
            if data is None:
                raise DeadlineExceeded(
                    f"the broker kept the socket open for {timeout or self.timeout} s")
            if not data:
                self.closed = True
            else:
                self._feed(data)
        frames, self.frames = self.frames, []
        return frames
