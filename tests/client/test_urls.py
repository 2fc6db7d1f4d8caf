"""Broker URLs, address lists and connection options of the client library (S6.1,
S6.2): what is accepted, the defaults, and errors that name the bad value."""

import pytest

from mqgate.client.urls import (
    ClientOptions, UrlError, options_from, parse_address_list, parse_url,
)


@pytest.mark.parametrize("text, expected", [
    ("amqp://h", ("amqp", "h", 5672)),
    ("amqps://h", ("amqps", "h", 5671)),
    ("amqp://u:pw@h:1234", ("amqp", "h", 1234)),
    ("AMQP://[::1]:99", ("amqp", "::1", 99)),
    ("https://h/tunnel", ("https", "h", 443)),
    ("ws://h:8080/ws", ("ws", "h", 8080)),
    ("mq://h", ("mq", "h", 7676)),
    ("mq://h:9/ssljms", ("mq", "h", 9)),
])
def test_schemes_hosts_and_default_ports(text, expected):
    """Every scheme is read with its default port."""
    url = parse_url(text)
    assert (url.scheme, url.host, url.port) == expected


def test_credentials_are_read_and_the_password_masked():
    """User and password come from the URL; the printable form hides the password and
    the URL handed to transports carries neither."""
    url = parse_url("amqps://alice:s%40cret@h:5671")
    assert (url.user, url.password) == ("alice", "s@cret")
    assert "cret" not in str(url) and "cret" not in repr(url)
    wss = parse_url("wss://bob:pw@h:9/ws")
    assert wss.url == "wss://h:9/ws" and wss.tls


def test_mq_url_names_the_service():
    """mq:// defaults to the jms service; a path names another."""
    assert parse_url("mq://h").service == "jms"
    assert parse_url("mq://h:7676/ssljms").service == "ssljms"


@pytest.mark.parametrize("text, words", [
    ("ftp://h", "unsupported scheme"),
    ("h:5672", "unsupported scheme"),
    ("amqp://h:0", "1..65535"),
    ("amqp://h:70000", "1..65535"),
    ("amqp://h:x", "1..65535"),
    ("amqp://:5672", "no host"),
    ("amqp://h/queue", "no path"),
    ("mq://h:abc/jms", "port"),
    ("", "give a URL"),
])
def test_bad_urls_are_named(text, words):
    """A URL that cannot be used is refused with the URL and the reason."""
    with pytest.raises(UrlError, match=words):
        parse_url(text)


def test_address_list_from_a_string_or_a_list():
    """imqAddressList is a comma-separated string; a list works too; empty is an
    error."""
    urls = parse_address_list("amqp://a:1, amqp://b:2,")
    assert [u.host for u in urls] == ["a", "b"]
    assert [u.port for u in parse_address_list(["amqp://c:3"])] == [3]
    with pytest.raises(UrlError, match="empty"):
        parse_address_list(" , ")


def test_imq_properties_and_keywords():
    """The imq properties set the options (the interval read as milliseconds); a
    keyword wins over a property; the defaults are the source system's."""
    assert options_from() == ClientOptions()
    assert ClientOptions().consumer_flow_limit == 1000
    options = options_from({"imqReconnectEnabled": "true", "imqReconnectAttempts": "-1",
                            "imqReconnectInterval": "500",
                            "imqConsumerFlowLimit": "100",
                            "imqConnectionFlowLimitEnabled": "true",
                            "imqAddressList": "amqp://x"},
                           consumer_flow_limit=50)
    assert options.reconnect_enabled and options.reconnect_attempts == -1
    assert options.reconnect_interval == 0.5 and options.consumer_flow_limit == 50
    assert options.connection_flow_limit_enabled


@pytest.mark.parametrize("properties, keywords, words", [
    ({"imqNoSuch": "1"}, {}, "unknown connection property 'imqNoSuch'"),
    ({"imqReconnectEnabled": "yes"}, {}, "imqReconnectEnabled='yes'"),
    ({"imqConsumerFlowLimit": "many"}, {}, "imqConsumerFlowLimit"),
    ({}, {"consumer_flow_limit": 0}, "consumer_flow_limit 0"),
    ({}, {"consumer_flow_threshold": 101}, "consumer_flow_threshold 101"),
    ({}, {"reconnect_attempts": -2}, "reconnect_attempts -2"),
    ({}, {"reconnect_interval": -1}, "reconnect_interval"),
    ({}, {"no_such_option": 1}, "no_such_option"),
])
def test_bad_options_are_named(properties, keywords, words):
    """A bad property or keyword is refused, naming it and its value."""
    with pytest.raises(UrlError, match=words):
        options_from(properties, **keywords)


def test_tunnel_and_websocket_urls_get_their_endpoints():
    """http(s):// URLs are reached through the tunnel's client endpoint, ws(s):// ones
    through the WebSocket's, each given the URL as written."""
    from twisted.internet.task import Clock

    from mqgate.client import endpoints
    from mqgate.net.tunnel_client import TunnelClientEndpoint
    from mqgate.ws.client import WebSocketClientEndpoint
    from tests.deferreds import result
    tunnel = result(endpoints.endpoint_for(Clock(), "http://h:8080/tunnel", proxy=""))
    assert isinstance(tunnel, TunnelClientEndpoint) and tunnel.url == "http://h:8080/tunnel"
    ws = result(endpoints.endpoint_for(Clock(), "wss://h:8080/ws", verify=False))
    assert isinstance(ws, WebSocketClientEndpoint)
