"""The client library over WebSocket (S6.1, S10.3): ws:// and wss:// (certificate
verified) to the httpjms and httpsjms services, meeting a TCP client at the same
broker. Needs the WebSocket client endpoint (mqgate.ws.client, the WebSocket branch);
skipped where it is not installed."""

import pytest

pytest.importorskip("mqgate.ws.client")

from mqgate.client import ConnectError  # noqa: E402
from mqgate.client.blocking import connect  # noqa: E402
from tests.e2e.stomp_client import unique  # noqa: E402
from tests.e2e.test_tls import instance_etc, keytool  # noqa: E402

ADMIN = ("admin", "admin")
TIMEOUT = 10.0
DEFINES = {
    "mqgate.service.activelist": "jms,httpjms,httpsjms",
    "mqgate.httpjms.http.port": "0",
    "mqgate.httpsjms.https.port": "0",
}


@pytest.fixture(scope="module")
def ws_broker(tmp_path_factory, module_broker_factory):
    """A broker with jms, httpjms and httpsjms (a key pair for localhost); returns
    C{(broker, cert_path)}."""
    varhome = tmp_path_factory.mktemp("client-ws")
    made = keytool(varhome, "--nopassword")
    assert made.returncode == 0, made.stderr
    broker = module_broker_factory(DEFINES, varhome=varhome,
                                   listening=("httpjms", "httpsjms", "jms"))
    return broker, instance_etc(varhome) / "keystore" / "cert.pem"


def test_ws_and_wss_meet_tcp(ws_broker):
    """Messages sent over ws:// and wss:// (certificate verified) reach a TCP receiver,
    and a TCP sender's reach a ws:// receiver; wss:// checked for another name is
    refused."""
    broker, cert_path = ws_broker
    name = unique("client-ws")
    tcp = f"amqp://127.0.0.1:{broker.port('jms')}"
    ws = f"ws://127.0.0.1:{broker.port('httpjms')}/ws"
    wss = f"wss://localhost:{broker.port('httpsjms')}/ws"
    with connect(tcp, credentials=ADMIN) as direct, \
            connect(ws, credentials=ADMIN) as plain, \
            connect(wss, credentials=ADMIN, ca_file=str(cert_path)) as tls:
        receiver = direct.receiver(name)
        plain.sender(name).send_many([f"ws {i}" for i in range(50)])
        tls.sender(name).send("wss")
        bodies = [receiver.receive(timeout=TIMEOUT).body for _ in range(51)]
        assert bodies == [f"ws {i}" for i in range(50)] + ["wss"]
        back = plain.receiver(unique("client-ws-back"))
        direct.sender(back.address).send_many(["to ws"] * 20)
        assert [back.receive(timeout=TIMEOUT).body for _ in range(20)] == ["to ws"] * 20
    with pytest.raises(ConnectError):
        connect(wss, credentials=ADMIN, ca_file=str(cert_path),
                server_name="wrong.example")
