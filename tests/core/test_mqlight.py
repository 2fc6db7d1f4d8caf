"""MQ Light subscriptions in the core (S8.3, S8.4, S8.5): addresses, patterns, the
subscription table and its time-to-live, on a task.Clock; the restart on the memory
store."""

import pytest
from twisted.internet.task import Clock

from mqgate.amqp.performatives import Open
from mqgate.core import Broker, BrokerMessage, CoreConfig, NotAllowed
from mqgate.core import mqlight
from mqgate.core.addresses import AddressError
from mqgate.core.persistence import Persistence
from mqgate.store import MemoryStore

from tests.core import RecordingTarget, make_broker, send


def subscribe(broker, address, client_id="c1", ttl=0, credit=100, presettled=True):
    target = RecordingTarget()
    consumer = broker.open_mqlight(mqlight.parse(address), target, client_id=client_id,
                                   ttl=ttl, presettled=presettled)
    target.consumer = consumer
    consumer.set_credit(credit)
    return consumer, target


def publish(broker, topic, *payloads, **fields):
    send(broker, f"topic://{topic}", *payloads, **fields)


# -- addresses and patterns ---------------------------------------------------------------


def test_addresses_parse_into_kind_share_and_pattern():
    assert mqlight.parse("private:sports/#") == mqlight.Subscription(
        "private", None, "sports/#", "private:sports/#")
    shared = mqlight.parse("share:fans:sports/+/goals")
    assert (shared.kind, shared.share, shared.pattern) == ("share", "fans", "sports/+/goals")
    assert shared.key("anyone") == shared.key("someone else")
    assert mqlight.parse("private:a").key("c1") != mqlight.parse("private:a").key("c2")
    assert mqlight.parse("sports/football") is None
    assert mqlight.parse("queue://private:x") is None


@pytest.mark.parametrize("address", ["private:", "share:fans", "share::a", "share:fans:"])
def test_malformed_addresses_are_refused_saying_the_form(address):
    with pytest.raises(AddressError, match="private:<pattern>|share:<name>:<pattern>"):
        mqlight.parse(address)


@pytest.mark.parametrize("pattern, topic, matches", [
    ("sports/+", "sports/football", True),
    ("sports/+", "sports/football/goals", False),
    ("sports/+/goals", "sports/football/goals", True),
    ("sports/#", "sports", True),
    ("sports/#", "sports/football/goals", True),
    ("#", "anything/at/all", True),
    ("+", "", True),
    ("sports/*", "sports/football", False),      # * is an ordinary character
    ("sports/*", "sports/*", True),
    ("a+/b", "ab/b", False),                     # wildcards are whole levels
    ("sports.football", "sports.football", True),
    ("sports/+", "sports.football", False),      # dots are no level separators here
])
def test_patterns_use_slash_levels_plus_and_hash(pattern, topic, matches):
    assert mqlight.topic_matches(pattern, topic) is matches


def test_the_client_is_known_by_its_open_frame_and_its_sender_names():
    """The hallmarks of FACTS 3.1 and 3.2: another client sends neither."""
    mql = Open(container_id="client1", max_frame_size=4294967295,
               outgoing_locales=["en-US"])
    assert mqlight.open_looks_like_mqlight(mql)
    assert mqlight.open_looks_like_mqlight(Open(container_id="AUTO_1a2b3c4"))
    assert not mqlight.open_looks_like_mqlight(Open(container_id="client1"))
    assert not mqlight.open_looks_like_mqlight(Open(
        container_id="a-uuid-with-dashes", max_frame_size=4294967295,
        outgoing_locales=["en-US"]))
    name = "sports/football_1b4e28ba-2fa1-41d2-883f-0016d3cca427"
    assert mqlight.is_mqlight_sender(name, "sports/football")
    assert not mqlight.is_mqlight_sender("sender-1", "sports/football")
    assert not mqlight.is_mqlight_sender(name, "sports")


# -- subscriptions -----------------------------------------------------------------------


def test_private_subscription_matches_slash_topics_and_resumes_with_its_backlog():
    """S8.3: detached within its ttl, the subscription keeps what is published and
    the same client id gets it; another client id has its own subscription."""
    broker, clock = make_broker()
    consumer, target = subscribe(broker, "private:sports/+", ttl=30)
    publish(broker, "sports/football", b"one")
    publish(broker, "weather/rain", b"not for us")
    consumer.close()
    publish(broker, "sports/tennis", b"two")
    clock.advance(29)
    _, other = subscribe(broker, "private:sports/+", client_id="c2")
    _, again = subscribe(broker, "private:sports/+", ttl=30)
    assert target.payloads == [b"one"]
    assert again.payloads == [b"two"]
    assert other.payloads == []


def test_private_subscription_has_one_subscriber_at_a_time():
    broker, _ = make_broker()
    subscribe(broker, "private:a/b")
    with pytest.raises(NotAllowed, match="subscribed to private:a/b already"):
        subscribe(broker, "private:a/b")


def test_shared_subscription_splits_messages_among_its_subscribers():
    """share:: every message to one subscriber, whatever their client ids."""
    broker, _ = make_broker()
    _, one = subscribe(broker, "share:fans:sports/#", client_id="c1")
    _, two = subscribe(broker, "share:fans:sports/#", client_id="c2")
    _, private = subscribe(broker, "private:sports/#", client_id="c3")
    publish(broker, "sports/a", b"1", b"2", b"3", b"4")
    assert sorted(one.payloads + two.payloads) == [b"1", b"2", b"3", b"4"]
    assert one.payloads and two.payloads
    assert private.payloads == [b"1", b"2", b"3", b"4"]


def test_ttl_runs_from_the_last_subscriber_and_then_removes_what_was_kept():
    """S8.3: after its ttl without a subscriber the subscription and its messages are
    gone; a shared one's ttl starts only when its last subscriber leaves."""
    broker, clock = make_broker()
    first, _ = subscribe(broker, "share:s:t", client_id="c1", ttl=10)
    second, _ = subscribe(broker, "share:s:t", client_id="c2", ttl=10)
    first.close()
    clock.advance(60)
    assert len(broker.subscriptions()) == 1     # c2 is still there
    second.close()
    publish(broker, "t", b"kept a while")
    clock.advance(9)
    assert broker.subscriptions()[0].depth == 1
    clock.advance(1)
    assert broker.subscriptions() == []
    _, again = subscribe(broker, "share:s:t", ttl=10)
    assert again.payloads == []


def test_ttl_zero_and_close_remove_at_once_and_never_keeps_until_closed():
    broker, clock = make_broker()
    zero, _ = subscribe(broker, "private:zero")
    zero.close()
    closed, _ = subscribe(broker, "private:closed", ttl=3600)
    closed.close(remove=True)
    assert broker.subscriptions() == []
    forever, _ = subscribe(broker, "private:forever", ttl=mqlight.FOREVER)
    forever.close()
    clock.advance(10 ** 9)
    assert [q.durable_key for q in broker.subscriptions()] == [("c1", "private:forever")]
    assert broker.lifetimes.pending() == 0


def test_resubscribing_stops_the_ttl_clock():
    broker, clock = make_broker()
    consumer, _ = subscribe(broker, "private:r", ttl=10)
    consumer.close()
    clock.advance(9)
    subscribe(broker, "private:r", ttl=10)
    clock.advance(100)
    assert len(broker.subscriptions()) == 1
    assert broker.lifetimes.pending() == 0


# -- persistence (S8.4) and the restart (S8.3) -------------------------------------------


def stored_broker(store, **config):
    recovered = store.recover()
    persistence = Persistence(store, encode=lambda m: m.payload,
                              decode=lambda data: BrokerMessage(data))
    clock = Clock()
    broker = Broker(clock, CoreConfig(**config), persistence=persistence)
    if recovered.called:
        persistence.restore(broker, recovered.result)
    return broker, clock


def test_persistent_messages_and_the_ttl_survive_a_restart():
    """A subscription with a ttl stores its persistent messages; after a restart it
    is there with them, and its ttl starts again; one without a ttl stores none."""
    store = MemoryStore()
    broker, _ = stored_broker(store)
    kept, _ = subscribe(broker, "private:news/#", ttl=30)
    gone, _ = subscribe(broker, "private:news/+", ttl=0)
    kept.close()
    gone.close()
    publish(broker, "news/today", b"persistent", durable=True)
    publish(broker, "news/today", b"not", durable=False)
    again, clock = stored_broker(store.restarted())
    [queue] = again.subscriptions()
    assert queue.durable_key == ("c1", "private:news/#") and queue.depth == 1
    clock.advance(29)
    _, target = subscribe(again, "private:news/#", ttl=30)
    assert target.payloads == [b"persistent"]


def test_a_restored_subscription_nobody_resumes_goes_after_its_ttl():
    store = MemoryStore()
    broker, _ = stored_broker(store)
    consumer, _ = subscribe(broker, "share:s:news", ttl=30)
    consumer.close()
    publish(broker, "news", b"m", durable=True)
    restarted = store.restarted()
    again, clock = stored_broker(restarted)
    clock.advance(29)
    assert len(again.subscriptions()) == 1
    clock.advance(1)
    assert again.subscriptions() == []
    assert stored_broker(restarted.restarted())[0].subscriptions() == []


def test_topic_default_persistence_decides_unless_the_publisher_says_durable():
    """S8.4: durable=true always persists; otherwise the topic's default (the
    setting, or what an operator set on the topic)."""
    store = MemoryStore()
    broker, _ = stored_broker(store)
    for topic in ("plain", "persisted"):
        consumer, _ = subscribe(broker, f"private:{topic}", ttl=30)
        consumer.close()
        broker.create_topic(topic)
    broker.set_default_persistence("persisted", True)
    publish(broker, "plain", b"durable", durable=True)
    publish(broker, "plain", b"default: not")
    publish(broker, "persisted", b"default: persistent")
    again, _ = stored_broker(store.restarted())
    depths = {q.pattern: q.depth for q in again.subscriptions()}
    assert depths == {"plain": 1, "persisted": 1}
    everywhere, _ = stored_broker(MemoryStore(), topic_default_persistence=True)
    assert everywhere.create_topic("t").default_persistence is True


def test_an_at_most_once_subscriber_without_ttl_gets_non_persistent_copies():
    """S8.4: a subscription that ends with its subscriber stores nothing, even a
    message whose publisher asked for durable."""
    store = MemoryStore()
    broker, _ = stored_broker(store)
    subscribe(broker, "private:quick", ttl=0, presettled=True)
    publish(broker, "quick", b"m", durable=True)
    recovered = store.restarted().recover().result
    assert not any(recovered.messages.values())
