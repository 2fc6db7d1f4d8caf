"""The svc, cxn and bkr admin commands (S11.1) on real adapters in memory: AMQP
connections on StringTransports (the harness of L{tests.net.test_amqp_adapter}), a
task.Clock for time, fake listening ports and a fake reactor's stop."""

import pytest
from twisted.internet.address import IPv4Address

from mqgate.admin.broker_commands import COMMANDS
from mqgate.admin.requests import AdminContext, AdminRequest, BadRequest, \
    NotFoundError, dispatch
from mqgate.metrics.commands import COMMANDS as METRICS_COMMANDS
from mqgate.metrics.prometheus import exposition
from mqgate.metrics.snapshot import MetricsSources, broker_snapshot
from mqgate.metrics.topics import broker_fields
from mqgate.admin.tables import render_table
from mqgate.net.connections import ADMIN_CLOSE, ConnectionRegistry
from mqgate.net.control import REPLY_GRACE, BrokerControl
from mqgate.net.services import ConnectionService
from tests.net.test_amqp_adapter import Harness, closes, run_for


class FakePort:
    """A listening port that records whether the reactor would read (accept) it."""

    def __init__(self, port):
        self.reading = True
        self._host = IPv4Address("TCP", "127.0.0.1", port)

    def getHost(self):
        return self._host

    def stopReading(self):
        self.reading = False

    def startReading(self):
        self.reading = True

    def doRead(self):
        pass

    def stopListening(self):
        return None


def stoppable(clock):
    """Give C{clock} the reactor's C{stop}, recording when it was called."""
    clock.stopped_at = None
    clock.stop = lambda: setattr(clock, "stopped_at", clock.seconds())
    return clock


class Setup:
    """A broker of one AMQP service (jms) and an admin service, both "listening"."""

    def __init__(self, tmp_path, overrides=None):
        self.harness = Harness(tmp_path, overrides)
        self.clock = self.harness.clock
        self.registry = ConnectionRegistry()
        factory = self.harness.factory
        factory.registry, factory.service_name, factory.protocol_label = \
            self.registry, "jms", "AMQP"
        self.jms = self._service("jms", factory, "NORMAL", 5672)
        self.admin = self._service("admin", object(), "ADMIN", 7677)
        self.exits = []
        self.reactor = stoppable(self.clock)
        self.control = BrokerControl(
            self.reactor, instance="test", services=[self.jms, self.admin],
            connections=self.registry, broker=self.harness.broker, store="memory",
            at_exit=lambda *args: self.exits.append(args), execute=None)
        self.context = AdminContext(self.harness.broker, None, None, control=self.control)

    def _service(self, name, factory, kind, port):
        service = ConnectionService(name, self.clock, "tcp:0", factory,
                                    entry=("tcp", kind), details={"max_threads": 9})
        service.running = True
        service._listening(FakePort(port))
        return service

    def run(self, *words):
        return dispatch(COMMANDS, self.context, AdminRequest(words[0], words[1], words[2:]))


@pytest.fixture
def setup(tmp_path):
    return Setup(tmp_path)


def test_list_cxn_shows_a_logged_in_connection(setup):
    """A connection is listed with its id, service, user, address and container id."""
    peer = setup.harness.opened(port=40123)
    setup.clock.advance(7)
    reply = setup.run("list", "cxn")
    [row] = reply.data
    assert row["id"] == peer.protocol.connection_id
    assert (row["service"], row["protocol"], row["user"]) == ("jms", "AMQP", "admin")
    assert (row["host"], row["port"]) == ("127.0.0.1", 40123)
    assert row["client_id"] == "peer-40123"
    assert row["connected_seconds"] == 7
    assert "peer-40123" in reply.text and "127.0.0.1:40123" in reply.text


def test_ids_are_unique_and_gone_connections_unlisted(setup):
    """Each connection gets its own id; one that went is no longer listed, and its id
    is not given to the next one."""
    first = setup.harness.opened(port=40001)
    second = setup.harness.opened(port=40002)
    ids = [first.protocol.connection_id, second.protocol.connection_id]
    assert len(set(ids)) == 2
    first.lose()
    third = setup.harness.opened(port=40003)
    assert third.protocol.connection_id not in ids
    assert [r["port"] for r in setup.run("list", "cxn").data] == [40002, 40003]
    assert [r["port"] for r in setup.run("list", "cxn", "-svn", "admin").data] == []


def test_destroy_cxn_closes_with_connection_forced(setup):
    """`destroy cxn` closes an AMQP connection with amqp:connection:forced and says
    who closed it."""
    peer = setup.harness.opened()
    mark = len(peer.written)
    reply = setup.run("destroy", "cxn", "-n", str(peer.protocol.connection_id))
    assert reply.data["destroyed"] == peer.protocol.connection_id
    peer.collect()
    [close] = closes(peer, mark)
    assert close.error.condition == "amqp:connection:forced"
    assert close.error.description == ADMIN_CLOSE


def test_query_and_destroy_unknown_or_bad_ids(setup):
    """An id no connection has is a 404; an id that is not a number a 400."""
    with pytest.raises(NotFoundError, match="no connection 42"):
        setup.run("query", "cxn", "-n", "42")
    with pytest.raises(BadRequest, match="a connection id is a number"):
        setup.run("destroy", "cxn", "-n", "forty-two")
    with pytest.raises(BadRequest, match="missing -n"):
        setup.run("destroy", "cxn")


def test_pause_svc_stops_accepting_and_reading(setup):
    """`pause svc` stops the port being read (accepting) and the connections' sockets;
    a wake-up of the port (the accept pacer's) goes back to sleep; `resume` undoes it
    all, the pacer's read included."""
    peer = setup.harness.opened()
    port = setup.jms._port
    pacer_read = port.doRead = lambda: None    # as the accept pacer installs it
    setup.run("pause", "svc", "-n", "jms")
    assert not port.reading
    assert peer.transport.producerState == "paused"
    port.startReading()     # the pacer frees a slot
    port.doRead()           # the reactor reads the port
    assert not port.reading
    assert setup.run("list", "svc").data[0]["state"] == "PAUSED"
    setup.run("resume", "svc", "-n", "jms")
    assert port.reading and port.doRead is pacer_read
    assert peer.transport.producerState == "producing"
    assert setup.run("list", "svc").data[0]["state"] == "RUNNING"


def test_paused_connection_is_not_timed_out_for_our_silence(tmp_path):
    """While its service is paused a silent connection outlives its idle timeout (we
    are the ones not reading it); once resumed the timeout applies again."""
    setup = Setup(tmp_path, {"mqgate.amqp.idle_timeout": "2"})
    peer = setup.harness.opened()
    setup.jms.pause()
    run_for(setup.clock, 10)
    peer.collect()
    assert not closes(peer)
    setup.jms.resume()
    run_for(setup.clock, 10)
    peer.collect()
    [close] = closes(peer)
    assert "idle" in close.error.description


def test_connection_made_while_paused_is_not_read(setup):
    """A socket accepted just before the pause (or handed over by the sniffer since)
    is paused as soon as its protocol starts."""
    setup.jms.pause()
    peer = setup.harness.connect()
    assert peer.transport.producerState == "paused"
    setup.jms.resume()
    assert peer.transport.producerState == "producing"


def test_pausing_an_admin_service_is_refused(setup):
    """An ADMIN service is never paused: the reason says why and what to do instead."""
    with pytest.raises(BadRequest, match="lock them out"):
        setup.run("pause", "svc", "-n", "admin")
    assert not setup.admin.paused


def test_query_svc_and_unknown_service(setup):
    """`query svc` adds the bind address and the service's details; an unknown name
    is a 404 naming the services that run."""
    data = setup.run("query", "svc", "-n", "jms").data
    assert (data["host"], data["port"], data["max_threads"]) == ("127.0.0.1", 5672, 9)
    with pytest.raises(NotFoundError, match="running: jms, admin"):
        setup.run("query", "svc", "-n", "nosuch")


def test_pause_and_resume_bkr(setup):
    """`pause bkr` pauses the NORMAL services only; `resume bkr` resumes them."""
    assert setup.run("pause", "bkr").data == {"paused": ["jms"]}
    assert setup.jms.paused and not setup.admin.paused
    assert setup.run("query", "bkr").data["state"] == "PAUSED"
    assert setup.run("resume", "bkr").data == {"resumed": ["jms"]}
    assert setup.run("query", "bkr").data["state"] == "RUNNING"


def test_query_bkr(setup):
    """`query bkr` counts connections and destinations and tells the uptime."""
    setup.harness.opened()
    setup.harness.broker.create_queue("orders")
    setup.reactor.advance(12)
    data = setup.run("query", "bkr").data
    assert (data["instance"], data["connections"], data["queues"]) == ("test", 1, 1)
    assert data["uptime_seconds"] == 12
    assert data["services"] == {"jms": "RUNNING", "admin": "RUNNING"}
    assert data["store"] == "memory"


def test_shutdown_bkr_stops_after_the_delay(setup):
    """`shutdown bkr -time 3` stops the reactor 3 s later; a second request is not
    a second stop; a delay below the reply's grace waits for the grace."""
    reply = setup.run("shutdown", "bkr", "-time", "3")
    assert reply.data == {"shutdown": "test", "seconds": 3.0}
    setup.reactor.advance(2.9)
    assert setup.reactor.stopped_at is None
    setup.reactor.advance(0.1)
    assert setup.reactor.stopped_at == 3
    assert setup.control.state == "SHUTTING_DOWN"
    setup.run("restart", "bkr")
    assert setup.exits == []    # already stopping: no re-execution added


def test_shutdown_bkr_now_waits_for_the_reply(setup):
    """`shutdown bkr` (no -time) stops only after the reply had its grace."""
    setup.run("shutdown", "bkr")
    setup.reactor.advance(REPLY_GRACE / 2)
    assert setup.reactor.stopped_at is None
    setup.reactor.advance(REPLY_GRACE)
    assert setup.reactor.stopped_at is not None


def test_bad_shutdown_time(setup):
    """-time takes seconds from 0 to a day."""
    for value in ("-1", "soon", "100000"):
        with pytest.raises(BadRequest, match="-time takes seconds"):
            setup.run("shutdown", "bkr", "-time", value)
    assert setup.reactor.stopped_at is None


def test_restart_bkr_re_executes_at_exit(setup):
    """`restart bkr` stops the reactor and leaves the re-execution of the same command
    line, from the same directory, for the interpreter's exit."""
    executed = []
    setup.control._execute = lambda argv, cwd: executed.append((argv, cwd))
    setup.run("restart", "bkr")
    [(at_exit,)] = setup.exits
    setup.reactor.advance(REPLY_GRACE)
    assert setup.reactor.stopped_at is not None
    assert setup.control.state == "RESTARTING"
    at_exit()
    [(argv, cwd)] = executed
    assert argv and cwd


def test_sigterm_during_a_restart_stops_for_good(setup):
    """A SIGTERM while a restart is under way ends the process: nothing re-executes."""
    executed = []
    setup.control._execute = lambda argv, cwd: executed.append((argv, cwd))
    setup.run("restart", "bkr")
    setup.control.stop_for_good()
    [(at_exit,)] = setup.exits
    at_exit()
    assert executed == [] and setup.control.state == "SHUTTING_DOWN"


def test_commands_without_control_say_so(tmp_path):
    """A context without the broker's control (tests, tools) answers with a 404."""
    context = AdminContext(None, None, None)
    with pytest.raises(NotFoundError, match="does not expose"):
        dispatch(COMMANDS, context, AdminRequest("list", "svc"))


def test_render_table():
    """Columns are as wide as their widest cell; None shows as '-'."""
    text = render_table(("A", "Long header"), [("x", None), ("yyyy", 2)])
    assert text.splitlines() == ["-----------------", "A     Long header",
                                 "-----------------", "x     -", "yyyy  2"]


def test_bytes_read_before_the_pause_wait_for_the_resume(setup):
    """Bytes handed over after the pause (the sniffer replays a socket's first bytes
    once it knows the protocol) are acted on only at the resume: a new client's AMQP
    header is not answered while its service is paused."""
    setup.jms.pause()
    peer = setup.harness.connect()
    peer.protocol.dataReceived(peer.client.data_to_send())
    assert peer.transport.value() == b""
    setup.jms.resume()
    peer.pump()
    setup.harness.authenticator.succeed_all()
    setup.clock.advance(0)
    peer.pump()
    assert setup.run("list", "cxn").data[0]["state"] == "OPEN"


def _connection_counts(setup):
    """What every place that reports the open connections says now."""
    context = setup.context
    metrics_run = lambda *words: dispatch(  # noqa: E731
        METRICS_COMMANDS, context, AdminRequest(words[0], words[1], words[2:]))
    [jms_row] = [r for r in setup.run("list", "svc").data if r["name"] == "jms"]
    body = exposition(context)[0].decode()
    [prometheus] = [line.split()[-1] for line in body.splitlines()
                    if line.startswith('mqgate_connections{service="jms"}')]
    return {
        "list svc": jms_row["connections"],
        "query bkr": setup.run("query", "bkr").data["connections"],
        "metrics svc": metrics_run("metrics", "svc", "-n", "jms").data["connections"],
        "metrics bkr": metrics_run("metrics", "bkr").data["connections"],
        "prometheus": int(float(prometheus)),
        "numConnections": broker_fields(broker_snapshot(context),
                                        context.broker)["numConnections"],
    }


def test_every_report_of_open_connections_reads_the_same_count(setup):
    """list svc, query bkr, metrics svc|bkr, Prometheus and the metrics topic's
    numConnections all say how many connections are open, logged in or not yet."""
    setup.context.metrics = MetricsSources(setup.clock, services={"jms": setup.jms},
                                           connections=setup.registry)
    assert set(_connection_counts(setup).values()) == {0}
    first = setup.harness.opened(port=40001)
    setup.harness.connect(port=40002)      # still logging in: counted too
    setup.harness.opened(port=40003)
    assert set(_connection_counts(setup).values()) == {3}
    first.lose()
    assert set(_connection_counts(setup).values()) == {2}
