"""`mqgate cmd` for services, connections and the broker (S11.1), against a real
`twistd -n mqgate` broker with real clients: Proton, stomp.py, raw sockets.
"""

import contextlib
import os
import signal
import socket
import subprocess

import pytest
from proton import Message
from proton.utils import ConnectionClosed

from tests.e2e.admin_cmd import cmd_json, mqgate_cmd
from tests.e2e.broker import DEFAULT_CONFIG, REPO_ROOT, broker_environment, twistd_command
from tests.e2e.proton_client import connect, opened
from tests.e2e.stomp_client import DeadlineExceeded, RawStomp, open_client
from tests.hostile.probe import wait_until

#: How long a test waits to see that something does NOT happen while a service is
#: paused: the broker answers a local client in milliseconds when it runs.
UNANSWERED = 1.5


@pytest.fixture(scope="module")
def shared_broker(module_broker):
    """One broker for the tests that only ask and change nothing (the others count
    connections or pause services, and get a fresh C{broker})."""
    return module_broker


def connections(broker, passfile, *options):
    return cmd_json(broker, passfile, "list", "cxn", *options)


def _stomp_connect_frame():
    return (b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:admin\n"
            b"passcode:admin\n\n\x00")


# -- services ------------------------------------------------------------------------


def test_list_svc_shows_every_service(broker, passfile):
    """`list svc` shows each service's port, protocols, type, state and connections."""
    result = mqgate_cmd(broker, passfile, "list", "svc")
    assert result.returncode == 0, result.stderr
    for words in ("Service Name", "jms", "AMQP+STOMP", "admin", "ADMIN", "NORMAL",
                  "RUNNING", str(broker.port("jms"))):
        assert words in result.stdout, result.stdout
    with opened(broker, container_id="svc-lister"):
        rows = {r["name"]: r for r in cmd_json(broker, passfile, "list", "svc")}
    assert rows["jms"]["connections"] == 1
    assert rows["jms"]["port"] == broker.port("jms")
    assert rows["admin"]["type"] == "ADMIN"
    assert rows["stomp"]["protocol"] == "STOMP"


def test_query_svc_shows_its_settings(broker_factory, passfile):
    """`query svc -n jms` adds the bind address and the thread-pool settings."""
    broker = broker_factory({"mqgate.jms.threadpool_model": "shared",
                             "mqgate.jms.max_threads": "64"})
    data = cmd_json(broker, passfile, "query", "svc", "-n", "jms")
    assert data["host"] == "127.0.0.1"
    assert data["thread_model"] == "shared"
    assert data["max_threads"] == 64
    assert data["allow_anonymous"] is False
    assert data["state"] == "RUNNING"


def test_unknown_service_is_not_found(shared_broker, passfile):
    """A service that does not run is a 404 naming it and the running ones: exit 1."""
    for words in (("query", "svc", "-n", "nosuch"), ("list", "cxn", "-svn", "nosuch")):
        result = mqgate_cmd(shared_broker, passfile, *words)
        assert result.returncode == 1
        assert "no service 'nosuch' is running" in result.stderr
        assert "jms" in result.stderr and "404" in result.stderr


def test_bad_options_are_bad_requests(shared_broker, passfile):
    """A missing -n, an unknown option or a bad -time is a 400 with the usage."""
    for words, says in ((("query", "svc"), "missing -n; usage: query svc -n NAME"),
                        (("list", "svc", "-x"), "unknown option '-x'"),
                        (("shutdown", "bkr", "-time", "soon"), "-time takes seconds"),
                        (("query", "cxn", "-n", "first"), "a connection id is a number")):
        result = mqgate_cmd(shared_broker, passfile, *words)
        assert result.returncode == 1, result.stdout
        assert says in result.stderr and "400" in result.stderr
    assert shared_broker.returncode is None


def test_pausing_an_admin_service_is_refused(shared_broker, passfile):
    """`pause svc -n admin` is refused with the reason (it would lock us out)."""
    result = mqgate_cmd(shared_broker, passfile, "pause", "svc", "-n", "admin")
    assert result.returncode == 1
    assert "cannot be paused" in result.stderr and "lock" in result.stderr
    rows = {r["name"]: r for r in cmd_json(shared_broker, passfile, "list", "svc")}
    assert rows["admin"]["state"] == "RUNNING"


def test_paused_service_neither_accepts_nor_reads(broker, passfile):
    """While `stomp` is paused, a connected client's SEND gets no receipt and a new
    client's CONNECT no answer; after `resume svc` both are answered."""
    address = broker.address("stomp")
    existing = RawStomp(address)
    newcomer = None
    try:
        assert existing.connect().command == "CONNECTED"
        result = mqgate_cmd(broker, passfile, "pause", "svc", "-n", "stomp")
        assert result.returncode == 0, result.stderr
        assert "paused" in result.stdout
        assert cmd_json(broker, passfile, "query", "svc", "-n", "stomp")["state"] == \
            "PAUSED"
        existing.send(b"SEND\ndestination:/queue/svc.paused\nreceipt:r1\n\nhello\x00")
        newcomer = RawStomp(address)   # the kernel completes the TCP handshake
        newcomer.send(_stomp_connect_frame())
        with pytest.raises(DeadlineExceeded):
            existing.read_frame(timeout=UNANSWERED)
        with pytest.raises(DeadlineExceeded):
            newcomer.read_frame(timeout=UNANSWERED)
        # The admin service still answers meanwhile.
        resumed = mqgate_cmd(broker, passfile, "resume", "svc", "-n", "stomp")
        assert resumed.returncode == 0, resumed.stderr
        receipt = existing.read_frame(timeout=10)
        assert (receipt.command, receipt.get("receipt-id")) == ("RECEIPT", "r1")
        assert newcomer.read_frame(timeout=10).command == "CONNECTED"
    finally:
        existing.close()
        if newcomer is not None:
            newcomer.close()


def test_paused_amqp_service_does_not_answer_a_new_connection(broker, passfile):
    """A new AMQP connection to a paused `jms` hears nothing until `resume svc`."""
    assert mqgate_cmd(broker, passfile, "pause", "svc", "-n", "jms").returncode == 0
    sock = socket.create_connection(broker.address("jms"), timeout=UNANSWERED)
    try:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        with pytest.raises(socket.timeout):
            sock.recv(8)
        assert mqgate_cmd(broker, passfile, "resume", "svc", "-n", "jms").returncode == 0
        sock.settimeout(10)
        assert sock.recv(8) == b"AMQP\x03\x01\x00\x00"
    finally:
        sock.close()


# -- connections -----------------------------------------------------------------------


def test_list_and_query_cxn(broker, passfile):
    """`list cxn` shows an AMQP and a STOMP client with their ids, users, addresses and
    client ids; `-svn` narrows to one service; `query cxn` counts a consumer."""
    with opened(broker, container_id="svc-amqp-client") as conn:
        conn.create_receiver("svc.listed")
        stomp = open_client(broker.address("stomp"), **{"client-id": "svc-stomp-client"})
        try:
            rows = connections(broker, passfile)
            by_client = {r["client_id"]: r for r in rows}
            amqp = by_client["svc-amqp-client"]
            assert (amqp["service"], amqp["protocol"], amqp["user"]) == \
                ("jms", "AMQP", "admin")
            assert amqp["host"] == "127.0.0.1" and amqp["port"] > 0
            assert by_client["svc-stomp-client"]["protocol"] == "STOMP"
            assert len({r["id"] for r in rows}) == len(rows)
            only = connections(broker, passfile, "-svn", "stomp")
            assert [r["client_id"] for r in only] == ["svc-stomp-client"]
            detail = cmd_json(broker, passfile, "query", "cxn", "-n", str(amqp["id"]))
            assert detail["consumers"] == 1 and detail["producers"] == 0
            table = mqgate_cmd(broker, passfile, "list", "cxn").stdout
            assert "svc-amqp-client" in table and "Host:Port" in table
        finally:
            stomp.close()


def test_destroy_amqp_cxn_closes_it_forced_and_requeues(broker, passfile):
    """`destroy cxn` closes a Proton client's connection with amqp:connection:forced
    and "closed by an administrator"; the message it held comes back, redelivered."""
    with opened(broker) as producer:
        producer.create_sender("svc.destroyed").send(Message(body="held", durable=True))
    holder = connect(broker, container_id="svc-holder")
    try:
        receiver = holder.create_receiver("svc.destroyed", credit=1)
        message = receiver.receive(timeout=10)   # taken, not settled
        assert message.body == "held"
        row = next(r for r in connections(broker, passfile)
                   if r["client_id"] == "svc-holder")
        assert row["messages_out"] == 1
        result = mqgate_cmd(broker, passfile, "destroy", "cxn", "-n", str(row["id"]))
        assert result.returncode == 0, result.stderr
        assert "destroyed" in result.stdout
        with pytest.raises(ConnectionClosed) as closed:
            receiver.receive(timeout=10)
        condition = closed.value.connection.remote_condition
        assert condition.name == "amqp:connection:forced"
        assert condition.description == "closed by an administrator"
    finally:
        with contextlib.suppress(Exception):
            holder.close()
    with opened(broker) as conn:
        again = conn.create_receiver("svc.destroyed").receive(timeout=10)
        assert again.body == "held" and again.delivery_count >= 1
    wait_until(lambda: all(r["client_id"] != "svc-holder"
                           for r in connections(broker, passfile)),
               10, "the destroyed connection gone from list cxn")


def test_destroy_stomp_cxn_sends_error(broker, passfile):
    """`destroy cxn` tells a STOMP client why in an ERROR frame, then closes."""
    raw = RawStomp(broker.address("stomp"))
    try:
        assert raw.connect("1.2", "client-id:svc-raw").command == "CONNECTED"
        row = next(r for r in connections(broker, passfile, "-svn", "stomp")
                   if r["client_id"] == "svc-raw")
        assert mqgate_cmd(broker, passfile, "destroy", "cxn", "-n",
                          str(row["id"])).returncode == 0
        frames = raw.read_until_closed(timeout=10)
        assert frames[0].command == "ERROR"
        assert frames[0].get("message") == "closed by an administrator"
    finally:
        raw.close()


def test_unknown_connection_is_not_found(shared_broker, passfile):
    """Destroying or querying an id no connection has is a 404 naming it."""
    for verb in ("destroy", "query"):
        result = mqgate_cmd(shared_broker, passfile, verb, "cxn", "-n", "99999")
        assert result.returncode == 1
        assert "no connection 99999" in result.stderr and "404" in result.stderr


# -- the broker ------------------------------------------------------------------------


def test_query_bkr(shared_broker, passfile):
    """`query bkr` tells the version, instance, uptime, state, services and counts."""
    with opened(shared_broker):
        data = cmd_json(shared_broker, passfile, "query", "bkr")
    assert data["instance"] == "mqgate"
    assert data["state"] == "RUNNING"
    assert data["services"]["jms"] == "RUNNING"
    assert data["connections"] >= 2   # ours and the command's
    assert data["uptime_seconds"] >= 0
    assert "file store" in data["store"]
    assert data["version"]


def test_svc_and_bkr_commands_count_the_same_connections(broker, passfile):
    """With a Proton connection on jms and a raw socket still logging in on stomp,
    `list svc`, `metrics svc` and `list cxn` agree on each service's connections, and
    `metrics bkr` and `query bkr` on the broker's once the commands' own have gone."""
    with opened(broker, container_id="counted"), \
            socket.create_connection(("127.0.0.1", broker.port("stomp"))):
        wait_until(lambda: len(connections(broker, passfile, "-svn", "stomp")) == 1,
                   10, "the raw socket listed")
        rows = {r["name"]: r for r in cmd_json(broker, passfile, "list", "svc")}
        for name in ("jms", "stomp"):
            figures = cmd_json(broker, passfile, "metrics", "svc", "-n", name)
            listed = connections(broker, passfile, "-svn", name)
            assert rows[name]["connections"] == figures["connections"] == len(listed) == 1

        def both():
            # Each command counts its own admin connection; an earlier command's may
            # still be closing when the next one asks.
            queried = cmd_json(broker, passfile, "query", "bkr")["connections"]
            metered = cmd_json(broker, passfile, "metrics", "bkr")["connections"]
            return (queried, metered) if queried == metered == 3 else None
        assert wait_until(both, 10, "query bkr and metrics bkr: 3 connections")


def test_pause_bkr_pauses_normal_services_only(broker, passfile):
    """`pause bkr` pauses jms and stomp, leaves admin and httpadmin working; `resume
    bkr` undoes it."""
    assert mqgate_cmd(broker, passfile, "pause", "bkr").returncode == 0
    data = cmd_json(broker, passfile, "query", "bkr")    # admin still answers
    assert data["state"] == "PAUSED"
    assert data["services"] == {"portmapper": "RUNNING", "jms": "PAUSED",
                                "admin": "RUNNING", "stomp": "PAUSED",
                                "httpadmin": "RUNNING"}
    sock = socket.create_connection(broker.address("jms"), timeout=UNANSWERED)
    try:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        with pytest.raises(socket.timeout):
            sock.recv(8)
        assert mqgate_cmd(broker, passfile, "resume", "bkr").returncode == 0
        sock.settimeout(10)
        assert sock.recv(8) == b"AMQP\x03\x01\x00\x00"
    finally:
        sock.close()
    assert cmd_json(broker, passfile, "query", "bkr")["state"] == "RUNNING"


def test_shutdown_bkr_replies_then_exits_0(broker, passfile):
    """`shutdown bkr -time 1` is answered, then the broker stops cleanly: exit 0."""
    result = mqgate_cmd(broker, passfile, "shutdown", "bkr", "-time", "1")
    assert result.returncode == 0, result.stderr
    assert "shutting down in 1 s" in result.stdout
    assert broker.wait_exit() == 0
    assert any("mqgate stopped" in line for line in broker.output)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_restart_bkr_comes_back_on_the_same_ports_with_its_messages(
        broker_factory, passfile):
    """`restart bkr`: the same process runs again, on the same fixed ports, with the
    persistent message sent before; its pid file names it again."""
    ports = {"mqgate.jms.tcp.port": str(_free_port()),
             "mqgate.admin.tcp.port": str(_free_port()),
             "mqgate.portmapper.port": str(_free_port())}
    broker = broker_factory(ports)
    broker.wait_until_catching_sigterm()
    with opened(broker) as conn:
        conn.create_sender("svc.restart").send(Message(body="kept", durable=True))
    result = mqgate_cmd(broker, passfile, "restart", "bkr")
    assert result.returncode == 0, result.stderr
    assert "restarting" in result.stdout
    broker.wait_for_line(r"mqgate stopped")
    # The second "mqgate ready" is the new run's (the first was before the restart).
    wait_until(lambda: sum("mqgate ready" in line for line in broker.output) == 2,
               30, "the broker ready again after the restart")
    assert broker.returncode is None
    pidfile = broker.varhome / "twistd.pid"
    assert pidfile.read_text().strip() == str(broker.pid)
    jms = int(ports["mqgate.jms.tcp.port"])
    listening = [line for line in broker.output if f"listening on 127.0.0.1:{jms}" in line]
    assert len(listening) == 2
    with opened(broker) as conn:
        message = conn.create_receiver("svc.restart").receive(timeout=10)
        assert message.body == "kept"
    assert cmd_json(broker, passfile, "query", "bkr")["uptime_seconds"] < 60
    assert broker.terminate() == 0


def _pid_in(pidfile):
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_restart_bkr_of_a_daemonized_broker(tmp_path, passfile):
    """A daemonized broker (`twistd mqgate`, no -n) restarted with `restart bkr`
    daemonizes again: a new pid in its pid file, the same ports; SIGTERM then stops
    it and its pid file goes."""
    ports = {"portmapper": _free_port(), "jms": _free_port(), "admin": _free_port()}
    pidfile, logfile = tmp_path / "twistd.pid", tmp_path / "twistd.log"
    args = ["--pidfile", str(pidfile), "--logfile", str(logfile), "mqgate",
            "--config", str(DEFAULT_CONFIG), "--varhome", str(tmp_path / "varhome"),
            "-D", f"mqgate.portmapper.port={ports['portmapper']}",
            "-D", f"mqgate.jms.tcp.port={ports['jms']}",
            "-D", f"mqgate.admin.tcp.port={ports['admin']}",
            "-D", "mqgate.stomp.tcp.port=0"]
    started = subprocess.run(twistd_command(*args), cwd=str(REPO_ROOT),
                             env=broker_environment(), capture_output=True, text=True,
                             timeout=60)
    assert started.returncode == 0, started.stderr

    def ready_lines():
        return logfile.exists() and logfile.read_text().count("mqgate ready")

    daemon = None    # the pid of the daemon we started, as it is now
    try:
        wait_until(lambda: ready_lines() == 1, 30, "the daemon ready")
        first = daemon = _pid_in(pidfile)

        class Address:    # what mqgate_cmd reads of a broker
            def port(self, service):
                return ports[service]

        result = mqgate_cmd(Address(), passfile, "restart", "bkr")
        assert result.returncode == 0, result.stderr
        wait_until(lambda: ready_lines() == 2, 30, "the daemon ready again")
        second = wait_until(lambda: _pid_in(pidfile) != first and _pid_in(pidfile),
                            30, "a new pid in the pid file")
        daemon = second
        assert _running(second)
        with socket.create_connection(("127.0.0.1", ports["jms"]), timeout=10) as sock:
            sock.sendall(b"AMQP\x03\x01\x00\x00")
            assert sock.recv(8) == b"AMQP\x03\x01\x00\x00"
        os.kill(second, signal.SIGTERM)
        wait_until(lambda: not _running(second), 30, "the daemon stopped")
        assert not pidfile.exists()
    finally:
        if daemon is not None and _running(daemon):
            os.kill(daemon, signal.SIGKILL)
