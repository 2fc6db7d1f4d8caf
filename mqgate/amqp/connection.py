"""
The AMQP 1.0 connection engine: bytes in, events out, bytes out (docs/design.md).

Theory of operation
-------------------
A L{Connection} is fed what the transport received (C{receive_data}) and returns the
events that input caused, in order. Whatever the engine must say is buffered; the adapter
collects it with C{data_to_send()}. Time enters only through C{tick(now)}, which returns
the next moment the engine wants to be ticked (idle timeout, heart-beats: section 2.4.5).

The same engine serves both ends (the broker and the client library): C{server=True}
waits for the peer's protocol header, C{server=False} starts with its own.

Phases, as in Part 2 section 2.2 and Part 5 section 5.3:

    HEADER      waiting for a protocol header
    SASL        SASL frames (server: mechanisms sent, waiting for init; auth pending)
    AMQP        after the AMQP header exchange: open/begin/attach/... frames
    CLOSED      both closes exchanged, or the stream was given up

The connection states of section 2.4.6 are kept in C{state} with the spec's names, and
only the engine moves them: every change is a step of the table C{_TRANSITIONS} (state,
what was sent or received -> next state), and each state has its own table of the
performatives it accepts (C{_ACCEPTS}), so a frame the state does not expect is a named
error (a frame after the close, for one, is a framing error). C{state} and C{finished}
are read-only to callers; they end a connection with C{close()} or C{abort()}.
Incoming bytes that arrive while authentication is pending are held, not parsed, so the
outcome of an asynchronous credential check decides what happens to them.

Limits (docs/design.md), each passed in by the adapter from a setting whose name the error
descriptions quote (C{setting_names}):

- C{max_preauth_bytes}: everything a server connection receives before its login
  succeeds (protocol header, SASL frames, bytes held while the password is checked).
  Legitimate clients send a few hundred bytes; past the budget the connection is
  refused (a SASL outcome, or an open and a close when there is no SASL) and dropped.
- C{channel_max} and C{handle_max}: sessions per connection and links per session,
  announced in our open and begin and enforced on the peer (sections 2.7.1, 2.7.2).
- C{max_partial_bytes}: bytes held in multi-frame deliveries not yet complete, all the
  connection's links together (each link's own limit is per message; a peer with many
  links could otherwise hold that much on each).
- C{heartbeat_floor}: the shortest interval between our empty frames, however small
  an idle-time-out the peer announces (1 ms would otherwise mean 4,000 frames a second).
- C{frame_budget}: how much work one C{receive_data} call may do, in frames (an attach
  or a begin counts for several: each makes the layer above create a consumer, a
  producer, a session). Frames beyond it wait, parsed, in C{_backlog}; C{backlogged}
  tells the adapter to stop reading and call again (with C{b""}) in the next turn of
  its event loop, so one peer's burst of costly frames never holds it for long.

Every buffer grows linearly: input is appended to one buffer and cut once, never
re-joined on each read.

Errors: anything the peer does wrong raises a L{RemoteProtocolError} inside the engine;
C{receive_data} catches it, writes the close the spec asks for (an open first, if we had
not sent one, so the peer can read the close), and marks the connection finished. The
error is kept in C{error} for the adapter to log.
"""

import collections
import enum

from mqgate.amqp import codec
from mqgate.amqp import conditions as c
from mqgate.amqp.conditions import AmqpLocalError, AmqpRemoteError
from mqgate.amqp.events import (
    AuthenticationRequested, ConnectionClosed, ConnectionOpened, SaslCompleted, SessionBegun,
)
from mqgate.amqp.frames import (
    AMQP_FRAME, AMQP_HEADER, EMPTY_FRAME, MIN_MAX_FRAME_SIZE, SASL_FRAME, SASL_HEADER,
    FrameReader, FramingError, frame_header,
)
from mqgate.amqp.handles import NumberPool
from mqgate.amqp.performatives import (
    ATTACH, BEGIN, CLOSE, DETACH, DISPOSITION, END, FLOW, OPEN, TRANSFER, Attach, Begin,
    Close, Detach, Disposition, End, Error, Flow, Open, SaslInit, SaslMechanisms,
    SaslOutcome, Transfer, from_described,
)
from mqgate.amqp.session import HANDLE_MAX, Session, SessionState
from mqgate.amqp.types import Described, Symbol
from mqgate.errors import RemoteProtocolError

__all__ = ["Connection", "ConnectionState", "IllegalTransition", "SASL_AUTH",
           "SASL_SYS_TEMP", "next_state"]

# SASL frames carry a mechanism name and a few credentials; nothing legitimate comes near
# this, and a limit keeps an unauthenticated peer from making us buffer much.
_MAX_SASL_FRAME = 65536

# SASL outcome codes, Part 5 section 5.3.3.6.
SASL_OK, SASL_AUTH, SASL_SYS, SASL_SYS_PERM, SASL_SYS_TEMP = 0, 1, 2, 3, 4

#: Bytes a server connection may send before it is logged in: a SASL PLAIN exchange is
#: a few hundred bytes; a client pipelining its open, begin and attaches behind its
#: credentials stays well below this.
MAX_PREAUTH_BYTES = 16384
#: Shortest interval between our heart-beats, seconds.
HEARTBEAT_FLOOR = 1.0

# What a frame costs against the frame budget, by performative code: an attach or a
# begin makes the layer above build a consumer, a producer or a session (hundreds of
# microseconds, where a transfer or a flow costs tens).
_FRAME_COST = {0x11: 4, 0x12: 4}


class ConnectionState(enum.Enum):
    START = "START"
    HDR_RCVD = "HDR_RCVD"
    HDR_SENT = "HDR_SENT"
    HDR_EXCH = "HDR_EXCH"
    OPEN_RCVD = "OPEN_RCVD"
    OPEN_SENT = "OPEN_SENT"
    OPENED = "OPENED"
    CLOSE_RCVD = "CLOSE_RCVD"
    CLOSE_SENT = "CLOSE_SENT"
    END = "END"


_HEADER, _SASL, _AMQP, _CLOSED = "HEADER", "SASL", "AMQP", "CLOSED"

# What moves the connection state (section 2.4.6): a header, an open or a close, sent
# (S) or received (R).
S_HDR, R_HDR, S_OPEN, R_OPEN, S_CLOSE, R_CLOSE = (
    "sent header", "received header", "sent open", "received open", "sent close",
    "received close")


class IllegalTransition(AmqpLocalError):
    """The engine was asked to move its state in a way section 2.4.6 does not allow."""


# Performatives by descriptor code, decoded with their own field tables.
_PERFORMATIVES = {
    OPEN: Open, BEGIN: Begin, ATTACH: Attach, FLOW: Flow, TRANSFER: Transfer,
    DISPOSITION: Disposition, DETACH: Detach, END: End, CLOSE: Close,
}


class Connection:
    """An AMQP 1.0 connection endpoint.

    @param server: True for the accepting end (the broker).
    @param container_id: our container id (sent in open).
    @param max_frame_size: the largest frame we accept (advertised in open).
    @param channel_max: the highest channel number we accept.
    @param idle_timeout: seconds of silence after which we give up on the peer
        (advertised as idle-time-out); None or 0 disables.
    @param sasl_mechanisms: server: mechanisms offered (e.g. C{("PLAIN", "ANONYMOUS")}),
        or None to refuse a SASL header. Client: ignored.
    @param allow_no_sasl: server: accept a plain AMQP header; the peer is then
        authenticated as anonymous (an L{AuthenticationRequested} with mechanism
        C{"NONE"} is reported and must be answered). Without it a plain header is
        answered with the SASL header and the connection dropped: that is how a server
        requiring SASL says so (Part 2 section 2.2, Part 5 section 5.3.1).
    @param sasl_refusals: server: mechanism -> the description of the C{auth} outcome
        a peer trying that mechanism gets while it is not offered (say which setting
        allows it, or what to use instead).
    @param external_identity: server: a callable with no arguments returning the user
        name of the peer's verified TLS client certificate, or None. It is asked when
        the SASL header arrives (the TLS handshake is over by then); with a name,
        EXTERNAL is offered first and a peer choosing it is reported as an
        L{AuthenticationRequested} with mechanism C{"EXTERNAL"} and that name as
        C{username} (RFC 4422 appendix A: an authorization identity the peer sends must
        be that name).
    @param credentials: client: C{(username, password)} for PLAIN, C{"ANONYMOUS"} for
        ANONYMOUS, C{"EXTERNAL"} for EXTERNAL, or None to skip SASL.
    @param handle_max: the handle-max our sessions announce: at most this + 1 links of
        the peer per session.
    @param max_preauth_bytes: server: bytes accepted before the login succeeds.
    @param max_partial_bytes: bytes of incomplete incoming deliveries held at once, or
        None for no limit.
    @param ingress_budget: server: an object shared by every connection, with
        C{take(size) -> bool}, C{give(size)} and C{refusal(size) -> str}, from which
        the bytes of incomplete deliveries are taken too (the broker's total), or None.
    @param heartbeat_floor: seconds; we send empty frames no more often than this.
    @param setting_names: limit parameter name -> the setting an operator changes,
        quoted in the description of the error a peer gets when it passes the limit.
    @param frame_budget: frames one C{receive_data} call processes at most (costly ones
        count more), or None for all of them.
    """

    def __init__(self, *, server=True, container_id="mqgate", max_frame_size=1 << 20,
                 channel_max=255, idle_timeout=60.0, sasl_mechanisms=("PLAIN", "ANONYMOUS"),
                 allow_no_sasl=True, credentials=None, hostname=None,
                 sasl_refusals=None, external_identity=None,
                 offered_capabilities=None, properties=None, handle_max=HANDLE_MAX,
                 max_preauth_bytes=MAX_PREAUTH_BYTES, max_partial_bytes=None,
                 ingress_budget=None,
                 heartbeat_floor=HEARTBEAT_FLOOR, setting_names=None, frame_budget=None):
        self.server = server
        self.container_id = container_id
        self.max_frame_size = max(max_frame_size, MIN_MAX_FRAME_SIZE)
        self.channel_max = channel_max
        self.idle_timeout = idle_timeout or None
        self.sasl_mechanisms = tuple(sasl_mechanisms or ())
        self.allow_no_sasl = allow_no_sasl
        self.sasl_refusals = dict(sasl_refusals or {})
        self.external_identity = external_identity
        self._offered = self.sasl_mechanisms   # this peer's list, fixed at its header
        self._certificate_user = None          # the EXTERNAL identity, when offered
        self.credentials = credentials
        self.hostname = hostname
        self.offered_capabilities = offered_capabilities
        self.properties = properties
        self.handle_max = handle_max
        self.max_preauth_bytes = max_preauth_bytes
        self.max_partial_bytes = max_partial_bytes
        self.heartbeat_floor = heartbeat_floor
        self.setting_names = dict(setting_names or {})
        self.frame_budget = frame_budget
        self._backlog = collections.deque()   # frames read, not yet processed
        self._state = ConnectionState.START
        self._accepts = _ACCEPTS[ConnectionState.START]   # performative -> handler
        self.remote_open = None
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE
        self.remote_idle_timeout = None
        self.authenticated = None          # the SASL mechanism that succeeded, or "NONE"
        self.error = None                  # the protocol error that ended the connection
        self._finished = False             # nothing more to read or write: drop the transport
        self._phase = _HEADER
        self._reader = FrameReader(self.max_frame_size)
        self._header_buf = b""
        self._sasl_buf = bytearray()       # a SASL frame being received
        self._held = None                  # bytes received while authentication is pending
        # Server: bytes received so far before the login succeeded (None: logged in).
        self._preauth = 0 if server else None
        self._partial_bytes = 0            # held in incomplete incoming deliveries
        # Shared by every connection (mqgate.glue.ingress.IngressBudget), or None: the
        # partial bytes are taken from it too, so the broker's total is bounded.
        self.ingress_budget = ingress_budget
        self._out = []
        self._sessions = {}                # local channel -> Session
        self._remote_sessions = {}         # remote channel -> Session
        self._channels = NumberPool(0xFFFF)   # our channels, up to the peer's channel-max
        self._disposing = []               # sessions that may have dispositions to write
        self._rx = self._tx = False
        self._last_rx = self._last_tx = None
        self._expect_sasl_header = False
        self._open_sent = False
        if not server:
            self._start_client()

    # -- driver API --------------------------------------------------------------------------

    def receive_data(self, data):
        """Feed received bytes; return the events they caused, in order.

        With a C{frame_budget}, frames beyond it wait (L{backlogged}): call again, with
        C{b""} or more bytes, to go on."""
        events = []
        if self._finished or self._phase is _CLOSED:
            return events
        over = False
        if self._preauth is not None:
            # Read what fits in the budget as usual (the SASL exchange gets to the point
            # where a refusal can be said), then refuse.
            allowed = self.max_preauth_bytes - self._preauth
            self._preauth += len(data)
            if len(data) > allowed:
                data, over = data[:max(allowed, 0)], True
        if self._held is not None:
            self._held += data
        else:
            self._rx = True
            try:
                self._consume(data, events)
            except RemoteProtocolError as error:
                self._fail(error)
        if over and not self._finished and self._preauth is not None:
            self._over_preauth_budget()
        return events

    def data_to_send(self):
        """Everything the engine has to say since the last call, as bytes (b"" if nothing)."""
        if self._disposing:
            disposing, self._disposing = self._disposing, []
            for session in disposing:
                if session._dispositions:
                    session._flush_dispositions()
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out = []
        return out

    def presume_alive(self):
        """Count the peer as heard from at the next L{tick}, as if bytes had come: the
        caller is the one not reading it (an administrator paused its service), so
        the silence is ours and must not end the connection."""
        self._rx = True

    def tick(self, now):
        """Run the timers; return the time of the next tick, or None if none is needed.

        We close the connection when the peer has been silent longer than our
        idle timeout, and send an empty frame when we have been silent for a quarter of
        the peer's (section 2.4.5 asks for at most half; a quarter leaves room for the
        granularity of these ticks), but never more often than C{heartbeat_floor}: a
        peer asking for a frame every millisecond would have us spend the reactor on
        its heart-beats. Any peer announcing twice the floor or more is served within
        half its timeout.
        """
        if self._last_rx is None or self._rx:
            self._last_rx = now
            self._rx = False
        if self._last_tx is None or self._tx:
            self._last_tx = now
            self._tx = False
        if self._finished or self._phase is _CLOSED:
            return None
        deadlines = []
        if self.idle_timeout and self._phase is _AMQP:
            if now - self._last_rx >= self.idle_timeout:
                self.error = AmqpRemoteError(
                    f"local-idle-timeout expired: no frame for {self.idle_timeout:g} s",
                    c.RESOURCE_LIMIT_EXCEEDED)
                self.abort(self.error.condition, self.error.description)
                return None
            # Traffic is noticed only when we tick, so tick every quarter timeout: a
            # silent peer is then closed at most a quarter late, never early.
            deadlines.append(min(self._last_rx + self.idle_timeout,
                                 now + self.idle_timeout / 4))
        if self.remote_idle_timeout and self._state in (ConnectionState.OPENED,
                                                        ConnectionState.OPEN_SENT,
                                                        ConnectionState.CLOSE_RCVD):
            interval = max(self.remote_idle_timeout / 4, self.heartbeat_floor)
            if now - self._last_tx >= interval:
                self._out.append(EMPTY_FRAME)
                self._last_tx = now
            deadlines.append(self._last_tx + interval)
        return min(deadlines) if deadlines else None

    @property
    def backlogged(self):
        """Whether frames already received wait for another C{receive_data} call."""
        return bool(self._backlog)

    def ping(self):
        """Write an empty frame (section 2.4.5): harmless to the peer, a probe for us."""
        if self._state in (ConnectionState.OPENED, ConnectionState.OPEN_SENT):
            self._write(EMPTY_FRAME)

    @property
    def ready(self):
        """True once the peer's open arrived: its idle timeout is known (section 2.4.5)."""
        return self.remote_open is not None

    @property
    def state(self):
        """The L{ConnectionState} (section 2.4.6); only the engine changes it."""
        return self._state

    @property
    def finished(self):
        """True once nothing more will be read or written: the adapter writes what
        C{data_to_send()} returns and drops the transport. Only the engine sets it (see
        C{abort})."""
        return self._finished

    def connection_lost(self):
        """The transport is gone: nothing more will be read or written."""
        self._drop_input()
        self._finish()

    def _move(self, event):
        """Take the step C{event} from the current state, as C{_TRANSITIONS} allows.

        @raise IllegalTransition: the table has no such step from this state.
        """
        state = self._state = next_state(self._state, event)
        self._accepts = _ACCEPTS[state]

    def _finish(self):
        """Nothing more to read or write: the adapter drops the transport."""
        self._finished = True
        self._phase = _CLOSED

    # -- local actions -----------------------------------------------------------------------

    def sasl_outcome(self, ok, description=None):
        """Server: answer an L{AuthenticationRequested}; returns events from held input."""
        events = []
        if self._finished:
            return events   # refused meanwhile (its budget before login ran out)
        held, self._held = self._held, None
        if ok:
            self._preauth = None
        if self.authenticated == "NONE":
            self._send_amqp_header()
            if not ok:
                self._refuse_open(c.UNAUTHORIZED_ACCESS,
                                  description or "anonymous access is not allowed")
                return events
        else:
            # A refusal says why in the outcome's additional data (section 5.3.3.6).
            self._write_frame(0, SaslOutcome(
                code=SASL_OK if ok else SASL_AUTH,
                additional_data=None if ok or not description else description.encode()),
                frame_type=SASL_FRAME)
            if not ok:
                self.authenticated = None
                self._finish()
                return events
            self._phase = _HEADER   # the state is still START: SASL is beneath it
        if held:
            self._rx = True
            try:
                self._consume(bytes(held), events)
            except RemoteProtocolError as error:
                self._fail(error)
        return events

    @property
    def authenticating(self):
        """Server: whether the peer's credentials (or its anonymous login) are being
        checked, the outcome not given yet."""
        return self._held is not None and not self._finished

    def end_login(self, code, description, condition):
        """Server: give up on a peer whose login is not finished, telling it why.

        In the SASL exchange (mechanisms sent and no init yet, or the credentials still
        being checked) the peer hears a SASL outcome of C{code} (C{SASL_AUTH}: it did
        not authenticate; C{SASL_SYS_TEMP}: the broker could not, try again later) with
        C{description} as its additional data (Part 5 section 5.3.3.6). A peer that
        came without SASL, its anonymous login pending, gets our header, an open and a
        close with C{condition}. Either way the connection is finished; returns whether
        anything could be said (before any header, nothing can).
        """
        if self._finished or self._phase is _CLOSED:
            return False
        self.error = AmqpRemoteError(description, condition)
        self._drop_input()
        self._sasl_buf = bytearray()
        said = True
        if self._phase is _SASL:
            self._write_frame(0, SaslOutcome(code=code, additional_data=description.encode()),
                              frame_type=SASL_FRAME)
            self.authenticated = None
        elif self.authenticated == "NONE" and self._phase is _HEADER:
            self._send_amqp_header()
            self._refuse_open(condition, description)
            return True
        elif self._phase is _AMQP:
            self.close(condition, description)
        else:
            said = False
        self._finish()
        return said

    def open(self):
        """Send our open."""
        if self._state not in (ConnectionState.HDR_EXCH, ConnectionState.OPEN_RCVD,
                               ConnectionState.HDR_SENT):
            raise AmqpLocalError(f"cannot open a connection in state {self._state.name}")
        self._send_open()

    def _send_open(self):
        self._move(S_OPEN)
        self._open_sent = True
        idle_ms = int(self.idle_timeout * 1000) if self.idle_timeout else None
        self._write_frame(0, Open(
            container_id=self.container_id, hostname=self.hostname,
            max_frame_size=self.max_frame_size, channel_max=self.channel_max,
            idle_time_out=idle_ms, offered_capabilities=self.offered_capabilities,
            properties=self.properties))

    def close(self, condition=None, description=None):
        """Close the connection, with an error condition when it is our complaint."""
        if self._state in (ConnectionState.CLOSE_SENT, ConnectionState.END):
            return
        if self._phase is not _AMQP:
            self._finish()
            return
        if not self._open_sent:
            self._send_open()  # a close must follow an open (section 2.4.1)
        error = Error(condition, description) if condition else None
        self._write_frame(0, Close(error=error))
        self._move(S_CLOSE)
        if self._state is ConnectionState.END:
            self._finish()

    def abort(self, condition=None, description=None):
        """Close the connection (with C{condition} and C{description}, when it is our
        complaint) and be finished with it: the peer's answer is not awaited, and the
        adapter drops the transport once it has written the close."""
        self.close(condition, description)
        self._finish()

    def begin_session(self):
        """Start a session of ours; returns it (its begin is sent)."""
        if self._phase is not _AMQP and not self._open_sent:
            raise AmqpLocalError("a session can only begin once the connection is open")
        channel = self._channels.take()
        if channel is None:
            raise AmqpLocalError(f"no free channel: the peer's channel-max allows "
                                 f"{self._channels.limit + 1} sessions")
        session = Session(self, channel)
        self._sessions[session.channel] = session
        session.begin()
        return session

    @property
    def sessions(self):
        return list(self._sessions.values())

    # -- input -------------------------------------------------------------------------------

    def _consume(self, data, events):
        if self._backlog:
            # Frames of an earlier read still wait: these bytes come after them.
            if data:
                self._backlog.extend(self._reader.feed(data))
            self._process_frames(events)
            return
        while data and not self._finished:
            if self._held is not None:
                self._held += data
                return
            if self._phase is _HEADER:
                data = self._read_header(data)
                if data is None:
                    return
                header, data = data
                if self.server:
                    self._server_header(header, events)
                else:
                    self._client_header(header, events)
            elif self._phase is _SASL:
                data = self._read_sasl_frame(data, events)
            elif self._phase is _AMQP:
                self._backlog.extend(self._reader.feed(data))
                self._process_frames(events)
                return
            else:
                return

    def _process_frames(self, events):
        """Process waiting frames, in order, until the frame budget is spent."""
        backlog = self._backlog
        budget = self.frame_budget
        while backlog and not self._finished:
            ftype, channel, body = backlog.popleft()
            self._on_amqp_frame(ftype, channel, body, events)
            if budget is not None:
                budget -= _FRAME_COST.get(body[2], 1) if len(body) > 2 else 1
                if budget <= 0:
                    break
        if self._finished:
            backlog.clear()

    def _read_header(self, data):
        """Collect 8 header bytes; return C{(header, rest)} or None when more are needed."""
        buf = self._header_buf + data
        if buf[:4] != b"AMQP"[:len(buf[:4])]:
            self._bad_header(buf)
        if len(buf) < 8:
            self._header_buf = buf
            return None
        self._header_buf = b""
        return bytes(buf[:8]), buf[8:]

    def _read_sasl_frame(self, data, events):
        """SASL frames are read one at a time: what follows the last one is a new header.

        The frame is collected in one buffer (appending is linear however the bytes are
        cut up) and decoded once complete."""
        buf = self._sasl_buf
        buf += data
        if len(buf) < 8:
            return b""
        size = int.from_bytes(buf[:4], "big")
        if not 8 <= size <= _MAX_SASL_FRAME:
            raise _Unrecoverable(f"SASL frame of {size} bytes is malformed or too large")
        if len(buf) < size:
            return b""
        frame, rest = bytes(buf[:size]), bytes(buf[size:])
        buf.clear()
        doff = frame[4] * 4
        if doff < 8 or doff > size:
            raise _Unrecoverable("malformed SASL frame header")
        self._on_sasl_frame(frame[5], memoryview(frame)[doff:size], events)
        return rest

    def _bad_header(self, header):
        # Section 2.2: answer with the header we do support, then close the socket.
        self._write(SASL_HEADER if self.sasl_mechanisms else AMQP_HEADER)
        raise _Unrecoverable(f"not an AMQP 1.0 protocol header: {bytes(header[:8])!r}")

    def _server_header(self, header, events):
        if header == SASL_HEADER and self.authenticated is None and self._offer():
            self._write(SASL_HEADER)
            self._write_frame(0, SaslMechanisms(
                sasl_server_mechanisms=tuple(Symbol(m) for m in self._offered)),
                frame_type=SASL_FRAME)
            self._phase = _SASL
        elif header == AMQP_HEADER and self.authenticated is not None:
            self._move(R_HDR)
            self._send_amqp_header()
        elif header == AMQP_HEADER and self.allow_no_sasl:
            self.authenticated = "NONE"
            self._move(R_HDR)
            self._held = bytearray()
            events.append(AuthenticationRequested("NONE", None, None, None))
        else:
            self._bad_header(header)

    def _offer(self):
        """Fix the mechanisms offered to this peer; return whether there are any.

        EXTERNAL comes first when the peer's certificate names a user: a client that
        went to the trouble of presenting one means to use it."""
        user = self.external_identity() if self.external_identity is not None else None
        self._certificate_user = user or None
        mechanisms = tuple(m for m in self.sasl_mechanisms if m != "EXTERNAL")
        self._offered = (("EXTERNAL",) if user else ()) + mechanisms
        return bool(self._offered)

    def _refuse_mechanism(self, description):
        """Answer a SASL init with outcome C{auth} and C{description}, and give up."""
        self._write_frame(0, SaslOutcome(code=SASL_AUTH,
                                         additional_data=description.encode()),
                          frame_type=SASL_FRAME)
        raise _Unrecoverable(description)

    def _on_sasl_frame(self, ftype, body, events):
        if ftype != SASL_FRAME:
            raise _Unrecoverable("AMQP frame received before SASL completed")
        performative = self._decode(body)
        if self.server:
            if not isinstance(performative, SaslInit) or self._held is not None:
                raise _Unrecoverable(f"unexpected SASL frame {type(performative).__name__}")
            self._on_sasl_init(performative, events)
        elif isinstance(performative, SaslMechanisms):
            self._client_sasl_init(performative)
        elif isinstance(performative, SaslOutcome):
            ok = performative.code == SASL_OK
            events.append(SaslCompleted(ok, performative.code))
            if not ok:
                self._finish()
                return
            self._phase = _HEADER
            self._write(AMQP_HEADER)
            self._move(S_HDR)
            self.open()
        else:
            raise _Unrecoverable(f"unexpected SASL frame {type(performative).__name__}")

    def _on_sasl_init(self, init, events):
        mechanism = str(init.mechanism)
        if mechanism not in self._offered:
            self._refuse_mechanism(self.sasl_refusals.get(mechanism) or (
                f"SASL mechanism {mechanism[:40]!r} is not offered; offered: "
                f"{', '.join(self._offered)}"))
        username = password = None
        if mechanism == "EXTERNAL":
            username = self._certificate_user
            authzid = bytes(init.initial_response or b"")
            if authzid and authzid != username.encode("utf-8"):
                self._refuse_mechanism(
                    f"SASL EXTERNAL: the authorization identity "
                    f"{authzid[:64].decode('utf-8', 'replace')!r} is not the user of "
                    f"the client certificate ({username!r}); send none, or that one")
        elif mechanism == "PLAIN":
            parts = bytes(init.initial_response or b"").split(b"\x00")
            if len(parts) != 3:
                self._write_frame(0, SaslOutcome(code=SASL_AUTH), frame_type=SASL_FRAME)
                raise _Unrecoverable("malformed SASL PLAIN response")
            try:
                username, password = parts[1].decode("utf-8"), parts[2].decode("utf-8")
            except UnicodeDecodeError:
                self._write_frame(0, SaslOutcome(code=SASL_AUTH), frame_type=SASL_FRAME)
                raise _Unrecoverable("SASL PLAIN credentials are not UTF-8") from None
        self.authenticated = mechanism
        self._held = bytearray()
        events.append(AuthenticationRequested(mechanism, username, password, init.hostname))

    def _on_amqp_frame(self, ftype, channel, body, events):
        if ftype != AMQP_FRAME:
            raise FramingError(f"frame type {ftype:#x} is not valid after SASL")
        if not body:
            return  # an empty frame: a heart-beat (section 2.4.5)
        if self._state is ConnectionState.CLOSE_SENT and self.error is not None:
            return  # we are discarding input until the peer's close (section 2.4.3)
        if len(body) > 3 and body[0] == 0x00 and body[1] == 0x53:
            code = body[2]
            cls = _PERFORMATIVES.get(code)
            if cls is None:
                raise FramingError(f"unknown performative code {code:#04x}")
            fields, end = codec.decode(body, 3)
            performative = cls.from_fields(fields)
        else:
            value, end = codec.decode(body, 0)
            if not isinstance(value, Described):
                raise FramingError("frame body is not a performative")
            performative = from_described(value)
            if type(performative) not in _HANDLERS:
                raise FramingError(f"{type(performative).__name__} is not a performative")
        try:
            handler = self._accepts[type(performative)]
        except KeyError:   # not in this state: _refuse_frame names the error
            handler = _refuse_frame
        handler(self, channel, performative, body[end:], events)

    def _decode(self, body):
        value, end = codec.decode(body, 0)
        if not isinstance(value, Described):
            raise FramingError("frame body is not a described type")
        return from_described(value)

    # -- performatives -----------------------------------------------------------------------

    def _on_open(self, channel, open_, payload, events):
        if open_.container_id is None:
            raise AmqpRemoteError("open lacks the mandatory container-id", c.INVALID_FIELD)
        self.remote_open = open_
        remote_max = open_.max_frame_size or 0xFFFFFFFF
        if remote_max < MIN_MAX_FRAME_SIZE:
            raise AmqpRemoteError(f"max-frame-size {remote_max} is below 512",
                                  c.FRAME_SIZE_TOO_SMALL)
        self.remote_max_frame_size = min(remote_max, 0x7FFFFFFF)
        if open_.channel_max is not None:
            self._channels.limit = open_.channel_max
        if open_.idle_time_out:
            self.remote_idle_timeout = open_.idle_time_out / 1000.0
        self._move(R_OPEN)
        events.append(ConnectionOpened(open_))

    def _on_close(self, channel, close, payload, events):
        events.append(ConnectionClosed(close.error))
        self._move(R_CLOSE)
        if self._state is ConnectionState.END:
            self._finish()
        else:
            self.close()

    def _on_begin(self, channel, begin, payload, events):
        if begin.remote_channel is not None:
            session = self._sessions.get(begin.remote_channel)
            if session is None or session.state is not SessionState.BEGIN_SENT:
                raise AmqpRemoteError(f"begin answers channel {begin.remote_channel}, "
                                      "which we did not begin", c.ILLEGAL_STATE)
        else:
            if channel in self._remote_sessions:
                raise AmqpRemoteError(f"channel {channel} already has a session",
                                      c.ILLEGAL_STATE)
            if channel > self.channel_max:
                # Section 2.7.1 (open, channel-max): a framing error of the connection.
                raise AmqpRemoteError(
                    f"channel {channel} exceeds the channel-max {self.channel_max} this "
                    f"connection announced{self.setting_hint('channel_max')}",
                    c.FRAMING_ERROR)
            local = self._channels.take()
            if local is None:
                raise AmqpRemoteError(
                    f"no channel left to answer the begin on channel {channel}: the "
                    f"channel-max of the peer's open allows {self._channels.limit + 1} "
                    f"sessions", c.RESOURCE_LIMIT_EXCEEDED)
            session = Session(self, local)
            self._sessions[session.channel] = session
        session.remote_channel = channel
        self._remote_sessions[channel] = session
        session.on_begin(begin)
        events.append(SessionBegun(session))

    def _session(self, channel):
        session = self._remote_sessions.get(channel)
        if session is None:
            raise AmqpRemoteError(f"no session on channel {channel}", c.ILLEGAL_STATE)
        return session

    def _on_end(self, channel, end, payload, events):
        self._session(channel).on_end(end, events)

    def _on_attach(self, channel, attach, payload, events):
        self._session(channel).on_attach(attach, events)

    def _on_detach(self, channel, detach, payload, events):
        self._session(channel).on_detach(detach, events)

    def _on_flow(self, channel, flow, payload, events):
        self._session(channel).on_flow(flow, events)

    def _on_transfer(self, channel, transfer, payload, events):
        self._session(channel).on_transfer(transfer, payload, events)

    def _on_disposition(self, channel, disposition, payload, events):
        self._session(channel).on_disposition(disposition, events)

    # -- output ------------------------------------------------------------------------------

    def _write(self, data):
        self._tx = True
        self._out.append(data)

    def _write_frame(self, channel, performative, payload=None, frame_type=AMQP_FRAME):
        body = bytearray()
        performative.encode(body)
        if payload:
            body += payload
        self._tx = True
        self._out.append(frame_header(len(body), channel, frame_type))
        self._out.append(bytes(body))

    def _write_raw(self, channel, head, chunks, size):
        self._tx = True
        out = self._out
        out.append(frame_header(len(head) + size, channel) + head)
        out.extend(chunks)

    def _fail(self, error):
        """The peer broke the protocol: say why (if the stream allows it) and give up."""
        self.error = error
        self._drop_input()
        if isinstance(error, _Unrecoverable) or self._phase is not _AMQP:
            self._finish()
            return
        self.abort(error.condition, error.description)

    def _refuse_open(self, condition, description):
        self.error = AmqpRemoteError(description, condition)
        self.abort(condition, description)

    def _send_amqp_header(self):
        """Server: answer the peer's AMQP header (the SASL exchange, if any, is over)."""
        self._write(AMQP_HEADER)
        self._move(S_HDR)
        self._phase = _AMQP

    def _drop_input(self):
        """Nothing more will be read: let go of what was held of the peer's input (frames
        not processed, deliveries not complete) now, not when the engine is collected."""
        self._backlog.clear()
        self._held = None
        for session in self._sessions.values():
            for link in session._links.values():
                link.drop_partial()

    def _forget_session(self, session):
        if self._sessions.pop(session.channel, None) is session:
            self._channels.give_back(session.channel)
        if session.remote_channel is not None:
            self._remote_sessions.pop(session.remote_channel, None)

    # -- limits ------------------------------------------------------------------------------

    def setting_hint(self, limit):
        """Text naming the setting behind limit parameter C{limit}, for an error's
        description (empty when the engine was not told one)."""
        setting = self.setting_names.get(limit)
        return f" (setting {setting})" if setting else ""

    def _hold_partial(self, size):
        """A link keeps C{size} more bytes of an incomplete delivery (section 2.6.14).

        @raise AmqpRemoteError: amqp:resource-limit-exceeded, past C{max_partial_bytes}.
        """
        held = self._partial_bytes + size
        limit = self.max_partial_bytes
        if limit is not None and held > limit:
            raise AmqpRemoteError(
                f"incomplete deliveries on this connection would hold {held} bytes, more "
                f"than the {limit} the broker keeps for one connection"
                f"{self.setting_hint('max_partial_bytes')}; finish or abort deliveries "
                "before starting others", c.RESOURCE_LIMIT_EXCEEDED)
        budget = self.ingress_budget
        if budget is not None and not budget.take(size):
            raise AmqpRemoteError(budget.refusal(size), c.RESOURCE_LIMIT_EXCEEDED)
        self._partial_bytes = held

    def _release_partial(self, size):
        self._partial_bytes -= size
        if self.ingress_budget is not None:
            self.ingress_budget.give(size)

    @property
    def partial_bytes(self):
        """Bytes held now in incomplete incoming deliveries, every link together."""
        return self._partial_bytes

    def _over_preauth_budget(self):
        """The peer sent more than C{max_preauth_bytes} before its login succeeded:
        refuse it in the words the stream allows, and drop it."""
        description = (
            f"more than {self.max_preauth_bytes} bytes received before authentication "
            f"completed, the most the broker holds for a connection that has not logged "
            f"in{self.setting_hint('max_preauth_bytes')}")
        self.error = AmqpRemoteError(description, c.RESOURCE_LIMIT_EXCEEDED)
        self._held = None
        self._sasl_buf = bytearray()
        if self.authenticated == "NONE":
            # No SASL: the peer waits for our AMQP header; an open and a close follow.
            self._send_amqp_header()
            self._refuse_open(c.RESOURCE_LIMIT_EXCEEDED, description)
            return
        if self._phase is _SASL:
            # Part 5 section 5.3.3.6: a SASL outcome is the only answer the peer can read.
            self._write_frame(0, SaslOutcome(code=SASL_SYS,
                                             additional_data=description.encode()),
                              frame_type=SASL_FRAME)
        self._finish()

    # -- client side -------------------------------------------------------------------------

    def _start_client(self):
        if self.credentials is not None:
            self._write(SASL_HEADER)
            self._expect_sasl_header = True
        else:
            self._write(AMQP_HEADER)
            self._move(S_HDR)
            self.open()

    def _client_header(self, header, events):
        if header == SASL_HEADER and self._expect_sasl_header:
            self._expect_sasl_header = False
            self._phase = _SASL
        elif header == AMQP_HEADER and not self._expect_sasl_header:
            self._move(R_HDR)
            self._phase = _AMQP
        else:
            raise _Unrecoverable(f"the server answered with header {bytes(header)!r}")

    def _client_sasl_init(self, mechanisms):
        offered = mechanisms.sasl_server_mechanisms or ()
        if self.credentials in ("ANONYMOUS", "EXTERNAL"):
            mechanism, response = self.credentials, b""
        else:
            user, password = self.credentials
            mechanism = "PLAIN"
            response = b"\x00" + user.encode("utf-8") + b"\x00" + password.encode("utf-8")
        if mechanism not in offered:
            raise _Unrecoverable(f"the server does not offer SASL {mechanism}")
        self._write_frame(0, SaslInit(mechanism=Symbol(mechanism), initial_response=response,
                                      hostname=self.hostname), frame_type=SASL_FRAME)


class _Unrecoverable(AmqpRemoteError):
    """The stream cannot carry a close frame (bad header, SASL failure): just drop it."""

    condition = str(c.FRAMING_ERROR)


_HANDLERS = {
    Open: Connection._on_open, Close: Connection._on_close, Begin: Connection._on_begin,
    End: Connection._on_end, Attach: Connection._on_attach, Detach: Connection._on_detach,
    Flow: Connection._on_flow, Transfer: Connection._on_transfer,
    Disposition: Connection._on_disposition,
}


def next_state(state, step):
    """The state the connection reaches from C{state} by C{step} (C{S_OPEN}, ...).

    @raise IllegalTransition: section 2.4.6 (as C{_TRANSITIONS} keeps it) has no such
        step from C{state}.
    """
    following = _TRANSITIONS.get((state, step))
    if following is None:
        raise IllegalTransition(f"the connection cannot take '{step}' in state {state.name}")
    return following


def _refuse_frame(connection, channel, performative, payload, events):
    """A performative the connection's state does not accept: name the error."""
    state = connection._state
    name = type(performative).__name__.lower()
    if state in (ConnectionState.CLOSE_RCVD, ConnectionState.END):
        # Section 2.4.3: a close is the last frame a peer sends.
        raise AmqpRemoteError(f"{name} received after the close", c.FRAMING_ERROR)
    if isinstance(performative, Open):
        raise AmqpRemoteError("open received twice", c.ILLEGAL_STATE)
    # OPEN_RCVD accepts these: a peer may pipeline begin and attach behind its open before
    # it has seen ours (section 2.4.1); the glue answers the open first, in event order.
    raise AmqpRemoteError(f"{name} received before the connection was open",
                          c.ILLEGAL_STATE)


_S = ConnectionState

# The connection state diagram of section 2.4.6: (state, step) -> next state. Where
# the spec has a pipelined state (OPEN_PIPE, OC_PIPE, CLOSE_PIPE) this engine keeps the
# state it would reach once the peer's header arrives (OPEN_SENT, CLOSE_SENT): it never
# parses a frame before that header, so the difference cannot show. DISCARDING is
# CLOSE_SENT with C{error} set. The rows marked "tolerated" are a peer closing without
# (or before answering) an open: we answer with an open and a close, as the peer can read.
_TRANSITIONS = {
    (_S.START, S_HDR): _S.HDR_SENT,
    (_S.START, R_HDR): _S.HDR_RCVD,
    (_S.HDR_RCVD, S_HDR): _S.HDR_EXCH,
    (_S.HDR_SENT, R_HDR): _S.HDR_EXCH,
    (_S.HDR_SENT, S_OPEN): _S.OPEN_SENT,          # the spec's OPEN_PIPE
    (_S.HDR_EXCH, S_OPEN): _S.OPEN_SENT,
    (_S.HDR_EXCH, R_OPEN): _S.OPEN_RCVD,
    (_S.HDR_EXCH, R_CLOSE): _S.CLOSE_RCVD,        # tolerated
    (_S.OPEN_SENT, R_HDR): _S.OPEN_SENT,          # OPEN_PIPE -> OPEN_SENT
    (_S.OPEN_SENT, R_OPEN): _S.OPENED,
    (_S.OPEN_SENT, S_CLOSE): _S.CLOSE_SENT,       # the spec's CLOSE_PIPE
    (_S.OPEN_SENT, R_CLOSE): _S.CLOSE_RCVD,       # tolerated
    (_S.OPEN_RCVD, S_OPEN): _S.OPENED,
    (_S.OPEN_RCVD, R_CLOSE): _S.CLOSE_RCVD,       # tolerated
    (_S.OPENED, S_CLOSE): _S.CLOSE_SENT,
    (_S.OPENED, R_CLOSE): _S.CLOSE_RCVD,
    (_S.CLOSE_RCVD, S_OPEN): _S.CLOSE_RCVD,       # tolerated: our open carries the close
    (_S.CLOSE_RCVD, S_CLOSE): _S.END,
    (_S.CLOSE_SENT, R_CLOSE): _S.END,
}

# The performatives each state accepts, with their handlers; anything else goes to
# _refuse_frame. Before the open only an open or a close; after the close nothing.
_OPENING = {Open: Connection._on_open, Close: Connection._on_close}
_OPEN = {k: v for k, v in _HANDLERS.items() if k is not Open}
_ACCEPTS = {
    _S.START: {}, _S.HDR_RCVD: {}, _S.HDR_SENT: {},
    _S.HDR_EXCH: _OPENING, _S.OPEN_SENT: _OPENING,
    _S.OPEN_RCVD: _OPEN, _S.OPENED: _OPEN, _S.CLOSE_SENT: _OPEN,
    _S.CLOSE_RCVD: {}, _S.END: {},
}
