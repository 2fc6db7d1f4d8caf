"""The destination and durable subscription commands (S11.1) on a real core Broker with
the in-memory store and a task.Clock: no sockets."""

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from mqgate.admin.destinations import COMMANDS, InUse, parse_size
from mqgate.admin.requests import (
    AdminContext, AdminRequest, BadRequest, NotFoundError, dispatch)
from mqgate.core import Broker, BrokerMessage, CoreConfig
from mqgate.core.errors import ErrorKind
from mqgate.core.persistence import Persistence
from mqgate.store import MemoryStore

from tests.core import consume


def stored_broker(store=None):
    """A broker with a recovered memory store; returns C{(broker, store, recovered)}."""
    store = store or MemoryStore()
    recovered = store.recover()
    persistence = Persistence(store, encode=lambda m: m.payload,
                              decode=lambda data: BrokerMessage(data))
    return Broker(Clock(), CoreConfig(), persistence=persistence), store, recovered


@pytest.fixture
def broker():
    return stored_broker()[0]


def run(broker, *words):
    context = AdminContext(broker=broker, clients=None, profiles=None)
    return dispatch(COMMANDS, context, AdminRequest(words[0], words[1], tuple(words[2:])))


def stored_keys(store, key):
    return list(store._ledger.messages.get(key, {}))


class Revocable:
    """A consumer target that records the revocation the core sends it."""

    def __init__(self):
        self.deliveries = []
        self.revoked_with = None

    def deliver(self, delivery):
        self.deliveries.append(delivery)

    def revoked(self, kind, description):
        self.revoked_with = (kind, description)


# -- list / query ------------------------------------------------------------------------


def test_list_shows_state_clients_and_messages_of_user_destinations(broker):
    """list dst: a row per user destination with its type, state, producers, consumers,
    messages held (count and bytes) and unacked; temporary and mq* names only with
    -tmp."""
    producer = broker.open_producer("queue://orders")
    for body in (b"a", b"bb", b"ccc"):
        producer.send(BrokerMessage(body))
    _, target = consume(broker, "queue://orders", credit=1)
    broker.create_topic("prices")
    broker.create_queue("mq.sys.dmq")
    consume(broker, None, dynamic=True)
    reply = run(broker, "list", "dst")
    rows = {row["name"]: row for row in reply.data}
    assert set(rows) == {"orders", "prices"}
    orders = rows["orders"]
    assert (orders["type"], orders["state"], orders["producers"], orders["consumers"],
            orders["messages"], orders["unacked"]) == ("queue", "RUNNING", 1, 1, 3, 1)
    assert orders["bytes"] == sum(m.size for m in (BrokerMessage(b) for b in
                                                   (b"a", b"bb", b"ccc")))
    assert "Msgs Count" in reply.text and "orders" in reply.text
    everything = {row["name"] for row in run(broker, "list", "dst", "-tmp").data}
    assert "mq.sys.dmq" in everything
    assert any(name.startswith("mqgate.tmp.") for name in everything)
    assert [row["name"] for row in run(broker, "list", "dst", "-t", "t").data] == \
        ["prices"]


def test_query_shows_limits_and_counters(broker):
    """query dst: one destination's figures and its limits by their FACTS 1.6 names."""
    broker.open_producer("queue://q").send(BrokerMessage(b"x"))
    reply = run(broker, "query", "dst", "-t", "q", "-n", "q")
    assert reply.data["messages_in"] == 1 and reply.data["waiting"] == 1
    assert reply.data["limits"] == {"maxNumMsgs": 100000,
                                    "maxTotalMsgBytes": 1 << 30,
                                    "limitBehavior": "FLOW_CONTROL",
                                    "maxBytesPerMsg": -1, "maxNumProducers": -1,
                                    "consumerFlowLimit": -1, "useDMQ": True,
                                    "maxDeliveryCount": 10}
    assert "maxNumMsgs" in reply.text and "Current Number of Messages" in reply.text


def test_unknown_destination_is_404_naming_it(broker):
    """An unknown destination is a NotFoundError naming it, for every dst command."""
    for verb in ("query", "destroy", "purge", "pause", "resume", "compact"):
        with pytest.raises(NotFoundError, match="no queue 'ghost'"):
            run(broker, verb, "dst", "-t", "q", "-n", "ghost")
    with pytest.raises(NotFoundError, match="no topic 'ghost'"):
        run(broker, "update", "dst", "-t", "t", "-n", "ghost", "-o", "maxNumMsgs=5")


def test_bad_options_are_refused_naming_the_option(broker):
    """Bad options are BadRequest naming the option or value."""
    with pytest.raises(BadRequest, match="missing -n"):
        run(broker, "query", "dst", "-t", "q")
    with pytest.raises(BadRequest, match="'x'"):
        run(broker, "list", "dst", "-t", "x")
    with pytest.raises(BadRequest, match="unknown option '-z'"):
        run(broker, "list", "dst", "-z")
    broker.create_queue("q")
    with pytest.raises(BadRequest, match="-pst SOME"):
        run(broker, "pause", "dst", "-t", "q", "-n", "q", "-pst", "SOME")


# -- create / update ---------------------------------------------------------------------


def test_create_applies_limits_and_survives_a_restart():
    """create dst -o: the destination exists with its limits, and both come back from
    the store after a restart."""
    broker, store, _ = stored_broker()
    reply = run(broker, "create", "dst", "-t", "q", "-n", "orders",
                "-o", "maxNumMsgs=2", "-o", "maxTotalMsgBytes=16k",
                "-o", "limitBehavior=REJECT_NEWEST")
    assert "created queue 'orders'" in reply.text
    assert "restart" not in reply.text
    limits = broker.queue("orders").limits
    assert (limits.max_count, limits.max_bytes, limits.behavior) == \
        (2, 16384, "REJECT_NEWEST")
    again, _, recovered = stored_broker(store.restarted())
    again.persistence.restore(again, recovered.result)
    limits = again.queue("orders").limits
    assert (limits.max_count, limits.max_bytes, limits.behavior) == \
        (2, 16384, "REJECT_NEWEST")


def test_create_refuses_what_exists_and_bad_names(broker):
    """create dst refuses an existing destination and names breaking the rules (mq*
    reserved, wildcards, odd characters)."""
    broker.create_queue("q")
    with pytest.raises(BadRequest, match="exists already"):
        run(broker, "create", "dst", "-t", "q", "-n", "q")
    for name, why in (("mqfoo", "reserved"), ("a.*", "letters"), ("a b", "letters"),
                      ("x" * 300, "255")):
        with pytest.raises(BadRequest, match=why):
            run(broker, "create", "dst", "-t", "t", "-n", name)
    assert broker.topics() == []


def test_a_bad_property_is_refused_naming_it_and_nothing_is_applied(broker):
    """update dst with one bad property among good ones changes nothing; unsupported
    and unknown properties and bad values are each named."""
    run(broker, "create", "dst", "-t", "q", "-n", "q", "-o", "maxNumMsgs=10")
    for pair, why in (("maxNumMsgs=0", "maxNumMsgs=0"),
                      ("maxNumMsgs=" + "9" * 30, "a whole number from 1 to"),
                      ("maxTotalMsgBytes=12x", "maxTotalMsgBytes=12x"),
                      ("limitBehavior=REMOVE_NEWEST", "give one of"),
                      ("isLocalOnly=true", "isLocalOnly is not supported"),
                      ("useDMQ=maybe", "give true or false"),
                      ("colour=blue", "unknown property 'colour'")):
        good = "maxNumMsgs=7" if pair.startswith("maxTotal") else "maxTotalMsgBytes=1m"
        with pytest.raises(BadRequest, match=why):
            run(broker, "update", "dst", "-t", "q", "-n", "q", "-o", good, "-o", pair)
    limits = broker.queue("q").limits
    assert (limits.max_count, limits.max_bytes) == (10, 1 << 30)
    with pytest.raises(BadRequest, match="maxNumMsgs=x"):
        run(broker, "create", "dst", "-t", "q", "-n", "fresh", "-o", "maxNumMsgs=x")
    assert broker.queues() == ["q"]


def test_update_at_run_time_makes_a_full_queue_hold_its_producer_back(broker):
    """update dst lowers maxNumMsgs under what the queue holds: its next producer is
    blocked (FLOW_CONTROL); raising it again lets the producer go on."""
    producer = broker.open_producer("queue://q")
    for _ in range(5):
        producer.send(BrokerMessage(b"x"))
    run(broker, "update", "dst", "-t", "q", "-n", "q", "-o", "maxNumMsgs=3")
    producer.send(BrokerMessage(b"y"))
    assert producer.blocked
    run(broker, "update", "dst", "-t", "q", "-n", "q", "-o", "maxNumMsgs=-1")
    assert not producer.blocked


def test_sizes_as_the_source_writes_them():
    """maxTotalMsgBytes takes 1600, 1600b, 16k, 16m and -1."""
    assert [parse_size(t, "p") for t in ("1600", "1600b", "16k", "16M", "-1")] == \
        [1600, 1600, 16384, 16 << 20, -1]


# -- destroy / purge ---------------------------------------------------------------------


def test_destroy_revokes_consumers_and_producers_and_drops_stored_messages():
    """destroy dst: consumers and producers are told their destination was deleted, the
    messages (stored ones too) are gone, and the queue no longer exists."""
    broker, store, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    told = []
    producer.on_revoked = lambda kind, description: told.append(kind)
    producer.send(BrokerMessage(b"keep", durable=True))
    target = Revocable()
    consumer = broker.open_consumer("queue://q", target)
    reply = run(broker, "destroy", "dst", "-t", "q", "-n", "q")
    assert reply.data["consumers"] == 1 and reply.data["producers"] == 1
    assert target.revoked_with[0] is ErrorKind.DELETED
    assert "destroyed by an administrator" in target.revoked_with[1]
    assert told == [ErrorKind.DELETED]
    assert consumer.closed and producer.closed
    assert broker.queues() == []
    assert stored_keys(store, "queue://q") == []


def test_destroy_of_a_durable_subscriptions_queue_points_to_destroy_dur(broker):
    """A durable subscription's queue is not a destination: destroy dst says to use
    destroy dur."""
    consumer, _ = consume(broker, "topic://t", durable_name="sub", container_id="c1")
    with pytest.raises(NotFoundError, match="destroy dur"):
        run(broker, "destroy", "dst", "-t", "q", "-n", "c1:sub")


def test_purge_removes_waiting_messages_keeps_in_flight_and_the_store_follows():
    """purge dst removes what waits (from the store too) and keeps the in-flight one."""
    broker, store, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    for body in (b"1", b"2", b"3"):
        producer.send(BrokerMessage(body, durable=True))
    _, target = consume(broker, "queue://q", credit=1)
    reply = run(broker, "purge", "dst", "-t", "q", "-n", "q")
    assert reply.data["purged"] == 2 and reply.data["kept_unacked"] == 1
    assert "2 waiting message(s) removed" in reply.text
    assert stored_keys(store, "queue://q") == [target.deliveries[0].message.seq]
    assert broker.queue("q").held == 1


# -- pause / resume ----------------------------------------------------------------------


def test_paused_consumers_get_nothing_until_resumed(broker):
    """pause -pst CONSUMERS: nothing is delivered, the state says so; resume delivers
    what waited, in order."""
    _, target = consume(broker, "queue://q", credit=10)
    reply = run(broker, "pause", "dst", "-t", "q", "-n", "q", "-pst", "CONSUMERS")
    assert reply.data["state"] == "CONSUMERS_PAUSED"
    producer = broker.open_producer("queue://q")
    for body in (b"1", b"2", b"3"):
        producer.send(BrokerMessage(body))
    assert target.deliveries == []
    assert run(broker, "list", "dst").data[0]["state"] == "CONSUMERS_PAUSED"
    run(broker, "resume", "dst", "-t", "q", "-n", "q")
    assert [d.message.payload for d in target.deliveries] == [b"1", b"2", b"3"]


def test_paused_producers_keep_their_messages_blocked_until_resumed():
    """pause -pst PRODUCERS: what a producer sends is kept, not delivered nor dropped,
    and the producer is blocked; a persistent message's Deferred waits; resume hands
    them on in order and unblocks it."""
    broker, store, _ = stored_broker()
    _, target = consume(broker, "queue://q", credit=10)
    producer = broker.open_producer("queue://q")
    run(broker, "pause", "dst", "-t", "q", "-n", "q", "-pst", "PRODUCERS")
    assert producer.blocked and producer.room == 0
    unblocked = []
    producer.when_unblocked(lambda: unblocked.append(True))
    producer.send(BrokerMessage(b"1"))
    stored = producer.send(BrokerMessage(b"2", durable=True))
    producer.send(BrokerMessage(b"3"))
    assert isinstance(stored, defer.Deferred) and not stored.called
    assert target.deliveries == [] and stored_keys(store, "queue://q") == []
    query = run(broker, "query", "dst", "-t", "q", "-n", "q")
    assert query.data["kept_by_producers"] == 3
    run(broker, "resume", "dst", "-t", "q", "-n", "q")
    assert [d.message.payload for d in target.deliveries] == [b"1", b"2", b"3"]
    assert stored.called and unblocked == [True] and not producer.blocked


def test_a_producer_attaching_to_a_paused_queue_starts_blocked(broker):
    """A producer attached while producers are paused is blocked with no room from the
    start (the glue grants it no more credit than its first message) and goes on at
    resume."""
    broker.create_queue("q")
    run(broker, "pause", "dst", "-t", "q", "-n", "q", "-pst", "PRODUCERS")
    producer = broker.open_producer("queue://q")
    assert producer.blocked and producer.room == 0
    producer.send(BrokerMessage(b"x"))
    assert broker.queue("q").held == 0
    run(broker, "resume", "dst", "-t", "q", "-n", "q")
    assert not producer.blocked and broker.queue("q").held == 1


def test_paused_topic_holds_new_subscriptions_on_its_name_too(broker):
    """pause dst -t t (ALL): a subscription made while paused starts paused too."""
    broker.create_topic("t")
    run(broker, "pause", "dst", "-t", "t", "-n", "t", "-pst", "CONSUMERS")
    _, target = consume(broker, "topic://t", credit=10)
    broker.open_producer("topic://t").send(BrokerMessage(b"x"))
    assert target.deliveries == []
    run(broker, "resume", "dst", "-t", "t", "-n", "t")
    assert len(target.deliveries) == 1


def test_destroy_while_producers_paused_fails_the_kept_persistent_message():
    """A persistent message kept by a paused producer of a destroyed queue is never
    acknowledged: its Deferred errbacks."""
    broker, _, _ = stored_broker()
    producer = broker.open_producer("queue://q")
    run(broker, "pause", "dst", "-t", "q", "-n", "q")
    stored = producer.send(BrokerMessage(b"x", durable=True))
    failures = []
    stored.addErrback(failures.append)
    run(broker, "destroy", "dst", "-t", "q", "-n", "q")
    assert failures and "destroyed" in failures[0].getErrorMessage()


def test_compact_needs_a_paused_destination_and_says_the_memory_store_needs_none(broker):
    """compact dst refuses a running destination; paused, the memory store answers that
    it needs no compaction."""
    broker.create_queue("q")
    with pytest.raises(BadRequest, match="pause it first"):
        run(broker, "compact", "dst", "-t", "q", "-n", "q")
    run(broker, "pause", "dst", "-t", "q", "-n", "q")
    reply = run(broker, "compact", "dst", "-t", "q", "-n", "q")
    assert "needs no compaction" in reply.text


# -- durable subscriptions ---------------------------------------------------------------


def test_durables_list_purge_and_destroy():
    """list dur shows a durable subscription with its backlog; destroy dur is refused
    while its consumer is attached; purge dur empties it; destroy dur removes it and its
    stored messages."""
    broker, store, _ = stored_broker()
    consumer, _ = consume(broker, "topic://news", durable_name="sub", container_id="c1")
    producer = broker.open_producer("topic://news")
    for body in (b"1", b"2"):
        producer.send(BrokerMessage(body, durable=True))
    rows = run(broker, "list", "dur", "-d", "news").data
    assert [(r["name"], r["client_id"], r["state"], r["messages"]) for r in rows] == \
        [("sub", "c1", "ACTIVE", 2)]
    assert run(broker, "list", "dur", "-d", "other").data == []
    with pytest.raises(InUse, match="consumer attached"):
        run(broker, "destroy", "dur", "-n", "sub", "-c", "c1")
    consumer.close()
    assert run(broker, "purge", "dur", "-n", "sub", "-c", "c1").data["purged"] == 2
    producer.send(BrokerMessage(b"3", durable=True))
    run(broker, "destroy", "dur", "-n", "sub", "-c", "c1")
    assert broker.durables() == []
    assert not any(key.startswith("durable://") and value
                   for key, value in store._ledger.messages.items())
    with pytest.raises(NotFoundError, match="no durable subscription 'sub'"):
        run(broker, "purge", "dur", "-n", "sub", "-c", "c1")


def test_the_other_destination_properties_are_set_shown_and_checked(broker):
    """create/update dst take maxBytesPerMsg, maxNumProducers, consumerFlowLimit,
    useDMQ, maxDeliveryCount and the REMOVE_* behaviours; query dst shows them."""
    run(broker, "create", "dst", "-t", "q", "-n", "props", "-o", "maxBytesPerMsg=16k",
        "-o", "maxNumProducers=3", "-o", "consumerFlowLimit=50", "-o", "useDMQ=false",
        "-o", "maxDeliveryCount=0", "-o", "limitBehavior=remove_low_priority")
    limits = run(broker, "query", "dst", "-t", "q", "-n", "props").data["limits"]
    assert limits == {"maxNumMsgs": 100000, "maxTotalMsgBytes": 1 << 30,
                      "limitBehavior": "REMOVE_LOW_PRIORITY", "maxBytesPerMsg": 16384,
                      "maxNumProducers": 3, "consumerFlowLimit": 50, "useDMQ": False,
                      "maxDeliveryCount": 0}
    run(broker, "update", "dst", "-t", "q", "-n", "props", "-o", "maxBytesPerMsg=-1",
        "-o", "limitBehavior=REMOVE_OLDEST")
    limits = broker.queue("props").limits
    assert (limits.behavior, limits.use_dmq, limits.max_producers) == (
        "REMOVE_OLDEST", False, 3)
    assert run(broker, "query", "dst", "-t", "q", "-n", "props").data["limits"][
        "maxBytesPerMsg"] == -1
    with pytest.raises(BadRequest, match="maxDeliveryCount=-2"):
        run(broker, "update", "dst", "-t", "q", "-n", "props", "-o", "maxDeliveryCount=-2")


def test_the_dmq_takes_limits_but_never_flow_control(broker):
    """update dst on mq.sys.dmq changes its limits; FLOW_CONTROL is refused for it,
    naming why."""
    run(broker, "update", "dst", "-t", "q", "-n", "mq.sys.dmq", "-o", "maxNumMsgs=5")
    assert broker.queue("mq.sys.dmq").limits.max_count == 5
    with pytest.raises(BadRequest, match="never hold the broker back"):
        run(broker, "update", "dst", "-t", "q", "-n", "mq.sys.dmq",
            "-o", "limitBehavior=FLOW_CONTROL")
    assert broker.queue("mq.sys.dmq").limits.behavior == "REMOVE_OLDEST"


# -- a topic's default persistence (S8.4) -------------------------------------------------


def test_default_persistence_is_created_updated_queried_and_survives_a_restart():
    """create/update dst -t t -o defaultPersistence=...: set on the topic, shown by
    query dst, kept by the store; MQ Light topic names with / levels are allowed."""
    broker, store, _ = stored_broker()
    reply = run(broker, "create", "dst", "-t", "t", "-n", "sports/football",
                "-o", "defaultPersistence=true")
    assert reply.data["created"]["defaultPersistence"] is True
    assert broker.topic("sports/football").default_persistence is True
    reply = run(broker, "update", "dst", "-t", "t", "-n", "sports/football",
                "-o", "defaultPersistence=false")
    assert "defaultPersistence=false" in reply.text
    run(broker, "update", "dst", "-t", "t", "-n", "sports/football",
        "-o", "defaultPersistence=true")
    reply = run(broker, "query", "dst", "-t", "t", "-n", "sports/football")
    assert reply.data["defaultPersistence"] is True
    assert "defaultPersistence" in reply.text
    again, _, recovered = stored_broker(store.restarted())
    again.persistence.restore(again, recovered.result)
    assert again.topic("sports/football").default_persistence is True


def test_default_persistence_is_refused_for_queues_and_bad_values(broker):
    """defaultPersistence is a topic's; its value is true or false; a queue name
    still has no / levels."""
    with pytest.raises(BadRequest, match="topics only"):
        run(broker, "create", "dst", "-t", "q", "-n", "q1", "-o", "defaultPersistence=true")
    with pytest.raises(BadRequest, match="give true or false"):
        run(broker, "create", "dst", "-t", "t", "-n", "t1", "-o", "defaultPersistence=yes")
    with pytest.raises(BadRequest, match="separated by dots"):
        run(broker, "create", "dst", "-t", "q", "-n", "a/b")
    assert broker.topics() == [] and broker.queues() == []
