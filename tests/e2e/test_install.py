"""Deployment as users install it (S0.3): a wheel built from this checkout, installed
into a fresh virtualenv, started as ``twistd -n mqgate`` from an empty directory,
listens where ``make run``'s broker does and is reached by Proton and stomp.py.

This one test needs the fixed ports 5672, 61613 and 7676 on 127.0.0.1 (every other
broker of the suite takes ports the OS chooses): it fails at once, saying so, when one
of them is taken. Building and installing needs the package index, or pip's cache, for
the dependencies; it takes about 40 s.
"""

import os
import socket
import subprocess
import sys
import tarfile
import threading
import urllib.request
from pathlib import Path

import pytest
import stomp
from proton import Message
from proton.utils import BlockingConnection

from tests.e2e.broker import REPO_ROOT, BrokerProcess
from tests.e2e.test_portmapper import read_port_mapper

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400)]

#: Where an installed broker without --config listens: the shipped configuration.
FIXED_PORTS = {"jms": 5672, "stomp": 61613, "portmapper": 7676}
BUILD_TIMEOUT = 300


def taken_ports():
    """The fixed ports something already listens on (or holds) on 127.0.0.1."""
    taken = []
    for port in FIXED_PORTS.values():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    return taken


def run(argv, **kwargs):
    """Run a build step; fail the test with its output if it fails."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=BUILD_TIMEOUT, **kwargs)
    if result.returncode:
        pytest.fail(f"{' '.join(map(str, argv))} exited {result.returncode}:\n"
                    f"{result.stdout[-4000:]}")
    return result.stdout


def copy_checkout(destination):
    """Copy the files git knows (committed or not, not ignored) to destination: the
    build must not write build/ or egg-info into the checkout."""
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT,
        stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    archive = destination.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, names):
            if (REPO_ROOT / name).exists():
                tar.add(REPO_ROOT / name, arcname=name, recursive=False)
    with tarfile.open(archive) as tar:
        tar.extractall(destination, filter="data")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtualenv with mqgate installed from a wheel of this checkout."""
    base = tmp_path_factory.mktemp("install")
    copy_checkout(base / "src")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
         base / "wheels", "./src"], cwd=base)
    [wheel] = (base / "wheels").glob("mqgate-*.whl")
    # The virtualenv gets no pip of its own (ensurepip takes seconds); this one's pip
    # installs into it (--python), and what ends up there is the same.
    run([sys.executable, "-m", "venv", "--without-pip", base / "venv"])
    run([sys.executable, "-m", "pip", "--python", base / "venv" / "bin" / "python",
         "install", "-q", wheel])
    return base / "venv"


class InstalledBroker(BrokerProcess):
    """``VENV/bin/twistd -n mqgate`` run from an empty directory, with nothing of the
    checkout on its path: exactly what a user types."""

    def __init__(self, venv, directory):
        super().__init__(directory / "var")
        self.venv = venv
        self.directory = directory

    def command(self):
        return [str(self.venv / "bin" / "twistd"), "-n", "mqgate"]

    def spawn(self):
        env = {key: value for key, value in os.environ.items()
               if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PYTHONUNBUFFERED"] = "1"
        return self._launch(self.directory, env)


@pytest.fixture
def installed_broker(installed, tmp_path):
    """The installed broker, started from the empty directory tmp_path/run."""
    taken = taken_ports()
    if taken:
        pytest.fail(f"ports {taken} on 127.0.0.1 are in use (a broker of `make run`?): "
                    "this test starts an installed broker on the shipped ports "
                    "5672, 61613 and 7676; stop whatever holds them")
    directory = tmp_path / "run"
    directory.mkdir()
    broker = InstalledBroker(installed, directory)
    try:
        broker.spawn()
        broker.wait_for_line(r"mqgate ready")
        yield broker
        assert broker.terminate() == 0
    finally:
        broker.kill()


def test_wheel_has_the_plugin_and_no_checkout_on_the_path(installed):
    """The wheel puts mqgate and its twistd plugin into the virtualenv itself (not a
    link to this checkout)."""
    site = run([installed / "bin" / "python", "-c",
                "import mqgate, twisted.plugins.mqgate_plugin as p; "
                "print(mqgate.__file__); print(p.__file__)"], cwd="/")
    for line in site.split():
        assert str(installed) in line and str(REPO_ROOT) not in line


def test_wheel_carries_the_shipped_configuration_and_the_unit(installed):
    """VENV/share/mqgate holds etc/mqgate.properties and etc/mqgate.service as shipped,
    for an operator without a checkout."""
    share = installed / "share" / "mqgate"
    for name in ("mqgate.properties", "mqgate.service"):
        assert (share / name).read_text() == (REPO_ROOT / "etc" / name).read_text()


def test_wheel_carries_the_web_console(installed):
    """The web console's files are in the installed package, every one the checkout
    has: the broker serves them from there (mqgate.web.console.CONSOLE_DIR)."""
    where = Path(run([installed / "bin" / "python", "-c",
                      "from mqgate.web.console import CONSOLE_DIR; print(CONSOLE_DIR)"],
                     cwd="/").strip())
    assert str(installed) in str(where)
    checkout = REPO_ROOT / "mqgate" / "web" / "console"
    assert sorted(p.name for p in where.iterdir()) == sorted(
        p.name for p in checkout.iterdir())


def test_installed_broker_listens_where_make_run_does(installed_broker):
    """From an empty directory the installed broker listens on 5672 (AMQP and STOMP),
    61613 (STOMP) and 7676 (port mapper) on loopback, keeps its data in ./var and says
    where its log goes; Proton and stomp.py exchange a message through it."""
    broker = installed_broker
    ports = broker.ports()
    assert {service: ports.get(service) for service in FIXED_PORTS} == FIXED_PORTS
    var = broker.directory / "var" / "instances" / "mqgate"
    banner = broker.wait_for_line(r"starting: .*log to (.*)").group(1)
    assert banner == f"the console (stdout) and {var / 'log' / 'log.txt'}"
    assert (var / "etc" / "passwd").exists() and (var / "log" / "log.txt").exists()

    console = urllib.request.urlopen(
        f"http://127.0.0.1:{ports['httpadmin']}/console/", timeout=10).read()
    assert b"<title>mqgate console</title>" in console

    table = read_port_mapper(("127.0.0.1", 7676))
    assert b"\njms tcp NORMAL 5672" in table and b"\nstomp tcp NORMAL 61613" in table

    # Proton on 5672 sends to a queue that a stomp.py subscriber on 61613 reads, and
    # a STOMP SEND on 61613 reaches a Proton receiver on 5672.
    received = []
    arrived = threading.Event()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            received.append(frame.body)
            arrived.set()

    stomp_conn = stomp.Connection12([("127.0.0.1", 61613)])
    stomp_conn.set_listener("", Listener())
    stomp_conn.connect("admin", "admin", wait=True)
    amqp = BlockingConnection("amqp://admin:admin@127.0.0.1:5672", timeout=10)
    try:
        # A queue holds the message until the subscriber is there: no race to wait out.
        stomp_conn.subscribe("/queue/installed.to_stomp", id="1", ack="auto")
        receiver = amqp.create_receiver("queue://installed.to_amqp")
        amqp.create_sender("queue://installed.to_stomp").send(
            Message(body="from Proton"))
        assert arrived.wait(10), "the STOMP subscriber got nothing"
        assert received == ["from Proton"]
        stomp_conn.send("/queue/installed.to_amqp", "from stomp.py")
        message = receiver.receive(timeout=10)
        receiver.accept()
        assert message.body in ("from stomp.py", b"from stomp.py")
    finally:
        amqp.close()
        stomp_conn.disconnect()
