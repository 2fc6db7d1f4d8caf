"""Tests for TLS material and listeners: PEM files to a working TLS server (S1.8)."""

import pytest
from service_identity import VerificationError
from twisted.internet import endpoints, ssl
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, MemoryReactorClock
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.test import iosim

from mqgate.net.tls import (
    TLSServerEndpoint, TlsMaterialError, load_context_factory, server_endpoint,
    server_endpoint_description)
from mqgate.net.unify import PortUnificationFactory
from mqgate.security.keytool import create_keystore
from mqgate.sniff import STOMP, TLS


class Echo(Protocol):
    """Server side: echoes what it receives, and remembers it."""

    def connectionMade(self):
        self.received = b""

    def dataReceived(self, data):
        self.received += data
        self.transport.write(data)


class Client(Protocol):
    """Client side: sends a greeting once connected, records replies and the loss."""

    greeting = b"ping"

    def connectionMade(self):
        self.received = b""
        self.lost = None
        self.transport.write(self.greeting)

    def dataReceived(self, data):
        self.received += data

    def connectionLost(self, reason):
        self.lost = reason


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An unencrypted localhost keystore."""
    return create_keystore(tmp_path_factory.mktemp("tls") / "plain")


@pytest.fixture(scope="module")
def encrypted_store(tmp_path_factory):
    """A localhost keystore whose key is encrypted with 'pw'."""
    return create_keystore(tmp_path_factory.mktemp("tls") / "enc", password="pw")


def handshake(server_factory, cert_path, hostname, clock, client_class=Client):
    """Connect a TLS client for C{hostname}, trusting C{cert_path}, in memory.

    TLS transports batch small writes with C{clock.callLater(0)}, so the pump runs
    the clock between rounds until nothing moves.
    """
    with open(cert_path, "rb") as f:
        trust = ssl.Certificate.loadPEM(f.read())
    client_options = ssl.optionsForClientTLS(hostname, trustRoot=trust)
    client_factory = TLSMemoryBIOFactory(
        client_options, True, Factory.forProtocol(client_class), clock=clock)
    server = server_factory.buildProtocol(None)
    client = client_factory.buildProtocol(None)
    pump = iosim.connect(server, iosim.makeFakeServer(server),
                         client, iosim.makeFakeClient(client), greet=False)
    application = client.wrappedProtocol     # the wrapper forgets it when closed
    for _ in range(100):
        due = [c for c in clock.getDelayedCalls() if c.getTime() <= clock.seconds()]
        clock.advance(0)
        if not pump.pump() and not due:
            break
    return server, application


def tls_echo_factory(options, clock):
    return TLSMemoryBIOFactory(options, False, Factory.forProtocol(Echo), clock=clock)


def test_handshake_succeeds_for_the_certificate_hostname(store):
    """A client checking 'localhost' with service_identity completes TLS and talks (S1.8)."""
    clock = Clock()
    server, client = handshake(tls_echo_factory(load_context_factory(*store), clock),
                               store[1], "localhost", clock)
    assert client.received == b"ping"
    assert client.lost is None


def test_handshake_fails_for_a_wrong_hostname(store):
    """A client expecting another hostname refuses the certificate: no data gets through."""
    clock = Clock()
    server, client = handshake(tls_echo_factory(load_context_factory(*store), clock),
                               store[1], "broker.example.com", clock)
    assert client.received == b""
    assert client.lost is not None
    assert client.lost.check(VerificationError)            # service_identity's check
    assert "DNSMismatch" in repr(client.lost.value)
    assert server.wrappedProtocol is None or server.wrappedProtocol.received == b""


def test_encrypted_key_with_password(encrypted_store):
    """An encrypted key loads with its password and serves TLS (S1.8)."""
    options = load_context_factory(*encrypted_store, password="pw")
    clock = Clock()
    server, client = handshake(tls_echo_factory(options, clock), encrypted_store[1],
                               "localhost", clock)
    assert client.received == b"ping"


def test_encrypted_key_without_password_is_named_error(encrypted_store):
    """An encrypted key without its password raises TlsMaterialError naming the file."""
    with pytest.raises(TlsMaterialError) as info:
        load_context_factory(*encrypted_store)
    assert info.value.path == encrypted_store[0]
    assert "password" in info.value.reason


def test_wrong_password_is_named_error(encrypted_store):
    """A wrong password raises TlsMaterialError, not an OpenSSL traceback."""
    with pytest.raises(TlsMaterialError, match="password is wrong"):
        load_context_factory(*encrypted_store, password=b"nope")


def test_key_of_another_certificate_refused(store, encrypted_store):
    """A key that does not belong to the certificate is refused at load time."""
    with pytest.raises(TlsMaterialError, match="does not belong"):
        load_context_factory(store[0], encrypted_store[1])


def test_missing_file_named(tmp_path, store):
    """A missing key or certificate file is reported with its path."""
    with pytest.raises(TlsMaterialError, match="cannot read") as info:
        load_context_factory(str(tmp_path / "nokey.pem"), store[1])
    assert info.value.path == str(tmp_path / "nokey.pem")
    with pytest.raises(TlsMaterialError, match="no PEM certificate"):
        load_context_factory(store[0], store[0])


def test_certificate_chain_after_the_leaf_is_sent_along(tmp_path, store, encrypted_store):
    """Certificates after the first in cert.pem become the chain sent to clients."""
    chain_file = tmp_path / "chain.pem"
    with open(store[1], "rb") as leaf, open(encrypted_store[1], "rb") as other:
        chain_file.write_bytes(leaf.read() + other.read())
    options = load_context_factory(store[0], str(chain_file))
    assert len(options.extraCertChain) == 1


def test_minimum_tls_version_is_1_2(store):
    """Servers refuse anything older than TLS 1.2."""
    options = load_context_factory(*store)
    assert options._options & ssl.SSL.OP_NO_TLSv1_1


def test_server_endpoint_ipv4_listens_with_the_context_factory(store):
    """server_endpoint gives an SSL4ServerEndpoint bound as asked (S1.5, S1.8)."""
    reactor = MemoryReactor()
    options = load_context_factory(*store)
    endpoint = server_endpoint(reactor, "127.0.0.1", 7677, options, backlog=7)
    assert isinstance(endpoint, endpoints.SSL4ServerEndpoint)
    factory = Factory.forProtocol(Echo)
    endpoint.listen(factory)
    port, listened, context, backlog, interface = reactor.sslServers[0]
    assert (port, listened, context, backlog, interface) == (
        7677, factory, options, 7, "127.0.0.1")


def test_server_endpoint_all_interfaces(store):
    """No host means every IPv4 interface."""
    reactor = MemoryReactor()
    server_endpoint(reactor, None, 0, load_context_factory(*store)).listen(Factory())
    assert reactor.sslServers[0][4] == ""


def test_server_endpoint_ipv6_wraps_tcp6(store):
    """An IPv6 host gets a TCP6 listener whose connections start with TLS."""
    reactor = MemoryReactorClock()
    options = load_context_factory(*store)
    endpoint = server_endpoint(reactor, "::1", 7677, options)
    assert isinstance(endpoint, TLSServerEndpoint)
    inner = Factory.forProtocol(Echo)
    endpoint.listen(inner)
    port, listened, backlog, interface = reactor.tcpServers[0]
    assert (port, interface) == (7677, "::1")
    assert isinstance(listened, TLSMemoryBIOFactory)
    assert listened.wrappedFactory is inner
    server, client = handshake(listened, store[1], "localhost", reactor)
    assert client.received == b"ping"


def test_description_for_unencrypted_key_parses_to_a_tls_listener(tmp_path):
    """The ssl: description (paths with ':' quoted) listens with the keystore (S1.8)."""
    key_path, cert_path = create_keystore(tmp_path / "odd:dir=name")
    text = server_endpoint_description("127.0.0.1", 7677, key_path, cert_path, backlog=9)
    assert text.startswith("ssl:port=7677:privateKey=")
    reactor = MemoryReactor()
    endpoints.serverFromString(reactor, text).listen(Factory())
    port, _, context, backlog, interface = reactor.sslServers[0]
    assert (port, backlog, interface) == (7677, 9, "127.0.0.1")
    subject = context.certificate.to_cryptography().subject
    assert subject.rfc4514_string() == "O=mqgate,CN=localhost"


def test_tls_then_sniff_inside(store):
    """A port can take TLS and sniff the protocol inside it: TLS -> unification -> STOMP."""
    clock = Clock()
    stomp = Factory.forProtocol(Echo)
    inside = PortUnificationFactory({STOMP: stomp}, clock)
    outside = PortUnificationFactory(
        {TLS: TLSMemoryBIOFactory(load_context_factory(*store), False, inside,
                                  clock=clock)}, clock)

    class StompClient(Client):
        greeting = b"CONNECT\naccept-version:1.2\n\n\x00"

    server, client = handshake(outside, store[1], "localhost", clock, StompClient)
    assert client.received == StompClient.greeting
    assert server.kind is TLS
    assert server.inner.wrappedProtocol.kind is STOMP
    assert clock.getDelayedCalls() == []
