"""
A service that does one thing at a fixed interval, or nothing when its setting is 0: the
shape of the ping (L{mqgate.net.ping}) and of the metrics log line
(L{mqgate.metrics.log}).
"""

from twisted.application.internet import TimerService

__all__ = ["PeriodicService"]


class PeriodicService(TimerService):
    """Call C{work()} when started and then every C{interval} seconds, on C{clock};
    with an interval of 0 or less (or None), or C{enabled} false, do nothing at all:
    no timer is set.

    (The metrics topics keep their own loop: theirs starts without a call at once,
    and their hooks on the core work while it is off.)
    """

    def __init__(self, name, interval, work, clock, enabled=True):
        self.enabled = bool(enabled and interval is not None and interval > 0)
        super().__init__(interval if self.enabled else 1, work)
        self.setName(name)
        self.clock = clock

    def startService(self):
        if self.enabled:
            super().startService()

    def stopService(self):
        if self.enabled:
            return super().stopService()
        return None
