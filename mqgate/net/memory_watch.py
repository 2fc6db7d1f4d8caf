"""
The memory state sampler (S2.6): a timer that checks the broker's memory state.

The glues check the state themselves whenever a producer's credit is topped up or a
message arrives, so a state rises at once. Falling needs no message: consumers taking
messages is what brings it down, so this timer looks every
C{mqgate.memory.check_interval} seconds and, when the state falls below RED, the
producers waiting for it get their credit back (AMQP) or their socket read again
(STOMP). All the logic is in L{mqgate.core.memory}; this is the Twisted side.
"""

from twisted.application.internet import TimerService
from twisted.logger import Logger

from mqgate.core.memory import MemoryConfig, MemoryStates, default_limit
from mqgate.metrics.process import physical_memory

__all__ = ["MemoryWatchService", "memory_states"]

log = Logger(namespace="mqgate.memory")


def memory_states(settings, broker, physical=physical_memory):
    """C{(states, origin)}: the L{MemoryStates} of C{broker} by the settings, and
    where its limit comes from (for the start-up log)."""
    limit = settings["mqgate.memory.limit"]
    if limit:
        origin = "mqgate.memory.limit"
    else:
        machine = physical()
        share = settings["mqgate.memory.share"]
        limit = default_limit(machine, share)
        origin = (f"{share} % of the machine's {machine} bytes, mqgate.memory.share"
                  if machine else "the machine's memory is unknown: 1 GiB")
    config = MemoryConfig(
        limit=limit,
        thresholds=(settings["mqgate.yellow.threshold"],
                    settings["mqgate.orange.threshold"],
                    settings["mqgate.red.threshold"]),
        counts=(settings["mqgate.green.count"], settings["mqgate.yellow.count"],
                settings["mqgate.orange.count"]),
        hysteresis=settings["mqgate.memory.hysteresis"],
        overhead=settings["mqgate.memory.message_overhead"])
    return MemoryStates(config, broker.holdings), origin


class MemoryWatchService(TimerService):
    """Check C{memory} (a L{MemoryStates}) every C{interval} seconds; say at start
    what its limit is, where it comes from (C{origin}) and how to change it."""

    def __init__(self, memory, interval, origin="mqgate.memory.limit"):
        super().__init__(interval, self.look)
        self.setName("memory-watch")
        self.memory = memory
        self.origin = origin
        #: The L{mqgate.core.paging.Pager} that pages bodies out at ORANGE and RED,
        #: or C{None} (a broker without a store).
        self.pager = None

    def look(self):
        """Check the state, then let the pager page out or read back."""
        self.memory.check()
        if self.pager is not None:
            try:
                self.pager.tick()
            except Exception:
                # The timer must go on (it lets held back producers go on at RED).
                log.failure("paging message bodies out failed; tried again at the"
                            " next check")

    @classmethod
    def from_settings(cls, settings, broker):
        memory, origin = memory_states(settings, broker)
        return cls(memory, settings["mqgate.memory.check_interval"], origin)

    def startService(self):
        config = self.memory.config
        log.info("memory states: the messages held may use {limit} bytes ({origin});"
                 " YELLOW, ORANGE and RED at {thresholds} % of it, RED refuses new"
                 " messages; set mqgate.memory.limit to change it", limit=config.limit,
                 origin=self.origin,
                 thresholds="/".join(str(t) for t in config.thresholds))
        super().startService()
