"""The broker's metrics lines in its log (S5.1), on a task.Clock."""

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from mqgate.admin.requests import AdminContext
from mqgate.core import Broker, BrokerMessage
from mqgate.egress.clients import ClientRegistry
from mqgate.metrics.log import MetricsLogService
from mqgate.metrics.snapshot import MetricsSources


def _lines(service, clock, steps):
    seen = []

    def observe(event):
        if event.get("log_namespace") == "mqgate.metrics":
            seen.append(event["line"])
    globalLogPublisher.addObserver(observe)
    try:
        service.startService()
        for step in steps:
            step()
        service.stopService()
    finally:
        globalLogPublisher.removeObserver(observe)
    return seen


def test_a_line_every_interval_with_rates_from_the_second_on():
    """Every interval one line with the totals; from the second, the rates since the
    line before (here 10 messages of 50 bytes in 10 seconds)."""
    clock = Clock()
    broker = Broker(clock)
    context = AdminContext(broker, ClientRegistry(), None,
                           metrics=MetricsSources(clock, clock.seconds()))
    producer = broker.open_producer("queue://q")
    service = MetricsLogService(10, context, clock)

    def send_ten():
        for _ in range(10):
            producer.send(BrokerMessage(b"z" * 50))
        clock.advance(10)
    lines = _lines(service, clock, [send_ten])
    assert lines[0].startswith("0 messages in (0 bytes)") and "per second" not in lines[0]
    assert lines[1].startswith("10 messages in (500 bytes), 0 out (0 bytes), 10 held")
    assert "per second: 1.0 messages in, 0.0 out, 50 bytes in" in lines[1]


def test_no_lines_when_interval_is_zero_or_disabled():
    """Interval 0 (the default) or mqgate.metrics.enabled=false: no line, no timer."""
    clock = Clock()
    context = AdminContext(Broker(clock), ClientRegistry(), None)
    for service in (MetricsLogService(0, context, clock),
                    MetricsLogService(5, context, clock, enabled=False)):
        assert _lines(service, clock, [lambda: clock.advance(60)]) == []
        assert clock.getDelayedCalls() == []
