"""TLS services of the real broker with a key pair made by `mqgate keytool` (S1.8, S4.6).

The key pair is made the way an operator makes it: the keytool command in a child
process, into the broker's VARHOME, before the broker starts. Clients then check the
certificate the way real ones do: Proton with a trusted CA and peer-name verification,
Python's ssl module with service_identity, and `openssl s_client`. Each hostname check
has its control: the same connection with the right name succeeds, so a failure with
the wrong name is the name check and nothing else.

The start-up failures (encrypted key without its password, TLS service without a key
pair) are checked on what the operator sees: a non-zero exit and a message naming the
setting or the command that fixes it.
"""

import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import time

import pytest
import service_identity
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from mqgate.security.keytool import create_keystore
from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import DEFAULT_TIMEOUT, receive_all
from tests.e2e.stomp_client import RawStomp, unique

PASSWORD = "s3cret-keystore"

#: The broker's TLS services, on OS-chosen ports.
TLS_SERVICES = {
    "mqgate.service.activelist": "jms,ssljms,ssladmin",
    "mqgate.ssljms.tls.port": "0",
    "mqgate.ssladmin.tls.port": "0",
}


def instance_etc(varhome, instance="mqgate"):
    """VARHOME/instances/NAME/etc: the password file's and keystore's parent (S0.5)."""
    return varhome / "instances" / instance / "etc"


def keytool(varhome, *args):
    """Run `python -m mqgate.admin.cli keytool --varhome VARHOME ARGS`, stdin not a tty."""
    return subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", "keytool", "--varhome", str(varhome),
         *args],
        cwd=str(REPO_ROOT), env=broker_environment(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60)


def write_passfile(varhome, password=PASSWORD):
    """Put C{mqgate.keystore.password} into the instance's password file (S4.6)."""
    etc = instance_etc(varhome)
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "passfile").write_text(f"mqgate.keystore.password={password}\n")
    (etc / "passfile").chmod(0o600)   # others may not read a password file (S4.6)


def client_domain(cert_path):
    """A Proton client TLS domain trusting C{cert_path} and checking the peer's name."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(cert_path))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    return domain


def amqps(host, port, cert_path, user="admin", password="admin", **kwargs):
    """A Proton BlockingConnection over TLS, verifying the broker against C{cert_path}."""
    return BlockingConnection(f"amqps://{user}:{password}@{host}:{port}",
                              ssl_domain=client_domain(cert_path), allowed_mechs="PLAIN",
                              timeout=DEFAULT_TIMEOUT, **kwargs)


def round_trip(conn, body):
    """Send C{body} to a fresh queue and receive it back on C{conn}."""
    address = f"queue://{unique('tls')}"
    conn.create_sender(address).send(Message(body=body))
    [got] = receive_all(conn.create_receiver(address), 1)
    return got.body


@pytest.fixture(scope="module")
def keystore(tmp_path_factory):
    """C{(varhome, keytool result)}: a VARHOME holding a key pair made by the keytool."""
    varhome = tmp_path_factory.mktemp("tls-broker")
    result = keytool(varhome, "--nopassword")
    assert result.returncode == 0, result.stderr
    return varhome, result


@pytest.fixture(scope="module")
def broker(keystore, module_broker_factory):
    """A broker with jms, ssljms and ssladmin, on the keystore's key pair."""
    return module_broker_factory(TLS_SERVICES, varhome=keystore[0],
                                 listening=("ssljms", "ssladmin"))


@pytest.fixture(scope="module")
def cert_path(keystore):
    """The broker's certificate: what a client trusts (self-signed, S1.8)."""
    return instance_etc(keystore[0]) / "keystore" / "cert.pem"


# -- the keytool's output --------------------------------------------------------------------

def test_keytool_creates_owner_only_key_and_certificate_for_localhost(keystore):
    """S1.8: keytool writes key.pem (0600, unencrypted with --nopassword) and a
    self-signed cert.pem for localhost, in an owner-only keystore directory."""
    varhome, result = keystore
    directory = instance_etc(varhome) / "keystore"
    key_path, cert_path = directory / "key.pem", directory / "cert.pem"
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert str(key_path) in result.stdout and str(cert_path) in result.stdout
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.issuer == cert.subject
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)


# -- AMQP over TLS -----------------------------------------------------------------------------

@pytest.mark.parametrize("service", ["ssljms", "ssladmin"])
def test_proton_amqps_round_trip_verifying_the_peer_name(broker, cert_path, service):
    """S1.8: Proton trusting cert.pem with VERIFY_PEER_NAME connects to
    amqps://localhost:PORT and sends and receives a message."""
    _host, port = broker.address(service)
    conn = amqps("localhost", port, cert_path)
    try:
        assert round_trip(conn, f"over {service}") == f"over {service}"
    finally:
        conn.close()


@pytest.mark.parametrize("peer_name,accepted", [("localhost", True),
                                                ("wrong.example", False)])
def test_proton_refuses_a_certificate_for_another_host_name(broker, cert_path, peer_name,
                                                            accepted):
    """S1.8: connecting to 127.0.0.1 with the TLS peer name set to localhost succeeds,
    and set to wrong.example fails the certificate check."""
    host, port = broker.address("ssljms")
    if accepted:
        amqps(host, port, cert_path, virtual_host=peer_name).close()
        return
    with pytest.raises(ConnectionException) as info:
        amqps(host, port, cert_path, virtual_host=peer_name).close()
    assert "certificate verify failed" in str(info.value), str(info.value)


def test_ssladmin_refuses_a_guest(broker, cert_path):
    """S1.1/S4.2: ssladmin, an ADMIN service, refuses a user outside group admin."""
    _host, port = broker.address("ssladmin")
    with pytest.raises(ConnectionException) as info:
        amqps("localhost", port, cert_path, user="guest", password="guest").close()
    assert "unauthorized-access" in str(info.value), str(info.value)


# -- other clients' hostname checks -----------------------------------------------------------

def served_certificate(address, cert_path, server_hostname):
    """The DER certificate the broker presents, read over a verified TLS connection."""
    context = ssl.create_default_context(cafile=str(cert_path))
    with socket.create_connection(address, timeout=DEFAULT_TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
            return tls.getpeercert(binary_form=True)


def test_python_ssl_and_service_identity_check_the_host_name(broker, cert_path):
    """S1.8: Python's ssl module accepts the broker as localhost and 127.0.0.1 and
    refuses it as wrong.example; service_identity agrees on the served certificate."""
    address = broker.address("ssljms")
    der = served_certificate(address, cert_path, "localhost")
    assert served_certificate(address, cert_path, "127.0.0.1") == der
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        served_certificate(address, cert_path, "wrong.example")
    assert "wrong.example" in str(info.value)
    cert = x509.load_der_x509_certificate(der)
    service_identity.cryptography.verify_certificate_hostname(cert, "localhost")
    with pytest.raises(service_identity.VerificationError):
        service_identity.cryptography.verify_certificate_hostname(cert, "wrong.example")


@pytest.mark.parametrize("offer", [["amqp"], ["h2", "http/1.1"]])
def test_a_client_offering_alpn_is_served_without_it(broker, cert_path, offer):
    """S1.8: a TLS client that offers application protocols over ALPN the messaging
    service does not list (AMQP clients may offer amqp) completes its handshake with
    none chosen and speaks AMQP: the broker answers the protocol header in kind."""
    context = ssl.create_default_context(cafile=str(cert_path))
    context.set_alpn_protocols(offer)
    with socket.create_connection(broker.address("ssljms"), timeout=DEFAULT_TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() is None
            tls.sendall(b"AMQP\x03\x01\x00\x00")   # SASL layer first
            answer = b""
            while len(answer) < 8:
                chunk = tls.recv(8 - len(answer))
                assert chunk, f"closed after {answer!r}"
                answer += chunk
    assert answer == b"AMQP\x03\x01\x00\x00"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
@pytest.mark.parametrize("name,verdict", [
    ("localhost", "Verify return code: 0 (ok)"),
    ("wrong.example", "Verify return code: 62 (hostname mismatch)"),
])
def test_openssl_s_client_verifies_the_host_name(broker, cert_path, name, verdict):
    """S1.8: `openssl s_client -CAfile cert.pem -verify_hostname NAME` verifies the
    broker as localhost and reports a hostname mismatch for wrong.example."""
    host, port = broker.address("ssljms")
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"{host}:{port}", "-CAfile", str(cert_path),
         "-verify_hostname", name, "-servername", "localhost"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert verdict in result.stdout, result.stdout + result.stderr


# -- STOMP over TLS ------------------------------------------------------------------------------

def test_stomp_over_tls_gets_connected_on_ssljms(broker, cert_path):
    """S1.8/S1.1: ssljms sniffs STOMP inside TLS: a TLS-wrapped CONNECT gets CONNECTED."""
    context = ssl.create_default_context(cafile=str(cert_path))
    client = RawStomp(broker.address("ssljms"))
    try:
        client.sock = context.wrap_socket(client.sock, server_hostname="localhost")
        frame = client.connect("1.2")
    finally:
        client.close()
    assert frame.command == "CONNECTED", frame
    assert frame.get("version") == "1.2"


# -- encrypted keys and missing key pairs at start-up ------------------------------------------

def test_encrypted_key_with_password_in_passfile_starts(tmp_path, broker_factory):
    """S1.8/S4.6: keytool encrypts the key with the password file's
    mqgate.keystore.password, and a broker reading the same file starts ssljms on it."""
    varhome = tmp_path / "varhome"
    write_passfile(varhome)
    result = keytool(varhome, "-D", "mqgate.passfile.enabled=true")
    assert result.returncode == 0, result.stderr
    key_pem = (instance_etc(varhome) / "keystore" / "key.pem").read_bytes()
    assert b"ENCRYPTED" in key_pem
    serialization.load_pem_private_key(key_pem, password=PASSWORD.encode())
    process = broker_factory({**TLS_SERVICES, "mqgate.passfile.enabled": "true"},
                             varhome=varhome)
    _host, port = process.address("ssljms")
    conn = amqps("localhost", port, instance_etc(varhome) / "keystore" / "cert.pem")
    try:
        assert round_trip(conn, "encrypted key") == "encrypted key"
    finally:
        conn.close()


@pytest.mark.parametrize("passfile", [None, "not-the-password"])
def test_encrypted_key_without_its_password_stops_startup(tmp_path, broker_factory,
                                                          passfile):
    """S1.8/S4.6: an encrypted key with no password (no password file, no terminal) or a
    wrong one stops start-up with a message naming mqgate.keystore.password."""
    varhome = tmp_path / "varhome"
    create_keystore(instance_etc(varhome) / "keystore", password=PASSWORD)
    defines = dict(TLS_SERVICES)
    if passfile is not None:
        write_passfile(varhome, passfile)
        defines["mqgate.passfile.enabled"] = "true"
    process = broker_factory(defines, varhome=varhome, wait=False)
    code, output = process.exit_output()
    assert code != 0, output
    assert "mqgate.keystore.password" in output, output
    assert PASSWORD not in output and "not-the-password" not in output, output
    assert "service ssljms listening" not in output, output


def test_tls_service_without_key_pair_stops_startup_telling_to_run_keytool(tmp_path,
                                                                          broker_factory):
    """S1.8: ssljms in the activelist without a key pair stops start-up with a message
    that says to run `mqgate keytool`."""
    process = broker_factory(TLS_SERVICES, varhome=tmp_path / "varhome", wait=False)
    code, output = process.exit_output()
    assert code != 0, output
    assert "mqgate keytool" in output, output
    assert "mqgate.service.activelist" in output and "ssljms" in output, output


def test_tls_startup_error_is_a_message_not_a_traceback(tmp_path, broker_factory):
    """S1.8/design rule 7: a TLS set-up error stops twistd with the message alone
    (as a bad -D value does), not with a Python traceback of the broker's wiring."""
    process = broker_factory(TLS_SERVICES, varhome=tmp_path / "varhome", wait=False)
    code, output = process.exit_output()
    assert code != 0, output
    assert "Traceback" not in output, output


def test_a_refused_tls_client_that_never_closes_is_dropped(broker, cert_path):
    """After a refused login over TLS the broker sends its ERROR and close_notify; a
    client that never answers the close_notify (it just stops) is dropped by the broker
    within seconds, not kept for ever (TLS waits for the peer's close_notify)."""
    context = ssl.create_default_context(cafile=str(cert_path))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with socket.create_connection(broker.address("ssljms"), timeout=DEFAULT_TIMEOUT) as raw:

        def pump(step):
            # Run one TLS step over the raw socket: what it writes goes out, and it is
            # retried with more bytes read until it no longer wants them.
            while True:
                try:
                    return step()
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    data = raw.recv(65536)
                    if not data:
                        raise ConnectionError("the broker closed during the step")
                    incoming.write(data)
                finally:
                    raw.sendall(outgoing.read())

        pump(tls.do_handshake)
        pump(lambda: tls.write(b"CONNECT\naccept-version:1.2\nhost:h\nlogin:admin\n"
                               b"passcode:wrong\n\n\x00"))
        answer = b""
        while True:   # until the broker's close_notify (read as b"")
            got = pump(lambda: tls.read(65536))
            if not got:
                break
            answer += got
        assert answer.startswith(b"ERROR\n"), answer
        # We never send our close_notify: the broker must drop the TCP connection
        # (with a FIN, or a reset when it aborts).
        start = time.monotonic()
        raw.settimeout(15)
        try:
            while raw.recv(65536):
                pass
        except ConnectionResetError:
            pass
        assert time.monotonic() - start < 10
