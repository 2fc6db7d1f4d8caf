"""
The port mapper table (S1.3): what a client connecting to port 7676 reads.

Wire format (FACTS 1.1, verified in the source system's PortMapperTable/PortMapperEntry),
US-ASCII, every line ending in a bare LF::

    101 <broker instance name> 301
    <name> <protocol> <type> <port>[ [k1=v1,k2=v2]]
    ...
    .

The first number is the port mapper version (101); the third token is the packet
version (301). A client reads entries until a line that is exactly C{.}, an empty
line, or the end of the data.

This module is pure (docs/design.md): the broker renders with L{render_table}, the client
library parses with L{parse_table} and reads addresses with L{parse_mq_url}.
"""

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from mqgate.errors import MqgateError, RemoteProtocolError

__all__ = [
    "PORTMAPPER_VERSION", "PACKET_VERSION", "DEFAULT_PORT", "MAX_LINE",
    "ServiceEntry", "PortMapperError", "MqAddress", "MqAddressError",
    "render_table", "parse_table", "table_complete", "parse_mq_url",
]

#: The port mapper protocol version, first token of the table (FACTS 1.1).
PORTMAPPER_VERSION = 101
#: The packet version the source broker announces (FACTS 1.1: Packet.CURRENT_VERSION).
PACKET_VERSION = "301"
#: The port mapper's well-known port (S1.3).
DEFAULT_PORT = 7676
#: The source client's line buffer (FACTS 1.1). It silently truncates longer lines; we
#: refuse them instead, so that a corrupted table is an error rather than a wrong port.
MAX_LINE = 2048

_TERMINATOR = "."
_TOKEN_FORBIDDEN = re.compile(r"[\s\[\]]")
_KEY_FORBIDDEN = re.compile(r"[\s\[\],=]")
_VALUE_FORBIDDEN = re.compile(r"[,\]]")


class PortMapperError(RemoteProtocolError):
    """The port mapper's reply cannot be read.

    The condition is L{BAD_VERSION} when the first token is not 101 (the source client's
    C{X_BAD_PORTMAPPER_VERSION}), L{BAD_TABLE} for any other malformed reply.
    """

    BAD_VERSION = "mqgate:portmapper:bad-version"
    BAD_TABLE = "mqgate:portmapper:bad-table"
    condition = BAD_TABLE


class MqAddressError(MqgateError, ValueError):
    """A broker address (C{mq://host:port/service}) cannot be used.

    @ivar address: the address as given.
    @ivar reason: what is wrong with it.
    """

    def __init__(self, address, reason):
        self.address = address
        self.reason = reason
        super().__init__(f"bad broker address {address!r}: {reason}")


def _check_text(what, value, forbidden):
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")
    if not value.isascii() or not value.isprintable() or forbidden.search(value):
        raise ValueError(f"{what} {value!r} must be printable US-ASCII without "
                         f"{forbidden.pattern}")


@dataclass(frozen=True)
class ServiceEntry:
    """One line of the table: a running service and where it listens.

    @ivar name: the service name (C{jms}, C{admin}, C{portmapper}, ...).
    @ivar protocol: its transport (C{tcp}, C{tls}, C{http}, C{https}, ...).
    @ivar type: C{NORMAL}, C{ADMIN}, C{PORTMAPPER}, ...
    @ivar port: the bound port (0 for services without one).
    @ivar properties: extra C{k=v} pairs, rendered in insertion order.
    @raise ValueError: a field that cannot be written on one line of the table.
    """

    name: str
    protocol: str
    type: str
    port: int
    properties: dict = field(default_factory=dict)

    def __post_init__(self):
        for what in ("name", "protocol", "type"):
            _check_text(f"service entry {what}", getattr(self, what), _TOKEN_FORBIDDEN)
        if isinstance(self.port, bool) or not isinstance(self.port, int) \
                or not 0 <= self.port <= 65535:
            raise ValueError(f"service entry {self.name!r}: port must be an int in "
                             f"0..65535, not {self.port!r}")
        for key, value in self.properties.items():
            _check_text(f"service entry {self.name!r} property key", key, _KEY_FORBIDDEN)
            if value != "":
                _check_text(f"service entry {self.name!r} property {key!r}", value,
                            _VALUE_FORBIDDEN)

    def render(self):
        """This entry as one table line, without the line end."""
        line = f"{self.name} {self.protocol} {self.type} {self.port}"
        if self.properties:
            pairs = ",".join(f"{k}={v}" for k, v in self.properties.items())
            line += f" [{pairs}]"
        return line


def render_table(broker_name, entries, pm_version=PORTMAPPER_VERSION,
                 packet_version=PACKET_VERSION):
    """The bytes the port mapper writes to every client (S1.3, FACTS 1.1).

    @param broker_name: the broker instance name (one token).
    @param entries: L{ServiceEntry} values, in the order clients should see them.
    @return: the version line, one line per entry, then C{.}; US-ASCII, LF line ends.
    @raise ValueError: a broker name or version that is not one token, or two entries
        with the same name (the source table keys entries by name).
    """
    _check_text("broker name", broker_name, _TOKEN_FORBIDDEN)
    _check_text("packet version", str(packet_version), _TOKEN_FORBIDDEN)
    seen = set()
    lines = [f"{int(pm_version)} {broker_name} {packet_version}"]
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"service {entry.name!r} appears twice in the table")
        seen.add(entry.name)
        lines.append(entry.render())
    lines.append(_TERMINATOR)
    return ("\n".join(lines) + "\n").encode("ascii")


def _split_lines(data):
    """The lines of C{data}, LF-separated, a trailing CR dropped, each checked."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"port mapper data must be bytes, not {type(data).__name__}")
    raw = bytes(data).split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()       # the LF that ends the last line does not start a new one
    lines = []
    for number, line in enumerate(raw, 1):
        if len(line) > MAX_LINE:
            raise PortMapperError(f"line {number} is longer than {MAX_LINE} bytes")
        try:
            lines.append(line.decode("ascii").rstrip("\r"))
        except UnicodeDecodeError:
            raise PortMapperError(f"line {number} is not US-ASCII: {line[:60]!r}")
    return lines


def _parse_version_line(line):
    tokens = line.split()
    first = tokens[0] if tokens else ""
    if first != str(PORTMAPPER_VERSION):
        raise PortMapperError(
            f"bad port mapper version {first!r}, expected {PORTMAPPER_VERSION}",
            condition=PortMapperError.BAD_VERSION)
    if len(tokens) < 3:
        raise PortMapperError(f"version line {line!r} lacks the broker name or the "
                              "packet version")
    return tokens[1], tokens[2]


def _parse_properties(line, start):
    end = line.find("]", start)
    if end < 0:
        raise PortMapperError(f"property list not closed by ']' in {line!r}")
    properties = {}
    for pair in line[start + 1:end].split(","):
        key, eq, value = pair.strip().partition("=")
        if eq:              # the source client skips pairs without '=' too
            properties[key] = value
    return properties


def _parse_entry(line):
    start = line.find("[")
    head = line if start < 0 else line[:start]
    tokens = head.split()
    if len(tokens) < 4 or not tokens[3].isdigit():
        raise PortMapperError(f"bad service line {line!r}: expected "
                              "'name protocol type port [k=v,...]'")
    properties = _parse_properties(line, start) if start >= 0 else {}
    try:
        return ServiceEntry(tokens[0], tokens[1], tokens[2], int(tokens[3]), properties)
    except ValueError as e:
        raise PortMapperError(f"bad service line {line!r}: {e}")


def parse_table(data):
    """Read a port mapper reply, as the client library does (FACTS 1.1).

    @param data: everything read from the port mapper (up to its close).
    @return: C{(broker_name, packet_version, entries)}; C{entries} is a list of
        L{ServiceEntry} in table order. A repeated name replaces the earlier entry
        and moves to the end, as in the source client's table.
    @raise PortMapperError: empty data, a first token other than 101 (condition
        C{BAD_VERSION}), or a line that is not a service entry.
    """
    lines = _split_lines(data)
    if not lines:
        raise PortMapperError("the port mapper closed without sending anything")
    broker_name, packet_version = _parse_version_line(lines[0])
    entries = {}
    for line in lines[1:]:
        if line in (_TERMINATOR, ""):
            break
        entry = _parse_entry(line)
        entries.pop(entry.name, None)
        entries[entry.name] = entry
    return broker_name, packet_version, list(entries.values())


def table_complete(data):
    """Whether C{data} already holds the whole table (its terminator line is in).

    Lets a client stop reading before the broker closes; at end of data the client
    parses whatever it has.
    """
    lines = bytes(data).split(b"\n")[1:-1]     # complete lines after the version line
    return any(line.rstrip(b"\r") in (b".", b"") for line in lines)


class MqAddress(NamedTuple):
    """A parsed broker address.

    @ivar host: the host to connect to.
    @ivar port: the port mapper's port (C{direct} false) or the service's own port.
    @ivar service: the connection service name (C{jms}, C{ssljms}, ...).
    @ivar direct: true for C{mqtcp:}/C{mqssl:}: connect to C{port} without asking
        the port mapper.
    @ivar tls: true for C{mqssl:}. (For C{mq:} the port mapper's protocol column
        says whether the service speaks TLS.)
    """

    host: str
    port: int
    service: str
    direct: bool = False
    tls: bool = False


#: scheme -> (direct, tls, default service).
_SCHEMES = {"mq": (False, False, "jms"), "mqtcp": (True, False, "jms"),
            "mqssl": (True, True, "ssljms")}
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_HOST_PORT_RE = re.compile(r"^(\[[^\]]*\]|[^:/\[\]]*)(?::([^/]*))?$")
#: A port as written in an address: ASCII digits only (str.isdigit() also takes "²"
#: and other digits int() refuses), and few enough that int() is cheap and cannot
#: hit Python's limit on digits.
_PORT_RE = re.compile(r"[0-9]{1,5}")


def _split_scheme(text):
    match = _SCHEME_RE.match(text)
    if match and match.group(1).lower() in _SCHEMES:
        return match.group(1).lower(), text[match.end():]
    if match and match.group(2):
        raise MqAddressError(text, f"unsupported scheme {match.group(1)!r}; use "
                             "mq://, mqtcp:// or mqssl:// (the HTTP tunnel takes a URL)")
    return "mq", text           # "host:port/svc" without a scheme means mq://


def parse_mq_url(text):
    """Read a broker address: C{[mq|mqtcp|mqssl]://[host][:port][/service]}.

    Defaults (the source client's, for C{mq:}): host C{localhost}, port 7676, service
    C{jms}. The direct schemes name the service's own port, so it is required there;
    their default service is C{jms} (C{mqtcp}) or C{ssljms} (C{mqssl}). An IPv6 host
    is written in brackets: C{mq://[::1]:7676/jms}.

    @return: an L{MqAddress} (C{host, port, service, direct, tls}).
    @raise MqAddressError: naming the address and what is wrong with it.
    """
    if not isinstance(text, str):
        raise MqAddressError(text, "an address is a string")
    scheme, rest = _split_scheme(text.strip())
    direct, tls, default_service = _SCHEMES[scheme]
    hostport, _, service = rest.partition("/")
    match = _HOST_PORT_RE.match(hostport)
    if match is None:
        raise MqAddressError(text, f"cannot read host and port from {hostport!r}")
    host, port_text = match.group(1).strip("[]") or "localhost", match.group(2)
    if port_text is None or port_text == "":
        if direct:
            raise MqAddressError(text, f"{scheme}: connects to the service port "
                                 "directly, so the port is required")
        port = DEFAULT_PORT
    elif _PORT_RE.fullmatch(port_text) and 0 < int(port_text) <= 65535:
        port = int(port_text)
    else:
        raise MqAddressError(text, f"port {port_text!r} is not a number in 1..65535")
    service = service.strip("/") or default_service
    if _TOKEN_FORBIDDEN.search(service) or "/" in service:
        raise MqAddressError(text, f"service name {service!r} is not one word")
    return MqAddress(host, port, service, direct, tls)
