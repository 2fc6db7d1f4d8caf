"""A TLS client certificate on httpsjms logs a WebSocket's connection in (S4.7,
S10.3): the broker connection carried by the WebSocket sees the TLS connection's
certificate, as an ssljms connection does."""

import ssl

import pytest
import websocket

from tests.e2e.test_client_certs import pki, prepare  # noqa: F401 (pki is a fixture)

__all__ = ["pki"]


@pytest.fixture(scope="module")
def broker(pki, module_broker_factory, tmp_path_factory):  # noqa: F811
    """httpsjms asking for client certificates (want) from the test CA."""
    directory = tmp_path_factory.mktemp("ws-certs-broker")
    keystore, users = prepare(pki, directory)
    return module_broker_factory({
        "mqgate.service.activelist": "jms,httpsjms",
        "mqgate.keystore.file.dirpath": str(keystore),
        "mqgate.user_repository.file.dirpath": str(users),
        "mqgate.httpsjms.ssl.client_auth": "want",
        "mqgate.httpsjms.ssl.ca_file": str(pki["ca"].cert_path),
    }, listening=("jms", "httpsjms"))


def stomp_over_wss(broker, pki, certificate):  # noqa: F811
    """CONNECT without login over wss (v12.stomp); the broker's first answer."""
    context = ssl.create_default_context(cafile=str(pki["ca"].cert_path))
    if certificate is not None:
        context.load_cert_chain(str(certificate.cert_path), str(certificate.key_path))
    ws = websocket.create_connection(
        f"wss://localhost:{broker.port('httpsjms')}/ws", subprotocols=["v12.stomp"],
        sslopt={"context": context}, timeout=10)
    try:
        ws.send("CONNECT\naccept-version:1.2\nhost:mqgate\n\n\x00")
        while True:
            _opcode, data = ws.recv_data()
            if data.strip(b"\r\n"):
                return data
    finally:
        ws.close()


def test_certificate_logs_the_websocket_connection_in(broker, pki):  # noqa: F811
    """With alice's certificate a STOMP CONNECT without login is answered CONNECTED;
    without a certificate the same CONNECT is refused with an ERROR (guests are not
    let in on httpsjms)."""
    assert stomp_over_wss(broker, pki, pki["alice"]).startswith(b"CONNECTED\n")
    refused = stomp_over_wss(broker, pki, None)
    assert refused.startswith(b"ERROR\n"), refused
