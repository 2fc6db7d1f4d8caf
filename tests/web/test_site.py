"""The HTTP service pieces (S11.2) other HTTP services reuse: the endpoint of an http or
https service, the bound on connections and the ALPN offer, and /healthz's check."""

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactor
from twisted.web.resource import Resource

from mqgate.web.admin import broker_health
from mqgate.web.site import HTTP, HTTPS, web_endpoint, web_service


def test_http_endpoint_is_a_tcp_description():
    """An http service listens on plain TCP at its host, port and backlog."""
    assert web_endpoint(MemoryReactor(), HTTP, "127.0.0.1", 8161, 50) == \
        "tcp:port=8161:interface=127.0.0.1:backlog=50"


def test_https_needs_a_tls_context_and_transports_are_checked():
    """An https endpoint without a TLS context, or another transport, is refused."""
    with pytest.raises(ValueError):
        web_endpoint(MemoryReactor(), HTTPS, "127.0.0.1", 0)
    with pytest.raises(ValueError):
        web_endpoint(MemoryReactor(), "tls", "127.0.0.1", 0)


def service(max_connections=2):
    return web_service("httpadmin", MemoryReactor(), "tcp:0", Resource(),
                       transport=HTTP, kind="ADMIN", max_connections=max_connections)


def test_connections_past_the_bound_are_refused():
    """One connection more than max_connections gets no protocol (it is closed)."""
    factory = service(2).factory
    address = IPv4Address("TCP", "127.0.0.1", 1)
    built = [factory.buildProtocol(address) for _ in range(3)]
    assert built[0] is not None and built[1] is not None
    assert built[2] is None


def test_alpn_offers_http_1_1_only():
    """Over TLS the service offers HTTP/1.1 by ALPN (not h2, whose requests the site
    does not bound), so that clients offering ALPN complete their handshake."""
    assert service().factory.acceptableProtocols() == [b"http/1.1"]


def test_service_is_published_with_its_transport():
    """The port mapper entry says http and the service type."""
    assert service().entry == ("http", "ADMIN")


class Top:
    def __init__(self, running, status):
        self.running = running
        self.broker = type("B", (), {})()
        self.broker.persistence = type("P", (), {"store_status": lambda _: status})()


def test_health_follows_the_broker_and_its_store():
    """Healthy while running with a healthy store; not when stopping or failing."""
    assert broker_health(Top(1, {"state": "healthy"}))() == (True, None)
    assert broker_health(Top(1, None))() == (True, None)
    assert broker_health(Top(0, {"state": "healthy"}))() == \
        (False, "the broker is not running")
    ok, why = broker_health(Top(1, {"state": "failing", "reason": "disk full"}))()
    assert not ok and why == "the message store is failing: disk full"
