"""The client library over the HTTP tunnel (S6.1, S10.3): the same library, given only
the tunnel's URL (and a proxy), moves messages both ways and meets clients on other
transports at the same broker."""

import pytest

from mqgate.client.blocking import connect
from tests.e2e.proxy import start_for_test
from tests.e2e.stomp_client import unique
from tests.e2e.test_tls import instance_etc, keytool

ADMIN = ("admin", "admin")
TIMEOUT = 10.0
DEFINES = {
    "mqgate.service.activelist": "jms,httpjms,httpsjms",
    "mqgate.httpjms.http.port": "0",
    "mqgate.httpsjms.https.port": "0",
}


@pytest.fixture(scope="module")
def tunnel_broker(tmp_path_factory, module_broker_factory):
    """A broker with jms, httpjms and httpsjms (a key pair for localhost); returns
    C{(broker, cert_path)}."""
    varhome = tmp_path_factory.mktemp("client-tunnel")
    made = keytool(varhome, "--nopassword")
    assert made.returncode == 0, made.stderr
    broker = module_broker_factory(DEFINES, varhome=varhome,
                                   listening=("httpjms", "httpsjms", "jms"))
    return broker, instance_etc(varhome) / "keystore" / "cert.pem"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """A throw-away tinyproxy for the module."""
    server = start_for_test(tmp_path_factory.mktemp("client-tinyproxy"))
    yield server
    server.stop()


def test_http_and_https_tunnel_meet_tcp(tunnel_broker):
    """Messages sent through the http tunnel and the https tunnel (certificate
    verified) reach a TCP receiver, and the other way round."""
    broker, cert_path = tunnel_broker
    name = unique("client-tunnel")
    tcp = f"amqp://127.0.0.1:{broker.port('jms')}"
    http = f"http://127.0.0.1:{broker.port('httpjms')}/tunnel"
    https = f"https://localhost:{broker.port('httpsjms')}/tunnel"
    with connect(tcp, credentials=ADMIN) as direct, \
            connect(http, credentials=ADMIN, proxy="") as plain, \
            connect(https, credentials=ADMIN, proxy="", ca_file=str(cert_path)) as tls:
        receiver = direct.receiver(name)
        plain.sender(name).send_many([f"http {i}" for i in range(50)])
        tls.sender(name).send("https")
        bodies = [receiver.receive(timeout=TIMEOUT).body for _ in range(51)]
        assert bodies == [f"http {i}" for i in range(50)] + ["https"]
        back = plain.receiver(unique("client-tunnel-back"))
        direct.sender(back.address).send_many(["to the tunnel"] * 20)
        assert [back.receive(timeout=TIMEOUT).body for _ in range(20)] == \
            ["to the tunnel"] * 20


def test_through_a_real_http_proxy(tunnel_broker, proxy):
    """Given only the proxy and the tunnel URL, the library moves at-least-once
    messages both ways through tinyproxy, each accepted once, none lost."""
    broker, _cert_path = tunnel_broker
    name = unique("client-proxy")
    http = f"http://127.0.0.1:{broker.port('httpjms')}/tunnel"
    with connect(http, credentials=ADMIN, proxy=proxy.url) as connection:
        receiver = connection.receiver(name, flow_limit=100)
        connection.sender(name).send_many([str(i) for i in range(500)])
        got = [receiver.receive(timeout=TIMEOUT).body for _ in range(500)]
        assert got == [str(i) for i in range(500)]
        assert receiver.receive(timeout=0.5) is None
