"""
``mqgate dbmgr``: create, delete, recreate or reset the SQL store's tables (S3.5).

Like the source's database manager (imqdbmgr), it reads the broker's configuration (the
``mqgate.persist.jdbc.*`` keys, ``-D`` overrides), takes the user from ``-u`` and the
password only from the password file or a prompt; there is no option for a password.

    create     create this broker's tables (PostgreSQL: first the database, from
               mqgate.persist.jdbc.createdburl, when it does not exist)
    delete     drop this broker's tables, and with them everything stored
    recreate   delete, then create
    reset      delete every row but the store version: the data goes, the tables stay

Exit status: 0 done; 1 the database refused (tables already there or missing, cannot
connect, wrong password ...); 2 a bad command line or configuration value (named).
The broker creates missing tables itself at start-up, so ``create`` is needed only to
prepare a database ahead, or to create the PostgreSQL database.
"""

import os
import sys

# The store (and Twisted with it) is imported by run(), not here: the `mqgate` command
# builds every tool's parser, and `mqgate cmd` or `usermgr` should not pay for it.

__all__ = ["ACTIONS", "DbmgrError", "register", "run"]

ACTIONS = ("create", "delete", "recreate", "reset")

EXIT_OK = 0
EXIT_REFUSED = 1


class DbmgrError(Exception):
    """The database is not in a state the action can work on; says why."""


def register(commands, common, settings_of):
    """Add the C{dbmgr} subcommand to the C{mqgate} parser.

    @param commands: the subparsers of the C{mqgate} command.
    @param common: adds the options every tool shares (-c, --varhome, -n, -D).
    @param settings_of: C{args -> Settings}.
    """
    parser = commands.add_parser(
        "dbmgr", help="create, delete, recreate or reset the SQL store's tables",
        description="Manage the tables of the SQL store (mqgate.persist.store=jdbc) of "
                    "this broker (mqgate.persist.jdbc.brokerid). The password comes "
                    "from the password file (mqgate.passfile.enabled) or is asked for.")
    parser.add_argument("action", choices=ACTIONS,
                        help="create | delete | recreate | reset (empty the tables)")
    common(parser)
    parser.add_argument("-u", "--user", default=None,
                        help="database user (default mqgate.persist.jdbc.user)")
    parser.set_defaults(run=lambda args: run(args, settings_of(args)))


def run(args, settings, *, out=None):
    """Carry out C{args.action}; return the exit status.

    @raise ConfigError: a bad configuration value (the caller reports it, status 2).
    """
    from mqgate.store.sqlconfig import sql_config_from_settings
    out = out or sys.stdout
    user = args.user or settings["mqgate.persist.jdbc.user"] or "(libpq's default)"
    config = sql_config_from_settings(
        settings, user=args.user, prompt=f"Password of database user {user}: ")
    dialect = config.dialect
    where = config.where()
    try:
        if args.action in ("create", "recreate"):
            _prepare_database(config, out)
        elif dialect.name == "sqlite" and not os.path.exists(config.url):
            raise DbmgrError(f"no database file {config.url}")
        conn = dialect.connect(config.url, config.user, config.password,
                               sync=config.sync)
        try:
            text = _ACTIONS[args.action](config.schema(), conn.cursor())
            conn.commit()
        finally:
            conn.close()
    except DbmgrError as e:
        print(f"mqgate dbmgr {args.action}: {where}: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except dialect.dbapi().Error as e:
        print(f"mqgate dbmgr {args.action}: {where}: {_one_line(e)}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"{text} in {where}", file=out)
    return EXIT_OK


def _one_line(error):
    return " ".join(str(error).split()) or type(error).__name__


def _prepare_database(config, out):
    """SQLite: make the file's directory. PostgreSQL: create the database from
    C{createdburl} when one is set and the database does not exist."""
    dialect = config.dialect
    if dialect.name == "sqlite":
        os.makedirs(os.path.dirname(config.url) or ".", exist_ok=True)
        return
    name = dialect.database_name(config.url)
    if not config.create_url or not name:
        return
    from psycopg import sql
    conn = dialect.dbapi().connect(config.create_url, autocommit=True,
                                   **dialect.connect_args("", config.user,
                                                          config.password)[1])
    try:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                             (name,)).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}", file=out)
    finally:
        conn.close()


def _names(schema, bases):
    return ", ".join(schema.names[b] for b in bases)


def _tables():
    """The base table names, in creation order."""
    from mqgate.store.sqldialects import TABLES
    return TABLES


def _create(schema, cursor):
    existing = schema.existing(cursor)
    if existing:
        raise DbmgrError(
            f"tables of brokerid {schema.brokerid!r} exist already "
            f"({_names(schema, existing)}); `mqgate dbmgr recreate` drops and creates "
            "them")
    schema.create(cursor)
    return f"created tables {_names(schema, _tables())}"


def _delete(schema, cursor):
    existing = schema.existing(cursor)
    if not existing:
        raise DbmgrError(f"no tables of brokerid {schema.brokerid!r} to delete")
    schema.drop(cursor, existing)
    return f"deleted tables {_names(schema, existing)}"


def _recreate(schema, cursor):
    schema.drop(cursor, schema.existing(cursor))
    schema.create(cursor)
    return f"recreated tables {_names(schema, _tables())}"


def _reset(schema, cursor):
    missing = [b for b in _tables() if b not in schema.existing(cursor)]
    if missing:
        raise DbmgrError(
            f"tables {_names(schema, missing)} of brokerid {schema.brokerid!r} are "
            "missing; `mqgate dbmgr recreate` creates them")
    schema.empty(cursor)
    return (f"emptied tables {_names(schema, [b for b in _tables() if b != 'MQVER41'])} "
            "(messages, destinations, durable subscriptions, prepared transactions)")


_ACTIONS = {"create": _create, "delete": _delete, "recreate": _recreate,
            "reset": _reset}
