"""Tests for the thread-pool models of S1.6 (mqgate/net/pool.py) and their hooks in
EngineProtocol.

Three levels, all on task.Clock and StringTransport (no sockets, no sleeps):

- the pool's accounting and the Distributor, with recording connections;
- EngineProtocol with a recording engine and glue, to see in which order (and in which
  turn) the engine was fed;
- the real AMQP and STOMP factories, to see what a refused client is told.
"""

import pytest
from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqgate.egress.slowness import SlowSubscriberMeter
from mqgate.glue.egress import Egress
from mqgate.amqp import conditions as c
from mqgate.amqp.connection import Connection
from mqgate.amqp.events import AuthenticationRequested, ConnectionClosed, ConnectionOpened
from mqgate.amqp.performatives import (
    RECEIVER, Attach, Begin, Close, Open, Source, Target)
from mqgate.config import Settings
from mqgate.core.broker import Broker
from mqgate.errors import ConfigError
from mqgate.glue.amqp import GlueConfig
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.amqp import AmqpServerFactory, Flusher
from mqgate.net.engine import EngineFactory
from mqgate.net.pool import (
    DEDICATED, SHARED, Distributor, PoolConfig, RefusalGate, ServicePool)
from mqgate.net.stomp import StompServerFactory
from mqgate.security.auth import Principal
from tests.amqp.helpers import decode_stream, performatives_of

KB = 1024
MB = 1024 * KB
ADMIN = Principal("admin", {"admin"})


# -- recording stand-ins --------------------------------------------------------------


class RecordingConnection:
    """The pool's view of a connection: records what it is fed and told."""

    def __init__(self, name, log):
        self.name = name
        self.log = log
        self.paused = False
        self.pauses = 0

    def process_inbound(self, data):
        self.log.append((self.name, len(data)))

    def pause_inbound(self):
        self.paused = True
        self.pauses += 1

    def resume_inbound(self):
        self.paused = False


class StepClock(task.Clock):
    """A Clock whose L{step} runs what is due now, but not what those calls schedule
    for "now" in turn: one reactor iteration (the reactor runs a C{callLater(0)} made
    by a timed call in its next iteration, after reading the sockets). Clock.advance(0)
    would run every turn of a distributor at once."""

    def step(self):
        due = [call for call in self.calls if call.getTime() <= self.seconds()]
        for call in due:
            self.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


def pool_of(clock, **config):
    """A ServicePool for service jms; C{config} overrides PoolConfig fields."""
    fields = {"service": "jms", "min_threads": 0, "max_threads": 4} | config
    return ServicePool(PoolConfig(**fields), clock)


def run_turns(clock, count):
    """Let the reactor come round C{count} times (each runs at most one turn)."""
    for _ in range(count):
        clock.step()


def names(log):
    return [name for name, _size in log]


# -- configuration ----------------------------------------------------------------------


def test_defaults_follow_the_openmq_table(tmp_path):
    """Every service's pool defaults are FACTS 1.7's (stomp takes jms's), dedicated,
    with 512 connections per distributor (S1.6)."""
    settings = Settings.from_properties([], {}, varhome=str(tmp_path))
    expected = {"jms": (10, 1000), "admin": (4, 10), "ssljms": (10, 500),
                "ssladmin": (4, 10), "stomp": (10, 1000)}
    for service, (low, high) in expected.items():
        config = PoolConfig.from_settings(service, settings)
        assert (config.model, config.min_threads, config.max_threads,
                config.monitor_limit) == (DEDICATED, low, high, 512), service


def test_settings_choose_the_shared_model(tmp_path):
    """threadpool_model, max_threads and connectionMonitor_limit are read per service
    (the imq. spelling included) (S1.6)."""
    settings = Settings.from_properties([], {
        "imq.jms.threadpool_model": "shared", "mqgate.jms.max_threads": "3",
        "mqgate.jms.min_threads": "1", "imq.shared.connectionMonitor_limit": "-1"},
        varhome=str(tmp_path))
    config = PoolConfig.from_settings("jms", settings)
    assert (config.model, config.min_threads, config.max_threads,
            config.monitor_limit, config.capacity) == (SHARED, 1, 3, -1, None)


def test_a_default_minimum_follows_a_smaller_maximum(tmp_path):
    """max_threads=4 alone lowers the default minimum (10) to 4; a minimum the operator
    set above the maximum is an error naming mqgate.jms.min_threads (S1.6)."""
    settings = Settings.from_properties([], {"mqgate.jms.max_threads": "4"},
                                        varhome=str(tmp_path))
    assert PoolConfig.from_settings("jms", settings).min_threads == 4
    both = settings.with_overrides({"mqgate.jms.min_threads": "5"})
    with pytest.raises(ConfigError) as info:
        PoolConfig.from_settings("jms", both)
    assert info.value.key == "mqgate.jms.min_threads"


@pytest.mark.parametrize("fields, key", [
    ({"min_threads": 5, "max_threads": 4}, "mqgate.jms.min_threads"),
    ({"min_threads": 0, "max_threads": 1}, "mqgate.jms.max_threads"),
    ({"monitor_limit": 0}, "mqgate.shared.connectionMonitor_limit"),
    ({"model": "pooled"}, "mqgate.jms.threadpool_model"),
])
def test_inconsistent_pool_settings_name_the_key(fields, key):
    """A pool that could never work (minimum above maximum, a dedicated pool too small
    for one connection, distributors watching nothing) is a ConfigError naming the key."""
    with pytest.raises(ConfigError) as info:
        PoolConfig(service="jms", **fields)
    assert info.value.key == key


def test_one_worker_is_enough_only_for_the_shared_model(tmp_path):
    """max_threads=1 is one distributor in the shared model, but not even one
    connection in the dedicated one: that is an error naming the key (S1.6)."""
    settings = Settings.from_properties([], {"mqgate.admin.max_threads": "1"},
                                        varhome=str(tmp_path))
    with pytest.raises(ConfigError) as info:
        PoolConfig.from_settings("admin", settings)
    assert info.value.key == "mqgate.admin.max_threads"
    shared = settings.with_overrides({"mqgate.admin.threadpool_model": "shared"})
    assert PoolConfig.from_settings("admin", shared).capacity == 512


# -- admission ------------------------------------------------------------------------


def test_dedicated_admits_half_of_max_threads():
    """Dedicated: each connection holds two workers, so max_threads=4 admits two
    connections and refuses the third (S1.6)."""
    clock, log = StepClock(), []
    pool = pool_of(clock)
    lanes = [pool.admit(RecordingConnection(n, log)) for n in "abc"]
    assert lanes[0] is not None and lanes[1] is not None and lanes[2] is None
    stats = pool.stats()
    assert (stats["in_use"], stats["connections"], stats["capacity"],
            stats["refused"]) == (4, 2, 2, 1)


def test_closing_a_dedicated_connection_frees_its_slot():
    """When an admitted connection goes, its two workers come back and the next
    connection is admitted (S1.6)."""
    clock, log = StepClock(), []
    pool = pool_of(clock)
    first = pool.admit(RecordingConnection("a", log))
    pool.admit(RecordingConnection("b", log))
    assert pool.admit(RecordingConnection("c", log)) is None
    first.release()
    first.release()  # a second release changes nothing
    assert pool.admit(RecordingConnection("d", log)) is not None
    assert pool.stats()["connections"] == 2
    pool.stop()


def test_dedicated_input_is_processed_as_it_arrives():
    """Dedicated: a connection's bytes reach its engine at once, without waiting for a
    reactor turn (S1.6)."""
    clock, log = StepClock(), []
    lane = pool_of(clock).admit(RecordingConnection("a", log))
    lane.received(b"x" * 100)
    assert log == [("a", 100)]
    assert clock.getDelayedCalls() == []


def test_shared_fills_distributors_up_to_max_threads_times_the_limit():
    """Shared: a distributor (one worker) watches connectionMonitor_limit connections;
    a new one starts only when the others are full; max_threads=2 with a limit of 3
    admits six connections (S1.6)."""
    clock, log = StepClock(), []
    pool = pool_of(clock, model=SHARED, max_threads=2, monitor_limit=3)
    lanes = [pool.admit(RecordingConnection(str(n), log)) for n in range(7)]
    assert [lane is not None for lane in lanes] == [True] * 6 + [False]
    assert [len(d) for d in pool.distributors] == [3, 3]
    stats = pool.stats()
    assert (stats["in_use"], stats["distributors"], stats["capacity"],
            stats["refused"]) == (2, 2, 6, 1)


def test_an_empty_distributor_gives_its_worker_back():
    """When the last connection of a distributor goes, the distributor stops and its
    worker is idle; a connection leaving a distributor that still has others keeps it."""
    clock, log = StepClock(), []
    pool = pool_of(clock, model=SHARED, max_threads=2, monitor_limit=2)
    a, b, c3 = (pool.admit(RecordingConnection(n, log)) for n in "abc")
    c3.release()
    assert pool.stats()["in_use"] == 1 and len(pool.distributors) == 1
    a.release()
    assert pool.stats()["in_use"] == 1
    b.release()
    assert (pool.stats()["in_use"], pool.stats()["idle"], pool.distributors) == (0, 2, [])
    pool.stop()


def test_unlimited_monitor_limit_puts_everyone_on_one_distributor():
    """connectionMonitor_limit=-1: one distributor watches any number of connections
    and the service has no connection limit (S1.6, FACTS 1.7)."""
    clock, log = StepClock(), []
    pool = pool_of(clock, model=SHARED, max_threads=2, monitor_limit=-1)
    lanes = [pool.admit(RecordingConnection(str(n), log)) for n in range(1000)]
    assert all(lanes) and len(pool.distributors) == 1
    assert pool.stats()["capacity"] is None


def test_the_refusal_says_which_limit_and_key():
    """The refusal text names the service, its connection limit, the key to raise and
    asks the client to retry later (S1.6)."""
    clock = StepClock()
    assert pool_of(clock).refusal_description() == (
        "service jms is at its limit of 2 connections (mqgate.jms.max_threads=4); "
        "try again later")
    shared = pool_of(clock, model=SHARED, max_threads=2, monitor_limit=8)
    assert shared.refusal_description() == (
        "service jms is at its limit of 16 connections (mqgate.jms.max_threads=2, "
        "mqgate.shared.connectionMonitor_limit=8); try again later")


# -- idle workers ------------------------------------------------------------------------


def test_idle_workers_retire_down_to_the_minimum():
    """A freed worker stays idle (and counts) until the idle timeout; then the workers
    above min_threads retire, the minimum stays (S1.6)."""
    clock, log = StepClock(), []
    pool = ServicePool(PoolConfig(service="jms", min_threads=2, max_threads=10), clock,
                       idle_timeout=60)
    assert (pool.stats()["in_use"], pool.stats()["idle"]) == (0, 2)  # started at once
    lanes = [pool.admit(RecordingConnection(str(n), log)) for n in range(3)]
    assert (pool.stats()["in_use"], pool.stats()["idle"]) == (6, 0)
    for lane in lanes:
        lane.release()
    assert (pool.stats()["in_use"], pool.stats()["idle"]) == (0, 6)
    clock.advance(59)
    assert pool.stats()["idle"] == 6
    clock.advance(1)
    assert (pool.stats()["idle"], pool.stats()["retired"]) == (2, 4)
    assert clock.getDelayedCalls() == []


def test_a_reused_idle_worker_does_not_retire():
    """Workers are lent most-recently-idle first and retire oldest-idle first, so a
    connection that comes and goes keeps the same workers alive; only the workers idle
    for the whole timeout retire (S1.6)."""
    clock, log = StepClock(), []
    pool = ServicePool(PoolConfig(service="jms", min_threads=0, max_threads=10), clock,
                       idle_timeout=60)
    a = pool.admit(RecordingConnection("a", log))
    b = pool.admit(RecordingConnection("b", log))
    a.release()                      # t=0: a's two workers idle
    clock.advance(30)
    b.release()                      # t=30: b's two workers idle
    c = pool.admit(RecordingConnection("c", log))  # takes b's (the newest idle)
    clock.advance(30)                # t=60: a's workers have idled 60 s
    assert (pool.stats()["in_use"], pool.stats()["idle"], pool.stats()["retired"]) == (
        2, 0, 2)
    c.release()
    clock.advance(60)
    assert (pool.stats()["idle"], pool.stats()["retired"]) == (0, 4)


def test_stop_cancels_every_timer():
    """Stopping the pool leaves no delayed call behind (orderly shutdown, S0.4)."""
    clock, log = StepClock(), []
    pool = pool_of(clock, model=SHARED)
    lane = pool.admit(RecordingConnection("a", log))
    other = pool_of(clock)
    other.admit(RecordingConnection("b", log)).release()
    lane.received(b"x")
    assert clock.getDelayedCalls()
    pool.stop()
    other.stop()
    assert clock.getDelayedCalls() == []


# -- the distributor ---------------------------------------------------------------------


def flood(distributor, connection, total, read=64 * KB):
    """Hand C{total} bytes to the distributor as TCP reads of C{read} bytes would."""
    for _ in range(total // read):
        distributor.received(connection, b"a" * read)


def test_shared_turns_are_round_robin_with_a_budget():
    """Shared: a 1 MB flood on A and a small frame on B on the same distributor: B's
    frame is processed in the first turn, right after one budget of A's, not after
    all of A's data; A is served one budget per turn (S1.6)."""
    clock, log = StepClock(), []
    distributor = Distributor(clock, turn_budget=64 * KB, backlog_limit=2 * MB)
    a, b = RecordingConnection("A", log), RecordingConnection("B", log)
    distributor.add(a)
    distributor.add(b)
    flood(distributor, a, MB)
    distributor.received(b, b"SEND\n\n\x00")
    assert log == []  # nothing is processed before the distributor's turn
    run_turns(clock, 1)
    assert log == [("A", 64 * KB), ("B", 7)]
    run_turns(clock, 15)
    assert log[2:] == [("A", 64 * KB)] * 15
    assert distributor.turns == 16 and clock.getDelayedCalls() == []


def test_a_flood_on_one_connection_leaves_turns_for_later_arrivals():
    """Bytes that arrive on B while A's flood is being worked off are processed in the
    next turn, not queued behind A's backlog (S1.6)."""
    clock, log = StepClock(), []
    distributor = Distributor(clock, turn_budget=16 * KB, backlog_limit=4 * MB)
    a, b = RecordingConnection("A", log), RecordingConnection("B", log)
    distributor.add(a)
    distributor.add(b)
    flood(distributor, a, MB)
    run_turns(clock, 3)
    distributor.received(b, b"x" * 10)
    run_turns(clock, 1)
    assert names(log) == ["A", "A", "A", "A", "B"]


def test_a_flooding_transport_is_paused_and_resumed():
    """Back-pressure: past backlog_limit the flooding connection's transport is paused
    (once), its backlog never grows beyond the limit plus one read, and it is resumed
    when its turns have worked the backlog down (S1.6, design rule 4)."""
    clock, log = StepClock(), []
    distributor = Distributor(clock, turn_budget=64 * KB, backlog_limit=256 * KB)
    a = RecordingConnection("A", log)
    distributor.add(a)
    for _ in range(4):
        distributor.received(a, b"a" * 64 * KB)
    assert not a.paused  # exactly at the limit
    distributor.received(a, b"a" * 64 * KB)
    assert a.paused and distributor.backlog(a) == 320 * KB
    # A paused transport reads nothing more; the turns work the backlog off.
    turns = 0
    while a.paused:
        run_turns(clock, 1)
        turns += 1
    assert turns == 4 and distributor.backlog(a) == 64 * KB and a.pauses == 1
    run_turns(clock, 1)
    assert distributor.backlog(a) == 0 and sum(size for _n, size in log) == 320 * KB


def test_a_quiet_connection_is_never_paused():
    """Only the connection whose own backlog is too large is paused, not its
    neighbours on the distributor (S1.6)."""
    clock, log = StepClock(), []
    distributor = Distributor(clock, turn_budget=1 * KB, backlog_limit=4 * KB)
    a, b = RecordingConnection("A", log), RecordingConnection("B", log)
    distributor.add(a)
    distributor.add(b)
    distributor.received(b, b"b" * 2 * KB)
    flood(distributor, a, 8 * KB, read=KB)
    assert a.paused and not b.paused


def test_leaving_processes_what_was_received():
    """A connection that goes with input still queued has it processed first: bytes
    received count in the shared model as they do in the dedicated one (S1.6)."""
    clock, log = StepClock(), []
    pool = pool_of(clock, model=SHARED)
    lane = pool.admit(RecordingConnection("A", log))
    lane.received(b"x" * 10)
    lane.received(b"y" * 5)
    lane.release()
    assert log == [("A", 15)]
    run_turns(clock, 1)
    assert log == [("A", 15)] and pool.distributors == []
    # What remains is the idle worker's retirement, not a turn.
    assert [call.getTime() for call in clock.getDelayedCalls()] == [60.0]


def test_a_connection_released_during_a_turn_is_skipped():
    """A connection that goes while its distributor's turn runs (another connection's
    processing dropped it) is not fed afterwards."""
    clock, log = StepClock(), []
    distributor = Distributor(clock, turn_budget=KB)
    b = RecordingConnection("B", log)
    lanes = {}

    class Dropper(RecordingConnection):
        def process_inbound(self, data):
            super().process_inbound(data)
            lanes["B"].release()

    a = Dropper("A", log)
    distributor.add(a)
    lanes["B"] = distributor.add(b)
    distributor.received(a, b"a")
    distributor.received(b, b"b" * 2 * KB)
    run_turns(clock, 1)
    # B's backlog was processed when it left (inside A's turn), never in a turn of its own.
    assert log == [("A", 1), ("B", 2 * KB)]
    run_turns(clock, 2)
    assert len(log) == 2


# -- EngineProtocol with a recording engine ------------------------------------------


class RecordingEngine:
    """An engine that records every chunk it is fed; always ready, never finished."""

    ready = True
    finished = False
    error = None

    def __init__(self, name, log):
        self.name = name
        self.log = log
        self.lost = False

    def receive_data(self, data):
        self.log.append((self.name, len(data)))
        return []

    def data_to_send(self):
        return b""

    def tick(self, now):
        return None

    def connection_lost(self):
        self.log.append((self.name, "lost"))
        self.finished = True


class RecordingGlue:
    def __init__(self, engine, clock):
        # The adapter serves every connection's egress queues (S9.3); these stay empty.
        self.egress = Egress(engine, SlowSubscriberMeter(clock), lambda: None)

    def handle(self, events):
        pass

    def connection_lost(self):
        pass


class RecordingFactory(EngineFactory):
    """An EngineFactory whose connections are RecordingEngines, named by port."""

    def __init__(self, clock, pool):
        super().__init__(clock=clock, flusher=Flusher(clock), setup_timeout=30)
        self.pool = pool
        self.log = []

    def make_session(self, protocol):
        engine = RecordingEngine(protocol.peer.split(":")[1], self.log)
        return engine, RecordingGlue(engine, self.clock)


def connect(factory, port):
    """An EngineProtocol of C{factory} on a StringTransport from port C{port}."""
    address = IPv4Address("TCP", "127.0.0.1", port)
    protocol = factory.buildProtocol(address)
    transport = StringTransport(peerAddress=address)
    protocol.makeConnection(transport)
    return protocol, transport


@pytest.mark.parametrize("model", [DEDICATED, SHARED])
def test_the_models_differ_in_who_waits_for_a_flood(model):
    """The observable difference (S1.6): A floods 1 MB, then B sends a small frame.
    Dedicated processes each connection's bytes as they arrive (B after A's read
    chunks, but at once, no turn needed); shared processes B in the first turn, after
    one budget of A's, with A's rest spread over later turns."""
    clock = StepClock()
    pool = pool_of(clock, model=model, max_threads=4, monitor_limit=8)
    factory = RecordingFactory(clock, pool)
    a, _ = connect(factory, 1)
    b, _ = connect(factory, 2)
    for _ in range(16):
        a.dataReceived(b"a" * 64 * KB)
    b.dataReceived(b"b" * 7)
    if model == DEDICATED:
        assert names(factory.log) == ["1"] * 16 + ["2"]
    else:
        assert factory.log == []
        run_turns(clock, 1)
        assert names(factory.log) == ["1", "2"]
        run_turns(clock, 15)
        assert names(factory.log) == ["1", "2"] + ["1"] * 15
    pool.stop()


def test_the_protocol_pauses_and_resumes_its_transport():
    """A shared connection flooding past the backlog limit has its transport paused
    (the socket is not read), and resumed once its turns have caught up (S1.6)."""
    clock = StepClock()
    pool = ServicePool(PoolConfig(service="jms", model=SHARED, min_threads=0,
                                  max_threads=2), clock,
                       turn_budget=64 * KB, backlog_limit=128 * KB)
    protocol, transport = connect(RecordingFactory(clock, pool), 1)
    for _ in range(3):
        protocol.dataReceived(b"a" * 64 * KB)
    assert transport.producerState == "paused"
    run_turns(clock, 2)
    assert transport.producerState == "producing"


def test_a_lost_shared_connection_processes_its_backlog_before_the_loss():
    """connectionLost first processes the bytes still queued, then tells the engine the
    transport is gone, and gives the distributor's worker back (S1.6)."""
    clock = StepClock()
    pool = pool_of(clock, model=SHARED)
    factory = RecordingFactory(clock, pool)
    protocol, _ = connect(factory, 1)
    protocol.dataReceived(b"a" * 10)
    protocol.connectionLost(Failure(ConnectionDone()))
    assert factory.log == [("1", 10), ("1", "lost")]
    assert pool.stats()["in_use"] == 0 and pool.stats()["connections"] == 0
    pool.stop()
    assert clock.getDelayedCalls() == []


def test_without_a_pool_every_connection_is_admitted_and_direct():
    """A factory without a pool (the default) admits everyone and feeds bytes as they
    arrive, as before S1.6."""
    clock = StepClock()
    factory = RecordingFactory(clock, None)
    protocol, _ = connect(factory, 1)
    protocol.dataReceived(b"abc")
    assert factory.log == [("1", 3)] and protocol.refused is None


def test_the_refusal_gate_answers_logins_and_stops_at_the_first_other_event():
    """A refused connection's login is answered by the gate, unchecked; the first other
    event triggers the goodbye once and nothing after it reaches the glue (S1.6)."""
    waved, goodbyes = [], []
    gate = RefusalGate(lambda: goodbyes.append(1), waved.append)
    login = AuthenticationRequested("PLAIN", "u", "p", None)
    gate([login])
    gate(["open", "begin", "attach"])
    gate(["more"])
    assert waved == [login] and goodbyes == [1] and gate.closed


# -- what a refused AMQP or STOMP client sees ----------------------------------------


class AnsweringAuthenticator:
    """Logs everyone in as admin when the test says so."""

    def __init__(self):
        self.pending = []

    def authenticate(self, username, password, source=None, service=None):
        d = defer.Deferred()
        self.pending.append(d)
        return d

    def authenticate_anonymous(self, source=None, service=None):
        return self.authenticate(None, None)

    def succeed_all(self):
        pending, self.pending = self.pending, []
        for d in pending:
            d.callback(ADMIN)


class AmqpPeer:
    """A client engine talking to one server protocol over a StringTransport."""

    def __init__(self, factory, port):
        address = IPv4Address("TCP", "127.0.0.1", port)
        self.protocol = factory.buildProtocol(address)
        self.transport = StringTransport(peerAddress=address)
        self.protocol.makeConnection(self.transport)
        self.client = Connection(server=False, container_id=f"peer-{port}",
                                 credentials=("admin", "admin"), idle_timeout=None)
        self.written = bytearray()
        self.events = []

    def pump(self, rounds=20):
        for _ in range(rounds):
            data = self.transport.value()
            self.transport.clear()
            self.written += data
            if data:
                self.events += self.client.receive_data(data)
            out = self.client.data_to_send()
            if out:
                self.protocol.dataReceived(out)
            if not data and not out:
                return

    def performatives(self, kind):
        return performatives_of(decode_stream(bytes(self.written)), kind)

    def close_error(self):
        closes = [e for e in self.events if isinstance(e, ConnectionClosed)]
        return closes[-1].error if closes else None


class AmqpHarness:
    """An AMQP factory with a dedicated pool of max_threads=4 (two connections)."""

    def __init__(self, tmp_path):
        self.clock = StepClock()
        settings = Settings.from_properties([], {}, varhome=str(tmp_path))
        self.broker = Broker(self.clock)
        self.authenticator = AnsweringAuthenticator()
        self.pool = pool_of(self.clock)
        self.factory = AmqpServerFactory(
            settings=settings, broker=self.broker, authenticator=self.authenticator,
            clock=self.clock, flusher=Flusher(self.clock), glue_config=GlueConfig(),
            container_id="mqgate:test")
        self.factory.pool = self.pool
        self.ports = iter(range(40000, 41000))

    def connect(self, before_open=None):
        """A peer through SASL and the open exchange; C{before_open(peer)} runs once
        the SASL outcome is in, before the client's open is pumped to the broker."""
        peer = AmqpPeer(self.factory, next(self.ports))
        peer.pump()
        self.authenticator.succeed_all()
        self.clock.advance(0)  # the Flusher writes the SASL outcome
        if before_open is not None:
            peer.events += peer.client.receive_data(peer.transport.value())
            peer.written += peer.transport.value()
            peer.transport.clear()
            before_open(peer)
        peer.pump()
        return peer


@pytest.fixture
def amqp(tmp_path):
    return AmqpHarness(tmp_path)


def test_a_refused_amqp_client_gets_open_then_close_with_resource_limit(amqp):
    """The connection beyond max_threads/2 logs in, and is answered with an open and a
    close carrying amqp:resource-limit-exceeded and a description naming the limit;
    then the transport is dropped (S1.6). It is not a silent reset."""
    first, second = amqp.connect(), amqp.connect()
    third = amqp.connect()
    for peer in (first, second):
        assert peer.close_error() is None and not peer.transport.disconnecting
        assert any(isinstance(e, ConnectionOpened) for e in peer.events)
    error = third.close_error()
    assert str(error.condition) == c.RESOURCE_LIMIT_EXCEEDED
    assert error.description == (
        "service jms is at its limit of 2 connections (mqgate.jms.max_threads=4); "
        "try again later")
    assert len(third.performatives(Open)) == 1
    assert third.transport.disconnecting
    assert third.protocol.refused == error.description
    assert amqp.pool.stats()["refused"] == 1


def test_a_refused_client_gets_nothing_it_pipelined_behind_its_open(amqp):
    """Frames a refused client sends behind its open (begin, attach) never reach the
    broker: no session, no link, no queue is created (S1.6)."""
    amqp.connect(), amqp.connect()

    def pipeline(peer):
        session = peer.client.begin_session()
        session.attach_link("rcv", RECEIVER).attach(source=Source(address="q1"),
                                                    target=Target(address="q1"))

    third = amqp.connect(before_open=pipeline)
    assert str(third.close_error().condition) == c.RESOURCE_LIMIT_EXCEEDED
    assert third.performatives(Begin) == [] and third.performatives(Attach) == []
    assert amqp.broker.queues() == []


def test_earlier_connections_keep_working_and_a_freed_slot_admits_again(amqp):
    """After a refusal the admitted connections still work (a session begins), and
    once one of them closes a new client is admitted (S1.6)."""
    first, second = amqp.connect(), amqp.connect()
    amqp.connect()
    second.client.begin_session()
    second.pump()
    assert len(second.performatives(Begin)) == 1
    first.protocol.connectionLost(Failure(ConnectionDone()))
    fourth = amqp.connect()
    assert fourth.close_error() is None
    assert any(isinstance(e, ConnectionOpened) for e in fourth.events)
    assert amqp.pool.stats()["connections"] == 2


def test_a_refused_client_gets_nothing_it_pipelined_behind_its_login(amqp):
    """A refused client that writes its open, begin and attach behind its SASL init,
    in one read, has its login answered unchecked and is closed at its open: the frames
    the answer releases never reach the broker (S1.6)."""
    amqp.connect(), amqp.connect()
    peer = AmqpPeer(amqp.factory, 40999)
    peer.protocol.dataReceived(peer.client.data_to_send())   # its SASL header
    peer.events += peer.client.receive_data(peer.transport.value())  # the mechanisms
    peer.written += peer.transport.value()
    peer.transport.clear()
    sasl_init = peer.client.data_to_send()
    behind = Connection(server=False, container_id="pipelining", idle_timeout=None)
    behind.begin_session().attach_link("rcv", RECEIVER).attach(
        source=Source(address="q1"), target=Target(address="q1"))
    peer.protocol.dataReceived(sasl_init + behind.data_to_send())
    amqp.clock.advance(0)
    peer.written += peer.transport.value()
    assert amqp.authenticator.pending == []   # no password check for it
    [close] = peer.performatives(Close)
    assert str(close.error.condition) == c.RESOURCE_LIMIT_EXCEEDED
    assert peer.performatives(Begin) == [] and peer.performatives(Attach) == []
    assert amqp.broker.queues() == []
    assert peer.transport.disconnecting


def test_a_refused_connection_takes_no_worker(amqp):
    """Refused connections hold no workers, and their loss gives nothing back."""
    amqp.connect(), amqp.connect()
    third = amqp.connect()
    third.protocol.connectionLost(Failure(ConnectionDone()))
    stats = amqp.pool.stats()
    assert (stats["in_use"], stats["connections"], stats["refused"]) == (4, 2, 1)


def test_a_refused_stomp_client_gets_an_error_frame(tmp_path):
    """A STOMP client beyond the limit gets an ERROR frame carrying the reason as soon
    as it connects, before it has said anything, then the connection closes (S1.6,
    STOMP 1.2 ERROR): a refused socket is not held until a deadline."""
    clock = StepClock()
    factory = StompServerFactory(
        broker=Broker(clock), authenticator=AnsweringAuthenticator(), clock=clock,
        flusher=Flusher(clock), setup_timeout=30, glue_config=StompGlueConfig())
    factory.pool = pool_of(clock)
    connect(factory, 1), connect(factory, 2)
    protocol, transport = connect(factory, 3)
    written = transport.value().decode()
    assert written.startswith("ERROR\n")
    assert "service jms is at its limit of 2 connections" in written
    assert "mqgate.jms.max_threads=4" in written
    assert transport.disconnecting
    assert factory.pool.stats()["refused"] == 1


def test_the_stomp_refusal_message_header_says_resource_limit(tmp_path):
    """The ERROR frame of a refused STOMP client has a message header about the limit,
    not "timeout" (S1.6)."""
    clock = StepClock()
    factory = StompServerFactory(
        broker=Broker(clock), authenticator=AnsweringAuthenticator(), clock=clock,
        flusher=Flusher(clock), setup_timeout=30, glue_config=StompGlueConfig())
    factory.pool = pool_of(clock)
    connect(factory, 1), connect(factory, 2)
    protocol, transport = connect(factory, 3)
    protocol.dataReceived(b"CONNECT\naccept-version:1.2\nhost:mqgate\n\n\x00")
    assert "\nmessage:timeout\n" not in transport.value().decode()
