"""
Typed, validated, immutable settings built from properties and ``-D`` overrides.

Theory of operation
-------------------
``Settings.from_properties`` is pure: it takes the ``(key, value, line)`` tuples
of ``parse_properties`` and the ``-D`` overrides, and

1. maps every ``imq.`` key to its ``mqgate.`` spelling (SPEC introduction);
2. lets later entries win: the file in order, then the overrides (``-D`` beats the
   file), then the ``instance`` argument (``--instance`` beats ``mqgate.instancename``);
3. collects unknown keys as warnings naming the closest known key; they never fail;
4. parses every schema key with its type, the default standing in for a missing key; a
   bad value raises ``ConfigError`` naming the key as the operator wrote it, the value,
   what is allowed and, for a file entry, ``path:line``.

The result is frozen and passed down explicitly (design rule 5).
``read_settings`` is the thin function that reads the file.  Surrounding white space of
a value is ignored for every type (a trailing blank after a port number is an easy
mistake to make and a hard one to see).
"""

import difflib
import os
import types

import attrs

from mqgate.config.properties import parse_properties
from mqgate.config.schema import (
    CANONICAL_PREFIX, FAMILIES, SCHEMA, SERVICES, SHIPPED_OVERRIDES, canonical_key,
    render_properties)
from mqgate.errors import ConfigError

__all__ = ["Settings", "read_settings", "shipped_settings", "shipped_properties",
           "DEFAULT_VARHOME", "SHIPPED_SOURCE"]

DEFAULT_VARHOME = "./var"

#: The name the built-in configuration goes by in messages ("<built-in ...>:LINE").
SHIPPED_SOURCE = "<built-in mqgate.properties>"

# Where a value came from, for messages (the file's entries use "path:line").
SOURCE_DEFAULT = "default"
SOURCE_COMMAND_LINE = "command line"


@attrs.frozen
class _Raw:
    """One value as the operator wrote it, before parsing."""

    text: str
    written_key: str
    where: str | None   # "path:line" / "line N" for a file entry, None otherwise
    origin: str         # SOURCE_DEFAULT, SOURCE_COMMAND_LINE or the same as where


@attrs.frozen
class Settings:
    """The broker's configuration: one typed value per schema key.

    Read values with ``settings["mqgate.jms.tcp.port"]`` (canonical key).

    @ivar instance: the instance name (S0.5).
    @ivar varhome: the var home, an absolute path.
    @ivar config_path: the properties file read, or None.
    @ivar warnings: texts about unknown keys, to be logged at start-up.
    """

    _values: types.MappingProxyType = attrs.field(repr=False)
    _raw: types.MappingProxyType = attrs.field(repr=False)
    instance: str
    varhome: str
    config_path: str | None
    warnings: tuple

    @classmethod
    def from_properties(cls, props, overrides=None, *, instance=None, varhome=None,
                        source=None):
        """Build settings from parsed properties.

        Args:
            props: ``(key, value, line)`` tuples, as returned by ``parse_properties``.
            overrides: ``-D`` overrides, a mapping of key -> value text (either
                spelling).
            instance: the instance name from ``--instance``; beats the file and ``-D``.
            varhome: the var home (default ``./var``); made absolute.
            source: the file name the props came from, for messages (``path:line``).

        Raises:
            ConfigError: a value is not acceptable for its key.
        """
        raw = {}
        warnings = []
        for key, value, line in props:
            where = f"{source}:{line}" if source else f"line {line}"
            _take(raw, warnings, key, value, where, where)
        for key, value in (overrides or {}).items():
            _take(raw, warnings, key, value, None, SOURCE_COMMAND_LINE)
        if instance is not None:
            raw["mqgate.instancename"] = _Raw(
                instance, "mqgate.instancename", None, SOURCE_COMMAND_LINE)
        return cls._build(raw, varhome or DEFAULT_VARHOME, source, tuple(warnings))

    @classmethod
    def _build(cls, raw, varhome, config_path, warnings):
        """Parse every schema key (the default standing in) and freeze the result."""
        values = {}
        for name, row in SCHEMA.items():
            entry = raw.get(name)
            if entry is None:
                values[name] = row.type.parse(row.default)
                continue
            try:
                values[name] = row.type.parse(entry.text.strip())
            except ValueError:
                raise ConfigError(entry.written_key, entry.text, row.type.allowed,
                                  entry.where) from None
        return cls(
            values=types.MappingProxyType(values),
            raw=types.MappingProxyType(dict(raw)),
            instance=values["mqgate.instancename"],
            varhome=os.path.abspath(varhome),
            config_path=config_path,
            warnings=warnings,
        )

    def __getitem__(self, key):
        """Return the typed value of a canonical key; KeyError if not in the schema."""
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(_unknown_key_text(key)) from None

    def __contains__(self, key):
        """Return True if ``key`` is a canonical schema key."""
        return key in self._values

    def as_dict(self):
        """Return a new dict of every canonical key and its typed value."""
        return dict(self._values)

    def source_of(self, key):
        """Say where the value of a canonical key came from.

        Returns ``"default"``, ``"command line"`` (``-D``, ``--port``,
        ``--instance``) or the ``path:line`` of the file entry.
        """
        self[key]  # KeyError for a key outside the schema
        entry = self._raw.get(key)
        return SOURCE_DEFAULT if entry is None else entry.origin

    def with_overrides(self, overrides):
        """Return new settings with some values replaced, as if given with ``-D``.

        Args:
            overrides: mapping of key (either spelling) -> value; a value may be text
                (parsed as from the file) or already typed (bool, int, tuple ...).

        Raises:
            KeyError: a key is not in the schema (a typo here is a bug, not a warning).
            ConfigError: a value is not acceptable.
        """
        raw = dict(self._raw)
        for key, value in overrides.items():
            name = canonical_key(key)
            row = SCHEMA.get(name)
            if row is None:
                raise KeyError(_unknown_key_text(key))
            text = value if isinstance(value, str) else row.type.format(value)
            raw[name] = _Raw(text, key, None, SOURCE_COMMAND_LINE)
        return self._build(raw, self.varhome, self.config_path, self.warnings)

    @property
    def instance_dir(self):
        """``VARHOME/instances/NAME``: where this instance keeps its data (S0.5)."""
        return os.path.join(self.varhome, "instances", self.instance)

    @property
    def user_repository_path(self):
        """The password file, ``dirpath/filename``; dirpath defaults to
        ``VARHOME/instances/NAME/etc``."""
        directory = (self["mqgate.user_repository.file.dirpath"]
                     or os.path.join(self.instance_dir, "etc"))
        return os.path.join(directory, self["mqgate.user_repository.file.filename"])

    @property
    def keystore_dir(self):
        """Where the TLS key pair lives (S1.8)."""
        return (self["mqgate.keystore.file.dirpath"]
                or os.path.join(self.instance_dir, "etc", "keystore"))

    @property
    def passfile_path(self):
        """The password file (S4.6), whether or not it is enabled."""
        directory = self["mqgate.passfile.dirpath"] or os.path.join(self.instance_dir, "etc")
        return os.path.join(directory, self["mqgate.passfile.name"])

    def service_address(self, service):
        """Return ``(bind_address, port)`` of a service (S1.4, S1.5): its
        ``mqgate.SERVICE.PROTOCOL.port`` and ``.hostname`` (tcp, tls, http or https).

        Raises:
            KeyError: the service has no port key (an unknown service).
        """
        protocol = SERVICES[service][1] if service in SERVICES else "tcp"
        prefix = f"mqgate.{service}.{protocol}"
        port = self[f"{prefix}.port"]
        return self[f"{prefix}.hostname"] or self["mqgate.hostname"], port

    def family(self, prefix):
        """The keys under one of the schema's L{FAMILIES} prefixes, as written (text),
        canonical key -> value: the owner of the family parses and checks them (for
        example L{mqgate.egress.profiles.profiles_from_settings})."""
        if prefix not in FAMILIES:
            raise KeyError(f"{prefix!r} is not a family of keys")
        return {name: raw.text for name, raw in self._raw.items() if name.startswith(prefix)}

    def portmapper_address(self):
        """Return ``(bind_address, port)`` of the port mapper (S1.3)."""
        host = self["mqgate.portmapper.hostname"] or self["mqgate.hostname"]
        return host, self["mqgate.portmapper.port"]


def _take(raw, warnings, key, value, where, origin):
    """Record one entry (later entries win), or a warning if the key is unknown."""
    name = canonical_key(key)
    if name not in SCHEMA and not name.startswith(FAMILIES):
        text = _unknown_key_text(key)
        if text not in warnings:
            warnings.append(text)
        return
    raw[name] = _Raw(value, key, where, origin)


def _unknown_key_text(key):
    """Return the warning for an unknown key, naming the closest known key if any."""
    # Compare what follows "mqgate.": the shared prefix alone would make every key look
    # close to every other one ("mqgate.nope" ~ "mqgate.hostname").
    name = canonical_key(key)
    if name.startswith(CANONICAL_PREFIX):
        name = name[len(CANONICAL_PREFIX):]
    known = {known[len(CANONICAL_PREFIX):]: known for known in SCHEMA}
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
    return f"unknown configuration key {key!r}{hint}"


def read_settings(path, overrides=None, *, instance=None, varhome=None):
    """Read a properties file and build settings from it.

    The file is read as UTF-8, falling back to ISO-8859-1 (the encoding Java's
    ``Properties.load`` assumes) when it is not valid UTF-8.

    Raises:
        ConfigError: the file cannot be read (naming the path), or a value is bad.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ConfigError("configuration file", path,
                          f"a readable properties file ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    props = parse_properties(text, source=path)
    return Settings.from_properties(props, overrides, instance=instance,
                                    varhome=varhome, source=path)


def shipped_properties():
    """The text of the shipped configuration: every key documented, the shipped values
    set (the checkout's etc/mqgate.properties, and what ``mqgate init-config`` writes)."""
    return render_properties(SHIPPED_OVERRIDES)


def shipped_settings(overrides=None, *, instance=None, varhome=None):
    """Settings for a broker started without a configuration file: the shipped
    configuration with the overrides applied.

    One source of defaults (S0.3): ``twistd -n mqgate`` without ``--config`` listens
    where the shipped file says, from a checkout or a pip install alike, because both
    read the same rows of the schema. ``config_path`` is None; ``source_of`` names the
    line of the text ``mqgate init-config`` would write.
    """
    props = parse_properties(shipped_properties(), source=SHIPPED_SOURCE)
    settings = Settings.from_properties(props, overrides, instance=instance,
                                        varhome=varhome, source=SHIPPED_SOURCE)
    return attrs.evolve(settings, config_path=None)
