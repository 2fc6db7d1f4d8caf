"""
One tunnel connection's reliable byte stream, on either end (S10.3, FACTS 1.2); sans-IO.

HTTP requests can be lost (a proxy restarts), repeated (a client retries a request whose
answer it never saw) or overtake each other (two connections to the proxy). The tunnel
makes a TCP-like stream over them, as the source system's tunnel does:

- what one end writes is cut into DATA packets numbered 1, 2, 3 ... per direction; each
  stays I{unacknowledged} until the peer's ACK (the last number it received in order)
  covers it, and is sent again when the owner says its request was lost
  (L{TunnelSession.resend_all}) or when it has gone unacknowledged for C{rto} seconds;
- the receiver hands on bytes in order only: a number it already had is dropped (a
  repeat), one ahead of the next expected is held (a reordering) if it is within the
  window, and dropped otherwise (it comes again);
- both buffers are bounded by I{window x packet}: at most C{window} packets are in
  flight, and the bytes received in order but not yet read by the owner (its protocol
  paused, say) are bounded too: an ACK advertises the packets the receiver can still
  take, and a sender sends no more than that. What is written but not yet acknowledged
  is L{TunnelSession.buffered}; past L{TunnelSession.limit} the owner pauses whoever
  writes (L{TunnelSession.full}), as a socket's full send buffer would;
- CONN_CLOSE is numbered like DATA, so the peer sees the end of the stream only after
  every byte before it; CONN_ABORT is not: it ends the connection at once.

Every ACK carries the current state, so a lost ACK is repaired by the next one: the
owner puts L{TunnelSession.ack} in every request and response.

Time comes from the C{clock} given (C{seconds()}); nothing here does I/O.
"""

from mqgate.tunnel import packets as p

__all__ = ["TunnelSession", "DEFAULT_WINDOW", "DEFAULT_RTO", "unwrap"]

#: Packets in flight at most per direction (the source system's DEFAULT_WINDOW_SIZE).
DEFAULT_WINDOW = 64
#: Seconds a packet may stay unacknowledged before it is sent again unasked.
DEFAULT_RTO = 5.0

_WRAP = 1 << 32
_HALF = 1 << 31


def unwrap(wire, near):
    """The unbounded sequence number closest to C{near} whose low 32 bits are C{wire}."""
    return near + ((wire - near + _HALF) % _WRAP) - _HALF


class TunnelSession:
    """The state of one tunnel connection on one end.

    @param conn_id: the connection id put in every packet.
    @param clock: anything with C{seconds()} (an C{IReactorTime}).
    @param window: packets in flight at most, and held out of order at most.
    @param max_body: bytes of payload per DATA packet.
    @param rto: seconds before an unacknowledged packet is sent again unasked.
    """

    def __init__(self, conn_id, clock, *, window=DEFAULT_WINDOW, max_body=p.MAX_BODY,
                 rto=DEFAULT_RTO):
        self.conn_id = conn_id
        self._clock = clock
        self.window = window
        self.max_body = max_body
        self.rto = rto
        #: Bytes buffered in either direction at most (window x packet).
        self.limit = window * max_body
        # sending
        self._unsent = bytearray()
        self._unacked = {}          # seq -> [packet, sent at or None: to (re)send]
        self._unacked_bytes = 0
        self._next_seq = 1
        self._acked = 0             # every number up to this one reached the peer
        self._peer_window = window  # what the peer's last ACK said it can take
        self._close_wanted = False
        self._close_seq = None
        # receiving
        self._expected = 1
        self._held = {}             # out-of-order packets, by seq
        self._inbound = bytearray()
        self._advertised = window
        self._update_owed = False
        #: The peer ended its stream (a CONN_CLOSE, in order) or aborted.
        self.peer_closed = False
        self.peer_aborted = False
        #: Counters, for tests and metrics: repeats dropped, packets sent again.
        self.duplicates = 0
        self.resent = 0

    # -- sending ----------------------------------------------------------------------

    def write(self, data):
        """Queue C{data} for the peer (nothing after L{close})."""
        if not self._close_wanted:
            self._unsent += data

    def close(self):
        """End the stream after what is written: a numbered CONN_CLOSE follows it."""
        self._close_wanted = True

    @property
    def buffered(self):
        """Bytes written and not yet acknowledged by the peer."""
        return len(self._unsent) + self._unacked_bytes

    @property
    def full(self):
        """Whether L{buffered} reached L{limit}: whoever writes should pause."""
        return self.buffered >= self.limit

    @property
    def finished(self):
        """Whether our CONN_CLOSE was sent and acknowledged."""
        return self._close_seq is not None and self._acked >= self._close_seq

    def resend_all(self):
        """The request that carried our unacknowledged packets may be lost: send them
        all again with the next L{outgoing}."""
        for entry in self._unacked.values():
            entry[1] = None

    def has_outgoing(self, now=None):
        """Whether L{outgoing} would return packets other than an ACK."""
        now = self._clock.seconds() if now is None else now
        if self._update_owed or self._can_send_new():
            return True
        return any(True for _ in self._due(now))

    def next_deadline(self):
        """When the oldest unacknowledged packet is due again, or None."""
        times = [sent for _packet, sent in self._unacked.values() if sent is not None]
        return min(times) + self.rto if times else None

    def outgoing(self, max_bytes=None):
        """The packets to send now: an ACK first, then the unacknowledged packets that
        are due again, then new ones as far as the window allows; no more than
        C{max_bytes} bytes of them on the wire (the ACK and one packet always fit).
        What does not fit stays due for the next call."""
        now = self._clock.seconds()
        out = [self.ack()]
        room = float("inf") if max_bytes is None else max_bytes - p.HEADER_SIZE
        for entry in self._due(now):
            size = p.HEADER_SIZE + len(entry[0].body)
            if size > room and len(out) > 1:
                return out
            room -= size
            self.resent += 1
            entry[1] = now
            out.append(entry[0])
        while self._can_send_new():
            size = p.HEADER_SIZE + min(len(self._unsent), self.max_body)
            if size > room and len(out) > 1:
                break
            room -= size
            out.append(self._packetise(now))
        return out

    def _due(self, now):
        """The unacknowledged entries to send again now: marked by L{resend_all} or
        unacknowledged for L{rto}, and within the room the peer last advertised (a
        peer whose buffer is full would only drop them again)."""
        last = self._acked + min(self.window, self._peer_window)
        for seq, entry in self._unacked.items():
            if seq > last:
                break
            if entry[1] is None or now - entry[1] >= self.rto:
                yield entry

    def _in_flight(self):
        return self._next_seq - 1 - self._acked

    def _can_send_new(self):
        if self._close_seq is not None:
            return False
        if not self._unsent and not self._close_wanted:
            return False
        return self._in_flight() < min(self.window, self._peer_window)

    def _packetise(self, now):
        seq = self._next_seq
        self._next_seq += 1
        if self._unsent:
            body = bytes(self._unsent[:self.max_body])
            del self._unsent[:self.max_body]
            packet = p.Packet(p.DATA, self.conn_id, seq, body=body)
            self._unacked_bytes += len(body)
        else:
            packet = p.Packet(p.CONN_CLOSE, self.conn_id, seq)
            self._close_seq = seq
        self._unacked[seq] = [packet, now]
        return packet

    def ack(self):
        """An ACK of what we received in order, advertising the room we have left."""
        room = max(0, (self.limit - len(self._inbound)) // self.max_body)
        self._advertised = min(self.window, room)
        self._update_owed = False
        return p.Packet(p.ACK, self.conn_id, self._expected - 1, self._advertised)

    def _acknowledged(self, packet):
        upto = unwrap(packet.seq, self._acked)
        self._peer_window = packet.window
        if upto >= self._next_seq:
            return   # acknowledges what we never sent: a confused peer; ignore it
        for seq in range(self._acked + 1, upto + 1):
            entry = self._unacked.pop(seq, None)
            if entry is not None:
                self._unacked_bytes -= len(entry[0].body) if entry[0].type == p.DATA else 0
        self._acked = max(self._acked, upto)

    # -- receiving --------------------------------------------------------------------

    def receive(self, packets):
        """Take the peer's C{packets} (any order, repeats allowed); what arrives in
        order becomes readable (L{read}), an ACK frees what it covers."""
        for packet in packets:
            kind = packet.type
            if kind == p.ACK:
                self._acknowledged(packet)
            elif kind in (p.DATA, p.CONN_CLOSE):
                self._sequenced(packet)
            elif kind == p.CONN_ABORT:
                self.peer_aborted = self.peer_closed = True

    def _sequenced(self, packet):
        seq = unwrap(packet.seq, self._expected)
        if seq < self._expected or seq in self._held:
            self.duplicates += 1
            return
        if seq >= self._expected + self._advertised_room():
            return   # beyond what we can take: it comes again
        self._held[seq] = packet
        while self._expected in self._held:
            packet = self._held.pop(self._expected)
            self._expected += 1
            if packet.type == p.DATA:
                self._inbound += packet.body
            else:
                self.peer_closed = True
                self._held.clear()
                break

    def _advertised_room(self):
        # Packets past the last one read in order that the buffer has room for now.
        room = max(0, (self.limit - len(self._inbound)) // self.max_body)
        return min(self.window, room)

    @property
    def readable(self):
        """Bytes received in order and not yet read."""
        return len(self._inbound)

    def read(self):
        """Everything received in order since the last read."""
        data, self._inbound = bytes(self._inbound), bytearray()
        if data and self._advertised < self.window // 2:
            self._update_owed = True   # the peer waits for room: tell it
        return data
