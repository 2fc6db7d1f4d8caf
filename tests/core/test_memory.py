"""Memory states (S2.6): GREEN/YELLOW/ORANGE/RED against mqgate.memory.limit, with
hysteresis, producer credit batches per state, refusal at RED and recovery."""

import pytest
from twisted.logger import LogLevel, capturedLogs

from mqgate.core import BrokerMessage
from mqgate.core.limits import ResourceLimitExceeded
from mqgate.core.memory import (
    GREEN, ORANGE, RED, YELLOW, MemoryConfig, MemoryStates, default_limit)
from mqgate.errors import ConfigError
from mqgate.core.errors import ErrorKind

from tests.core import consume, make_broker


class Held:
    """What a fake broker holds, set by the test."""

    def __init__(self):
        self.count = 0
        self.bytes = 0


def states(limit=1000, **kwargs):
    kwargs.setdefault("overhead", 0)
    held = Held()
    return MemoryStates(MemoryConfig(limit=limit, **kwargs), held), held


@pytest.fixture
def logged():
    with capturedLogs() as events:
        yield events


def memory_lines(events):
    return [e for e in events if e.get("log_namespace") == "mqgate.memory"]


def test_states_rise_with_the_thresholds():
    """Each state is entered at its threshold, percent of the limit (80/90/98)."""
    memory, held = states()
    seen = []
    for used in (0, 799, 800, 899, 900, 979, 980, 1500):
        held.bytes = used
        memory.check()
        seen.append(memory.state)
    assert seen == [GREEN, GREEN, YELLOW, YELLOW, ORANGE, ORANGE, RED, RED]


def test_hysteresis_keeps_a_state_until_well_below_its_threshold():
    """A state is left only 5 points below its threshold: hovering at 80 % does not
    flap between GREEN and YELLOW."""
    memory, held = states()
    held.bytes = 800
    memory.check()
    for used in (799, 760, 751, 750, 801, 790):
        held.bytes = used
        memory.check()
        assert memory.state == YELLOW, used
    held.bytes = 749
    assert memory.check() == 0 and memory.state == GREEN
    assert memory.changes == 2


def test_falling_from_red_lands_where_the_use_is():
    """From RED a big drain falls straight to the state the use calls for."""
    memory, held = states()
    held.bytes = 990
    memory.check()
    assert memory.refusing
    held.bytes = 820
    memory.check()
    assert memory.state == YELLOW and not memory.refusing
    held.bytes = 100
    memory.check()
    assert memory.state == GREEN


def test_overhead_counts_per_message():
    """What is measured is the messages' bytes plus an overhead per message held."""
    memory, held = states(overhead=10)
    held.count, held.bytes = 50, 400
    memory.check()
    assert memory.used == 900 and memory.state == ORANGE


def test_credit_batches_per_state():
    """A producer's credit batch is capped by the state's count (5000/500/50), 0 at
    RED."""
    memory, held = states()
    assert memory.credit(1000) == 1000
    held.bytes = 850
    assert memory.credit(1000) == 500
    held.bytes = 950
    assert memory.credit(1000) == 50 and memory.credit(10) == 10
    held.bytes = 999
    assert memory.credit(1000) == 0


def test_callbacks_run_once_when_red_is_left():
    """Producers waiting at RED are called back once, when the state falls below
    it, and not while it stays."""
    memory, held = states()
    held.bytes = 985
    memory.check()
    calls = []
    memory.when_accepting(lambda: calls.append(1))
    held.bytes = 960     # under 98 % but not under 93 %: still RED
    memory.check()
    assert calls == [] and memory.refusing
    held.bytes = 500
    memory.check()
    assert calls == [1]
    memory.check()
    assert calls == [1]
    memory.when_accepting(lambda: calls.append(2))   # not RED: at once
    assert calls == [1, 2]


def test_one_callback_asked_twice_is_held_once():
    """A connection asking again while RED lasts is called once: the callbacks are
    bounded by the connections, not by how often they ask."""
    memory, held = states()
    held.bytes = 990
    memory.check()
    calls = []

    class Connection:
        def fell(self):
            calls.append(1)
    connection = Connection()
    for _ in range(100):
        memory.when_accepting(connection.fell)
    held.bytes = 0
    memory.check()
    assert calls == [1]


def test_forgotten_callback_is_not_called():
    """A connection that went drops its callback."""
    memory, held = states()
    held.bytes = 990
    memory.check()
    calls = []
    callback = lambda: calls.append(1)   # noqa: E731
    memory.when_accepting(callback)
    memory.forget(callback)
    held.bytes = 0
    memory.check()
    assert calls == []


def test_each_change_is_one_log_line_with_the_figures(logged):
    """A change of state logs one line naming both states, the bytes, the percent and
    the setting; a check that changes nothing logs nothing."""
    memory, held = states()
    held.bytes = 990
    memory.check()
    memory.check()
    held.bytes = 10
    memory.check()
    lines = memory_lines(logged)
    assert len(lines) == 2
    first = lines[0]
    assert first["log_level"] == LogLevel.warn
    text = first["log_format"].format(**first)
    assert "GREEN -> RED" in text and "990 bytes" in text
    assert "mqgate.memory.limit=1000" in text and "refused" in text
    assert lines[1]["log_level"] == LogLevel.info


def test_refusal_names_the_state_and_setting():
    """The error a message gets at RED is a LIMIT_EXCEEDED naming RED and
    mqgate.memory.limit."""
    memory, held = states()
    held.bytes = 990
    memory.check()
    error = memory.refusal()
    assert isinstance(error, ResourceLimitExceeded)
    assert error.kind is ErrorKind.LIMIT_EXCEEDED
    assert "RED" in error.description and "mqgate.memory.limit=1000" in error.description


def test_snapshot_has_the_figures():
    """The metrics get the state, its level and the bytes against the limit."""
    memory, held = states()
    held.bytes = 910
    memory.check()
    snap = memory.snapshot()
    assert snap["memory_state"] == ORANGE and snap["memory_level"] == 2
    assert snap["memory_used_bytes"] == 910 and snap["memory_limit_bytes"] == 1000
    assert snap["memory_percent"] == 91.0


@pytest.mark.parametrize("kwargs, key", [
    ({"thresholds": (90, 80, 98)}, "mqgate.orange.threshold"),
    ({"thresholds": (80, 90, 101)}, "mqgate.red.threshold"),
    ({"hysteresis": 80}, "mqgate.memory.hysteresis"),
    ({"limit": 0}, "mqgate.memory.limit"),
])
def test_bad_settings_name_the_key(kwargs, key):
    """Thresholds out of order, hysteresis past YELLOW or no limit are refused by
    name."""
    with pytest.raises(ConfigError) as error:
        MemoryConfig(**kwargs)
    assert error.value.key == key


def test_default_limit_is_a_share_of_physical_memory():
    """mqgate.memory.limit=0 means mqgate.memory.share percent of physical memory."""
    assert default_limit(16 << 30, 25) == 4 << 30
    assert default_limit(None, 25) == 1 << 30


def test_broker_held_feeds_the_states():
    """The broker's own account of what it holds drives the state, and consumers
    taking messages bring it down."""
    broker, _ = make_broker()
    memory = MemoryStates(MemoryConfig(limit=1000, overhead=0), broker.holdings)
    producer = broker.open_producer("queue://q")
    for _ in range(10):
        producer.send(BrokerMessage(b"x" * 99))
    assert memory.check() == 3
    consumer, target = consume(broker, "queue://q", credit=10)
    target.settle_all()
    assert memory.check() == 0


def test_state_in_metrics_and_prometheus():
    """metrics bkr's snapshot and Prometheus' /metrics carry the memory state and
    its figures."""
    from prometheus_client.parser import text_string_to_metric_families

    from mqgate.admin.requests import AdminContext
    from mqgate.egress.clients import ClientRegistry
    from mqgate.metrics.prometheus import exposition
    from mqgate.metrics.snapshot import broker_snapshot

    broker, _ = make_broker()
    broker.memory = MemoryStates(MemoryConfig(limit=1000, overhead=0), broker.holdings)
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"x" * 950))
    broker.memory.check()
    context = AdminContext(broker, ClientRegistry(), None)
    snap = broker_snapshot(context)
    assert snap["memory_state"] == ORANGE and snap["memory_used_bytes"] == 950
    body, _ = exposition(context)
    samples = {s.name: s.value for f in text_string_to_metric_families(body.decode())
               for s in f.samples}
    assert samples["mqgate_memory_state"] == 2
    assert samples["mqgate_memory_used_bytes"] == 950
    assert samples["mqgate_memory_limit_bytes"] == 1000


def test_sampler_states_its_limit_at_start_and_lets_red_fall(tmp_path):
    """The sampler service's start-up line gives the limit, where it comes from and
    the setting to change; with mqgate.memory.limit=0 the limit is
    mqgate.memory.share of physical memory; its timer lets RED fall."""
    from twisted.internet.task import Clock

    from mqgate.config import Settings
    from mqgate.net.memory_watch import MemoryWatchService, memory_states

    settings = Settings.from_properties([], {"mqgate.memory.share": "10"},
                                        varhome=str(tmp_path))
    broker, _ = make_broker()
    memory, origin = memory_states(settings, broker, physical=lambda: 1000 << 20)
    assert memory.config.limit == 100 << 20 and "mqgate.memory.share" in origin
    settings = Settings.from_properties([], {"mqgate.memory.limit": "1k",
                                             "mqgate.memory.message_overhead": "0"},
                                        varhome=str(tmp_path))
    service = MemoryWatchService.from_settings(settings, broker)
    service.clock = clock = Clock()
    broker.memory = service.memory
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"x" * 1020))
    with capturedLogs() as events:
        service.startService()
        try:
            assert service.memory.refusing      # the timer looks at once
            consumer, target = consume(broker, "queue://q", credit=1)
            target.settle_all()
            assert service.memory.refusing      # until the timer looks again
            clock.advance(1)
            assert not service.memory.refusing
        finally:
            service.stopService()
    text = [e["log_format"].format(**e) for e in events
            if "memory states:" in e.get("log_format", "")]
    assert len(text) == 1 and "1024 bytes (mqgate.memory.limit)" in text[0]
    assert "set mqgate.memory.limit to change it" in text[0]
