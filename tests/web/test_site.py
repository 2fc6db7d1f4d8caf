"""The HTTP service pieces (S11.2) other HTTP services reuse: the endpoint of an http or
https service, the bound on connections and the ALPN offer, and /healthz's check."""

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactor
from twisted.web.resource import Resource
from twisted.web.test.requesthelper import DummyRequest

from mqgate.web.admin import broker_health
from mqgate.web.site import HTTP, HTTPS, MadeAtFirstRequest, web_endpoint, web_service


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


class _Answer(Resource):
    isLeaf = True

    def render(self, request):
        return b"answer " + b"/".join(request.postpath)


def test_resource_is_made_at_the_first_request_and_kept():
    """The admin API's resource is made when a request comes, once, and then answers
    every request as if it had been there from the start."""
    made = []

    def make():
        made.append(_Answer())
        return made[-1]

    lazy = MadeAtFirstRequest(make)
    assert made == []
    assert lazy.render(DummyRequest([b"api", b"broker"])) == b"answer api/broker"
    assert lazy.render(DummyRequest([b"healthz"])) == b"answer healthz"
    assert len(made) == 1


def test_resource_made_at_first_request_must_be_a_leaf():
    """A resource with children could not be put in place at the first request: it
    is refused with a message saying so, and tried again by the next request."""
    lazy = MadeAtFirstRequest(Resource)
    with pytest.raises(TypeError, match="not a leaf resource"):
        lazy.render(DummyRequest([b""]))
    with pytest.raises(TypeError):
        lazy.render(DummyRequest([b""]))
