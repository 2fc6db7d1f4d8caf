# -*- test-case-name: tests.tunnel.test_client -*-
"""
The HTTP tunnel's client side (S10.3): L{TunnelClientEndpoint}, an
C{IStreamClientEndpoint} whose connections are tunnel connections to a broker's
C{httpjms}/C{httpsjms} service (L{mqgate.net.tunnel}). The protocol it connects sees a
plain byte stream, so the client library's AMQP (or a STOMP client) runs over it
unchanged.

It speaks HTTP/1.1 with C{twisted.web.client.Agent} on persistent connections:

- direct, or through an HTTP proxy: for C{http://} the proxy is asked for the absolute
  URL (C{ProxyAgent}); for C{https://} a C{CONNECT host:port} tunnel is opened through
  the proxy and TLS runs inside it (Twisted has no CONNECT step: L{_ConnectEndpoint}
  is ours). The proxy is the C{proxy} argument, else the standard C{https_proxy} /
  C{http_proxy} variables, unless C{no_proxy} names the host;
- one pull is outstanding at all times: its answer is every packet the broker had for
  us, or, after the pull period, only its ACK;
- what the protocol writes in one reactor turn goes in one push (at most
  L{MAX_PUSH} bytes, so it fits the service's request limit); one push is in flight
  at a time and the next carries what was written meanwhile;
- a request that fails (the proxy restarted, a connection reset, a 5xx) is sent again
  after a short wait, growing to L{MAX_RETRY_WAIT}: the packets' sequence numbers make
  a repeat harmless and a loss repairable (L{mqgate.tunnel.session}), so nothing is
  lost or duplicated. A connection the broker no longer knows (404), or one whose
  requests have failed for longer than the broker's connection timeout, is lost.

TLS: C{tls_context} is an C{IPolicyForHTTPS} (for instance
C{BrowserLikePolicyForHTTPS(trustRoot=...)}) or a client connection creator from
C{optionsForClientTLS}; by default the system's trusted roots and the URL's host name
are checked.
"""

import urllib.parse
import urllib.request

from twisted.internet import defer, error
from twisted.internet.address import HostnameAddress
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import (
    IConsumer, IPushProducer, IStreamClientEndpoint, ITransport)
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool, PotentialDataLoss, ProxyAgent,
    RequestNotSent, ResponseDone, ResponseNeverReceived)
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IPolicyForHTTPS
from zope.interface import implementer

from mqgate.tunnel import packets as p
from mqgate.tunnel.session import TunnelSession

__all__ = ["TunnelClientEndpoint", "TunnelError", "MAX_PUSH", "MAX_RETRY_WAIT",
           "proxy_for"]

#: Bytes of an answer read at most: a pull returns a window of packets (512 KiB) and a
#: few control packets; anything longer is not a tunnel talking.
MAX_ANSWER = 1024 * 1024
#: Bytes of packets per push at most: under the broker's smallest request limit.
MAX_PUSH = 60 * 1024
#: Seconds between retries of a failed request at most.
MAX_RETRY_WAIT = 5.0
_FIRST_RETRY_WAIT = 0.1
#: Seconds a push may take before it is given up (and sent again).
PUSH_TIMEOUT = 30.0
#: Seconds a pull may take beyond the pull period before it is given up.
PULL_GRACE = 15.0
#: Seconds the connect request may take.
CONNECT_TIMEOUT = 30.0
_HEADERS = {b"content-type": [b"application/octet-stream"],
            b"user-agent": [b"mqgate-tunnel"]}


class TunnelError(error.ConnectError):
    """The tunnel could not be opened: the message says what the server answered.

    @ivar code: the HTTP status of the answer, or None."""

    code = None


def proxy_for(url):
    """The proxy URL the environment names for C{url} (C{https_proxy}/C{http_proxy},
    C{no_proxy} honoured), or None."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


@implementer(IPolicyForHTTPS)
class _OneCreator:
    """A TLS policy that uses one client connection creator for every host."""

    def __init__(self, creator):
        self._creator = creator

    def creatorForNetloc(self, hostname, port):
        return self._creator


def _policy(tls_context):
    if tls_context is None:
        return BrowserLikePolicyForHTTPS()
    if IPolicyForHTTPS.providedBy(tls_context) or hasattr(tls_context,
                                                          "creatorForNetloc"):
        return tls_context
    return _OneCreator(tls_context)


@implementer(IStreamClientEndpoint)
class TunnelClientEndpoint:
    """Connect protocols over the HTTP tunnel at C{url} (see the module docstring).

    @param url: C{http://host:port/tunnel} or C{https://...}; any path the service
        serves the tunnel at (C{/tunnel}, C{/imqhttp/tunnel}).
    @param proxy: an HTTP proxy URL (C{http://host:port}); None: from the
        environment; C{""}: none, whatever the environment says.
    @param tls_context: see the module docstring.
    """

    def __init__(self, reactor, url, *, proxy=None, tls_context=None):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a tunnel URL is http://host:port/tunnel or https://..., "
                             f"not {url!r}")
        self._reactor = reactor
        self.url = urllib.parse.urlunsplit((parts.scheme, parts.netloc,
                                            parts.path or "/tunnel", "", ""))
        self._parts = parts
        self.proxy = proxy_for(url) if proxy is None else (proxy or None)
        self._policy = _policy(tls_context) if parts.scheme == "https" else None

    def _agent(self):
        reactor = self._reactor
        # Persistent connections, several per host: a pull is held while pushes go.
        pool = HTTPConnectionPool(reactor, persistent=True)
        pool.maxPersistentPerHost = 4
        pool.retryAutomatically = False   # the tunnel repeats requests itself
        if self.proxy is None:
            return Agent.usingEndpointFactory(
                reactor, _NoDelayEndpoints(reactor, self._policy), pool=pool), pool
        proxy = urllib.parse.urlsplit(self.proxy if "://" in self.proxy
                                      else "http://" + self.proxy)
        proxy_endpoint = _NoDelay(HostnameEndpoint(reactor, proxy.hostname,
                                                   proxy.port or 3128))
        if self._policy is None:
            return ProxyAgent(proxy_endpoint, reactor, pool=pool), pool
        return Agent.usingEndpointFactory(
            reactor, _ConnectEndpointFactory(reactor, proxy_endpoint, self._policy),
            pool=pool), pool

    def connect(self, factory):
        """Open a tunnel connection and connect C{factory}'s protocol to it.

        @return: a Deferred firing with the protocol, or failing with a
            L{TunnelError} (the server refused or did not answer as a tunnel does).
        """
        agent, pool = self._agent()
        d = agent.request(b"POST", self._request_url("connect"), Headers(_HEADERS),
                          _Body(p.encode(p.Packet(p.CONN_INIT))))
        d.addTimeout(CONNECT_TIMEOUT, self._reactor)
        d.addCallback(self._read_answer, "connect")
        d.addCallback(self._connected, factory, agent, pool)
        d.addErrback(self._connect_failed, pool)
        return d

    def _request_url(self, kind, conn_id=None, token=None):
        query = f"Type={kind}"
        if conn_id is not None:
            query += f"&ConnId={conn_id}&Token={urllib.parse.quote(token or '')}"
        return f"{self.url}?{query}".encode("ascii")

    def _read_answer(self, response, what):
        done = defer.Deferred()
        response.deliverBody(_BoundedBody(done, MAX_ANSWER))
        done.addCallback(self._check_answer, response.code, what)
        return done

    def _check_answer(self, body, code, what):
        if code != 200:
            problem = TunnelError(string=f"the tunnel at {self.url} answered {what} "
                                         f"with HTTP {code}: {body[:200]!r}")
            problem.code = code
            raise problem
        try:
            return p.parse_all(body)
        except p.PacketError as e:
            raise TunnelError(string=f"the tunnel at {self.url} answered {what} with "
                                     f"something else than tunnel packets ({e}); check "
                                     "the URL") from None

    def _connected(self, packets, factory, agent, pool):
        init = next((q for q in packets if q.type == p.CONN_INIT_ACK), None)
        if init is None:
            raise TunnelError(string=f"the tunnel at {self.url} refused the connection")
        options = dict(p.parse_option(q) for q in packets if q.type == p.CONN_OPTION)
        transport = _TunnelTransport(
            self, agent, pool, init.conn_id, init.body.decode("ascii", "replace"),
            window=init.window or 64,
            pull_period=options.get(p.OPTION_PULL_PERIOD, 60),
            timeout=options.get(p.OPTION_CONNECTION_TIMEOUT, 60))
        address = HostnameAddress(self._parts.hostname.encode("idna"),
                                  self._parts.port or (443 if self._policy else 80))
        protocol = factory.buildProtocol(address)
        if protocol is None:
            transport.abortConnection()
            raise error.ConnectError(string="the factory declined the connection")
        transport.start(protocol)
        return protocol

    def _connect_failed(self, failure, pool):
        pool.closeCachedConnections()
        if failure.check(defer.TimeoutError):
            raise TunnelError(string=f"no answer from the tunnel at {self.url} within "
                                     f"{CONNECT_TIMEOUT:g} s")
        return failure


@implementer(ITransport, IConsumer, IPushProducer)
class _TunnelTransport:
    """The transport of a protocol connected through the tunnel (see the module doc)."""

    log = Logger()
    disconnecting = False

    def __init__(self, endpoint, agent, pool, conn_id, token, *, window, pull_period,
                 timeout):
        self._endpoint = endpoint
        self._token = token
        self._reactor = endpoint._reactor
        self._agent = agent
        self._pool = pool
        self.conn_id = conn_id
        self.session = TunnelSession(conn_id, self._reactor, window=window,
                                     rto=max(10.0, 2 * pull_period))
        self._pull_period = pull_period
        self._timeout = timeout
        self.protocol = None
        self.producer = None
        self._writing_paused = False   # we paused the protocol's producer
        self._reading_paused = False   # the protocol paused us
        self._push_call = None
        self._pushing = None           # the push request in flight
        self._pulling = None           # the pull request in flight
        self._failing_since = None     # first failure of the requests failing now
        self._retry_wait = 0.0         # seconds before the next retry
        self._lost = False

    def start(self, protocol):
        self.protocol = protocol
        protocol.makeConnection(self)
        self._pull()

    # -- ITransport, IConsumer -----------------------------------------------------

    def write(self, data):
        if self._lost or self.disconnecting or not data:
            return
        self.session.write(data)
        if self.session.full and self.producer is not None and not self._writing_paused:
            self._writing_paused = True
            self.producer.pauseProducing()
        self._schedule_push()

    def writeSequence(self, data):
        self.write(b"".join(data))

    def loseConnection(self):
        """Close after what was written: a numbered CONN_CLOSE follows it."""
        if self._lost or self.disconnecting:
            return
        self.disconnecting = True
        self.session.close()
        self._schedule_push()

    def abortConnection(self):
        """Close at once: tell the broker (one try) and drop everything."""
        if self._lost:
            return
        body = p.encode_all([p.Packet(p.CONN_ABORT, self.conn_id)])
        self._request("push", body).addErrback(lambda _f: None)
        self._connection_lost(Failure(error.ConnectionAborted()))

    def getPeer(self):
        parts = self._endpoint._parts
        return HostnameAddress(parts.hostname.encode("idna"), parts.port or 0)

    def getHost(self):
        return HostnameAddress(b"localhost", 0)

    def registerProducer(self, producer, streaming):
        self.producer = producer

    def unregisterProducer(self):
        self.producer = None

    # -- IPushProducer: the protocol pauses its reading ------------------------------

    def pauseProducing(self):
        self._reading_paused = True

    def resumeProducing(self):
        self._reading_paused = False
        self._deliver()
        if self.session.has_outgoing():
            self._schedule_push()     # the broker waits for room: tell it

    def stopProducing(self):
        self.abortConnection()

    # -- requests --------------------------------------------------------------------

    def _request(self, kind, body, timeout=PUSH_TIMEOUT):
        url = self._endpoint._request_url(kind, self.conn_id, self._token)
        d = self._agent.request(b"POST", url, Headers(_HEADERS), _Body(body))
        d.addTimeout(timeout, self._reactor)
        d.addCallback(self._endpoint._read_answer, kind)
        return d

    def _schedule_push(self):
        # Everything written in this reactor turn goes in one push.
        if self._push_call is None and self._pushing is None and not self._lost:
            self._push_call = self._reactor.callLater(0, self._push)

    def _push(self):
        self._push_call = None
        if self._lost or self._pushing is not None:
            return
        if not self.session.has_outgoing():
            return
        body = p.encode_all(self.session.outgoing(max_bytes=MAX_PUSH))
        self._pushing = d = self._request("push", body)
        d.addCallbacks(self._pushed, self._push_failed)

    def _pushed(self, packets):
        self._pushing = None
        self._succeeded()
        self._received(packets)
        if not self._lost:
            self._schedule_push()

    def _push_failed(self, failure):
        self._pushing = None
        if self._lost:
            return
        if not self._failed(failure, "push"):
            return
        self.session.resend_all()
        self._push_call = self._reactor.callLater(self._retry_wait, self._push)

    def _pull(self):
        if self._lost or self._pulling is not None:
            return
        body = p.encode(self.session.ack())
        self._pulling = d = self._request("pull", body,
                                          timeout=self._pull_period + PULL_GRACE)
        d.addCallbacks(self._pulled, self._pull_failed)

    def _pulled(self, packets):
        self._pulling = None
        self._succeeded()
        self._received(packets)
        self._pull()

    def _pull_failed(self, failure):
        self._pulling = None
        if self._lost:
            return
        if self._failed(failure, "pull"):
            self._reactor.callLater(self._retry_wait, self._pull)

    def _succeeded(self):
        self._failing_since = None
        self._retry_wait = 0.0

    def _failed(self, failure, what):
        """Whether to try again: not after a 404 (the broker forgot us) or after
        failing for longer than the broker keeps a connection without a pull."""
        now = self._reactor.seconds()
        first = self._failing_since is None
        if first:
            self._failing_since = now
        text = failure.getErrorMessage()
        if failure.check(TunnelError) and failure.value.code == 404:
            self._connection_lost(Failure(error.ConnectionLost(
                f"the broker no longer knows tunnel connection {self.conn_id} "
                "(timed out?)")))
            return False
        if now - self._failing_since > self._timeout:
            self._connection_lost(Failure(error.ConnectionLost(
                f"the tunnel at {self._endpoint.url} failed for {self._timeout} s: "
                f"{text}")))
            return False
        if first and failure.check(ResponseNeverReceived, RequestNotSent):
            # Most often a kept-alive connection the proxy or the server had closed
            # (many proxies close after each request) and that we reused before its
            # close was read: try again at once, on a new connection.
            self._retry_wait = 0.0
            return True
        if self._retry_wait == 0.0 or first:
            self.log.info("tunnel {what} to {url} failed ({why}); trying again",
                          what=what, url=self._endpoint.url, why=text)
        self._retry_wait = min(max(self._retry_wait * 2, _FIRST_RETRY_WAIT),
                               MAX_RETRY_WAIT)
        return True

    def _received(self, packets):
        if self._lost:
            return
        session = self.session
        session.receive(packets)
        self._deliver()
        if self._lost:
            return
        if session.peer_closed:
            if not session.peer_aborted:
                # The broker waits for our ACK of its close: one try, not waited for.
                self._request("push", p.encode(session.ack())).addErrback(
                    lambda _f: None)
            self._connection_lost(Failure(
                error.ConnectionLost("the broker aborted the connection")
                if session.peer_aborted else error.ConnectionDone()))
            return
        if self.disconnecting and session.finished:
            self._connection_lost(Failure(error.ConnectionDone()))
            return
        if self._writing_paused and not session.full and self.producer is not None:
            self._writing_paused = False
            self.producer.resumeProducing()
        if session.has_outgoing():
            self._schedule_push()

    def _deliver(self):
        if not self._reading_paused and self.session.readable and not self._lost:
            self.protocol.dataReceived(self.session.read())

    def _connection_lost(self, reason):
        if self._lost:
            return
        self._lost = True
        for d in (self._pushing, self._pulling):
            if d is not None:
                d.cancel()
        if self._push_call is not None and self._push_call.active():
            self._push_call.cancel()
        self._pool.closeCachedConnections()
        self.protocol.connectionLost(reason)


# -- connections without Nagle's delay -----------------------------------------------------

@implementer(IStreamClientEndpoint)
class _NoDelay:
    """An endpoint whose TCP connections have Nagle's algorithm off.

    Agent writes a request's head and body in separate writes: with Nagle on, the body
    waits for the peer's delayed ACK of the head (40 ms on Linux) on every request,
    which would cap the tunnel at a few dozen requests a second."""

    def __init__(self, endpoint):
        self._endpoint = endpoint

    def connect(self, factory):
        return self._endpoint.connect(factory).addCallback(_no_delay)


def _no_delay(protocol):
    transport = protocol.transport
    while transport is not None:
        set_no_delay = getattr(transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
            break
        transport = getattr(transport, "transport", None)
    return protocol


class _NoDelayEndpoints:
    """Agent's endpoints for direct requests (TLS for https), without Nagle's delay."""

    def __init__(self, reactor, policy):
        self._reactor = reactor
        self._policy = policy

    def endpointForURI(self, uri):
        tcp = _NoDelay(HostnameEndpoint(self._reactor, uri.host, uri.port))
        if uri.scheme == b"https":
            creator = self._policy.creatorForNetloc(uri.host, uri.port)
            return wrapClientTLS(creator, tcp)
        return tcp


# -- https through a proxy: CONNECT, then TLS inside -------------------------------------

class _ConnectEndpointFactory:
    """Endpoints for C{Agent.usingEndpointFactory}: each a CONNECT tunnel through the
    proxy to the URI's host, with TLS inside it."""

    def __init__(self, reactor, proxy_endpoint, policy):
        self._reactor = reactor
        self._proxy = proxy_endpoint
        self._policy = policy

    def endpointForURI(self, uri):
        host = uri.host.decode("ascii")
        creator = self._policy.creatorForNetloc(uri.host, uri.port)
        return _ConnectEndpoint(self._proxy, host, uri.port, creator)


@implementer(IStreamClientEndpoint)
class _ConnectEndpoint:
    """Connect to C{host}:C{port} through an HTTP proxy's CONNECT, then start TLS."""

    def __init__(self, proxy_endpoint, host, port, creator):
        self._proxy = proxy_endpoint
        self._host = host
        self._port = port
        self._creator = creator

    def connect(self, factory):
        ready = defer.Deferred()
        d = self._proxy.connect(Factory.forProtocol(
            lambda: _ConnectProtocol(self, factory, ready)))
        d.addErrback(ready.errback)
        return ready


#: Bytes of a proxy's CONNECT answer read at most before giving up on it.
_MAX_CONNECT_ANSWER = 16 * 1024


class _ConnectProtocol(Protocol):
    """Ask the proxy for a tunnel; on 200 start TLS and hand the connection to the
    real protocol, forwarding everything to it from then on."""

    def __init__(self, endpoint, factory, ready):
        self._endpoint = endpoint
        self._factory = factory
        self._ready = ready
        self._buffer = b""
        self.inner = None

    def connectionMade(self):
        target = f"{self._endpoint._host}:{self._endpoint._port}".encode("idna")
        self.transport.write(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target
                             + b"\r\n\r\n")

    def dataReceived(self, data):
        if self.inner is not None:
            self.inner.dataReceived(data)
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_CONNECT_ANSWER:
                self._fail("an endless answer to CONNECT")
            return
        status = self._buffer.split(b"\r\n", 1)[0]
        rest = self._buffer[end + 4:]
        self._buffer = b""
        parts = status.split(None, 2)
        if len(parts) < 2 or parts[1] != b"200":
            self._fail(f"the proxy refused CONNECT: {status[:200]!r}")
            return
        if rest:
            self._fail("the proxy sent bytes before the TLS handshake")
            return
        self.transport.startTLS(self._endpoint._creator)
        self.inner = self._factory.buildProtocol(self.transport.getPeer())
        self.inner.makeConnection(self.transport)
        self._ready.callback(self.inner)

    def _fail(self, why):
        self.transport.abortConnection()
        ready, self._ready = self._ready, None
        if ready is not None and not ready.called:
            ready.errback(TunnelError(string=why))

    def connectionLost(self, reason):
        if self.inner is not None:
            self.inner.connectionLost(reason)
        elif self._ready is not None and not self._ready.called:
            self._ready.errback(reason)


class _BoundedBody(Protocol):
    """Collect a response body of at most C{limit} bytes; fire C{done} with it."""

    def __init__(self, done, limit):
        self._done = done
        self._limit = limit
        self._parts = []
        self._size = 0

    def dataReceived(self, data):
        self._size += len(data)
        if self._size > self._limit:
            self.transport.stopProducing()   # drops the connection: nothing more read
            return
        self._parts.append(data)

    def connectionLost(self, reason):
        if self._done.called:
            return
        if self._size > self._limit:
            self._done.errback(TunnelError(
                string=f"an answer of more than {self._limit} bytes: not a tunnel"))
        elif reason.check(ResponseDone, PotentialDataLoss):
            self._done.callback(b"".join(self._parts))
        else:
            self._done.errback(reason)


@implementer(IBodyProducer)
class _Body:
    """A request body of known bytes (C{IBodyProducer})."""

    def __init__(self, data):
        self._data = data
        self.length = len(data)

    def startProducing(self, consumer):
        consumer.write(self._data)
        return defer.succeed(None)

    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass

    def stopProducing(self):
        pass

