"""
Test helpers for the AMQP engine: two engines joined in memory (docs/design.md).

L{EnginePair} owns a client L{Connection} and a server L{Connection} and moves bytes
between them until neither has anything more to say, collecting the events each side
reported. With C{byte_at_a_time=True} every chunk is fed one byte per C{receive_data}
call, which must give exactly the same events as feeding it whole.

Everything written by either side is also kept (C{to_server}, C{to_client}), so a test can
decode the frames that crossed the wire with L{decode_stream}.
"""

from mqgate.amqp import codec
from mqgate.amqp.connection import Connection
from mqgate.amqp.events import (
    AuthenticationRequested, ConnectionOpened, LinkAttached, SessionBegun,
)
from mqgate.amqp.frames import frame_header
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, Source, Target, encode_composite, from_described,
)
from mqgate.amqp.types import Described

__all__ = [
    "EnginePair", "decode_stream", "frame", "raw_frame", "performatives_of",
    "opened_pair", "link_pair", "names", "summary", "raw_frames",
]


class EnginePair:
    """A client engine and a server engine joined by an in-memory link.

    @ivar client_events: every event the client reported, in order.
    @ivar server_events: every event the server reported, in order.
    @ivar to_server: every byte the client wrote, in order.
    @ivar to_client: every byte the server wrote, in order.
    """

    def __init__(self, client=None, server=None, *, byte_at_a_time=False,
                 client_kwargs=None, server_kwargs=None):
        self.server = server or Connection(server=True, container_id="broker",
                                           **(server_kwargs or {}))
        self.client = client or Connection(
            server=False, container_id="client",
            **({"credentials": ("admin", "secret")} | (client_kwargs or {})))
        self.byte_at_a_time = byte_at_a_time
        self.client_events = []
        self.server_events = []
        self.to_server = bytearray()
        self.to_client = bytearray()

    def _feed(self, engine, data):
        if not self.byte_at_a_time:
            return engine.receive_data(data)
        events = []
        for i in range(len(data)):
            events += engine.receive_data(data[i:i + 1])
        return events

    def pump(self, max_rounds=100):
        """Move bytes both ways until both sides are quiet.

        @return: C{(server_events, client_events)} reported during this call.
        """
        new_server, new_client = [], []
        for _ in range(max_rounds):
            moved = False
            data = self.client.data_to_send()
            if data:
                moved = True
                self.to_server += data
                new_server += self._feed(self.server, data)
            data = self.server.data_to_send()
            if data:
                moved = True
                self.to_client += data
                new_client += self._feed(self.client, data)
            if not moved:
                break
        else:
            raise AssertionError("the engines never went quiet")
        self.server_events += new_server
        self.client_events += new_client
        return new_server, new_client

    def inject(self, side, data):
        """Feed raw bytes (as if from the peer) to C{side}, "client" or "server".

        @return: the events that side reported.
        """
        engine = getattr(self, side)
        events = self._feed(engine, data)
        getattr(self, f"{side}_events").extend(events)
        return events

    def mark(self):
        """Return positions in the byte logs, for L{since}."""
        return len(self.to_server), len(self.to_client)

    def since(self, mark):
        """Frames written since C{mark}: C{(client_frames, server_frames)}."""
        return (decode_stream(bytes(self.to_server[mark[0]:])),
                decode_stream(bytes(self.to_client[mark[1]:])))

    # -- set-up shortcuts ----------------------------------------------------------------

    def handshake(self, allow=True):
        """Run SASL (answering the server's request with C{allow}) and the open exchange."""
        self.pump()
        requests = [e for e in self.server_events if isinstance(e, AuthenticationRequested)]
        assert len(requests) == 1, self.server_events
        self.server_events += self.server.sasl_outcome(allow)
        self.pump()
        if allow and any(isinstance(e, ConnectionOpened) for e in self.server_events):
            self.server.open()
            self.pump()
        return self

    def begin(self):
        """Begin a client session and answer it on the server; returns both ends."""
        client_session = self.client.begin_session()
        server_events, _ = self.pump()
        begun = [e for e in server_events if isinstance(e, SessionBegun)]
        assert len(begun) == 1, server_events
        server_session = begun[0].session
        server_session.begin()
        self.pump()
        return client_session, server_session


def opened_pair(**kwargs):
    """An L{EnginePair} past SASL PLAIN and the open exchange."""
    return EnginePair(**kwargs).handshake()


def link_pair(client_role=SENDER, credit=0, pair=None, address="q1", server_attach=None,
              **client_attach):
    """Open a pair, begin a session and attach a link initiated by the client.

    @param client_role: the client end's role (SENDER or RECEIVER).
    @param credit: credit granted by the receiving end once attached.
    @param server_attach: keyword arguments for the server's answering attach.
    @return: C{(pair, client_link, server_link)}.
    """
    pair = pair or opened_pair()
    client_session, _server_session = pair.begin()
    client_link = client_session.attach_link("link-1", client_role)
    client_link.attach(source=Source(address=address), target=Target(address=address),
                       **client_attach)
    server_events, _ = pair.pump()
    attached = [e for e in server_events if isinstance(e, LinkAttached)]
    assert len(attached) == 1, server_events
    server_link = attached[0].link
    server_link.attach(source=server_link.remote.source, target=server_link.remote.target,
                       **(server_attach or {}))
    pair.pump()
    if credit:
        receiver = client_link if client_role == RECEIVER else server_link
        receiver.flow(credit)
        pair.pump()
    return pair, client_link, server_link


def frame(performative, channel=0, payload=b""):
    """The bytes of one AMQP frame carrying C{performative} (and a payload)."""
    body = encode_composite(performative) + payload
    return frame_header(len(body), channel) + body


def raw_frame(body, channel=0, frame_type=0):
    """The bytes of one frame with an arbitrary body."""
    return frame_header(len(body), channel, frame_type) + body


def decode_stream(data):
    """Decode a byte stream as written by an engine.

    @return: a list of C{("header", bytes)} and C{(channel, performative, payload)}
        (performative None for an empty frame), in order.
    """
    out = []
    pos = 0
    while pos < len(data):
        if data[pos:pos + 4] == b"AMQP":
            out.append(("header", data[pos:pos + 8]))
            pos += 8
            continue
        size = int.from_bytes(data[pos:pos + 4], "big")
        doff = data[pos + 4] * 4
        channel = int.from_bytes(data[pos + 6:pos + 8], "big")
        body = data[pos + doff:pos + size]
        pos += size
        if not body:
            out.append((channel, None, b""))
            continue
        value, end = codec.decode(body)
        assert isinstance(value, Described), value
        out.append((channel, from_described(value), body[end:]))
    return out


def performatives_of(frames, kind=None):
    """The performatives among L{decode_stream} output (of one class, if given)."""
    found = [f[1] for f in frames if f[0] != "header" and f[1] is not None]
    if kind is not None:
        found = [p for p in found if isinstance(p, kind)]
    return found


def names(events):
    """The class names of some events, for readable assertions."""
    return [type(e).__name__ for e in events]


def summary(events):
    """Events as comparable tuples: their class and every field that is not an engine
    object (sessions and links differ between two runs, their contents do not)."""
    out = []
    for event in events:
        fields = tuple(
            (name, getattr(event, name)) for name in event.__dataclass_fields__
            if name not in ("session", "link"))
        out.append((type(event).__name__,) + fields)
    return out


def raw_frames(data):
    """Cut an engine's output into protocol headers and whole frames (bytes each)."""
    out = []
    pos = 0
    while pos < len(data):
        if data[pos:pos + 4] == b"AMQP":
            size = 8
        else:
            size = int.from_bytes(data[pos:pos + 4], "big")
        out.append(bytes(data[pos:pos + size]))
        pos += size
    return out

