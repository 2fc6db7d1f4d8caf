"""Consumer modes of a queue (S2.3; FACTS 1.6): active and backup consumers
(maxNumActiveConsumers, maxNumBackupConsumers), and browsing that changes nothing."""

import pytest

from mqgate.core import BrokerMessage
from mqgate.core.browse import Browser, open_browser
from mqgate.core.broker import ResourceLimitExceeded
from mqgate.core.modes import ConsumerModes, modes_attributes, modes_from_attributes
from mqgate.errors import ConfigError
from mqgate.core.errors import ErrorKind

from tests.core import RecordingTarget, consume, make_broker, send


def failover(broker, name="q", active=1, backup=1):
    broker.create_queue(name)
    broker.set_consumer_modes(name, ConsumerModes(active, backup))
    return broker.queue(name)


# -- active and backup consumers -------------------------------------------------------


def test_backup_receives_nothing_while_the_active_one_is_there():
    """With maxNumActiveConsumers=1 the second consumer waits as a backup: every
    message goes to the first, even when the backup has credit."""
    broker, _ = make_broker()
    failover(broker)
    first, first_target = consume(broker, "queue://q", credit=10)
    second, second_target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"1", b"2", b"3")
    assert first_target.payloads == [b"1", b"2", b"3"]
    assert second_target.payloads == []
    assert broker.queue("q").backups == [second]


def test_backup_takes_over_with_the_unsettled_messages_first():
    """When the active consumer goes, the backup becomes active and receives what
    the first left unsettled (first, marked redelivered), then what waited."""
    broker, _ = make_broker()
    queue = failover(broker)
    first, first_target = consume(broker, "queue://q", credit=2)
    second, second_target = consume(broker, "queue://q", credit=10)
    send(broker, "queue://q", b"1", b"2", b"3")
    first_target.consumer.settle(first_target.deliveries[0])
    first.close()
    assert second_target.payloads == [b"2", b"3"]
    assert second_target.deliveries[0].redelivered
    assert queue.backups == [] and queue.consumers == [second]
    send(broker, "queue://q", b"4")
    assert second_target.payloads[-1] == b"4"


def test_backups_take_over_in_the_order_they_came():
    """Of two backups, the one that attached first takes over first."""
    broker, _ = make_broker()
    failover(broker, backup=2)
    first, _ = consume(broker, "queue://q", credit=5)
    _, second_target = consume(broker, "queue://q", credit=5)
    third, third_target = consume(broker, "queue://q", credit=5)
    first.close()
    send(broker, "queue://q", b"x")
    assert second_target.payloads == [b"x"] and third_target.payloads == []
    assert broker.queue("q").backups == [third]


def test_a_backup_that_leaves_changes_nothing():
    """A backup closing leaves the active consumer and the messages as they were."""
    broker, _ = make_broker()
    queue = failover(broker)
    _, first_target = consume(broker, "queue://q", credit=5)
    second, _ = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1")
    second.close()
    assert queue.backups == [] and first_target.payloads == [b"1"]
    assert queue.held == 1


def test_one_past_both_limits_is_refused_by_name():
    """A consumer past maxNumActiveConsumers and maxNumBackupConsumers is refused with
    amqp:resource-limit-exceeded naming the queue, both limits and the command; the
    others are untouched."""
    broker, _ = make_broker()
    queue = failover(broker)
    consume(broker, "queue://q")
    consume(broker, "queue://q")
    with pytest.raises(ResourceLimitExceeded) as refused:
        consume(broker, "queue://q")
    assert refused.value.kind is ErrorKind.LIMIT_EXCEEDED
    text = refused.value.description
    assert "'q'" in text and "maxNumActiveConsumers=1" in text
    assert "maxNumBackupConsumers=1" in text and "update dst" in text
    assert len(queue.consumers) == 2


def test_unlimited_by_default():
    """Without settings a queue has any number of competing consumers (FACTS 1.6:
    -1 active, 0 backups)."""
    broker, _ = make_broker()
    targets = [consume(broker, "queue://q", credit=1)[1] for _ in range(5)]
    send(broker, "queue://q", *[b"m"] * 5)
    assert all(t.payloads == [b"m"] for t in targets)


def test_configured_defaults_apply_to_new_queues():
    """mqgate.autocreate.queue.maxNumActiveConsumers/maxNumBackupConsumers give every
    new queue its modes; a bad pair is refused naming the keys."""
    broker, _ = make_broker(max_active_consumers=1, max_backup_consumers=0)
    consume(broker, "queue://auto")
    with pytest.raises(ResourceLimitExceeded):
        consume(broker, "queue://auto")
    with pytest.raises(ConfigError) as bad:
        make_broker(max_active_consumers=0)
    assert "maxNumActiveConsumers" in bad.value.key


def test_raising_the_active_limit_promotes_backups():
    """update dst raising maxNumActiveConsumers lets waiting backups in at once."""
    broker, _ = make_broker()
    failover(broker)
    consume(broker, "queue://q", credit=1)
    _, backup_target = consume(broker, "queue://q", credit=5)
    send(broker, "queue://q", b"1", b"2")
    assert backup_target.payloads == []
    broker.set_consumer_modes("q", ConsumerModes(2, 1))
    assert backup_target.payloads == [b"2"]


class StoredAttributes:
    """Just the part of the persistence that keeps a destination's attributes."""

    def __init__(self):
        self.attributes = {}

    def queue_store(self, kind, name):
        return None

    def destination_created(self, kind, name):
        self.attributes[name] = {}

    def destination_updated(self, kind, name, attributes):
        self.attributes[name] = attributes


def test_modes_are_stored_and_restored():
    """The modes go into the destination's stored attributes beside its limits (a
    later limits update keeps them), and a recovered broker applies them."""
    broker, _ = make_broker()
    broker.persistence = persistence = StoredAttributes()
    broker.create_queue("q")
    broker.set_consumer_modes("q", ConsumerModes(1, 3))
    broker.set_limits("queue", "q", broker.limits_of(broker.queue("q")))
    stored = persistence.attributes["q"]
    assert stored["maxNumActiveConsumers"] == 1 and stored["maxNumBackupConsumers"] == 3
    assert "maxNumMsgs" in stored
    again, _ = make_broker()
    again.create_queue("q")
    again.restore_attributes("queue", "q", stored)
    assert again.queue("q").modes == ConsumerModes(1, 3)


def test_attributes_round_trip_and_defaults_store_nothing():
    """Default modes add nothing to the stored attributes; others round-trip."""
    assert modes_attributes(ConsumerModes()) == {}
    modes = ConsumerModes(2, -1)
    assert modes_from_attributes(modes_attributes(modes), ConsumerModes()) == modes
    with pytest.raises(ValueError):
        ConsumerModes(0, 0)


# -- browsing ----------------------------------------------------------------------


def browse(broker, address="queue://q", credit=100, **kwargs):
    target = RecordingTarget()
    browser = target.consumer = open_browser(broker, address, target, **kwargs)
    browser.set_credit(credit)
    return browser, target


def test_browser_sees_the_queue_in_delivery_order_and_changes_nothing():
    """A browser gets copies of the waiting messages, highest priority first, and
    the queue keeps them all, with unchanged counters and delivery counts."""
    broker, _ = make_broker()
    producer = broker.open_producer("queue://q")
    for body, priority in ((b"low", 1), (b"high", 8), (b"mid", 4)):
        producer.send(BrokerMessage(body, priority=priority))
    queue = broker.queue("q")
    before = queue.stats()
    browser, target = browse(broker)
    assert target.payloads == [b"high", b"mid", b"low"]
    assert browser.finished and queue.stats() == before
    target.settle_all()   # settling a browsed delivery does nothing either
    assert queue.stats() == before
    _, consumer_target = consume(broker, "queue://q", credit=10)
    assert consumer_target.payloads == [b"high", b"mid", b"low"]
    assert not any(d.redelivered for d in consumer_target.deliveries)


def test_browser_follows_its_credit_and_says_when_finished():
    """A browser hands out no more than its credit; it calls back once when the last
    message is out; a drain gives the rest of the credit up."""
    broker, _ = make_broker()
    send(broker, "queue://q", b"1", b"2", b"3")
    finished = []
    target = RecordingTarget()
    browser = open_browser(broker, "queue://q", target)
    browser.on_finished = lambda: finished.append(True)
    browser.set_credit(2)
    assert target.payloads == [b"1", b"2"] and not finished
    browser.set_credit(5)
    assert target.payloads == [b"1", b"2", b"3"] and finished == [True]
    assert browser.drain() == 4


def test_browser_skips_in_flight_and_expired_and_honours_a_selector():
    """Messages in flight to a consumer and expired ones are not shown; a selector
    limits what the browser sees."""
    broker, clock = make_broker()
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"taken"))
    consume(broker, "queue://q", credit=1)
    producer.send(BrokerMessage(b"old", expiry=clock.seconds() + 1))
    producer.send(BrokerMessage(b"keep", priority=7))
    producer.send(BrokerMessage(b"other", priority=2))
    clock.advance(2)
    _, target = browse(broker)
    assert target.payloads == [b"keep", b"other"]
    _, selected = browse(broker, selector="JMSPriority > 5")
    assert selected.payloads == [b"keep"]


def test_browsing_a_topic_is_an_ordinary_subscription():
    """A topic has no browser: open_browser answers None and the glue subscribes."""
    broker, _ = make_broker()
    assert open_browser(broker, "topic://t", RecordingTarget()) is None


def test_browser_is_not_a_consumer_of_the_queue():
    """The queue does not count a browser among its consumers, and a backup limit
    does not apply to it."""
    broker, _ = make_broker()
    failover(broker, backup=0)
    consume(broker, "queue://q")
    browser, _ = browse(broker)
    assert isinstance(browser, Browser)
    assert len(broker.queue("q").consumers) == 1


def test_a_backup_with_a_selector_keeps_it_when_it_takes_over():
    """A backup that takes over with a selector receives only what the selector
    accepts; the rest waits."""
    broker, _ = make_broker()
    failover(broker)
    first, _ = consume(broker, "queue://q")
    _, second_target = consume(broker, "queue://q", credit=10,
                               selector="JMSPriority > 5")
    producer = broker.open_producer("queue://q")
    producer.send(BrokerMessage(b"low", priority=1))
    producer.send(BrokerMessage(b"high", priority=8))
    first.close()
    assert second_target.payloads == [b"high"]
    assert broker.queue("q").depth == 1


# -- the admin commands (S11.1) --------------------------------------------------------


def admin(broker, *words):
    from mqgate.admin.destinations import COMMANDS
    from mqgate.admin.requests import AdminContext, AdminRequest, dispatch
    context = AdminContext(broker=broker, clients=None, profiles=None)
    return dispatch(COMMANDS, context, AdminRequest(words[0], words[1], tuple(words[2:])))


def test_admin_sets_and_shows_the_modes_and_refuses_bad_ones():
    """create/update dst -o take the two properties on queues (query dst shows them
    and the backups waiting); a topic or a bad value is refused by name, and nothing
    changes."""
    from mqgate.admin.requests import BadRequest
    broker, _ = make_broker()
    admin(broker, "create", "dst", "-t", "q", "-n", "orders",
          "-o", "maxNumActiveConsumers=1")
    consume(broker, "queue://orders")
    with pytest.raises(ResourceLimitExceeded):
        consume(broker, "queue://orders")     # no backups yet (the default, 0)
    reply = admin(broker, "update", "dst", "-t", "q", "-n", "orders",
                  "-o", "maxNumBackupConsumers=2")
    assert "maxNumBackupConsumers=2" in reply.text
    consume(broker, "queue://orders")         # now it waits as a backup
    data = admin(broker, "query", "dst", "-t", "q", "-n", "orders").data
    assert data["consumer_modes"] == {"maxNumActiveConsumers": 1,
                                      "maxNumBackupConsumers": 2}
    assert data["backup_consumers"] == 1
    with pytest.raises(BadRequest, match="queues only"):
        admin(broker, "create", "dst", "-t", "t", "-n", "news",
              "-o", "maxNumActiveConsumers=1")
    assert "news" not in broker.topics()
    with pytest.raises(BadRequest, match="maxNumActiveConsumers=0"):
        admin(broker, "update", "dst", "-t", "q", "-n", "orders",
              "-o", "maxNumActiveConsumers=0")
    with pytest.raises(BadRequest, match="whole number"):
        admin(broker, "update", "dst", "-t", "q", "-n", "orders",
              "-o", "maxNumBackupConsumers=many")
    assert broker.queue("orders").modes == ConsumerModes(1, 2)
