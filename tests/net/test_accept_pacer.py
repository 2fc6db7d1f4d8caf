"""The accept pacer (S4.2): a service takes sockets from the kernel's listen queue no
faster than its login slots free up, and refuses at once only when they do not."""

from twisted.internet import task

from mqgate.net.pool import ACCEPT_BATCH, AcceptPacer, LoginSlots


class ListeningPort:
    """A listening port as the pacer sees Twisted's: C{doRead} accepts up to
    C{numberAccepts} of the sockets waiting in its queue, each taking a login slot
    (or being refused when there is none, as L{mqgate.net.engine} does)."""

    def __init__(self, slots, waiting):
        self.slots = slots
        self.waiting = waiting          # sockets in the kernel's listen queue
        self.numberAccepts = 100
        self.reading = True
        self.held = []                  # slots of the accepted sockets
        self.refused = 0
        self.rounds = []                # sockets accepted per round

    def doRead(self):
        accepted = min(self.numberAccepts, self.waiting)
        self.waiting -= accepted
        self.rounds.append(accepted)
        for _ in range(accepted):
            slot = self.slots.take()
            if slot is None:
                self.refused += 1
            else:
                self.held.append(slot)
        self.numberAccepts = accepted + 20 if accepted == self.numberAccepts else max(
            1, accepted)

    def stopReading(self):
        self.reading = False

    def startReading(self):
        self.reading = True

    def turn(self):
        """One reactor turn: the port is read if it is being read and has sockets."""
        if self.reading and self.waiting:
            self.doRead()


def paced(limit=8, waiting=100):
    clock = task.Clock()
    slots = LoginSlots("stomp", limit, clock)
    port = ListeningPort(slots, waiting)
    pacer = AcceptPacer(slots, clock)
    pacer.attach(port)
    return clock, slots, port, pacer


def test_a_round_takes_no_more_sockets_than_slots_are_free():
    """With 8 slots and 100 sockets waiting, one round accepts 8: none is refused."""
    _, slots, port, _ = paced(limit=8)
    port.turn()
    assert port.rounds == [8] and port.refused == 0 and slots.free == 0


def test_a_round_takes_at_most_the_batch():
    """However many slots are free, one round accepts at most ACCEPT_BATCH sockets, so
    that one turn never sets up hundreds of connections."""
    _, _, port, _ = paced(limit=1000, waiting=1000)
    for _ in range(3):
        port.turn()
    assert port.rounds == [ACCEPT_BATCH] * 3


def test_full_slots_stop_accepting_until_one_frees():
    """With every slot taken, the port stops being read (the sockets wait in the
    kernel's queue); a slot given back starts it again, and the next round takes the
    one socket that fits."""
    clock, slots, port, _ = paced(limit=8)
    port.turn()
    port.turn()
    assert not port.reading and port.refused == 0 and port.waiting == 92
    for slot in port.held[:3]:
        slot.heard()
    port.held.pop(0).release()
    assert port.reading
    port.turn()
    assert port.rounds == [8, 1] and port.refused == 0


def test_silent_sockets_holding_the_slots_get_the_next_ones_refused_after_the_grace():
    """Slots held by sockets that never said a word: after half a second the port is
    read again and what it accepts is refused at once (told why, not left waiting)."""
    clock, slots, port, pacer = paced(limit=8)
    port.turn()
    port.turn()
    clock.advance(pacer.grace - 0.01)
    assert not port.reading
    clock.advance(0.01)
    assert port.reading
    port.turn()
    assert port.refused == port.rounds[-1] > 0


def test_logins_in_progress_are_given_more_time():
    """Slots held by sockets that are logging in (they have spoken): the port stays
    unread for up to the patience, since their checks free the slots soon; past it,
    the checks are stuck and the next sockets are refused."""
    clock, slots, port, pacer = paced(limit=8)
    port.turn()
    for slot in port.held:
        slot.heard()
    port.turn()
    clock.advance(pacer.grace)
    assert not port.reading
    clock.advance(pacer.patience - pacer.grace - 0.01)
    assert not port.reading
    clock.advance(0.01)
    assert port.reading
    port.turn()
    assert port.refused > 0


def test_a_freed_slot_ends_the_refusals():
    """Once a slot frees after refusals began, the next round is paced again: the one
    socket that fits is accepted, none refused."""
    clock, slots, port, pacer = paced(limit=8)
    port.turn()
    port.turn()
    clock.advance(pacer.grace)
    port.turn()
    refused = port.refused
    port.held.pop().release()
    port.turn()
    assert port.refused == refused and slots.free == 0
    port.turn()
    assert not port.reading and port.refused == refused


def test_detach_stops_the_pacing_and_the_timer():
    """A port that stops listening is left as Twisted made it, and no timer remains."""
    clock, slots, port, pacer = paced(limit=8)
    port.turn()
    port.turn()
    pacer.detach()
    assert "doRead" not in vars(port)
    assert clock.getDelayedCalls() == []


def test_a_port_without_accept_rounds_is_left_alone():
    """An endpoint whose port has no accept loop to bound (not TCP) is not touched."""
    clock = task.Clock()
    pacer = AcceptPacer(LoginSlots("stomp", 8, clock), clock)
    port = object()
    pacer.attach(port)
    pacer.detach()
