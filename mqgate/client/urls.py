"""
Broker URLs and the connection options of the client library (S6.1, S6.2): pure parsing,
no I/O.

A URL names one broker and how to reach it:

    amqp://[user[:password]@]host[:port]        AMQP over TCP (port 5672)
    amqps://[user[:password]@]host[:port]       AMQP over TLS (port 5671), verified
    mq://host[:7676][/SERVICE]                  ask the broker's port mapper (FACTS 1.1)
                                                where SERVICE (default jms) listens
    http://host[:port]/PATH, https://...        the HTTP tunnel (S10.3)
    ws://host[:port]/PATH, wss://...            AMQP over WebSocket (subprotocol amqp)

An address list is several URLs (a list, or one string with commas, as the source
system's C{imqAddressList}); the client tries them in order (S6.1 failover).

The source system names its connection factory properties C{imqXxx}; they are accepted
in a C{properties} dict beside the snake_case keyword arguments (L{ClientOptions}).
"""

import dataclasses
import re
from urllib.parse import unquote, urlsplit

from mqgate.errors import MqgateError
from mqgate.portmap.table import MqAddressError, parse_mq_url

__all__ = ["BrokerUrl", "ClientOptions", "UrlError", "parse_url", "parse_address_list",
           "options_from"]

#: scheme -> default port.
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "http": 80, "https": 443, "ws": 80,
                 "wss": 443}
SCHEMES = ("amqp", "amqps", "mq", "http", "https", "ws", "wss")
_PORT_RE = re.compile(r"[0-9]{1,5}")


class UrlError(MqgateError, ValueError):
    """A URL or an option cannot be used; the text names it and what would do."""


@dataclasses.dataclass(frozen=True)
class BrokerUrl:
    """One parsed broker URL.

    @ivar text: the URL as given, its password (if any) masked: safe to print.
    @ivar url: the URL as given, without user information (for the tunnel and
        WebSocket endpoints).
    @ivar service: for C{mq:}, the connection service to look up.
    """

    scheme: str
    host: str
    port: int
    path: str = ""
    user: str = None
    password: str = dataclasses.field(default=None, repr=False)
    service: str = None
    text: str = ""
    url: str = ""

    @property
    def tls(self):
        return self.scheme in ("amqps", "https", "wss")

    def __str__(self):
        return self.text


def _mask(text, password):
    if not password:
        return text
    return text.replace(":" + password + "@", ":***@", 1)


def parse_url(text):
    """Read one broker URL (see the module doc).

    @raise UrlError: naming the URL and what is wrong with it.
    """
    if not isinstance(text, str) or not text.strip():
        raise UrlError(f"broker URL {text!r}: give a URL such as amqp://host:5672")
    text = text.strip()
    scheme, sep, _ = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise UrlError(f"broker URL {text!r}: unsupported scheme; use one of "
                       + ", ".join(s + "://" for s in SCHEMES))
    if scheme == "mq":
        try:
            address = parse_mq_url(text)
        except MqAddressError as e:
            raise UrlError(f"broker URL {text!r}: {e}") from None
        return BrokerUrl("mq", address.host, address.port, service=address.service,
                         text=text, url=text)
    parts = urlsplit(text)
    try:
        port_text = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
        if port_text and not (_PORT_RE.fullmatch(port_text)
                              and 0 < int(port_text) <= 65535):
            raise ValueError
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise UrlError(f"broker URL {_mask(text, parts.password)!r}: the port is not a "
                       "number in 1..65535") from None
    host = parts.hostname
    if not host:
        raise UrlError(f"broker URL {_mask(text, parts.password)!r}: no host name")
    if scheme in ("amqp", "amqps") and parts.path not in ("", "/"):
        raise UrlError(f"broker URL {_mask(text, parts.password)!r}: an {scheme} URL has "
                       "no path (the address to send to is given separately)")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    netloc = parts.netloc.rpartition("@")[2]
    bare = parts._replace(netloc=netloc).geturl()
    return BrokerUrl(scheme, host, port, parts.path or "", user, password,
                     text=_mask(text, parts.password), url=bare)


def parse_address_list(value):
    """A list of URLs from a list or a comma-separated string (C{imqAddressList}).

    @raise UrlError: an empty list, or a URL that cannot be read.
    """
    if isinstance(value, BrokerUrl):
        return [value]
    if isinstance(value, str):
        items = [item for item in (part.strip() for part in value.split(",")) if item]
    else:
        items = list(value or ())
    if not items:
        raise UrlError("the address list is empty: give at least one broker URL")
    return [item if isinstance(item, BrokerUrl) else parse_url(item) for item in items]


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    """What a connection does beyond its URLs, with the source system's defaults.

    @ivar reconnect_enabled: C{imqReconnectEnabled}: after a connection breaks, connect
        again (to the next address of the list, and round) and redo the links.
    @ivar reconnect_attempts: C{imqReconnectAttempts}: rounds through the address list
        after a break before giving up; -1 for no end.
    @ivar reconnect_interval: C{imqReconnectInterval}, seconds between two rounds (the
        source system counts milliseconds: the imq property is read as milliseconds).
    @ivar consumer_flow_limit: C{imqConsumerFlowLimit}: messages a consumer holds at most
        (delivered, not yet settled).
    @ivar consumer_flow_threshold: C{imqConsumerFlowThreshold}, percent: the next batch
        is asked for when what a consumer holds and has asked for falls to this share.
    @ivar connection_flow_limit_enabled: C{imqConnectionFlowLimitEnabled}.
    @ivar connection_flow_limit: C{imqConnectionFlowLimit}: messages held by all
        consumers of the connection together, at most, when enabled.
    """

    reconnect_enabled: bool = False
    reconnect_attempts: int = 0
    reconnect_interval: float = 3.0
    consumer_flow_limit: int = 1000
    consumer_flow_threshold: int = 50
    connection_flow_limit_enabled: bool = False
    connection_flow_limit: int = 1000

    def __post_init__(self):
        _check_int("consumer_flow_limit", self.consumer_flow_limit, 1)
        _check_int("consumer_flow_threshold", self.consumer_flow_threshold, 0, 100)
        _check_int("connection_flow_limit", self.connection_flow_limit, 1)
        _check_int("reconnect_attempts", self.reconnect_attempts, -1)
        if not isinstance(self.reconnect_interval, (int, float)) or \
                self.reconnect_interval < 0:
            raise UrlError(f"reconnect_interval {self.reconnect_interval!r}: give "
                           "seconds, 0 or more")


def _check_int(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        allowed = f"{low}..{high}" if high is not None else f"{low} or more"
        raise UrlError(f"{name} {value!r}: give a whole number, {allowed}")


#: imq property -> (ClientOptions field, conversion).
_IMQ = {
    "imqReconnectEnabled": ("reconnect_enabled", "bool"),
    "imqReconnectAttempts": ("reconnect_attempts", "int"),
    "imqReconnectInterval": ("reconnect_interval", "ms"),
    "imqConsumerFlowLimit": ("consumer_flow_limit", "int"),
    "imqConsumerFlowThreshold": ("consumer_flow_threshold", "int"),
    "imqConnectionFlowLimitEnabled": ("connection_flow_limit_enabled", "bool"),
    "imqConnectionFlowLimit": ("connection_flow_limit", "int"),
}
#: imq properties read elsewhere (the address list) or known and not used.
_IMQ_OTHER = ("imqAddressList",)


def _convert(key, value, kind):
    text = str(value).strip()
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if kind == "ms":
            return float(text) / 1000.0
        return int(text)
    except ValueError:
        wanted = {"bool": "true or false", "ms": "milliseconds",
                  "int": "a whole number"}[kind]
        raise UrlError(f"property {key}={value!r}: give {wanted}") from None


def options_from(properties=None, **keywords):
    """Build L{ClientOptions} from imq properties and snake_case keywords (the keywords
    win where both say something).

    @raise UrlError: an unknown property or keyword, or a value out of range, named.
    """
    values = {}
    for key, value in (properties or {}).items():
        if key in _IMQ_OTHER:
            continue
        if key not in _IMQ:
            known = ", ".join(sorted(list(_IMQ) + list(_IMQ_OTHER)))
            raise UrlError(f"unknown connection property {key!r}; known: {known}")
        field, kind = _IMQ[key]
        values[field] = _convert(key, value, kind)
    fields = {f.name for f in dataclasses.fields(ClientOptions)}
    for key, value in keywords.items():
        if key not in fields:
            raise UrlError(f"unknown connection option {key!r}")
        if value is not None:
            values[key] = value
    return ClientOptions(**values)
