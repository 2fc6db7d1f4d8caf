"""A throw-away certificate authority for tests of TLS client certificates (S4.7).

L{ThrowawayCA} makes a CA, then server and client certificates it signs, as PEM files
in a directory of the test's own; L{ThrowawayCA.client} takes the user name as the
subject's CN, which is what the broker maps to a user. Built with C{cryptography}, no
openssl command needed.
"""

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ThrowawayCA", "Issued"]


class Issued:
    """A key and the certificate issued for it, as PEM files.

    @ivar key_path: the private key (unencrypted PKCS#8).
    @ivar cert_path: the certificate.
    """

    def __init__(self, key_path, cert_path):
        self.key_path = Path(key_path)
        self.cert_path = Path(cert_path)


def _write_key(key, path):
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


class ThrowawayCA:
    """A CA whose key lives in C{directory}; C{name} tells two CAs apart.

    @ivar cert_path: the CA certificate (the broker's C{ssl.ca_file}).
    """

    def __init__(self, directory, name="mqgate test CA"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256()))
        stem = name.replace(" ", "-")
        self.cert_path = self.directory / f"{stem}.pem"
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, stem, subject, usage, alt_names=None, days=1):
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            # Strict verifiers (OpenSSL's X509_STRICT, Python 3.13's default) want
            # the key identifiers that tie a certificate to its issuer.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False))
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names),
                                            critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.directory / f"{stem}.key", self.directory / f"{stem}.pem")
        _write_key(key, issued.key_path)
        issued.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return issued

    def server(self, host="localhost"):
        """A server certificate for C{host} and 127.0.0.1."""
        return self._issue(
            f"server-{host}", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            [x509.DNSName(host), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])

    def client(self, user, organization="mqgate tests"):
        """A client certificate whose subject's CN is C{user}."""
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                             x509.NameAttribute(NameOID.COMMON_NAME, user)])
        return self._issue(f"client-{user}", subject, ExtendedKeyUsageOID.CLIENT_AUTH)
