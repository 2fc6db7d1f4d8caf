"""A real twisted.web site driven over a StringTransport: raw HTTP bytes in, a parsed
response out (the unit tests' HTTP client; no sockets)."""

import base64
import json

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

__all__ = ["Response", "exchange", "send", "basic"]


class Response:
    """A parsed HTTP response: C{status}, C{headers} (lower-case names), C{body}."""

    def __init__(self, raw):
        self.raw = raw
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            self.headers[name.strip().lower().decode()] = value.strip().decode()
        if self.headers.get("transfer-encoding") == "chunked":
            body = _dechunk(body)
        self.body = body

    def json(self):
        return json.loads(self.body)


def _dechunk(data):
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, data = out + data[:n], data[n + 2:]
    return out


def basic(user, password):
    """An Authorization header value for HTTP Basic."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def exchange(site, raw, peer="127.0.0.1"):
    """Feed C{raw} request bytes to a new connection of C{site}; return
    C{(transport, protocol)} after everything the site wrote synchronously."""
    address = IPv4Address("TCP", peer, 40000)
    protocol = site.buildProtocol(address)
    transport = StringTransport(peerAddress=address,
                                hostAddress=IPv4Address("TCP", "127.0.0.1", 8161))
    protocol.makeConnection(transport)
    protocol.dataReceived(raw)
    return transport, protocol


def send(site, method, path, body=None, auth=None, headers=()):
    """One HTTP/1.1 request (Connection: close); the L{Response}."""
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", "Connection: close"]
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    lines += list(headers)
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        lines.append(f"Content-Length: {len(data)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + data
    transport, _ = exchange(site, raw)
    return Response(transport.value())
