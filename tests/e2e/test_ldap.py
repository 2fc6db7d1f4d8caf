"""
The real broker on the LDAP user repository (S4.4) against a real slapd
(tests/ldapserver.py), over plain LDAP and LDAPS: logins with Proton and stomp.py, the
directory's groups reaching the admin service's check, refused credentials, and a
directory that stops answering while a probe client keeps measuring the broker.
"""

import concurrent.futures
import socket
import time

import pytest
from proton import ConnectionException, Message

from tests.e2e.proton_client import DEFAULT_TIMEOUT, connect, opened, receive_all
from tests.e2e.stomp_client import DeadlineExceeded, open_client
from tests.hostile.probe import Probe, wait_until
from tests.ldapserver import (
    GROUPS, PEOPLE, SERVICE_DN, SERVICE_PASSWORD, sample_directory)

pytestmark = pytest.mark.e2e

UNAUTHORIZED = "amqp:unauthorized-access"
#: The directory's timeout in these tests: short, so that the stopped-directory test
#: is quick; the default is 5.
TIMEOUT = 1


@pytest.fixture(scope="module")
def slapd():
    """A throw-away slapd holding the sample directory, for this module."""
    yield from sample_directory()


def ldap_settings(server, **more):
    """-D overrides for a broker on the LDAP repository at C{server} (host:port),
    searching anonymously, groups on."""
    settings = {
        "mqgate.authentication.basic.user_repository": "ldap",
        "mqgate.user_repository.ldap.server": server,
        "mqgate.user_repository.ldap.base": PEOPLE,
        "mqgate.user_repository.ldap.grpsearch": "true",
        "mqgate.user_repository.ldap.grpbase": GROUPS,
        "mqgate.user_repository.ldap.timeout": str(TIMEOUT),
        # The refusals below come from one address; slowing it down is the login
        # guard's business and tested there, not here.
        "mqgate.authentication.failures.free": "1000",
    }
    settings.update(more)
    return settings


def round_trip(conn, address="queue://ldap-check", body="ok"):
    """Send one message and receive it back on C{conn}; return its body."""
    conn.create_sender(address).send(Message(body=body))
    [got] = receive_all(conn.create_receiver(address), 1)
    return got.body


def refused(broker, **credentials):
    """Connect with C{credentials}; return the ConnectionException text (the test fails
    if the broker lets the client in)."""
    with pytest.raises(ConnectionException) as info:
        conn = connect(broker, **credentials)
        conn.close()   # only reached when the broker wrongly let us in
    assert UNAUTHORIZED in str(info.value), str(info.value)
    return str(info.value)


def test_directory_users_and_groups_over_ldap(broker_factory, slapd):
    """LDAP users log in with Proton and stomp.py; the directory group admin lets alice
    onto the admin service, and bob (staff only) is refused there."""
    broker = broker_factory(ldap_settings(slapd.address))
    broker.wait_for_line(r"checked against the LDAP directory ldap://127\.0\.0\.1:\d+")
    with opened(broker, user="bob", password="bob-pw") as conn:
        assert round_trip(conn, body="bob via ldap") == "bob via ldap"
    admin = connect(broker, service="admin", user="alice", password="alice-pw")
    admin.close()
    refused(broker, service="admin", user="bob", password="bob-pw")
    client = open_client(broker.address("stomp"), user="bob", passcode="bob-pw")
    client.close()


def test_directory_over_ldaps_with_a_search_principal(broker_factory, slapd, tmp_path):
    """Over LDAPS (the test CA given as ca_file), searching as a principal whose
    password comes from the password file, the same users and groups work."""
    passdir = tmp_path / "secrets"
    passdir.mkdir(mode=0o700)
    passfile = passdir / "passfile"
    passfile.write_text(f"mqgate.user_repository.ldap.password={SERVICE_PASSWORD}\n")
    passfile.chmod(0o600)
    broker = broker_factory(ldap_settings(
        slapd.ssl_address,
        **{"mqgate.user_repository.ldap.ssl.enabled": "true",
           "mqgate.user_repository.ldap.ssl.ca_file": slapd.ca_file,
           "mqgate.user_repository.ldap.principal": SERVICE_DN,
           "mqgate.passfile.enabled": "true",
           "mqgate.passfile.dirpath": str(passdir)}))
    broker.wait_for_line(r"ldaps://127\.0\.0\.1:\d+ .*searched as cn=mqgate")
    conn = connect(broker, service="admin", user="alice", password="alice-pw")
    conn.close()
    refused(broker, service="admin", user="bob", password="bob-pw")
    with opened(broker, user="bob", password="bob-pw") as conn:
        assert round_trip(conn, body="over ldaps") == "over ldaps"
    assert SERVICE_PASSWORD not in "".join(broker.output)


@pytest.mark.parametrize("user,password,reason", [
    ("alice", "bob-pw", "wrong password"),
    ("nobody", "alice-pw", "unknown user"),
    ("*)(uid=*", "alice-pw", "unknown user"),
    ("*", "bob-pw", "unknown user"),
])
def test_refused_logins(broker_factory, slapd, user, password, reason):
    """A wrong password, an unknown user and a user name written as a filter are
    refused alike (SASL auth failure); the log says why."""
    broker = broker_factory(ldap_settings(slapd.address))
    refused(broker, user=user, password=password)
    broker.wait_for_line(rf"failed login from 127\.0\.0\.1 as .*: {reason}",
                         timeout=DEFAULT_TIMEOUT)


def test_empty_password_is_refused(broker_factory, slapd):
    """A STOMP login with an empty passcode is refused, although this slapd would take
    the bind (an unauthenticated bind); the log says why."""
    broker = broker_factory(ldap_settings(slapd.address))
    with pytest.raises(DeadlineExceeded) as info:
        open_client(broker.address("stomp"), user="alice", passcode="")
    assert "authentication failed" in str(info.value)
    broker.wait_for_line(r"failed login from 127\.0\.0\.1 as .*alice.*: empty password",
                         timeout=DEFAULT_TIMEOUT)


def _stomp_login_outcome(address, user, passcode):
    """(seconds, 'connected' or the refusal) of one stomp.py login."""
    started = time.monotonic()
    try:
        open_client(address, user=user, passcode=passcode, timeout=20).close()
        outcome = "connected"
    except DeadlineExceeded as e:
        outcome = str(e)
    return time.monotonic() - started, outcome


def test_stopped_directory(broker_factory, slapd):
    """While slapd is stopped (SIGSTOP) logins fail after about the timeout with a
    clear error and a warning naming the server, a client already logged in keeps its
    prompt round trips, and after SIGCONT logins work again."""
    broker = broker_factory(ldap_settings(slapd.address))
    stomp = broker.address("stomp")
    with Probe(broker, user=("bob", "bob-pw")) as probe:
        slapd.pause()
        try:
            # 12 logins at once: more than the directory threads (8), so some wait.
            with concurrent.futures.ThreadPoolExecutor(12) as pool:
                outcomes = list(pool.map(lambda _: _stomp_login_outcome(
                    stomp, "alice", "alice-pw"), range(12)))
            started = time.monotonic()
            text = refused(broker, user="alice", password="alice-pw")
            amqp_seconds = time.monotonic() - started
        finally:
            slapd.resume()
    for seconds, outcome in outcomes:
        assert "authentication failed" in outcome, outcome
        assert seconds < 4 * TIMEOUT + 2, outcomes
    assert amqp_seconds < 2 * TIMEOUT + 2, (amqp_seconds, text)
    broker.wait_for_line(r"failed login from 127\.0\.0\.1 as .*: directory not answering")
    broker.wait_for_line(rf"LDAP directory not answering.*127\.0\.0\.1:{slapd.port}")
    probe.assert_responsive(limit=0.2)
    print(f"\nstopped directory: STOMP refusals after "
          f"{min(s for s, _ in outcomes):.2f}-{max(s for s, _ in outcomes):.2f} s, AMQP "
          f"after {amqp_seconds:.2f} s; probe worst round trip {probe.worst * 1000:.0f} "
          f"ms over {len(probe.samples)} samples")
    with opened(broker, user="alice", password="alice-pw") as conn:
        assert round_trip(conn, body="after SIGCONT") == "after SIGCONT"


@pytest.mark.parametrize("more,named", [
    ({"mqgate.user_repository.ldap.base": ""}, "mqgate.user_repository.ldap.base"),
    ({"mqgate.user_repository.ldap.principal": SERVICE_DN},
     "mqgate.user_repository.ldap.password"),
    ({"mqgate.user_repository.ldap.server": "host:port"},
     "mqgate.user_repository.ldap.server"),
])
def test_unworkable_ldap_settings_stop_the_start(broker_factory, more, named):
    """A broker on an LDAP repository that cannot work (no base, a principal without
    its password in a password file, a bad server) exits at once naming the setting."""
    broker = broker_factory(ldap_settings("127.0.0.1:1", **more), wait=False)
    code, output = broker.exit_output()
    assert code != 0, output
    assert named in output, output
    assert "Traceback" not in output, output


def _established_to(port):
    """How many TCP connections on this machine are established to 127.0.0.1:C{port}
    (from /proc/net/tcp: the remote address column, state 01)."""
    remote = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[2] == remote and row[3] == "01")


def test_broker_stops_promptly_with_logins_waiting_on_a_stopped_directory(
        broker_factory, slapd):
    """With the directory stopped and more logins waiting than there are directory
    threads, SIGTERM still stops the broker within seconds: the waiting checks are cut
    short instead of each running out its 5 s timeout (3 rounds of 8 = 15 s)."""
    broker = broker_factory(ldap_settings(
        slapd.address, **{"mqgate.user_repository.ldap.timeout": "5"}))
    stomp = broker.address("stomp")
    sockets = []
    slapd.pause()
    try:
        for _ in range(24):
            sock = socket.create_connection(stomp, timeout=DEFAULT_TIMEOUT)
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:alice\n"
                         b"passcode:alice-pw\n\n\0")
            sockets.append(sock)
        # Every directory thread is waiting on slapd once 8 connections to it are open.
        wait_until(lambda: _established_to(slapd.port) >= 8, DEFAULT_TIMEOUT,
                   "the broker's directory threads all connected to slapd")
        started = time.monotonic()
        broker.terminate()
        stopped = time.monotonic() - started
    finally:
        slapd.resume()
        for sock in sockets:
            sock.close()
    assert stopped < 4.0, stopped
    print(f"\nstopped in {stopped:.2f} s with 24 logins waiting on a stopped directory")
