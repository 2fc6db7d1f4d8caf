"""
Configuration: a Java properties file plus ``-D`` overrides -> one frozen ``Settings``.

``parse_properties`` reads the file format, ``schema`` holds the table of every key,
``Settings`` validates and freezes.  Stdlib and attrs only: no Twisted here.
"""

from mqgate.config.properties import escape_value, parse_properties
from mqgate.config.schema import (
    INSTANCE_NAME,
    KEYS,
    REGENERATE,
    SCHEMA,
    SERVICE_PORT_KEYS,
    SERVICES,
    SHIPPED_OVERRIDES,
    Key,
    canonical_key,
    render_properties,
)
from mqgate.config.settings import (
    DEFAULT_VARHOME, SHIPPED_SOURCE, Settings, read_settings, shipped_properties,
    shipped_settings)

__all__ = [
    "parse_properties", "escape_value",
    "Key", "KEYS", "REGENERATE", "SCHEMA", "SERVICES", "SERVICE_PORT_KEYS",
    "SHIPPED_OVERRIDES",
    "INSTANCE_NAME", "canonical_key", "render_properties",
    "Settings", "read_settings", "DEFAULT_VARHOME",
    "shipped_settings", "shipped_properties", "SHIPPED_SOURCE",
]
