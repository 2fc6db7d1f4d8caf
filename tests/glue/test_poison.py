"""Poison messages (S10.4): what an AMQP message STOMP cannot carry becomes, and that no
failure of one message or one connection reaches the core's dispatch or another
connection.

The real core, the real STOMP and AMQP adapters and engines on StringTransports, one
Clock (L{tests.glue.stomp_harness}). An AMQP producer sends hand-encoded message bytes;
STOMP subscribers in every ack mode receive them.
"""

import struct
import tracemalloc

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from mqgate.amqp.message import encode_message, parse_message
from mqgate.amqp.performatives import SENDER, Accepted, Close, Disposition, Rejected
from mqgate.amqp.types import Described, Symbol
from mqgate.core.broker import Broker, BrokerMessage
from mqgate.glue.stomp_mapping import UNMAPPED_HEADER, RenderLimits, message_to_headers
from mqgate.net.engine import Flusher

from tests.glue.stomp_harness import Gateway
from tests.net.test_amqp_adapter import attach

ACK_MODES = ("auto", "client", "client-individual")

# -- poison inputs, as raw message bytes -------------------------------------------------

_BODY_X = b"\x00\x53\x75\xa0\x01x"                          # data section b"x"
DATA_HOLDING_A_STRING = b"\x00\x53\x75\xa1\x03abc"          # a data section, str8 inside
TRUNCATED_BODY = b"\x00\x53\x75\xb0\x00\x00\x00\x10abc"     # vbin32 of 16, 3 given
UNKNOWN_SECTION = _BODY_X + b"\x00\x53\x99\x40"             # a section code 0x99
# application-properties {"p": char U+D800, "ok": "yes"}
SURROGATE_PROPERTY = (b"\x00\x53\x74\xc1\x12\x04\xa1\x01p\x73\x00\x00\xd8\x00"
                      b"\xa1\x02ok\xa1\x03yes" + _BODY_X)
# message-annotations {x-opt-a: described(1, "v")}
DESCRIBED_ANNOTATION = (b"\x00\x53\x72\xc1\x10\x02\xa3\x07x-opt-a\x00\x53\x01\xa1\x01v"
                        + _BODY_X)
# amqp-value holding a string that is not UTF-8
BAD_UTF8_VALUE = b"\x00\x53\x77\xa1\x02\xc3\x28"


def described_array(count):
    """An array32 of C{count} described smallulongs: 1 byte each on the wire, one
    Python object each when decoded."""
    body = b"\x00\x53\x01\x53" + b"\x07" * count
    return b"\xf0" + struct.pack(">II", 4 + len(body), count) + body


def app_properties(*pairs):
    """An application-properties section from already-encoded C{(key, value)} pairs."""
    items = b"".join(key + value for key, value in pairs)
    return b"\x00\x53\x74\xd1" + struct.pack(">II", 4 + len(items), 2 * len(pairs)) + items


def str8(text):
    raw = text.encode()
    return bytes([0xA1, len(raw)]) + raw


# -- helpers -----------------------------------------------------------------------------

@pytest.fixture
def gateway(tmp_path):
    return Gateway(tmp_path)


def produce(gateway, *payloads, address="queue://q"):
    """Send C{payloads} from a new AMQP producer; return the producer peer."""
    peer = gateway.opened(port=40500 + len(gateway.factory.connections))
    link = attach(peer, SENDER, address)
    for payload in payloads:
        link.send(payload, settled=False)
    peer.pump()
    gateway.clock.advance(0)
    peer.pump()
    return peer


def outcomes(peer):
    return [d.state for d in peer.performatives(Disposition) if d.state is not None]


def header(frame, name):
    return frame.get(name)


# -- refused on arrival ------------------------------------------------------------------

@pytest.mark.parametrize("payload", [TRUNCATED_BODY, UNKNOWN_SECTION,
                                     _BODY_X + b"\x00\x53\x77\x40"],
                         ids=["truncated", "unknown-section", "data-then-value"])
def test_a_message_whose_sections_do_not_parse_is_refused_and_never_queued(
        gateway, payload):
    """A truncated body, an unknown section or a body mixing data and amqp-value is
    rejected with amqp:decode-error, and no consumer ever sees it (never both)."""
    stomp = gateway.stomp()
    stomp.subscribe("/queue/q")
    producer = produce(gateway, payload)
    (state,) = outcomes(producer)
    assert isinstance(state, Rejected)
    assert str(state.error.condition) == "amqp:decode-error"
    assert stomp.messages() == []
    assert gateway.broker.queue("q").messages_in == 0
    assert producer.performatives(Close) == []


def test_a_message_of_too_many_sections_is_refused(gateway):
    """A body of more sections than any client sends (each costs a step wherever the
    message is read) is refused on arrival with amqp:resource-limit-exceeded."""
    producer = produce(gateway, b"\x00\x53\x76\x45" * 1100)
    (state,) = outcomes(producer)
    assert str(state.error.condition) == "amqp:resource-limit-exceeded"
    assert gateway.broker.queue("q").messages_in == 0


# -- delivered with the unmappable part left out -----------------------------------------

@pytest.mark.parametrize("ack", ACK_MODES)
@pytest.mark.parametrize("payload,unmapped,body", [
    (DATA_HOLDING_A_STRING, "body", b""),
    (SURROGATE_PROPERTY, "application-properties.p", b"x"),
    (BAD_UTF8_VALUE, "body", b""),
], ids=["data-holding-string", "surrogate-char-property", "bad-utf8-value"])
def test_a_poison_message_reaches_every_ack_mode_flagged(gateway, ack, payload,
                                                         unmapped, body):
    """The producer gets Accepted and stays connected; the STOMP subscriber gets the
    message once, with the part it cannot carry named in mqgate-unmapped; after its
    ACK (or at once, ack:auto) nothing is left in flight."""
    stomp = gateway.stomp()
    stomp.subscribe("/queue/q", ack=ack)
    producer = produce(gateway, payload)
    assert [type(s) for s in outcomes(producer)] == [Accepted]
    assert producer.performatives(Close) == []
    (message,) = stomp.messages()
    assert header(message, UNMAPPED_HEADER) == unmapped
    assert message.body == body
    if payload is SURROGATE_PROPERTY:
        assert header(message, "ok") == "yes"
    queue = gateway.broker.queue("q")
    if ack != "auto":
        assert queue.in_flight == 1
        stomp.send("ACK", f"id:{header(message, 'ack')}")
    assert (queue.in_flight, queue.depth, queue.messages_out) == (0, 0, 1)
    assert not stomp.closed and stomp.errors() == []


def test_a_described_annotation_and_nested_properties_do_not_stop_a_message(gateway):
    """A described message annotation, a map, a list and a described value as
    application properties: the message is delivered, the simple properties as
    headers, the others named in mqgate-unmapped."""
    stomp = gateway.stomp()
    stomp.subscribe("/queue/q")
    payload = encode_message(
        b"body", message_annotations={Symbol("x-opt-a"): Described(1, "v")},
        application_properties={"m": {"a": 1}, "l": [1, 2], "d": Described(7, "x"),
                                "n": 5, "s": "t"})
    produce(gateway, DESCRIBED_ANNOTATION, payload)
    first, second = stomp.messages()
    assert first.body == b"x" and header(first, UNMAPPED_HEADER) is None
    assert second.body == b"body"
    assert (header(second, "n"), header(second, "s")) == ("5", "t")
    assert header(second, UNMAPPED_HEADER) == (
        "application-properties.m,application-properties.l,application-properties.d")


@pytest.mark.parametrize("ack", ACK_MODES)
def test_a_poison_message_left_unacknowledged_goes_to_the_next_subscriber(gateway, ack):
    """A subscriber that leaves with a poison message unacknowledged gives it back
    (connection_lost does not fail): the next subscriber gets it once, marked
    redelivered, and the first leaves no consumer behind."""
    first = gateway.stomp()
    first.subscribe("/queue/q", ack="client")
    produce(gateway, DATA_HOLDING_A_STRING, SURROGATE_PROPERTY)
    assert len(first.messages()) == 2
    second = gateway.stomp()
    second.subscribe("/queue/q", ack=ack)
    first.lose()
    queue = gateway.broker.queue("q")
    assert len(queue.consumers) == 1
    got = second.messages()
    assert [header(m, "redelivered") for m in got] == ["true", "true"]
    assert [header(m, UNMAPPED_HEADER) for m in got] == [
        "body", "application-properties.p"]
    assert queue.in_flight == (0 if ack == "auto" else 2)


def test_poison_waiting_for_a_paused_transport_is_written_when_it_resumes(gateway):
    """Deliveries filed in the egress queues (the consumer's socket was full) are
    rendered when the egress drains them: the poison one and the one behind it both
    arrive, in order."""
    stomp = gateway.stomp()
    stomp.subscribe("/queue/q", ack="client")
    stomp.protocol.pauseProducing()
    produce(gateway, DATA_HOLDING_A_STRING, encode_message(b"fine"))
    assert stomp.messages() == []
    stomp.protocol.resumeProducing()
    gateway.clock.advance(0)
    assert [m.body for m in stomp.messages()] == [b"", b"fine"]


# -- the core boundary -------------------------------------------------------------------

class Failing:
    """A consumer target whose deliver raises, as a glue bug would."""

    def __init__(self):
        self.calls = 0

    def deliver(self, delivery):
        self.calls += 1
        raise RuntimeError("a bug in a glue")


class Taking:
    def __init__(self, consumer=None):
        self.got = []
        self.consumer = consumer

    def deliver(self, delivery):
        self.got.append(delivery)


def message(n):
    return BrokerMessage(parse_message(encode_message(f"m{n}".encode())))


@pytest.mark.parametrize("presettled", [False, True])
def test_a_target_that_raises_does_not_reach_the_producer_or_lose_the_message(
        presettled):
    """A consumer target raising in deliver: the producer's send returns, the queue's
    counts stay consistent, and the message goes to another consumer (an at-most-once
    one included), once."""
    broker = Broker(task.Clock())
    bad = Failing()
    bad_consumer = broker.open_consumer("queue://q", bad, presettled=presettled)
    bad_consumer.set_credit(10)
    good = Taking()
    good_consumer = broker.open_consumer("queue://q", good, presettled=presettled)
    producer = broker.open_producer("queue://q")
    producer.send(message(1))
    producer.send(message(2))
    queue = broker.queue("q")
    good_consumer.set_credit(10)
    assert [d.message.payload.data for d in good.got] == [
        encode_message(b"m1"), encode_message(b"m2")]
    assert bad.calls == 1 and bad_consumer.credit == 0
    assert queue.in_flight == (0 if presettled else 2)
    assert queue.depth == 0 and bad_consumer.unsettled == 0


def test_targets_that_all_raise_leave_the_message_waiting():
    """When every consumer's target raises, the dispatch run ends (no loop) and the
    message waits in the queue for a consumer that can take it."""
    broker = Broker(task.Clock())
    targets = [Failing(), Failing()]
    consumers = [broker.open_consumer("queue://q", t) for t in targets]
    for consumer in consumers:
        consumer.set_credit(5)
    broker.open_producer("queue://q").send(message(1))
    queue = broker.queue("q")
    assert [t.calls for t in targets] == [1, 1]
    assert (queue.depth, queue.in_flight) == (1, 0)
    late = Taking()
    broker.open_consumer("queue://q", late).set_credit(1)
    assert len(late.got) == 1


# -- the per-turn flusher ----------------------------------------------------------------

def test_a_connection_whose_flush_raises_does_not_skip_the_others():
    """The Flusher flushes every marked connection even when one of them raises; that
    one is dropped (its deliveries go back to their queues when it is lost)."""
    clock = task.Clock()
    flusher = Flusher(clock)
    flushed = []

    class Connection:
        def __init__(self, name, fails=False):
            self.name = name
            self.peer = name
            self.fails = fails
            self.transport = StringTransport()

        def flush(self):
            if self.fails:
                raise RuntimeError("broken")
            flushed.append(self.name)

    broken, first, second = Connection("broken", True), Connection("a"), Connection("b")
    for connection in (first, broken, second):
        flusher.mark(connection)
    clock.advance(0)
    assert sorted(flushed) == ["a", "b"]
    assert broken.transport.disconnecting and not first.transport.disconnecting


# -- memory: rendering costs what the message costs --------------------------------------

def test_a_large_array_property_renders_into_a_small_header():
    """A 200 KB array of described values as an application property costs a
    mqgate-unmapped entry, not megabytes of headers (nor their decoding)."""
    payload = app_properties((str8("big"), described_array(200_000)),
                             (str8("k"), str8("v"))) + _BODY_X
    encoded = parse_message(payload)
    tracemalloc.start()
    try:
        headers, body = message_to_headers(encoded)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dict(headers) == {"k": "v", UNMAPPED_HEADER: "application-properties.big"}
    assert body == b"x"
    assert peak < 64 * 1024


@pytest.mark.parametrize("value", [
    described_array(200_000),
    b"\xd0" + struct.pack(">II", 4 + 4 * 100_000, 100_000) + b"\x00\x53\x01\x40" * 100_000,
], ids=["array", "list"])
def test_a_large_described_body_renders_within_a_bound(value):
    """An amqp-value of 100,000s of described values: the JSON rendering stays within a
    few times the message's size (or the body is left out and flagged)."""
    encoded = parse_message(b"\x00\x53\x77" + value)
    tracemalloc.start()
    try:
        headers, body = message_to_headers(encoded)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(value)
    assert body == b"" and dict(headers)[UNMAPPED_HEADER] == "body" \
        or len(body) < 10 * len(value)


def test_header_values_and_totals_are_capped():
    """A property longer than max_value, and the properties past max_total, are left
    out and named; the rest arrive (each property looked at costs at least 16)."""
    encoded = parse_message(encode_message(b"", application_properties={
        "a": "x" * 50, "b": "y" * 20, "c": "z" * 20, "d": "w" * 20}))
    headers, _body = message_to_headers(encoded, limits=RenderLimits(max_value=40,
                                                                     max_total=70))
    assert dict(headers) == {"b": "y" * 20, "c": "z" * 20, UNMAPPED_HEADER:
                             "application-properties.a,application-properties.d"}


def test_a_huge_property_map_is_walked_only_as_far_as_the_budget():
    """100,000 compound properties: rendering stops once max_total is used up (each
    costs at least 16 of it) and names the rest as application-properties."""
    pairs = [(str8(f"k{n}"), b"\x45") for n in range(100_000)]     # list0 values
    encoded = parse_message(app_properties(*pairs) + _BODY_X)
    headers, body = message_to_headers(encoded)
    flagged = dict(headers)[UNMAPPED_HEADER]
    assert flagged.endswith("...") and len(flagged) <= 1024 + 4
    assert body == b"x"


def test_a_json_body_with_more_values_than_allowed_is_left_out():
    """An amqp-value list of more values than max_json_values is left out, flagged,
    once the budget is spent (the time one message may hold the reactor)."""
    value = b"\xd0" + struct.pack(">II", 4 + 2 * 500, 500) + b"\x54\x01" * 500
    encoded = parse_message(b"\x00\x53\x77" + value)
    headers, body = message_to_headers(encoded, limits=RenderLimits(max_json_values=100))
    assert (body, dict(headers)[UNMAPPED_HEADER]) == (b"", "body")
    _headers, body = message_to_headers(encoded, limits=RenderLimits(max_json_values=501))
    assert body == b"[" + b",".join([b"1"] * 500) + b"]"


# -- the grammar of the hostile campaign, in memory ----------------------------------------

def test_rendering_never_raises_on_grammar_fuzzed_messages():
    """Thousands of messages from the hostile campaign's grammar (every AMQP type,
    described values, arrays, bad UTF-8, surrogates, broken sections): every one that
    parses renders into a MESSAGE frame that encodes, whose headers are UTF-8 without
    NUL, and whose mapped text stays within the limits."""
    from mqgate.stomp.frames import encode_frame
    from tests.hostile.test_poison import generate

    limits = RenderLimits()
    rendered = 0
    for seed in range(4):
        for _number, _durable, data in generate(seed=seed, count=400):
            try:
                encoded = parse_message(data)
            except Exception:   # noqa: BLE001 - refused on arrival, not our business
                continue
            headers, body = message_to_headers(encoded, limits=limits)
            frame = encode_frame("MESSAGE", headers, body)
            head = frame[:frame.index(b"\n\n")]
            assert b"\x00" not in head
            assert sum(len(n) + len(v) + 2 for n, v in headers) <= \
                limits.max_total + 2048
            rendered += 1
    assert rendered > 1200
