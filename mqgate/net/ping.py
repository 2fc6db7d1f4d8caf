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
            for factory in service.engine_factories():
                for protocol in list(factory.connections):
                    protocol.ping()
