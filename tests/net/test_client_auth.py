"""TLS client certificates on a service (S4.7): asked for, verified against the CA
file, required or not, and the user their subject names; real TLS in memory."""

import pytest
from twisted.internet import ssl
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.test import iosim

from mqgate.net.tls import TlsMaterialError, certificate_user, load_context_factory
from tests.e2e.pki import ThrowawayCA


class Recorder(Protocol):
    """Server side: remembers what arrived and the certificate's user at that time."""

    def connectionMade(self):
        self.received = b""
        self.user = "not asked"

    def dataReceived(self, data):
        self.received += data
        self.user = certificate_user(self.transport)


class Greeter(Protocol):
    """Client side: says hello once connected; records the loss."""

    def connectionMade(self):
        self.lost = None
        self.transport.write(b"hello")

    def connectionLost(self, reason):
        self.lost = reason


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, its server certificate, a client certificate for alice, and one for
    mallory from another CA."""
    directory = tmp_path_factory.mktemp("pki")
    ca = ThrowawayCA(directory / "ca")
    other = ThrowawayCA(directory / "other", name="another CA")
    return {"ca": ca, "server": ca.server(), "alice": ca.client("alice"),
            "mallory": other.client("mallory")}


def _client_options(pki, who):
    trust = ssl.Certificate.loadPEM(pki["ca"].cert_path.read_bytes())
    if who is None:
        return ssl.optionsForClientTLS("localhost", trustRoot=trust)
    issued = pki[who]
    mine = ssl.PrivateCertificate.loadPEM(
        issued.key_path.read_text() + issued.cert_path.read_text())
    return ssl.optionsForClientTLS("localhost", trustRoot=trust, clientCertificate=mine)


def connect(pki, client_auth, who):
    """Handshake a client presenting C{who}'s certificate (None: none) with a server
    of C{client_auth}; return the server's application protocol."""
    clock = Clock()
    server_options = load_context_factory(
        pki["server"].key_path, pki["server"].cert_path, client_auth=client_auth,
        ca_path=None if client_auth == "none" else pki["ca"].cert_path)
    server_factory = TLSMemoryBIOFactory(server_options, False,
                                         Factory.forProtocol(Recorder), clock=clock)
    client_factory = TLSMemoryBIOFactory(_client_options(pki, who), True,
                                         Factory.forProtocol(Greeter), clock=clock)
    server = server_factory.buildProtocol(None)
    client = client_factory.buildProtocol(None)
    application = server.wrappedProtocol
    pump = iosim.connect(server, iosim.makeFakeServer(server),
                         client, iosim.makeFakeClient(client), greet=False)
    for _ in range(100):
        clock.advance(0)
        if not pump.pump():
            break
    return application


def test_need_with_a_certificate_of_the_ca_names_its_user(pki):
    """need: a client with a certificate the CA signed gets through, and its CN is the
    connection's user."""
    server = connect(pki, "need", "alice")
    assert server.received == b"hello"
    assert server.user == "alice"


def test_need_without_a_certificate_fails_the_handshake(pki):
    """need: a client without a certificate never gets a byte through."""
    assert connect(pki, "need", None).received == b""


@pytest.mark.parametrize("client_auth", ["want", "need"])
def test_a_certificate_of_another_ca_fails_the_handshake(pki, client_auth):
    """want and need: a certificate the CA file does not verify fails the handshake."""
    assert connect(pki, client_auth, "mallory").received == b""


def test_want_lets_a_client_without_a_certificate_in_without_a_user(pki):
    """want: a client without a certificate connects (to log in with a password), and
    no user comes with it."""
    server = connect(pki, "want", None)
    assert server.received == b"hello"
    assert server.user is None


def test_want_with_a_certificate_names_its_user(pki):
    """want: a verified certificate names its user as with need."""
    assert connect(pki, "want", "alice").user == "alice"


def test_none_asks_for_no_certificate(pki):
    """none: the server asks for no certificate, so none names a user even when the
    client has one."""
    server = connect(pki, "none", "alice")
    assert server.received == b"hello"
    assert server.user is None


def test_client_auth_without_a_ca_file_is_refused(pki):
    """want/need without a CA file is a named error, not a server that verifies
    nothing."""
    with pytest.raises(ValueError, match="CA file"):
        load_context_factory(pki["server"].key_path, pki["server"].cert_path,
                             client_auth="need")


def test_a_ca_file_that_does_not_load_is_named(pki, tmp_path):
    """A CA file that is missing or holds no certificate is a TlsMaterialError naming
    it."""
    missing = tmp_path / "missing.pem"
    with pytest.raises(TlsMaterialError, match="missing.pem: cannot read"):
        load_context_factory(pki["server"].key_path, pki["server"].cert_path,
                             client_auth="want", ca_path=missing)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(TlsMaterialError, match="junk.pem: holds no PEM certificate"):
        load_context_factory(pki["server"].key_path, pki["server"].cert_path,
                             client_auth="want", ca_path=junk)
