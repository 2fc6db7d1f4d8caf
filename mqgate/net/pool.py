"""
The thread-pool models of S1.6, emulated on the one reactor thread.

Theory of operation
-------------------
OpenMQ serves each connection service from a pool of threads (FACTS 1.7): in the
I{dedicated} model every connection holds two threads, one reading and one writing; in
the I{shared} model a few I{distributor} threads each watch up to
C{mqgate.shared.connectionMonitor_limit} connections and hand their work to the pool.
mqgate has one reactor thread, so here a I{worker} is a unit of capacity, not a thread:
a token the pool counts, lends out and takes back. What the tokens buy is real:

- admission. A connection is admitted only if its workers can be had within
  C{max_threads}. Per service:

    dedicated   a connection holds 2 workers (inbound, outbound), so the service admits
                C{max_threads // 2} connections;
    shared      a distributor holds 1 worker and watches at most C{monitor_limit}
                connections (-1: any number), so the service admits
                C{max_threads * monitor_limit} connections (unlimited with -1).
                A new connection joins the first distributor with room; a new
                distributor starts only when all are full, and stops (giving its worker
                back) when its last connection goes.

  A connection beyond that is refused in its protocol's own words (the adapter asks
  L{ServicePool.refusal_description} what to say), never silently dropped.
- scheduling, the observable difference between the models. A dedicated connection's
  bytes go to its engine as they arrive (its own turn). A shared connection's bytes go
  to its distributor, which queues them per connection and processes them in I{turns}:
  each turn gives every connection with a backlog at most C{turn_budget} bytes, round
  robin, and the next turn runs in a later reactor iteration (C{callLater(0)}), so the
  reactor reads other sockets in between. One client flooding its connection therefore
  gets one budget per turn like everybody else on its distributor, and cannot starve
  them. A connection whose backlog passes C{backlog_limit} bytes has its transport
  paused (it stops reading that socket: back-pressure to the client) until the backlog
  is down to C{turn_budget}; nothing queues without bound.
- the pool's shape over time. The pool starts with C{min_threads} idle workers (OpenMQ
  starts its minimum at once). Workers are taken from the idle ones first, else created;
  a freed worker becomes idle and still counts. A worker idle for C{idle_timeout}
  seconds retires, the oldest first, as long as the pool keeps C{min_threads}.

The connection side of this module is a small duck type, implemented by
L{mqgate.net.engine.EngineProtocol}:

    process_inbound(data)   hand received bytes to the engine and glue, now
    pause_inbound()         stop reading the socket
    resume_inbound()        read it again

Time comes from an injected C{IReactorTime} (task.Clock in tests). L{ServicePool.stats}
gives the figures for the admin layer and metrics (S1.6: in use, idle, refused).
"""

import collections

import attrs
from twisted.logger import Logger

from mqgate.amqp.events import AuthenticationRequested
from mqgate.errors import ConfigError
from mqgate.security.guard import LogBudget

__all__ = [
    "DEDICATED", "SHARED", "WORKERS_PER_CONNECTION", "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_TURN_BUDGET", "DEFAULT_BACKLOG_LIMIT", "PoolConfig", "ServicePool",
    "Distributor", "RefusalGate", "LoginSlots", "AcceptPacer", "ACCEPT_GRACE",
    "ACCEPT_PATIENCE", "ACCEPT_BATCH",
]

DEDICATED = "dedicated"
SHARED = "shared"
#: A dedicated connection's workers: one inbound, one outbound (FACTS 1.7).
WORKERS_PER_CONNECTION = 2
#: Seconds an idle worker above the minimum lives on (OpenMQ keeps no key for this).
DEFAULT_IDLE_TIMEOUT = 60.0
#: Bytes of one connection a distributor processes per turn: about one AMQP transfer
#: frame at common frame sizes, and what one TCP read usually returns.
DEFAULT_TURN_BUDGET = 64 * 1024
#: Backlog at which a shared connection's transport is paused (four turns' worth).
DEFAULT_BACKLOG_LIMIT = 4 * DEFAULT_TURN_BUDGET


@attrs.frozen
class PoolConfig:
    """The S1.6 settings of one service's pool.

    @ivar monitor_limit: connections per distributor, or -1 for no limit.
    """

    service: str
    model: str = DEDICATED
    min_threads: int = 10
    max_threads: int = 1000
    monitor_limit: int = 512

    def __attrs_post_init__(self):
        prefix = f"mqgate.{self.service}"
        if self.model not in (DEDICATED, SHARED):
            raise ConfigError(f"{prefix}.threadpool_model", self.model,
                              f"one of: {DEDICATED}, {SHARED}")
        if self.min_threads > self.max_threads:
            raise ConfigError(f"{prefix}.min_threads", str(self.min_threads),
                              f"at most mqgate.{self.service}.max_threads "
                              f"({self.max_threads})")
        if self.model == DEDICATED and self.max_threads < WORKERS_PER_CONNECTION:
            raise ConfigError(f"{prefix}.max_threads", str(self.max_threads),
                              "at least 2 in the dedicated model (two workers a "
                              "connection)")
        if self.monitor_limit == 0 or self.monitor_limit < -1:
            raise ConfigError("mqgate.shared.connectionMonitor_limit",
                              str(self.monitor_limit),
                              "-1 (unlimited) or a positive integer")

    @classmethod
    def from_settings(cls, service, settings):
        """Read the pool keys of C{service} (S1.6).

        A minimum left at its default follows a smaller maximum down (C{-D
        mqgate.jms.max_threads=4} alone is a complete request); a minimum the operator
        set above the maximum is a L{ConfigError}.
        """
        prefix = f"mqgate.{service}"
        low, high = settings[f"{prefix}.min_threads"], settings[f"{prefix}.max_threads"]
        if low > high and settings.source_of(f"{prefix}.min_threads") == "default":
            low = high
        return cls(service=service, model=settings[f"{prefix}.threadpool_model"],
                   min_threads=low, max_threads=high,
                   monitor_limit=settings["mqgate.shared.connectionMonitor_limit"])

    @property
    def capacity(self):
        """The most connections the service admits at once; None for no limit."""
        if self.model == DEDICATED:
            return self.max_threads // WORKERS_PER_CONNECTION
        if self.monitor_limit == -1:
            return None
        return self.max_threads * self.monitor_limit


class _Workers:
    """Worker accounting: in use, idle (with the time each became idle), retirement."""

    def __init__(self, clock, minimum, maximum, idle_timeout):
        self._clock = clock
        self.minimum = minimum
        self.maximum = maximum
        self.idle_timeout = idle_timeout
        self.in_use = 0
        self.retired = 0
        now = clock.seconds()
        self._idle = collections.deque([now] * minimum)   # oldest first
        self._call = None

    @property
    def idle(self):
        return len(self._idle)

    def can_take(self, count):
        return self.in_use + count <= self.maximum

    def take(self, count):
        """Lend C{count} workers: the most recently idle first, else new ones."""
        for _ in range(count):
            if self._idle:
                self._idle.pop()
        self.in_use += count

    def give_back(self, count):
        """C{count} workers are free: they idle, and retire later if above the minimum."""
        self.in_use -= count
        self._idle.extend([self._clock.seconds()] * count)
        self._schedule()

    def _schedule(self):
        if (self._call is not None or not self._idle
                or self.in_use + self.idle <= self.minimum):
            return
        due = self._idle[0] + self.idle_timeout
        self._call = self._clock.callLater(max(0.0, due - self._clock.seconds()),
                                           self._retire)

    def _retire(self):
        self._call = None
        limit = self._clock.seconds() - self.idle_timeout
        while (self._idle and self.in_use + self.idle > self.minimum
               and self._idle[0] <= limit):
            self._idle.popleft()
            self.retired += 1
        self._schedule()

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class _Direct:
    """A dedicated connection's lane: its bytes are processed as they arrive."""

    def __init__(self, pool, connection):
        self._pool = pool
        self.connection = connection

    def received(self, data):
        self.connection.process_inbound(data)

    def release(self):
        """The connection is gone: its two workers go back to the pool."""
        if self._pool is not None:
            self._pool._release_dedicated()
            self._pool = None


class _Backlog:
    """What one shared connection has received and its distributor not yet processed."""

    __slots__ = ("connection", "data", "queued", "paused")

    def __init__(self, connection):
        self.connection = connection
        self.data = bytearray()
        self.queued = False    # in the distributor's round-robin queue
        self.paused = False    # its transport is paused for back-pressure


class Distributor:
    """Watches several connections and processes their input in round-robin turns.

    @param clock: an C{IReactorTime}; turns run in C{callLater(0)} calls.
    @param limit: the most connections it watches (-1: no limit).
    @param turn_budget: bytes of one connection processed per turn.
    @param backlog_limit: backlog (bytes) above which a connection is paused; it is
        resumed once its backlog is down to C{turn_budget}.
    """

    def __init__(self, clock, limit=-1, turn_budget=DEFAULT_TURN_BUDGET,
                 backlog_limit=DEFAULT_BACKLOG_LIMIT):
        self._clock = clock
        self.limit = limit
        self.turn_budget = turn_budget
        self.backlog_limit = max(backlog_limit, turn_budget)
        self.turns = 0
        self._backlogs = {}
        self._ready = collections.deque()
        self._call = None

    def __len__(self):
        return len(self._backlogs)

    @property
    def has_room(self):
        return self.limit == -1 or len(self._backlogs) < self.limit

    def backlog(self, connection):
        """Bytes received from C{connection} and not processed yet."""
        return len(self._backlogs[connection].data)

    def add(self, connection, pool=None):
        """Watch C{connection}; returns its lane (C{received}, C{release})."""
        self._backlogs[connection] = _Backlog(connection)
        return _Watched(self, connection, pool)

    def received(self, connection, data):
        """Queue C{data} for the next turns; pause the transport if it piles up."""
        backlog = self._backlogs[connection]
        backlog.data += data
        if not backlog.queued:
            backlog.queued = True
            self._ready.append(backlog)
        if not backlog.paused and len(backlog.data) > self.backlog_limit:
            backlog.paused = True
            connection.pause_inbound()
        if self._call is None:
            self._call = self._clock.callLater(0, self._turn)

    def remove(self, connection):
        """Stop watching C{connection}, first processing what it had sent (it was
        received, so it counts, as it would have in the dedicated model)."""
        backlog = self._backlogs.pop(connection, None)
        if backlog is None:
            return
        data, backlog.data = bytes(backlog.data), bytearray()
        if data:
            connection.process_inbound(data)
        if not self._backlogs:
            self.stop()

    def _turn(self):
        """One round: every connection with a backlog gets at most one budget."""
        self._call = None
        self.turns += 1
        for _ in range(len(self._ready)):
            backlog = self._ready.popleft()
            if self._backlogs.get(backlog.connection) is not backlog:
                continue  # released during this turn
            chunk = bytes(backlog.data[:self.turn_budget])
            del backlog.data[:self.turn_budget]
            backlog.connection.process_inbound(chunk)
            if self._backlogs.get(backlog.connection) is not backlog:
                continue  # its processing ended the connection
            if backlog.data:
                self._ready.append(backlog)
            else:
                backlog.queued = False
            if backlog.paused and len(backlog.data) <= self.turn_budget:
                backlog.paused = False
                backlog.connection.resume_inbound()
        if self._ready and self._call is None:
            self._call = self._clock.callLater(0, self._turn)

    def stop(self):
        """Cancel the pending turn (the broker is stopping or nothing is watched)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        for backlog in self._ready:
            backlog.queued = False
        self._ready.clear()


class _Watched:
    """A shared connection's lane: its bytes go through its distributor."""

    def __init__(self, distributor, connection, pool=None):
        self._distributor = distributor
        self.connection = connection
        self._pool = pool

    def received(self, data):
        self._distributor.received(self.connection, data)

    def release(self):
        """The connection is gone: process its backlog, then leave the distributor."""
        distributor, self._distributor = self._distributor, None
        if distributor is None:
            return
        distributor.remove(self.connection)
        if self._pool is not None:
            self._pool._left(distributor)


class ServicePool:
    """The pool of one connection service (S1.6), shared by all its protocols.

    @param config: a L{PoolConfig}.
    @param clock: an C{IReactorTime}.
    """

    def __init__(self, config, clock, *, idle_timeout=DEFAULT_IDLE_TIMEOUT,
                 turn_budget=DEFAULT_TURN_BUDGET, backlog_limit=DEFAULT_BACKLOG_LIMIT):
        self.config = config
        self._clock = clock
        self._workers = _Workers(clock, config.min_threads, config.max_threads,
                                 idle_timeout)
        self._turn_budget = turn_budget
        self._backlog_limit = backlog_limit
        self.distributors = []
        self.connections = 0
        self.refused = 0

    @classmethod
    def from_settings(cls, service, settings, clock, **kwargs):
        """The pool of C{service} as the settings describe it."""
        return cls(PoolConfig.from_settings(service, settings), clock, **kwargs)

    def admit(self, connection):
        """Take workers for a new connection.

        @return: its lane (C{received(data)}, C{release()}), or None when the pool
            is full: the caller refuses the connection (L{refusal_description}).
        """
        if self.config.model == DEDICATED:
            lane = self._admit_dedicated(connection)
        else:
            lane = self._admit_shared(connection)
        if lane is None:
            self.refused += 1
        else:
            self.connections += 1
        return lane

    def _admit_dedicated(self, connection):
        if not self._workers.can_take(WORKERS_PER_CONNECTION):
            return None
        self._workers.take(WORKERS_PER_CONNECTION)
        return _Direct(self, connection)

    def _admit_shared(self, connection):
        distributor = next((d for d in self.distributors if d.has_room), None)
        if distributor is None:
            if not self._workers.can_take(1):
                return None
            self._workers.take(1)
            distributor = Distributor(self._clock, self.config.monitor_limit,
                                      self._turn_budget, self._backlog_limit)
            self.distributors.append(distributor)
        return distributor.add(connection, self)

    def _release_dedicated(self):
        self.connections -= 1
        self._workers.give_back(WORKERS_PER_CONNECTION)

    def _left(self, distributor):
        self.connections -= 1
        if not len(distributor) and distributor in self.distributors:
            self.distributors.remove(distributor)
            self._workers.give_back(1)

    def refusal_description(self):
        """What a refused client is told: which limit, which key, and to retry."""
        config = self.config
        keys = f"mqgate.{config.service}.max_threads={config.max_threads}"
        if config.model == SHARED:
            keys += f", mqgate.shared.connectionMonitor_limit={config.monitor_limit}"
        return (f"service {config.service} is at its limit of {config.capacity} "
                f"connections ({keys}); try again later")

    def stats(self):
        """The pool's figures for the admin layer and metrics (S1.6).

        Keys: C{service}, C{model}, C{min_threads}, C{max_threads}, C{in_use} and
        C{idle} (workers), C{retired} (idle workers retired so far), C{connections},
        C{capacity} (None: unlimited), C{distributors}, C{refused} (connections
        refused so far).
        """
        config, workers = self.config, self._workers
        return {
            "service": config.service, "model": config.model,
            "min_threads": config.min_threads, "max_threads": config.max_threads,
            "in_use": workers.in_use, "idle": workers.idle, "retired": workers.retired,
            "connections": self.connections, "capacity": config.capacity,
            "distributors": len(self.distributors), "refused": self.refused,
        }

    def stop(self):
        """Cancel every timer (the broker is stopping)."""
        self._workers.stop()
        for distributor in self.distributors:
            distributor.stop()


class LoginSlots:
    """Room for the connections of one service that have not logged in yet (S4.2).

    Every socket takes a slot when it connects (the sniffer's, handed on to the
    protocol it hands the connection to) and gives it back once it is logged in or
    gone. Past C{limit} a new socket is refused at once: a socket that has not logged in
    costs memory and a descriptor, and idle sockets must not crowd out clients that
    would log in. Each service has its own slots, so sockets on one service never take
    another's (the admin service keeps its room whatever happens on jms).

    @param service: the service's name, for the refusal.
    @param limit: slots at most (C{mqgate.authentication.max_unauthenticated}).
    @param clock: an C{IReactorTime}, for the budget of refusal log lines.
    """

    log = Logger()

    def __init__(self, service, limit, clock):
        if limit < 1:
            raise ConfigError("mqgate.authentication.max_unauthenticated", str(limit),
                              "at least 1")
        self.service = service
        self.limit = limit
        self.held = 0
        self.heard = 0     # slots of sockets that have sent something (logging in)
        self.refused = 0
        self._log_budget = LogBudget(clock, lines=5, interval=60.0)
        self._room_watchers = []

    @property
    def free(self):
        """Slots a new socket could take now."""
        return max(0, self.limit - self.held)

    def when_room(self, callback):
        """Call C{callback()} each time a slot frees while all were taken (an
        L{AcceptPacer} resumes accepting then)."""
        self._room_watchers.append(callback)

    def _given_back(self):
        self.held -= 1
        if self.held == self.limit - 1:
            for callback in self._room_watchers:
                callback()

    def take(self):
        """A slot for a new socket (C{release()} it), or None: refuse the socket now."""
        if self.held >= self.limit:
            self.refused += 1
            self._log_refusal()
            return None
        self.held += 1
        return _LoginSlot(self)

    def refusal_description(self):
        """What a refused client is told (in its protocol's words where known)."""
        return (f"service {self.service} has {self.held} connections that have not "
                f"logged in yet, its limit; try again later")

    def _log_refusal(self):
        held_back = self._log_budget.take()
        if held_back is not None:
            self.log.warn(
                "service {service}: new socket closed at once, {held} connections have "
                "not logged in yet (mqgate.authentication.max_unauthenticated={limit})"
                "{more}", service=self.service, held=self.held, limit=self.limit,
                more=f"; {held_back} more refusals not logged" if held_back else "")


class _LoginSlot:
    """One socket's place among the unauthenticated; released once, whatever calls."""

    __slots__ = ("_slots", "_heard")

    def __init__(self, slots):
        self._slots = slots
        self._heard = False

    def heard(self):
        """The socket has sent something: it is logging in, not just holding a slot."""
        if not self._heard and self._slots is not None:
            self._heard = True
            self._slots.heard += 1

    def release(self):
        slots, self._slots = self._slots, None
        if slots is not None:
            if self._heard:
                slots.heard -= 1
            slots._given_back()


#: Seconds a service whose login slots are all taken by silent sockets stops accepting,
#: waiting for one to free, before it accepts again and refuses at once what finds no
#: slot: sockets that hold slots without a word may do so until the login deadline, and
#: the clients behind them are told soon.
ACCEPT_GRACE = 0.5
#: The same when some of the slots' sockets are logging in: each of those frees its slot
#: once its password is checked (a tenth of a second or so, or much less from the
#: authentication cache), and during a connection storm the first checks hold the slots
#: of everyone waiting for them. Past this, the checks are stuck: refuse.
ACCEPT_PATIENCE = 5.0
#: Sockets a service accepts per reactor turn at most. Each costs the broker a
#: connection's set-up now and its login a moment later (about a millisecond together):
#: Twisted's own batch grows without bound under load, and a turn that sets up hundreds
#: of connections keeps every other client waiting for its length. 32 keep a turn within
#: a few tens of milliseconds and still take in thousands of sockets a second.
ACCEPT_BATCH = 32


class AcceptPacer:
    """Accept a service's sockets no faster than its login slots free up (S4.2).

    Twisted accepts up to a hundred sockets and more in one go, growing with the load;
    in a connection storm the service would take thousands at once, all of them
    needing a slot before they can log in, and refuse most of them at once although
    the logins ahead of them would be done a moment later. The pacer instead:

    - bounds each accept round by L{ACCEPT_BATCH} and by the slots free (at least one
      socket, so that a full service still answers);
    - stops accepting when no slot is free: new sockets wait in the kernel's listen
      queue (C{mqgate.SERVICE.backlog}) instead of being refused, and accepting
      resumes as soon as a slot frees;
    - when no slot has freed for L{ACCEPT_GRACE} seconds and the sockets holding them
      have all been silent (or for L{ACCEPT_PATIENCE} seconds while some of them are
      logging in), the slots are not freeing: it accepts again, and each socket that
      finds no slot is refused at once with its protocol's error, as before pacing.

    @param slots: the service's L{LoginSlots}.
    @param clock: an C{IReactorTime}.
    """

    def __init__(self, slots, clock, grace=ACCEPT_GRACE, patience=ACCEPT_PATIENCE,
                 batch=ACCEPT_BATCH):
        self._slots = slots
        self._clock = clock
        self.batch = batch
        self.grace = grace
        self.patience = patience
        self._port = None
        self._read = None
        self._waiting = None    # the grace timer while accepting is stopped
        self._refusing = False  # the grace ran out: accept, and refuse, until a slot frees
        self._stopped_at = 0.0
        self.pauses = 0
        slots.when_room(self._room)

    def attach(self, port):
        """Pace C{port}, a listening C{twisted.internet.tcp.Port}; a port of another
        kind (no accept rounds to bound) is left alone."""
        if not all(hasattr(port, name) for name in
                   ("doRead", "numberAccepts", "stopReading", "startReading")):
            return
        self._port, self._read = port, port.doRead
        port.doRead = self._accept_round   # the reactor looks it up on the instance

    def detach(self):
        """Stop pacing (the port is closing)."""
        self._cancel()
        if self._port is not None:
            self._port.__dict__.pop("doRead", None)
            self._port = None

    def _accept_round(self):
        free = self._slots.free
        if free or self._refusing:
            self._port.numberAccepts = max(1, min(self._port.numberAccepts, self.batch,
                                                  free or self.batch))
            self._read()
            return
        # Full: let the kernel hold the next sockets while the slots' logins finish.
        self.pauses += 1
        self._port.stopReading()
        self._stopped_at = self._clock.seconds()
        self._waiting = self._clock.callLater(self.grace, self._grace_over)

    def _grace_over(self):
        self._waiting = None
        waited = self._clock.seconds() - self._stopped_at
        if self._slots.heard and waited < self.patience:
            # Some of them are logging in: give their checks the time they take.
            self._waiting = self._clock.callLater(self.patience - waited,
                                                  self._grace_over)
            return
        self._refusing = True
        if self._port is not None:
            self._port.startReading()

    def _room(self):
        self._refusing = False
        if self._waiting is not None:
            self._cancel()
            if self._port is not None:
                self._port.startReading()

    def _cancel(self):
        if self._waiting is not None and self._waiting.active():
            self._waiting.cancel()
        self._waiting = None


# Events a refused connection answers without its glue: AMQP can only close once SASL
# is over and the AMQP header exchanged (Part 2 section 2.4.1, Part 5 section 5.3), so
# the login is answered at once, unchecked; STOMP is refused before its CONNECT.
_ANSWERED_WHILE_REFUSED = (AuthenticationRequested,)


class RefusalGate:
    """What a refused connection's engine events go to instead of its glue (S1.6).

    A login is answered by C{wave_through(event)} without a password check (the
    connection is closed at the next step, so a slow hash would be wasted on it); at
    the first other event (the AMQP open, the STOMP CONNECT) C{goodbye()} is called
    once, and from then on nothing reaches the glue: a refused peer never gets a
    session, a link or a message in.

    The connection's adapter holds it and hands it every event while refused; the
    glue never sees one, so it never starts a login and never re-enters its own
    C{handle}. C{wave_through} feeds what the login's answer releases (the frames a
    client pipelined behind it) back into the gate.
    """

    def __init__(self, goodbye, wave_through):
        self._goodbye = goodbye
        self._wave_through = wave_through
        self.closed = False

    def __call__(self, events):
        for event in events:
            if self.closed:
                return
            if isinstance(event, _ANSWERED_WHILE_REFUSED):
                self._wave_through(event)
            else:
                self.closed = True
                self._goodbye()
