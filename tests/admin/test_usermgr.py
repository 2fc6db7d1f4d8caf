"""`mqgate usermgr` (S4.3) and the password file's permissions in every tool (S4.6).

Most tests run ``python -m mqgate.admin.cli`` in a child process with stdin not a
terminal, as a script would; one runs it on a pseudo-terminal to type the password.
"""

import json
import os
import pty
import select
import stat
import subprocess
import sys
import time

import pytest

from mqgate.security.users import UserRepository, read_users, verify_password
from tests.e2e.broker import REPO_ROOT, broker_environment


def mqgate(*args, timeout=60):
    """Run ``python -m mqgate.admin.cli ARGS`` with stdin not a tty; return the result."""
    return subprocess.run(
        [sys.executable, "-m", "mqgate.admin.cli", *args], cwd=str(REPO_ROOT),
        env=broker_environment(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=timeout)


@pytest.fixture
def varhome(tmp_path):
    return tmp_path / "var"


def repository(varhome):
    return varhome / "instances" / "mqgate" / "etc" / "passwd"


def passfile(tmp_path, password, mode=0o600, name="pf"):
    """A password file holding mqgate.usermgr.password=PASSWORD, with C{mode}."""
    path = tmp_path / name
    path.write_text(f"mqgate.usermgr.password={password}\n", encoding="utf-8")
    path.chmod(mode)
    return path


def usermgr(varhome, *args):
    return mqgate("usermgr", *args, "--varhome", str(varhome))


def test_round_trip_add_list_update_delete(tmp_path, varhome):
    """S4.3: a user added with a password from the password file is listed, its
    password, group and flag can be changed, and it can be deleted."""
    first = passfile(tmp_path, "first-pw", name="one")
    result = usermgr(varhome, "add", "-u", "alice", "--passfile", str(first))
    assert result.returncode == 0, result.stderr
    assert "created user repository" in result.stderr   # a new instance
    users = {u.name: u for u in read_users(repository(varhome))}
    assert users["alice"].group == "user" and users["alice"].active
    assert verify_password(users["alice"].password_hash, "alice", "first-pw")
    assert "first-pw" not in result.stdout + result.stderr

    second = passfile(tmp_path, "second-pw", name="two")
    assert usermgr(varhome, "update", "-u", "alice", "--passfile",
                   str(second)).returncode == 0
    alice = {u.name: u for u in read_users(repository(varhome))}["alice"]
    assert verify_password(alice.password_hash, "alice", "second-pw")
    assert not verify_password(alice.password_hash, "alice", "first-pw")

    result = usermgr(varhome, "update", "-u", "alice", "-g", "admin", "-a", "false")
    assert result.returncode == 0, result.stderr
    listed = json.loads(usermgr(varhome, "list", "--json").stdout)
    assert {"user": "alice", "group": "admin", "active": False} in listed
    active = json.loads(usermgr(varhome, "active", "--json").stdout)
    assert [u["user"] for u in active] == ["admin", "guest"]

    assert usermgr(varhome, "delete", "-u", "alice").returncode == 0
    assert "alice" not in usermgr(varhome, "list").stdout
    assert stat.S_IMODE(os.stat(repository(varhome)).st_mode) == 0o600


def test_list_prints_a_table(varhome):
    """S4.3: `list` prints user, group and active flag as a table with a header."""
    result = usermgr(varhome, "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["USER", "GROUP", "ACTIVE"]
    assert lines[2].split() == ["admin", "admin", "true"]
    assert lines[3].split() == ["guest", "anonymous", "true"]


@pytest.mark.parametrize("option", ["-p", "--password", "--passwd"])
def test_password_on_the_command_line_is_refused(varhome, option):
    """S4.3: a password on the command line is refused (status 2), the message says
    how to give it instead and does not repeat it, and nothing is changed."""
    result = usermgr(varhome, "add", "-u", "bob", option, "hunter2")
    assert result.returncode == 2
    assert "--passfile" in result.stderr and "mqgate.usermgr.password" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert not repository(varhome).exists()


@pytest.mark.parametrize("args, message", [
    (("add", "-u", "admin"), "user 'admin' exists already"),
    (("add", "-u", "a:b"), "bad user name 'a:b'"),
    (("add", "-u", "x*"), "bad user name 'x*'"),
    (("add", "-u", "second", "-g", "anonymous"), "already in group anonymous"),
    (("update", "-u", "nobody", "-a", "false"), "no user 'nobody'"),
    (("delete", "-u", "nobody"), "no user 'nobody'"),
    (("delete", "-u", "admin"), "last active user of group admin"),
    (("update", "-u", "admin", "-a", "false"), "last active user of group admin"),
    (("update", "-u", "admin", "-g", "user"), "last active user of group admin"),
])
def test_refused_requests_say_why_and_change_nothing(tmp_path, varhome, args, message):
    """S4.3: each request that cannot be done exits 1 with a message saying why, and
    leaves the repository as it was."""
    usermgr(varhome, "list")
    before = repository(varhome).read_bytes()
    result = usermgr(varhome, *args, "--passfile", str(passfile(tmp_path, "pw")))
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert repository(varhome).read_bytes() == before


def test_without_a_terminal_or_password_file_it_says_how(varhome):
    """S4.3: with no terminal to ask at and no password file, add exits 2 and says to
    use --passfile."""
    result = usermgr(varhome, "add", "-u", "carol")
    assert result.returncode == 2
    assert "--passfile" in result.stderr


def test_missing_user_option_is_a_usage_error(varhome):
    """S4.3: add, update and delete need -u; without it the exit status is 2."""
    assert usermgr(varhome, "delete").returncode == 2


def _type_at_terminal(args, answers, timeout=30.0):
    """Run mqgate ARGS on a pseudo-terminal, answering each prompt in turn; return
    (exit status, everything the terminal showed)."""
    pid, fd = pty.fork()
    if pid == 0:   # the child: become the tool
        os.chdir(str(REPO_ROOT))
        os.execve(sys.executable, [sys.executable, "-m", "mqgate.admin.cli", *args],
                  broker_environment())
    shown, deadline = b"", time.monotonic() + timeout
    answers = list(answers)
    answered_at = 0   # answer each prompt once: only text after the last answer counts
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(fd, 4096)
            except OSError:   # the child has gone: the terminal is closed
                break
            if not chunk:
                break
            shown += chunk
            if answers and shown[answered_at:].rstrip().endswith(b":"):
                os.write(fd, answers.pop(0).encode() + b"\n")
                answered_at = len(shown)
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        while done == 0 and time.monotonic() < deadline:
            time.sleep(0.05)   # polling for the exit, bounded by the deadline
            done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:   # still running past the deadline (waiting for input): end it
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode("utf-8", "replace")


def test_prompted_password_is_asked_twice_and_never_echoed(varhome):
    """S4.3: at a terminal, add asks for the password twice, does not echo it, and the
    user can then be verified with it."""
    status, shown = _type_at_terminal(
        ["usermgr", "add", "-u", "dave", "--varhome", str(varhome)],
        ["typed-secret", "typed-secret"])
    assert status == 0, shown
    assert "Password of dave:" in shown and "Repeat the password of dave:" in shown
    assert "typed-secret" not in shown
    dave = UserRepository.load(repository(varhome)).get("dave")
    assert verify_password(dave.password_hash, "dave", "typed-secret")


def test_prompted_passwords_that_differ_change_nothing(varhome):
    """S4.3: two different answers at the prompts exit 1 and add no user."""
    status, shown = _type_at_terminal(
        ["usermgr", "add", "-u", "erin", "--varhome", str(varhome)], ["one", "two"])
    assert status == 1, shown
    assert "differ" in shown
    assert "erin" not in repository(varhome).read_text()


# -- the password file's permissions, in every tool (S4.6) ----------------------------

# Each mode's wording is in tests/security/test_passfile.py; here each tool once, with
# the least visible case (only the group can read it).
@pytest.mark.parametrize("mode", [0o640])
@pytest.mark.parametrize("tool", [
    ("usermgr", "add", "-u", "frank"),
    ("keytool",),
    ("dbmgr", "create", "-D", "mqgate.persist.store=jdbc"),
    ("cmd", "-b", "127.0.0.1:1", "show", "client", "*"),
])
def test_every_tool_refuses_a_password_file_others_can_use(tmp_path, varhome, tool, mode):
    """S4.6: usermgr, keytool, dbmgr and cmd refuse a password file group or others
    can read or write, naming the file, its mode and `chmod 600 FILE`, and do nothing."""
    path = passfile(tmp_path, "pw", mode=mode)
    etc = varhome / "instances" / "mqgate" / "etc"
    etc.mkdir(parents=True)
    (etc / "passfile").write_bytes(path.read_bytes())
    (etc / "passfile").chmod(mode)
    options = ("--varhome", str(varhome), "-D", "mqgate.passfile.enabled=true")
    if tool[0] == "cmd":   # its own options go before the command words
        result = mqgate(*tool[:3], *options, *tool[3:])
    else:
        result = mqgate(*tool, *options)
    assert result.returncode == 2, result.stderr
    assert f"chmod 600 {etc / 'passfile'}" in result.stderr
    assert f"mode {mode:04o}" in result.stderr
    assert sorted(p.name for p in etc.iterdir()) == ["passfile"]   # nothing made
