"""The tunnel client endpoint's set-up (S10.3): URLs and the proxy chosen."""

import pytest
from twisted.internet.task import Clock

from mqgate.net.tunnel_client import TunnelClientEndpoint, proxy_for


def test_proxy_from_the_standard_variables(monkeypatch):
    """http_proxy serves http:// URLs, https_proxy https:// ones, no_proxy exempts hosts."""
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("https_proxy", "http://secure-proxy.example:8080")
    monkeypatch.setenv("no_proxy", "inside.example")
    assert proxy_for("http://broker.example/tunnel") == "http://proxy.example:3128"
    assert proxy_for("https://broker.example/tunnel") == "http://secure-proxy.example:8080"
    assert proxy_for("http://inside.example/tunnel") is None


def test_an_explicit_proxy_wins_and_an_empty_one_means_none(monkeypatch):
    """The proxy argument overrides the environment; "" turns the proxy off."""
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    assert TunnelClientEndpoint(Clock(), "http://b/tunnel").proxy == \
        "http://proxy.example:3128"
    assert TunnelClientEndpoint(Clock(), "http://b/tunnel",
                                proxy="http://other:1").proxy == "http://other:1"
    assert TunnelClientEndpoint(Clock(), "http://b/tunnel", proxy="").proxy is None


@pytest.mark.parametrize("url", ["amqp://b:5672", "tunnel", "http:///tunnel"])
def test_a_url_that_is_not_http_is_refused(url):
    """Only http:// and https:// URLs with a host make a tunnel endpoint."""
    with pytest.raises(ValueError, match="tunnel URL"):
        TunnelClientEndpoint(Clock(), url)
