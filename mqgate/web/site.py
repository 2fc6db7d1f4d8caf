# -*- test-case-name: tests.web.test_site -*-
"""
An HTTP service: a twisted.web L{Site} on a L{ConnectionService} (S1.1, S11.2).

Nothing here knows what the site serves: the admin API (L{mqgate.web.admin}) is one
resource put on it, and the HTTP tunnel and WebSocket services can be others. What
every HTTP service of the broker shares is here:

- L{web_endpoint}: the listening endpoint of an C{http} or C{https} service (TLS from
  the broker's key store, as for the other TLS services);
- L{make_site}: a site whose requests cannot cost more than their bound: a body larger
  than C{max_body} bytes is refused with 413 as soon as it is announced (a
  Content-Length) or passed (chunked), and is never spooled to a temporary file as
  twisted.web does for large bodies; a connection idle for C{timeout} seconds is
  closed; at most C{max_connections} are open at once (more are closed at once);
- L{web_service}: the L{ConnectionService} that listens with it and registers it with
  the port mapper under its transport (C{http}/C{https});
- L{MadeAtFirstRequest}: a resource that is only built when a request comes, so that
  a broker nobody asks over HTTP never imports what answers (klein, for the API).
"""

import io
import json

from twisted.internet.interfaces import IProtocolNegotiationFactory
from twisted.protocols.policies import ThrottlingFactory
from twisted.web import resource, server
from zope.interface import implementer

from mqgate.net.services import ConnectionService, endpoint_description
from mqgate.net.tls import server_endpoint

__all__ = ["HTTP", "HTTPS", "web_endpoint", "make_site", "web_service",
           "BoundedRequest", "json_body", "json_answer", "json_error"]

HTTP, HTTPS = "http", "https"


def json_body(status, message):
    """The JSON error body every HTTP service answers with: C{{"error", "status"}}."""
    return json.dumps({"error": message, "status": status}).encode("utf-8")


_JSON = b"application/json; charset=utf-8"


def json_answer(request, status, data):
    """Set C{request}'s status and JSON headers (never cached) and return C{data} as
    the JSON body."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", _JSON)
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(data, default=str).encode("utf-8")


def json_error(request, status, message):
    """As L{json_answer}, with the error body of L{json_body}."""
    return json_answer(request, status, {"error": message, "status": status})


class MadeAtFirstRequest(resource.Resource):
    """A leaf resource made by C{make()} when the first request comes, then used for
    every request.

    The admin API's resource comes from klein, whose import is a sixth of the CPU a
    broker spends starting up; most brokers are never asked anything over HTTP. The
    first request pays for it instead (a tenth of a second, once). A C{make} that
    fails answers that request with twisted.web's 500 and is tried again by the next.
    """

    isLeaf = True

    def __init__(self, make):
        super().__init__()
        self._make = make
        self._made = None

    def render(self, request):
        if self._made is None:
            made = self._make()
            if not getattr(made, "isLeaf", False):
                raise TypeError(f"{made!r} is not a leaf resource: it cannot be made "
                                "at the first request")
            self._made = made
        return self._made.render(request)


def web_endpoint(reactor, transport, host, port, backlog=50, tls_context=None):
    """The listening endpoint of an HTTP service.

    @param transport: L{HTTP} or L{HTTPS}.
    @param tls_context: the TLS context factory (required for L{HTTPS}).
    @return: a C{serverFromString} description (http) or an endpoint (https).
    """
    if transport == HTTPS:
        if tls_context is None:
            raise ValueError("an https service needs a TLS context")
        return server_endpoint(reactor, host, port, tls_context, backlog=backlog)
    if transport != HTTP:
        raise ValueError(f"not an HTTP transport: {transport!r}")
    return endpoint_description(host, port, backlog)


class BoundedRequest(server.Request):
    """A request whose body is held in memory, up to L{max_body} bytes.

    A longer body is refused with 413 and the connection closed, without reading the
    rest: a client cannot make the broker store, or wait for, more than the bound.
    """

    #: Bytes of body accepted at most; a site sets its own (L{make_site}).
    max_body = 64 * 1024
    _received = 0
    _refused = False

    def gotLength(self, length):
        # Never twisted.web's temporary file: a bounded body fits in memory.
        self.content = io.BytesIO()
        if length is not None and length > self.max_body:
            self._refuse_body()

    def handleContentChunk(self, data):
        if self._refused:
            return
        self._received += len(data)
        if self._received > self.max_body:
            self._refuse_body()
            return
        self.content.write(data)

    def requestReceived(self, command, path, version):
        if self._refused:
            return   # answered already; the connection is closing
        super().requestReceived(command, path, version)

    def _refuse_body(self):
        self._refused = True
        body = json_body(413, f"the request body is larger than {self.max_body} bytes")
        head = (b"HTTP/1.1 413 Content Too Large\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        channel = self.channel
        channel.transport.write(head + body)
        channel.loseConnection()


class _QuietSite(server.Site):
    """A site that writes no access log: the services log what they do themselves
    (the admin API one line per request), and a scraper's every visit is not news."""

    noisy = False

    def log(self, request):
        pass


def make_site(resource, *, timeout=60, max_body=64 * 1024):
    """A L{server.Site} for C{resource} with the bounds of the module docstring.

    @param timeout: seconds a connection may stay idle.
    @param max_body: bytes of request body accepted at most.
    """
    site = _QuietSite(resource, timeout=timeout)
    site.requestFactory = type("Request", (BoundedRequest,), {"max_body": max_body})
    # An error page with a traceback tells a stranger about the code.
    site.displayTracebacks = False
    return site


@implementer(IProtocolNegotiationFactory)
class _Throttled(ThrottlingFactory):
    """The site behind a bound on its connections, still offering HTTP/1.1 over ALPN.

    A TLS client that offers ALPN (curl offers h2 and http/1.1) must be answered with
    a protocol both speak: a wrapper that offered nothing would fail its handshake.
    Only HTTP/1.1, whose requests L{BoundedRequest} bounds."""

    noisy = False

    def acceptableProtocols(self):
        return [b"http/1.1"]


def web_service(name, reactor, endpoint, resource, *, transport, kind, registry=None,
                timeout=60, max_body=64 * 1024, max_connections=64):
    """The L{ConnectionService} of HTTP service C{name}, serving C{resource}.

    @param endpoint: from L{web_endpoint}.
    @param kind: the service type published by the port mapper (C{ADMIN}, C{NORMAL}).
    @param max_connections: connections open at once at most; one more is closed
        as soon as it is accepted.
    """
    site = make_site(resource, timeout=timeout, max_body=max_body)
    factory = _Throttled(site, maxConnectionCount=max_connections)
    return ConnectionService(name, reactor, endpoint, factory,
                             protocol_name=transport.upper(), registry=registry,
                             entry=(transport, kind))
