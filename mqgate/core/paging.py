"""
Paging message bodies out of memory (S2.6): at ORANGE and RED, the persistent messages
waiting in a queue beyond the first C{keep} of it (in the order it delivers them) lose
their payload; the store has it and gives it back when the queue comes near them.

Why only these. A persistent message on a queue with a store is in the store already
(it was enqueued only once stored): dropping its payload loses nothing. A non-persistent
one is nowhere else. Topic subscriptions are left alone: one message object is shared
by every subscription it was fanned out to, durable or not, so its payload cannot go
for one of them. A redelivered message (a delivery given back) is not paged either:
there are few of them and the egress may still refer to them.

The head stays. The first C{keep} messages of each queue are never paged, so a consumer
with credit is served at once; as the queue's consumers take messages, the paged ones
that come within those first C{keep} are read back, at most C{reads} at a time per
queue, and the queue's dispatch goes on when they arrive. A dispatch run that meets a
paged message (consumers faster than the store) stops there, without blocking, and
goes on when it is read back: FIFO and priority order stay as they were, and a paged
message is never handed to a consumer. A read that fails is logged and tried again at
the next look (the message stays paged, in the store): nothing is lost.

The accounting. A paged message no longer weighs its bytes in the memory states
(L{mqgate.core.memory.MemoryStates} subtracts L{Pager.bytes}), so that paging lets the
state fall; the queues' own limits (C{maxTotalMsgBytes}, C{mqgate.system.max_size})
still count it, as they count what a client sent.

Cost. Paging looks at each queue once per memory check (C{mqgate.memory.check_interval})
while the state is ORANGE or RED, walking it from its tail and stopping at the first
message already paged, so a look costs what arrived since the last one. A queue with
nothing paged pays one integer test per dispatch run; a queue with paged messages, one
walk of its first C{keep} entries.
"""

from twisted.logger import Logger

from mqgate.core.deliveries import Delivery

__all__ = ["Pager", "ORANGE_LEVEL"]

#: The memory level from which bodies are paged out (ORANGE; RED is 3).
ORANGE_LEVEL = 2

_log = Logger(namespace="mqgate.memory")


class Pager:
    """Pages the bodies of a broker's persistent messages out and back in (S2.6).

    @param broker: the L{mqgate.core.broker.Broker} (its queues are looked at).
    @param memory: its L{mqgate.core.memory.MemoryStates}; the pager tells it what it
        paged (C{memory.paged}).
    @param keep: messages of each queue never paged (C{mqgate.memory.page_keep}).
    @param reads: reads from the store in flight per queue at most
        (C{mqgate.memory.page_reads}).
    @ivar count: messages paged out now. @ivar bytes: their bytes.
    @ivar paged_total: messages paged out so far. @ivar read_total: read back so far.
    @ivar failures: reads that failed so far.
    """

    def __init__(self, broker, memory, keep=100, reads=16):
        self._broker = broker
        self._memory = memory
        self._persistence = broker.persistence
        self.keep = keep
        self.reads = reads
        self.count = 0
        self.bytes = 0
        self.paged_total = 0
        self.read_total = 0
        self.failures = 0
        self.paging = False      # paging out (the state is ORANGE or RED)
        self._reading = set()    # messages being read back
        self._in_flight = {}     # queue -> reads in flight
        self._filling = set()    # queues whose fill() runs (re-entrancy)
        self._arrived = 0        # reads that completed during a fill()
        self._failing = 0        # reads failed since the last one that worked
        memory.paged = self

    def __repr__(self):
        return f"<Pager {self.count} paged, {self.bytes} bytes>"

    # -- the timer --------------------------------------------------------------------

    def tick(self):
        """A memory check: page out at ORANGE and RED, and retry the reads of queues
        whose head is still paged (a read failed)."""
        # Plain queues only (the broker keeps them by name; subscriptions elsewhere).
        queues = [q for q in self._broker._queues.values() if _pageable(q)]
        if self._memory.level >= ORANGE_LEVEL:
            before_count, before_bytes = self.count, self.bytes
            for queue in queues:
                if queue.depth > self.keep:
                    self.page_out(queue)
            if not self.paging:
                self.paging = True
                _log.warn(
                    "memory state {state}: paging out the bodies of persistent messages"
                    " waiting beyond the first {keep} of each queue"
                    " (mqgate.memory.page_keep): {count} messages, {bytes} bytes paged"
                    " out", state=self._memory.state, keep=self.keep,
                    count=self.count - before_count, bytes=self.bytes - before_bytes)
        elif self.paging:
            self.paging = False
            _log.info(
                "memory state {state}: paging out stopped; {count} messages ({bytes}"
                " bytes) are still paged out and are read back as their queues reach"
                " them ({total} paged out so far)", state=self._memory.state,
                count=self.count, bytes=self.bytes, total=self.paged_total)
        for queue in queues:
            if queue.backlog.paged:
                self.fill(queue)

    # -- paging out -------------------------------------------------------------------

    def page_out(self, queue):
        """Drop the payloads of C{queue}'s persistent messages waiting beyond its first
        C{keep}; return how many. Walks each priority level from its tail and stops at
        a message already paged: what is before it was looked at by an earlier call."""
        keep = self.keep
        ahead = 0
        paged = 0
        for level in queue.backlog.levels():
            size = len(level)
            first = max(0, keep - ahead)    # the first index of this level to page
            ahead += size
            for _, entry in zip(range(size - first), reversed(level)):
                if type(entry) is Delivery:
                    continue
                if entry.paged:
                    break
                if not entry.durable or entry.payload is None:
                    continue
                entry.payload = None
                entry.rendered = None
                entry.paged = True
                paged += 1
                self.bytes += entry.size
        if paged:
            self.count += paged
            self.paged_total += paged
            queue.backlog.paged_out(paged)
            queue.pager = self
        return paged

    # -- reading back -----------------------------------------------------------------

    def fill(self, queue):
        """Read back the paged messages among the first C{keep} C{queue} delivers
        next (at most C{reads} in flight); dispatch again as they arrive. Called
        after the queue's dispatch runs, and by L{tick}."""
        if queue in self._filling:
            return
        self._filling.add(queue)
        try:
            while True:
                self._arrived = 0
                self._read_head(queue)
                if not self._arrived:
                    break
                # Reads that completed at once (a memory store): dispatch here, in a
                # loop, rather than from their callbacks (no recursion).
                queue.dispatch()
        finally:
            self._filling.discard(queue)

    def _read_head(self, queue):
        room = self.reads - self._in_flight.get(queue, 0)
        if room <= 0 or queue.store is None:
            return
        seen = 0
        # At least a read's worth ahead, so that page_keep 0 still makes progress.
        keep = max(self.keep, self.reads)
        for level in queue.backlog.levels():
            for entry in level:
                if seen >= keep or room <= 0:
                    return
                seen += 1
                if type(entry) is Delivery or not entry.paged or entry in self._reading:
                    continue
                room -= 1
                self._read(queue, entry)

    def _read(self, queue, message):
        self._reading.add(message)
        self._in_flight[queue] = self._in_flight.get(queue, 0) + 1
        d = self._persistence.store.read_message(queue.store.key, message.seq)
        d.addCallbacks(self._back, self._failed, callbackArgs=(queue, message),
                       errbackArgs=(queue, message))

    def _done(self, queue, message):
        self._reading.discard(message)
        left = self._in_flight[queue] - 1
        if left:
            self._in_flight[queue] = left
        else:
            del self._in_flight[queue]

    def _back(self, data, queue, message):
        self._done(queue, message)
        if not message.paged:
            return    # it left the queue meanwhile (purged, expired, deleted)
        try:
            message.payload = self._persistence.payload_of(data)
        except Exception:
            self._fail(queue, message, "decode")
            return
        message.paged = False
        self._unpaged(queue, message)
        self.read_total += 1
        if self._failing:
            _log.info("paged out message bodies are read back from the store again,"
                      " after {failed} reads that failed", failed=self._failing)
            self._failing = 0
        if queue in self._filling:
            self._arrived += 1
        elif not queue.deleted:
            queue.dispatch()

    def _failed(self, failure, queue, message):
        self._done(queue, message)
        self._fail(queue, message, failure.getErrorMessage())

    def _fail(self, queue, message, why):
        # It stays paged (and in the store): the next tick tries again. One line per
        # run of failures, not one per message and look.
        self.failures += 1
        self._failing += 1
        if self._failing > 1:
            return
        _log.error("could not read the body of paged out message {seq} of queue"
                   " {queue} back from the store ({why}); it waits in the store and"
                   " is read again at the next memory check (mqgate.memory"
                   ".check_interval); further failures are counted until a read"
                   " works", seq=message.seq, queue=queue.name, why=why)

    def _unpaged(self, queue, message):
        queue.backlog.paged_in()
        self.count -= 1
        self.bytes -= message.size

    # -- messages leaving while paged ---------------------------------------------------

    def forget(self, queue, message):
        """C{message} left C{queue} while paged (purged, expired, removed by a limit,
        the queue deleted): no longer counted as paged."""
        if message.paged:
            message.paged = False
            self._unpaged(queue, message)

    def revive(self, queue, message, then):
        """Read C{message}'s body back for C{then()} (it died and goes to the dead
        message queue, which keeps a copy of it). A failed read is logged and leaves
        the message in the store (it comes back after a restart)."""
        d = self._persistence.store.read_message(queue.store.key, message.seq)

        def back(data):
            message.payload = self._persistence.payload_of(data)
            then()

        def failed(failure):
            self.failures += 1
            _log.error("could not read the body of paged out message {seq} of queue"
                       " {queue} back from the store to move it to the dead message"
                       " queue ({why}); it stays in the store", seq=message.seq,
                       queue=queue.name, why=failure.getErrorMessage())
        d.addCallbacks(back, failed)


def _pageable(queue):
    # A queue whose persistent messages are in the store, and not shared with others.
    return queue.store is not None and queue.pattern is None and not queue.deleted
