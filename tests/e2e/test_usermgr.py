"""`mqgate usermgr` against a running broker (S4.3), and the broker's refusal of a password
file others can read (S4.6).

The users are changed with the real tool (``python -m mqgate.admin.cli usermgr``, the
password from a password file) while the broker runs; logins are real AMQP (Proton,
SASL PLAIN) and STOMP (stomp.py) clients, with credentials.
"""

import time

import proton
import pytest

from tests.admin.test_usermgr import mqgate
from tests.e2e.proton_client import connect
from tests.e2e.stomp_client import DeadlineExceeded, open_client

#: The repository is looked at once a second at most (S4.3): a change is seen by the
#: first login at most this long after it; the tests wait on the login, not a sleep.
SEEN_WITHIN = 5.0


def usermgr(broker, tmp_path, *args, password=None):
    """Run `mqgate usermgr ARGS` on the broker's instance; the password, if any, from
    a 0600 password file."""
    extra = []
    if password is not None:
        path = tmp_path / "usermgr-passfile"
        path.write_text(f"mqgate.usermgr.password={password}\n", encoding="utf-8")
        path.chmod(0o600)
        extra = ["--passfile", str(path)]
    result = mqgate("usermgr", *args, "--varhome", str(broker.varhome), *extra)
    assert result.returncode == 0, result.stderr
    return result


def amqp_login(broker, user, password):
    """Whether an AMQP connection with SASL PLAIN as C{user} is accepted."""
    try:
        conn = connect(broker, user=user, password=password, timeout=10)
    except proton.ConnectionException:
        return False
    conn.close()
    return True


def stomp_login(broker, user, password):
    """Whether a STOMP CONNECT as C{user} gets CONNECTED."""
    try:
        client = open_client(broker.address("stomp"), user=user, passcode=password,
                             timeout=10)
    except DeadlineExceeded:
        return False
    client.close()
    return True


@pytest.fixture(scope="module")
def broker(module_broker):
    """One broker for the module: each test changes users of its own, and the one that
    breaks the repository mends it again."""
    return module_broker


def until(predicate, what, timeout=SEEN_WITHIN):
    """Try C{predicate} until it is true, for at most C{timeout} seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"


def test_new_user_and_changed_password_work_without_a_restart(broker, tmp_path):
    """S4.3: a user added while the broker runs can log in; after its password is
    updated the old one is refused and the new one accepted, over AMQP and STOMP, and
    the broker was never restarted."""
    pid = broker.pid
    usermgr(broker, tmp_path, "add", "-u", "alice", password="first-pw")
    until(lambda: amqp_login(broker, "alice", "first-pw"), "alice logs in")
    assert stomp_login(broker, "alice", "first-pw")

    usermgr(broker, tmp_path, "update", "-u", "alice", password="second-pw")
    until(lambda: not amqp_login(broker, "alice", "first-pw"), "old password refused")
    assert amqp_login(broker, "alice", "second-pw")
    assert stomp_login(broker, "alice", "second-pw")
    assert not stomp_login(broker, "alice", "first-pw")
    assert broker.pid == pid and broker.returncode is None


def test_deactivated_and_deleted_users_are_refused(broker, tmp_path):
    """S4.3: a user set inactive, then deleted, with usermgr is refused at its next
    login while the broker runs."""
    usermgr(broker, tmp_path, "add", "-u", "bob", password="bob-pw")
    until(lambda: amqp_login(broker, "bob", "bob-pw"), "bob logs in")
    usermgr(broker, tmp_path, "update", "-u", "bob", "-a", "false")
    until(lambda: not amqp_login(broker, "bob", "bob-pw"), "inactive bob refused")
    usermgr(broker, tmp_path, "update", "-u", "bob", "-a", "true")
    until(lambda: amqp_login(broker, "bob", "bob-pw"), "bob active again")
    usermgr(broker, tmp_path, "delete", "-u", "bob")
    until(lambda: not amqp_login(broker, "bob", "bob-pw"), "deleted bob refused")


def test_broken_repository_keeps_the_users_and_logs_the_line(broker, tmp_path):
    """S4.3: a repository edited into a bad line keeps the users the broker had, and
    its log names the file and line."""
    path = broker.varhome / "instances" / "mqgate" / "etc" / "passwd"
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "not a user line\n", encoding="utf-8")
    try:
        line = text.count("\n") + 1
        until(lambda: amqp_login(broker, "admin", "admin") and any(
            f"{path}:{line}" in out for out in broker.output), "warning in the log")
        assert amqp_login(broker, "admin", "admin")
    finally:
        path.write_text(text, encoding="utf-8")


def test_startup_warning_names_the_real_command(broker):
    """S4.3: the start-up warning about default passwords names
    `mqgate usermgr update -u admin`, a command that exists."""
    broker.wait_for_line(r"mqgate usermgr update -u admin`")


def test_broker_refuses_a_password_file_others_can_read(broker_factory, tmp_path):
    """S4.6: with mqgate.passfile.enabled and a password file the group can read, the
    broker does not start, and says which file, its mode and `chmod 600`."""
    varhome = tmp_path / "varhome0"
    etc = varhome / "instances" / "mqgate" / "etc"
    etc.mkdir(parents=True)
    (etc / "passfile").write_text("mqgate.keystore.password=x\n", encoding="utf-8")
    (etc / "passfile").chmod(0o640)
    process = broker_factory({"mqgate.passfile.enabled": "true"}, wait=False)
    assert process.varhome == varhome
    process.wait_for_line(rf"chmod 600 {etc / 'passfile'}")
    assert process.wait_exit() != 0
    assert any("mode 0640" in line for line in process.output)
