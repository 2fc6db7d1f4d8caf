"""
Ping (S1.7): every C{mqgate.ping.interval} seconds, probe each connection in its own
protocol (an AMQP empty frame, a STOMP heart-beat). A peer that vanished without a FIN
is then found by the failing write; a peer that is there but silent past its idle
timeout is closed by its engine, which gives its unsettled deliveries back.
"""

from twisted.application.internet import TimerService

__all__ = ["PingService", "PeriodicService"]


class PeriodicService(TimerService):
    """Call C{work()} when started and then every C{interval} seconds, on C{clock};
    with an interval of 0 or less (or None), or C{enabled} false, do nothing at all:
    no timer is set.

    The shape ping and the metrics log (L{mqgate.metrics.log}) share: a setting
    whose 0 means off. (The metrics topics keep their own loop: theirs starts
    without a call at once, and their hooks on the core work while it is off.)
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


class PingService(PeriodicService):
    """Ping every connection of some connection services at a fixed interval."""

    def __init__(self, interval, services, clock):
        self.services = services
        super().__init__("ping", interval, self.ping_all, clock)

    def ping_all(self):
        for service in self.services:
            for protocol in _connections(service.factory):
                protocol.ping()


def _connections(factory):
    """The live engine protocols of a service's factory (sniffing factories hold several)."""
    inner = getattr(factory, "factories", None)
    if inner is not None:
        seen = set()
        for each in inner.values():
            if id(each) not in seen:
                seen.add(id(each))
                yield from list(getattr(each, "connections", ()))
    else:
        yield from list(getattr(factory, "connections", ()))
