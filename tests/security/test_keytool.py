"""Tests for the key tool: key pair and self-signed certificate for TLS services (S1.8)."""

import datetime
import os
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from service_identity import VerificationError
from service_identity.cryptography import (
    verify_certificate_hostname, verify_certificate_ip_address)

from mqgate.security.keytool import CERT_FILE, KEY_FILE, create_keystore

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def load_cert(path):
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def load_key(path, password=None):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=password)


@pytest.fixture(scope="module")
def localhost_store(tmp_path_factory):
    """One unencrypted keystore for localhost, shared by the read-only tests."""
    return create_keystore(tmp_path_factory.mktemp("ks") / "store", now=NOW)


def test_files_created_with_modes(tmp_path):
    """key.pem is 0600, cert.pem 0644, in a new directory of mode 0700 (S1.8)."""
    directory = tmp_path / "a" / "keystore"
    key_path, cert_path = create_keystore(directory)
    assert (key_path, cert_path) == (str(directory / KEY_FILE), str(directory / CERT_FILE))
    assert mode(directory) == 0o700
    assert mode(key_path) == 0o600
    assert mode(cert_path) == 0o644
    assert sorted(os.listdir(directory)) == [CERT_FILE, KEY_FILE]     # no temp left


def test_modes_hold_under_a_strict_umask(tmp_path):
    """A umask of 077 does not make the certificate unreadable to clients (0644 kept)."""
    old = os.umask(0o077)
    try:
        key_path, cert_path = create_keystore(tmp_path / "ks")
    finally:
        os.umask(old)
    assert (mode(key_path), mode(cert_path)) == (0o600, 0o644)


def test_existing_directory_mode_left_alone(tmp_path):
    """An existing directory keeps its mode: the tool does not chmod what it did not make."""
    tmp_path.chmod(0o755)
    create_keystore(tmp_path)
    assert mode(tmp_path) == 0o755


def test_certificate_verifies_for_its_hostname(localhost_store):
    """The certificate passes service_identity's hostname check for localhost (S1.8)."""
    verify_certificate_hostname(load_cert(localhost_store[1]), "localhost")


def test_certificate_fails_for_another_hostname(localhost_store):
    """The certificate fails service_identity's check for a different hostname."""
    with pytest.raises(VerificationError):
        verify_certificate_hostname(load_cert(localhost_store[1]), "broker.example.com")


@pytest.mark.parametrize("ip", ["127.0.0.1", "::1"])
def test_localhost_certificate_covers_loopback_addresses(localhost_store, ip):
    """A localhost certificate also names the loopback addresses as IP SANs."""
    verify_certificate_ip_address(load_cert(localhost_store[1]), ip)


def test_named_host_certificate(tmp_path):
    """A certificate for a DNS name covers that name and no IP address."""
    cert = load_cert(create_keystore(tmp_path, hostname="mq.example.com")[1])
    verify_certificate_hostname(cert, "mq.example.com")
    with pytest.raises(VerificationError):
        verify_certificate_hostname(cert, "localhost")
    with pytest.raises(VerificationError):
        verify_certificate_ip_address(cert, "127.0.0.1")


def test_ip_address_certificate(tmp_path):
    """A certificate made for an IP address verifies for that address only."""
    cert = load_cert(create_keystore(tmp_path, hostname="10.1.2.3")[1])
    verify_certificate_ip_address(cert, "10.1.2.3")
    with pytest.raises(VerificationError):
        verify_certificate_ip_address(cert, "10.1.2.4")


def test_certificate_is_self_signed_by_the_key(localhost_store):
    """The certificate is self-signed, and its public key is the key file's (S1.8)."""
    key_path, cert_path = localhost_store
    cert = load_cert(cert_path)
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    assert (cert.public_key().public_bytes(der, public)
            == load_key(key_path).public_key().public_bytes(der, public))
    assert load_key(key_path).key_size == 2048


def test_validity_period(localhost_store):
    """The certificate is valid from (about) now for the given number of days."""
    cert = load_cert(localhost_store[1])
    assert cert.not_valid_after_utc == NOW + datetime.timedelta(days=3650)
    assert NOW - datetime.timedelta(minutes=5) <= cert.not_valid_before_utc <= NOW


def test_server_auth_usage(localhost_store):
    """The certificate is a non-CA TLS server certificate."""
    cert = load_cert(localhost_store[1])
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage


@pytest.mark.parametrize("password", ["s3cret", b"s3cret"])
def test_password_encrypts_the_key(tmp_path, password):
    """With a password the key is encrypted: it loads only with that password (S1.8)."""
    key_path, _ = create_keystore(tmp_path, password=password)
    with open(key_path, "rb") as f:
        assert b"ENCRYPTED" in f.read()
    assert load_key(key_path, b"s3cret").key_size == 2048
    with pytest.raises(TypeError):
        load_key(key_path)
    with pytest.raises(ValueError):
        load_key(key_path, b"wrong")


def test_no_password_leaves_key_unencrypted(localhost_store):
    """Without a password the key loads without one."""
    assert load_key(localhost_store[0]).key_size == 2048


def test_refuses_to_overwrite(tmp_path):
    """An existing keystore is not replaced unless overwrite is asked for."""
    key_path, _ = create_keystore(tmp_path)
    with open(key_path, "rb") as f:
        before = f.read()
    with pytest.raises(FileExistsError, match="key.pem"):
        create_keystore(tmp_path)
    with open(key_path, "rb") as f:
        assert f.read() == before
    create_keystore(tmp_path, overwrite=True)
    with open(key_path, "rb") as f:
        assert f.read() != before
    assert mode(key_path) == 0o600


@pytest.mark.parametrize("kwargs, message", [
    (dict(key_size=1024), "key_size 1024"),
    (dict(days=0), "days 0"),
    (dict(password=""), "empty key store password"),
])
def test_rejects_weak_or_empty_settings(tmp_path, kwargs, message):
    """A small key, no validity or an empty password is refused before writing."""
    with pytest.raises(ValueError, match=message):
        create_keystore(tmp_path / "ks", **kwargs)
    assert not (tmp_path / "ks").exists()
