# -*- test-case-name: tests.ws.test_gateway -*-
"""
The HTTP gateway services C{httpjms} and C{httpsjms} (S1.1, S10.3): messaging for
clients that can only speak HTTP, over WebSocket and the HTTP tunnel.

Each is an HTTP service (L{mqgate.web.site}: bounded requests, bounded connections, TLS
from the broker's key store for C{httpsjms}) whose resources are carriers: the
WebSocket endpoint (L{mqgate.ws}) and the tunnel each turn what arrives into the byte
stream of a broker connection, through a L{mqgate.net.virtual.VirtualTransport} into
the service's own protocol factory (AMQP and STOMP told apart by their first bytes,
as on the jms port). So the connections of a gateway service are broker connections
like any other, and the service is a L{ConnectionService} like any other: listed by
the port mapper (as C{http}/C{https}), pinged, pooled, paused and listed by the admin
commands through L{GatewayService.engine_factories}.

- L{gateway_root}: the root resource, with the carriers as its children (paths of one
  or more segments: C{ws}, C{tunnel}, C{imqhttp/tunnel});
- L{gateway_service}: the service listening with it;
- L{carrier_of}: what a carrier needs of an HTTP request to make a virtual transport
  (the client's address, the broker's, the TLS connection if any).
"""

from twisted.internet.interfaces import ISSLTransport
from twisted.web.resource import Resource

from mqgate.net.services import ConnectionService
from mqgate.web.site import json_body, web_service

__all__ = ["gateway_root", "gateway_service", "GatewayService", "carrier_of",
           "put_child"]


class _NotFound(Resource):
    """A JSON 404 for any path no carrier serves."""

    isLeaf = True

    def render(self, request):
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"application/json")
        return json_body(404, "nothing here: this service serves WebSocket and the "
                              "HTTP tunnel at their paths")


class _Node(Resource):
    """A path segment: its children, else 404."""

    def getChild(self, path, request):
        return _NotFound()

    def render(self, request):
        return _NotFound().render(request)


def put_child(root, path, resource):
    """Put C{resource} at C{path} ("ws", "imqhttp/tunnel") under C{root}, making the
    segments between as needed.

    @raise ValueError: the path is empty or already taken.
    """
    segments = [s for s in path.strip("/").split("/") if s]
    if not segments:
        raise ValueError(f"a carrier needs a path below /, not {path!r}")
    node = root
    for segment in segments[:-1]:
        key = segment.encode("utf-8")
        child = node.children.get(key)
        if child is None:
            child = _Node()
            node.putChild(key, child)
        node = child
    last = segments[-1].encode("utf-8")
    if last in node.children:
        raise ValueError(f"two carriers at the same path {path!r}")
    node.putChild(last, resource)


def gateway_root(children=None):
    """The root resource of a gateway service.

    @param children: C{{path: resource}}, the carriers (see L{put_child}).
    """
    root = _Node()
    for path, resource in (children or {}).items():
        put_child(root, path, resource)
    return root


def carrier_of(request):
    """C{(peer, host, tls)} of an HTTP request's connection: the client's address and
    the broker's (C{IAddress}), and the TLS transport when the connection is HTTPS
    (for L{mqgate.net.virtual.VirtualTransport}'s C{tls}), else None."""
    transport = request.channel.transport
    tls = transport if ISSLTransport.providedBy(transport) else None
    return transport.getPeer(), transport.getHost(), tls


class GatewayService(ConnectionService):
    """An HTTP service whose carriers' connections are broker connections.

    @ivar connections: the service's protocol factory (the sniffing one over the AMQP
        and STOMP factories), which every carrier connection is built from.
    """

    def __init__(self, name, reactor, endpoint, factory, connections, **kwargs):
        super().__init__(name, reactor, endpoint, factory, **kwargs)
        self.connections = connections

    def engine_factories(self):
        """The engine factories of the carriers' connections (not the web site's)."""
        inner = getattr(self.connections, "inner_factories", None)
        factories = inner() if inner is not None else [self.connections]
        return [f for f in factories if hasattr(f, "connections")]

    def startService(self):
        # No port hands the factory its start: the carriers build through it.
        self.connections.doStart()
        return super().startService()

    def stopService(self):
        """Close every broker connection in its protocol's words, then stop listening."""
        shutdown = getattr(self.connections, "shutdown", None)
        if shutdown is not None:
            shutdown()
        d = super().stopService()
        self.connections.doStop()
        return d


def gateway_service(name, reactor, endpoint, root, connections, *, transport,
                    registry=None, timeout=120, max_body=64 * 1024,
                    max_connections=10000, details=None):
    """The L{GatewayService} of C{name}, serving C{root} (L{gateway_root}).

    @param endpoint: from L{mqgate.web.site.web_endpoint}.
    @param connections: the service's protocol factory.
    @param transport: C{http} or C{https}, as the port mapper publishes it.
    """
    web = web_service(name, reactor, endpoint, root, transport=transport, kind="NORMAL",
                      timeout=timeout, max_body=max_body,
                      max_connections=max_connections)
    protocols = "+".join(f.protocol_label for f in _factories(connections))
    return GatewayService(name, reactor, endpoint, web.factory, connections,
                          protocol_name=f"{protocols} over {transport.upper()}",
                          registry=registry, entry=web.entry, details=details)


def _factories(connections):
    inner = getattr(connections, "inner_factories", None)
    return inner() if inner is not None else [connections]
