"""
A timer for the settings whose 0 means "off" (C{mqgate.ping.interval},
C{mqgate.metrics.interval}): a Twisted C{TimerService} that, when off, neither starts
its loop nor fails to stop one, so the wiring adds it to the broker either way.
"""

from twisted.application.internet import TimerService

__all__ = ["IntervalService"]


class IntervalService(TimerService):
    """Call C{call} every C{interval} seconds while running, if C{enabled} and the
    interval is above 0; otherwise a service that does nothing.

    @ivar enabled: whether it calls anything at all.
    @ivar clock: the C{IReactorTime} its loop runs on (C{TimerService} reads it).
    """

    def __init__(self, name, interval, call, clock, enabled=True):
        self.enabled = bool(enabled and interval and interval > 0)
        # TimerService wants a real interval even for a loop that never starts.
        super().__init__(interval if self.enabled else 1, call)
        self.setName(name)
        self.clock = clock

    def startService(self):
        if self.enabled:
            super().startService()

    def stopService(self):
        if self.enabled:
            return super().stopService()
        return None
