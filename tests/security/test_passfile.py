"""Tests for the password file's checks (S4.6)."""

import os

import pytest

from mqgate.config import Settings
from mqgate.errors import ConfigError
from mqgate.security.passfile import check_passfile, find_password


def settings_with_passfile(tmp_path, text, mode):
    path = tmp_path / "passfile"
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    return Settings.from_properties([], {
        "mqgate.passfile.enabled": "true", "mqgate.passfile.dirpath": str(tmp_path)},
        varhome=str(tmp_path)), path


@pytest.mark.parametrize("mode, who", [
    (0o644, "group can read it; others can read it"),
    (0o640, "group can read it"),
    (0o620, "group can write it"),
    (0o604, "others can read it"),
    (0o666, "group can read and write it; others can read and write it"),
])
def test_shared_password_file_is_refused_with_the_fix(tmp_path, mode, who):
    """S4.6: a password file group or others may read or write is refused with a
    ConfigError naming the file, its mode, who can use it and `chmod 600 FILE`."""
    settings, path = settings_with_passfile(tmp_path, "mqgate.keystore.password=x\n", mode)
    with pytest.raises(ConfigError) as caught:
        find_password(settings, "mqgate.keystore.password")
    text = str(caught.value)
    assert str(path) in text and f"mode {mode:04o}" in text and who in text
    assert f"chmod 600 {path}" in text
    assert "=x" not in text


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_password_file_is_read(tmp_path, mode):
    """S4.6: a password file only its owner can use is read as before (an execute bit
    changes nothing)."""
    settings, _ = settings_with_passfile(tmp_path, "imq.keystore.password=s3\n", mode)
    assert find_password(settings, "mqgate.keystore.password") == "s3"


def test_check_passes_a_missing_file(tmp_path):
    """S4.6: the check alone lets a missing file through; reading it names it."""
    check_passfile(tmp_path / "none")
    settings = Settings.from_properties([], {
        "mqgate.passfile.enabled": "true", "mqgate.passfile.dirpath": str(tmp_path)},
        varhome=str(tmp_path))
    with pytest.raises(ConfigError, match="a readable password file"):
        find_password(settings, "mqgate.keystore.password")
