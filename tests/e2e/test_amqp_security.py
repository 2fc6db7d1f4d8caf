"""SASL authentication of Proton clients against the real broker (S4.2, S4.3).

The broker starts with its default user repository (S4.3): C{admin}/C{admin} in group
admin and C{guest}/C{guest} in group anonymous. Logins without credentials, refused
unless a service allows guests (S4.2), are tested in test_anonymous.py.
"""

import pytest
from proton import ConnectionException, Message

from tests.e2e.proton_client import DEFAULT_TIMEOUT, connect, opened, receive_all

UNAUTHORIZED = "amqp:unauthorized-access"


def round_trip(conn, address="queue://security-check", body="ok"):
    """Send one message and receive it back on C{conn}; return its body."""
    conn.create_sender(address).send(Message(body=body))
    [got] = receive_all(conn.create_receiver(address), 1)
    return got.body


def assert_refused(broker, **credentials):
    """Connecting with C{credentials} fails with a SASL authentication failure (S4.2)."""
    with pytest.raises(ConnectionException) as info:
        conn = connect(broker, **credentials)
        conn.close()  # only reached when the broker wrongly let us in
    assert UNAUTHORIZED in str(info.value), str(info.value)


def test_plain_admin_logs_in_and_messages_flow(broker):
    """S4.2/S4.3: SASL PLAIN with the default admin/admin user opens a working connection."""
    with opened(broker, user="admin", password="admin") as conn:
        assert round_trip(conn, body="as admin") == "as admin"


def test_plain_guest_logs_in(broker):
    """S4.3: the default guest/guest user logs in with SASL PLAIN."""
    with opened(broker, user="guest", password="guest") as conn:
        assert round_trip(conn, body="as guest") == "as guest"


@pytest.mark.parametrize("user,password", [("admin", "wrong"), ("nobody", "admin")])
def test_bad_credentials_are_refused_and_others_keep_working(broker, user, password):
    """S4.2: a wrong password or unknown user fails SASL; the broker keeps serving others."""
    with opened(broker) as bystander:
        assert_refused(broker, user=user, password=password)
        assert round_trip(bystander, body="still here") == "still here"
    with opened(broker) as newcomer:
        assert round_trip(newcomer, body="after") == "after"
    # Logged for the operator, with the address and the name given (S4.2).
    broker.wait_for_line(rf"failed login from 127\.0\.0\.1 as '{user}'",
                         timeout=DEFAULT_TIMEOUT)


def test_admin_service_refuses_guest(broker_factory):
    """S4.2/S11.1: the admin service refuses guest by PLAIN, and by ANONYMOUS even when
    it lets guests log in."""
    broker = broker_factory({"mqgate.admin.allow_anonymous": "true"})
    assert_refused(broker, service="admin", user="guest", password="guest")
    assert_refused(broker, service="admin", user=None)  # ANONYMOUS logs in as guest


def test_admin_service_accepts_admin(broker):
    """S4.2/S11.1: the admin service lets a user of group admin open a connection."""
    conn = connect(broker, service="admin", user="admin", password="admin")
    try:
        assert conn.conn.remote_container == "mqgate:mqgate"
    finally:
        conn.close()
