"""`mqgate cmd` against a real `twistd -n mqgate` broker (S9.7, S11.1).

Each test runs ``python -m mqgate.admin.cli cmd ...`` (what the ``mqgate`` console
script calls) in a child process with stdin not a terminal; the admin password comes
from a password file (S4.6), the admin port from the broker's port mapper (S1.3), as an
operator's script would have it.
"""

import json
import subprocess
import sys

import pytest

from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.broker import REPO_ROOT, broker_environment
from tests.e2e.proton_client import connect


@pytest.fixture(scope="module")
def broker(module_broker):
    """One broker for the module's tests: they only ask it things, and the one that
    connects a client closes it again."""
    return module_broker


def test_show_default_profile_detail(broker, passfile):
    """S9.7/S11.1: `mqgate cmd show client-profile default detail` prints the default
    profile's queue table, found through the port mapper."""
    result = mqgate_cmd(broker, passfile, "show", "client-profile", "default", "detail")
    assert result.returncode == 0, result.stderr
    for words in ("Profile Name", "default", "Queue Max Depth", "20000 work units",
                  "Priority Queue Minimum Burst", "255 messages", "Keep-alive"):
        assert words in result.stdout, result.stdout


def test_show_a_configured_profile(broker_factory, passfile):
    """S9.7: a profile defined with -D mqgate.client_profile.gold.* is shown with its
    settings and the users assigned to it (needs Settings to keep the
    mqgate.client_profile.* family, which build_broker passes to the profiles)."""
    broker = broker_factory({"mqgate.client_profile.gold.d1.max_depth": "777",
                             "mqgate.client_profile.gold.max_subscriptions": "12",
                             "mqgate.client_profile.assign.alice": "gold"})
    result = mqgate_cmd(broker, passfile, "show", "client-profile", "gold", "detail",
                        direct=True)
    assert result.returncode == 0, result.stderr
    assert "777 work units" in result.stdout
    assert "alice" in result.stdout
    as_json = mqgate_cmd(broker, passfile, "--json", "show", "client-profile", "gold")
    assert '"max_subscriptions": 12' in as_json.stdout, as_json.stdout


def test_unknown_profile_exits_1_with_the_message(broker, passfile):
    """S11.1: an unknown profile is reported on stderr with exit status 1."""
    result = mqgate_cmd(broker, passfile, "show", "client-profile", "nosuch")
    assert result.returncode == 1
    assert "no client profile 'nosuch'" in result.stderr
    assert "404" in result.stderr


def test_unknown_client_exits_1(broker, passfile):
    """S11.1: stats of a client that is not connected: exit 1, saying so."""
    result = mqgate_cmd(broker, passfile, "show", "client", "ghost", "stats", "queue")
    assert result.returncode == 1
    assert "no client 'ghost' is connected" in result.stderr


def test_bad_command_exits_1_with_the_usage(broker, passfile):
    """S11.1: a malformed command is answered with the usage, exit 1."""
    result = mqgate_cmd(broker, passfile, "show", "client", "*", "stats")
    assert result.returncode == 1
    assert "usage: show client NAME stats queue" in result.stderr


def test_slow_subscriber_lists_connected_clients(broker, passfile):
    """S9.4/S9.7: `show client '*' slow-subscriber` answers for the connected clients.

    The count and the listing of a connected jms client depend on the connections
    registering in the broker's ClientRegistry (the egress wiring); without it the
    command still answers, over zero clients.
    """
    result = mqgate_cmd(broker, passfile, "show", "client", "*", "slow-subscriber")
    assert result.returncode == 0, result.stderr
    assert "slow subscriber(s) among" in result.stdout
    conn = connect(broker, user="admin", password="admin")
    try:
        conn.create_receiver("some.queue")
        everyone = mqgate_cmd(broker, passfile, "show", "client", "*", "slow-subscriber",
                              "all")
        assert everyone.returncode == 0, everyone.stderr
        # From here on: depends on the egress wiring (each logged-in connection
        # registers an EgressClient in the broker's ClientRegistry).
        assert "0 slow subscriber(s) among" in everyone.stdout
        assert "among 0 client(s)" not in everyone.stdout, everyone.stdout
        listed = json.loads(mqgate_cmd(broker, passfile, "--json", "show", "client", "*",
                                       "slow-subscriber", "all").stdout)
        jms = [row for row in listed if row["service"] == "jms"]
        assert [(row["user"], row["slow"]) for row in jms] == [("admin", False)], listed
        assert jms[0]["client"] in everyone.stdout
        stats = mqgate_cmd(broker, passfile, "show", "client", "*", "stats", "queue")
        assert stats.returncode == 0, stats.stderr
        assert "Client Transmit Queues" in stats.stdout
    finally:
        conn.close()


def test_wrong_password_says_login_failed(broker, tmp_path):
    """S4.2/S11.1: a wrong password is reported as a failed login, exit 2."""
    wrong = tmp_path / "wrong"
    wrong.write_text("imq.imqcmd.password=nope\n", encoding="utf-8")
    wrong.chmod(0o600)   # others may not read a password file (S4.6)
    result = mqgate_cmd(broker, wrong, "show", "client-profile", "default")
    assert result.returncode == 2
    assert "login to the admin service" in result.stderr
    assert "failed for user 'admin'" in result.stderr


def test_non_admin_user_cannot_log_in_to_the_admin_service(broker, tmp_path):
    """S4.5/S11.1: only the admin group may use the admin service: guest logs in but
    is refused by the rule connection.ADMIN, which the error names."""
    guest = tmp_path / "guest"
    guest.write_text("imq.imqcmd.password=guest\n", encoding="utf-8")
    guest.chmod(0o600)   # others may not read a password file (S4.6)
    result = mqgate_cmd(broker, guest, "show", "client-profile", "default", user="guest")
    assert result.returncode == 2
    assert "user guest may not connect to the admin service (rule connection.ADMIN)" \
        in result.stderr
    assert "amqp:unauthorized-access" in result.stderr


def test_connection_refused_names_the_address(passfile, tmp_path):
    """S11.1: no broker at the address: the error names host:port and what to check."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # bound, never listening: connections are refused
        result = subprocess.run(
            [sys.executable, "-m", "mqgate.admin.cli", "cmd", "-b", f"127.0.0.1:{port}",
             "--passfile", str(passfile), "show", "client-profile", "default"],
            cwd=str(REPO_ROOT), env=broker_environment(), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr
    assert "connection refused" in result.stderr and "broker running" in result.stderr


def test_no_password_and_no_terminal_says_where_to_put_it(broker, tmp_path):
    """S4.6: without a password file and without a terminal, the command says where
    the password goes instead of hanging on a prompt."""
    result = subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", "cmd", "--varhome",
         str(tmp_path / "v"), "-b", f"127.0.0.1:{broker.port('portmapper')}",
         "show", "client-profile", "default"],
        cwd=str(REPO_ROOT), env=broker_environment(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "mqgate.imqcmd.password" in result.stderr


def test_jms_user_cannot_reach_the_admin_address(broker):
    """S11.1: on the jms service, a sender to mqgate.admin is refused with
    unauthorized-access (so is the anonymous relay: tests/admin/test_requests.py)."""
    from proton import Message
    from proton.utils import LinkDetached as ProtonLinkDetached, SendException
    conn = connect(broker, user="admin", password="admin")
    try:
        with pytest.raises((ProtonLinkDetached, SendException)) as caught:
            sender = conn.create_sender("mqgate.admin")
            sender.send(Message(body={"verb": "show", "object": "client-profile",
                                      "arguments": ["default"]}, reply_to="x"))
        assert "unauthorized-access" in str(caught.value) or \
            "admin service" in str(caught.value)
    finally:
        conn.close()
