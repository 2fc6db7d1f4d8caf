"""The `mqgate keytool` command, run as an operator runs it (S1.8, S4.6).

Each test runs ``python -m mqgate.admin.cli`` (what the ``mqgate`` console script calls)
in a child process with stdin not a terminal, the way a script or CI job runs it, and
checks the exit code, what it says, and the files it leaves in the VARHOME.
"""

import os
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.e2e.broker import REPO_ROOT, broker_environment

PASSWORD = "keystore-pw"


def mqgate(*args, timeout=60):
    """Run ``python -m mqgate.admin.cli ARGS`` with stdin not a tty; return the result."""
    return subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", *args], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=timeout)


def etc_dir(varhome, instance="mqgate"):
    """VARHOME/instances/NAME/etc (S0.5)."""
    return varhome / "instances" / instance / "etc"


def key_path(varhome, instance="mqgate"):
    """Where keytool puts the private key by default (S1.8)."""
    return etc_dir(varhome, instance) / "keystore" / "key.pem"


def cert_path(varhome, instance="mqgate"):
    """Where keytool puts the certificate by default (S1.8)."""
    return etc_dir(varhome, instance) / "keystore" / "cert.pem"


def dns_names(path):
    """The DNS subjectAltNames of the certificate at C{path}."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return names.get_values_for_type(x509.DNSName)


@pytest.fixture
def varhome(tmp_path):
    """An empty VARHOME for one test."""
    return tmp_path / "var"


def test_keytool_help_explains_the_command_and_its_options():
    """S1.8: `keytool --help` says what it makes, for which services, and where the
    password comes from, and lists its options."""
    result = mqgate("keytool", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for words in ("key pair", "self-signed certificate", "ssljms", "ssladmin",
                  "password file", "--nopassword", "--hostname", "--force", "--varhome",
                  "--instance"):
        assert words in text, text


def test_top_level_help_lists_keytool():
    """S1.8: `mqgate --help` lists the keytool command."""
    result = mqgate("--help")
    assert result.returncode == 0, result.stderr
    assert "keytool" in result.stdout


def test_nopassword_without_a_terminal_creates_an_unencrypted_key_pair(varhome):
    """S1.8: with --nopassword and stdin not a tty, keytool creates an unencrypted
    key.pem (0600) and a cert.pem for localhost, and says where they are."""
    result = mqgate("keytool", "--varhome", str(varhome), "--nopassword")
    assert result.returncode == 0, result.stderr
    key = key_path(varhome)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert dns_names(cert_path(varhome)) == ["localhost"]
    assert str(key) in result.stdout and str(cert_path(varhome)) in result.stdout


def test_hostname_and_instance_options_are_honoured(varhome):
    """S1.8/S0.5: --hostname names the certificate's host and --instance picks the
    instance directory the keystore goes into."""
    result = mqgate("keytool", "--varhome", str(varhome), "--instance", "second",
                    "--hostname", "broker.example", "--nopassword")
    assert result.returncode == 0, result.stderr
    assert dns_names(cert_path(varhome, "second")) == ["broker.example"]
    assert not key_path(varhome).exists()


def test_second_run_without_force_fails_and_keeps_the_first_key_pair(varhome):
    """S1.8: keytool refuses to replace an existing key pair without --force, says
    which file is in the way, and leaves it unchanged; --force replaces it."""
    assert mqgate("keytool", "--varhome", str(varhome), "--nopassword").returncode == 0
    first = key_path(varhome).read_bytes()
    again = mqgate("keytool", "--varhome", str(varhome), "--nopassword")
    assert again.returncode != 0
    assert "already exists" in again.stderr, again.stderr
    assert str(key_path(varhome)) in again.stderr, again.stderr
    assert "Traceback" not in again.stderr, again.stderr
    assert key_path(varhome).read_bytes() == first
    forced = mqgate("keytool", "--varhome", str(varhome), "--nopassword", "--force")
    assert forced.returncode == 0, forced.stderr
    assert key_path(varhome).read_bytes() != first


def test_no_password_source_and_no_terminal_fails_naming_the_key(varhome):
    """S1.8/S4.6: without --nopassword, a password file or a terminal, keytool fails
    with a message naming mqgate.keystore.password, and writes no key."""
    result = mqgate("keytool", "--varhome", str(varhome))
    assert result.returncode != 0
    assert "mqgate.keystore.password" in result.stderr, result.stderr
    assert "--nopassword" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not key_path(varhome).exists()


def test_password_from_the_password_file_encrypts_the_key(varhome):
    """S1.8/S4.6: with mqgate.passfile.enabled=true keytool encrypts the key with the
    password file's mqgate.keystore.password, without asking."""
    etc_dir(varhome).mkdir(parents=True)
    (etc_dir(varhome) / "passfile").write_text(f"mqgate.keystore.password={PASSWORD}\n")
    (etc_dir(varhome) / "passfile").chmod(0o600)   # others may not read it (S4.6)
    result = mqgate("keytool", "--varhome", str(varhome), "-D",
                    "mqgate.passfile.enabled=true")
    assert result.returncode == 0, result.stderr
    pem = key_path(varhome).read_bytes()
    assert b"ENCRYPTED" in pem
    with pytest.raises((TypeError, ValueError)):
        serialization.load_pem_private_key(pem, password=None)
    serialization.load_pem_private_key(pem, password=PASSWORD.encode())
    assert PASSWORD not in result.stdout + result.stderr


def test_enabled_password_file_that_is_missing_fails_naming_the_setting(varhome):
    """S4.6: mqgate.passfile.enabled=true with no password file fails with a message
    naming the setting and the file, and writes no key."""
    result = mqgate("keytool", "--varhome", str(varhome), "-D",
                    "mqgate.passfile.enabled=true")
    assert result.returncode != 0
    assert "mqgate.passfile.enabled" in result.stderr, result.stderr
    assert str(etc_dir(varhome) / "passfile") in result.stderr, result.stderr
    assert not key_path(varhome).exists()
