"""The egress buffer load factor watch (S9.6): events at the thresholds, and slow
subscribers disconnected, slowest first, only above 100 %."""

from twisted.internet.task import Clock

from mqgate.egress.clients import EgressClient
from mqgate.egress.scheduler import EgressScheduler
from mqgate.egress.slowness import LoadFactor, SlowSubscriberMeter
from mqgate.glue.egress import SLOW_DISCONNECT, EgressContext
from mqgate.net.loadwatch import LoadFactorService


def register(context, name, queued, blocked_for=0.0):
    clock = context.clock
    scheduler = EgressScheduler()
    scheduler.offer_direct("item", queued, key="link")
    meter = SlowSubscriberMeter(clock, threshold=0.1)
    reasons = []
    if blocked_for:
        meter.record(True, True)
        clock.advance(blocked_for)
        meter.record(False, False)
    client = EgressClient(name, user=name, peer="p", protocol="amqp", service="jms",
                          profile=None, scheduler=scheduler, meter=meter,
                          disconnect=reasons.append)
    context.clients.add(client)
    return reasons


def test_events_and_slow_subscribers_over_budget():
    """S9.6: 80 % raises the event once; over 100 % the slowest slow subscriber goes
    first and fast clients are never chosen; falling under 60 % clears it."""
    clock = Clock()
    context = EgressContext(clock)
    watch = LoadFactorService(context, LoadFactor(10_000, 80, 60), clock)
    fast = register(context, "fast", 5000)
    watch.check()
    assert not watch.load_factor.raised
    slower = register(context, "slower", 3000, blocked_for=30)
    slowest = register(context, "slowest", 3000, blocked_for=50)
    watch.check()                              # 110 %: set, and one slow client goes
    assert watch.load_factor.raised
    assert (fast, slower) == ([], []) and len(slowest) == 1
    assert "slow subscriber" in slowest[0]
    assert context.events[SLOW_DISCONNECT] == 1
    for name in ("slowest", "slower"):
        context.clients.remove(context.clients.get(name))
    context.clients.get("fast").scheduler.withdraw("link")
    watch.check()
    assert not watch.load_factor.raised        # 0 %: cleared
