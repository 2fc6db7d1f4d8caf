"""The backlog of a queue on its own (S2.1, S2.9, S2.6, S8.1): order, expiry in one
place, parked deliveries, put-back, reaping, with a Clock."""

from twisted.internet.task import Clock

from mqgate.core import BrokerMessage
from mqgate.core.backlog import STOP, Backlog
from mqgate.core.deliveries import Delivery


def make():
    clock = Clock()
    clock.advance(100)
    return Backlog(clock.seconds), clock


def message(payload, seq, **fields):
    result = BrokerMessage(payload, **fields)
    result.seq = seq
    return result


def take_all(backlog, accepts=lambda m, avoid: True, credit=100):
    """Select with one consumer ("c") that takes what C{accepts} says, up to
    C{credit}; returns (payloads taken, payloads expired, stopped at a paged one)."""
    left = [credit]

    def choose(m, avoid):
        if not left[0]:
            return STOP
        if avoid == "c" or not accepts(m, avoid):
            return None
        left[0] -= 1
        return "c"

    plan, expired = [], []
    blocked = backlog.select(choose, plan, expired)
    taken = [message.payload for _, message, _, _ in plan]
    return taken, [m.payload for m in expired], blocked


def test_higher_priority_first_then_arrival_order():
    """S2.9: entries come out highest priority first, FIFO within a priority."""
    backlog, _ = make()
    for seq, (payload, priority) in enumerate([(b"a", 4), (b"b", 9), (b"c", 4),
                                               (b"d", 0), (b"e", 9)]):
        backlog.append(message(payload, seq, priority=priority))
    assert backlog.depth == 5
    assert take_all(backlog) == ([b"b", b"e", b"a", b"c", b"d"], [], False)
    assert backlog.depth == 0


def test_a_refused_message_keeps_its_place_while_later_ones_pass():
    """S2.8: what the chooser refuses stays, in order, ahead of what comes later."""
    backlog, _ = make()
    for seq, payload in enumerate([b"no1", b"yes1", b"no2", b"yes2"]):
        backlog.append(message(payload, seq))
    taken, _, _ = take_all(backlog, accepts=lambda m, _: m.payload.startswith(b"yes"))
    assert taken == [b"yes1", b"yes2"]
    backlog.append(message(b"later", 9))
    assert take_all(backlog)[0] == [b"no1", b"no2", b"later"]


def test_stop_leaves_the_rest_untouched():
    """A chooser out of credit stops selection; the rest waits in its order."""
    backlog, _ = make()
    for seq in range(5):
        backlog.append(message(b"%d" % seq, seq))
    assert take_all(backlog, credit=2)[0] == [b"0", b"1"]
    assert backlog.depth == 3
    assert take_all(backlog)[0] == [b"2", b"3", b"4"]


def test_expired_messages_are_never_chosen():
    """S2.9: an expired message is taken out and handed back as expired, never given
    to the chooser; the clock is the backlog's."""
    backlog, clock = make()
    backlog.append(message(b"short", 0, expiry=105))
    backlog.append(message(b"long", 1, expiry=500))
    backlog.append(message(b"none", 2))
    clock.advance(10)
    seen = []
    taken, expired, _ = take_all(backlog, accepts=lambda m, _: seen.append(m) or True)
    assert (taken, expired) == ([b"long", b"none"], [b"short"])
    assert [m.payload for m in seen] == [b"long", b"none"] and backlog.depth == 0
    assert backlog.expired(message(b"x", 3, expiry=110))
    assert not backlog.expired(message(b"y", 4, expiry=111))


def test_a_paged_message_stops_selection():
    """S2.6: nothing at or after a message whose body is paged out is taken, lower
    priorities included."""
    backlog, _ = make()
    backlog.append(message(b"a", 0, priority=5))
    paged = message(b"b", 1, priority=5)
    backlog.append(paged)
    backlog.append(message(b"c", 2, priority=1))
    paged.paged = True
    assert take_all(backlog) == ([b"a"], [], True)
    paged.paged = False
    assert take_all(backlog)[0] == [b"b", b"c"]


def test_given_back_deliveries_wait_at_the_head_in_their_order():
    """S8.1: deliveries pushed back wait ahead of what came later, in the order given,
    and keep their delivery count."""
    backlog, _ = make()
    backlog.append(message(b"new", 5))
    back = [Delivery(message(b"x", 1), None, 1), Delivery(message(b"y", 2), None, 1)]
    backlog.push_front(back)
    assert take_all(backlog)[0] == [b"x", b"y", b"new"]
    assert all(m.arrived is not None for m in (back[0].message, back[1].message))


def test_parked_deliveries_skip_the_consumer_they_avoid_until_it_goes():
    """A delivery parked for "any consumer but c" is not chosen for c; unparked (c
    went) it waits at the head of its level for anyone."""
    backlog, _ = make()
    backlog.park(Delivery(message(b"p", 1), None, 1), "c")
    backlog.append(message(b"m", 2))
    assert take_all(backlog)[0] == [b"m"]
    assert (backlog.depth, backlog.parked) == (1, 1)
    backlog.unpark("c")
    assert backlog.parked == 0
    assert take_all(backlog)[0] == [b"p"]


def test_put_back_restores_arrival_order():
    """Entries taken but not handed over go back where they were; a parked one keeps
    the consumer it avoids."""
    backlog, _ = make()
    for seq in range(4):
        backlog.append(message(b"%d" % seq, seq))
    backlog.park(Delivery(message(b"p", 9), None, 1), "c")
    plan, expired = [], []
    backlog.select(lambda m, avoid: "d", plan, expired)
    assert backlog.depth == 0
    backlog.append(message(b"4", 4))
    # plan: the parked one first, then "0".."3"; all but "0" come back.
    backlog.put_back([entry for _, _, _, entry in plan[:1] + plan[2:]])
    assert backlog.depth == 5 and backlog.parked == 1
    assert take_all(backlog)[0] == [b"1", b"2", b"3", b"4"]   # "c" still avoided


def test_reap_and_clear():
    """S2.9: reaping takes out what expired by then, parked ones too; clear takes
    out everything; the expiry index stays bounded."""
    backlog, clock = make()
    backlog.append(message(b"a", 0, expiry=110))
    backlog.append(message(b"b", 1))
    backlog.park(Delivery(message(b"c", 2, expiry=105), None, 1), "c")
    assert backlog.reap(clock.seconds()) == []
    clock.advance(20)
    assert sorted(m.payload for m in backlog.reap(clock.seconds())) == [b"a", b"c"]
    assert backlog.depth == 1
    assert [m.payload for m in backlog.clear()] == [b"b"] and backlog.depth == 0
    assert backlog.expiry_index_size <= 64


def test_oldest_arrival_and_remove_head():
    """S5.1: the oldest arrival is the earliest head; S2.3: the head of the lowest
    level, or the oldest, goes first when a queue makes room."""
    backlog, clock = make()
    assert backlog.oldest_arrival() is None
    backlog.append(message(b"low", 0, priority=1))
    clock.advance(5)
    backlog.append(message(b"high", 1, priority=8))
    assert backlog.oldest_arrival() == 100
    assert backlog.remove_head(oldest=False).payload == b"low"
    newest = message(b"newest", 2, priority=8)
    backlog.append(newest)
    assert backlog.remove_head(oldest=True, newest=newest).payload == b"high"
    assert backlog.remove_head(oldest=True, newest=newest) is None
    assert backlog.snapshot() == [(newest, 0)]
