"""Tests for the twistd command line (S0.4) and the plugin; no reactor is started."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest
from twisted.application.service import IServiceMaker
from twisted.logger import Logger, formatEvent
from twisted.plugin import IPlugin
from twisted.python.usage import UsageError

from mqgate import tap
from mqgate.config import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(tmp_path):
    """Return the path of a small properties file (so tests do not depend on etc/)."""
    path = tmp_path / "test.properties"
    path.write_text("mqgate.jms.tcp.port=5672\nmqgate.instancename=fromfile\n",
                    encoding="utf-8")
    return str(path)


def parse(*args):
    """Parse command-line arguments and return the Options."""
    options = tap.Options()
    options.parseOptions(list(args))
    return options


def test_settings_built_from_config_file(config, tmp_path):
    """postOptions reads the file and stores the Settings in options['settings']."""
    options = parse("-c", config, "--varhome", str(tmp_path / "var"))
    settings = options["settings"]
    assert isinstance(settings, Settings)
    assert settings.config_path == config
    assert settings["mqgate.jms.tcp.port"] == 5672
    assert settings.instance == "fromfile"
    assert settings.instance_dir == str(tmp_path / "var" / "instances" / "fromfile")


def test_without_config_the_broker_runs_on_the_shipped_configuration():
    """S0.3: without -c (or with an empty one) the settings are the shipped file's, from
    a checkout and from an installed package alike: 5672, 61613, 7676, the HTTP admin
    API on 8161, loopback."""
    for args in ((), ("--config", "")):
        settings = parse(*args)["settings"]
        assert settings.config_path is None
        assert settings["mqgate.jms.tcp.port"] == 5672
        assert settings["mqgate.stomp.tcp.port"] == 61613
        assert settings["mqgate.portmapper.port"] == 7676
        assert settings["mqgate.hostname"] == "127.0.0.1"
        assert settings["mqgate.httpadmin.http.port"] == 8161
        assert settings["mqgate.service.activelist"] == ("jms", "admin", "stomp", "httpadmin")
        assert settings.instance == "mqgate"


def test_shipped_file_and_built_in_configuration_agree():
    """The checkout's etc/mqgate.properties gives the same settings as no --config."""
    shipped = parse("--config", str(ROOT / "etc" / "mqgate.properties"))["settings"]
    assert shipped.as_dict() == parse()["settings"].as_dict()


def test_define_overrides_file(config):
    """S0.4: -D key=value beats the file, in either spelling, and may repeat."""
    settings = parse("-c", config, "-D", "imq.jms.tcp.port=6000",
                     "-D", "mqgate.autocreate.queue=false")["settings"]
    assert settings["mqgate.jms.tcp.port"] == 6000
    assert settings["mqgate.autocreate.queue"] is False


def test_define_long_spelling(config):
    """--define is the long spelling of -D (so that it is listed in --help)."""
    assert parse("-c", config, "--define", "mqgate.destination.default_type=topic")[
        "settings"]["mqgate.destination.default_type"] == "topic"


def test_define_value_may_contain_equals(config):
    """Only the first '=' of a -D argument separates key from value."""
    options = parse("-c", config, "-D", "mqgate.user_repository.file.filename=a=b")
    assert options["settings"]["mqgate.user_repository.file.filename"] == "a=b"


def test_last_override_wins_across_spellings(config):
    """Of several overrides of one key, the last on the command line wins."""
    options = parse("-c", config, "-D", "imq.jms.tcp.port=1",
                    "-D", "mqgate.jms.tcp.port=2", "-D", "imq.jms.tcp.port=3")
    assert options["settings"]["mqgate.jms.tcp.port"] == 3


@pytest.mark.parametrize("argument", ["mqgate.jms.tcp.port", "=5672"])
def test_define_without_key_value_is_usage_error(config, argument):
    """A -D argument that is not key=value is a UsageError naming it."""
    with pytest.raises(UsageError, match=repr(argument)):
        parse("-c", config, "-D", argument)


def test_bad_define_value_is_usage_error(config):
    """A bad -D value stops twistd with the ConfigError's message."""
    with pytest.raises(UsageError) as info:
        parse("-c", config, "-D", "mqgate.jms.tcp.port=abc")
    assert str(info.value) == (
        "bad value for mqgate.jms.tcp.port: 'abc'; allowed: an integer from 0 to 65535")


def test_bad_file_value_is_usage_error(tmp_path):
    """A bad value in the file stops twistd naming the key, the file and the line."""
    path = tmp_path / "bad.properties"
    path.write_text("# x\nmqgate.destination.default_type=fanout\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"{path}:2.*one of: queue, topic"):
        parse("-c", str(path))


def test_missing_config_file_is_usage_error(tmp_path):
    """A --config that does not exist is a UsageError naming the path."""
    path = str(tmp_path / "absent.properties")
    with pytest.raises(UsageError, match="absent.properties"):
        parse("-c", path)


def test_unknown_key_is_a_warning_not_an_error(config):
    """An unknown -D key ends up in settings.warnings with the closest known key."""
    settings = parse("-c", config, "-D", "mqgate.jms.tcp.prot=1")["settings"]
    assert settings.warnings == (
        "unknown configuration key 'mqgate.jms.tcp.prot' "
        "(did you mean 'mqgate.jms.tcp.port'?)",)


@pytest.mark.parametrize("service, key", [
    ("jms", "mqgate.jms.tcp.port"), ("admin", "mqgate.admin.tcp.port"),
    ("ssljms", "mqgate.ssljms.tls.port"), ("ssladmin", "mqgate.ssladmin.tls.port"),
])
def test_port_override(config, service, key):
    """S0.4: --port SERVICE=PORT sets the service's tcp (or tls for ssl*) port key."""
    settings = parse("-c", config, "--port", f"{service}=4000")["settings"]
    assert settings[key] == 4000


def test_port_and_define_last_wins(config):
    """--port and -D for the same key: the later on the command line wins."""
    settings = parse("-c", config, "--port", "jms=1", "-D", "mqgate.jms.tcp.port=2",
                     "--port", "jms=3")["settings"]
    assert settings["mqgate.jms.tcp.port"] == 3


@pytest.mark.parametrize("argument, named", [
    ("mqtt=1883", "'mqtt'"), ("wsjms=80", "'wsjms'"), ("5672", "'5672'"),
])
def test_bad_port_service_is_usage_error(config, argument, named):
    """--port with an unknown service (or no '=') is a UsageError naming it."""
    with pytest.raises(UsageError, match=named):
        parse("-c", config, "--port", argument)


def test_bad_port_number_is_usage_error(config):
    """A bad port number given with --port is reported against its key."""
    with pytest.raises(UsageError, match="mqgate.jms.tcp.port: '99999'"):
        parse("-c", config, "--port", "jms=99999")


def test_instance_option_beats_file(config):
    """S0.5: --instance overrides mqgate.instancename from the file."""
    assert parse("-c", config, "-n", "broker_2")["settings"].instance == "broker_2"


@pytest.mark.parametrize("name", ["my broker", "../etc", "", "x" * 33, "é"])
def test_bad_instance_name_is_usage_error(config, name):
    """An instance name that is not 1-32 letters, digits or underscores is refused."""
    with pytest.raises(UsageError, match="bad instance name " + repr(name).replace(
            ".", r"\.")):
        parse("-c", config, "--instance", name)


def test_help_lists_every_option():
    """S0.4: --help lists config file, instance, var home, -D and port overrides."""
    text = str(tap.Options())
    for option in ("--config", "-c", "--instance", "-n", "--varhome", "-D", "--port"):
        assert option in text
    assert "VARHOME/instances/NAME" in text


def test_make_service_logs_warnings_and_builds_broker(config, monkeypatch):
    """makeService logs each settings warning and returns build_broker's service."""
    calls = []
    fake = types.ModuleType("mqgate.service")
    svc = types.SimpleNamespace()
    fake.build_broker = lambda settings, reactor: calls.append(
        (settings, reactor)) or svc
    monkeypatch.setitem(sys.modules, "mqgate.service", fake)
    events = []
    monkeypatch.setattr(tap, "_log", Logger(observer=events.append))
    options = parse("-c", config, "-D", "mqgate.nope=1")

    assert tap.makeService(options) is svc
    [(settings, reactor)] = calls
    assert settings is options["settings"]
    from twisted.internet import reactor as global_reactor
    assert reactor is global_reactor
    assert [formatEvent(event) for event in events] == [
        "unknown configuration key 'mqgate.nope'"]
    assert events[0]["log_level"].name == "warn"


def load_plugin_module():
    """Load twisted/plugins/mqgate_plugin.py from the checkout by path."""
    path = ROOT / "twisted" / "plugins" / "mqgate_plugin.py"
    spec = importlib.util.spec_from_file_location("mqgate_plugin_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plugin_is_a_service_maker_for_mqgate_tap():
    """S0.4: the plugin is one ServiceMaker named mqgate that points at mqgate.tap."""
    module = load_plugin_module()
    makers = [value for value in vars(module).values()
              if IServiceMaker.providedBy(value)]
    [maker] = makers
    assert IPlugin.providedBy(maker)
    assert maker.tapname == "mqgate"
    assert maker.options is tap.Options
    assert maker.makeService is tap.makeService


def test_plugin_directory_does_not_shadow_twisted():
    """The checkout's twisted/ and twisted/plugins/ hold no __init__.py: one would shadow
    the real Twisted, and twistd would find no mqgate plugin."""
    assert not (ROOT / "twisted" / "__init__.py").exists()
    assert not (ROOT / "twisted" / "plugins" / "__init__.py").exists()
