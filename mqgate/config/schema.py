"""
The configuration schema: every key mqgate understands, in one table.

Theory of operation
-------------------
``KEYS`` is a tuple of ``Key`` rows.  A row names one key in its canonical spelling
(``mqgate.…``), its value type, its default (written as text, exactly as it would appear
in the properties file) and a one-line doc.  Everything else is derived from the table:
validation and typed values (``settings.py``), the "did you mean" suggestions for
unknown keys, and the documented ``etc/mqgate.properties`` (``render_properties``).

Adding a key means adding a row.  Keys are never patterns: a family of keys (the
per-service ``mqgate.SERVICE.PROTOCOL.port`` / ``.hostname`` pairs of S1.4/S1.5) is
written out by a small generator function (``_service_rows``) that returns ordinary
rows.
Explicit rows keep lookups exact, make every key appear in the rendered file and give
close-match suggestions something concrete to match against.

Every key spelled ``imq.…`` is an alias of the same key spelled ``mqgate.…`` (SPEC
introduction), see ``canonical_key``.

Value types are small frozen objects with ``parse(text) -> value`` (raising ValueError
on bad input), ``format(value) -> text`` (the inverse) and ``allowed``, the phrase a
``ConfigError`` shows the operator.  ``REGENERATE`` is the command that rewrites the
shipped ``etc/mqgate.properties`` after a row is added.
"""

import re
import textwrap

import attrs

from mqgate.config.properties import escape_value

__all__ = [
    "Bool", "Int", "Seconds", "Size", "SizeLimit", "Choice", "Text", "TextList", "Key",
    "KEYS", "SCHEMA", "SERVICES", "SERVICE_PORT_KEYS", "SHIPPED_OVERRIDES",
    "INSTANCE_NAME", "CANONICAL_PREFIX", "ALIAS_PREFIX", "FAMILIES",
    "canonical_key", "render_properties", "REGENERATE", "RETIRED_ANONYMOUS_KEY",
    "LOG_OUTPUT_PATTERN",
]

CANONICAL_PREFIX = "mqgate."
# OpenMQ's spelling of every key (SPEC introduction: an OpenMQ config.properties carries
# over).
ALIAS_PREFIX = "imq."

# Families of keys whose names are made by the operator (a profile name, a table name):
# Settings keeps them as written and their owner parses them (Settings.family).
FAMILIES = (
    "mqgate.client_profile.",     # S9.7, mqgate.egress.profiles
)

# S0.5: the instance name becomes a directory name under VARHOME/instances/, so it is
# kept to characters that are safe in a path on every platform.
INSTANCE_NAME = re.compile(r"[A-Za-z0-9_]{1,32}")

_INTEGER = re.compile(r"[+-]?[0-9]+")
_SIZE = re.compile(r"([0-9]+)([bkmg]?)", re.IGNORECASE)
# OpenMQ sizes (imq.message.max_size=70m) use binary multiples.
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def canonical_key(key):
    """Return the canonical spelling of a key: ``imq.X`` -> ``mqgate.X``."""
    if key.startswith(ALIAS_PREFIX):
        return CANONICAL_PREFIX + key[len(ALIAS_PREFIX):]
    return key


# -------------------------------------------------------------------------------------
# Value types


def _in_range(number, minimum, maximum):
    """Return number if minimum <= number <= maximum (maximum None: no bound)."""
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(number)
    return number


@attrs.frozen
class Bool:
    """``true`` or ``false``, in any letter case."""

    allowed = "true or false"

    def parse(self, text):
        """Return the bool written as text; ValueError otherwise."""
        lowered = text.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise ValueError(text)

    def format(self, value):
        """Return the text of a bool."""
        return "true" if value else "false"


@attrs.frozen
class Int:
    """A whole number within ``[minimum, maximum]`` (maximum None: no upper bound)."""

    minimum: int = 0
    maximum: int | None = None

    @property
    def allowed(self):
        """The phrase naming the accepted range."""
        if self.maximum is None:
            return f"an integer of at least {self.minimum}"
        return f"an integer from {self.minimum} to {self.maximum}"

    def parse(self, text):
        """Return the integer in text; ValueError if malformed or out of range."""
        # int() alone would also take "1_000" and " 7 "; the file format is stricter.
        if not _INTEGER.fullmatch(text):
            raise ValueError(text)
        return self._check(int(text))

    def _check(self, number):
        return _in_range(number, self.minimum, self.maximum)

    def format(self, value):
        """Return the text of an integer."""
        return str(value)


@attrs.frozen
class Seconds(Int):
    """A duration in whole seconds, within ``[minimum, maximum]``."""

    @property
    def allowed(self):
        """The phrase naming the accepted range."""
        if self.maximum is None:
            return f"a number of seconds of at least {self.minimum}"
        return f"a number of seconds from {self.minimum} to {self.maximum}"


@attrs.frozen
class Size:
    """A size in bytes: a whole number, optionally followed by b, k, m or g."""

    minimum: int = 0
    maximum: int | None = None

    @property
    def allowed(self):
        """The phrase naming the accepted form."""
        phrase = ("a size in bytes: a whole number, optionally followed by "
                  "b, k, m or g (e.g. 70m)")
        if self.minimum:
            phrase += f", at least {self.minimum} bytes"
        if self.maximum is not None:
            phrase += f", at most {self.maximum} bytes"
        return phrase

    def parse(self, text):
        """Return the number of bytes written as text; ValueError otherwise."""
        match = _SIZE.fullmatch(text)
        if not match:
            raise ValueError(text)
        number = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
        return _in_range(number, self.minimum, self.maximum)

    def format(self, value):
        """Return the text of a size, with the largest exact unit."""
        for suffix in ("g", "m", "k"):
            unit = _SIZE_UNITS[suffix]
            if value and value % unit == 0:
                return f"{value // unit}{suffix}"
        return str(value)


@attrs.frozen
class SizeLimit(Size):
    """A L{Size}, or -1 for no limit (OpenMQ writes its unlimited sizes so)."""

    @property
    def allowed(self):
        """The phrase naming the accepted form."""
        return "-1 (no limit) or " + super().allowed

    def parse(self, text):
        """Return -1 or the number of bytes written as text; ValueError otherwise."""
        return -1 if text == "-1" else super().parse(text)


@attrs.frozen
class Choice:
    """One of a fixed set of words, in any letter case.

    The parsed value is the word as spelled in ``choices``.
    """

    choices: tuple

    @property
    def allowed(self):
        """The phrase listing the choices."""
        return "one of: " + ", ".join(self.choices)

    def parse(self, text):
        """Return the choice as spelled in ``choices``; ValueError if not listed."""
        for choice in self.choices:
            if choice.lower() == text.lower():
                return choice
        raise ValueError(text)

    def format(self, value):
        """Return the text of a choice."""
        return value


@attrs.frozen
class Text:
    """Any text, or text matching ``pattern`` (described by ``description``)."""

    pattern: re.Pattern | None = None
    description: str = "any text"

    @property
    def allowed(self):
        """The phrase describing the accepted text."""
        return self.description

    def parse(self, text):
        """Return the text; ValueError if a pattern is set and does not match."""
        if self.pattern is not None and not self.pattern.fullmatch(text):
            raise ValueError(text)
        return text

    def format(self, value):
        """Return the text."""
        return value


@attrs.frozen
class TextList:
    """A comma-separated list; items are stripped, empty items and repeats dropped.

    With ``choices`` every item must be one of them (any letter case).
    """

    choices: tuple | None = None

    @property
    def allowed(self):
        """The phrase describing the accepted list."""
        if self.choices is None:
            return "a comma-separated list"
        return "a comma-separated list of: " + ", ".join(self.choices)

    def parse(self, text):
        """Return the items as a tuple of str; ValueError if an item is not allowed."""
        items = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            if self.choices is not None:
                item = Choice(self.choices).parse(item)
            if item not in items:
                items.append(item)
        return tuple(items)

    def format(self, value):
        """Return the text of a list."""
        return ",".join(value)


# -------------------------------------------------------------------------------------
# The table


@attrs.frozen
class Key:
    """One configuration key.

    @ivar name: the canonical spelling (``mqgate.…``).
    @ivar type: the value type (Bool, Int, Seconds, Size, Choice, Text, TextList).
    @ivar default: the default, as text (as it would be written in the file).
    @ivar doc: one line for the operator.
    """

    name: str
    type: object
    default: str
    doc: str


# S1.1: the built-in services, their type and transport.
SERVICES = {
    "jms": ("NORMAL", "tcp"),
    "ssljms": ("NORMAL", "tls"),
    "httpjms": ("NORMAL", "http"),
    "httpsjms": ("NORMAL", "https"),
    "admin": ("ADMIN", "tcp"),
    "ssladmin": ("ADMIN", "tls"),
    # A STOMP-only messaging service, on the port STOMP clients expect (issue 5).
    "stomp": ("NORMAL", "tcp"),
    # The HTTP admin API (S11.2), in clear and over TLS.
    "httpadmin": ("ADMIN", "http"),
    "httpsadmin": ("ADMIN", "https"),
}

# The wire protocols each service accepts by default (S1.1): messaging services tell
# AMQP from STOMP by the first bytes; ADMIN services speak AMQP.
PROTOCOLS = ("amqp", "stomp")
SERVICE_PROTOCOLS = {"stomp": "stomp", "admin": "amqp", "ssladmin": "amqp"}

_PORT = Int(0, 65535)

# S5.2: a log output's categories, '|'-separated; mqgate.logs.observers reads them.
LOG_OUTPUT_PATTERN = re.compile(
    r"(?i)\s*(?:ALL|NONE|ERROR|WARNING|INFO|DEBUG)\s*"
    r"(?:\|\s*(?:ALL|NONE|ERROR|WARNING|INFO|DEBUG)\s*)*")
_LOG_OUTPUT = Text(LOG_OUTPUT_PATTERN,
                   "'|'-separated categories: ERROR, WARNING, INFO, DEBUG, ALL, NONE")


# A per-service switch that may be left empty to inherit the broker-wide one.
_INHERITED_BOOL = Text(re.compile(r"(?i)true|false|"),
                       "true, false, or empty (the broker-wide setting)")


def _service_rows():
    """Rows for the port and bind address of each socket service.

    The http services are left out: the tunnel has its own keys, added with it.
    """
    rows = []
    for service, (_kind, protocol) in SERVICES.items():
        if protocol not in ("tcp", "tls"):
            continue
        prefix = f"mqgate.{service}.{protocol}"
        rows.append(Key(
            f"{prefix}.port", _PORT, "0",
            f"Port of the {service} service; 0 lets the OS choose one, published by "
            "the port mapper."))
        rows.append(Key(
            f"{prefix}.hostname", Text(), "",
            f"Bind address of the {service} service; empty means mqgate.hostname."))
        rows.append(Key(
            f"mqgate.{service}.protocols", TextList(PROTOCOLS),
            SERVICE_PROTOCOLS.get(service, "amqp,stomp"),
            f"Wire protocols the {service} service accepts, told apart by the first "
            "bytes of a connection."))
    return rows


#: The broker-wide anonymous switch this version replaced by per-service keys; kept in
#: the table only so that setting it can be refused with the replacement named.
RETIRED_ANONYMOUS_KEY = "mqgate.authentication.anonymous.enabled"


def _login_rows(service):
    """How clients of C{service} may log in: guests, passwords in cleartext (tcp
    services), TLS client certificates (tls services)."""
    rows = [Key(
        f"mqgate.{service}.allow_anonymous", Bool(), "false",
        f"Let clients of the {service} service in as the guest user without credentials: "
        "the AMQP header without SASL, SASL ANONYMOUS, a STOMP CONNECT without login.")]
    if SERVICES[service][1] in ("tcp", "http"):
        rows.append(Key(
            f"mqgate.{service}.sasl.plain.allow_cleartext", Bool(), "true",
            f"Accept passwords (SASL PLAIN, STOMP login/passcode) on the cleartext "
            f"{service} service. True by default because the shipped services bind to "
            "loopback only; set false when the service listens on a network, so that "
            "passwords go over a TLS service only."))
    else:
        rows += [
            Key(f"mqgate.{service}.ssl.client_auth", Choice(("none", "want", "need")),
                "none",
                f"TLS client certificates on the {service} service: none (not asked "
                "for), want (asked for; a client without one may still log in with a "
                "password) or need (a client without a certificate the CA file verifies "
                "fails the TLS handshake). A verified certificate logs in with SASL "
                "EXTERNAL, or a STOMP CONNECT without login, as the user named by its "
                "subject's CN."),
            Key(f"mqgate.{service}.ssl.ca_file", Text(), "",
                f"PEM file of the CA certificates that sign client certificates of the "
                f"{service} service; required when ssl.client_auth is want or need."),
        ]
    return rows


# S3.5: the SQL store's tables (mqgate/store/sqldialects.py TABLES; a test keeps the two
# lists equal) and what each holds, for the DDL override keys.
JDBC_TABLES = {
    "MQVER41": "store version", "MQDST41": "destinations",
    "MQCON41": "durable subscriptions", "MQMSG41": "persistent messages",
    "MQTXN41": "prepared transactions", "MQTXNOP41": "prepared transactions' work",
}


def _jdbc_table_rows():
    """One DDL override key per SQL store table: a family written out."""
    return [Key(f"mqgate.persist.jdbc.table.{base}", Text(), "",
                f"SQL store: the CREATE TABLE statement of the {what} table, ${{name}} "
                f"standing for {base}_<brokerid>; it must keep the built-in columns. Empty "
                "means the built-in DDL of the database.")
            for base, what in JDBC_TABLES.items()]


KEYS = (
    Key("mqgate.instancename",
        Text(INSTANCE_NAME, "1 to 32 letters, digits or underscores"), "mqgate",
        "Name of this broker instance; its data lives under VARHOME/instances/NAME. "
        "--instance overrides it."),
    Key("mqgate.hostname", Text(), "127.0.0.1",
        "Default bind address of every service."),
    Key("mqgate.service.activelist", TextList(tuple(SERVICES)), "jms,admin",
        "Services started at start-up."),
    *_service_rows(),
    # -- the HTTP admin API (S11.2; mqgate.web.admin) -----------------------------------
    *(row for service, protocol in (("httpadmin", "http"), ("httpsadmin", "https"))
      for row in (
          Key(f"mqgate.{service}.{protocol}.port", _PORT, "0",
              f"Port of the {service} service, the HTTP admin API over "
              f"{protocol.upper()}; 0 lets the OS choose one, published by the port "
              "mapper."),
          Key(f"mqgate.{service}.{protocol}.hostname", Text(), "",
              f"Bind address of the {service} service; empty means mqgate.hostname."))),
    Key("mqgate.httpsadmin.ssl.client_auth", Choice(("none", "want", "need")), "none",
        "TLS client certificates on the httpsadmin service: none (not asked for), want "
        "(asked for) or need (a client without a certificate the CA file verifies "
        "fails the TLS handshake). Requests still log in with HTTP Basic."),
    Key("mqgate.httpsadmin.ssl.ca_file", Text(), "",
        "PEM file of the CA certificates that sign client certificates of the "
        "httpsadmin service; required when ssl.client_auth is want or need."),
    Key("mqgate.adminapi.max_body_size", Size(1024, 16 << 20), "64k",
        "Largest request body the HTTP admin API accepts (httpadmin and httpsadmin); a "
        "larger one is refused with 413 before it is read."),
    Key("mqgate.adminapi.idle_timeout", Seconds(1, 86400), "60",
        "Seconds an HTTP admin API connection may stay idle before the broker closes "
        "it."),
    Key("mqgate.adminapi.max_connections", Int(1, 100000), "64",
        "HTTP admin API connections open at once at most, per service; one more is "
        "closed as soon as it is accepted."),
    # -- the HTTP gateway services httpjms and httpsjms (S1.1, S10.3; mqgate.web.gateway):
    # AMQP and STOMP carried by WebSocket and by the HTTP tunnel --
    *(row for service, protocol in (("httpjms", "http"), ("httpsjms", "https"))
      for row in (
          Key(f"mqgate.{service}.{protocol}.port", _PORT, "0",
              f"Port of the {service} service (WebSocket and the HTTP tunnel over "
              f"{protocol.upper()}); 0 lets the OS choose one, published by the port "
              "mapper."),
          Key(f"mqgate.{service}.{protocol}.hostname", Text(), "",
              f"Bind address of the {service} service; empty means mqgate.hostname."),
          Key(f"mqgate.{service}.protocols", TextList(PROTOCOLS), "amqp,stomp",
              f"Wire protocols the {service} service accepts inside its WebSocket and "
              "tunnel connections, told apart by their first bytes."),
          Key(f"mqgate.{service}.backlog", Int(1, 65535), "4096",
              f"Connections the kernel holds for the {service} service until the broker "
              "accepts them (the listen backlog)."),
          Key(f"mqgate.{service}.max_connections", Int(1, 1000000), "10000",
              f"HTTP connections open at once at most on the {service} service "
              "(WebSocket connections included); one more is closed as soon as it is "
              "accepted."),
          Key(f"mqgate.{service}.idle_timeout", Seconds(1, 86400), "120",
              f"Seconds an HTTP connection of the {service} service may stay idle "
              "between requests before the broker closes it (a WebSocket connection is "
              "watched by its pings instead)."),
          Key(f"mqgate.{service}.max_body_size", Size(1024, 16 << 20), "64k",
              f"Largest HTTP request body the {service} service accepts; a larger one is "
              "refused with 413 before it is read."),
          Key(f"mqgate.{service}.ws.path",
              Text(re.compile(r"/[A-Za-z0-9._~-][A-Za-z0-9._~/-]*"),
                   "a path below /, such as /ws"), "/ws",
              f"URL path of the WebSocket endpoint of the {service} service."),
          Key(f"mqgate.{service}.ws.allowed_origins", TextList(), "",
              f"Origins (scheme://host[:port], comma-separated, or *) whose pages may "
              f"open WebSocket connections to the {service} service; empty means the "
              "same origin only (the Origin's host and port equal the Host header). A "
              "client that sends no Origin (not a browser) is always let in."),
          Key(f"mqgate.{service}.ws.max_message_size", Size(512, 64 << 20), "1m",
              f"Largest WebSocket message (and frame) the {service} service accepts; a "
              "larger one closes the connection with status 1009."),
          Key(f"mqgate.{service}.ws.ping_interval", Seconds(0, 86400), "30",
              f"Seconds between WebSocket pings on the {service} service; a peer that "
              "has not answered one within the next interval is dropped. 0: no pings."),
          Key(f"mqgate.{service}.threadpool_model", Choice(("dedicated", "shared")),
              "dedicated",
              f"Thread-pool model of the {service} service's connections: dedicated or "
              "shared, as for the jms service."),
          Key(f"mqgate.{service}.min_threads", Int(0, 100000), "10",
              f"Workers the {service} service keeps even when idle."),
          Key(f"mqgate.{service}.max_threads", Int(1, 100000), "500",
              f"Most workers of the {service} service (dedicated admits max_threads/2 "
              "connections)."),
          *_login_rows(service))),
    # -- the HTTP tunnel on httpjms and httpsjms (S10.3, FACTS 1.2; mqgate.net.tunnel) --
    *(row for service, protocol in (("httpjms", "http"), ("httpsjms", "https"))
      for row in (
          Key(f"mqgate.{service}.{protocol}.pullPeriod", Seconds(-1, 60), "30",
              f"Seconds the {service} service holds a tunnel client's pull request when "
              "it has nothing to send (a long poll), at most 60; -1 or 0 (the source "
              "system's default, a pull always pending) mean 60. The client sends the "
              "next pull as soon as one is answered."),
          Key(f"mqgate.{service}.{protocol}.connectionTimeout", Seconds(1, 86400), "60",
              f"Seconds a tunnel connection of the {service} service may go without a "
              "pull before the broker closes it and returns its unacknowledged "
              "deliveries to their queues."),
      )),
    # -- thread pools (S1.6; defaults of FACTS 1.7, the stomp service takes jms's) ----
    *(row for service, low, high in (("jms", 10, 1000), ("admin", 4, 10),
                                     ("ssljms", 10, 500), ("ssladmin", 4, 10),
                                     ("stomp", 10, 1000))
      for row in (
          Key(f"mqgate.{service}.threadpool_model", Choice(("dedicated", "shared")),
              "dedicated",
              f"Thread-pool model of the {service} service: dedicated (each connection "
              "holds two workers, and its input is processed as it arrives) or shared "
              "(distributors process the input of many connections in turns)."),
          Key(f"mqgate.{service}.min_threads", Int(0, 100000), str(low),
              f"Workers the {service} service keeps even when idle."),
          Key(f"mqgate.{service}.max_threads", Int(1, 100000), str(high),
              f"Most workers of the {service} service; dedicated admits max_threads/2 "
              "connections, shared max_threads distributors of "
              "mqgate.shared.connectionMonitor_limit connections; beyond that a "
              "connection is refused with an error."))),
    Key("mqgate.shared.connectionMonitor_limit", Int(-1, 1000000), "512",
        "Connections one distributor of a shared thread pool watches; -1 means no "
        "limit."),
    Key("mqgate.portmapper.port", _PORT, "7676",
        "Port of the port mapper."),
    Key("mqgate.portmapper.hostname", Text(), "",
        "Bind address of the port mapper; empty means mqgate.hostname."),
    Key("mqgate.portmapper.backlog", Int(1, 65535), "50",
        "Listen backlog of the port mapper."),
    Key("mqgate.autocreate.queue", Bool(), "true",
        "Create a queue when a client names one that does not exist."),
    Key("mqgate.autocreate.topic", Bool(), "true",
        "Create a topic when a client names one that does not exist."),
    # -- limits of auto-created destinations (S2.3, S2.5, S2.7; FACTS 1.6) -------------
    Key("mqgate.autocreate.destination.maxNumMsgs", Int(-1), "100000",
        "Messages an auto-created queue, or each topic subscription, may hold (waiting "
        "plus unacknowledged) before its limit behaviour applies; -1 means no limit."),
    Key("mqgate.autocreate.destination.maxTotalMsgBytes", Int(-1), "1073741824",
        "Bytes of messages an auto-created queue, or each topic subscription, may hold "
        "(waiting plus unacknowledged) before its limit behaviour applies; -1 means no "
        "limit."),
    Key("mqgate.autocreate.destination.limitBehavior",
        Choice(("FLOW_CONTROL", "REJECT_NEWEST", "REMOVE_OLDEST", "REMOVE_LOW_PRIORITY")),
        "FLOW_CONTROL",
        "What a full destination does: FLOW_CONTROL withholds the producers' AMQP credit "
        "and stops reading their STOMP sockets until it drains to 90 % of its limit; "
        "REJECT_NEWEST refuses each new message with amqp:resource-limit-exceeded; "
        "REMOVE_OLDEST and REMOVE_LOW_PRIORITY remove waiting messages (the oldest; the "
        "oldest of the lowest priority) to mq.sys.dmq to make room. "
        "mqgate defaults to FLOW_CONTROL (OpenMQ: REJECT_NEWEST) because it loses "
        "nothing: back-pressure, not errors, slows a fast producer."),
    # -- the other destination properties, dead messages, expiry (S2.2-S2.4, S2.9) ----
    Key("mqgate.autocreate.destination.maxBytesPerMsg", SizeLimit(), "-1",
        "Largest message an auto-created destination takes (1600, 16k, 16m); a larger "
        "one is refused with amqp:resource-limit-exceeded naming maxBytesPerMsg; -1 "
        "means only mqgate.message.max_size applies."),
    Key("mqgate.autocreate.destination.maxNumProducers", Int(-1), "-1",
        "Producers that may be attached to an auto-created destination at once; one "
        "more is refused (AMQP attach: amqp:resource-limit-exceeded; STOMP: an ERROR "
        "at its first SEND); -1 means no limit (OpenMQ: 100)."),
    Key("mqgate.autocreate.destination.consumerFlowLimit", Int(-1), "-1",
        "Messages one consumer may hold unacknowledged from an auto-created destination, "
        "whatever credit or prefetch it asks for; -1 means its own credit is the limit "
        "(OpenMQ: 1000)."),
    Key("mqgate.autocreate.destination.useDMQ", Bool(), "true",
        "Whether dead messages of an auto-created destination (expired, removed by "
        "REMOVE_OLDEST or REMOVE_LOW_PRIORITY, rejected, delivered too often) go to "
        "the dead message queue mq.sys.dmq; false drops them (counted)."),
    Key("mqgate.destination.max_delivery_count", Int(0), "10",
        "Failed deliveries (released as failed, NACKed, or unacknowledged when the "
        "consumer went) after which a message goes to mq.sys.dmq instead of being "
        "delivered again; per destination maxDeliveryCount; 0 means no limit."),
    Key("mqgate.destination.DMQ.maxNumMsgs", Int(-1), "1000",
        "Messages the dead message queue mq.sys.dmq holds; past it, its oldest are "
        "removed (it never holds anything back); -1 means no limit."),
    Key("mqgate.destination.DMQ.maxTotalMsgBytes", SizeLimit(), "10m",
        "Bytes of messages mq.sys.dmq holds; past it, its oldest are removed; -1 means "
        "no limit."),
    Key("mqgate.destination.DMQ.truncateBody", Bool(), "false",
        "Keep only the headers and properties of a message moved to mq.sys.dmq, not "
        "its body."),
    Key("mqgate.destination.logDeadMsgs", Bool(), "false",
        "Log one line per dead message: its id, the destination it left and why (never "
        "its body)."),
    Key("mqgate.message.expiration.interval", Seconds(0, 86400), "60",
        "Seconds between two passes of the reaper removing expired messages from the "
        "queues (to mq.sys.dmq); 0 turns the reaper off (an expired message is still "
        "never delivered)."),
    # -- consumer modes of queues (FACTS 1.6, 1.7; docs/delivery.md) ---------------------
    Key("mqgate.autocreate.queue.maxNumActiveConsumers", Int(-1), "-1",
        "Consumers a queue delivers to at once; one more waits as a backup, receiving "
        "nothing until an active one goes; -1 means no limit (0 is not allowed). "
        "update dst -o maxNumActiveConsumers=N changes one queue's."),
    Key("mqgate.autocreate.queue.maxNumBackupConsumers", Int(-1), "0",
        "Consumers that may wait as backups beyond the active ones; one more is refused "
        "with amqp:resource-limit-exceeded (STOMP: an ERROR frame); -1 means no limit."),
    Key("mqgate.destination.default_type", Choice(("queue", "topic")), "queue",
        "What a bare address name (no queue:// or topic://) means."),
    Key("mqgate.message.max_size", Size(), "70m",
        "Largest single message accepted, in bytes."),
    # -- broker-wide limits and names (S2.1, S2.2, S2.5; docs/limits.md) -------------------
    Key("mqgate.system.max_count", Int(-1), "-1",
        "Messages the broker holds (waiting or unacknowledged, once per queue or "
        "subscription holding them); past it, new messages are refused with "
        "amqp:resource-limit-exceeded until consumers take some; -1 means no limit."),
    Key("mqgate.system.max_size", SizeLimit(), "-1",
        "Bytes of messages the broker holds (waiting or unacknowledged, counted like "
        "max_count); past it, "
        "new messages are refused until consumers take some; -1 means no limit."),
    # -- memory states (S2.6; FACTS 1.7; docs/memory.md) --------------------------------
    Key("mqgate.memory.limit", Size(), "0",
        "The memory budget of the messages the broker holds (their bytes plus "
        "mqgate.memory.message_overhead each), against which the memory states "
        "YELLOW, ORANGE and RED are reached; 0 means mqgate.memory.share of the "
        "machine's physical memory (the start-up log gives the figure)."),
    Key("mqgate.memory.share", Int(1, 100), "25",
        "Percent of the machine's physical memory that is the budget when "
        "mqgate.memory.limit is 0."),
    Key("mqgate.memory.message_overhead", Size(), "512",
        "Bytes counted for each message held on top of its own: the broker's objects "
        "that carry it."),
    Key("mqgate.yellow.threshold", Int(1, 100), "80",
        "Percent of mqgate.memory.limit at which the memory state becomes YELLOW "
        "(GREEN's threshold is 0)."),
    Key("mqgate.orange.threshold", Int(1, 100), "90",
        "Percent of mqgate.memory.limit at which the memory state becomes ORANGE."),
    Key("mqgate.red.threshold", Int(1, 100), "98",
        "Percent of mqgate.memory.limit at which the memory state becomes RED: new "
        "messages are refused (AMQP: no credit, and amqp:resource-limit-exceeded for a "
        "transfer sent on credit granted before; STOMP: the socket is not read) until "
        "it falls."),
    Key("mqgate.memory.hysteresis", Int(0, 99), "5",
        "Percentage points below a state's threshold at which the state is left, so "
        "that a broker hovering at a threshold does not flap."),
    Key("mqgate.green.count", Int(1), "5000",
        "Largest batch of credit a producer is granted while the memory state is "
        "GREEN (AMQP link credit; messages a STOMP connection sends before its reading "
        "pauses for a turn); never more than mqgate.amqp.producer_credit."),
    Key("mqgate.yellow.count", Int(1), "500",
        "Largest batch of credit a producer is granted while the memory state is "
        "YELLOW."),
    Key("mqgate.orange.count", Int(1), "50",
        "Largest batch of credit a producer is granted while the memory state is "
        "ORANGE."),
    Key("mqgate.memory.check_interval", Seconds(1, 3600), "1",
        "Seconds between two looks at the memory state while no message arrives: how "
        "soon producers held back at RED go on once consumers have taken messages."),
    Key("mqgate.memory.page_keep", Int(0, 10000000), "100",
        "At ORANGE and RED the bodies of persistent messages waiting in a queue are "
        "paged out of memory (the store has them), except those of the first this many "
        "of each queue, which stay so that its consumers never wait; the others are "
        "read back from the store as the queue's consumers come near them."),
    Key("mqgate.memory.page_reads", Int(1, 10000), "16",
        "Paged out message bodies read back from the store at the same time, per queue, "
        "at most."),
    Key("mqgate.system.max_destinations", Int(-1), "100000",
        "Queues, topics, temporary destinations and durable subscriptions the broker "
        "holds; past it, creating one on a client's request is refused with "
        "amqp:resource-limit-exceeded; -1 means no limit."),
    Key("mqgate.destination.max_name_length", Int(1, 1000000), "255",
        "Longest destination name or topic pattern, in characters; a longer one is "
        "refused on attach, subscribe or send."),
    Key("mqgate.topic.max_levels", Int(1, 10000), "32",
        "Most levels (dot-separated parts) of a topic name or subscription pattern; a "
        "deeper one is refused on attach, subscribe or send."),
    Key("mqgate.topic.default_persistence", Bool(), "false",
        "Whether a message published to a topic without the AMQP header durable=true "
        "is persistent (kept in the store for subscriptions that keep their messages, "
        "across a restart); a publisher's durable=true always makes it persistent. "
        "update dst -t t -n NAME -o defaultPersistence=true|false sets one topic's."),
    Key("mqgate.amqp.client_id_takeover", Choice(("mqlight", "always", "never")),
        "mqlight",
        "What a new AMQP connection does to a connection of the same user with the "
        "same container-id: 'mqlight' closes the older one (amqp:link:stolen) when "
        "either is an MQ Light client (see docs/mqlight.md) and the id is of that "
        "client's form; 'always' closes it for any client; 'never' lets both live."),
    Key("mqgate.amqp.max_frame_size", Int(512, 4294967295), "1048576",
        "Largest AMQP frame the broker accepts, offered in its open frame."),
    Key("mqgate.amqp.idle_timeout", Seconds(0, 86400), "60",
        "AMQP idle timeout offered in the open frame; 0 disables it."),
    Key("mqgate.amqp.producer_credit", Int(1, 1000000), "1000",
        "Link credit granted to a producer, topped up when half is used."),
    Key("mqgate.amqp.max_presettled_refusals", Int(0, 1000000), "100",
        "Pre-settled (at-most-once) messages a producer link may have refused in a row "
        "by a limit or a failing store (each is lost, counted and logged: AMQP cannot "
        "reject a settled transfer) before the broker detaches the link with "
        "amqp:resource-limit-exceeded; 0 never detaches."),
    Key("mqgate.amqp.channel_max", Int(0, 65535), "255",
        "Highest AMQP channel (session) number a connection may use."),
    # -- AMQP engine limits: what one connection may make the broker hold or do --
    Key("mqgate.amqp.handle_max", Int(0, 4294967295), "1023",
        "Highest AMQP link handle a session may use, announced in the broker's begin: "
        "at most this many plus one links per session. An attach above it closes the "
        "connection (amqp:connection:framing-error)."),
    Key("mqgate.amqp.min_heartbeat_interval", Int(1, 3600000), "1000",
        "Milliseconds; the broker sends AMQP heart-beats (empty frames) no more often "
        "than this, however small an idle timeout a client announces."),
    Key("mqgate.ingress.partial.max_bytes", Size(1), "128m",
        "Bytes of multi-frame AMQP messages not yet complete that one connection may have "
        "the broker hold, all its links together; passing it closes the connection "
        "(amqp:resource-limit-exceeded). Keep it above the largest message allowed "
        "(mqgate.ingress.*.max_message_size)."),
    Key("mqgate.ingress.buffer.budget", SizeLimit(), "1g",
        "Bytes of unfinished incoming messages the broker holds for all its clients "
        "together: multi-frame AMQP messages not yet complete and the SENDs of open STOMP "
        "transactions. A connection that would pass it is refused "
        "(amqp:resource-limit-exceeded, or an ERROR aborting the STOMP transaction); -1 "
        "means no limit beyond the per-connection ones."),
    Key("mqgate.stomp.heartbeat", Int(0, 3600000), "10000",
        "Milliseconds between the broker's STOMP heart-beats, and the interval it asks of "
        "clients (each side uses the larger of the two offers); 0 disables."),
    # -- STOMP: rendering AMQP messages as MESSAGE frames, transactions (S10.2, S10.4) --
    Key("mqgate.stomp.mapping.max_value_size", Size(64), "8k",
        "Longest header value a MESSAGE frame carries for an AMQP message (an application "
        "property written as text); a longer one is left out and named in the "
        "mqgate-unmapped header."),
    Key("mqgate.stomp.mapping.max_headers_size", Size(1024), "64k",
        "Most header text a MESSAGE frame carries for an AMQP message's properties, names "
        "included; the properties past it are left out and named in mqgate-unmapped."),
    Key("mqgate.stomp.mapping.max_json_values", Int(1, 100000000), "10000",
        "Most values an AMQP body that is not text or binary may hold to be written as JSON "
        "in a MESSAGE frame; a larger one is left out (an empty body) and named in "
        "mqgate-unmapped. Each value costs microseconds of the broker's one thread."),
    Key("mqgate.stomp.transaction.max_open", Int(1, 1000000), "16",
        "STOMP transactions one connection may have open at once; one more BEGIN gets an "
        "ERROR frame."),
    Key("mqgate.stomp.transaction.max_frames", Int(1, 100000000), "10000",
        "SEND, ACK and NACK frames one STOMP transaction may hold until COMMIT; past it the "
        "transaction is aborted with an ERROR frame."),
    Key("mqgate.stomp.transaction.max_bytes", Size(1024), "64m",
        "Message bytes (bodies and headers) one STOMP transaction may hold until COMMIT; "
        "past it the transaction is aborted with an ERROR frame."),
    Key("mqgate.stomp.transaction.max_connection_bytes", Size(1024), "64m",
        "Message bytes all the open STOMP transactions of one connection may hold "
        "together; past it the transaction that would pass it is aborted with an ERROR "
        "frame."),
    Key("mqgate.transaction.max_messages", Int(1, 100000000), "10000",
        "Messages sent plus messages acknowledged in one transaction (AMQP or STOMP); one "
        "more is refused when it is sent, and the transaction stays open."),
    Key("mqgate.transaction.max_bytes", Size(1024), "64m",
        "Bytes of the messages one transaction (AMQP or STOMP) may send before it "
        "commits; a message that would pass it is refused when it is sent."),
    Key("mqgate.transaction.max_per_connection", Int(1, 1000000), "16",
        "Transactions one connection may have open at once (AMQP declare, STOMP BEGIN); "
        "one more is refused."),
    Key("mqgate.transaction.timeout", Seconds(0, 86400), "300",
        "Seconds a transaction may stay unused before it is rolled back (its messages "
        "dropped, its acknowledged messages redelivered); its next use fails with a "
        "timeout error. 0: never."),
    Key("mqgate.authentication.basic.user_repository", Choice(("file", "ldap")), "file",
        "Where user names and passwords are checked."),
    Key("mqgate.user_repository.file.dirpath", Text(), "",
        "Directory of the password file; empty means VARHOME/instances/NAME/etc."),
    Key("mqgate.user_repository.file.filename", Text(), "passwd",
        "File name of the password file."),
    # -- access control (S4.1, S4.5; mqgate.security.access) ---------------------------
    Key("mqgate.accesscontrol.enabled", Bool(), "true",
        "Check every connection, producer, consumer and auto-creation against the "
        "access control file."),
    *(Key(f"mqgate.{service}.accesscontrol.enabled", _INHERITED_BOOL, "",
          f"Access control on the {service} service; empty means "
          "mqgate.accesscontrol.enabled.")
      for service in SERVICES),
    Key("mqgate.accesscontrol.file.dirpath", Text(), "",
        "Directory of the access control file; empty means VARHOME/instances/NAME/etc."),
    Key("mqgate.accesscontrol.file.filename", Text(), "accesscontrol.properties",
        "File name of the access control file, created with the shipped rules at the "
        "first start; edits take effect within a second, or at once with `mqgate cmd "
        "reload rules`."),
    *(Key(f"mqgate.{service}.accesscontrol.file.filename", Text(), "",
          f"Access control file of the {service} service, in the same directory; empty "
          "means mqgate.accesscontrol.file.filename.")
      for service in SERVICES),
    # -- the LDAP user repository (S4.4), user_repository=ldap; its password is read as
    # mqgate.user_repository.ldap.password from the password file only (S4.6) --
    Key("mqgate.user_repository.ldap.server", Text(), "",
        "Directory server as host:port (port 389, or 636 with ssl.enabled, when left "
        "out), or several separated by spaces, tried in order."),
    Key("mqgate.user_repository.ldap.principal", Text(), "",
        "DN the broker binds as to search for users and groups; its password is "
        "mqgate.user_repository.ldap.password in the password file "
        "(mqgate.passfile.enabled). Empty: search anonymously."),
    Key("mqgate.user_repository.ldap.base", Text(), "",
        "DN under which users are searched (the whole subtree), such as "
        "ou=people,dc=example,dc=com."),
    Key("mqgate.user_repository.ldap.uidattr", Text(), "uid",
        "Attribute holding the user name a client logs in with."),
    Key("mqgate.user_repository.ldap.usrfilter", Text(), "",
        "LDAP filter ANDed with the user search, such as (objectClass=inetOrgPerson); a "
        "user it excludes cannot log in (the directory's way of making a user inactive)."),
    Key("mqgate.user_repository.ldap.grpsearch", Bool(), "false",
        "Look up the user's groups in the directory for access control: a member of "
        "the directory group admin is in group admin. false: LDAP users are in no group."),
    Key("mqgate.user_repository.ldap.grpbase", Text(), "",
        "DN under which groups are searched; empty means the user base."),
    Key("mqgate.user_repository.ldap.gidattr", Text(), "cn",
        "Attribute holding a group's name."),
    Key("mqgate.user_repository.ldap.memattr", Text(), "uniqueMember",
        "Attribute of a group holding its members' DNs (uniqueMember for "
        "groupOfUniqueNames, member for groupOfNames)."),
    Key("mqgate.user_repository.ldap.grpfilter", Text(), "",
        "LDAP filter ANDed with the group search, such as (objectClass=groupOfNames)."),
    Key("mqgate.user_repository.ldap.timeout", Seconds(1, 600), "5",
        "Seconds the broker waits to connect to a directory server and for each of its "
        "answers before it tries the next server (or refuses the login as 'directory not "
        "answering'). Short (OpenMQ waits 280): a directory answers in milliseconds, a "
        "login does four or five operations, and the client gives up after "
        "mqgate.authentication.client.response.timeout."),
    Key("mqgate.user_repository.ldap.ssl.enabled", Bool(), "false",
        "Talk to the directory over LDAPS (TLS from the first byte), verifying its "
        "certificate and host name."),
    Key("mqgate.user_repository.ldap.ssl.ca_file", Text(), "",
        "PEM file of the CA certificates LDAPS trusts; empty means the system's CAs."),
    Key("mqgate.user_repository.ldap.max_connections", Int(1, 1024), "8",
        "Logins checked against the directory at once (each on a thread of its own with "
        "its own connections); more wait their turn."),
    Key(RETIRED_ANONYMOUS_KEY, Text(), "",
        "Replaced by the per-service mqgate.SERVICE.allow_anonymous (default false); "
        "setting it stops the broker at start-up with an error naming the "
        "replacement."),
    # -- how clients log in, per service (S4.2, S4.7) -----------------------------------
    *(row for service in ("jms", "admin", "ssljms", "ssladmin", "stomp")
      for row in _login_rows(service)),
    Key("mqgate.authentication.client.response.timeout", Seconds(0), "20",
        "Seconds a client has from connecting until it is logged in (AMQP: SASL and open; "
        "STOMP: CONNECTED); past it the connection is closed. Short (OpenMQ waits 180), "
        "because a socket that has not logged in holds a slot and memory for nothing, "
        "and a real client logs in within a second or two; 20 leaves room for a slow "
        "network and for failed-login delays."),
    # -- before login: what an unauthenticated client may cost (S4.2, S10.4) --
    Key("mqgate.authentication.client.max_bytes", Size(512), "16k",
        "Bytes a client may send before it is logged in, on either protocol: a STOMP "
        "CONNECT frame and anything pipelined behind it, or the AMQP header, SASL frames "
        "and whatever arrives while the password is checked. Past it a STOMP client gets "
        "an ERROR and an AMQP client a failed SASL outcome (or a close with "
        "amqp:resource-limit-exceeded), and the connection is dropped. A login is a few "
        "hundred bytes, a bearer token as password a few KiB."),
    Key("mqgate.authentication.max_unauthenticated", Int(1, 1000000), "128",
        "Connections per service that may be open without having logged in yet. While "
        "they are all taken the service stops accepting, and new sockets wait in the "
        "listen backlog for a login to finish; if none does for half a second (5 s "
        "while some are logging in), new sockets are closed at once with an error. Per "
        "service, so that idle sockets on one service never take the admin service's "
        "room."),
    Key("mqgate.authentication.max_pending_checks", Int(1, 100000), "32",
        "Password checks (a deliberately slow hash each) running or queued at most, per "
        "service; a login past it is refused at once as 'broker busy, try again later'."),
    Key("mqgate.authentication.check_threads", Int(0, 256), "0",
        "Threads that run password checks; 0 means one fewer than the CPUs (at least "
        "one), so that a login flood always leaves a core to the broker's other work."),
    Key("mqgate.authentication.failures.free", Int(0, 1000000), "5",
        "Failed logins from one address that cost nothing (a token bucket per address, "
        "given one back every window/free seconds); once they are spent, each further "
        "attempt from it waits half a second, doubling up to the maximum delay."),
    Key("mqgate.authentication.failures.window", Seconds(1, 86400), "60",
        "Seconds after its last failed login that an address is forgiven entirely."),
    Key("mqgate.authentication.failures.max_delay", Seconds(1, 3600), "10",
        "Longest wait, in seconds, imposed between two login attempts from an address "
        "with failed logins; keep it below the client response timeout."),
    Key("mqgate.authentication.failures.max_addresses", Int(1, 10000000), "10000",
        "Addresses with failed logins remembered at most (the least recent forgotten "
        "first)."),
    # -- connection storms: the authentication cache, the listen backlog (S4.2) --
    Key("mqgate.authentication.cache.enabled", Bool(), "true",
        "Remember successful logins in memory (keyed by a salted digest of the user name "
        "and password, never the password), so that clients reconnecting all at once "
        "after a restart cost one password check per user, not one each. Failed logins "
        "are never remembered."),
    Key("mqgate.authentication.cache.ttl", Seconds(1, 86400), "60",
        "Seconds a successful login is remembered. A change to the password file empties "
        "the cache at once; a password changed or a user removed in an LDAP directory is "
        "noticed within this time."),
    Key("mqgate.authentication.cache.max_entries", Int(1, 10000000), "10000",
        "Successful logins remembered at most (the least recently used forgotten first)."),
    *(Key(f"mqgate.{service}.backlog", Int(1, 65535), "4096",
          f"Connections the kernel holds for the {service} service until the broker "
          "accepts them (the listen backlog; Linux caps it at net.core.somaxconn). Too "
          "small a backlog leaves clients that connect all at once without an answer for "
          "seconds while their connection attempts are retried.")
      for service, (_kind, protocol) in SERVICES.items() if protocol in ("tcp", "tls")),
    # -- persistence: the store and the file store's knobs (S3.2, S3.3, S3.4) --
    Key("mqgate.persist.store", Choice(("file", "jdbc")), "file",
        "Where persistent messages, destinations and durable subscriptions are kept: "
        "file (the journal under VARHOME/instances/NAME/filestore) or jdbc (the SQL "
        "store, mqgate.persist.jdbc.*)."),
    Key("mqgate.persist.file.sync.enabled", Bool(), "false",
        "true: a producer's persistent message is acknowledged only once it is on disk "
        "(fsync; concurrent writes share one fsync); false: once the operating system "
        "has it, which survives a broker crash but not a machine crash."),
    Key("mqgate.persist.file.message.max_record_size", Size(1), "1m",
        "Messages larger than this are kept in files of their own instead of the "
        "journal."),
    Key("mqgate.persist.file.destination.message.filepool.limit", Int(0, 100000), "100",
        "Free message files kept for reuse per destination."),
    Key("mqgate.persist.file.message.filepool.cleanratio", Int(0, 100), "0",
        "Percent of the message files returned to the pool that are zeroed first."),
    Key("mqgate.persist.file.message.cleanup", Bool(), "false",
        "Delete the pooled message files when the broker stops."),
    Key("mqgate.persist.file.journal.segment_size", Size(4096), "64m",
        "Size of one journal segment file; a full segment is sealed and a new one "
        "begun, and compaction rewrites sealed segments one at a time."),
    Key("mqgate.persist.file.journal.compact_threshold", Int(0, 100), "50",
        "Compact the journal online when this percent of it is dead (removed "
        "messages), rewriting the sealed segments less live than that; 0 turns "
        "automatic compaction off (the admin command still works)."),
    Key("mqgate.persist.retry_interval", Seconds(1, 3600), "1",
        "While the message store cannot write (a full disk, an I/O error, the database "
        "server gone), seconds between its attempts to write again; persistent "
        "messages are refused meanwhile and accepted again as soon as one works."),
    # -- what one connection may have waiting for the store (S2.7; docs/limits.md) --
    Key("mqgate.persist.max_unstored_messages", Int(1, 1000000), "1000",
        "Messages one connection's producers may have waiting for the store (persistent "
        "messages not yet written, and those sent after them); past it the broker stops "
        "reading a STOMP connection and withholds an AMQP connection's producer credit "
        "until the store has written a quarter of them."),
    Key("mqgate.persist.max_unstored_bytes", Size(1), "16m",
        "Bytes of the messages one connection may have waiting for the store, held back "
        "past it like mqgate.persist.max_unstored_messages."),
    # -- the SQL store, mqgate.persist.store=jdbc (S3.5, S12.1) --
    Key("mqgate.persist.jdbc.dbVendor", Choice(("sqlite", "postgresql")), "sqlite",
        "Database of the SQL store: sqlite (embedded, one file) or postgresql (a server, "
        "through psycopg)."),
    Key("mqgate.persist.jdbc.opendburl", Text(), "",
        "Database the SQL store opens. sqlite: a file path, relative to "
        "VARHOME/instances/NAME; empty means VARHOME/instances/NAME/dbstore/mqgate.sqlite. "
        "postgresql: a libpq connection string or postgresql:// URI, without a password; "
        "empty means libpq's defaults (PGHOST, PGDATABASE ...)."),
    Key("mqgate.persist.jdbc.createdburl", Text(), "",
        "postgresql: a database `mqgate dbmgr create` connects to (e.g. dbname=postgres) "
        "to create the opendburl database when it does not exist; empty means it must "
        "exist. sqlite creates its file itself."),
    Key("mqgate.persist.jdbc.closedburl", Text(), "",
        "Accepted for OpenMQ configurations and unused: neither SQLite nor PostgreSQL "
        "needs a URL to close a database."),
    Key("mqgate.persist.jdbc.user", Text(), "",
        "postgresql: the database user; empty means libpq's default (PGUSER, else the "
        "OS user). `mqgate dbmgr -u` overrides it."),
    Key("mqgate.persist.jdbc.needpassword", Bool(), "false",
        "postgresql: the user needs a password. It is read as mqgate.persist.jdbc.password "
        "from the password file (mqgate.passfile.enabled) or asked for at a terminal, "
        "never from this file, a URL or the command line."),
    Key("mqgate.persist.jdbc.brokerid",
        Text(re.compile(r"[A-Za-z0-9_]{0,32}"), "up to 32 letters, digits or underscores"),
        "",
        "Suffix of this broker's table names (MQMSG41_<brokerid> ...), so brokers can "
        "share one database; compared without regard to case; empty means the instance "
        "name."),
    Key("mqgate.persist.jdbc.sync.enabled", Bool(), "true",
        "true: a producer's persistent message is acknowledged once its transaction is "
        "committed and flushed to disk (SQLite synchronous=FULL, PostgreSQL "
        "synchronous_commit=on); false: once committed without waiting for the flush, "
        "which survives a broker crash but not a crash of the machine or the database "
        "server. Writes of one reactor turn share one commit either way."),
    *_jdbc_table_rows(),
    # -- per-client egress and ingress (S9) --
    Key("mqgate.ingress.guaranteed.max_message_size", Size(1), "30000000",
        "Largest persistent or unsettled message a client may send; a bigger one is "
        "refused and its client disconnected (CLIENT_CLIENT_MESSAGE_TOO_BIG)."),
    Key("mqgate.ingress.direct.max_message_size", Size(1), "64m",
        "Largest non-persistent, pre-settled message a client may send."),
    Key("mqgate.egress.buffer.budget", Size(1 << 20), "1g",
        "Bytes all clients' egress queues may hold together: 100 % of the egress "
        "buffer load factor."),
    Key("mqgate.egress.load_factor.set", Int(1, 100), "80",
        "Load factor percentage at which the set event is logged."),
    Key("mqgate.egress.load_factor.clear", Int(0, 100), "60",
        "Load factor percentage below which, after a set event, the clear event is "
        "logged."),
    Key("mqgate.egress.slow_subscriber.threshold", Int(0, 100), "50",
        "Percentage of the last minute a client may spend with data queued and its "
        "connection unable to take it before it counts as a slow subscriber."),
    # -- metrics topics: mq.metrics.* published by the broker (S5.3, FACTS 1.5) --
    Key("mqgate.metrics.topic.enabled", Bool(), "true",
        "Publish samples on the metrics topics (mq.metrics.broker, mq.metrics.jvm, "
        "mq.metrics.destination_list, mq.metrics.destination.queue.NAME and "
        ".topic.NAME) to their subscribers; when false, subscribing to them is refused."),
    Key("mqgate.metrics.topic.interval", Seconds(1, 86400), "60",
        "Seconds between two samples on each metrics topic that has a subscriber (a "
        "new subscriber gets one at once)."),
    Key("mqgate.metrics.topic.timetolive", Seconds(0, 31536000), "300",
        "Seconds a metrics sample lives before it expires unread; 0 means never."),
    Key("mqgate.metrics.topic.persist", Bool(), "false",
        "Send metrics samples as persistent messages (a durable subscriber then keeps "
        "them over a restart)."),
    # -- connection services: ping, TLS material, password file (S1.7, S1.8, S4.6) --
    Key("mqgate.ping.interval", Int(-1, 86400), "120",
        "Seconds between probes of every connection (an AMQP empty frame, a STOMP "
        "heart-beat); 0 or -1 disables."),
    Key("mqgate.keystore.file.dirpath", Text(), "",
        "Directory of the TLS key pair (key.pem, cert.pem) made by `mqgate keytool`; "
        "empty means VARHOME/instances/NAME/etc/keystore."),
    Key("mqgate.passfile.enabled", Bool(), "false",
        "Read passwords (mqgate.keystore.password ...) from the password file instead of "
        "asking for them."),
    Key("mqgate.passfile.dirpath", Text(), "",
        "Directory of the password file; empty means VARHOME/instances/NAME/etc."),
    Key("mqgate.passfile.name", Text(), "passfile",
        "File name of the password file."),
    # -- the broker's log (S5.2; OpenMQ's imq.log.* keys) --
    Key("mqgate.log.level", Choice(("ERROR", "WARNING", "INFO", "DEBUG")), "INFO",
        "Least severe log events written: each level includes the more severe ones "
        "(INFO writes ERROR, WARNING and INFO events; DEBUG is for tracking a problem "
        "down)."),
    Key("mqgate.log.console.output", _LOG_OUTPUT, "ALL",
        "Categories written to the console (twistd -n: the stream below; twistd "
        "--logfile: that file): '|'-separated ERROR, WARNING, INFO, DEBUG, or ALL or "
        "NONE. Exactly the categories named: INFO alone writes no errors."),
    Key("mqgate.log.console.stream", Choice(("stdout", "stderr", "OUT", "ERR")),
        "stdout",
        "Stream the console log goes to when twistd runs in the foreground (OUT and "
        "ERR, OpenMQ's words, are the same as stdout and stderr)."),
    Key("mqgate.log.file.output", _LOG_OUTPUT, "ALL",
        "Categories written to the log file, as for the console; NONE writes no file."),
    Key("mqgate.log.file.dirpath", Text(), "",
        "Directory of the log file; empty means VARHOME/instances/NAME/log."),
    Key("mqgate.log.file.filename", Text(re.compile(r"[^/\\]+"), "a file name"),
        "log.txt",
        "Name of the log file; old files are FILE.1 (the newest), FILE.2 ..."),
    Key("mqgate.log.file.rolloverbytes", SizeLimit(1024), "10m",
        "Start a new log file before one would grow past this size; -1 for never."),
    Key("mqgate.log.file.rolloversecs", Int(-1, 315360000), "604800",
        "Start a new log file once the current one is this many seconds old (counted "
        "from when this broker process began it); -1 or 0 for never. 604800 is a "
        "week."),
    Key("mqgate.log.file.maxfiles", Int(0, 1000), "9",
        "Old log files kept; past this the oldest is deleted."),
    Key("mqgate.log.file.format", Choice(("text", "json")), "text",
        "Layout of the log file: text lines (as the console's) or JSON lines, one "
        "object per event with time, level, namespace, message and traceback."),
    # -- the broker's metrics in its log (S5.1; mqgate.metrics.log) --
    Key("mqgate.metrics.enabled", Bool(), "true",
        "Write the broker's metrics lines every mqgate.metrics.interval seconds; false "
        "writes none. The figures are kept either way: `mqgate cmd metrics` and "
        "/metrics answer whatever this says."),
    Key("mqgate.metrics.interval", Int(0, 86400), "0",
        "Seconds between the broker's metrics lines in its log (messages and bytes in "
        "and out, held, connections, and the rates since the line before); 0 writes "
        "none."),
    # -- the audit trail (S4.8) --
    Key("mqgate.audit.enabled", Bool(), "true",
        "Write the audit trail: one JSON line per login (ok or failed), admin request, "
        "destination created or destroyed, access-control denial and rule reload. On by "
        "default: a broker put on a network should say who did what."),
    Key("mqgate.audit.file", Text(), "audit.log",
        "Where the audit trail goes: a file (a relative name is in "
        "VARHOME/instances/NAME/log), owner-only, rotated past 1 MB to FILE.1, FILE.2 ...; "
        "empty means the broker's own log."),
    Key("mqgate.audit.max_pending", Int(1, 10000000), "10000",
        "Audit records that may wait for the disk at once; past it a record is dropped "
        "and counted, and the count is logged (a disk that cannot keep up never makes "
        "the broker grow)."),
)


def _index(rows):
    """Map each key name to its row, refusing duplicates and non-canonical names."""
    schema = {}
    for row in rows:
        if row.name in schema or not row.name.startswith(CANONICAL_PREFIX):
            raise AssertionError(f"bad schema row {row.name!r}")
        schema[row.name] = row
    return schema


SCHEMA = _index(KEYS)

# The port key of each service that has one (used by the --port command-line option).
SERVICE_PORT_KEYS = {
    service: f"mqgate.{service}.{protocol}.port"
    for service, (_kind, protocol) in SERVICES.items()
    if f"mqgate.{service}.{protocol}.port" in SCHEMA
}

# S1.4: the shipped file fixes the well-known AMQP port so off-the-shelf clients connect
# without the port mapper.
SHIPPED_OVERRIDES = {
    "mqgate.hostname": "127.0.0.1",
    "mqgate.jms.tcp.port": "5672",
    "mqgate.stomp.tcp.port": "61613",
    # The HTTP admin API on the port of Artemis' web console.
    "mqgate.httpadmin.http.port": "8161",
    "mqgate.service.activelist": "jms,admin,stomp,httpadmin",
}

REGENERATE = (
    "python -c \"from mqgate.config.schema import *; "
    "print(render_properties(SHIPPED_OVERRIDES), end='')\" > etc/mqgate.properties")

_HEADER = f"""\
# mqgate configuration (Java .properties syntax).
#
# Every key mqgate understands is listed below with what it means, what it accepts and
# its default.  A line starting with '#' is a comment: a commented-out key shows the
# default, and removing the '#' and changing the value overrides it.  Every key may also
# be spelled imq.... (the OpenMQ spelling), and overridden on the command line with
# 'twistd mqgate -D key=value'.  Unknown keys are reported at start-up.
#
# This file is generated from mqgate/config/schema.py; after changing the schema run
#   {REGENERATE}
"""


def _comment(text):
    """Return text as comment lines of at most 88 characters."""
    return textwrap.wrap(text, 88, initial_indent="# ", subsequent_indent="# ")


def render_properties(overrides=None):
    """Return the text of a documented properties file.

    Every key of the schema is written with its doc, its allowed values and its default;
    a key is commented out unless ``overrides`` gives it a value.

    Args:
        overrides: optional mapping of canonical key -> value text to set (uncommented).

    Raises:
        KeyError: an override names a key that is not in the schema.
    """
    overrides = dict(overrides or {})
    for name in overrides:
        if name not in SCHEMA:
            raise KeyError(name)
    blocks = [_HEADER]
    for row in KEYS:
        lines = _comment(row.doc) + _comment(f"Allowed: {row.type.allowed}.")
        lines.append(f"# Default: {row.default or '(empty)'}")
        if row.name in overrides:
            lines.append(f"{row.name}={escape_value(overrides[row.name])}")
        else:
            lines.append(f"#{row.name}={escape_value(row.default)}")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)

