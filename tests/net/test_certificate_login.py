"""A client logging in as its TLS certificate's user, through the AMQP adapter (S4.7):
SASL EXTERNAL offered and answered from the user repository without the password
check, and the outcome recorded in the audit trail (S4.8)."""

import pytest
from OpenSSL import crypto
from cryptography import x509

from mqgate.amqp.events import ConnectionOpened, SaslCompleted
from mqgate.amqp.performatives import SaslMechanisms, SaslOutcome
from mqgate.security.auth import FileAuthenticator, LoginPolicy
from mqgate.security.users import UserRepository, hash_password
from tests.deferreds import run_now
from tests.e2e.pki import ThrowawayCA
from tests.net.test_amqp_adapter import Harness


class Trail:
    """An audit trail keeping its records."""

    def __init__(self):
        self.records = []

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        self.records.append((kind, outcome, user, address, service, details))


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """pyOpenSSL certificates of alice and of nobody (no such user), as a TLS transport
    hands them out."""
    ca = ThrowawayCA(tmp_path_factory.mktemp("pki"))
    return {user: crypto.X509.from_cryptography(x509.load_pem_x509_certificate(
        ca.client(user).cert_path.read_bytes())) for user in ("alice", "nobody")}


@pytest.fixture
def harness(tmp_path):
    """A TLS-like service verifying certificates, over a repository with alice."""
    passwd = tmp_path / "passwd"
    passwd.write_text(f"alice:{hash_password('x', iterations=1000)}:user:1\n")
    trail = Trail()
    h = Harness(tmp_path, login_policy=LoginPolicy("ssljms", client_certificates=True),
                identities=FileAuthenticator(UserRepository.load(passwd), run_now),
                audit=trail)
    h.trail = trail
    return h


def log_in(harness, certificate):
    peer = harness.connect(credentials="EXTERNAL")
    peer.transport.getPeerCertificate = lambda: certificate   # as a TLS transport does
    peer.pump()
    harness.clock.advance(0)   # the outcome is written by the Flusher
    peer.pump()
    return peer


def test_external_logs_in_as_the_certificate_user_and_is_audited(harness, certificates):
    """S4.7, S4.8: EXTERNAL is offered first, alice's certificate opens the connection
    without a password check, and the audit trail records an ok for alice."""
    peer = log_in(harness, certificates["alice"])
    offered = peer.performatives(SaslMechanisms)[0].sasl_server_mechanisms
    assert [str(m) for m in offered] == ["EXTERNAL", "PLAIN"]
    assert any(isinstance(e, ConnectionOpened) for e in peer.events), peer.events
    assert harness.authenticator.requests == []   # no password was checked
    [(kind, outcome, user, address, service, details)] = harness.trail.records
    assert (kind, outcome, user, address, service) == (
        "authentication", "ok", "alice", "127.0.0.1", "jms")
    assert details["mechanism"] == "certificate"


def test_a_certificate_of_an_unknown_user_is_refused_and_audited(harness, certificates):
    """S4.7, S4.8: a certificate naming no user gets outcome auth, and a failed record
    with the reason."""
    peer = log_in(harness, certificates["nobody"])
    assert [e.ok for e in peer.events if isinstance(e, SaslCompleted)] == [False]
    assert peer.performatives(SaslOutcome)[-1].code == 1
    [(_kind, outcome, user, *_rest, details)] = harness.trail.records
    assert (outcome, user, details["why"]) == ("failed", "nobody", "unknown user")


def test_no_certificate_means_no_external(harness):
    """S4.7: a connection without a certificate is not offered EXTERNAL."""
    peer = harness.connect()
    peer.transport.getPeerCertificate = lambda: None
    peer.pump()
    offered = peer.performatives(SaslMechanisms)[0].sasl_server_mechanisms
    assert [str(m) for m in offered] == ["PLAIN"]
