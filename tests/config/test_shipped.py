"""One source of defaults (S0.3): the built-in configuration, the shipped file and what
`mqgate init-config` writes are the same text."""

import os

from mqgate.admin.cli import main
from mqgate.config import (
    SHIPPED_SOURCE, read_settings, shipped_properties, shipped_settings)
from tests.config.test_tap import ROOT


def test_init_config_writes_the_shipped_file(tmp_path, capsys):
    """`mqgate init-config PATH` writes etc/mqgate.properties's text, and says how to
    start the broker with it."""
    path = tmp_path / "mqgate.properties"
    assert main(["init-config", str(path)]) == 0
    assert path.read_text() == (ROOT / "etc" / "mqgate.properties").read_text()
    assert f"twistd -n mqgate --config {path}" in capsys.readouterr().out
    assert read_settings(path).as_dict() == shipped_settings().as_dict()


def test_init_config_defaults_to_the_current_directory(tmp_path, monkeypatch):
    """Without PATH the file is ./mqgate.properties."""
    monkeypatch.chdir(tmp_path)
    assert main(["init-config"]) == 0
    assert (tmp_path / "mqgate.properties").read_text() == shipped_properties()


def test_init_config_refuses_to_overwrite_without_force(tmp_path, capsys):
    """An existing file is kept (exit 2, naming --force); --force replaces it."""
    path = tmp_path / "mine.properties"
    path.write_text("mqgate.hostname=0.0.0.0\n")
    assert main(["init-config", str(path)]) == 2
    assert "exists; use --force" in capsys.readouterr().err
    assert path.read_text() == "mqgate.hostname=0.0.0.0\n"
    assert main(["init-config", "--force", str(path)]) == 0
    assert path.read_text() == shipped_properties()


def test_init_config_to_stdout(capsys):
    """PATH '-' prints the configuration."""
    assert main(["init-config", "-"]) == 0
    assert capsys.readouterr().out == shipped_properties()


def test_shipped_settings_name_their_source_and_take_overrides(tmp_path):
    """A built-in value says where it came from; -D beats it."""
    settings = shipped_settings({"mqgate.jms.tcp.port": "6000"}, varhome=str(tmp_path))
    assert settings["mqgate.jms.tcp.port"] == 6000
    assert settings.source_of("mqgate.stomp.tcp.port").startswith(SHIPPED_SOURCE + ":")
    assert settings.varhome == os.path.abspath(tmp_path)

