"""Grammar-fuzzed AMQP messages against the real broker (S10.4, S10.2): no message
poisons a queue.

A seeded generator writes AMQP messages byte by byte from a grammar of the whole type
system: every scalar type, strings that are not UTF-8, chars that are lone surrogates,
described values, arrays (described ones too), nested lists and maps, in the
annotations, the application properties and the body (data, amqp-sequence,
amqp-value); a tenth of them are then broken (truncated, an unknown section, sections
out of order, trailing garbage). mqgate's own engine client sends each one, persistent
or not, to four queues, consumed by stomp.py subscribers in every ack mode and by an
AMQP receiver. What must hold:

- every message the broker accepts reaches each consumer exactly once; every message it
  refuses is refused on arrival with a named condition and reaches no one;
- every consumer stays connected (no ERROR, no disconnection);
- a probe on another connection keeps its round trip under 100 ms throughout.
"""

import random
import struct
import threading
import time

from mqgate.amqp.events import DeliveriesSettled, MessageReceived
from mqgate.amqp.message import encode_message, parse_message
from mqgate.amqp.performatives import RECEIVER, SENDER, Accepted, Rejected

from tests.e2e.engine_client import EngineClient
from tests.e2e.stomp_client import open_client

SEED = 20261203
COUNT = 300
DEADLINE = 60.0
STOMP_MODES = ("auto", "client", "client-individual")
END = b"end-of-poison"
WINDOW = 16     # messages the producer has out at once


# -- the grammar ------------------------------------------------------------------------

def _sized(short, wide, payload):
    if len(payload) < 256 and short is not None:
        return bytes([short, len(payload)]) + payload
    return bytes([wide]) + struct.pack(">I", len(payload)) + payload


def _compound(short, wide, count, items):
    if len(items) + 1 < 256 and count < 256:
        return bytes([short, len(items) + 1, count]) + items
    return bytes([wide]) + struct.pack(">II", len(items) + 4, count) + items


# Array element constructors and how to write one element without its constructor.
_ELEMENTS = {
    0x50: lambda r: struct.pack(">B", r.randrange(256)),
    0x71: lambda r: struct.pack(">i", r.randrange(-2**31, 2**31)),
    0x80: lambda r: struct.pack(">Q", r.randrange(2**64)),
    0x73: lambda r: struct.pack(">I", r.choice([0x41, 0xD800, 0xDFFF, 0x10FFFF, 0xE9])),
    0x98: lambda r: r.randbytes(16),
    0x83: lambda r: struct.pack(">q", r.randrange(-2**40, 2**40)),
    0xA1: lambda r: bytes([3]) + r.choice([b"abc", b"\xc3\x28x", b"\xed\xa0\x80"]),
    0xA3: lambda r: bytes([2]) + r.choice([b"ok", b"\xff\xfe"]),
    0x41: lambda r: b"",
}


class Grammar:
    """Writes encoded AMQP values and messages from a C{random.Random}."""

    def __init__(self, rng):
        self.r = rng

    def text(self):
        """String bytes: mostly valid UTF-8, some not, some with NUL or newlines."""
        return self.r.choice([
            b"plain", "h\u00e9llo \u4e2d\U0001f600".encode(), b"with\x00nul", b"a:b\nc\\d",
            b"\xc3\x28", b"\xff\xfe\xfd", b"\xed\xa0\x80", b"", b"x" * self.r.randrange(300),
        ])

    def scalar(self):
        r = self.r
        kind = r.randrange(22)
        return [
            lambda: b"\x40", lambda: b"\x41", lambda: b"\x42", lambda: b"\x56\x01",
            lambda: b"\x50" + struct.pack(">B", r.randrange(256)),
            lambda: b"\x60" + struct.pack(">H", r.randrange(65536)),
            lambda: b"\x70" + struct.pack(">I", r.randrange(2**32)),
            lambda: b"\x53" + bytes([r.randrange(256)]),
            lambda: b"\x80" + struct.pack(">Q", r.randrange(2**64)),
            lambda: b"\x54" + struct.pack(">b", r.randrange(-128, 128)),
            lambda: b"\x81" + struct.pack(">q", r.randrange(-2**63, 2**63)),
            lambda: b"\x72" + struct.pack(">f", r.random()),
            lambda: b"\x82" + r.choice([struct.pack(">d", float("nan")),
                                        struct.pack(">d", float("inf")),
                                        struct.pack(">d", r.random())]),
            lambda: b"\x74" + r.randbytes(4),
            lambda: b"\x84" + r.randbytes(8),
            lambda: b"\x94" + r.randbytes(16),
            lambda: b"\x73" + struct.pack(">I", r.choice(
                [0x41, 0xD800, 0xDBFF, 0xDC00, 0x10FFFF, 0])),
            lambda: b"\x83" + struct.pack(">q", r.randrange(-2**62, 2**62)),
            lambda: b"\x98" + r.randbytes(16),
            lambda: _sized(0xA0, 0xB0, r.randbytes(r.randrange(40))),
            lambda: _sized(0xA1, 0xB1, self.text()),
            lambda: _sized(0xA3, 0xB3, r.choice([b"sym", b"x-opt-a", b"\xe9t\xe9"])),
        ][kind]()

    def value(self, depth=0):
        r = self.r
        if depth >= 3 or r.random() < 0.55:
            return self.scalar()
        kind = r.randrange(5)
        if kind == 0:                                       # list
            n = r.randrange(5)
            return b"\x45" if n == 0 else _compound(
                0xC0, 0xD0, n, b"".join(self.value(depth + 1) for _ in range(n)))
        if kind == 1:                                       # map
            n = r.randrange(4)
            items = b"".join(self.value(depth + 1) + self.value(depth + 1)
                             for _ in range(n))
            return _compound(0xC1, 0xD1, 2 * n, items)
        if kind == 2:                                       # described
            return b"\x00" + self.descriptor() + self.value(depth + 1)
        return self.array()

    def descriptor(self):
        return self.r.choice([b"\x53\x01", b"\x53\x77", _sized(0xA3, 0xB3, b"x:y"),
                              b"\x80" + struct.pack(">Q", 0x468C00000004)])

    def array(self, count=None):
        r = self.r
        code = r.choice(list(_ELEMENTS))
        count = r.randrange(6) if count is None else count
        head = (b"\x00" + self.descriptor()) if r.random() < 0.4 else b""
        body = head + bytes([code]) + b"".join(_ELEMENTS[code](r) for _ in range(count))
        return _compound(0xE0, 0xF0, count, body)

    # -- sections --------------------------------------------------------------------

    def key(self):
        """An application-property key: a string, rarely something else."""
        if self.r.random() < 0.08:
            return self.value(2)
        return _sized(0xA1, 0xB1, self.r.choice(
            [b"k%d" % self.r.randrange(1000), b"destination", b"content-length",
             b"\xc3\x28", b"na,me", b"colon:key", b"long" * 30]))

    def properties_map(self, big=False):
        n = self.r.randrange(6)
        items = b"".join(self.key() + self.value() for _ in range(n))
        if big:   # a 200 KB array of described values
            items += _sized(0xA1, 0xB1, b"big") + self.big_array()
            n += 1
        return _compound(0xC1, 0xD1, 2 * n, items)

    def big_array(self):
        elements = b"\x00\x53\x01\x53" + b"\x07" * 200_000
        return b"\xf0" + struct.pack(">II", 4 + len(elements), 200_000) + elements

    def annotations(self):
        n = self.r.randrange(4)
        items = b"".join(
            (_sized(0xA3, 0xB3, b"x-opt-%d" % i) if self.r.random() < 0.8
             else self.value(2)) + self.value() for i in range(n))
        return _compound(0xC1, 0xD1, 2 * n, items)

    def body(self):
        r = self.r
        kind = r.randrange(3)
        if kind == 0:
            sections = []
            for _ in range(r.randrange(1, 4)):
                inside = (_sized(0xA1, 0xB1, b"a string") if r.random() < 0.1
                          else _sized(0xA0, 0xB0, r.randbytes(r.randrange(64))))
                sections.append(b"\x00\x53\x75" + inside)
            return b"".join(sections)
        if kind == 1:
            return b"".join(b"\x00\x53\x76" + _compound(
                0xC0, 0xD0, 2, self.value(1) + self.value(1))
                for _ in range(r.randrange(1, 3)))
        return b"\x00\x53\x77" + self.value()

    def message(self, number, durable):
        """C{(bare prefix length, message bytes)}: the sections up to the properties are
        always well formed (they carry the message-id that identifies it)."""
        r = self.r
        out = b"\x00\x53\x70" + _compound(0xC0, 0xD0, 1, b"\x41" if durable else b"\x42")
        if r.random() < 0.3:
            out += b"\x00\x53\x71" + self.annotations()             # delivery
        if r.random() < 0.6:
            out += b"\x00\x53\x72" + self.annotations()             # message
        message_id = _sized(0xA1, 0xB1, b"m-%d" % number)
        correlation = self.value(1) if r.random() < 0.3 else b"\x40"
        out += b"\x00\x53\x73" + _compound(
            0xC0, 0xD0, 6, message_id + b"\x40\x40\x40\x40" + correlation)
        fixed = len(out)
        if r.random() < 0.7:
            out += b"\x00\x53\x74" + self.properties_map(big=r.random() < 0.02)
        out += self.body()
        if r.random() < 0.1:
            out += b"\x00\x53\x78" + self.annotations()             # footer
        return fixed, out

    def broken(self, fixed, data):
        """The same message broken after its properties, one way or another."""
        r = self.r
        how = r.randrange(4)
        if how == 0 and len(data) > fixed + 1:
            return data[:r.randrange(fixed + 1, len(data))]          # truncated
        if how == 1:
            return data + b"\x00\x53\x99\x40"                        # unknown section
        if how == 2:
            return data + b"\x00\x53\x74\xc1\x01\x00"                # out of order
        return data + b"\xff"                                         # trailing garbage


def generate(seed=SEED, count=COUNT):
    """C{[(number, durable, bytes)]}: the fuzzed messages, the same for a seed."""
    grammar = Grammar(random.Random(seed))
    messages = []
    for number in range(count):
        durable = grammar.r.random() < 0.5
        fixed, data = grammar.message(number, durable)
        if grammar.r.random() < 0.1:
            data = grammar.broken(fixed, data)
        messages.append((number, durable, data))
    return messages


# -- the clients -------------------------------------------------------------------------

def produce(address, queues, messages):
    """Send every message to every queue; return C{{queue: {number: outcome}}}."""
    client = EngineClient(address, "poison-producer", timeout=DEADLINE)
    try:
        links = {queue: client.open_link(SENDER, queue) for queue in queues}
        outcomes = {queue: {} for queue in queues}
        sent = 0
        for number, _durable, data in messages:
            for queue, link in links.items():
                while link.credit <= 0:
                    _settled(client, links, outcomes)
                link.send(data, settled=False, context=number)
            client.flush()
            sent += len(links)
            # A window, as a real producer has: the campaign is about what each
            # message does, not about one burst of 1,200 (the probe shares this
            # process's GIL with the clients, too).
            while sent - sum(len(o) for o in outcomes.values()) > WINDOW:
                _settled(client, links, outcomes)
        deadline = time.monotonic() + DEADLINE
        while any(len(o) < len(messages) for o in outcomes.values()):
            assert time.monotonic() < deadline, "the producer's outcomes did not all come"
            _settled(client, links, outcomes)
        for link in links.values():
            link.send(encode_message(END), settled=False, context="end")
        client.flush()
        return outcomes
    finally:
        client.close()


def _settled(client, links, outcomes):
    client.flush()
    by_link = {link: queue for queue, link in links.items()}
    for event in client.read():
        if isinstance(event, DeliveriesSettled):
            for number in event.deliveries:
                if number != "end":
                    outcomes[by_link[event.link]][number] = event.state


class AmqpConsumer(threading.Thread):
    """Receives and accepts from one queue until the end marker; records message ids."""

    def __init__(self, address, queue):
        super().__init__(daemon=True)
        self.address = address
        self.queue = queue
        self.ids = []
        self.error = None
        self.ready = threading.Event()
        self.done = threading.Event()

    def run(self):
        client = None
        try:
            client = EngineClient(self.address, "poison-amqp", timeout=DEADLINE)
            link = client.open_link(RECEIVER, self.queue)
            link.flow(1000)
            client.flush()
            self.ready.set()
            while not self.done.is_set():
                for event in client.read():
                    if isinstance(event, MessageReceived):
                        link.settle(event.delivery_id, Accepted())
                        message_id = parse_message(event.payload).properties.message_id
                        if message_id is None:
                            self.done.set()    # the end marker
                        else:
                            self.ids.append(message_id)
                        if link.credit < 500:
                            link.flow(1000)
                client.flush()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.ready.set()
            self.done.set()
            if client is not None:
                client.close(grace=1.0)


def stomp_ids(client):
    """The message ids a STOMP subscriber got before the end marker (and whether it
    got the marker)."""
    ids = []
    for frame in client.messages:
        if bytes(frame.body) == END:
            return ids, True
        ids.append(frame.headers.get("amqp-message-id"))
    return ids, False


# -- the test ----------------------------------------------------------------------------

def test_generator_covers_the_grammar():
    """The seeded generator yields the mix the campaign relies on: broken messages,
    durable ones, big ones, surrogates and bad UTF-8, described values and arrays."""
    messages = generate()
    blob = b"".join(data for _n, _d, data in messages)
    assert sum(1 for _n, durable, _d in messages if durable) > COUNT // 3
    assert any(len(data) > 200_000 for _n, _d, data in messages)
    for needle in (b"\x73\x00\x00\xd8\x00", b"\xc3\x28", b"\xed\xa0\x80", b"\x00\x53\x01",
                   b"\xe0", b"\x00\x53\x99", b"\x00\x53\x76", b"\x00\x53\x77"):
        assert needle in blob, needle
    assert generate() == messages


def test_fuzzed_messages_poison_no_queue(broker, probe):
    """Every accepted message reaches an AMQP receiver and a stomp.py subscriber in each
    ack mode exactly once, every refused one is refused on arrival with a named
    condition and reaches no one, the consumers stay connected, and the probe's round
    trip stays under 100 ms."""
    messages = generate()
    queues = {mode: f"queue://poison-{mode}" for mode in STOMP_MODES}
    queues["amqp"] = "queue://poison-amqp"
    stomp_address = broker.address("stomp")
    subscribers = {}
    for mode in STOMP_MODES:
        client = open_client(stomp_address, name=f"poison-{mode}")
        client.subscribe(f"/queue/poison-{mode}", ack=mode)
        subscribers[mode] = client
    amqp = AmqpConsumer(broker.address("jms"), queues["amqp"])
    amqp.start()
    assert amqp.ready.wait(DEADLINE) and amqp.error is None, amqp.error
    watcher = probe(broker)
    try:
        outcomes = produce(broker.address("jms"), list(queues.values()), messages)
        accepted = _check_outcomes(outcomes, len(messages))
        for mode, client in subscribers.items():
            collector = client.collector
            collector.wait_for(lambda: stomp_ids(client)[1], "the end marker", DEADLINE)
            ids, _ = stomp_ids(client)
            assert sorted(ids) == sorted(accepted), mode
            if mode != "auto":
                for frame in list(client.messages):
                    client.ack(frame, receipt=frame is client.messages[-1])
            assert collector.errors == [] and not collector.disconnected, mode
            assert client.connection.is_connected(), mode
        assert amqp.done.wait(DEADLINE)
        assert amqp.error is None, amqp.error
        assert sorted(amqp.ids) == sorted(accepted)
        watcher.assert_responsive(limit=0.1)
    finally:
        for client in subscribers.values():
            client.close()
        amqp.done.set()


def _check_outcomes(outcomes, count):
    """Each message got the same outcome on every queue: Accepted, or Rejected with a
    named condition. Returns the ids of the accepted ones."""
    first, *others = outcomes.values()
    for other in others:
        assert {n: type(s) for n, s in other.items()} == \
            {n: type(s) for n, s in first.items()}
    accepted, refused = [], []
    for number, state in first.items():
        if isinstance(state, Accepted):
            accepted.append(f"m-{number}")
        else:
            assert isinstance(state, Rejected), state
            assert str(state.error.condition) in (
                "amqp:decode-error", "amqp:resource-limit-exceeded"), state
            refused.append(number)
    assert len(accepted) + len(refused) == count
    assert refused, "the campaign must include refused messages"
    assert len(accepted) > count // 2
    return accepted
