"""The client registry (S9.6, S9.7): names, patterns, users and the bytes they hold."""

from twisted.internet.task import Clock

from mqgate.egress.clients import ClientRegistry, EgressClient
from mqgate.egress.scheduler import EgressScheduler
from mqgate.egress.slowness import SlowSubscriberMeter


def client(name, user="u", queued=0):
    scheduler = EgressScheduler()
    if queued:
        scheduler.offer_direct("item", queued, key="link")
    return EgressClient(name, user=user, peer="127.0.0.1:1", protocol="amqp",
                        service="jms", profile=None, scheduler=scheduler,
                        meter=SlowSubscriberMeter(Clock()), disconnect=lambda why: None)


def test_names_are_made_unique():
    """S9.7: two connections with the same container-id are told apart."""
    registry = ClientRegistry()
    registry.add(client(registry.unique_name("app")))
    second = registry.unique_name("app")
    assert second != "app" and second.startswith("app#")
    registry.add(client(second))
    assert [c.name for c in registry] == ["app", second]


def test_patterns_users_and_removal():
    """S9.7: show commands take a name or a wildcard; S9.7 limits count per user."""
    registry = ClientRegistry()
    a, b, c = client("orders-1", "alice"), client("orders-2", "bob"), client("x", "alice")
    for each in (a, b, c):
        registry.add(each)
    assert registry.matching("orders-*") == [a, b]
    assert registry.matching("*") == [a, b, c]
    assert registry.matching("x") == [c] and registry.matching("y") == []
    assert registry.by_user("alice") == [a, c]
    assert registry.count_user("alice") == 2 and registry.count_user("carol") == 0
    registry.remove(a)
    registry.remove(a)        # twice is harmless
    assert registry.get("orders-1") is None and len(registry) == 2
    assert registry.count_user("alice") == 1
    registry.remove(c)
    assert registry.count_user("alice") == 0


def test_queued_bytes_sum_every_client():
    """S9.6: the load factor's input is every client's queued bytes."""
    registry = ClientRegistry()
    registry.add(client("a", queued=1000))
    registry.add(client("b", queued=500))
    assert registry.queued_bytes == 1500
