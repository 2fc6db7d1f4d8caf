# -*- test-case-name: tests.config.test_tap -*-
"""
The ``twistd mqgate`` command line: options and the service maker (S0.4, P9).

``Options`` turns the command line into one frozen ``Settings`` in ``postOptions``, so
every bad argument or configuration value stops ``twistd`` with a ``UsageError`` naming
the value, before anything is started.  ``makeService`` hands the settings to
``mqgate.service.build_broker``, which composes the broker's ``MultiService``.  This
module and ``service.py`` are the only places that may use the global reactor.
"""

import os

from twisted.logger import Logger
from twisted.python import usage

from mqgate.config import (
    DEFAULT_VARHOME,
    INSTANCE_NAME,
    SERVICE_PORT_KEYS,
    read_settings,
    shipped_settings,
)
from mqgate.errors import ConfigError

__all__ = ["Options", "makeService"]

_log = Logger()


def _one_paragraph(method):
    """Join a method's docstring into one paragraph: usage.Options shows it as --help
    text and would otherwise keep the source indentation."""
    method.__doc__ = " ".join(method.__doc__.split())
    return method


class Options(usage.Options):
    """Command-line options of ``twistd mqgate`` (S0.4).

    After ``parseOptions``: ``self["settings"]`` is the ``Settings`` to run with and
    ``self["overrides"]`` the ``-D``/``--port`` overrides, in command-line order.
    """

    synopsis = ("[-c PATH] [-n NAME] [--varhome PATH] [-D key=value ...] "
                "[--port SERVICE=PORT ...]")

    longdesc = (
        "mqgate is a message broker and protocol gateway: clients speak AMQP 1.0 or "
        "STOMP 1.0-1.2 over TCP or TLS. Its configuration is a Java-style properties "
        "file (`mqgate init-config` writes one with every key documented; a key may "
        "also be spelled imq.KEY, as in OpenMQ). A broker instance has a name (default "
        "mqgate) and keeps its data (users, access rules, TLS keys, the message store, "
        "the log) under VARHOME/instances/NAME. Any key can be set on the command line "
        "with -D key=value, which beats the file; --port SERVICE=PORT is a short form "
        "for a service's port key. Unknown keys are reported at start-up; bad values "
        "stop it. The log goes to the console (twistd -n, or twistd's --logfile) and "
        "to VARHOME/instances/NAME/log/log.txt; the mqgate.log.* keys choose levels, "
        "categories, rollover and format."
    )

    optParameters = [
        ["config", "c", None,
         "Properties file to read. Without one the broker runs on the built-in "
         "configuration, the one `mqgate init-config` writes out: AMQP and STOMP on "
         "port 5672, STOMP on 61613, the port mapper on 7676, all on 127.0.0.1."],
        ["instance", "n", None,
         "Instance name, 1 to 32 letters, digits or underscores; the instance's data "
         "lives under VARHOME/instances/NAME. Default: mqgate.instancename from the "
         "configuration, else mqgate."],
        ["varhome", None, DEFAULT_VARHOME,
         "Var home: the directory that holds every instance's data (relative to the "
         "directory twistd starts in)."],
    ]

    def __init__(self):
        super().__init__()
        # Both -D and --port feed one ordered mapping, so the later one wins.
        self["overrides"] = {}

    @_one_paragraph
    def opt_D(self, definition):
        """Set a configuration key, overriding the file: -D key=value (repeatable, e.g.
        -D mqgate.jms.tcp.port=5672). The OpenMQ spelling imq.KEY is accepted too."""
        key, sep, value = definition.partition("=")
        key = key.strip()
        if not sep or not key:
            raise usage.UsageError(
                f"-D expects key=value, got {definition!r}")
        self._override(key, value)

    # A long spelling, so that -D shows up in --help (usage.Options lists only options
    # with a long name).
    opt_define = opt_D

    @_one_paragraph
    def opt_port(self, assignment):
        """Fix the port of a service: --port SERVICE=PORT (repeatable), a short form of
        -D mqgate.SERVICE.tcp.port=PORT (.tls.port for ssljms and ssladmin)."""
        service, sep, port = assignment.partition("=")
        if not sep:
            raise usage.UsageError(
                f"--port expects SERVICE=PORT, got {assignment!r}")
        key = SERVICE_PORT_KEYS.get(service.strip())
        if key is None:
            raise usage.UsageError(
                f"--port: unknown service {service.strip()!r}; known services: "
                + ", ".join(SERVICE_PORT_KEYS))
        self._override(key, port)

    def _override(self, key, value):
        """Record an override so that the last one given wins, whatever its spelling."""
        # Re-inserting moves the key to the end of the (ordered) mapping.
        self["overrides"].pop(key, None)
        self["overrides"][key] = value

    def postOptions(self):
        """Check the instance name, then build the settings (a ConfigError becomes a
        UsageError carrying its message)."""
        instance = self["instance"]
        if instance is not None and not INSTANCE_NAME.fullmatch(instance):
            raise usage.UsageError(
                f"bad instance name {instance!r}: use 1 to 32 letters, digits or "
                "underscores")
        try:
            self["settings"] = self._load_settings()
        except ConfigError as error:
            raise usage.UsageError(str(error)) from None

    def _load_settings(self):
        """Read the configuration file, or take the built-in one, with the overrides
        applied."""
        keywords = dict(instance=self["instance"], varhome=self["varhome"])
        if self["config"]:
            return read_settings(self["config"], self["overrides"], **keywords)
        return shipped_settings(self["overrides"], **keywords)


def makeService(options):
    """Build the broker's MultiService from parsed options (twistd's service maker).

    The warnings collected while reading the configuration (unknown keys) are logged
    here, once logging is set up, so the operator sees them at start-up.
    """
    # Imported here: build_broker pulls in the whole broker, and the global reactor must
    # not be imported before twistd has installed the one it was asked for.
    from mqgate.service import build_broker
    from twisted.internet import reactor

    settings = options["settings"]
    plan = _log_plan(options, settings, reactor)
    for warning in settings.warnings:
        _log.warn("{warning}", warning=warning)
    try:
        top = build_broker(settings, reactor)
    except ConfigError as e:
        # What only building the broker can find out (TLS material, its password) is a
        # configuration error too: one line that says what to do, not a traceback.
        raise SystemExit(f"mqgate: {e}") from None
    if plan is not None:
        top.log_observer = plan.observer
        top.log_destination = plan.describe()
    return top


#: _twistd_console: twistd was told how to log (--syslog, --logger) and keeps it.
_TWISTD_DECIDES = object()


def _twistd_console(options):
    """Where the console output goes, from twistd's own options (the parent of ours):
    its --logfile, else the stream of mqgate.log.console.stream in the foreground (-n),
    else nowhere (a daemon has no console)."""
    from mqgate.logs.setup import CONSOLE_STREAM, NO_CONSOLE

    twistd = getattr(options, "parent", None)
    if twistd is None:          # not run by twistd (a test, an embedding program)
        return CONSOLE_STREAM
    if twistd.get("logger") or twistd.get("syslog"):
        return _TWISTD_DECIDES
    logfile = twistd.get("logfile")
    if logfile and logfile != "-":
        return os.path.abspath(logfile)
    if twistd.get("nodaemon") or logfile == "-":
        return CONSOLE_STREAM
    return NO_CONSOLE


def _log_plan(options, settings, reactor):
    """The L{LogPlan} for the broker's log settings, or None when twistd's --syslog or
    --logger chose the log observer (then the mqgate.log.* settings do not apply)."""
    from mqgate.logs.setup import log_plan

    console = _twistd_console(options)
    if console is _TWISTD_DECIDES:
        _log.warn("twistd --syslog or --logger chooses where the log goes: the "
                  "mqgate.log.* settings are not used")
        return None
    return log_plan(settings, console=console, clock=reactor.seconds)
