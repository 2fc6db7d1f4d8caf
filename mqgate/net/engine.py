"""
The one Twisted adapter shape for every sans-IO engine (docs/design.md): feed bytes to the
engine, hand its events to the glue, write what the engine has to say, run its timers.

AMQP and STOMP connections differ only in which engine and glue they build and how an
engine is told to give up; that is the factory's business (L{EngineFactory}), so the
protocol class is written once.

Twisted calls: C{connectionMade}, C{dataReceived}, C{connectionLost}.
The glue calls: C{request_flush} (through the factory's L{Flusher}) when output was
produced outside C{dataReceived}: an authentication result, or deliveries routed here
from another connection's producer.
The factory calls: C{shutdown} when the broker stops.
The sniffer (L{mqgate.net.unify}) calls C{adopt_login_slot} before C{makeConnection}
when it already took this socket's place among the unauthenticated.
The service's thread pool (L{mqgate.net.pool}, S1.6), when the factory has one, admits
or refuses each connection and decides when its bytes are processed: C{process_inbound},
C{pause_inbound}, C{resume_inbound}.
The glue calls C{pause_reading}/C{resume_reading} when a producer of the connection is
blocked by a full destination (S2.7). Either side may pause the socket: it is read again
only when neither wants it paused (the reasons are kept in a set, so neither side's
resume undoes the other's pause). An administrator's C{pause svc} is a third reason
(C{pause_by_admin}/C{resume_by_admin}, S11.1).

Each connection is listed in the factory's L{mqgate.net.connections.ConnectionRegistry},
when it has one, under its C{connection_id} while its socket lives.

Work per turn (S10.4): one reactor turn gives one connection's engine at most the
factory's C{read_slice} bytes and its glue at most the factory's L{EventBudget} of
events (the AMQP engine bounds its frames itself). What is left waits, in order, for
the next turn, the socket paused meanwhile, so one peer's burst of pipelined frames
costs the others a few milliseconds per turn, not the whole burst at once.

Before login (S4.2) a connection holds a slot of the service's L{LoginSlots} (none left:
it is refused at once, in its protocol's words where it can have any) and must be logged
in within the factory's C{setup_timeout}; a connection the pool has no room for is told
so and dropped within a few seconds, its credentials never checked.
"""

import socket

from twisted.internet.interfaces import IPushProducer, ISSLTransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from zope.interface import implementer

from mqgate.glue.egress import EgressContext

from mqgate.net.pool import RefusalGate
from mqgate.security.guard import LogBudget

__all__ = ["EngineProtocol", "EngineFactory", "EventBudget", "Flusher"]

# Why a connection's socket is paused (EngineProtocol._pauses).
_POOL = "pool"
_FLOW = "flow-control"
_BACKLOG = "backlog"    # work of the last read waits for the next reactor turn
_ADMIN = "admin"        # an administrator paused the service (`pause svc`, S11.1)

# Seconds a connection the pool refused has to hear why (an AMQP client needs its SASL
# and header exchange first) before it is dropped without more words.
REFUSAL_GRACE = 5.0

#: Seconds a connection the broker closed goes on reading, and dropping, what its peer
#: still sends before the socket is dropped. Closing a TCP socket with input unread makes
#: the kernel send a reset, and a reset makes the peer's kernel throw away what it had
#: not read yet: our close frame or ERROR, the one thing the peer needed to hear.
CLOSE_GRACE = 2.0
#: Bytes read and dropped in that grace at most; past them the socket is not read any
#: more (the peer's writes wait in its buffers) until the grace ends, so that a peer
#: sending as fast as it can costs the broker little.
CLOSE_DRAIN = 1024 * 1024


class EventBudget:
    """How many of an engine's events one connection hands its glue per reactor turn.

    An engine that parses a whole read into events at once (STOMP) would otherwise
    have one peer's 64 KiB of pipelined frames acted on in one go, holding the reactor
    from every other client for as long as that takes.

    @ivar total: what one turn may spend.
    @ivar costs: what an event costs, by its type (1 unless named: those that make the
        broker build or tear down something, a consumer say, cost more): a number, or
        a function of the event giving one.
    """

    def __init__(self, total, costs=None):
        self.total = total
        self.costs = dict(costs or {})
        # Fewer events than this fit whatever they are: no need to look at each.
        self._surely_fits = total // max(
            (cost for cost in self.costs.values() if type(cost) is int), default=1)
        if any(type(cost) is not int for cost in self.costs.values()):
            self._surely_fits = 0   # a cost known only from the event: count each

    def end(self, events, start):
        """Where the turn that hands over C{events} from C{start} stops (exclusive)."""
        n = len(events)
        if n - start <= self._surely_fits:
            return n
        costs, spent, i = self.costs, 0, start
        while i < n and spent < self.total:
            event = events[i]
            cost = costs.get(type(event), 1)
            spent += cost if type(cost) is int else cost(event)
            i += 1
        return i


class Flusher:
    """Writes out, once per reactor turn, every connection that has output pending.

    A producer's burst may route messages to many consumers on other connections; rather
    than one write (or one C{callLater}) per message, the consumers are marked and all of
    them flushed together when the reactor comes round. One connection's failure never
    costs the others their turn (an L{EngineProtocol} keeps its own to itself).
    """

    def __init__(self, clock):
        self._clock = clock
        self._pending = {}
        self._call = None

    def mark(self, protocol):
        self._pending[protocol] = None
        if self._call is None:
            self._call = self._clock.callLater(0, self._run)

    def _run(self):
        self._call = None
        pending, self._pending = self._pending, {}
        for protocol in pending:
            try:
                protocol.flush()   # an EngineProtocol's guards itself; this is for others
            except Exception:
                _flush_failed(protocol)

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


_log = Logger()


def _flush_failed(protocol):
    """A connection failed to write out (S10.4): log it with its peer and drop it, which
    gives everything it held back to the queues; the exception goes no further, so the
    reactor and the other connections never see it."""
    peer = getattr(protocol, "peer", "?")
    _log.failure("writing to the connection of {peer} failed; dropping it", peer=peer)
    transport = getattr(protocol, "transport", None)
    if transport is None:
        return
    try:
        transport.abortConnection()
    except Exception:
        _log.failure("dropping the connection of {peer}", peer=peer)


@implementer(IPushProducer)
def _no_delay(transport):
    """Turn Nagle's algorithm off on a TCP (or TLS over TCP) transport.

    The broker writes each batch of frames in one piece, so small writes are already
    as few as they can be; with Nagle on, a small MESSAGE written while the previous
    one is unacknowledged waits for the peer's delayed ACK (up to 40 ms on Linux),
    which is what a client sending at a steady, light rate sees as latency."""
    set_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        set_no_delay(True)


class EngineProtocol(Protocol):
    """One broker-side connection driven by an engine and its glue.

    It is also the transport's streaming producer (S9.3): when the socket's send buffer
    fills, the transport calls C{pauseProducing} and the glue's egress queues stop
    being served (deliveries then wait there, bounded, not in the transport's buffer);
    C{resumeProducing} serves them again.
    """

    log = Logger()

    def __init__(self, factory):
        self.factory = factory
        self.engine = None
        self.glue = None
        self.peer = "?"
        self._tick_call = None
        self._awaiting_ready = True
        self._setup_deadline = None
        self._setup_timeout = None
        self._lane = None       # the pool's way in for our bytes (S1.6); None: direct
        self.refused = None     # why the pool had no room for us, or None
        self._gate = None       # while refused: the RefusalGate our events go through
        self._login_slot = None  # our place among the unauthenticated (LoginSlots)
        self._pauses = set()    # who wants the socket paused: _POOL, _FLOW
        self._writing_paused = False   # the transport's send buffer is full (S9.3)
        self._broken = False    # a flush failed: the connection is being dropped
        self._lost = False      # the transport is gone: nothing may be written or closed
        self._held_events = None   # events read and not yet handed to the glue, or None
        self._held_from = 0        # the first of them not handed over yet
        self._unread = bytearray()  # bytes received and not yet given to the engine
        self._go_on_call = None    # the next turn's work on what earlier reads left
        self._closing = False      # goodbye written, our side closed: input is dropped
        self._grace_call = None    # drops the socket at the end of CLOSE_GRACE
        self._drained = 0          # bytes dropped since, up to CLOSE_DRAIN
        self._drain_stopped = False
        self.connection_id = None  # our id in the factory's registry, if it has one
        self.connected_at = None   # the clock's time at connectionMade
        self._admin_held = bytearray()  # bytes that came in although paused (see there)

    def connectionMade(self):
        """Build the engine and the glue; a peer gets a set-up deadline to say hello."""
        factory = self.factory
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self.engine, self.glue = factory.make_session(self)
        _no_delay(self.transport)
        self.transport.registerProducer(self, True)
        factory.connections.add(self)
        self.connected_at = factory.clock.seconds()
        if factory.registry is not None:
            self.connection_id = factory.registry.add(self)
        if factory.paused_by_admin:
            # Accepted just before the service was paused (or handed over by the
            # sniffer since): not read until the service resumes.
            self._pause(_ADMIN)
        factory.opened += 1
        if not self._take_login_slot():
            self._refuse_now(factory.login_slots.refusal_description())
            return
        timeout = factory.setup_timeout
        if not self._join_pool():
            timeout = min(timeout, REFUSAL_GRACE)
        self._setup_timeout = timeout
        self._setup_deadline = factory.clock.seconds() + timeout
        self._schedule_tick(self._setup_deadline)

    def adopt_login_slot(self, slot):
        """Keep the slot the sniffer took for this socket (see L{LoginSlots}); its
        first bytes told the sniffer the protocol, so the socket has spoken."""
        self._login_slot = slot
        slot.heard()

    def _take_login_slot(self):
        """Our place among the service's unauthenticated sockets; False if none left."""
        slots = self.factory.login_slots
        if self._login_slot is None and slots is not None:
            self._login_slot = slots.take()
            return self._login_slot is not None
        return True

    def _release_login_slot(self):
        slot, self._login_slot = self._login_slot, None
        if slot is not None:
            slot.release()

    def _refuse_now(self, description):
        """Say C{description} if the protocol can before the peer has spoken, and go."""
        self.factory.abandon(self.engine, "capacity", description)
        self.flush()

    def dataReceived(self, data):
        """Bytes from the peer: now (dedicated) or in the distributor's turn (shared)."""
        if self._closing:
            # Said goodbye: what the peer still sends is read only to be dropped.
            self._drained += len(data)
            if self._drained > CLOSE_DRAIN and not self._drain_stopped:
                self._drain_stopped = True
                self.transport.pauseProducing()
            return
        if _ADMIN in self._pauses:
            # Read before the pause took hold: the sniffer's replay of a socket's first
            # bytes, the rest of a read. Bounded by one read; acted on at the resume.
            self._admin_held += data
            return
        self.factory.bytes_in += len(data)
        if self._login_slot is not None:
            self._login_slot.heard()   # logging in: its slot frees soon (AcceptPacer)
        if self._lane is not None:
            self._lane.received(data)
        else:
            self.process_inbound(data)

    def process_inbound(self, data):
        """Through the engine to the glue, then write the answer.

        One reactor turn does a bounded amount of a connection's work (S10.4): at most
        the factory's C{read_slice} bytes go to the engine, and of the events they make
        at most the factory's L{EventBudget} goes to the glue (an AMQP engine bounds
        its frames itself and keeps the rest, C{backlogged}). Whatever is left waits,
        in order, for the next turn, after the other connections had theirs; the socket
        is paused meanwhile, and bytes that still come (from the pool) wait behind it."""
        if self._go_on_call is not None:
            self._unread += data
            return
        self._take_in(data)

    def _take_in(self, data):
        limit = self.factory.read_slice
        if limit is not None and len(data) > limit:
            self._unread += memoryview(data)[limit:]
            data = data[:limit]
        self._hand_over(self.engine.receive_data(data), 0)
        self.flush()
        self._come_back_for_the_rest()

    def _hand_over(self, events, start):
        """Give the glue C{events} from C{start}, as many as the budget allows; keep
        the rest for the next turn."""
        budget = self.factory.event_budget
        end = len(events) if budget is None else budget.end(events, start)
        if end < len(events):
            self._held_events, self._held_from = events, end
        # The one place events reach the glue: a refused connection's go to its gate.
        handle = self.glue.handle if self._gate is None else self._gate
        if start == 0 and end == len(events):
            handle(events)
        elif start < end:
            handle(events[start:end])

    def _come_back_for_the_rest(self):
        engine = self.engine
        if engine.finished:
            # Nothing more will be acted on: let go of what waits now.
            self._held_events = None
            self._unread = bytearray()
            return
        if self._go_on_call is None and (self._held_events is not None or self._unread
                                         or getattr(engine, "backlogged", False)):
            self._pause(_BACKLOG)
            self._go_on_call = self.factory.clock.callLater(0, self._go_on)

    def _go_on(self):
        """The next turn's share of what earlier reads left: events first, then the
        bytes not given to the engine yet (or the frames it kept)."""
        self._go_on_call = None
        if self.engine is None or self.engine.finished:
            return
        held = self._held_events
        if held is not None:
            self._held_events = None
            self._hand_over(held, self._held_from)
            self.flush()
            self._come_back_for_the_rest()
        else:
            unread = self._unread
            limit = self.factory.read_slice or len(unread)
            data = bytes(unread[:limit])
            del unread[:limit]
            self._take_in(data)
        if self._go_on_call is None:
            self._resume(_BACKLOG)

    def pause_inbound(self):
        """Stop reading the socket (the pool's back-pressure, S1.6)."""
        self._pause(_POOL)

    def resume_inbound(self):
        """Read the socket again, unless flow control still holds it (S2.7)."""
        self._resume(_POOL)

    def pause_reading(self):
        """Stop reading the socket: a producer of ours filled a destination (S2.7)."""
        self._pause(_FLOW)

    def resume_reading(self):
        """Read the socket again, unless the pool still holds it (S1.6)."""
        self._resume(_FLOW)

    @property
    def reading_paused(self):
        """C{True} while the pool or flow control keeps the socket unread."""
        return bool(self._pauses)

    def pause_by_admin(self):
        """Stop reading the socket: its service was paused (S11.1)."""
        self._pause(_ADMIN)

    def resume_by_admin(self):
        """Read the socket again, unless flow control or the pool still hold it; act
        on what came in while paused first."""
        self._resume(_ADMIN)
        held, self._admin_held = self._admin_held, bytearray()
        if held and not self._lost:
            self.dataReceived(bytes(held))

    @property
    def paused_by_admin(self):
        return _ADMIN in self._pauses

    def _pause(self, reason):
        if not self._pauses and not self._gone():
            self.transport.pauseProducing()
        self._pauses.add(reason)

    def _resume(self, reason):
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        if not self._pauses and not self._gone():
            self.transport.resumeProducing()

    def _gone(self):
        # A transport that is closing takes no more pause/resume (StringTransport even
        # raises): nothing will be read from it anyway.
        return (self.transport is None or self._closing
                or getattr(self.transport, "disconnecting", False))

    # -- the service's thread pool (S1.6) ------------------------------------------------

    def _join_pool(self):
        """Take our workers from the service's pool; False if it has no room for us."""
        pool = self.factory.pool
        if pool is None:
            return True
        self._lane = pool.admit(self)
        if self._lane is not None:
            return True
        self.refused = pool.refusal_description()
        self.factory.log_budgeted("connection from {peer} refused: {why}",
                                  peer=self.peer, why=self.refused)
        if self.factory.speaks_first:
            self._refuse_now(self.refused)
        else:
            # The refusal is said in the protocol's words once the engine can speak:
            # an AMQP client first gets through SASL, unchecked, then hears it.
            self._gate = RefusalGate(self._say_refused, self._wave_through)
        return False

    def _say_refused(self):
        self.factory.abandon(self.engine, "capacity", self.refused)

    def _wave_through(self, event):
        # The frames a client pipelined behind its login, which the answer releases,
        # go through the gate too: its open is answered with the goodbye.
        self._gate(self.factory.wave_through(self.engine))

    def _leave_pool(self):
        lane, self._lane = self._lane, None
        if lane is not None:
            lane.release()

    # -- the transport's producer (S9.3) -------------------------------------------------

    def pauseProducing(self):
        """The send buffer is full: write nothing more from the egress queues."""
        if not self._writing_paused:
            self._writing_paused = True
            self.glue.egress.paused()

    def resumeProducing(self):
        """The send buffer drained: serve the egress queues again."""
        if self._writing_paused:
            self._writing_paused = False
            self.glue.egress.resumed()
            self.flush()

    def stopProducing(self):
        """The transport is going; connectionLost does the rest."""

    def _is_writing_paused(self):
        return self._writing_paused

    def request_flush(self):
        """Ask for a flush in the next reactor turn (output made outside dataReceived)."""
        self.factory.flusher.mark(self)

    def flush(self):
        """Write what the engine has to say; drop the transport when it is finished.

        Whoever calls (the Flusher, a read, a timer, the transport's resume), an
        exception here is this connection's alone (S10.4): it is logged with the peer
        and the connection dropped, which gives everything it held back to the queues,
        and nothing escapes into the reactor or the other connections' turn."""
        if self._broken:
            return
        try:
            self._write_out()
        except Exception:
            self._broken = True   # its state can no longer be trusted
            _flush_failed(self)

    def _write_out(self):
        engine = self.engine
        if engine is None or self._closing or self._lost:
            return
        egress = self.glue.egress
        out = engine.data_to_send()
        if out:
            if engine.finished:
                # The goodbye goes out whatever the buffer says: nothing follows it.
                egress.flush_control(self._write)
                self._write(out)
            elif self._writing_paused or egress.holding_control:
                egress.hold_control(out)   # C-1: served first once we may write
            else:
                self._write(out)
        if not self._writing_paused and egress.has_pending:
            egress.drain(self._write, self._is_writing_paused)
        if self._awaiting_ready and engine.ready and not engine.finished:
            # The handshake is done (possibly just now, after an asynchronous login):
            # the peer's heart-beat or idle timeout is known, so the engine's timers
            # start at once, not at the set-up deadline (S1.7).
            self._awaiting_ready = False
            self._release_login_slot()
            self._cancel_tick()
            self._tick()
            return
        if engine.finished:
            if engine.error is not None:
                self.log.info("closing connection from {peer}: {error}", peer=self.peer,
                              error=engine.error)
            # Nothing may follow our close (AMQP Part 2 section 2.7.9, a STOMP ERROR):
            # let go of the consumers now, so deliveries go elsewhere instead of being
            # written behind the close and counted as failed when the socket goes.
            self.glue.connection_lost()
            if self._writing_paused:
                # The peer is not reading (its socket is full): waiting for it to take
                # our goodbye could hold the connection for ever (S9.4, S9.6).
                self.transport.abortConnection()
            else:
                self._close_after_goodbye()

    def _write(self, data):
        # Counted for the service's metrics (S5.1): once per write, and the egress
        # queues write in batches, not once per message.
        self.factory.bytes_out += len(data)
        self.transport.write(data)

    def _close_after_goodbye(self):
        """Close our side once the goodbye is written, then read and drop what the peer
        still sends (up to L{CLOSE_DRAIN} bytes) for L{CLOSE_GRACE} seconds before
        dropping the socket (see there), so that a peer that keeps sending still gets
        to read why it was closed.

        A transport that cannot close one side is closed as a whole, and so is TLS:
        a TCP connection running TLS has the method, but it would close the socket's
        side under TLS without its close_notify (clients fail on "unexpected eof")."""
        transport = self.transport
        close_our_side = getattr(transport, "loseWriteConnection", None)
        if close_our_side is None or ISSLTransport.providedBy(transport):
            if ISSLTransport.providedBy(transport):
                # TLS sends its close_notify only once no producer is registered, and
                # closes the socket only once the peer answers it: a peer that never
                # does (many clients stop reading after an ERROR) would hold the
                # connection for ever. It gets the same grace as TCP.
                transport.unregisterProducer()
                transport.loseConnection()
                self._release_login_slot()
                self._grace_call = self.factory.clock.callLater(
                    CLOSE_GRACE, self._end_grace)
                return
            transport.loseConnection()
            return
        self._closing = True
        # A peer dropped at its login deadline is not logging in any more: its place
        # among the unauthenticated goes to the next client now, not after the grace.
        self._release_login_slot()
        if self._pauses:
            # Paused for the pool, flow control or a backlog: none of it matters now,
            # and input must be read for the socket to close without a reset.
            self._pauses.clear()
            transport.resumeProducing()
        close_our_side()
        self._grace_call = self.factory.clock.callLater(CLOSE_GRACE, self._end_grace)

    def _end_grace(self):
        self._grace_call = None
        self.transport.abortConnection()

    def connectionLost(self, reason):
        """The transport is gone: everything unsettled goes back to its queue."""
        # A flush after this (the input still queued for the pool, a login answered
        # late) must not write or half-close a socket that no longer exists.
        self._lost = True
        self.factory.connections.discard(self)
        if self.connection_id is not None:
            self.factory.registry.remove(self.connection_id)
        self.factory.closed += 1
        self._release_login_slot()
        self._cancel_tick()
        if self._go_on_call is not None and self._go_on_call.active():
            self._go_on_call.cancel()    # what still waits goes with the connection
        self._go_on_call = self._held_events = None
        self._unread = bytearray()
        if self._grace_call is not None and self._grace_call.active():
            self._grace_call.cancel()
        self._grace_call = None
        self._leave_pool()  # processes what was received and not yet processed
        if self.engine is not None:
            self.engine.connection_lost()
            self.glue.connection_lost()

    def set_keepalive(self, keepalive):
        """Apply a client profile's TCP keep-alive (S9.7) to our socket: the handle of
        the transport, or of the TCP transport under TLS."""
        transport = self.transport
        while transport is not None:
            handle = getattr(transport, "getHandle", _no_handle)()
            if isinstance(handle, socket.socket):
                break
            transport = getattr(transport, "transport", None)
        else:
            return
        options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, int(keepalive.enabled))]
        if keepalive.enabled:
            for name, value in (("TCP_KEEPIDLE", keepalive.idle),
                                ("TCP_KEEPINTVL", keepalive.interval),
                                ("TCP_KEEPCNT", keepalive.count)):
                option = getattr(socket, name, None)   # Linux has all three
                if option is not None:
                    options.append((socket.IPPROTO_TCP, option, value))
        try:
            for level, option, value in options:
                handle.setsockopt(level, option, value)
        except OSError as e:
            self.log.warn("TCP keep-alive not set for {peer}: {error}", peer=self.peer,
                          error=e)

    def ping(self):
        """Probe the peer (S1.7): a write to a vanished peer fails and ends the connection.

        A client whose socket is still too full to take the probe counts a connection
        trouble against its slowness (S9.4)."""
        if self._writing_paused and self.glue is not None:
            self.glue.egress.meter.trouble()
        if self.engine is not None and not self.engine.finished and self.engine.ready:
            self.engine.ping()
            self.flush()

    def shutdown(self, description="the broker is shutting down"):
        """Say goodbye in the protocol's own words (S0.4) and drop the transport."""
        if self.engine is not None and not self.engine.finished:
            self.factory.abandon(self.engine, "shutdown", description)
        self.flush()

    def _tick(self):
        """Run the engine's timers (idle timeout, heart-beats) and the set-up deadline."""
        self._tick_call = None
        engine = self.engine
        if engine is None or engine.finished:
            return
        now = self.factory.clock.seconds()
        if _ADMIN in self._pauses:
            # We are the ones not reading it (its service is paused): its silence is
            # ours, not a reason for an idle timeout or a missed heart-beat.
            engine.presume_alive()
        deadline = engine.tick(now)
        if not engine.ready and not engine.finished:
            if now >= self._setup_deadline:
                # A peer that never completes its handshake holds a connection for
                # nothing (S4.2: the client response timeout).
                self.factory.log_budgeted(
                    "closing connection from {peer}: not logged in within {timeout:g} s "
                    "(mqgate.authentication.client.response.timeout)", peer=self.peer,
                    timeout=self._setup_timeout)
                self.factory.abandon(engine, "setup-timeout",
                                     "not logged in within the time allowed for it")
            else:
                deadline = min(deadline or self._setup_deadline, self._setup_deadline)
        self.flush()
        if deadline is not None and not engine.finished:
            self._schedule_tick(deadline)

    def _schedule_tick(self, when):
        clock = self.factory.clock
        self._tick_call = clock.callLater(max(0.0, when - clock.seconds()), self._tick)

    def _cancel_tick(self):
        if self._tick_call is not None and self._tick_call.active():
            self._tick_call.cancel()
        self._tick_call = None


def _no_handle():
    return None


class EngineFactory(Factory):
    """What every engine-driven service shares; subclasses say which engine and glue.

    @ivar connections: the live protocols, so shutdown can close each properly.
    @ivar opened: connections made so far, and C{closed} those gone (S5.1 metrics).
    @ivar bytes_in: bytes read from every connection so far, and C{bytes_out} bytes
        written (S5.1).
    @ivar pool: the service's L{mqgate.net.pool.ServicePool} (S1.6), or None: every
        connection admitted, its bytes processed as they arrive. Several factories of
        one service (AMQP and STOMP on one port) share the service's pool.
    """

    _logger = Logger()
    protocol = EngineProtocol
    pool = None
    login_slots = None  # the service's LoginSlots (S4.2), or None: no limit
    event_budget = None  # an EventBudget, or None: the engine bounds its own work
    read_slice = None   # bytes given to the engine per turn, or None: a whole read
    speaks_first = False  # whether the protocol may send its error before the peer spoke
    registry = None     # the broker's ConnectionRegistry (S11.1), or None: not listed
    service_name = None  # the connection service the factory serves
    protocol_label = "?"  # what the admin's connection list calls the protocol
    paused_by_admin = False  # `pause svc`: new connections are not read either
    noisy = False  # ConnectionService logs one line per service; per-connection is noise

    def __init__(self, *, clock, flusher, setup_timeout, egress=None):
        self.clock = clock
        self.flusher = flusher
        self.setup_timeout = setup_timeout
        self.connections = set()
        self.opened = self.closed = 0
        self.bytes_in = self.bytes_out = 0
        # Lines about refused and timed-out connections, which a flood of sockets could
        # otherwise turn into a flood of lines.
        self._log_budget = LogBudget(clock, lines=10, interval=60.0)
        # What every connection's egress shares (S9.4-S9.7); one per broker.
        self.egress = egress if egress is not None else EgressContext(clock)

    def buildProtocol(self, addr):
        return self.protocol(self)

    def make_session(self, protocol):
        """Return C{(engine, glue)} for a new connection."""
        raise NotImplementedError

    def abandon(self, engine, why, description):
        """Make the engine say goodbye (C{why}: "shutdown", "setup-timeout" or
        "capacity": the pool or the unauthenticated slots are full, S1.6, S4.2)."""
        raise NotImplementedError

    def wave_through(self, engine):
        """Answer a refused connection's login as if it succeeded, unchecked, so that
        its protocol can say why it is refused next; return the engine's events."""
        raise NotImplementedError

    def log_budgeted(self, text, **fields):
        """Log at info level, within the factory's budget of lines a minute."""
        held = self._log_budget.take()
        if held is not None:
            self._logger.info(text + "{more}", more=(f" ({held} similar lines not logged)"
                                                 if held else ""), **fields)

    def shutdown(self):
        """Close every connection in its protocol's own words."""
        for protocol in list(self.connections):
            protocol.shutdown()
