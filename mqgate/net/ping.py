"""
Ping (S1.7): every C{mqgate.ping.interval} seconds, probe each connection in its own
protocol (an AMQP empty frame, a STOMP heart-beat). A peer that vanished without a FIN
is then found by the failing write; a peer that is there but silent past its idle
timeout is closed by its engine, which gives its unsettled deliveries back.
"""

from mqgate.net.timers import IntervalService

__all__ = ["PingService"]


class PingService(IntervalService):
    """Ping every connection of some connection services at a fixed interval (none
    when the interval is 0)."""

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
