"""
From a broker URL to a Twisted client endpoint (S6.1): TCP, TLS, the port mapper's
answer, the HTTP tunnel and WebSocket, in one function, L{endpoint_for}.

TLS (C{amqps}, C{https}, C{wss}) verifies the broker's certificate and host name by
default, against the system's CAs or a CA file the caller names (C{ca_file}); only an
explicit C{verify=False} turns that off. C{server_name} checks the certificate against
another name than the URL's host (a broker reached by its IP address, say).

The tunnel and WebSocket endpoints live in their own modules
(C{mqgate.net.tunnel_client}, C{mqgate.ws.client}); they are imported here only when
such a URL is used.
"""


from twisted.internet import defer, ssl
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.protocol import Factory, Protocol

from mqgate.client.urls import BrokerUrl, UrlError, parse_url
from mqgate.errors import MqgateError
from mqgate.portmap.table import PortMapperError, parse_table, table_complete

__all__ = ["endpoint_for", "tls_creator", "lookup_service", "PortMapperLookup",
           "LookupFailed"]

#: A port mapper table is a few lines; anything longer is not one.
MAX_TABLE = 64 * 1024
#: Seconds to wait for a TCP connection, the port mapper's answer included.
CONNECT_TIMEOUT = 10.0


class LookupFailed(MqgateError):
    """The port mapper could not be asked, or does not know the service: this address
    failed (the next one of a list may do)."""


def _read_ca_file(path):
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except OSError as e:
        raise UrlError(f"CA file {path}: {e.strerror or e}") from None
    certificates = []
    marker = b"-----END CERTIFICATE-----"
    for chunk in text.split(marker)[:-1]:
        try:
            certificates.append(ssl.Certificate.loadPEM(chunk + marker + b"\n"))
        except Exception:
            raise UrlError(f"CA file {path}: not a PEM certificate file") from None
    if not certificates:
        raise UrlError(f"CA file {path}: no PEM certificate in it")
    return certificates


def tls_creator(host, *, ca_file=None, verify=True, server_name=None):
    """What Twisted needs to start TLS to C{host}: a verifying client connection creator,
    or, with C{verify=False}, one that checks nothing.

    @raise UrlError: the CA file cannot be read.
    """
    if not verify:
        return ssl.CertificateOptions(verify=False)
    if ca_file is not None:
        certificates = _read_ca_file(ca_file)
        trust = ssl.trustRootFromCertificates(certificates)
    else:
        trust = None   # the platform's CAs
    return ssl.optionsForClientTLS(server_name or host, trustRoot=trust)


class PortMapperLookup(Protocol):
    """Ask a port mapper for its table (FACTS 1.1): say our version, read until the
    terminator line or the close, parse."""

    def __init__(self):
        self.result = defer.Deferred()
        self._data = bytearray()

    def connectionMade(self):
        self.transport.write(b"101\n")

    def dataReceived(self, data):
        self._data += data
        if table_complete(self._data) or len(self._data) > MAX_TABLE:
            self.transport.loseConnection()

    def connectionLost(self, reason):
        if self.result.called:
            return
        try:
            table = parse_table(bytes(self._data[:MAX_TABLE]))
        except PortMapperError as e:
            self.result.errback(LookupFailed(f"the port mapper's answer cannot be read: "
                                         f"{e.description}"))
            return
        self.result.callback(table)


@defer.inlineCallbacks
def lookup_service(reactor, url, timeout=CONNECT_TIMEOUT):
    """Ask the port mapper of C{url} (an C{mq:} L{BrokerUrl}) for its service.

    @return: a Deferred firing with the L{ServiceEntry}.
    @raise LookupFailed: no port mapper there, or no such service.
    """
    endpoint = HostnameEndpoint(reactor, url.host, url.port, timeout=timeout)
    try:
        protocol = yield endpoint.connect(Factory.forProtocol(PortMapperLookup))
    except Exception as e:
        raise LookupFailed(f"cannot reach the port mapper at {url.host}:{url.port} ({e}); "
                       "mq://HOST:PORT names the broker's port mapper, 7676 by default"
                       ) from None
    timer = reactor.callLater(timeout, protocol.transport.abortConnection)
    try:
        _name, _version, entries = yield protocol.result
    finally:
        if timer.active():
            timer.cancel()
    for entry in entries:
        if entry.name == url.service:
            return entry
    running = ", ".join(e.name for e in entries) or "none"
    raise LookupFailed(f"the broker at {url.host}:{url.port} runs no service "
                   f"{url.service!r} (running: {running})")


@defer.inlineCallbacks
def endpoint_for(reactor, url, *, ca_file=None, verify=True, server_name=None,
                 proxy=None, origin=None, timeout=CONNECT_TIMEOUT):
    """The client endpoint that reaches C{url} (a L{BrokerUrl} or its text).

    @param proxy: the HTTP proxy for the tunnel (C{http://host:port}); None: the one
        C{http_proxy}/C{https_proxy} name (the tunnel endpoint reads them); C{""} for
        none.
    @param origin: the Origin a WebSocket handshake presents, or None.
    @return: a Deferred firing with an C{IStreamClientEndpoint}.
    @raise UrlError: a URL the library cannot use (whatever the broker does).
    @raise LookupFailed: the port mapper cannot be asked, or does not know the service.
    """
    if not isinstance(url, BrokerUrl):
        url = parse_url(url)
    tls = None
    if url.tls:
        tls = tls_creator(url.host, ca_file=ca_file, verify=verify,
                          server_name=server_name)
    if url.scheme in ("amqp", "amqps"):
        endpoint = HostnameEndpoint(reactor, url.host, url.port, timeout=timeout)
        return wrapClientTLS(tls, endpoint) if tls is not None else endpoint
    if url.scheme == "mq":
        entry = yield lookup_service(reactor, url, timeout)
        endpoint = HostnameEndpoint(reactor, url.host, entry.port, timeout=timeout)
        if entry.protocol == "tcp":
            return endpoint
        if entry.protocol == "tls":
            creator = tls_creator(url.host, ca_file=ca_file, verify=verify,
                                  server_name=server_name)
            return wrapClientTLS(creator, endpoint)
        raise UrlError(f"service {url.service!r} at {url.host}:{url.port} speaks "
                       f"{entry.protocol}; mq:// reaches tcp and tls services (use its "
                       f"http(s):// or ws(s):// URL)")
    # Imported here: the HTTP and WebSocket clients are needed only for their URLs.
    if url.scheme in ("http", "https"):
        from mqgate.net.tunnel_client import TunnelClientEndpoint
        return TunnelClientEndpoint(reactor, url.url, proxy=proxy, tls_context=tls)
    from mqgate.ws.client import WebSocketClientEndpoint
    return WebSocketClientEndpoint(reactor, url.url, subprotocol="amqp", tls_context=tls,
                                   origin=origin)
