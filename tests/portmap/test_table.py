"""Tests for the port mapper table's wire format and broker addresses (S1.3, FACTS 1.1)."""

import pytest

from mqgate.errors import RemoteProtocolError
from mqgate.portmap.table import (
    MAX_LINE, MqAddress, MqAddressError, PortMapperError, ServiceEntry, parse_mq_url,
    parse_table, render_table, table_complete)

ENTRIES = [
    ServiceEntry("portmapper", "tcp", "PORTMAPPER", 7676,
                 {"brokerid": "b1", "sessionid": "42"}),
    ServiceEntry("jms", "tcp", "NORMAL", 40001),
    ServiceEntry("admin", "tcp", "ADMIN", 40002),
    ServiceEntry("ssljms", "tls", "NORMAL", 40003),
]

EXPECTED = (b"101 imqbroker 301\n"
            b"portmapper tcp PORTMAPPER 7676 [brokerid=b1,sessionid=42]\n"
            b"jms tcp NORMAL 40001\n"
            b"admin tcp ADMIN 40002\n"
            b"ssljms tls NORMAL 40003\n"
            b".\n")


# --- rendering ---------------------------------------------------------------------

def test_render_known_table_exact_bytes():
    """A table renders as FACTS 1.1 shows: version line, entries, '.', LF ends (S1.3)."""
    assert render_table("imqbroker", ENTRIES) == EXPECTED


def test_render_empty_table_is_version_line_and_terminator():
    """With no service registered the table is just the version line and '.' (S1.3)."""
    assert render_table("mqgate", []) == b"101 mqgate 301\n.\n"


def test_render_uses_given_versions():
    """The port mapper and packet versions can be overridden for tests of old clients."""
    assert render_table("b", [], pm_version=100, packet_version="2.0") == b"100 b 2.0\n.\n"


def test_render_has_no_crlf_and_is_ascii():
    """Every line ends in a bare LF and the bytes are US-ASCII (FACTS 1.1)."""
    data = render_table("imqbroker", ENTRIES)
    assert b"\r" not in data
    data.decode("ascii")


def test_render_property_list_keeps_insertion_order():
    """Properties are written comma-separated, no spaces, in insertion order (FACTS 1.1)."""
    entry = ServiceEntry("jmxrmi", "rmi", "JMX", 0,
                         {"url": "service:jmx:rmi://h/jndi/rmi://h:9999/x", "a": ""})
    assert entry.render() == (
        "jmxrmi rmi JMX 0 [url=service:jmx:rmi://h/jndi/rmi://h:9999/x,a=]")


def test_render_rejects_duplicate_service_names():
    """Two entries named alike are refused: the source table is keyed by name (S1.3)."""
    with pytest.raises(ValueError, match="'jms' appears twice"):
        render_table("b", [ServiceEntry("jms", "tcp", "NORMAL", 1),
                           ServiceEntry("jms", "tls", "NORMAL", 2)])


@pytest.mark.parametrize("broker", ["", "two words", "caf\u00e9", "a\nb"])
def test_render_rejects_broker_name_that_is_not_one_ascii_token(broker):
    """A broker name that would break the version line is refused with its value."""
    with pytest.raises(ValueError, match="broker name"):
        render_table(broker, [])


@pytest.mark.parametrize("kwargs, what", [
    (dict(name="my jms"), "name"),
    (dict(protocol=""), "protocol"),
    (dict(type="NOR]MAL"), "type"),
    (dict(port=70000), "port"),
    (dict(port=-1), "port"),
    (dict(port="7676"), "port"),
    (dict(port=True), "port"),
    (dict(properties={"a,b": "1"}), "property key"),
    (dict(properties={"k": "x,y"}), "property 'k'"),
    (dict(properties={"k": "x]"}), "property 'k'"),
    (dict(properties={"k": "x\ny"}), "property 'k'"),
])
def test_entry_rejects_fields_that_cannot_be_one_line(kwargs, what):
    """An entry field that cannot be written on one table line raises, naming the field."""
    fields = dict(name="jms", protocol="tcp", type="NORMAL", port=1, properties={})
    fields.update(kwargs)
    with pytest.raises(ValueError, match=what):
        ServiceEntry(**fields)


# --- parsing -----------------------------------------------------------------------

def test_parse_known_table():
    """The client reads broker name, packet version and every entry of a table."""
    broker, packet_version, entries = parse_table(EXPECTED)
    assert (broker, packet_version) == ("imqbroker", "301")
    assert entries == ENTRIES


def test_round_trip():
    """What render_table writes, parse_table reads back unchanged (S1.3)."""
    entries = ENTRIES + [ServiceEntry("x", "wss", "NORMAL", 0, {"k": "v=w", "e": ""})]
    assert parse_table(render_table("mqgate", entries)) == ("mqgate", "301", entries)


@pytest.mark.parametrize("first", [b"100 b 301\n.\n", b"abc b 301\n", b"\n", b" \n"])
def test_parse_rejects_bad_version_naming_it(first):
    """A first token other than 101 raises PortMapperError with BAD_VERSION, naming it."""
    with pytest.raises(PortMapperError) as info:
        parse_table(first)
    assert info.value.condition == PortMapperError.BAD_VERSION
    token = first.split()[0].decode() if first.split() else ""
    assert repr(token) in str(info.value)
    assert isinstance(info.value, RemoteProtocolError)


def test_parse_rejects_empty_reply():
    """A port mapper that closes without a byte is reported as such."""
    with pytest.raises(PortMapperError, match="without sending anything"):
        parse_table(b"")


def test_parse_rejects_version_line_without_broker_and_packet_version():
    """A version line of '101' alone is malformed (the source client needs 3 tokens)."""
    with pytest.raises(PortMapperError, match="lacks the broker name"):
        parse_table(b"101\n.\n")


def test_parse_stops_at_terminator_and_ignores_what_follows():
    """Entries end at the '.' line; anything after it is not read (FACTS 1.1)."""
    data = b"101 b 301\njms tcp NORMAL 1\n.\nnot a service line\n"
    assert parse_table(data)[2] == [ServiceEntry("jms", "tcp", "NORMAL", 1)]


def test_parse_accepts_end_of_data_without_terminator():
    """A table cut short by the close is read up to the end, like the source client."""
    data = b"101 b 301\njms tcp NORMAL 1\nadmin tcp ADMIN 2"
    assert [e.name for e in parse_table(data)[2]] == ["jms", "admin"]


def test_parse_empty_line_ends_the_table():
    """An empty line ends the entries, as it does in the source client's reader."""
    data = b"101 b 301\njms tcp NORMAL 1\n\nadmin tcp ADMIN 2\n.\n"
    assert [e.name for e in parse_table(data)[2]] == ["jms"]


def test_parse_tolerates_crlf():
    """CRLF line ends are read like LF (the source tokenizer treats CR as a separator)."""
    data = b"101 b 301\r\njms tcp NORMAL 1\r\n.\r\n"
    assert parse_table(data) == ("b", "301", [ServiceEntry("jms", "tcp", "NORMAL", 1)])


def test_parse_property_lists():
    """Property lists are read: spaces after commas trimmed, pairs without '=' skipped."""
    data = (b"101 b 301\n"
            b"jmx rmi JMX 0 [foo=bar, url=service:jmx:rmi://h/jndi/rmi://h:9/s,junk]\n.\n")
    entry = parse_table(data)[2][0]
    assert entry.properties == {"foo": "bar", "url": "service:jmx:rmi://h/jndi/rmi://h:9/s"}


def test_parse_value_may_contain_equals():
    """A property value is everything after the first '='."""
    entry = parse_table(b"101 b 301\nx tcp NORMAL 1 [k=a=b]\n.\n")[2][0]
    assert entry.properties == {"k": "a=b"}


def test_parse_repeated_name_replaces_and_moves_to_end():
    """A repeated service name replaces the earlier entry and moves to the end."""
    data = b"101 b 301\njms tcp NORMAL 1\nadmin tcp ADMIN 2\njms tls NORMAL 3\n.\n"
    assert [(e.name, e.port) for e in parse_table(data)[2]] == [("admin", 2), ("jms", 3)]


@pytest.mark.parametrize("line", [
    b"jms tcp NORMAL",
    b"jms tcp NORMAL port",
    b"jms tcp NORMAL 99999",
    b"jms tcp NORMAL 1 [k=v",
])
def test_parse_rejects_bad_service_lines(line):
    """A service line without name, protocol, type and a valid port raises, quoting it."""
    with pytest.raises(PortMapperError, match="NORMAL") as info:
        parse_table(b"101 b 301\n" + line + b"\n.\n")
    assert info.value.condition == PortMapperError.BAD_TABLE


def test_parse_rejects_non_ascii():
    """Bytes outside US-ASCII are a malformed table, not a decode crash."""
    with pytest.raises(PortMapperError, match="US-ASCII"):
        parse_table(b"101 b\xe9 301\n.\n")


def test_parse_rejects_overlong_line():
    """A line longer than the client's 2048-byte buffer is refused, not truncated."""
    with pytest.raises(PortMapperError, match="longer than"):
        parse_table(b"101 b 301\n" + b"x" * (MAX_LINE + 1) + b"\n.\n")


def test_parse_rejects_str():
    """parse_table takes the bytes read from the socket, not text."""
    with pytest.raises(TypeError):
        parse_table("101 b 301\n.\n")


@pytest.mark.parametrize("data, complete", [
    (b"", False),
    (b"101 b 301\n", False),
    (b"101 b 301\njms tcp NORMAL 1\n", False),
    (b"101 b 301\njms tcp NORMAL 1\n.", False),
    (b"101 b 301\njms tcp NORMAL 1\n.\n", True),
    (b"101 b 301\r\n.\r\n", True),
    (b"101 b 301\n\n", True),
    (EXPECTED, True),
])
def test_table_complete(data, complete):
    """A client knows the table is whole once the '.' (or empty) line has arrived."""
    assert table_complete(data) is complete


# --- broker addresses --------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("mq://host:7676/jms", MqAddress("host", 7676, "jms")),
    ("mq://broker.example:1012/ssljms", MqAddress("broker.example", 1012, "ssljms")),
    ("mq://", MqAddress("localhost", 7676, "jms")),
    ("mq://myhost", MqAddress("myhost", 7676, "jms")),
    ("mq://:1012", MqAddress("localhost", 1012, "jms")),
    ("mq://myhost/admin", MqAddress("myhost", 7676, "admin")),
    ("mq://myhost:7676/", MqAddress("myhost", 7676, "jms")),
    ("mq:MyHost:7677/ssljms", MqAddress("MyHost", 7677, "ssljms")),
    ("MQ://h:1/jms", MqAddress("h", 1, "jms")),
    ("myhost:7777/jms", MqAddress("myhost", 7777, "jms")),
    ("myhost", MqAddress("myhost", 7676, "jms")),
    ("mq://[::1]:7676/jms", MqAddress("::1", 7676, "jms")),
    ("mqtcp://localhost:1032/jms", MqAddress("localhost", 1032, "jms", True, False)),
    ("mqtcp://h:1032", MqAddress("h", 1032, "jms", True, False)),
    ("mqssl://h:1033/ssljms", MqAddress("h", 1033, "ssljms", True, True)),
    ("mqssl://h:1033", MqAddress("h", 1033, "ssljms", True, True)),
])
def test_parse_mq_url(text, expected):
    """Broker addresses read with the source client's defaults (localhost, 7676, jms)."""
    assert parse_mq_url(text) == expected


def test_parse_mq_url_unpacks_host_port_service_first():
    """The first three fields are host, port and service, then the direct and tls flags."""
    host, port, service, direct, tls = parse_mq_url("mqssl://h:5/ssljms")
    assert (host, port, service, direct, tls) == ("h", 5, "ssljms", True, True)


@pytest.mark.parametrize("text, reason", [
    ("mqtcp://host/jms", "port is required"),
    ("mqssl://host", "port is required"),
    ("mq://host:abc/jms", "not a number"),
    ("mq://host:0/jms", "not a number"),
    ("mq://host:70000/jms", "not a number"),
    ("http://host:80/tunnel", "unsupported scheme"),
    ("mq://host:1/a/b", "not one word"),
    ("mq://h[x]:1/jms", "cannot read host"),
    # Found by the fuzzer (tests/fuzz): digits str.isdigit() takes but int() does not,
    # and more digits than int() converts, used to raise a bare ValueError.
    ("mq://host:\u00b2/jms", "not a number"),
    ("mq://host:\u0663\u0664/jms", "not a number"),
    ("mq://host:" + "1" * 5000 + "/jms", "not a number"),
    ("mq://host:000007676/jms", "not a number"),
])
def test_parse_mq_url_rejects_bad_addresses(text, reason):
    """A bad address raises MqAddressError naming the address and the reason."""
    with pytest.raises(MqAddressError, match=reason) as info:
        parse_mq_url(text)
    assert info.value.address == text
