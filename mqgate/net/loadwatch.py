"""
The egress buffer load factor, watched once a second (S9.6).

The bytes waiting in every client's egress queues are summed against the broker's
budget (C{mqgate.egress.buffer.budget}). Crossing the set threshold and falling back
below the clear one are logged once each (L{mqgate.egress.slowness.LoadFactor} keeps
the hysteresis). Above 100 %, after the event, the slowest slow subscribers are
disconnected until the projected load is back under the budget: their queues are what
the broker would otherwise have to keep.
"""

from twisted.application.internet import TimerService
from twisted.logger import Logger

from mqgate.egress.slowness import LOAD_SET, ClientLoad, LoadFactor
from mqgate.glue.egress import SLOW_DISCONNECT

__all__ = ["LoadFactorService"]

log = Logger(namespace="mqgate.egress")

_INTERVAL = 1.0


class LoadFactorService(TimerService):
    """Check the load factor every second and act on it.

    @param context: the broker's L{mqgate.glue.egress.EgressContext}.
    @param load_factor: a L{LoadFactor}.
    """

    def __init__(self, context, load_factor, clock):
        super().__init__(_INTERVAL, self.check)
        self.setName("load-factor")
        self.clock = clock
        self.context = context
        self.load_factor = load_factor

    @classmethod
    def from_settings(cls, settings, context, clock):
        return cls(context, LoadFactor(settings["mqgate.egress.buffer.budget"],
                                       settings["mqgate.egress.load_factor.set"],
                                       settings["mqgate.egress.load_factor.clear"]),
                   clock)

    def check(self):
        """One look: log a set/clear event, let go of slow subscribers above 100 %."""
        clients = self.context.clients
        factor = self.load_factor
        event = factor.update(clients.queued_bytes)
        if event is not None:
            log.warn("egress buffer load factor {event}: {percent:.0f} % of {budget} bytes "
                     "({clients} clients)",
                     event="set" if event == LOAD_SET else "clear",
                     percent=factor.percent, budget=factor.budget_bytes,
                     clients=len(clients))
        if not factor.over_capacity:
            return
        loads = [ClientLoad(client, client.queued_bytes, client.meter.share(), client.slow)
                 for client in clients]
        for client in factor.victims(loads):
            self.context.count(SLOW_DISCONNECT)
            log.warn("{event}: {client} ({peer}, user {user}) holds {queued} egress bytes "
                     "and was blocked {share:.0f} % of the last minute; disconnected to "
                     "bring the egress buffers under their budget",
                     event=SLOW_DISCONNECT, client=client.name, peer=client.peer,
                     user=client.user, queued=client.queued_bytes,
                     share=client.meter.share() * 100)
            client.disconnect("disconnected as a slow subscriber: the broker's egress "
                              "buffers are over their budget")
