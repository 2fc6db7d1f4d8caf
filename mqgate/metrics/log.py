"""
The broker's metrics in its log (S5.1): every C{mqgate.metrics.interval} seconds, one
line with the broker's totals, what it holds, its connections, and the rates since the
line before. The source system's C{imq.metrics.interval}; 0 (the default) writes none,
the figures being there on request (C{mqgate cmd metrics}, C{/metrics}).
"""

from twisted.logger import Logger

from mqgate.metrics.commands import rates
from mqgate.metrics.snapshot import broker_snapshot
# The looping shape it shares with ping (a setting whose 0 means off).
from mqgate.net.timers import IntervalService

__all__ = ["MetricsLogService", "log_line"]

_log = Logger(namespace="mqgate.metrics")


def log_line(figures, per_second):
    """The text of one metrics line (C{per_second}: L{rates}, empty for the first)."""
    text = (f"{figures['messages_in']} messages in ({figures['bytes_in']} bytes), "
            f"{figures['messages_out']} out ({figures['bytes_out']} bytes), "
            f"{figures['messages']} held ({figures['messages_bytes']} bytes), "
            f"{figures.get('connections', 0)} connections")
    if per_second:
        text += (f"; per second: {per_second['messages_in']:.1f} messages in, "
                 f"{per_second['messages_out']:.1f} out, "
                 f"{per_second['bytes_in']:.0f} bytes in, "
                 f"{per_second['bytes_out']:.0f} out")
    return text


class MetricsLogService(IntervalService):
    """Log the broker's metrics every C{interval} seconds (none when 0 or off).

    @param context: the admin context the snapshot reads.
    @param clock: an C{IReactorTime}.
    """

    def __init__(self, interval, context, clock, enabled=True):
        super().__init__("metrics-log", interval, self.write, clock, enabled)
        self._context = context
        self._previous = None

    def write(self):
        figures = broker_snapshot(self._context)
        now = self.clock.seconds()
        per_second = {}
        if self._previous is not None:
            per_second = rates(self._previous[1], figures, now - self._previous[0])
        self._previous = (now, figures)
        _log.info("broker metrics: {line}", line=log_line(figures, per_second))
