"""Topic matching that cannot stall the broker, and the limits on names and patterns
(S2.1): matching costs at most pattern levels x name levels, and a name or
pattern past C{mqgate.destination.max_name_length} or C{mqgate.topic.max_levels} is
refused when it is first used, with an error naming the setting."""

import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from mqgate.core import BrokerMessage
from mqgate.core.addresses import NameLimitExceeded, check_name, topic_matches
from mqgate.core.errors import ErrorKind

from tests.core import consume, make_broker


def reference_matches(pattern, name):
    """The meaning of S2.1 as a regular expression over '.level' pieces: '*' is one
    level, '#' any number of them (a different method from the broker's)."""
    pieces = []
    for level in pattern.split("."):
        if level == "#":
            pieces.append(r"(?:\.[^.]*)*")
        elif level == "*":
            pieces.append(r"\.[^.]*")
        else:
            pieces.append(r"\." + re.escape(level))
    return re.fullmatch("".join(pieces), "." + name) is not None


_pattern_levels = st.lists(st.sampled_from(["a", "b", "*", "#", "a*", ""]),
                           min_size=1, max_size=9)
_name_levels = st.lists(st.sampled_from(["a", "b", "c", "", "*"]), min_size=1, max_size=9)


@given(_pattern_levels, _name_levels)
@settings(max_examples=1000, deadline=None)
def test_matcher_agrees_with_reference(pattern, name):
    """S2.1: on every small pattern and name the linear matcher says what the regular
    expression says."""
    pattern, name = ".".join(pattern), ".".join(name)
    assert topic_matches(pattern, name) == reference_matches(pattern, name)


def _elapsed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def test_nested_wildcards_against_a_deep_name_are_quick():
    """Issue 10: the pattern that took the old matcher hours against a 100-level name
    now takes well under a second, matching or not."""
    pattern = "#.a." * 8 + "b"
    miss, miss_time = _elapsed(topic_matches, pattern, ".".join(["a"] * 100))
    hit, hit_time = _elapsed(topic_matches, pattern, ".".join(["a"] * 99 + ["b"]))
    assert (miss, hit) == (False, True)
    assert miss_time < 0.05 and hit_time < 0.05


def test_worst_case_grows_with_the_product_of_lengths():
    """The work is bounded by pattern x name levels: 1000-level patterns of alternating
    '#' against 1000-level names finish in well under a second."""
    pattern = ".".join(["#", "a"] * 500) + ".b"
    result, elapsed = _elapsed(topic_matches, pattern, ".".join(["a"] * 1000))
    assert result is False and elapsed < 1.0


@pytest.mark.parametrize("kind, name, setting", [
    ("queue", "q" * 256, "mqgate.destination.max_name_length"),
    ("topic", "t" * 256, "mqgate.destination.max_name_length"),
    ("topic", ".".join(["a"] * 33), "mqgate.topic.max_levels"),
    ("topic", ".".join(["#"] * 33), "mqgate.topic.max_levels"),
])
def test_check_name_refuses_past_the_limits(kind, name, setting):
    """A name too long or too deep gets amqp:resource-limit-exceeded naming the
    setting that raises it, and quoting at most the start of the name."""
    with pytest.raises(NameLimitExceeded) as caught:
        check_name(kind, name, 255, 32)
    assert caught.value.kind is ErrorKind.LIMIT_EXCEEDED
    assert setting in caught.value.description
    assert len(caught.value.description) < 300


def test_check_name_takes_names_at_the_limits():
    """Names exactly at the limits are fine, and queues have no levels to count."""
    check_name("queue", ".".join(["a"] * 100), 255, 32)
    check_name("topic", ".".join(["a"] * 32), 255, 32)
    check_name("topic", "t" * 255, 255, 32)


def test_deep_subscription_refused_before_anything_is_made():
    """A subscription pattern deeper than the limit is refused on attach, and the
    broker holds no subscription for it."""
    broker, _ = make_broker(max_topic_levels=8)
    with pytest.raises(NameLimitExceeded):
        consume(broker, "topic://" + "#.a." * 4 + "b")
    assert broker.subscriptions() == []


def test_deep_topic_refused_for_producers_and_anonymous_routes():
    """A producer attaching to, or an anonymous producer sending to, a topic deeper
    than the limit is refused, and no topic is created."""
    broker, _ = make_broker(max_topic_levels=4)
    deep = "topic://a.b.c.d.e"
    with pytest.raises(NameLimitExceeded):
        broker.open_producer(deep)
    anonymous = broker.open_producer(None)
    message = BrokerMessage(b"x")
    message.to = deep
    with pytest.raises(NameLimitExceeded):
        anonymous.send(message)
    assert broker.topics() == []


def test_long_queue_name_refused():
    """A queue name longer than the limit is refused for consumers too."""
    broker, _ = make_broker(max_name_length=10)
    with pytest.raises(NameLimitExceeded):
        consume(broker, "queue://" + "q" * 11)
    assert broker.queues() == []


def test_stored_over_limit_durable_is_kept_and_still_routes():
    """A durable subscription stored under higher limits comes back with its pattern
    (its backlog is not dropped) and is matched like any other, though a client could
    not make it again."""
    broker, _ = make_broker(max_topic_levels=4)
    pattern = "#.a.#.a.b"
    queue = broker.restore_durable("client", "sub", pattern, None)
    broker.open_producer("topic://a.a.b").send(BrokerMessage(b"1"))
    broker.open_producer("topic://a.b").send(BrokerMessage(b"2"))
    assert queue.depth == 1
    with pytest.raises(NameLimitExceeded):
        consume(broker, "topic://" + pattern, durable_name="other", container_id="c")


def test_many_subscriptions_each_matched_in_bounded_time():
    """Routing a name against many pathological subscriptions stays cheap: 2,000
    subscriptions of nested wildcards and one message to a 32-level topic take well
    under a second."""
    broker, _ = make_broker(max_destinations=-1)
    pattern = "topic://" + "#.a." * 7 + "b"
    for _ in range(2000):
        consume(broker, pattern, credit=1)
    producer = broker.open_producer("topic://" + ".".join(["a"] * 32))
    _, elapsed = _elapsed(producer.send, BrokerMessage(b"x"))
    assert elapsed < 1.0


def test_owner_reattaches_to_an_over_limit_durable():
    """A restored durable subscription past the level limit can still be resumed by
    its owner (it gets its backlog), though nobody can make a new one like it."""
    broker, _ = make_broker(max_topic_levels=4)
    pattern = "#.a.#.a.b"
    queue = broker.restore_durable("client", "sub", pattern, None)
    broker.open_producer("topic://a.a.b").send(BrokerMessage(b"1"))
    consumer, target = consume(broker, "topic://" + pattern, credit=5,
                               durable_name="sub", container_id="client")
    assert consumer.queue is queue and target.payloads == [b"1"]
    consumer.close()
    with pytest.raises(NameLimitExceeded):
        consume(broker, "topic://" + pattern, durable_name="sub", container_id="other")


# -- routing under subscription churn ---------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "look"]),
                          st.sampled_from(["a.b", "a.*", "#", "#.b", "c", "a.#.b"]),
                          st.integers(0, 70)),
                max_size=200))
@settings(max_examples=200, deadline=None)
def test_topic_subscriptions_stay_right_through_changes(steps):
    """A topic brought up to date change by change (or, when it fell far behind,
    matched afresh) feeds exactly the subscriptions matching it, in the order they
    were made."""
    from mqgate.core.destinations import Queue, SubscriptionIndex, Topic
    from twisted.internet.task import Clock
    index = SubscriptionIndex()
    topics = [Topic(name, index) for name in ("a.b", "c", "a.x.b")]
    made = []
    for action, pattern, pick in steps:
        if action == "add":
            queue = Queue(f"s{len(made)}", Clock(), pattern=pattern)
            made.append(queue)
            index.add(queue)
        elif action == "remove" and made:
            index.remove(made[pick % len(made)])
        else:
            topic = topics[pick % len(topics)]
            expected = tuple(q for q in index if topic_matches(q.pattern, topic.name))
            assert topic.subscriptions == expected


def test_subscription_churn_does_not_rematch_everything():
    """With 2,000 subscriptions of nested wildcards, a client making and dropping one
    subscription between publishes costs each publish little: 200 such rounds over
    ten deep topics take well under a second (each used to match all 2,000)."""
    broker, _ = make_broker(max_destinations=-1)
    for _ in range(2000):
        consume(broker, "topic://" + "#.a." * 7 + "b")
    producers = [broker.open_producer("topic://" + ".".join(["a"] * (20 + n)))
                 for n in range(10)]
    for producer in producers:
        producer.send(BrokerMessage(b"warm"))    # each topic matches once, in full
    start = time.perf_counter()
    for round_ in range(200):
        churn, _ = consume(broker, "topic://a.#")
        churn.close()
        producers[round_ % 10].send(BrokerMessage(b"x"))
    assert time.perf_counter() - start < 1.0
