# -*- test-case-name: tests.tunnel.test_server -*-
"""
The HTTP tunnel's server side (S10.3, FACTS 1.2): a twisted.web resource that carries
broker connections in HTTP requests, for clients that can only reach the broker through
HTTP(S) or an HTTP proxy.

Every request is C{GET} or C{POST} on the tunnel's path (C{/tunnel}, and the source
system's C{/imqhttp/tunnel}) with a query C{Type}:

- C{Type=connect}: a new tunnel connection. The body may hold a CONN_INIT packet. The
  answer is a CONN_INIT_ACK packet with the new connection id and, as its body, the
  connection's secret token; then two CONN_OPTION packets: the pull period and the
  connection timeout, in seconds. Every later request names the connection with
  C{ConnId=N&Token=T}: the id alone (31 bits) could be guessed, and whoever knows it
  could read another client's stream. The broker-side protocol is built at once from
  the service's own factory (AMQP or STOMP, told from the first bytes, as on a socket)
  through a L{VirtualTransport}.
- C{Type=push&ConnId=N&Token=T}: the body is the client's packets (DATA, its ACK,
  CONN_CLOSE, CONN_ABORT). The answer is our ACK.
- C{Type=pull&ConnId=N&Token=T}: the body may hold the client's ACK. The answer is
  every packet we have for the client, at once; with nothing to send the request is
  held (a long poll) until there is, or for the pull period at most, then answered
  with our ACK.
  One pull is kept: a new one answers the one before. A pull also tells us that the
  answer to the one before arrived or was lost, so what it does not acknowledge is
  sent again (L{TunnelSession.resend_all}).
- no C{Type}: a one-line status text, as the source system's servlet answers.

Anything else is a clear HTTP error with a JSON body: 400 for an unknown type or
malformed packets, 404 for a connection id we do not know (closed or timed out).

A connection with no pull for the connection timeout is closed as a lost socket would
be: its protocol hears C{connectionLost}, so the deliveries it had not settled go back
to their queues. Its buffers are bounded by the tunnel window both ways: what the
broker writes beyond it pauses the connection's egress (the transport's producer), and
what the client sends while the protocol does not read stays in the session, which
advertises the room left, so that the client stops.
"""

import hmac
import secrets

from twisted.internet import error
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource

from mqgate.net.virtual import VirtualTransport
from mqgate.tunnel import packets as p
from mqgate.tunnel.session import TunnelSession
from mqgate.web.gateway import carrier_of
from mqgate.web.site import json_body

__all__ = ["TunnelResource", "TunnelConnection", "MAX_PULL_PERIOD", "PATHS"]

#: Seconds a pull is held at most (the source system's MAX_PULL_BLOCK_PERIOD).
MAX_PULL_PERIOD = 60
#: Where the tunnel is served under a gateway service: ours and the source system's.
PATHS = ("tunnel", "imqhttp/tunnel")
#: Seconds the broker waits for the client to acknowledge its close.
CLOSE_WAIT = 10.0
#: Packets in one request at most: a full window and its control packets.
_MAX_PACKETS = 256
_OCTETS = b"application/octet-stream"


class TunnelConnection:
    """One tunnel connection on the server: its session, its transport, its pull.

    @ivar transport: the L{VirtualTransport} of the broker-side protocol.
    """

    log = Logger()

    def __init__(self, resource, conn_id, clock, *, pull_period, timeout, window):
        self._resource = resource
        self.conn_id = conn_id
        self.token = secrets.token_urlsafe(24)
        self._clock = clock
        self._pull_period = pull_period
        self._timeout = timeout
        # The server sends again what a pull does not acknowledge (resend_all); a
        # timer of its own would only repeat a pull response still on its way.
        self.session = TunnelSession(conn_id, clock, window=window,
                                     rto=pull_period + timeout)
        self.transport = None
        self._pull = None            # the held pull request
        self._pull_call = None       # ends the held pull at the pull period
        self._answer_call = None     # answers the held pull in the next turn
        self._last_pull = clock.seconds()
        self._expiry_call = None
        self._reading_paused = False
        self._closing = False
        self._close_call = None
        self._gone = False

    # -- the carrier's side of the VirtualTransport ----------------------------------

    def send(self, data):
        """Bytes the broker writes: into the session, out with the next pull."""
        session = self.session
        session.write(data)
        if session.full:
            self.transport.pause_writing()
        self._wake()

    def close(self, abort):
        """The broker closes the connection: at once (C{abort}), or after what it
        wrote, with a numbered CONN_CLOSE the client acknowledges."""
        if abort:
            self._end(Failure(error.ConnectionAborted()), say_abort=True)
            return
        self._closing = True
        self.session.close()
        self._wake()
        # A client with a pull held acknowledges the close within a round trip; one
        # that does not is not waited for the whole connection timeout.
        self._close_call = self._clock.callLater(
            CLOSE_WAIT, self._end, Failure(error.ConnectionLost(
                "the client did not acknowledge the close")))

    def pause_reading(self):
        """The protocol reads no more for now: what comes stays in the session."""
        self._reading_paused = True

    def resume_reading(self):
        """The protocol reads again: hand over what waited; tell the client of room."""
        self._reading_paused = False
        self._deliver()
        self._wake()

    # -- requests --------------------------------------------------------------------

    def pushed(self, packets):
        """The client's packets: deliver what is in order; answer with our ACK."""
        self._received(packets)
        return p.encode(self.session.ack())

    def pulled(self, request, packets):
        """A pull: answer now if there is something to say, else hold it."""
        if self._pull is not None:
            self._answer()           # a pull kept is answered by the next one
        self._last_pull = self._clock.seconds()
        self.session.resend_all()    # the previous answer arrived (acked) or was lost
        self._received(packets)
        if self._gone:
            return p.encode(p.Packet(p.CONN_ABORT, self.conn_id))
        if self.session.has_outgoing():
            return p.encode_all(self.session.outgoing())
        self._pull = request
        self._pull_call = self._clock.callLater(self._pull_period, self._answer)
        request.notifyFinish().addBoth(self._pull_finished, request)
        return server.NOT_DONE_YET

    def _received(self, packets):
        session = self.session
        session.receive(packets)
        if self._gone:
            return
        self._deliver()
        if session.peer_aborted:
            self._end(Failure(error.ConnectionLost("the client aborted the tunnel "
                                                   "connection")))
        elif session.peer_closed:
            self._end(Failure(error.ConnectionDone("the client closed the tunnel "
                                                   "connection")))
        elif self._closing and session.finished:
            self._end(Failure(error.ConnectionDone()))
        elif not session.full:
            self.transport.resume_writing()

    def _deliver(self):
        if not self._reading_paused and self.session.readable:
            self.transport.receive(self.session.read())

    def _wake(self):
        """Answer the held pull in the next reactor turn, with whatever was written
        in this one (many writes, one response)."""
        if self._pull is not None and self._answer_call is None:
            self._answer_call = self._clock.callLater(0, self._answer_if_due)

    def _answer_if_due(self):
        self._answer_call = None
        if self.session.has_outgoing():
            self._answer()

    def _answer(self):
        request, self._pull = self._pull, None
        self._cancel_calls()
        if request is None:
            return
        self._last_pull = self._clock.seconds()
        request.setHeader(b"content-type", _OCTETS)
        request.write(p.encode_all(self.session.outgoing()))
        request.finish()

    def _pull_finished(self, _result, request):
        # Answered, or its HTTP connection went (a proxy restarted): no pull is held
        # now, and the connection timeout runs from here.
        if self._pull is request:
            self._pull = None
            self._cancel_calls()
        self._last_pull = self._clock.seconds()

    def _cancel_calls(self):
        for name in ("_pull_call", "_answer_call"):
            call = getattr(self, name)
            if call is not None and call.active():
                call.cancel()
            setattr(self, name, None)

    # -- expiry ---------------------------------------------------------------------

    def watch(self):
        """Check for the connection timeout now and then."""
        self._expiry_call = self._clock.callLater(self._timeout, self._check_expiry)

    def _check_expiry(self):
        self._expiry_call = None
        if self._gone:
            return
        now = self._clock.seconds()
        idle = now - self._last_pull
        if self._pull is None and idle >= self._timeout:
            self.log.info(
                "tunnel connection {id} of {peer} closed: no pull for {idle:.0f} s "
                "(mqgate.{service}.*.connectionTimeout)", id=self.conn_id,
                peer=self._resource.peer_text(self.transport), idle=idle,
                service=self._resource.service_name)
            self._end(Failure(error.ConnectionLost("no pull within the tunnel's "
                                                   "connection timeout")))
            return
        wait = self._timeout - idle if self._pull is None else self._timeout
        self._expiry_call = self._clock.callLater(max(wait, 0.1), self._check_expiry)

    def _end(self, reason, say_abort=False):
        """Forget the connection; its protocol hears C{connectionLost(reason)}."""
        if self._gone:
            return
        self._gone = True
        for call in (self._expiry_call, self._close_call):
            if call is not None and call.active():
                call.cancel()
        self._expiry_call = self._close_call = None
        request, self._pull = self._pull, None
        self._cancel_calls()
        if request is not None:
            request.setHeader(b"content-type", _OCTETS)
            last = [self.session.ack()]
            if say_abort:
                last.append(p.Packet(p.CONN_ABORT, self.conn_id))
            request.write(p.encode_all(last))
            request.finish()
        self._resource.forget(self.conn_id)
        self.transport.carrier_lost(reason)


class TunnelResource(Resource):
    """The tunnel's requests (see the module docstring) for one gateway service.

    @param factory: the service's protocol factory (the sniffing one).
    @param clock: an C{IReactorTime}.
    @param service_name: C{httpjms} or C{httpsjms}, for log lines.
    @param pull_period: seconds a pull is held at most (capped at L{MAX_PULL_PERIOD};
        0 or less: that cap).
    @param connection_timeout: seconds without a pull after which a connection is
        closed.
    """

    isLeaf = True
    log = Logger()

    def __init__(self, factory, clock, *, service_name, pull_period, connection_timeout,
                 window=64):
        super().__init__()
        self._factory = factory
        self._clock = clock
        self.service_name = service_name
        # -1 and 0 are the source system's "keep a pull pending": the longest hold.
        self.pull_period = (MAX_PULL_PERIOD if pull_period <= 0
                            else min(pull_period, MAX_PULL_PERIOD))
        self.connection_timeout = connection_timeout
        self.window = window
        self.connections = {}

    def forget(self, conn_id):
        self.connections.pop(conn_id, None)

    @staticmethod
    def peer_text(transport):
        peer = transport.getPeer() if transport is not None else None
        return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"

    def render_GET(self, request):
        return self.render_POST(request)

    def render_POST(self, request):
        kind = _arg(request, b"Type")
        if kind is None:
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return (f"mqgate HTTP tunnel ready ({len(self.connections)} connections)\n"
                    .encode("utf-8"))
        handler = {"connect": self._connect, "push": self._push,
                   "pull": self._pull}.get(kind)
        if handler is None:
            return _error(request, 400, f"unknown tunnel request Type={kind!r}; "
                                        "expected connect, push or pull")
        body = request.content.read() if request.content is not None else b""
        try:
            packets = p.parse_all(body, limit=_MAX_PACKETS)
        except p.PacketError as e:
            return _error(request, 400, f"malformed tunnel request: {e.description}")
        return handler(request, packets)

    def _connect(self, request, packets):
        if any(q.type != p.CONN_INIT for q in packets):
            return _error(request, 400, "a tunnel connect carries a CONN_INIT packet "
                                        "only")
        conn_id = self._new_id()
        connection = TunnelConnection(self, conn_id, self._clock,
                                      pull_period=self.pull_period,
                                      timeout=self.connection_timeout,
                                      window=self.window)
        peer, host, tls = carrier_of(request)
        transport = VirtualTransport(
            send=connection.send, close=connection.close, peer=peer, host=host,
            pause_reading=connection.pause_reading,
            resume_reading=connection.resume_reading, tls=tls)
        connection.transport = transport
        self.connections[conn_id] = connection
        if transport.connect(self._factory) is None or connection._gone:
            self.forget(conn_id)
            request.setResponseCode(503)
            request.setHeader(b"content-type", _OCTETS)
            return p.encode(p.Packet(p.CONN_REJECTED, conn_id))
        connection.watch()
        request.setHeader(b"content-type", _OCTETS)
        request.setHeader(b"cache-control", b"no-store")
        return p.encode_all([
            p.Packet(p.CONN_INIT_ACK, conn_id, window=self.window,
                     body=connection.token.encode("ascii")),
            p.option(conn_id, p.OPTION_PULL_PERIOD, self.pull_period),
            p.option(conn_id, p.OPTION_CONNECTION_TIMEOUT, self.connection_timeout)])

    def _push(self, request, packets):
        connection, problem = self._lookup(request, packets)
        if connection is None:
            return problem
        request.setHeader(b"content-type", _OCTETS)
        return connection.pushed(packets)

    def _pull(self, request, packets):
        connection, problem = self._lookup(request, packets)
        if connection is None:
            return problem
        request.setHeader(b"content-type", _OCTETS)
        request.setHeader(b"cache-control", b"no-store")
        return connection.pulled(request, packets)

    def _lookup(self, request, packets):
        """The connection named by C{ConnId} (or the packets' header), else an error."""
        text = _arg(request, b"ConnId")
        try:
            conn_id = int(text) if text is not None else (
                packets[0].conn_id if packets else None)
        except ValueError:
            return None, _error(request, 400, f"ConnId={text!r} is not a number")
        if conn_id is None:
            return None, _error(request, 400, "a tunnel push or pull needs ConnId=")
        if any(q.conn_id != conn_id for q in packets):
            return None, _error(request, 400, f"packets of another connection than "
                                              f"ConnId={conn_id}")
        connection = self.connections.get(conn_id)
        token = _arg(request, b"Token") or ""
        if connection is None or not hmac.compare_digest(
                token.encode("utf-8"), connection.token.encode("ascii")):
            # A wrong token is answered as an unknown id: nothing tells a guesser
            # that the id exists.
            return None, _error(request, 404, f"no tunnel connection {conn_id} (closed, "
                                              "or timed out without a pull); connect "
                                              "again")
        return connection, None

    def _new_id(self):
        # Random, so that one client cannot guess another's id from its own.
        while True:
            conn_id = secrets.randbits(31)
            if conn_id and conn_id not in self.connections:
                return conn_id

    def shutdown(self):
        """Close every tunnel connection's carrier (the broker is stopping)."""
        for connection in list(self.connections.values()):
            connection._end(Failure(error.ConnectionDone("the broker is stopping")))


def _arg(request, name):
    values = request.args.get(name) if request.args else None
    if not values:
        return None
    return values[0].decode("utf-8", "replace")


def _error(request, status, message):
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json_body(status, message)
