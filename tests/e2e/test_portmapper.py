"""The port mapper of the real broker, read the way a client reads it (S1.3, FACTS 1.1).

A client connects to the port mapper, writes C{"101\\n"} and reads until the broker
closes: the version line C{101 <instance> 301}, one line per running service
(C{name protocol type port}), then C{.}. These tests read it with a raw socket, check the
bytes and what L{mqgate.portmap.table.parse_table} makes of them, and then connect to
every listed port in the protocol the table announces for it, so that a table that
lists a wrong port, type or transport fails here.

One broker serves the module. It runs every service this version has, TLS ones
included, so its key pair is made (with the C{keytool} command) before it starts.
"""

import socket
import ssl
import time

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from mqgate.admin import cli
from mqgate.portmap.table import parse_table
from tests.e2e.proton_client import DEFAULT_TIMEOUT, DeadlineExceeded, receive_all
from tests.e2e.stomp_client import RawStomp, unique

#: Every service this version runs, with what the port mapper must say of each
#: (FACTS 1.1: protocol column = transport, type column = NORMAL/ADMIN/PORTMAPPER).
EXPECTED = {
    "portmapper": ("tcp", "PORTMAPPER"),
    "jms": ("tcp", "NORMAL"),
    "admin": ("tcp", "ADMIN"),
    "stomp": ("tcp", "NORMAL"),
    "ssljms": ("tls", "NORMAL"),
    "ssladmin": ("tls", "ADMIN"),
}

#: Start every service, the TLS ones on OS-chosen ports like the others.
ALL_SERVICES = {
    "mqgate.service.activelist": "jms,admin,stomp,ssljms,ssladmin",
    "mqgate.ssljms.tls.port": "0",
    "mqgate.ssladmin.tls.port": "0",
}


def keystore_dir(varhome, instance="mqgate"):
    """Where the broker of C{varhome} looks for its key pair (S0.5, S1.8 defaults)."""
    return varhome / "instances" / instance / "etc" / "keystore"


def read_port_mapper(address, request=b"101\n", timeout=DEFAULT_TIMEOUT):
    """Connect to the port mapper, send C{request}, and read until the broker closes.

    @param request: what the client writes first (FACTS 1.1: C{"101\\n"}); C{b""} for an
        old client that writes nothing.
    @return: every byte the broker sent.
    @raise DeadlineExceeded: the broker had not closed the connection after C{timeout}.
    """
    deadline = time.monotonic() + timeout
    chunks = []
    with socket.create_connection(address, timeout=timeout) as sock:
        if request:
            sock.sendall(request)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(f"the port mapper did not close within {timeout} s;"
                                       f" sent {b''.join(chunks)!r}")
            sock.settimeout(remaining)
            try:
                data = sock.recv(4096)
            except socket.timeout:
                continue    # the deadline check above raises
            if not data:
                return b"".join(chunks)
            chunks.append(data)


@pytest.fixture(scope="module")
def broker(module_broker_factory, tmp_path_factory):
    """A broker running every service, with a key pair made by `mqgate keytool` first."""
    varhome = tmp_path_factory.mktemp("portmapper-broker")
    assert cli.main(["keytool", "--varhome", str(varhome), "--nopassword"]) == 0
    return module_broker_factory(ALL_SERVICES, varhome=varhome,
                                 listening=("portmapper", *EXPECTED))


@pytest.fixture(scope="module")
def raw_table(broker):
    """The bytes the port mapper sent to a client that wrote C{"101\\n"}."""
    return read_port_mapper(broker.address("portmapper"))


@pytest.fixture(scope="module")
def listed(broker, raw_table):
    """C{{name: (host, port)}} of every service the table lists, at the mapper's host."""
    host, _ = broker.address("portmapper")
    _name, _version, entries = parse_table(raw_table)
    return {entry.name: (host, entry.port) for entry in entries}


# -- the table itself ------------------------------------------------------------------------

def test_table_has_version_line_lf_lines_and_terminator(raw_table):
    """S1.3/FACTS 1.1: US-ASCII lines ending in a bare LF, first `101 <instance> 301`,
    last `.`."""
    text = raw_table.decode("ascii")
    assert b"\r" not in raw_table
    assert text.endswith("\n.\n"), text
    lines = text.split("\n")[:-1]
    assert lines[0] == "101 mqgate 301", text
    assert lines[-1] == ".", text
    for line in lines[1:-1]:
        assert len(line.split(" ")) == 4, f"not 'name protocol type port': {line!r}"


def test_table_lists_every_running_service_with_type_transport_and_port(broker, raw_table):
    """S1.3: every running service appears once, with its transport, type and the
    port it really listens on; the port mapper comes first (FACTS 1.1)."""
    name, packet_version, entries = parse_table(raw_table)
    assert (name, packet_version) == ("mqgate", "301")
    assert entries[0].name == "portmapper"
    found = {e.name: (e.protocol, e.type, e.port) for e in entries}
    logged = broker.ports()
    assert found == {n: (*EXPECTED[n], logged[n]) for n in EXPECTED}, raw_table
    assert all(0 < e.port < 65536 for e in entries)


def test_client_that_writes_nothing_gets_the_same_table(broker, raw_table):
    """S1.3/FACTS 1.1: an old client that does not write "101" still gets the table."""
    assert read_port_mapper(broker.address("portmapper"), request=b"") == raw_table


def test_only_active_services_are_listed(broker_factory):
    """S1.2/S1.3: with the shipped activelist (jms, admin, stomp, httpadmin) no TLS
    service is listed, and every listed port accepts connections."""
    shipped = broker_factory()
    host, port = shipped.address("portmapper")
    _name, _version, entries = parse_table(read_port_mapper((host, port)))
    assert [e.name for e in entries] == ["portmapper", "jms", "admin", "stomp",
                                         "httpadmin"]
    for entry in entries:
        socket.create_connection((host, entry.port), timeout=DEFAULT_TIMEOUT).close()


# -- every listed port speaks what the table says ------------------------------------------------

@pytest.mark.parametrize("service", ["jms", "admin"])
def test_listed_amqp_port_does_a_proton_round_trip(listed, service):
    """S1.3/S1.1: the listed jms and admin ports carry AMQP; admin/admin sends and
    receives a message on each (the admin service takes users of group admin)."""
    host, port = listed[service]
    address = f"queue://{unique('pm-' + service)}"
    conn = BlockingConnection(f"amqp://admin:admin@{host}:{port}", timeout=DEFAULT_TIMEOUT,
                              allowed_mechs="PLAIN")
    try:
        conn.create_sender(address).send(Message(body=f"via {service}"))
        [got] = receive_all(conn.create_receiver(address), 1)
        assert got.body == f"via {service}"
    finally:
        conn.close()


def test_listed_admin_port_refuses_a_guest(listed):
    """S1.1/S4.2: the port listed as ADMIN refuses a user outside group admin."""
    host, port = listed["admin"]
    with pytest.raises(ConnectionException) as info:
        BlockingConnection(f"amqp://guest:guest@{host}:{port}", timeout=DEFAULT_TIMEOUT,
                           allowed_mechs="PLAIN").close()
    assert "unauthorized-access" in str(info.value)


@pytest.mark.parametrize("service", ["jms", "stomp"])
def test_listed_stomp_port_answers_connect(listed, service):
    """S1.3/S10.2: the listed jms (sniffing) and stomp ports answer CONNECT with
    CONNECTED."""
    client = RawStomp(listed[service])
    try:
        frame = client.connect("1.2")
    finally:
        client.close()
    assert frame.command == "CONNECTED", frame
    assert frame.get("version") == "1.2"


@pytest.mark.parametrize("service", ["ssljms", "ssladmin"])
def test_listed_tls_port_completes_a_verified_handshake(broker, listed, service):
    """S1.3/S1.8: the ports listed as tls complete a TLS handshake whose certificate
    (the keytool's, for localhost) verifies against cert.pem."""
    context = ssl.create_default_context(
        cafile=str(keystore_dir(broker.varhome) / "cert.pem"))
    with socket.create_connection(listed[service], timeout=DEFAULT_TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            subject = dict(pair[0] for pair in tls.getpeercert()["subject"])
    assert subject["commonName"] == "localhost"
