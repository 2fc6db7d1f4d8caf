"""
The SQL store's configuration (S3.5): the C{mqgate.persist.jdbc.*} keys resolved into a
L{SqlConfig}, and the adbapi connection pool it describes.

Shared by the store (L{mqgate.store.sql.sql_store_from_settings}) and C{mqgate dbmgr},
so both find the same database, tables and password the same way. The password is
never a configuration key: it comes from the password file or a prompt (S3.5, S4.6),
and a URL carrying one is refused.
"""

import os
from dataclasses import dataclass, field

from twisted.enterprise import adbapi

from mqgate.errors import ConfigError
from mqgate.security.passfile import find_password
from mqgate.store.sqldialects import DIALECTS, TABLES, Schema

__all__ = ["PASSWORD_KEY", "SqlConfig", "connection_pool", "sql_config_from_settings"]

#: Never a schema key: the password comes from the password file or a prompt (S3.5).
PASSWORD_KEY = "mqgate.persist.jdbc.password"

# The SQLite file when mqgate.persist.jdbc.opendburl is empty (S0.5: under the
# instance directory; the source's embedded database lived in instances/NAME/dbstore).
SQLITE_DEFAULT = os.path.join("dbstore", "mqgate.sqlite")


@dataclass(frozen=True)
class SqlConfig:
    """Where the SQL store is and how to reach it (the S3.5 keys, resolved).

    @ivar url: a SQLite file path, or a libpq connection string / URI.
    @ivar create_url: PostgreSQL: where C{dbmgr create} creates the database from.
    @ivar tables: base name -> DDL override (empty: built in).
    """

    vendor: str
    url: str
    create_url: str
    user: str | None
    password: str | None = field(repr=False)
    brokerid: str
    tables: dict
    sync: bool

    @property
    def dialect(self):
        """The L{Dialect} of C{vendor}."""
        return DIALECTS[self.vendor]

    def schema(self):
        """The L{Schema} of this broker's tables."""
        return Schema(self.dialect, self.brokerid, self.tables)

    def where(self):
        """The database, for messages (no password)."""
        return self.dialect.where(self.url)


def sql_config_from_settings(settings, *, user=None, prompt=None):
    """Resolve the S3.5 keys: defaults, the password (file or prompt), checks.

    @param user: overrides C{mqgate.persist.jdbc.user} (C{dbmgr -u}).
    @param prompt: the text to ask for the password with at a terminal, or None to
        never ask.
    @raise ConfigError: naming the key of a bad or missing value.
    """
    vendor = settings["mqgate.persist.jdbc.dbVendor"]
    url = settings["mqgate.persist.jdbc.opendburl"]
    if vendor == "sqlite":
        url = os.path.join(settings.instance_dir, url or SQLITE_DEFAULT)
    else:
        _refuse_url_password("mqgate.persist.jdbc.opendburl", url)
        _refuse_url_password("mqgate.persist.jdbc.createdburl",
                             settings["mqgate.persist.jdbc.createdburl"])
    user = user or settings["mqgate.persist.jdbc.user"] or None
    password = None
    if vendor == "postgresql" and settings["mqgate.persist.jdbc.needpassword"]:
        password = find_password(settings, PASSWORD_KEY, prompt)
        if password is None:
            raise ConfigError(PASSWORD_KEY, "(not given)",
                              "the database password in the password file "
                              "(mqgate.passfile.enabled=true) or typed at a terminal; "
                              "never on the command line")
    tables = {}
    for base in TABLES:
        key = f"mqgate.persist.jdbc.table.{base}"
        ddl = settings[key]
        if ddl and "${name}" not in ddl:
            raise ConfigError(key, ddl, "a CREATE TABLE statement naming its table "
                                        "${name} (the name with the brokerid suffix)")
        tables[base] = ddl
    return SqlConfig(vendor=vendor, url=url,
                     create_url=settings["mqgate.persist.jdbc.createdburl"], user=user,
                     password=password,
                     brokerid=settings["mqgate.persist.jdbc.brokerid"] or settings.instance,
                     tables=tables, sync=settings["mqgate.persist.jdbc.sync.enabled"])


def _refuse_url_password(key, url):
    if not url:
        return
    from psycopg.conninfo import conninfo_to_dict
    try:
        info = conninfo_to_dict(url)
    except Exception as e:
        raise ConfigError(key, url, f"a libpq connection string or URI ({e})") from None
    if info.get("password"):
        raise ConfigError(key, "(a URL with a password)",
                          f"a URL without the password: put it in the password file as "
                          f"{PASSWORD_KEY} and set mqgate.persist.jdbc.needpassword=true")


def connection_pool(config, reactor):
    """An C{adbapi.ConnectionPool} of one connection to the database of C{config}.

    One connection: the store writes one batch at a time anyway, SQLite allows one
    writer, and one session keeps every statement in call order.
    """
    dialect = config.dialect
    if dialect.name == "sqlite":
        os.makedirs(os.path.dirname(config.url) or ".", exist_ok=True)
    args, kwargs = dialect.connect_args(config.url, config.user, config.password)
    return adbapi.ConnectionPool(
        dialect.module, *args, cp_min=1, cp_max=1, cp_reactor=reactor,
        cp_openfun=lambda conn: dialect.on_connect(conn, config.sync), **kwargs)
