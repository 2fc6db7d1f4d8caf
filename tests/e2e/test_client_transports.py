"""The client library over TLS and through a second broker when the first goes away
(S6.1): amqps with the certificate and host name verified, mq:// to a TLS service,
failover along an address list, reconnect after a broker restart with the links redone.
"""

import socket

import pytest

from mqgate.client import ConnectError
from mqgate.client.blocking import connect
from tests.e2e.stomp_client import unique
from tests.e2e.test_tls import TLS_SERVICES, instance_etc, keytool
from tests.hostile.probe import wait_until

ADMIN = ("admin", "admin")
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, module_broker_factory):
    """A broker with ssljms on a key pair the keytool made for localhost (and the
    loopback addresses); returns C{(broker, cert_path)}."""
    varhome = tmp_path_factory.mktemp("client-tls")
    made = keytool(varhome, "--nopassword")
    assert made.returncode == 0, made.stderr
    broker = module_broker_factory(TLS_SERVICES, varhome=varhome,
                                   listening=("ssljms", "portmapper"))
    return broker, instance_etc(varhome) / "keystore" / "cert.pem"


def round_trip(connection, body):
    name = unique("client-tls")
    connection.sender(name).send(body)
    return connection.receiver(name).receive(timeout=TIMEOUT).body


def test_amqps_verifies_the_certificate_and_host_name(tls_broker):
    """amqps:// with the broker's certificate as CA connects to localhost; the same
    certificate checked for another name, or against the system's CAs, is refused;
    verify=False connects without checking."""
    broker, cert_path = tls_broker
    address = f"amqps://localhost:{broker.port('ssljms')}"
    with connect(address, credentials=ADMIN, ca_file=str(cert_path)) as connection:
        assert round_trip(connection, "over tls") == "over tls"
    with pytest.raises(ConnectError) as wrong_name:
        connect(address, credentials=ADMIN, ca_file=str(cert_path),
                server_name="wrong.example")
    assert "certificate was not accepted" in str(wrong_name.value)
    assert "wrong.example" in str(wrong_name.value)
    with pytest.raises(ConnectError, match="certificate was not accepted"):
        connect(address, credentials=ADMIN)     # a self-signed certificate: untrusted
    with connect(address, credentials=ADMIN, verify=False) as connection:
        assert round_trip(connection, "unchecked") == "unchecked"


def test_mq_url_to_a_tls_service(tls_broker):
    """mq://HOST:PORTMAPPER/ssljms learns the port and that it speaks TLS from the port
    mapper, and verifies the broker as amqps does."""
    broker, cert_path = tls_broker
    address = f"mq://localhost:{broker.port('portmapper')}/ssljms"
    with connect(address, credentials=ADMIN, ca_file=str(cert_path)) as connection:
        assert round_trip(connection, "mapped tls") == "mapped tls"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_failover_to_the_second_address_when_the_first_broker_stops(broker_factory):
    """With [A, B]: a stopped A is passed over at connect time; connected to A, the
    client fails over to B when A stops, its sender and receiver attached again there."""
    first, second = broker_factory(), broker_factory()
    urls = [f"amqp://127.0.0.1:{b.port('jms')}" for b in (first, second)]
    name = unique("client-failover")
    with connect(urls, credentials=ADMIN, reconnect_enabled=True, reconnect_attempts=5,
                 reconnect_interval=0.2) as connection:
        assert connection.url.port == first.port("jms")
        sender, receiver = connection.sender(name), connection.receiver(name)
        sender.send("on A")
        assert receiver.receive(timeout=TIMEOUT).body == "on A"
        first.terminate()
        wait_until(lambda: connection.connection.reconnects == 1, TIMEOUT,
                   "the client connecting to B")
        assert connection.url.port == second.port("jms")
        sender.send("on B")
        assert receiver.receive(timeout=TIMEOUT).body == "on B"
    with connect(urls, credentials=ADMIN) as connection:
        assert connection.url.port == second.port("jms")


def test_reconnect_after_a_restart_redoes_the_links(broker_factory, tmp_path):
    """The broker restarts on the same port and store: the client connects again by
    itself, and its sender and receiver, made before the restart, work again: the
    persistent message sent before (which the receiver held unsettled when the broker
    went) comes again, and the sender's next message is accepted."""
    port = free_port()
    defines = {"mqgate.jms.tcp.port": str(port)}
    varhome = tmp_path / "restarted"
    broker = broker_factory(defines, varhome=varhome)
    name = unique("client-restart")
    with connect(f"amqp://127.0.0.1:{port}", credentials=ADMIN,
                 properties={"imqReconnectEnabled": "true", "imqReconnectAttempts": "50",
                             "imqReconnectInterval": "200"}) as connection:
        sender, receiver = connection.sender(name), connection.receiver(name)
        sender.send("kept", durable=True)
        broker.terminate()
        broker_factory(defines, varhome=varhome)
        wait_until(lambda: connection.connection.reconnects == 1, 30.0,
                   "the client connecting again")
        sender.send("after")
        got = [receiver.receive(timeout=TIMEOUT).body for _ in range(2)]
    assert got == ["kept", "after"]
