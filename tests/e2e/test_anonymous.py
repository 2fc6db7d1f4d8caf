"""Logins without credentials, and passwords over cleartext, per service (S4.2).

By default no service lets a guest in: the AMQP header without SASL is answered with
the SASL header and the socket closed (a server that requires SASL, AMQP Part 2
section 2.2 and Part 5 section 5.3.1), SASL ANONYMOUS is not offered and is refused
with outcome auth when tried, and a STOMP CONNECT without login gets an ERROR naming
the setting. A service with C{allow_anonymous=true} lets all three in as guest; one with
C{sasl.plain.allow_cleartext=false} refuses passwords and points to its TLS service.
Clients: raw sockets (to see the exact bytes), Proton and stomp.py.
"""

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from mqgate.amqp.frames import AMQP_HEADER, SASL_HEADER, encode_frame
from mqgate.amqp.performatives import Open, encode_composite
from tests.e2e.proton_client import (
    DEFAULT_TIMEOUT, broker_url, connect, opened, receive_all)
from tests.e2e.sasl_peer import SaslPeer as Raw, stomp_connect
from tests.e2e.stomp_client import clients, unique

UNAUTHORIZED = "amqp:unauthorized-access"

#: jms lets guests in and takes no passwords over cleartext; stomp lets guests in.
GUESTS = {
    "mqgate.jms.allow_anonymous": "true",
    "mqgate.jms.sasl.plain.allow_cleartext": "false",
    "mqgate.stomp.allow_anonymous": "true",
}


@pytest.fixture(scope="module")
def shipped(module_broker):
    """A broker on the shipped configuration: no guests anywhere."""
    return module_broker


@pytest.fixture(scope="module")
def guests(module_broker_factory):
    """A broker whose jms and stomp services let guests in (jms refuses passwords)."""
    return module_broker_factory(GUESTS, listening=("jms", "stomp"))


def round_trip(conn, body):
    address = f"queue://{unique('guest')}"
    conn.create_sender(address).send(Message(body=body))
    [got] = receive_all(conn.create_receiver(address), 1)
    return got.body


# -- by default: no guests --------------------------------------------------------------

@pytest.mark.parametrize("service", ["jms", "admin"])
def test_the_amqp_header_without_sasl_gets_the_sasl_header_and_a_close(shipped, service):
    """S4.2: a client without SASL hears that SASL is required (the SASL header) and is
    disconnected: not one more byte, no open."""
    with Raw(shipped.address(service)) as raw:
        raw.sock.sendall(AMQP_HEADER + encode_frame(encode_composite(
            Open(container_id="no-sasl"))))
        assert raw.rest_until_closed() == SASL_HEADER


def test_anonymous_is_not_offered_and_is_refused_when_tried(shipped):
    """S4.2: the shipped jms offers PLAIN only; SASL ANONYMOUS tried anyway gets
    outcome auth naming the setting that lets guests in."""
    with Raw(shipped.address()) as raw:
        offered, outcome = raw.sasl("ANONYMOUS")
        assert raw.rest_until_closed() == b""
    assert offered == ["PLAIN"]
    assert outcome.code == 1
    assert b"mqgate.jms.allow_anonymous=true" in outcome.additional_data


def test_proton_anonymous_is_refused(shipped):
    """S4.2: Proton asking for ANONYMOUS finds it is not offered and fails with
    unauthorized access; PLAIN on the same service works."""
    with pytest.raises(ConnectionException) as info:
        connect(shipped, user=None).close()
    assert UNAUTHORIZED in str(info.value), str(info.value)
    with opened(shipped) as conn:
        assert round_trip(conn, "admin") == "admin"


@pytest.mark.parametrize("service", ["stomp", "jms"])
def test_stomp_connect_without_login_gets_an_error_naming_the_setting(shipped, service):
    """S4.2: a CONNECT without login gets an ERROR whose message says the service needs
    a login and which setting lets guests in, and the connection is closed."""
    frame = stomp_connect(shipped.address(service))
    assert frame.command == "ERROR", frame
    message = frame.get("message")
    assert "needs a login" in message, message
    assert f"mqgate.{service}.allow_anonymous=true" in message, message


def test_stomp_with_a_login_still_connects(shipped):
    """S4.2: the control: the same CONNECT with a login gets CONNECTED."""
    frame = stomp_connect(shipped.address("stomp"), "login:guest", "passcode:guest")
    assert frame.command == "CONNECTED", frame


def test_the_retired_broker_wide_switch_stops_the_start_up(broker_factory):
    """S4.2: mqgate.authentication.anonymous.enabled stops twistd with a message naming
    the per-service key that replaced it, not a traceback."""
    process = broker_factory({"mqgate.authentication.anonymous.enabled": "true"},
                             wait=False)
    code, output = process.exit_output()
    assert code != 0, output
    assert "mqgate.authentication.anonymous.enabled" in output, output
    assert "mqgate.jms.allow_anonymous=true" in output, output
    assert "Traceback" not in output, output


# -- a service that lets guests in ------------------------------------------------------

def test_the_amqp_header_without_sasl_logs_in_as_guest_where_allowed(guests):
    """S4.2: on a service allowing guests, a client without SASL (Proton with SASL off)
    gets in and exchanges messages."""
    conn = BlockingConnection(broker_url(guests), timeout=DEFAULT_TIMEOUT,
                              sasl_enabled=False)
    try:
        assert round_trip(conn, "no sasl") == "no sasl"
    finally:
        conn.close()


def test_anonymous_is_offered_and_logs_in_where_allowed(guests):
    """S4.2: SASL ANONYMOUS is offered and a Proton client using it exchanges
    messages."""
    with Raw(guests.address()) as raw:
        offered, outcome = raw.sasl("ANONYMOUS")
    assert offered == ["ANONYMOUS"]
    assert outcome.code == 0
    with opened(guests, user=None) as conn:
        assert round_trip(conn, "anonymous") == "anonymous"


def test_guests_on_one_service_leave_the_others_closed(guests):
    """S4.2: allow_anonymous is per service: the admin service of the same broker
    still answers a client without SASL with the SASL header and a close."""
    with Raw(guests.address("admin")) as raw:
        raw.sock.sendall(AMQP_HEADER)
        assert raw.rest_until_closed() == SASL_HEADER


def test_stomp_connect_without_login_is_a_guest_where_allowed(guests):
    """S4.2: on a service allowing guests a CONNECT without login gets CONNECTED and
    exchanges messages."""
    queue = f"/queue/{unique('guest')}"
    with clients() as open_client:
        client = open_client(guests.address("stomp"), "1.2", user=None)
        client.subscribe(queue)
        client.send(queue, b"as guest")
        client.collector.wait_for_body(b"as guest")


# -- no passwords over cleartext ------------------------------------------------------------

def test_plain_over_cleartext_is_refused_pointing_to_the_tls_service(guests):
    """S4.2: with allow_cleartext false PLAIN is not offered; tried anyway it gets
    outcome auth saying to use the TLS service, and Proton reports unauthorized."""
    with Raw(guests.address()) as raw:
        offered, outcome = raw.sasl("PLAIN", b"\x00admin\x00admin")
    assert "PLAIN" not in offered
    assert outcome.code == 1
    assert b"use the TLS service ssljms" in outcome.additional_data
    with pytest.raises(ConnectionException) as info:
        connect(guests).close()
    assert UNAUTHORIZED in str(info.value), str(info.value)


def test_stomp_login_over_cleartext_is_refused_pointing_to_the_tls_service(guests):
    """S4.2: a STOMP CONNECT with login/passcode on that service gets an ERROR saying
    to use the TLS service, naming the setting."""
    frame = stomp_connect(guests.address("jms"), "login:admin", "passcode:admin")
    assert frame.command == "ERROR", frame
    message = frame.get("message")
    assert "use the TLS service ssljms" in message, message
    assert "mqgate.jms.sasl.plain.allow_cleartext" in message, message
