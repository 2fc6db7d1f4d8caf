"""TLS client certificates and SASL EXTERNAL against the real broker (S4.7).

A throw-away CA (tests/e2e/pki.py) signs the broker's server certificate and the
clients' certificates; a second CA signs a certificate the broker must not accept. The
broker runs ssljms with C{client_auth=want} and ssladmin with C{need}, both trusting the
first CA, and a user repository with admin (group admin), alice (group user), guest and
an inactive mallory. A certificate's subject CN is its user. Clients: Proton with an
SSLDomain carrying the client certificate, stomp.py over TLS, and raw TLS sockets (to
see the SASL frames themselves).
"""

import socket
import ssl

import pytest
import stomp
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from mqgate.security.users import hash_password
from tests.e2e.pki import ThrowawayCA
from tests.e2e.proton_client import DEFAULT_TIMEOUT, receive_all
from tests.e2e.sasl_peer import SaslPeer, stomp_connect
from tests.e2e.stomp_client import FrameCollector, StompClient, unique

UNAUTHORIZED = "amqp:unauthorized-access"
#: Cheap hashes: the password check's cost is not what these tests are about.
ROUNDS = 1000


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The CA, the broker's certificate, and client certificates by user name; the
    C{"stranger"} is alice again, signed by another CA."""
    directory = tmp_path_factory.mktemp("pki")
    ca = ThrowawayCA(directory / "ca")
    certificates = {user: ca.client(user)
                    for user in ("admin", "alice", "guest", "mallory", "nobody")}
    certificates["stranger"] = ThrowawayCA(directory / "other", "other CA").client("alice")
    return {"ca": ca, "server": ca.server(), **certificates}


def broker_defines(pki, keystore, users, **more):
    defines = {
        "mqgate.service.activelist": "jms,ssljms,ssladmin",
        "mqgate.ssljms.tls.port": "0", "mqgate.ssladmin.tls.port": "0",
        "mqgate.keystore.file.dirpath": str(keystore),
        "mqgate.user_repository.file.dirpath": str(users),
        "mqgate.ssljms.ssl.client_auth": "want",
        "mqgate.ssljms.ssl.ca_file": str(pki["ca"].cert_path),
        "mqgate.ssladmin.ssl.client_auth": "need",
        "mqgate.ssladmin.ssl.ca_file": str(pki["ca"].cert_path),
    }
    defines.update(more)
    return defines


def prepare(pki, directory):
    """The broker's key store (the CA's server certificate) and user repository."""
    keystore = directory / "keystore"
    keystore.mkdir(mode=0o700)
    (keystore / "key.pem").write_bytes(pki["server"].key_path.read_bytes())
    (keystore / "key.pem").chmod(0o600)
    (keystore / "cert.pem").write_bytes(pki["server"].cert_path.read_bytes())
    users = directory / "users"
    users.mkdir(mode=0o700)
    lines = [f"{name}:{hash_password(name, iterations=ROUNDS)}:{group}:{active}\n"
             for name, group, active in (("admin", "admin", 1), ("alice", "user", 1),
                                         ("guest", "anonymous", 1),
                                         ("mallory", "user", 0))]
    (users / "passwd").write_text("".join(lines))
    (users / "passwd").chmod(0o600)
    return keystore, users


@pytest.fixture(scope="module")
def broker(pki, module_broker_factory, tmp_path_factory):
    """ssljms (want) and ssladmin (need) trusting the CA."""
    directory = tmp_path_factory.mktemp("certs-broker")
    keystore, users = prepare(pki, directory)
    return module_broker_factory(broker_defines(pki, keystore, users),
                                 varhome=directory / "varhome",
                                 listening=("ssljms", "ssladmin"))


def domain(pki, who):
    """A Proton client TLS domain trusting the CA, with C{who}'s certificate (None:
    none)."""
    result = SSLDomain(SSLDomain.MODE_CLIENT)
    result.set_trusted_ca_db(str(pki["ca"].cert_path))
    result.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if who is not None:
        result.set_credentials(str(pki[who].cert_path), str(pki[who].key_path), None)
    return result


def amqps(broker, pki, service, who, mechanism="EXTERNAL", credentials=""):
    _host, port = broker.address(service)
    # localhost: Proton checks the peer name against DNS names only.
    return BlockingConnection(f"amqps://{credentials}localhost:{port}",
                              ssl_domain=domain(pki, who), allowed_mechs=mechanism,
                              timeout=DEFAULT_TIMEOUT)


def refused(broker, pki, service, who, **kwargs):
    """The text of the ConnectionException connecting as C{who} raises."""
    with pytest.raises(ConnectionException) as info:
        amqps(broker, pki, service, who, **kwargs).close()
    return str(info.value)


def round_trip(conn, body):
    address = f"queue://{unique('cert')}"
    conn.create_sender(address).send(Message(body=body))
    [got] = receive_all(conn.create_receiver(address), 1)
    return got.body


def tls_socket(pki, address, who):
    """A raw TLS socket to C{address}, presenting C{who}'s certificate (None: none)."""
    context = ssl.create_default_context(cafile=str(pki["ca"].cert_path))
    if who is not None:
        context.load_cert_chain(str(pki[who].cert_path), str(pki[who].key_path))
    sock = socket.create_connection(address, timeout=DEFAULT_TIMEOUT)
    return context.wrap_socket(sock, server_hostname="localhost")


def RawTls(pki, address, who):
    """A L{SaslPeer} over TLS, presenting C{who}'s certificate (None: none)."""
    return SaslPeer(address, tls_socket(pki, address, who))


def handshake_fails(pki, address, who):
    """Whether a TLS client presenting C{who}'s certificate is turned away: the
    handshake fails, or (TLS 1.3, where the server judges the certificate after the
    client thinks it is done) the connection ends before the broker's first byte."""
    try:
        sock = tls_socket(pki, address, who)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        return sock.recv(8) == b""
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        sock.close()


# -- SASL EXTERNAL ---------------------------------------------------------------------------

def test_external_logs_in_as_the_certificate_user(broker, pki):
    """S4.7: Proton with alice's certificate logs in with EXTERNAL and exchanges
    messages."""
    conn = amqps(broker, pki, "ssljms", "alice")
    try:
        assert round_trip(conn, "as alice") == "as alice"
    finally:
        conn.close()


def test_the_certificate_user_keeps_its_groups(broker, pki):
    """S4.7: the certificate's user has its repository groups: admin's certificate
    opens the admin-only ssladmin, alice's (group user) is refused there."""
    amqps(broker, pki, "ssladmin", "admin").close()
    assert UNAUTHORIZED in refused(broker, pki, "ssladmin", "alice")


@pytest.mark.parametrize("who", ["nobody", "mallory"])
def test_a_certificate_of_an_unknown_or_inactive_user_is_refused(broker, pki, who):
    """S4.7: a verified certificate naming no active user is refused with outcome
    auth, however well it is signed."""
    with RawTls(pki, broker.address("ssljms"), who) as raw:
        _, outcome = raw.sasl("EXTERNAL")
    assert outcome.code == 1
    assert UNAUTHORIZED in refused(broker, pki, "ssljms", who)


def test_external_is_offered_first_with_a_certificate_and_not_without(broker, pki):
    """S4.7: with a verified certificate the broker offers EXTERNAL first; without one
    (want) it does not, and EXTERNAL tried anyway is refused with auth."""
    with RawTls(pki, broker.address("ssljms"), "alice") as raw:
        offered, outcome = raw.sasl("EXTERNAL")
    assert offered[0] == "EXTERNAL" and outcome.code == 0
    with RawTls(pki, broker.address("ssljms"), None) as raw:
        offered, outcome = raw.sasl("EXTERNAL")
    assert "EXTERNAL" not in offered
    assert outcome.code == 1 and b"certificate" in outcome.additional_data


def test_an_authorization_identity_other_than_the_certificate_user_is_refused(broker, pki):
    """S4.7: alice's certificate asking to act as admin is refused with auth; asking
    as alice is accepted."""
    with RawTls(pki, broker.address("ssljms"), "alice") as raw:
        _, outcome = raw.sasl("EXTERNAL", b"admin")
    assert outcome.code == 1 and b"'admin'" in outcome.additional_data
    with RawTls(pki, broker.address("ssljms"), "alice") as raw:
        _, outcome = raw.sasl("EXTERNAL", b"alice")
    assert outcome.code == 0


# -- want and need ---------------------------------------------------------------------------

def test_want_lets_a_client_without_a_certificate_log_in_with_a_password(broker, pki):
    """S4.7: on ssljms (want) a client without a certificate logs in with PLAIN."""
    conn = amqps(broker, pki, "ssljms", None, mechanism="PLAIN",
                 credentials="admin:admin@")
    try:
        assert round_trip(conn, "password") == "password"
    finally:
        conn.close()


def test_need_fails_the_handshake_of_a_client_without_a_certificate(broker, pki):
    """S4.7: on ssladmin (need) a client without a certificate fails the TLS handshake,
    even with the right password; the control with a certificate succeeds above."""
    refused(broker, pki, "ssladmin", None, mechanism="PLAIN", credentials="admin:admin@")
    assert handshake_fails(pki, broker.address("ssladmin"), None)
    assert not handshake_fails(pki, broker.address("ssladmin"), "alice")


@pytest.mark.parametrize("service", ["ssljms", "ssladmin"])
def test_a_certificate_of_another_ca_fails_the_handshake(broker, pki, service):
    """S4.7: a certificate the CA file does not verify fails the handshake on want and
    need alike."""
    assert handshake_fails(pki, broker.address(service), "stranger")
    assert not handshake_fails(pki, broker.address(service), "alice")


# -- STOMP ---------------------------------------------------------------------------------

def test_stomp_with_a_certificate_and_no_login_is_the_certificate_user(broker, pki):
    """S4.7: stomp.py over TLS with alice's certificate and no login gets CONNECTED and
    exchanges messages; inactive mallory's certificate gets an ERROR."""
    address = broker.address("ssljms")
    queue = f"/queue/{unique('stomp-cert')}"
    client = stomp_over_tls(pki, address, "alice")
    try:
        client.subscribe(queue)
        client.send(queue, b"as alice")
        client.collector.wait_for_body(b"as alice")
    finally:
        client.close()
    answer = stomp_connect(address, sock=tls_socket(pki, address, "mallory"))
    assert answer.command == "ERROR", answer
    assert "authentication failed" in answer.get("message")


def test_stomp_without_certificate_or_login_needs_a_login(broker, pki):
    """S4.7, S4.2: on want, a CONNECT without certificate and without login is refused
    with an ERROR saying the service needs a login."""
    address = broker.address("ssljms")
    answer = stomp_connect(address, sock=tls_socket(pki, address, None))
    assert answer.command == "ERROR", answer
    assert "needs a login" in answer.get("message")


def stomp_over_tls(pki, address, who):
    """A stomp.py 1.2 client over TLS with C{who}'s certificate, CONNECTed without a
    login."""
    connection = stomp.Connection12([address], auto_decode=False, heartbeats=(0, 0),
                                    reconnect_attempts_max=1, timeout=DEFAULT_TIMEOUT)
    connection.set_ssl(for_hosts=[address], key_file=str(pki[who].key_path),
                       cert_file=str(pki[who].cert_path),
                       ca_certs=str(pki["ca"].cert_path))
    collector = FrameCollector(f"stomp over tls as {who}")
    connection.set_listener("collector", collector)
    connection.connect(wait=False)
    client = StompClient(connection, collector, "1.2")
    try:
        collector.wait_for(lambda: collector.connected or collector.errors, "CONNECTED")
        assert collector.connected is not None, collector.errors[0].headers
    except BaseException:
        client.close()
        raise
    return client


# -- start-up errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("more,named", [
    ({"mqgate.ssljms.ssl.ca_file": ""}, "mqgate.ssljms.ssl.ca_file"),
    ({"mqgate.ssladmin.ssl.ca_file": "/nonexistent/ca.pem"}, "mqgate.ssladmin.ssl.ca_file"),
])
def test_client_auth_without_a_usable_ca_file_stops_the_start_up(pki, broker_factory,
                                                                  tmp_path, more, named):
    """S4.7: want/need with no CA file, or one that does not load, stops twistd with a
    message naming the key, not a traceback."""
    keystore, users = prepare(pki, tmp_path)
    process = broker_factory(broker_defines(pki, keystore, users, **more),
                             varhome=tmp_path / "varhome", wait=False)
    code, output = process.exit_output()
    assert code != 0, output
    assert named in output, output
    assert "Traceback" not in output, output
