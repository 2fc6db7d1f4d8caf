"""Tests for the schema and Settings: defaults, aliases, overrides, validation."""

import os
from pathlib import Path

import pytest

from mqgate.config import (
    KEYS,
    REGENERATE,
    SCHEMA,
    SHIPPED_OVERRIDES,
    Settings,
    parse_properties,
    read_settings,
    render_properties,
)
from mqgate.config.schema import Bool, Choice, Int, Seconds, Size, Text, TextList
from mqgate.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[2] / "etc" / "mqgate.properties"


def settings_from(text, overrides=None, **keywords):
    """Build Settings from properties text, naming the source 'test.properties'."""
    props = parse_properties(text, source="test.properties")
    return Settings.from_properties(props, overrides, source="test.properties",
                                    **keywords)


def test_defaults():
    """With no file and no overrides every key has its documented default."""
    settings = Settings.from_properties([])
    assert settings["mqgate.instancename"] == "mqgate"
    assert settings["mqgate.hostname"] == "127.0.0.1"
    assert settings["mqgate.service.activelist"] == ("jms", "admin")
    assert settings["mqgate.jms.tcp.port"] == 0
    assert settings["mqgate.portmapper.port"] == 7676
    assert settings["mqgate.portmapper.backlog"] == 50
    assert settings["mqgate.autocreate.queue"] is True
    assert settings["mqgate.destination.default_type"] == "queue"
    assert settings["mqgate.message.max_size"] == 70 * 1024 * 1024
    assert settings["mqgate.amqp.max_frame_size"] == 1048576
    assert settings["mqgate.amqp.idle_timeout"] == 60
    assert settings["mqgate.amqp.producer_credit"] == 1000
    assert settings["mqgate.amqp.channel_max"] == 255
    assert settings["mqgate.authentication.client.response.timeout"] == 20
    assert settings["mqgate.destination.default_type"] == "queue"
    assert settings["mqgate.authentication.basic.user_repository"] == "file"
    assert settings.warnings == ()
    assert settings.config_path is None


@pytest.mark.parametrize("row", KEYS, ids=lambda row: row.name)
def test_every_default_is_valid_and_documented(row):
    """Each schema row's default parses with its own type and the row has a doc."""
    row.type.parse(row.default)
    assert row.doc and row.name.startswith("mqgate.")


def test_defaults_and_instance_paths():
    """S0.5: instance data lives under VARHOME/instances/NAME; varhome is absolute."""
    settings = Settings.from_properties([], varhome="some/var")
    assert settings.instance == "mqgate"
    assert settings.varhome == os.path.abspath("some/var")
    assert settings.instance_dir == os.path.join(
        settings.varhome, "instances", "mqgate")
    assert Settings.from_properties([]).varhome == os.path.abspath("./var")


def test_user_repository_path_defaults_to_instance_etc():
    """The password file defaults to VARHOME/instances/NAME/etc/passwd."""
    settings = Settings.from_properties([], instance="b1", varhome="/srv/mq")
    assert settings.user_repository_path == "/srv/mq/instances/b1/etc/passwd"
    moved = settings.with_overrides({"mqgate.user_repository.file.dirpath": "/etc/mq"})
    assert moved.user_repository_path == "/etc/mq/passwd"


def test_file_values_are_typed():
    """File values are parsed to their types; surrounding blanks are ignored."""
    settings = settings_from(
        "mqgate.jms.tcp.port = 5672  \n"
        "mqgate.autocreate.topic=FALSE\n"
        "mqgate.service.activelist = jms , ssljms,,jms\n"
        "mqgate.destination.default_type=TOPIC\n")
    assert settings["mqgate.jms.tcp.port"] == 5672
    assert settings["mqgate.autocreate.topic"] is False
    assert settings["mqgate.service.activelist"] == ("jms", "ssljms")
    assert settings["mqgate.destination.default_type"] == "topic"
    assert settings.config_path == "test.properties"


def test_imq_alias():
    """SPEC intro: a key spelled imq.… is the same key as mqgate.…."""
    settings = settings_from("imq.portmapper.port=7777\nimq.autocreate.queue=false\n")
    assert settings["mqgate.portmapper.port"] == 7777
    assert settings["mqgate.autocreate.queue"] is False
    assert settings.warnings == ()


def test_later_entry_wins_across_spellings():
    """Of two entries for one key, in either spelling, the later one wins."""
    settings = settings_from("mqgate.jms.tcp.port=1\nimq.jms.tcp.port=2\n")
    assert settings["mqgate.jms.tcp.port"] == 2
    settings = settings_from("imq.jms.tcp.port=2\nmqgate.jms.tcp.port=1\n")
    assert settings["mqgate.jms.tcp.port"] == 1


def test_command_line_override_beats_file():
    """SPEC intro: -D key=value overrides the file, in either spelling."""
    settings = settings_from("mqgate.jms.tcp.port=5672\n", {"imq.jms.tcp.port": "6000"})
    assert settings["mqgate.jms.tcp.port"] == 6000
    assert settings.source_of("mqgate.jms.tcp.port") == "command line"


def test_source_of():
    """source_of tells a default from a file entry (path:line) and a -D override."""
    settings = settings_from("\nmqgate.hostname=0.0.0.0\n",
                             {"mqgate.destination.default_type": "topic"})
    assert settings.source_of("mqgate.hostname") == "test.properties:2"
    assert settings.source_of("mqgate.destination.default_type") == "command line"
    assert settings.source_of("mqgate.authentication.basic.user_repository") == "default"


def test_instance_argument_beats_file():
    """S0.5: --instance beats mqgate.instancename from the file."""
    assert settings_from("mqgate.instancename=fromfile\n").instance == "fromfile"
    settings = settings_from("mqgate.instancename=fromfile\n", instance="cli")
    assert settings.instance == "cli"
    assert settings["mqgate.instancename"] == "cli"


def test_unknown_key_warns_with_closest_key():
    """SPEC intro: an unknown key is a warning naming the closest key, not a failure."""
    settings = settings_from("mqgate.jms.tcp.prot=5672\n")
    assert settings.warnings == (
        "unknown configuration key 'mqgate.jms.tcp.prot' "
        "(did you mean 'mqgate.jms.tcp.port'?)",)
    assert settings["mqgate.jms.tcp.port"] == 0


def test_unknown_key_without_close_match():
    """An unknown key that resembles nothing is reported without a suggestion."""
    settings = Settings.from_properties([], {"zzz": "1"})
    assert settings.warnings == ("unknown configuration key 'zzz'",)


def test_unknown_alias_key_warns_as_written():
    """An unknown imq. key is named as written, with the closest canonical key."""
    settings = settings_from("imq.autocreate.queu=true\n")
    assert settings.warnings == (
        "unknown configuration key 'imq.autocreate.queu' "
        "(did you mean 'mqgate.autocreate.queue'?)",)


def test_unknown_key_reported_once():
    """A repeated unknown key yields a single warning."""
    settings = settings_from("mqgate.nope=1\nmqgate.nope=2\n")
    assert len(settings.warnings) == 1


@pytest.mark.parametrize("key, value, allowed", [
    ("mqgate.jms.tcp.port", "abc", "an integer from 0 to 65535"),
    ("mqgate.jms.tcp.port", "65536", "an integer from 0 to 65535"),
    ("mqgate.jms.tcp.port", "1_000", "an integer from 0 to 65535"),
    ("mqgate.amqp.max_frame_size", "511", "an integer from 512 to 4294967295"),
    ("mqgate.amqp.idle_timeout", "-1", "a number of seconds from 0 to 86400"),
    ("mqgate.authentication.client.response.timeout", "1.5",
     "a number of seconds of at least 0"),
    ("mqgate.autocreate.queue", "yes", "true or false"),
    ("mqgate.destination.default_type", "fanout", "one of: queue, topic"),
    ("mqgate.message.max_size", "70x",
     "a size in bytes: a whole number, optionally followed by b, k, m or g (e.g. 70m)"),
    ("mqgate.service.activelist", "jms,mqtt",
     "a comma-separated list of: jms, ssljms, httpjms, httpsjms, admin, ssladmin, stomp, "
     "httpadmin, httpsadmin"),
    ("mqgate.instancename", "my broker", "1 to 32 letters, digits or underscores"),
])
def test_bad_value_from_file_names_key_value_allowed_and_line(key, value, allowed):
    """design rule 7: a bad value names key, value, what is allowed and where."""
    with pytest.raises(ConfigError) as info:
        settings_from(f"# header\n{key}={value}\n")
    error = info.value
    assert (error.key, error.value, error.allowed) == (key, value, allowed)
    assert str(error) == (
        f"bad value for {key} (test.properties:2): {value!r}; allowed: {allowed}")


def test_bad_value_names_key_as_written():
    """The error names the key in the operator's spelling (imq.…), not the canonical."""
    with pytest.raises(ConfigError) as info:
        settings_from("imq.portmapper.port=http\n")
    assert info.value.key == "imq.portmapper.port"


def test_bad_command_line_value_has_no_line():
    """A bad -D value is reported without a file position."""
    with pytest.raises(ConfigError) as info:
        Settings.from_properties([], {"mqgate.jms.tcp.port": "abc"})
    assert str(info.value) == (
        "bad value for mqgate.jms.tcp.port: 'abc'; allowed: an integer from 0 to 65535")


def test_bad_file_value_overridden_on_command_line_is_accepted():
    """Only the winning value is checked: -D can repair a bad file entry."""
    settings = settings_from("mqgate.jms.tcp.port=abc\n", {"mqgate.jms.tcp.port": "1"})
    assert settings["mqgate.jms.tcp.port"] == 1


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("100", 100), ("100b", 100), ("100B", 100), ("2k", 2048), ("2K", 2048),
    ("70m", 70 * 1024 ** 2), ("1G", 1024 ** 3),
])
def test_size_suffixes(text, expected):
    """Sizes are bytes: a number or a b/k/m/g suffix in any case (binary multiples)."""
    settings = Settings.from_properties([], {"mqgate.message.max_size": text})
    assert settings["mqgate.message.max_size"] == expected


@pytest.mark.parametrize("value_type, text", [
    (Size(), "-1"), (Size(), "m"), (Size(), "1.5m"), (Size(), "1 m"), (Size(), "1t"),
    (Int(0, 10), "+"), (Int(0, 10), ""), (Int(0, 10), "11"),
    (Bool(), ""), (Bool(), "1"), (Choice(("a",)), "b"), (Text(), None),
])
def test_type_rejects_malformed_text(value_type, text):
    """Each type rejects text outside its form with ValueError (Text takes anything)."""
    if text is None:
        assert value_type.parse("anything at all") == "anything at all"
        return
    with pytest.raises(ValueError):
        value_type.parse(text)


@pytest.mark.parametrize("value_type, value", [
    (Bool(), True), (Bool(), False), (Int(0, 10), 7), (Seconds(0, 60), 30),
    (Size(), 0), (Size(), 3 * 1024 ** 2), (Size(), 1500), (Choice(("x", "y")), "y"),
    (Text(), "h"), (TextList(), ("a", "b")), (TextList(), ()),
])
def test_type_format_round_trips(value_type, value):
    """format() writes text that parse() reads back to the same value."""
    assert value_type.parse(value_type.format(value)) == value


def test_settings_are_immutable():
    """Settings cannot be changed after they are built."""
    settings = Settings.from_properties([])
    with pytest.raises(AttributeError):
        settings.instance = "other"
    with pytest.raises(TypeError):
        settings._values["mqgate.jms.tcp.port"] = 1


def test_unknown_key_lookup_raises_key_error():
    """Reading a key outside the schema (or its imq. spelling) is a KeyError."""
    settings = Settings.from_properties([])
    with pytest.raises(KeyError, match="mqgate.jms.tcp.port"):
        settings["mqgate.jms.tcp.prot"]
    with pytest.raises(KeyError):
        settings["imq.jms.tcp.port"]


def test_with_overrides_returns_new_settings():
    """with_overrides takes text or typed values and leaves the original unchanged."""
    settings = Settings.from_properties([], instance="one", varhome="/v")
    changed = settings.with_overrides({
        "mqgate.jms.tcp.port": 0, "imq.autocreate.queue": False,
        "mqgate.service.activelist": ("jms",), "mqgate.destination.default_type": "Topic",
        "mqgate.instancename": "two"})
    assert changed["mqgate.autocreate.queue"] is False
    assert changed["mqgate.service.activelist"] == ("jms",)
    assert changed["mqgate.destination.default_type"] == "topic"
    assert changed.instance == "two" and changed.varhome == "/v"
    assert settings["mqgate.autocreate.queue"] is True and settings.instance == "one"


def test_with_overrides_validates():
    """with_overrides refuses unknown keys (KeyError) and bad values (ConfigError)."""
    settings = Settings.from_properties([])
    with pytest.raises(KeyError):
        settings.with_overrides({"mqgate.nope": "1"})
    with pytest.raises(ConfigError):
        settings.with_overrides({"mqgate.jms.tcp.port": 70000})


def test_service_address_falls_back_to_hostname():
    """S1.5: a service binds to its own hostname key, else mqgate.hostname."""
    settings = Settings.from_properties([], {
        "mqgate.hostname": "0.0.0.0", "mqgate.jms.tcp.port": "5672",
        "mqgate.ssljms.tls.hostname": "10.0.0.1", "mqgate.ssljms.tls.port": "5671"})
    assert settings.service_address("jms") == ("0.0.0.0", 5672)
    assert settings.service_address("ssljms") == ("10.0.0.1", 5671)
    assert settings.portmapper_address() == ("0.0.0.0", 7676)
    assert settings.service_address("httpjms") == ("0.0.0.0", 0)
    with pytest.raises(KeyError):
        settings.service_address("nosuch")


def test_read_settings(tmp_path):
    """read_settings reads a file and names it (path:line) in errors."""
    path = tmp_path / "broker.properties"
    path.write_text("imq.jms.tcp.port=1234\n", encoding="utf-8")
    settings = read_settings(path, {"mqgate.admin.tcp.port": "2345"}, instance="x")
    assert settings["mqgate.jms.tcp.port"] == 1234
    assert settings["mqgate.admin.tcp.port"] == 2345
    assert settings.config_path == str(path) and settings.instance == "x"
    path.write_text("\nmqgate.jms.tcp.port=-1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{path}:2"):
        read_settings(path)


def test_read_settings_latin1_file(tmp_path):
    """A file that is not UTF-8 is read as ISO-8859-1, like Java Properties.load."""
    path = tmp_path / "broker.properties"
    line = "mqgate.user_repository.file.filename=mot_de_passe_é\n"
    path.write_bytes(line.encode("latin-1"))
    settings = read_settings(path)
    assert settings["mqgate.user_repository.file.filename"] == "mot_de_passe_é"


def test_read_settings_missing_file(tmp_path):
    """A missing configuration file is a ConfigError naming the path."""
    path = tmp_path / "absent.properties"
    with pytest.raises(ConfigError, match="absent.properties"):
        read_settings(path)


def test_rendered_file_documents_every_key():
    """The rendering lists every key with its doc, commented out unless overridden."""
    text = render_properties({"mqgate.jms.tcp.port": "5672"})
    for row in KEYS:
        assert row.name + "=" in text
    assert "\nmqgate.jms.tcp.port=5672\n" in text
    assert "\n#mqgate.admin.tcp.port=0\n" in text
    assert parse_properties(text) == [("mqgate.jms.tcp.port", "5672", text[
        :text.index("\nmqgate.jms.tcp.port")].count("\n") + 2)]


def test_render_rejects_unknown_override():
    """Rendering with an override for a key outside the schema is an error."""
    with pytest.raises(KeyError):
        render_properties({"mqgate.nope": "1"})


def test_shipped_file_parses_and_lists_every_key():
    """S1.4: the shipped file parses, names every key and fixes the AMQP port 5672."""
    text = SHIPPED.read_text(encoding="utf-8")
    for name in SCHEMA:
        assert name in text
    settings = read_settings(SHIPPED)
    assert settings.warnings == ()
    assert settings["mqgate.jms.tcp.port"] == 5672
    assert settings["mqgate.hostname"] == "127.0.0.1"
    assert settings["mqgate.service.activelist"] == ("jms", "admin", "stomp", "httpadmin")
    assert settings["mqgate.httpadmin.http.port"] == 8161
    assert settings["mqgate.stomp.tcp.port"] == 61613


def test_shipped_file_is_the_current_rendering():
    """The shipped file is exactly the schema's rendering with the shipped overrides."""
    text = SHIPPED.read_text(encoding="utf-8")
    expected = render_properties(SHIPPED_OVERRIDES)
    assert text == expected, f"regenerate with: {REGENERATE}"


def test_key_families_are_kept_for_their_owner():
    """S9.7: mqgate.client_profile.NAME.* keys are the operator's own names: kept as
    written (either spelling), not warned about, handed to the profile parser."""
    settings = Settings.from_properties(
        [("imq.client_profile.gold.d1.max_depth", "50", 1)],
        {"mqgate.client_profile.assign.bob": "gold"})
    assert settings.warnings == ()
    assert settings.family("mqgate.client_profile.") == {
        "mqgate.client_profile.gold.d1.max_depth": "50",
        "mqgate.client_profile.assign.bob": "gold"}
    with pytest.raises(KeyError):
        settings.family("mqgate.jms.")
