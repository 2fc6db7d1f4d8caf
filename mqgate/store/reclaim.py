"""
What each journal segment still holds, so that compaction can delete a dead segment
without reading it (S3.3).

A compaction pass that replays the whole journal decodes every record again on the
store's writer thread, which competes with the reactor for the GIL: under a steady
flow of persistent messages, each added and soon removed, that replay cost the broker
about a quarter of its persistent throughput (bench scenario (b) over STOMP: 14,700
msg/s with it, 19,400 without compaction). Yet in that flow nearly every sealed segment
is wholly dead: L{SegmentUse} tells which, from what the writer thread already knows
as it writes, and such a segment is unlinked unread.

A sealed segment may go, unread, when

 - it holds no live add and no latest delivery count of a live message
   (C{live[segment] == 0});
 - none of its removals is still needed: every add it cancelled sat in the segment
   itself or in one that is gone, or that a full pass has rewritten since (which drops
   every cancelled add), else that add would come back at recovery
   (C{refs[segment]}, the other segments holding adds it cancelled);
 - it holds no record of a two-phase transaction (PREPARE, COMMIT, ROLLBACK): whether
   one of those still matters depends on records elsewhere, so such segments are left
   to the full pass, which reads them (C{pinned}; two-phase transactions are rare).

Segments are looked at oldest first, so a chain of dead segments, each cancelling adds
of the one before, goes in one pass.

The counts are exact, not estimates: a segment counted dead that is not would lose
messages. An entry (L{mqgate.store.filestore._Entry}) is counted in the segment of its
add from the moment its C{loc} is set, on the writer thread, and only then; it is
uncounted, once, by the record that cancels it. The byte figures beside the counts only
decide whether a full pass is worth running.
"""

from mqgate.store.journal import REMOVE

__all__ = ["SegmentUse"]


class SegmentUse:
    """Per journal segment: what is live in it and which segments it depends on.

    Used on the store's writer thread only.

    @ivar live: segment -> live adds plus latest delivery counts held there.
    @ivar live_bytes: segment -> the bytes of those adds.
    @ivar refs: segment -> the other segments holding adds that its records cancelled.
    @ivar pinned: segments holding records of two-phase transactions.
    """

    def __init__(self):
        self.live = {}
        self.live_bytes = {}
        self.refs = {}
        self.pinned = set()

    @classmethod
    def of_replay(cls, replay):
        """The use of the segments a recovery replayed (L{mqgate.store.journal.Replay},
        finished): its live adds and counts, its unresolved PREPAREs' adds, which
        removals cancelled adds of which segment, and its two-phase records."""
        use = cls()
        for held in replay.live.values():
            for entry in held.values():
                use._count(entry.loc[0], entry.size)
                if entry.count_loc is not None:
                    use._count(entry.count_loc[0], 0)
        for loc, _, ops in replay.prepared.values():
            for sub_type, size, _op in ops:
                if sub_type != REMOVE:
                    use._count(loc[0], size)
        for cancel, cancelled in replay.cancelled.items():
            for add in cancelled:
                if add[0] != cancel[0]:
                    use.refs.setdefault(cancel[0], set()).add(add[0])
        use.pinned.update(replay.two_phase)
        return use

    # -- as records are written -------------------------------------------------------

    def wrote(self, segno, offset, two_phase, adds, cancels, counted):
        """A record was written at C{(segno, offset)}.

        @param two_phase: it is a PREPARE, COMMIT or ROLLBACK.
        @param adds: the entries of the messages it adds (their C{loc} is set here).
        @param cancels: the entries of the messages it removes.
        @param counted: the entry whose delivery count it records, or C{None}.
        """
        if two_phase:
            self.pinned.add(segno)
        for entry in adds:
            entry.loc = (segno, offset)
            self._count(segno, entry.size)
        for entry in cancels:
            loc = entry.loc
            if loc is None:
                continue        # never written (nor counted), or uncounted already
            entry.loc = None
            self._uncount(loc[0], entry.size)
            if loc[0] != segno:
                self.refs.setdefault(segno, set()).add(loc[0])
            if entry.count_seg is not None:
                self._uncount(entry.count_seg, 0)
                entry.count_seg = None
        if counted is not None and counted.loc is not None:
            if counted.count_seg is not None:
                self._uncount(counted.count_seg, 0)
            counted.count_seg = segno
            self._count(segno, 0)

    def _count(self, segno, size):
        self.live[segno] = self.live.get(segno, 0) + 1
        self.live_bytes[segno] = self.live_bytes.get(segno, 0) + size

    def _uncount(self, segno, size):
        self.live[segno] -= 1
        self.live_bytes[segno] -= size

    # -- compaction --------------------------------------------------------------------

    def dead(self, segments, active):
        """The sealed segments of C{segments} (ascending, all on disk) that may be
        deleted unread, oldest first; C{active} is the segment appended to."""
        present = set(segments)
        dead = []
        for segno in segments:
            if segno == active:
                continue
            if self.live.get(segno) or segno in self.pinned:
                continue
            if any(other in present for other in self.refs.get(segno, ())):
                continue
            dead.append(segno)
            present.discard(segno)
        return dead

    def rewritten(self, segnos):
        """A full pass rewrote C{segnos}: the adds they held that were cancelled are
        gone, so no removal needs to stay for them any more."""
        for refs in self.refs.values():
            refs.difference_update(segnos)

    def forget(self, segno):
        """Segment C{segno} is gone."""
        self.live.pop(segno, None)
        self.live_bytes.pop(segno, None)
        self.refs.pop(segno, None)
        self.pinned.discard(segno)
