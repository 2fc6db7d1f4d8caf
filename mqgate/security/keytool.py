"""
Key pair and self-signed certificate for TLS services (S1.8, the C{mqgate keytool}).

Like the source system's key tool, this makes what a TLS service needs to start: an
RSA private key and a self-signed X.509 certificate for the broker's host name. The
files are PEM, so that Twisted's C{ssl:} endpoints, OpenSSL and curl read them:

  - C{key.pem}, mode 0600, encrypted with the key store password when one is given
    (the password comes from the password file, S4.6, or a prompt: the caller's job);
  - C{cert.pem}, mode 0644;
  - in a directory created with mode 0700 (an existing directory is left as it is).

Each file is written to a temporary name created with its final mode and renamed into
place, so a private key is never readable by others, not even for a moment.
"""

import datetime
import ipaddress
import os
import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KEY_FILE", "CERT_FILE", "create_keystore", "subject_alt_names"]

KEY_FILE = "key.pem"
CERT_FILE = "cert.pem"

_LOOPBACKS = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def subject_alt_names(hostname):
    """The subjectAltName entries for C{hostname}.

    A DNS name gets C{DNS:hostname}; C{localhost} also gets the loopback addresses
    (127.0.0.1 and ::1) because clients reach it by either; an IP address gets
    C{IP:address}, plus C{DNS:localhost} when it is a loopback address.
    """
    try:
        address = ipaddress.ip_address(hostname)
    except ValueError:
        names = [x509.DNSName(hostname)]
        if hostname.lower() == "localhost":
            names += [x509.IPAddress(ip) for ip in _LOOPBACKS]
        return names
    names = [x509.IPAddress(address)]
    if address.is_loopback:
        names.append(x509.DNSName("localhost"))
    return names


def _build_certificate(key, hostname, days, now):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mqgate")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # a minute of slack for peers whose clock runs a little behind ours
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(subject_alt_names(hostname)),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False,
            crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )


def _write_private(path, data, mode):
    """Write C{data} to C{path} with exactly C{mode}, atomically."""
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)     # the umask may have taken bits we want (0644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _encryption(password):
    if password is None:
        return serialization.NoEncryption()
    if isinstance(password, str):
        password = password.encode("utf-8")
    if not password:
        raise ValueError("an empty key store password protects nothing; "
                         "give a password or None")
    return serialization.BestAvailableEncryption(password)


def create_keystore(directory, *, hostname="localhost", days=3650, password=None,
                    key_size=2048, overwrite=False, now=None):
    """Create an RSA key pair and a self-signed certificate for C{hostname} (S1.8).

    @param directory: where to write C{key.pem} and C{cert.pem}; created (0700,
        with its parents) if missing.
    @param hostname: the certificate's subject CN and subjectAltName (see
        L{subject_alt_names}); a DNS name or an IP address.
    @param days: validity, from now.
    @param password: C{str} or C{bytes} to encrypt the key with, or C{None}.
    @param key_size: RSA modulus bits (at least 2048).
    @param overwrite: replace existing files instead of refusing.
    @param now: an aware C{datetime} to date the certificate from (tests).
    @return: C{(key_path, cert_path)}.
    @raise FileExistsError: a key or certificate is already there and not C{overwrite}.
    @raise ValueError: a key size below 2048, C{days} below 1, an empty password.
    """
    if key_size < 2048:
        raise ValueError(f"key_size {key_size} is too small; at least 2048")
    if days < 1:
        raise ValueError(f"days {days} must be at least 1")
    encryption = _encryption(password)
    directory = os.fspath(directory)
    key_path = os.path.join(directory, KEY_FILE)
    cert_path = os.path.join(directory, CERT_FILE)
    if not overwrite:
        for path in (key_path, cert_path):
            if os.path.exists(path):
                raise FileExistsError(f"{path} already exists; remove it or overwrite")
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
        os.chmod(directory, 0o700)  # makedirs' mode is subject to the umask
    key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    cert = _build_certificate(key, hostname, days, now)
    _write_private(key_path, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption), 0o600)
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return key_path, cert_path
