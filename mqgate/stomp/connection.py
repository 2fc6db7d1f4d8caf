"""
The STOMP 1.0/1.1/1.2 server connection engine: bytes in, events out, bytes out (S10.2).

Theory of operation
-------------------
A L{StompConnection} is fed what the transport received (C{receive_data}) and returns
the events that input caused, in order. What the engine must say is buffered; the
adapter collects it with C{data_to_send()}. Time enters only through C{tick(now)} (now in
seconds, any epoch), which returns the next moment the engine wants to be ticked, for
heart-beats. The engine does not log, read the clock or touch a socket (docs/design.md).

States (C{state}), named after the spec's phases:

    CONNECTING      waiting for CONNECT or STOMP; any other frame is an error
    AUTHENTICATING  ConnectRequested reported; input is held until accept()/refuse()
    CONNECTED       client frames become events
    DISCONNECTING   DISCONNECT with a receipt arrived; waiting for the glue's receipt()
    DISCONNECTED    terminal: C{finished} is True

Which frame each state takes is the table C{_TRANSITIONS} at the bottom; anything not in
it is an error (docs/design.md). Every error the peer causes - malformed bytes, a limit, a
missing header, a frame at the wrong time - is answered the same way: an ERROR frame with
a C{message} header, a body explaining, C{receipt-id} when the bad frame had a receipt,
and the connection is finished (S10.4). The adapter writes C{data_to_send()} and then
drops the transport whenever C{finished} is True; C{error} holds the L{StompError} for
the log. C{receive_data} never raises.

This engine is the server side only; tests drive it with hand-written client frames.
"""

import enum

from mqgate.errors import ConfigError
from mqgate.stomp.errors import (
    MessageTooBig, StompError, StompLocalError, StompProtocolError)
from mqgate.stomp.events import (
    Abort, Ack, Begin, Commit, ConnectRequested, Disconnect, IngressRefused, Nack, Send,
    Subscribe, Unsubscribe,
)
from mqgate.stomp.frames import (
    DEFAULT_LIMITS, HEARTBEAT, VERSIONS, FrameParser, MessageTemplate, encode_frame,
)

__all__ = ["StompConnection", "StompState", "ACK_MODES"]

#: The SUBSCRIBE ack modes (1.1/1.2 "SUBSCRIBE ack Header"). client-individual is a
#: 1.1 addition, but ActiveMQ and RabbitMQ take it on 1.0 connections too, so do we.
ACK_MODES = ("auto", "client", "client-individual")

# Heart-beat tolerance: the peer is given up after this many of its negotiated intervals
# without a byte. The spec asks receivers to "be tolerant and take into account an error
# margin"; a client that sends exactly on its interval arrives late by network jitter
# plus its own timer slack, and our own check only runs on ticks (see tick()). Twice the
# interval absorbs all of that without letting a dead peer linger for long (stomp.py, on
# the other side, gives the server 1.5 intervals: heart_beat_receive_scale).
HEARTBEAT_TOLERANCE = 2

#: Bytes a client may send before we answer its CONNECT with CONNECTED: the CONNECT
#: frame itself, and whatever it pipelines behind it while its login is checked. A
#: CONNECT is a few hundred bytes (a bearer token as passcode, a few KiB); clients wait
#: for CONNECTED before sending messages. Whoever has not logged in gets no more than
#: this, so that unauthenticated sockets cost the broker a small constant each.
DEFAULT_UNAUTHENTICATED_BYTES = 16 * 1024
MAX_HELD_BYTES = DEFAULT_UNAUTHENTICATED_BYTES   # the old name, kept for callers

# The only frames a client may begin with (1.2 "Connecting").
_FIRST_COMMANDS = frozenset(("CONNECT", "STOMP"))

# MESSAGE headers the engine writes itself; copies in the glue's headers are dropped so
# that the first (ours) is the only one.


class StompState(enum.Enum):
    CONNECTING = "CONNECTING"
    AUTHENTICATING = "AUTHENTICATING"
    CONNECTED = "CONNECTED"
    DISCONNECTING = "DISCONNECTING"
    DISCONNECTED = "DISCONNECTED"


_S = StompState


def _version_key(version):
    return tuple(int(part) for part in version.split("."))


class StompConnection:
    """A STOMP server connection.

    @param server: must be True; the engine has no client side (yet).
    @param server_name: the CONNECTED C{server} header, C{name/version}. The engine may
        not import C{mqgate.__version__} (layer rule), so whoever builds it passes
        C{f"mqgate/{__version__}"}.
    @param versions: the versions we speak, from C{("1.0", "1.1", "1.2")}.
    @param heartbeat: C{(send_ms, want_ms)}: how often we can send heart-beats and how
        often we want them (the CONNECTED C{heart-beat} header); 0 disables a direction.
    @param limits: a L{mqgate.stomp.frames.FrameLimits} for incoming frames.
    @param frame_budget: frames parsed per call of L{receive_data}, or None for all that are complete. The bytes behind them wait, unparsed, while
        L{backlogged} is True: call C{receive_data(b"")} (in a later reactor turn) to
        go on. Parsing is most of the engine's work, so this bounds what one call costs
        however the bytes arrive.
    @param max_unauthenticated_bytes: bytes the client may send until CONNECTED is
        written (its CONNECT and anything pipelined behind it); one more and it gets an
        ERROR. Any frame but CONNECT or STOMP before that is an ERROR as soon as its
        command line is read, before its headers or body are buffered.

    @ivar state: a L{StompState}.
    @ivar version: the agreed version (None until CONNECT is processed).
    @ivar heartbeat_send_ms: the agreed interval of our heart-beats (0: none).
    @ivar heartbeat_receive_ms: the agreed interval of the client's (0: none).
    @ivar finished: True once the transport should be dropped (after writing
        C{data_to_send()}).
    @ivar error: the L{StompError} the peer caused, or None.
    """

    def __init__(self, *, server=True, server_name="mqgate",
                 versions=VERSIONS, heartbeat=(10000, 10000), limits=DEFAULT_LIMITS,
                 max_unauthenticated_bytes=DEFAULT_UNAUTHENTICATED_BYTES,
                 frame_budget=None):
        if not server:
            raise ConfigError("server", server, "True (no STOMP client engine exists)")
        bad = [v for v in versions if v not in VERSIONS]
        if bad or not versions:
            raise ConfigError("versions", ",".join(versions), "a subset of 1.0, 1.1, 1.2")
        send_ms, want_ms = heartbeat
        if send_ms < 0 or want_ms < 0:
            raise ConfigError("heartbeat", f"{send_ms},{want_ms}", "two integers >= 0")
        self.server_name = server_name
        self.versions = tuple(sorted(set(versions), key=_version_key))
        self.heartbeat = (int(send_ms), int(want_ms))
        self.state = _S.CONNECTING
        self.version = None
        self.heartbeat_send_ms = 0
        self.heartbeat_receive_ms = 0
        self.finished = False
        self.error = None
        if max_unauthenticated_bytes < 1:
            raise ConfigError("max_unauthenticated_bytes", max_unauthenticated_bytes,
                              "a positive number of bytes")
        self.max_unauthenticated_bytes = max_unauthenticated_bytes
        if frame_budget is not None and frame_budget < 1:
            raise ConfigError("frame_budget", frame_budget, "a positive number of frames")
        self.frame_budget = frame_budget
        self._parser = FrameParser(None, limits, expect=_FIRST_COMMANDS)
        self._out = []
        self._unauthenticated = 0          # bytes received before CONNECTED was written
        self._disconnect_receipt = None
        self._rx = self._tx = False        # activity since the last tick
        self._last_rx = self._last_tx = None

    # -- driver API --------------------------------------------------------------------------

    def receive_data(self, data):
        """Feed received bytes; return the events they caused, in order. Never raises."""
        events = []
        if data:
            self._rx = True                # any byte proves the peer alive (Heart-beating)
        if self.state in (_S.CONNECTING, _S.AUTHENTICATING) and not self._within_budget(data):
            return events
        if self.state is _S.AUTHENTICATING:
            self._parser.feed(data)        # buffered only: the parser is paused after CONNECT
            return events
        if self.state not in (_S.CONNECTING, _S.CONNECTED):
            return events                  # nothing may follow DISCONNECT (1.2)
        try:
            self._process(self._parser.feed(data, self.frame_budget), events)
        except StompError as error:
            if isinstance(error, MessageTooBig):
                events.append(IngressRefused(error.size, error.limit, error.guaranteed))
            self._fail(error)
        return events

    def data_to_send(self):
        """Everything the engine has to say since the last call, as bytes (b"" if nothing)."""
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
        """Run the heart-beat timers; return the time of the next tick, or None.

        The engine learns of traffic only here: bytes read or written since the last
        tick count as happening at C{now}. So we send an EOL when we have been silent
        for half our interval (the real silence is then at most one interval, as the
        spec requires), and look at the peer every half of its interval, giving up when
        it has been silent for L{HEARTBEAT_TOLERANCE} intervals.
        """
        if self._last_rx is None or self._rx:
            self._last_rx, self._rx = now, False
        if self._last_tx is None or self._tx:
            self._last_tx, self._tx = now, False
        if self.finished or self.state not in (_S.CONNECTED, _S.DISCONNECTING):
            return None
        deadlines = []
        if self.heartbeat_receive_ms:
            interval = self.heartbeat_receive_ms / 1000.0
            timeout = interval * HEARTBEAT_TOLERANCE
            if now - self._last_rx >= timeout:
                self._fail(StompProtocolError(
                    "heart-beat timeout",
                    f"nothing received for {self.heartbeat_receive_ms * HEARTBEAT_TOLERANCE}"
                    f" ms; the agreed heart-beat interval is {self.heartbeat_receive_ms} ms"))
                return None
            deadlines.append(min(self._last_rx + timeout, now + interval / 2))
        if self.heartbeat_send_ms:
            half = self.heartbeat_send_ms / 2000.0
            if now - self._last_tx >= half:
                self._out.append(b"\n")
                self._last_tx, self._tx = now, False
            deadlines.append(self._last_tx + half)
        return min(deadlines) if deadlines else None

    def ping(self):
        """Write a heart-beat EOL (S1.7 probe). STOMP 1.0 has no heart-beats, so a 1.0
        client gets nothing; 1.1 and 1.2 allow EOLs between frames at any time."""
        if self.state is _S.CONNECTED and self.version != "1.0":
            self._out.append(b"\n")
            self._tx = True

    @property
    def backlogged(self):
        """True while bytes already received wait, unparsed, beyond the frame budget:
        C{receive_data(b"")} goes on with them."""
        return self._parser.more and self.state is _S.CONNECTED

    @property
    def ready(self):
        """True once CONNECTED was sent: the heart-beats are agreed (the adapter then
        starts ticking)."""
        return self.state in (_S.CONNECTED, _S.DISCONNECTING)

    def connection_lost(self):
        """The transport is gone: nothing more will be read or written."""
        self.finished = True
        self.state = _S.DISCONNECTED

    # -- answers from the glue ---------------------------------------------------------------

    def accept(self, session_id):
        """Answer L{ConnectRequested}: the client is in. Writes CONNECTED.

        @return: the events of any frames the client sent behind its CONNECT.
        """
        self._expect(_S.AUTHENTICATING, "accept")
        headers = [("version", self.version)]
        if self.version != "1.0":
            send_ms, want_ms = self.heartbeat
            headers.append(("heart-beat", f"{send_ms},{want_ms}"))
        headers += [("session", session_id), ("server", self.server_name)]
        self._write(encode_frame("CONNECTED", headers, b"", self.version))
        self.state = _S.CONNECTED
        events = []
        try:
            # All that came behind the CONNECT, whatever the frame budget: it is
            # bounded by max_unauthenticated_bytes, and nothing would come back for a
            # rest (the login answers outside the adapter's reading).
            self._process(self._parser.resume(self.version), events)
        except StompError as error:
            self._fail(error)
        return events

    def refuse(self, message, detail=""):
        """Answer L{ConnectRequested}: the client is not let in. Writes ERROR, finishes."""
        self._expect(_S.AUTHENTICATING, "refuse")
        self._write_error(message, detail)
        self._finish()

    def message_template(self, subscription, destination):
        """The L{MessageTemplate} of a subscription's MESSAGE frames, for L{write_message}
        (built once per subscription: its fixed headers are escaped for the agreed
        version once, not per message)."""
        return MessageTemplate(subscription, destination, self.version)

    def message(self, subscription, destination, message_id, headers, body, ack_id=None):
        """Write a MESSAGE frame (L{write_message} with a template made for it)."""
        return self.write_message(self.message_template(subscription, destination),
                                  message_id, headers, body, ack_id)

    def write_message(self, template, message_id, headers, body, ack_id=None, extra=()):
        """Write a MESSAGE frame from a subscription's L{MessageTemplate}.

        @param headers: further C{(name, value)} pairs (the message's own headers), or a
            L{HeaderBlock} of them; C{extra}: pairs written after them. Names the frame
            sets itself (destination, message-id, subscription, ack, content-length) are
            left out.
        @param ack_id: the C{ack} header (1.2, for client and client-individual
            subscriptions); the client names the message by it in ACK/NACK. In 1.0/1.1
            the client uses C{message_id} instead and C{ack_id} is not sent.
        @return: True if written; False if the connection no longer takes messages
            (DISCONNECT received, or finished), so the caller can requeue.
        """
        if self.state is not _S.CONNECTED:
            return False
        self._write(template.render(message_id, headers, body, ack_id, extra))
        return True

    def receipt(self, receipt_id):
        """Write the RECEIPT for a frame's C{receipt} header.

        The receipt of a DISCONNECT finishes the connection (1.2 "DISCONNECT").
        """
        if self.state not in (_S.CONNECTED, _S.DISCONNECTING):
            return
        self._write(encode_frame("RECEIPT", [("receipt-id", receipt_id)], b"",
                                 self.version))
        if self.state is _S.DISCONNECTING and receipt_id == self._disconnect_receipt:
            self._finish()

    def send_error(self, message, detail="", receipt_id=None, fatal=True):
        """Write an ERROR frame for something the glue could not do (e.g. a SEND refused).

        With C{fatal} (the spec's rule: the server closes the connection after ERROR),
        the connection is finished.
        """
        if self.finished:
            return
        self._write_error(message, detail, receipt_id)
        if fatal:
            self._finish()

    # -- input -------------------------------------------------------------------------------

    def _process(self, frames, events):
        for frame in frames:
            if frame is HEARTBEAT:
                continue
            handler = _TRANSITIONS.get((self.state, frame.command))
            if handler is None:
                raise self._unexpected(frame)
            handler(self, frame, events)
            if self.state is not _S.CONNECTED:
                return  # after CONNECT the parser waits; after DISCONNECT nothing counts
        if self._parser.error is not None:
            raise self._parser.error

    def _within_budget(self, data):
        """Count bytes from a client not yet logged in; past its budget, fail.

        Checked before the bytes reach the parser, so an oversized first frame costs us
        one read, never its whole body."""
        allowed = self.max_unauthenticated_bytes - self._unauthenticated
        self._unauthenticated += len(data)
        if len(data) <= allowed:
            return True
        limit = self.max_unauthenticated_bytes
        if self.state is _S.CONNECTING and allowed > 0:
            # The part within the budget may already be wrong (a SEND before CONNECT):
            # that is the better thing to tell the client.
            try:
                self._parser.feed(data[:allowed])
            except StompError as error:
                self._fail(error)
                return False
        self._fail(StompProtocolError(
            "too much data before CONNECTED",
            f"more than {limit} bytes arrived before the CONNECT was answered; a client "
            f"may send at most {limit} bytes until it is logged in"))
        return False

    def _unexpected(self, frame):
        command, receipt = frame.command, frame.get("receipt")
        if self.state is _S.CONNECTING:
            return StompProtocolError(
                "not connected", f"the first frame must be CONNECT or STOMP, not "
                f"{command[:40]!r}", receipt)
        if command in ("CONNECT", "STOMP"):
            return StompProtocolError("already connected",
                                      f"{command} received on a connected session", receipt)
        return StompProtocolError("unknown command",
                                  f"unknown or unexpected command {command[:40]!r}", receipt)

    def _on_connect(self, frame, events):
        self.version = self._negotiate(frame)
        beats = (0, 0)
        if self.version != "1.0":  # 1.0 has no heart-beats
            beats = self._client_heartbeat(frame.get("heart-beat"))
        cx, cy = beats
        send_ms, want_ms = self.heartbeat
        # 1.1/1.2 "Heart-beating": a direction is off if either side says 0; otherwise
        # the slower of what the sender can do and what the receiver wants.
        self.heartbeat_receive_ms = max(cx, want_ms) if cx and want_ms else 0
        self.heartbeat_send_ms = max(send_ms, cy) if send_ms and cy else 0
        self.state = _S.AUTHENTICATING
        # host is REQUIRED in 1.1/1.2 CONNECT frames, but we serve one virtual host, so
        # nothing depends on it: a CONNECT without one is let in (host=None) rather than
        # refused. stomp.py and stomp.js send it; some minimal clients do not.
        events.append(ConnectRequested(
            frame.get("login"), frame.get("passcode"), frame.get("host"), self.version,
            beats, frame.headers))

    def _negotiate(self, frame):
        """The highest version both sides have (1.2 "Protocol Negotiation")."""
        accept = frame.get("accept-version")
        offered = {"1.0"} if accept is None else {v.strip() for v in accept.split(",")}
        common = [v for v in self.versions if v in offered]
        if not common:
            ours = " ".join(self.versions)
            raise StompProtocolError(
                "unsupported STOMP version",
                f"Supported protocol versions are {ours}; the client accepts "
                f"{(accept or '')[:80]!r}", headers=[("version", ",".join(self.versions))])
        return max(common, key=_version_key)

    def _client_heartbeat(self, value):
        if value is None:
            return (0, 0)
        cx, comma, cy = value.partition(",")
        cx, cy = cx.strip(), cy.strip()
        if not (comma and cx.isascii() and cx.isdigit() and cy.isascii() and cy.isdigit()
                and len(cx) < 10 and len(cy) < 10):
            raise StompProtocolError("bad heart-beat header",
                                     f"heart-beat {value[:40]!r} is not two numbers of ms")
        return (int(cx), int(cy))

    def _on_send(self, frame, events):
        # The hot path: the three headers the engine needs in one pass, first one wins.
        destination = transaction = receipt = persistent = None
        for name, value in frame.headers:
            if name == "destination":
                if destination is None:
                    destination = value
            elif name == "receipt":
                if receipt is None:
                    receipt = value
            elif name == "transaction":
                if transaction is None:
                    transaction = value
            elif name == "persistent" and persistent is None:
                persistent = value
        if not destination:
            self._require(frame, "destination")   # raises, naming it
        events.append(Send(destination, frame.headers, frame.body, transaction, receipt,
                           persistent is not None and persistent.lower() == "true"))

    def _on_subscribe(self, frame, events):
        destination = self._require(frame, "destination")
        if self.version == "1.0":
            # 1.0 has no required id: the destination names the subscription (ActiveMQ
            # does the same), and UNSUBSCRIBE by destination finds it again.
            sub_id = frame.get("id") or destination
        else:
            sub_id = self._require(frame, "id")
        ack = frame.get("ack") or "auto"
        if ack not in ACK_MODES:
            raise StompProtocolError(
                "bad ack mode", f"ack mode {ack[:40]!r} is not one of "
                f"{', '.join(ACK_MODES)}", frame.get("receipt"))
        events.append(Subscribe(sub_id, destination, ack, frame.headers,
                                frame.get("receipt")))

    def _on_unsubscribe(self, frame, events):
        if self.version == "1.0" and not frame.get("id"):
            sub_id = self._require(frame, "destination", "an id or a destination")
        else:
            sub_id = self._require(frame, "id")
        events.append(Unsubscribe(sub_id, frame.get("receipt")))

    def _ack_fields(self, frame):
        if self.version == "1.2":
            ack_id = self._require(frame, "id")
            return ack_id, frame.get("subscription"), frame.get("message-id")
        message_id = self._require(frame, "message-id")
        if self.version == "1.1":
            subscription = self._require(frame, "subscription")
        else:
            subscription = frame.get("subscription")
        return message_id, subscription, message_id

    def _on_ack(self, frame, events):
        fields = self._ack_fields(frame)
        events.append(Ack(*fields, frame.get("transaction"), frame.get("receipt")))

    def _on_nack(self, frame, events):
        if self.version == "1.0":
            raise StompProtocolError("NACK is not part of STOMP 1.0",
                                     "NACK needs STOMP 1.1 or later", frame.get("receipt"))
        fields = self._ack_fields(frame)
        events.append(Nack(*fields, frame.get("transaction"), frame.get("receipt")))

    def _on_transaction(self, frame, events):
        event = _TRANSACTION_EVENTS[frame.command]
        events.append(event(self._require(frame, "transaction"), frame.get("receipt")))

    def _on_disconnect(self, frame, events):
        receipt = frame.get("receipt")
        events.append(Disconnect(receipt))
        if receipt is None:
            self._finish()
        else:
            self._disconnect_receipt = receipt
            self.state = _S.DISCONNECTING

    def _require(self, frame, name, what=None):
        value = frame.get(name)
        if not value:  # an empty destination, id or transaction names nothing
            raise StompProtocolError(
                f"missing header {name!r}",
                f"the {frame.command} frame lacks {what or repr(name)}, which is required",
                frame.get("receipt"))
        return value

    # -- output ------------------------------------------------------------------------------

    def _write(self, data):
        self._tx = True
        self._out.append(data)

    def _write_error(self, message, detail="", receipt_id=None, extra=()):
        headers = [("message", message)]
        if receipt_id is not None:
            headers.append(("receipt-id", receipt_id))
        headers.extend(extra)
        body = detail.encode("utf-8") if detail else b""
        if body:
            headers.append(("content-type", "text/plain"))
        # Before the version is agreed the client's escaping is unknown: 1.0 has none.
        self._write(encode_frame("ERROR", headers, body, self.version or "1.0"))

    def _fail(self, error):
        """The peer broke the protocol: say why in an ERROR frame and finish."""
        if self.finished:
            return
        self.error = error
        self._write_error(error.message, error.detail, error.receipt_id, error.headers)
        self._finish()

    def _finish(self):
        self.finished = True
        self.state = _S.DISCONNECTED

    def _expect(self, state, action):
        if self.state is not state:
            raise StompLocalError(f"cannot {action} in state {self.state.name}")


_TRANSACTION_EVENTS = {"BEGIN": Begin, "COMMIT": Commit, "ABORT": Abort}

_C = StompConnection
_CONNECTED_FRAMES = {
    "SEND": _C._on_send, "SUBSCRIBE": _C._on_subscribe, "UNSUBSCRIBE": _C._on_unsubscribe,
    "ACK": _C._on_ack, "BEGIN": _C._on_transaction, "COMMIT": _C._on_transaction,
    "ABORT": _C._on_transaction, "NACK": _C._on_nack, "DISCONNECT": _C._on_disconnect,
}

# (state, command) -> handler. Anything missing is an ERROR (see _unexpected); what
# depends on the version (NACK, required headers) is checked by the handler.
_TRANSITIONS = {
    (_S.CONNECTING, "CONNECT"): _C._on_connect,
    (_S.CONNECTING, "STOMP"): _C._on_connect,
    **{(_S.CONNECTED, command): handler for command, handler in _CONNECTED_FRAMES.items()},
}
