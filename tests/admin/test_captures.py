"""The capture, divert and setting commands (S7.1-S7.4, S7.8, S7.9) on a real core
Broker with the in-memory store and a task.Clock: no sockets."""

from types import SimpleNamespace

import pytest
from twisted.internet.task import Clock

from mqgate.admin.captures import COMMANDS, Refused
from mqgate.admin.commands import admin_commands
from mqgate.admin.requests import (
    AdminContext, AdminRequest, BadRequest, NotFoundError, dispatch)
from mqgate.admin.wire import Forbidden
from mqgate.core.capture import DRAIN_INTERVAL, CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink

from tests.admin.test_destinations import stored_broker
from tests.core import send

ANN = SimpleNamespace(name="ann", groups=frozenset({"admin"}))
OPS = SimpleNamespace(name="otto", groups=frozenset({"admin", "ops"}))


@pytest.fixture
def broker():
    broker = stored_broker()[0]
    broker.clock = Clock()
    broker.captures = Captures(broker, broker.clock, CaptureConfig(node="n1"), None)
    broker.captures.sink = CountingSink(broker.captures.bounds_of)
    return broker


def run(broker, *words, principal=ANN):
    context = AdminContext(broker=broker, clients=None, profiles=None)
    return dispatch(admin_commands(), context,
                    AdminRequest(words[0], words[1], tuple(words[2:])), principal)


def test_every_command_is_in_the_table():
    assert set(COMMANDS) <= set(admin_commands())


def test_create_list_query_destroy_capture(broker):
    """An operator installs a capture, sees its figures, removes it."""
    reply = run(broker, "create", "capture", "-n", "c1", "-d", "queue://orders",
                "-o", "ringSize=5", "-o", "bodyMax=1k")
    assert "mqgate.capture.n1.orders.c1" in reply.text and "a ring of 5" in reply.text
    send(broker, "queue://orders", *[b"x"] * 8)
    broker.clock.advance(DRAIN_INTERVAL)
    listed = run(broker, "list", "capture")
    assert listed.data[0]["dropped_ring"] == 3 and listed.data[0]["ingested"] == 5
    assert "c1" in listed.text
    query = run(broker, "query", "capture", "-n", "c1").data
    assert query["body_bytes"] == 1024 and query["sink"]["copies"] == 5
    assert query["sink"]["dropped"] == {"ring": 3}
    dst = run(broker, "list", "dst", "-t", "q").data
    ring = [d for d in dst if d["name"] == "mqgate.capture.n1.orders.c1"]
    assert ring and ring[0]["ring"] == 5
    assert "ring(5)" in run(broker, "list", "dst").text
    run(broker, "destroy", "capture", "-n", "c1")
    assert run(broker, "list", "capture").data == []
    assert run(broker, "list", "setting").data == []


def test_capture_write_is_its_own_right(broker):
    """S7.9: with mqgate.capture.writers=ops an admin outside ops gets 403 naming the
    right and the setting; a member of ops may."""
    broker.captures.config = CaptureConfig(node="n1", writers=("ops",))
    with pytest.raises(Forbidden, match="capture:write.*ops.*mqgate.capture.writers"):
        run(broker, "create", "capture", "-n", "c", "-d", "queue://q")
    run(broker, "create", "capture", "-n", "c", "-d", "queue://q", principal=OPS)
    with pytest.raises(Forbidden):
        run(broker, "destroy", "capture", "-n", "c")


def test_refusals_are_409_with_the_cause(broker):
    """S7.3 through the command: the exclusive divert is named."""
    run(broker, "create", "divert", "-n", "away", "-d", "queue://q", "-target",
        "queue://r", "-exclusive")
    with pytest.raises(Refused, match="exclusive divert 'away'.*queue://r") as e:
        run(broker, "create", "capture", "-n", "c", "-d", "queue://q")
    assert e.value.status == 409


def test_bad_bounds_and_filters_are_bad_requests(broker):
    with pytest.raises(BadRequest, match="ringSize, expiryDelay"):
        run(broker, "create", "capture", "-n", "c", "-d", "q", "-o", "ring=5")
    with pytest.raises(BadRequest, match="ring_size=0 must be"):
        run(broker, "create", "capture", "-n", "c", "-d", "q", "-o", "ringSize=0")
    with pytest.raises(BadRequest):
        run(broker, "create", "capture", "-n", "c", "-d", "q", "-s", "a = = b")
    with pytest.raises(NotFoundError, match="no capture subscription called 'nope'"):
        run(broker, "destroy", "capture", "-n", "nope")


def test_divert_commands(broker):
    run(broker, "create", "divert", "-n", "d", "-d", "queue://a", "-target", "queue://b",
        "-s", "JMSPriority > 3")
    listed = run(broker, "list", "divert")
    assert listed.data[0]["selector"] == "JMSPriority > 3" and "queue://b" in listed.text
    with pytest.raises(Refused, match="already exists"):
        run(broker, "create", "divert", "-n", "d", "-d", "queue://x", "-target", "queue://y")
    run(broker, "destroy", "divert", "-n", "d")
    with pytest.raises(NotFoundError):
        run(broker, "destroy", "divert", "-n", "d")


def test_a_captures_parts_are_not_removed_one_by_one(broker):
    """S7.8: the capture's divert and settings go with the capture only."""
    run(broker, "create", "capture", "-n", "c", "-d", "queue://q")
    with pytest.raises(Refused, match="destroy capture"):
        run(broker, "destroy", "divert", "-n", "capture.c")
    with pytest.raises(Refused, match="belongs to capture"):
        run(broker, "destroy", "setting", "-t", "security", "-m", "mqgate.capture.#")


def test_setting_commands(broker):
    run(broker, "create", "setting", "-t", "address", "-m", "orders.#",
        "-o", "fullPolicy=drop", "-o", "expiryDelay=30")
    run(broker, "create", "setting", "-t", "security", "-m", "secret.*",
        "-o", "consume=ops,audit")
    data = run(broker, "list", "setting").data
    assert data[0]["full_policy"] == "DROP" and data[0]["expiry_delay"] == 30.0
    assert data[1]["permissions"] == {"consume": ["ops", "audit"]}
    with pytest.raises(BadRequest, match="full policy 'SOMETIMES'"):
        run(broker, "create", "setting", "-t", "address", "-m", "x",
            "-o", "fullPolicy=SOMETIMES")
    with pytest.raises(BadRequest, match="takes consume"):
        run(broker, "create", "setting", "-t", "security", "-m", "x", "-o", "send=a")
    run(broker, "destroy", "setting", "-t", "address", "-m", "orders.#")
    assert len(run(broker, "list", "setting").data) == 1



def test_address_setting_bounds_are_listed_applied_and_refused_when_bad(broker):
    """create setting -o maxSizeMessages/maxSizeBytes: list setting shows the bounds;
    a queue the operator made without limits gets them (query dst shows them), one he
    gave limits keeps its own; bad values are named."""
    run(broker, "create", "dst", "-t", "q", "-n", "orders.eu")
    run(broker, "create", "dst", "-t", "q", "-n", "orders.own", "-o", "maxNumMsgs=50")
    reply = run(broker, "create", "setting", "-t", "address", "-m", "orders.#",
                "-o", "fullPolicy=FAIL", "-o", "maxSizeMessages=2",
                "-o", "maxSizeBytes=16k")
    assert reply.data["max_messages"] == 2 and reply.data["max_bytes"] == 16384
    listed = run(broker, "list", "setting")
    assert "Max messages" in listed.text and "16384" in listed.text
    queried = run(broker, "query", "dst", "-t", "q", "-n", "orders.eu")
    shown = queried.data["limits"]
    assert (shown["maxNumMsgs"], shown["limitBehavior"]) == (2, "REJECT_NEWEST")
    assert "address setting orders.#" in queried.text
    assert run(broker, "query", "dst", "-t", "q", "-n", "orders.own").data[
        "limits_from"] == "own"
    assert broker.queue("orders.own").limits.max_count == 50
    # a later consumer-mode change does not make the setting's bounds the queue's own:
    # after a restart without the setting, the queue has the defaults again
    run(broker, "update", "dst", "-t", "q", "-n", "orders.eu",
        "-o", "maxNumActiveConsumers=2")
    again, _, recovered = stored_broker(broker.persistence.store.restarted())
    again.persistence.restore(again, recovered.result)
    default = again.config.limits.max_count
    assert again.queue("orders.eu").limits.max_count == default != 2
    assert again.queue("orders.eu").modes.max_active == 2
    assert again.queue("orders.own").limits.max_count == 50
    run(broker, "destroy", "setting", "-t", "address", "-m", "orders.#")
    assert broker.queue("orders.eu").limits.max_count == default
    assert run(broker, "query", "dst", "-t", "q", "-n", "orders.eu").data[
        "limits_from"] == "defaults"
    assert broker.queue("orders.own").limits.max_count == 50

    for option, words in (("maxSizeMessages=lots", "maxSizeMessages=lots"),
                          ("maxSizeMessages=0", "maxSizeMessages=0"),
                          ("maxSizeBytes=12q", "maxSizeBytes=12q"),
                          ("expiryDelay=soon", "expiryDelay=soon")):
        with pytest.raises(BadRequest, match=words):
            run(broker, "create", "setting", "-t", "address", "-m", "x", "-o", option)
    with pytest.raises(BadRequest, match="PAGE takes no max size"):
        run(broker, "create", "setting", "-t", "address", "-m", "x",
            "-o", "fullPolicy=PAGE", "-o", "maxSizeBytes=1m")
    assert [d["match"] for d in run(broker, "list", "setting").data] == []
