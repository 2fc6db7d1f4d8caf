"""The client library on every transport (S6.1, S10.3): one broker with jms, ssljms,
httpjms and httpsjms, reached by the same library over amqp://, amqps://, the http and
https tunnels, ws:// and wss:// (certificates verified), meeting each other and a STOMP
client; and the tunnel through a real HTTP proxy (tinyproxy)."""

import pytest

from mqgate.client import ConnectError
from mqgate.client.blocking import connect
from tests.e2e.proxy import start_for_test
from tests.e2e.stomp_client import open_client, unique
from tests.e2e.test_tls import instance_etc, keytool

ADMIN = ("admin", "admin")
TIMEOUT = 10.0
DEFINES = {
    "mqgate.service.activelist": "jms,ssljms,stomp,httpjms,httpsjms",
    "mqgate.ssljms.tls.port": "0",
    "mqgate.httpjms.http.port": "0",
    "mqgate.httpsjms.https.port": "0",
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, module_broker_factory):
    """A broker with every client transport's service (a key pair for localhost);
    returns C{(broker, {transport: URL}, cert_path)}."""
    varhome = tmp_path_factory.mktemp("client-gateway")
    made = keytool(varhome, "--nopassword")
    assert made.returncode == 0, made.stderr
    broker = module_broker_factory(
        DEFINES, varhome=varhome,
        listening=("httpjms", "httpsjms", "jms", "ssljms", "stomp"))
    urls = {
        "tcp": f"amqp://127.0.0.1:{broker.port('jms')}",
        "tls": f"amqps://localhost:{broker.port('ssljms')}",
        "tunnel": f"http://127.0.0.1:{broker.port('httpjms')}/tunnel",
        "https tunnel": f"https://localhost:{broker.port('httpsjms')}/tunnel",
        "ws": f"ws://127.0.0.1:{broker.port('httpjms')}/ws",
        "wss": f"wss://localhost:{broker.port('httpsjms')}/ws",
    }
    return broker, urls, instance_etc(varhome) / "keystore" / "cert.pem"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """A throw-away tinyproxy for the module."""
    server = start_for_test(tmp_path_factory.mktemp("client-tinyproxy"))
    yield server
    server.stop()


def _open(url, cert_path):
    options = {"ca_file": str(cert_path)} if url.startswith(("amqps", "https", "wss")) \
        else {}
    if url.startswith(("http", "https")):
        options["proxy"] = ""      # straight to the broker: the proxy test is below
    return connect(url, credentials=ADMIN, **options)


def test_every_transport_meets_every_other_and_stomp(gateway):
    """The same library over tcp, tls, the http and https tunnels, ws and wss: each
    sends 20 at-least-once messages to one queue, which a receiver on each of the
    others takes in turn; a STOMP client's message reaches a receiver on each; and a
    message from each reaches the STOMP client."""
    broker, urls, cert_path = gateway
    stomp = open_client(broker.address("stomp"))
    connections = {}
    try:
        for transport, url in urls.items():
            connections[transport] = _open(url, cert_path)
        transports = list(connections)
        for index, sender in enumerate(transports):
            receiver = transports[(index + 1) % len(transports)]
            name = unique("cross")
            inbox = connections[receiver].receiver(name)
            bodies = [f"{sender} {i}" for i in range(20)]
            connections[sender].sender(name).send_many(bodies)
            got = [inbox.receive(timeout=TIMEOUT).body for _ in bodies]
            assert got == bodies, f"{sender} -> {receiver}"
        for transport, connection in connections.items():
            name = unique("from-stomp")
            inbox = connection.receiver(name)
            stomp.send(f"/queue/{name}", f"stomp to {transport}".encode())
            # A STOMP body is bytes: it arrives as an AMQP data section.
            assert inbox.receive(timeout=TIMEOUT).body == f"stomp to {transport}".encode()
        name = unique("to-stomp")
        stomp.subscribe(f"/queue/{name}")
        for transport, connection in connections.items():
            connection.sender(f"queue://{name}").send(f"{transport} to stomp")
        got = stomp.collector.wait_for_messages(len(connections), TIMEOUT)
        assert sorted(bytes(m.body).decode() for m in got) == \
            sorted(f"{transport} to stomp" for transport in connections)
    finally:
        for connection in connections.values():
            connection.close()
        stomp.close()


@pytest.mark.parametrize("transport", ["tls", "https tunnel", "wss"])
def test_a_certificate_for_another_name_is_refused(gateway, transport):
    """Over each TLS transport the broker's certificate is checked against the name
    the client asked for: another name is refused."""
    _broker, urls, cert_path = gateway
    options = {"proxy": ""} if transport == "https tunnel" else {}
    with pytest.raises(ConnectError, match="certificate"):
        connect(urls[transport], credentials=ADMIN, ca_file=str(cert_path),
                server_name="wrong.example", **options)


def test_through_a_real_http_proxy(gateway, proxy):
    """Given only the proxy and the tunnel URL, the library moves at-least-once
    messages both ways through tinyproxy, each accepted once, none lost."""
    _broker, urls, _cert_path = gateway
    name = unique("client-proxy")
    with connect(urls["tunnel"], credentials=ADMIN, proxy=proxy.url) as connection:
        receiver = connection.receiver(name, flow_limit=100)
        connection.sender(name).send_many([str(i) for i in range(500)])
        got = [receiver.receive(timeout=TIMEOUT).body for _ in range(500)]
        assert got == [str(i) for i in range(500)]
        assert receiver.receive(timeout=0.5) is None
