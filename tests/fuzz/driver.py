"""
A mutation fuzzer for mqgate's client-facing parsers (S10.4): AMQP, STOMP, the port
mapper and protocol sniffing, one driver for all four.

Usage (from the checkout, with the test virtualenv)::

    python -m tests.fuzz.driver                       # 1,000,000 inputs per target
    python -m tests.fuzz.driver --runs 20000 --targets amqp,stomp --jobs 2
    python -m tests.fuzz.driver --replay tests/fuzz/results/amqp/crash-1a2b3c4d-0.bin

``make fuzz`` runs the first line (``FUZZ_RUNS``, ``FUZZ_TARGETS``, ``FUZZ_JOBS``,
``FUZZ_SEED`` shorten or change it); tests/fuzz/README.md says how long it takes.

What it does
------------
Each target has a seed corpus of valid client input (for AMQP: whole client
conversations recorded by running mqgate's client engine against its server engine in
memory) and a contract. The fuzzer draws a seed, applies a stack of mutations (bit
flips, byte insertion and deletion, chunk duplication, splicing with another seed,
dictionary tokens, interesting integers written over length fields, truncation), cuts
the result into a random sequence of feed calls, and runs the target on it:

- the input is fed chunk by chunk to a fresh engine, with a small "application" that
  answers the engine's events the way the broker's glue does (authenticate, open,
  begin, attach, grant credit, settle, deliver, receipt), so that the input reaches
  the states a real conversation reaches;
- anything the target raises that its contract does not allow is a I{crash} (the
  contracts are in each target's docstring: the engines' C{receive_data} never raises
  and ends a bad connection with an error of its own; the port mapper's parsers raise
  only their named errors; the sniffer always answers and never changes its mind);
- an input that uses more than C{--timeout} seconds of CPU (C{setitimer(ITIMER_PROF)},
  so a loaded machine does not make hangs) is a I{hang}; a worker stuck where that
  signal cannot interrupt it (in C code) is killed by the parent and its input, kept
  in shared memory, is reported as a hang too.

Inputs are drawn from C{random.Random} seeded by (C{--seed}, worker): the same seed and
number of jobs give the same inputs. An input whose behaviour (the events and the error
it caused, see C{Target.run}) was not seen before joins the worker's corpus, a cheap
substitute for coverage feedback.

Findings are saved under C{--results} (default tests/fuzz/results/, ignored by git):
C{<target>/<kind>-<signature>-<n>.bin} holds the input, C{.txt} beside it the feed cuts,
the traceback and the command that replays it. At most a few examples are kept per
signature (the exception type and the innermost mqgate line); the summary counts them all.
"""

import argparse
import faulthandler
import hashlib
import multiprocessing
import os
import random
import resource
import signal
import struct
import sys
import time
import traceback
import zlib
from multiprocessing import shared_memory
from pathlib import Path

__all__ = ["TARGETS", "Fuzzer", "Finding", "run_inputs", "replay", "main"]

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results"
REGRESSIONS = HERE / "regressions"

#: The longest input the mutator makes (bigger seeds are left alone by growth).
MAX_INPUT = 1 << 16
#: Examples saved per crash signature (all are counted).
KEEP_PER_SIGNATURE = 3
#: Inputs a worker's corpus may grow to (new behaviours beyond it replace old ones).
MAX_CORPUS = 4000
#: Address space a worker may use: a parser that allocates what a length field claims
#: fails with MemoryError (a crash) instead of taking the machine down.
WORKER_MEMORY = 3 << 30


class Hang(BaseException):
    """An input ran past its CPU budget (a BaseException: engines catch Exception)."""


class Violation(AssertionError):
    """A target's contract was broken without an exception from the code under test
    (an output that does not parse, a sniffer that changed its mind ...)."""


# ======================================================================================
# Mutations
# ======================================================================================

_INTERESTING_8 = (0, 1, 2, 0x7F, 0x80, 0xFE, 0xFF)
_INTERESTING_16 = (0, 1, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF)
_INTERESTING_32 = (0, 1, 7, 8, 9, 0xFF, 0x100, 0x1FF, 0x200, 0x7FFF, 0xFFFF, 0x10000,
                   0x100000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
_INTERESTING_64 = (0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x100000000, 0x7FFFFFFFFFFFFFFF,
                   0x8000000000000000, 0xFFFFFFFFFFFFFFFF)
#: Decimal numbers written over textual length fields (content-length, ports ...).
_INTERESTING_TEXT = (b"0", b"1", b"-1", b"+1", b"00", b"65535", b"65536", b"2147483647",
                     b"2147483648", b"4294967295", b"4294967296", b"9" * 19, b"9" * 40,
                     b"1e3", b"0x10", b" 1", b"1 ", b"\xc2\xb2", b"\xd9\xa3", b"",
                     b"1" * 5000)


class Mutator:
    """Makes one mutated input from a corpus, with a target's dictionary and fields.

    @param rng: the C{random.Random} all choices come from.
    @param target: supplies C{dictionary} (tokens worth inserting) and
        C{length_fields(data)} (where counts and sizes sit in an input).
    """

    def __init__(self, rng, target):
        self.rng = rng
        self.target = target
        self.operators = (
            (self.flip_bits, 4), (self.set_byte, 3), (self.insert_bytes, 3),
            (self.delete_bytes, 3), (self.duplicate_chunk, 2), (self.splice, 2),
            (self.insert_token, 3), (self.replace_token, 2), (self.length_field, 4),
            (self.truncate, 1), (self.swap_chunks, 1),
        )
        self._weights = [w for _, w in self.operators]

    def mutate(self, data, corpus):
        """A new input: 1 to 16 stacked mutations of C{data} (fewer more often).

        Half of the time, for a target that knows its input's structure (AMQP frames,
        STOMP frames), the mutations are the target's own: they change one field or
        one frame and keep the rest well-formed, so the input gets past the framing
        checks to the states behind them."""
        out = bytearray(data)
        rounds = 1 << self.rng.randrange(5)
        structured = getattr(self.target, "structured_mutation", None)
        if structured is not None and self.rng.random() < 0.5:
            for _ in range(self.rng.randint(1, rounds)):
                out = bytearray(structured(bytes(out), self, corpus))
            return bytes(out[:MAX_INPUT])
        for _ in range(self.rng.randint(1, rounds)):
            op = self.rng.choices(self.operators, self._weights)[0][0]
            out = op(out, corpus)
            if len(out) > MAX_INPUT:
                del out[MAX_INPUT:]
        return bytes(out)

    def byte_mutation(self, data):
        """One unstructured mutation of C{data} that stays local (no splicing)."""
        op = self.rng.choice((self.flip_bits, self.set_byte, self.insert_bytes,
                              self.delete_bytes, self.duplicate_chunk, self.insert_token,
                              self.length_field, self.truncate))
        return bytes(op(bytearray(data), [data]))

    def cuts(self, size):
        """Where to split an input of C{size} bytes into feed calls (sorted offsets)."""
        r = self.rng.random()
        if r < 0.4 or size < 2:
            return []
        if r < 0.45 and size <= 512:
            return list(range(1, size))             # one byte per call
        count = self.rng.randint(1, min(16, size - 1))
        return sorted(set(self.rng.randrange(1, size) for _ in range(count)))

    # -- the operators (each takes and returns a bytearray) ------------------------------

    def _pos(self, out, end=False):
        return self.rng.randrange(len(out) + (1 if end else 0)) if out or end else 0

    def flip_bits(self, out, corpus):
        if out:
            for _ in range(self.rng.choice((1, 1, 2, 4))):
                out[self._pos(out)] ^= 1 << self.rng.randrange(8)
        return out

    def set_byte(self, out, corpus):
        if out:
            out[self._pos(out)] = self.rng.choice(
                (self.rng.randrange(256), 0, 0xFF, 0x0A, 0x00, 0x40, 0x7F, 0x80))
        return out

    def insert_bytes(self, out, corpus):
        pos = self._pos(out, end=True)
        count = self.rng.choice((1, 1, 2, 4, 8, 64))
        if self.rng.random() < 0.5:
            chunk = bytes(self.rng.randrange(256) for _ in range(count))
        else:
            chunk = bytes((self.rng.randrange(256),)) * count
        out[pos:pos] = chunk
        return out

    def delete_bytes(self, out, corpus):
        if out:
            pos = self._pos(out)
            del out[pos:pos + self.rng.choice((1, 1, 2, 4, 16, 128))]
        return out

    def duplicate_chunk(self, out, corpus):
        if out:
            start = self._pos(out)
            chunk = out[start:start + self.rng.choice((1, 4, 16, 64, 512))]
            times = self.rng.choice((1, 1, 2, 8))
            pos = self._pos(out, end=True)
            out[pos:pos] = chunk * times
        return out

    def swap_chunks(self, out, corpus):
        if len(out) > 4:
            a, b = sorted(self.rng.sample(range(len(out)), 2))
            size = self.rng.randint(1, min(64, b - a))
            out[a:a + size], out[b:b + size] = out[b:b + size], out[a:a + size]
        return out

    def splice(self, out, corpus):
        other = self.rng.choice(corpus)
        if not out or not other:
            return out
        return out[:self._pos(out, end=True)] + other[self.rng.randrange(len(other)):]

    def insert_token(self, out, corpus):
        token = self.rng.choice(self.target.dictionary)
        pos = self._pos(out, end=True)
        out[pos:pos] = token
        return out

    def replace_token(self, out, corpus):
        """Swap one occurrence of a dictionary token for another token."""
        token = self.rng.choice(self.target.dictionary)
        start = out.find(token, self._pos(out)) if out else -1
        if start < 0:
            return self.insert_token(out, corpus)
        out[start:start + len(token)] = self.rng.choice(self.target.dictionary)
        return out

    def length_field(self, out, corpus):
        """Write an interesting number (or a near neighbour of the current one) over a
        count or size field of the input."""
        fields = self.target.length_fields(bytes(out))
        if not fields:
            return self.set_byte(out, corpus)
        pos, width = self.rng.choice(fields)
        if width == 0:                              # a decimal number: replace its digits
            end = pos
            while end < len(out) and 0x30 <= out[end] <= 0x39:
                end += 1
            out[pos:end] = self.rng.choice(_INTERESTING_TEXT)
            return out
        current = int.from_bytes(out[pos:pos + width], "big")
        table = {1: _INTERESTING_8, 2: _INTERESTING_16, 4: _INTERESTING_32}.get(
            width, _INTERESTING_64)
        if self.rng.random() < 0.3:
            value = current + self.rng.choice((-8, -4, -1, 1, 4, 8, 16))
        else:
            value = self.rng.choice(table)
        out[pos:pos + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
        return out

    def truncate(self, out, corpus):
        if out:
            del out[self._pos(out):]
        return out


# ======================================================================================
# Targets
# ======================================================================================

class Target:
    """One thing to fuzz.

    @ivar name: the target's name on the command line.
    @ivar dictionary: byte strings worth inserting (keywords, markers, constructors).
    """

    name = None
    dictionary = (b"\x00", b"\n")

    def seeds(self, include_open=True):
        """The seed corpus: C{(data, cuts)} pairs, the valid inputs and then the
        regression inputs saved under tests/fuzz/regressions/<name>/ (without the
        C{open-*} ones, bugs not fixed yet, unless C{include_open})."""
        seeds = [s if isinstance(s, tuple) else (s, []) for s in self.valid_seeds()]
        return seeds + regression_seeds(self.name, include_open)

    def valid_seeds(self):
        """Valid inputs: bytes, or C{(bytes, cuts)} when the input must arrive in
        pieces to be valid (a client that waits for the answer to an attach before
        it transfers)."""
        raise NotImplementedError

    def length_fields(self, data):
        """C{[(offset, width)]} of size and count fields in C{data}; width 0 is a run
        of decimal digits."""
        return []

    def run(self, data, cuts):
        """Run the input, fed in pieces cut at C{cuts}.

        @return: a hashable summary of what happened (for corpus feedback).
        @raise Violation: or any exception: the contract is broken (a crash).
        """
        raise NotImplementedError


def pieces(data, cuts):
    """C{data} cut at the sorted offsets C{cuts} (bytes each)."""
    start = 0
    for cut in cuts:
        if start < cut <= len(data):
            yield data[start:cut]
            start = cut
    yield data[start:]


def regression_files(name, include_open=True):
    """The saved inputs tests/fuzz/regressions/<name>/*.bin, in name order. Those named
    C{open-*} crash code not fixed yet; the others once did and must not again."""
    folder = REGRESSIONS / name
    if not folder.is_dir():
        return []
    return [path for path in sorted(folder.glob("*.bin"))
            if include_open or not path.name.startswith("open-")]


def regression_seeds(name, include_open=True):
    """The regression inputs with their cuts (from the .txt beside each, as the fuzzer
    saved it)."""
    return [(path.read_bytes(), read_cuts(path))
            for path in regression_files(name, include_open)]


def read_cuts(path):
    """The cuts recorded in the .txt file beside a saved input (none if absent)."""
    info = Path(path).with_suffix(".txt")
    if info.exists():
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("cuts:"):
                return [int(c) for c in line[5:].split(",") if c.strip()]
    return []


# -- AMQP -----------------------------------------------------------------------------------

class AmqpTarget(Target):
    """The AMQP 1.0 server engine (mqgate.amqp.connection) with a broker-like application.

    Contract (the engine's module docstring, S10.4): C{receive_data} never raises; a
    connection the engine finishes has C{error} set, or the peer closed it
    (L{ConnectionClosed}), or the application refused the login. The application's
    answers to events (C{sasl_outcome}, C{open}, C{begin}, C{attach}, C{flow},
    C{send}, C{settle}, C{drained}), called in the states the broker's glue calls them
    in, never raise; neither do C{tick} and C{data_to_send}; and everything written
    parses as protocol headers and frames. C{parse_message} of a received payload may
    raise only a L{ProtocolError} (the glue rejects the delivery with it).
    """

    name = "amqp"
    #: The broker's default frame size is 1 MiB; a small one makes multi-frame
    #: transfers (and their reassembly) part of the seeds without huge inputs.
    MAX_FRAME_SIZE = 2048

    def __init__(self):
        from mqgate.amqp import codec, events, message, performatives
        from mqgate.amqp.connection import Connection, ConnectionState
        from mqgate.amqp.link import LinkState
        from mqgate.amqp.session import SessionState
        from mqgate.amqp.types import Described
        from mqgate.errors import ProtocolError
        self.Described = Described
        self.codec = codec
        self.ev = events
        self.parse_message = message.parse_message
        self.encode_message = message.encode_message
        self.p = performatives
        self.Connection = Connection
        self.ConnectionState = ConnectionState
        self.LinkState = LinkState
        self.SessionState = SessionState
        self.ProtocolError = ProtocolError
        self.dictionary = (
            b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00", b"\x00\x53", b"\x00\x53\x10",
            b"\x00\x53\x11", b"\x00\x53\x12", b"\x00\x53\x13", b"\x00\x53\x14",
            b"\x00\x53\x15", b"\x00\x53\x16", b"\x00\x53\x17", b"\x00\x53\x18",
            b"\x00\x53\x41", b"\x00\x53\x24", b"\x00\x53\x25", b"\x00\x53\x27",
            b"\x00\x53\x28", b"\x00\x53\x29", b"\x00\x53\x70", b"\x00\x53\x73",
            b"\x00\x53\x74", b"\x00\x53\x75", b"\x00\x53\x77", b"\x00\x53\x78",
            b"\x40", b"\x41", b"\x42", b"\x43", b"\x44", b"\x45", b"\xa0\x00", b"\xa1\x01a",
            b"\xa3\x05PLAIN", b"\xb0\xff\xff\xff\xff", b"\xc0\x00\x00",
            b"\xd0\x00\x00\x00\x04\x00\x00\x00\x00",
            b"\xc1\x01\x00", b"\xe0\x02\x01\x40", b"\xf0\xff\xff\xff\xff\x00\x00\x00\x01\x40",
            b"\x00\x00\x00\x08\x02\x00\x00\x00", b"\x00\x00\x00\x08\x02\x00\xff\xff",
            b"\x52\xff", b"\x70\xff\xff\xff\xff", b"\x98" + bytes(16), b"\x73\x00\x00\xd8\x00",
        )

    # -- seeds: client conversations recorded against the server engine ----------------

    def _server(self):
        return self.Connection(server=True, container_id="fuzz-broker",
                               max_frame_size=self.MAX_FRAME_SIZE, idle_timeout=60.0)

    def _messages(self):
        """Messages of many shapes: every body section kind, the bare-message sections
        with many value types, and one that needs several frames."""
        from uuid import UUID
        from mqgate.amqp.message import AMQP_SEQUENCE, Header, Properties
        from mqgate.amqp.types import (
            Array, Byte, Char, Described, Float32, Int, Long, Short, Symbol, Timestamp,
            UByte, UInt, ULong, UShort)
        props = Properties(message_id="m-1", user_id=b"admin", to="q1", subject="s",
                           reply_to="reply", correlation_id=ULong(7),
                           content_type=Symbol("text/plain"),
                           creation_time=Timestamp(1700000000000), group_id="g")
        app = {"s": "text", "i": Int(-5), "l": Long(1 << 40), "b": True, "n": None,
               "f": 1.5, "f32": Float32(0.5), "ub": UByte(255), "us": UShort(65535),
               "ui": UInt(1 << 31), "by": Byte(-1), "sh": Short(-300), "c": Char("x"),
               "ts": Timestamp(0), "u": UUID(int=1), "bin": b"\x00\x01", "sym": Symbol("y")}
        annotations = {Symbol("x-opt-jms-msg-type"): UByte(5), Symbol("x-opt-to"): "q1"}
        yield self.encode_message(b"plain data")
        yield self.encode_message("a string value", header=Header(durable=True, priority=9,
                                                                  ttl=UInt(60000)),
                                  properties=props, application_properties=app,
                                  message_annotations=annotations)
        yield self.encode_message(Long(42))
        yield self.encode_message([1, "two", b"3", None, [Symbol("a")]])
        yield self.encode_message({"k": "v", Symbol("s"): Int(1), Long(3): [1.0]})
        yield self.encode_message(Described(Symbol("custom"), "payload"))
        yield self.encode_message(Array([Int(1), Int(2), Int(3)]))
        yield self.encode_message([1, 2], body_type=AMQP_SEQUENCE)
        yield self.encode_message(UUID(int=12345))
        yield self.encode_message(bytes(range(256)) * 20, properties=Properties(
            message_id=UUID(int=3), to="q1"))           # several frames at 2 KiB

    def _pump(self, client, server, app, stream, cuts, rounds=50):
        for _ in range(rounds):
            data = client.data_to_send()
            if data:
                stream += data
                cuts.append(len(stream))
                app.handle(server.receive_data(data))
            answer = server.data_to_send()
            if answer:
                self._client_events += client.receive_data(answer)
            if not data and not answer:
                break

    def _conversation(self, credentials, script):
        client = self.Connection(server=False, container_id="fuzz-client",
                                 credentials=credentials, idle_timeout=30.0)
        server = self._server()
        app = AmqpApplication(self, server)
        self._client_events = []
        stream, cuts = bytearray(), []

        def pump():
            self._pump(client, server, app, stream, cuts)
        pump()
        script(client, pump)
        pump()
        if server.error is not None:
            raise RuntimeError(f"a seed conversation failed: {server.error}")
        return bytes(stream), cuts[:-1]

    def valid_seeds(self):
        p = self.p
        messages = list(self._messages())

        def sender(client, pump):
            session = client.begin_session()
            pump()
            link = session.attach_link("fuzz-sender", p.SENDER)
            link.attach(source=p.Source(address="fuzz-client"),
                        target=p.Target(address="q1"))
            pump()
            for i, payload in enumerate(messages):
                if link.credit:
                    link.send(payload, settled=i % 3 == 0)
                    pump()
            link.detach(closed=True)
            pump()
            session.end()
            pump()
            client.close()

        def receiver(client, pump):
            session = client.begin_session()
            pump()
            link = session.attach_link("fuzz-receiver", p.RECEIVER)
            link.attach(source=p.Source(address="q1", durable=1,
                                        filter={p.Symbol("jms-selector"): "a = 1"}),
                        target=p.Target())
            pump()
            link.flow(5)
            pump()
            outcomes = [p.Accepted(), p.Rejected(error=p.Error(p.Symbol("x:y"), "no")),
                        p.Released(), p.Modified(delivery_failed=True,
                                                 undeliverable_here=True)]
            received = [e for e in self._client_events
                        if isinstance(e, self.ev.MessageReceived)]
            for i, event in enumerate(received):
                link.settle(event.delivery_id, outcomes[i % len(outcomes)])
            pump()
            link.flow(3, drain=True)
            pump()
            link.detach(closed=False)
            pump()
            client.close(p.Symbol("amqp:internal-error"), "bye")

        def two_sessions(client, pump):
            links = []
            for n in range(2):
                session = client.begin_session()
                pump()
                link = session.attach_link(f"fuzz-{n}", p.SENDER)
                link.attach(source=p.Source(), target=p.Target(address=f"q{n}"),
                            snd_settle_mode=p.SND_SETTLED)
                links.append(link)
            pump()
            for link in links:
                if link.credit:
                    link.send(messages[1], settled=True)
            pump()
            client.close()

        return [
            self._conversation(("admin", "admin"), sender),
            self._conversation("ANONYMOUS", receiver),
            self._conversation(None, two_sessions),
        ]

    # -- mutation help ------------------------------------------------------------------

    def length_fields(self, data):
        """Frame sizes (walking the frames from the start) and the sizes and counts of
        variable-width encodings (found by their constructor byte)."""
        fields = []
        pos, end = 0, len(data)
        while pos + 8 <= end and len(fields) < 64:
            if data[pos:pos + 4] == b"AMQP":
                pos += 8
                continue
            fields.append((pos, 4))
            fields.append((pos + 4, 1))             # data offset
            fields.append((pos + 6, 2))             # channel
            size = int.from_bytes(data[pos:pos + 4], "big")
            if size < 8:
                break
            pos += size
        for i in range(len(data) - 1):
            byte = data[i]
            if byte in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
                fields.append((i + 1, 1))
            elif byte in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0) and i + 5 <= len(data):
                fields.append((i + 1, 4))
            elif byte == 0x52 or byte == 0x53:         # smalluint/smallulong: handles, ids
                fields.append((i + 1, 1))
            elif byte == 0x70:
                fields.append((i + 1, 4))
        return fields

    def interesting_values(self):
        """Field values worth trying in a performative: bounds of every integer type,
        empty and long strings, every compound, described values, wrong types."""
        if getattr(self, "_values", None) is not None:
            return self._values
        from uuid import UUID
        from mqgate.amqp.types import (
            Array, Byte, Char, Described, Float32, Int, Long, Symbol, Timestamp, UByte,
            UInt, ULong, UShort)
        candidates = [
            None, True, False, UByte(0), UByte(255), UShort(65535), UInt(0), UInt(1),
            UInt(2), UInt(255), UInt(256), UInt(0x7FFFFFFF), UInt(0x80000000),
            UInt(0xFFFFFFFE), UInt(0xFFFFFFFF), ULong(0), ULong(0xFFFFFFFFFFFFFFFF),
            ULong(1 << 40), Byte(-128), Int(-1), Int(-(1 << 31)), Long(-(1 << 63)),
            Long(1 << 62), 1.5, float("nan"), Float32(-0.0), Char("\U0010ffff"),
            Timestamp(-1), Timestamp(1 << 62), UUID(int=0), "", "q1", "x" * 300,
            "\u00e9\u4e2d", b"", b"\x00" * 40, b"t" * 300, Symbol(""), Symbol("PLAIN"),
            Symbol("ANONYMOUS"), Symbol("amqp:accepted:list"), Symbol("x" * 300), [],
            [None] * 20, [UInt(1), "a"], {}, {Symbol("a"): None}, {"k": [1, {}]},
            {Symbol("jms-selector"): Described(Symbol("apache.org:selector-filter:string"),
                                               "a = 1")},
            Array([]), Array([UInt(1), UInt(2)]), Array([Symbol("PLAIN")] * 3),
            Described(ULong(0x24), []), Described(ULong(0x25), [None]),
            Described(ULong(0x27), [True, True, {}]), Described(ULong(0x28), ["q1"]),
            Described(ULong(0x29), [None, UInt(9)]), Described(ULong(0x1D), [Symbol("e")]),
            Described(ULong(0x30), []), Described(Symbol("amqp:source:list"), []),
            Described(ULong(0x99999), [1]), Described("not a code", [1]),
            Described(ULong(0x28), "not a list"),
        ]
        self._values = []
        for value in candidates:
            try:
                self.codec.encode(value)
            except Exception:  # noqa: BLE001 - a value the codec cannot write: skip it
                continue
            self._values.append(value)
        return self._values

    def frames_of(self, data):
        """C{data} as a list of segments, protocol headers as bytes and frames as
        C{[type-and-channel (4 bytes), extended header, body]}; and what follows the
        last whole frame."""
        segments, pos, end = [], 0, len(data)
        while pos < end:
            if data[pos:pos + 4] == b"AMQP":
                segments.append(data[pos:pos + 8])
                pos += 8
                continue
            if pos + 8 > end:
                break
            size = int.from_bytes(data[pos:pos + 4], "big")
            doff = data[pos + 4] * 4
            if size < 8 or doff < 8 or doff > size or pos + size > end:
                break
            segments.append([data[pos + 4:pos + 8], data[pos + 8:pos + doff],
                             data[pos + doff:pos + size]])
            pos += size
        return segments, data[pos:]

    @staticmethod
    def join_frames(segments, tail):
        out = bytearray()
        for segment in segments:
            if isinstance(segment, bytes):
                out += segment
            else:
                head, ext, body = segment
                out += (8 + len(ext) + len(body)).to_bytes(4, "big") + head + ext + body
        return bytes(out + tail)

    def structured_mutation(self, data, mutator, corpus):
        """Change one frame of C{data} and keep every frame's size right: a field of a
        performative set to an interesting value (or the performative changed), a
        frame's body or payload mutated bytewise, a frame dropped, repeated, moved,
        taken from another input, or sent on another channel."""
        rng = mutator.rng
        segments, tail = self.frames_of(data)
        frames = [i for i, seg in enumerate(segments) if not isinstance(seg, bytes)]
        if not frames:
            return mutator.byte_mutation(data)
        at = rng.choice(frames)
        head, ext, body = segments[at]
        choice = rng.random()
        if choice < 0.45:
            body = self._mutate_fields(body, rng)
        elif choice < 0.6:
            body = mutator.byte_mutation(body)
        elif choice < 0.68:
            del segments[at]
            return self.join_frames(segments, tail)
        elif choice < 0.76:
            segments.insert(rng.randrange(at, len(segments) + 1), [head, ext, body])
            return self.join_frames(segments, tail)
        elif choice < 0.82:
            segment = segments.pop(at)
            segments.insert(rng.randrange(len(segments) + 1), segment)
            return self.join_frames(segments, tail)
        elif choice < 0.92:
            other, _ = self.frames_of(rng.choice(corpus))
            donors = [seg for seg in other if not isinstance(seg, bytes)]
            if donors:
                segments.insert(rng.randrange(len(segments) + 1), list(rng.choice(donors)))
            return self.join_frames(segments, tail)
        else:
            channel = rng.choice((0, 1, 2, 255, 256, 0xFFFF))
            head = head[:2] + channel.to_bytes(2, "big")
        segments[at] = [head, ext, body]
        return self.join_frames(segments, tail)

    def _mutate_fields(self, body, rng):
        """Re-encode a frame body's performative with one field changed (or one added
        past the end, or fields dropped, or another descriptor), keeping the payload."""
        Described = self.Described
        try:
            value, end = self.codec.decode(body)
        except Exception:  # noqa: BLE001 - not decodable: mutate the bytes instead
            return body
        if not isinstance(value, Described) or not isinstance(value.value, list):
            return body
        fields = list(value.value)
        descriptor = value.descriptor
        choice = rng.random()
        if choice < 0.7 or not fields:
            at = rng.randrange(len(fields) + 2)
            while len(fields) <= at:
                fields.append(None)
            fields[at] = rng.choice(self.interesting_values())
        elif choice < 0.85:
            del fields[rng.randrange(len(fields)):]
        else:
            from mqgate.amqp.types import ULong
            descriptor = ULong(rng.choice((0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
                                           0x18, 0x40, 0x41, 0x43, 0x44)))
        try:
            encoded = self.codec.encode(Described(descriptor, fields))
        except Exception:  # noqa: BLE001 - a combination the codec refuses
            return body
        return encoded + bytes(body[end:])

    # -- running ------------------------------------------------------------------------

    def run(self, data, cuts):
        server = self._server()
        app = AmqpApplication(self, server)
        for chunk in pieces(data, cuts):
            events = server.receive_data(chunk)
            app.handle(events)
            if server.finished:
                break
        server.tick(0.0)
        server.tick(1000.0)                          # past every idle time-out
        written = server.data_to_send()
        self.check_output(written)
        if server.finished and server.error is None and not app.peer_closed \
                and not app.refused:
            raise Violation("the engine finished the connection without an error, "
                            "and the peer did not close it")
        error = server.error
        return (tuple(app.seen), type(error).__name__,
                getattr(error, "condition", None), server.state.name)

    def check_output(self, written):
        """What the engine wrote parses as headers and frames with performatives."""
        pos, end = 0, len(written)
        while pos < end:
            if written[pos:pos + 4] == b"AMQP":
                pos += 8
                continue
            if pos + 8 > end:
                raise Violation(f"truncated frame header at {pos} of the output")
            size = int.from_bytes(written[pos:pos + 4], "big")
            doff = written[pos + 4] * 4
            if size < 8 or doff < 8 or doff > size or pos + size > end:
                raise Violation(f"bad frame at {pos} of the output: size {size}, "
                                f"doff {doff}, {end - pos} bytes left")
            body = written[pos + doff:pos + size]
            if body:
                value, _ = self.codec.decode(body)
                if not isinstance(value, self.Described):
                    raise Violation(f"frame at {pos} of the output is not a performative")
            pos += size


class AmqpApplication:
    """Answers a server engine's events as mqgate's AMQP glue does, without a broker:
    logins pass (except user C{bad}), everything is attached, producers get credit,
    received messages are parsed and settled, consumers with credit get messages."""

    CREDIT = 1000       # the broker's default producer credit (mqgate.amqp.producer_credit)

    def __init__(self, target, server):
        self.t = target
        self.server = server
        self.seen = []
        self.peer_closed = False
        self.refused = False
        self._sent = 0

    def handle(self, events):
        t = self.t
        ev = t.ev
        for event in events:
            kind = type(event)
            if len(self.seen) < 40:
                self.seen.append(kind.__name__)
            if kind is ev.AuthenticationRequested:
                ok = event.username not in ("bad", b"bad")
                self.refused = not ok
                self.handle(self.server.sasl_outcome(ok, None if ok else "refused"))
            elif kind is ev.ConnectionOpened:
                if self.server.state is t.ConnectionState.OPEN_RCVD:
                    self.server.open()
            elif kind is ev.ConnectionClosed:
                self.peer_closed = True
            elif kind is ev.SessionBegun:
                if event.session.state is t.SessionState.BEGIN_RCVD:
                    event.session.begin()
            elif kind is ev.LinkAttached:
                self._attach(event.link)
            elif kind is ev.CreditGranted:
                self._serve(event.link)
            elif kind is ev.MessageReceived:
                self._received(event)

    def _attach(self, link):
        t = self.t
        if link.state is not t.LinkState.ATTACH_RCVD:
            return
        remote = link.remote
        if link.is_sender:
            if remote.source is None:
                link.refuse(t.p.Symbol("amqp:invalid-field"), "a receiving link needs a source")
                return
            link.attach(source=remote.source, target=remote.target,
                        snd_settle_mode=t.p.SND_SETTLED if link.presettled
                        else t.p.SND_UNSETTLED)
        else:
            link.attach(source=remote.source, target=remote.target,
                        snd_settle_mode=remote.snd_settle_mode,
                        max_message_size=1 << 20)
            link.flow(self.CREDIT)

    def _serve(self, link):
        t = self.t
        if link.state is not t.LinkState.ATTACHED:
            return
        while link.credit > 0 and self._sent < 6:
            self._sent += 1
            link.send(t.encode_message(b"to consumer %d" % self._sent),
                      settled=link.presettled)
        if link.drain and link.state is t.LinkState.ATTACHED:
            link.drained()

    def _received(self, event):
        t = self.t
        link = event.link
        try:
            t.parse_message(event.payload).body_sections()
        except t.ProtocolError:
            pass
        if not event.settled and link.state is t.LinkState.ATTACHED:
            link.settle(event.delivery_id)
        if link.credit <= self.CREDIT // 2 and link.state is t.LinkState.ATTACHED:
            link.flow(self.CREDIT)


# -- STOMP ----------------------------------------------------------------------------------

class StompTarget(Target):
    """The STOMP 1.0/1.1/1.2 server engine (mqgate.stomp.connection) with a broker-like
    application.

    Contract (the engine's module docstring, S10.4): C{receive_data} never raises; every
    event is one of the engine's event types; a connection the engine finishes has
    C{error} set or saw a DISCONNECT (or the application refused the login). The
    application's answers (C{accept}, C{refuse}, C{message} echoing what was sent,
    C{receipt}), C{tick} and C{data_to_send} never raise, and everything written parses
    as server frames (CONNECTED, MESSAGE, RECEIPT, ERROR, heart-beats).
    """

    name = "stomp"
    dictionary = (
        b"CONNECT\n", b"STOMP\n", b"SEND\n", b"SUBSCRIBE\n", b"UNSUBSCRIBE\n", b"ACK\n",
        b"NACK\n", b"BEGIN\n", b"COMMIT\n", b"ABORT\n", b"DISCONNECT\n", b"\x00",
        b"\x00\n", b"\n", b"\r\n", b"\n\n", b":", b"\\", b"\\c", b"\\n", b"\\r", b"\\\\",
        b"\\t", b"content-length:", b"content-length:0\n", b"content-type:text/plain\n",
        b"receipt:r\n", b"transaction:t\n", b"destination:/queue/a\n",
        b"accept-version:1.0,1.1,1.2\n", b"accept-version:1.2\n", b"heart-beat:1,1\n",
        b"heart-beat:", b"id:0\n", b"ack:client\n", b"ack:client-individual\n",
        b"persistent:true\n", b"login:bad\n", b"host:h\n", b"subscription:0\n",
        b"message-id:m-1\n", b"selector:a = 1\n", b"\xc3\xa9", b"\xed\xa0\x80", b"\xff",
    )

    def __init__(self):
        from mqgate.stomp import events
        from mqgate.stomp.connection import StompConnection
        from mqgate.stomp.frames import FrameParser, HEARTBEAT, encode_frame
        self.ev = events
        self.event_types = tuple(getattr(events, name) for name in events.__all__)
        self.StompConnection = StompConnection
        self.FrameParser = FrameParser
        self.HEARTBEAT = HEARTBEAT
        self.encode_frame = encode_frame

    def valid_seeds(self):
        f = self.encode_frame
        seeds = []
        for version in ("1.0", "1.1", "1.2"):
            escaped = "with\\cescapes\\n" if version != "1.0" else "plain"
            connect = [("login", "admin"), ("passcode", "admin"), ("host", "localhost")]
            if version != "1.0":
                connect = [("accept-version", version), ("heart-beat", "1000,1000")] + connect
            first = "STOMP" if version == "1.1" else "CONNECT"
            ack = {"1.0": [("message-id", "m-1")],
                   "1.1": [("message-id", "m-2"), ("subscription", "0")],
                   "1.2": [("id", "a-2")]}[version]
            body = b"hello\x00world" if version != "1.0" else b"hello world"
            stream = (
                f(first, connect, b"", "1.0")
                + f("SUBSCRIBE", [("destination", "/queue/a"), ("id", "0"),
                                  ("ack", "client-individual"), ("receipt", "r-1"),
                                  ("selector", "colour = 'red'")], b"", version)
                + f("SEND", [("destination", "/queue/a"), ("content-type", "text/plain"),
                             ("content-length", str(len(body))), ("colour", "red"),
                             ("custom", escaped), ("persistent", "true"),
                             ("receipt", "r-2")], body, version)
                + b"\n"
                + f("SEND", [("destination", "/topic/b"), ("expires", "0"),
                             ("priority", "9")], b"no length", version)
                + f("BEGIN", [("transaction", "t-1"), ("receipt", "r-3")], b"", version)
                + f("SEND", [("destination", "/queue/a"), ("transaction", "t-1")],
                    b"in tx", version)
                + f("ACK", ack + [("transaction", "t-1")], b"", version)
                + (f("NACK", ack, b"", version) if version != "1.0" else b"")
                + f("COMMIT", [("transaction", "t-1")], b"", version)
                + f("BEGIN", [("transaction", "t-2")], b"", version)
                + f("ABORT", [("transaction", "t-2")], b"", version)
                + f("UNSUBSCRIBE", [("id", "0"), ("receipt", "r-4")], b"", version)
                + f("DISCONNECT", [("receipt", "bye")], b"", version))
            seeds.append(stream)
        # CR LF line ends and heart-beats between frames (1.2), a refused login.
        seeds.append(b"\r\n\nCONNECT\r\naccept-version:1.1,1.2\r\nhost:h\r\n\r\n\x00\n\n"
                     b"SEND\r\ndestination:/queue/c\r\ncontent-length:3\r\n\r\nabc\x00\r\n"
                     b"SUBSCRIBE\r\ndestination:/queue/c\r\nid:s\r\nack:client\r\n\r\n\x00"
                     b"DISCONNECT\r\n\r\n\x00")
        seeds.append(b"CONNECT\nlogin:bad\npasscode:x\naccept-version:1.2\n\n\x00"
                     b"SEND\ndestination:/queue/a\n\nlost\x00")
        return seeds

    def length_fields(self, data):
        fields = []
        for marker in (b"content-length:", b"heart-beat:", b"priority:", b"expires:",
                       b"accept-version:1."):
            start = 0
            while len(fields) < 32:
                at = data.find(marker, start)
                if at < 0:
                    break
                start = at + len(marker)
                fields.append((start, 0))
                comma = data.find(b",", start, start + 24)
                if marker == b"heart-beat:" and comma > 0:
                    fields.append((comma + 1, 0))
        return fields

    #: Header values worth trying: empty, long, escapes (good and bad), numbers at
    #: the edges, every ack mode, versions, bytes that are not UTF-8.
    VALUES = (b"", b"x" * 2000, b"\\c\\n\\r\\\\", b"\\t", b"\\", b"a:b", b"0", b"-1",
              b"99999999999999999999", b"1,1", b"0,0", b"1000000,1", b"auto", b"client",
              b"client-individual", b"1.0", b"1.1", b"1.2", b"1.3", b"1.0,1.1,1.2",
              b"/queue/a", b"/topic/b", b"/temp-queue/c", b"queue://x", b"t-1", b"a-1",
              b"m-1", b"0", b"true", b"\xff\xfe", b"\xed\xa0\x80", b" a = 1 ",
              b"colour = 'red' AND", b"\x00")
    COMMANDS = (b"CONNECT", b"STOMP", b"SEND", b"SUBSCRIBE", b"UNSUBSCRIBE", b"ACK", b"NACK",
                b"BEGIN", b"COMMIT", b"ABORT", b"DISCONNECT", b"CONNECTED", b"MESSAGE", b"")

    def structured_mutation(self, data, mutator, corpus):
        """Change one frame of C{data}, keeping the others intact: its command, one
        header (value, name, repeated, removed, added), its body (with or without a
        matching content-length); or drop, repeat, move or splice in a whole frame."""
        rng = mutator.rng
        frames = data.split(b"\x00")
        if len(frames) < 2:
            return mutator.byte_mutation(data)
        at = rng.randrange(len(frames) - 1)          # the last piece is what follows
        frame = frames[at]
        choice = rng.random()
        if choice < 0.12:
            del frames[at]
        elif choice < 0.2:
            frames.insert(rng.randrange(at, len(frames)), frame)
        elif choice < 0.26:
            frames.insert(rng.randrange(len(frames)), frames.pop(at))
        elif choice < 0.34:
            donors = rng.choice(corpus).split(b"\x00")[:-1]
            if donors:
                frames.insert(rng.randrange(len(frames)), rng.choice(donors))
        else:
            frames[at] = self._mutate_frame(frame, rng)
        return b"\x00".join(frames)

    def _mutate_frame(self, frame, rng):
        head, sep, body = frame.partition(b"\n\n")
        lead = len(head) - len(head.lstrip(b"\r\n"))
        prefix, lines = head[:lead], head[lead:].split(b"\n")
        choice = rng.random()
        if choice < 0.15:
            lines[0] = rng.choice(self.COMMANDS)
        elif choice < 0.75 and len(lines) > 1:
            at = rng.randrange(1, len(lines))
            name, colon, value = lines[at].partition(b":")
            what = rng.random()
            if what < 0.5:
                lines[at] = name + b":" + rng.choice(self.VALUES)
            elif what < 0.65:
                lines.insert(at, lines[at])
            elif what < 0.8:
                del lines[at]
            elif what < 0.9:
                lines[at] = rng.choice(self.dictionary).rstrip(b"\n")
            else:
                lines[at] = name + colon + value + rng.choice(self.VALUES)
        else:
            body = rng.choice((b"", body * 2, body + b"\x00", b"b" * rng.choice((1, 100, 9000)),
                               bytes(body[:len(body) // 2])))
            if rng.random() < 0.5:
                lines = [line for line in lines if not line.startswith(b"content-length:")]
                lines.append(b"content-length:%d" % len(body))
        return prefix + b"\n".join(lines) + (sep or b"\n\n") + body

    def run(self, data, cuts):
        conn = self.StompConnection()
        app = StompApplication(self, conn)
        for chunk in pieces(data, cuts):
            events = conn.receive_data(chunk)
            for event in events:
                if not isinstance(event, self.event_types):
                    raise Violation(f"receive_data returned {event!r}, not an event")
            app.handle(events)
            if conn.finished:
                break
        conn.tick(0.0)
        conn.tick(1000.0)
        self.check_output(conn.data_to_send(), conn.version or "1.0")
        if conn.finished and conn.error is None and not app.disconnected \
                and not app.refused:
            raise Violation("the engine finished the connection without an error or a "
                            "DISCONNECT")
        error = conn.error
        return (tuple(app.seen), type(error).__name__, getattr(error, "message", None),
                conn.state.name)

    def check_output(self, written, version):
        parser = self.FrameParser(version)
        items = parser.feed(written)
        while parser.paused:
            items += parser.resume(version)
        if parser.error is not None:
            raise Violation(f"the output does not parse: {parser.error}")
        for item in items:
            if item is not self.HEARTBEAT and item.command not in (
                    "CONNECTED", "MESSAGE", "RECEIPT", "ERROR"):
                raise Violation(f"the output holds a {item.command!r} frame")
        if written and not written.endswith((b"\x00", b"\n")):
            raise Violation("the output ends in the middle of a frame")


class StompApplication:
    """Answers a STOMP engine's events as the broker's glue does, without a broker:
    logins pass (except login C{bad}), every SEND is delivered back to the last
    subscription with its headers, every frame with a receipt gets it."""

    def __init__(self, target, conn):
        self.t = target
        self.conn = conn
        self.seen = []
        self.subscription = None
        self.disconnected = False
        self.refused = False
        self._count = 0

    def handle(self, events):
        ev = self.t.ev
        for event in events:
            kind = type(event)
            if len(self.seen) < 40:
                self.seen.append(kind.__name__)
            if kind is ev.ConnectRequested:
                if event.login == "bad":
                    self.refused = True
                    self.conn.refuse("authentication failed", "bad login")
                else:
                    self.handle(self.conn.accept("session-1"))
                continue
            if kind is ev.Subscribe:
                self.subscription = event
            elif kind is ev.Send and self.subscription is not None:
                self._count += 1
                sub = self.subscription
                self.conn.message(sub.id, event.destination, f"m-{self._count}",
                                  event.headers, event.body,
                                  ack_id=None if sub.ack == "auto" else f"a-{self._count}")
            elif kind is ev.Disconnect:
                self.disconnected = True
            receipt = getattr(event, "receipt", None)
            if receipt is not None:
                self.conn.receipt(receipt)


# -- port mapper ----------------------------------------------------------------------------

class PortmapTarget(Target):
    """The port mapper: the table parser and renderer, the address parser, and the
    Twisted protocol that serves the table (mqgate.portmap, mqgate.net.portmapper).

    Each input is read three ways. As a table reply: C{parse_table} returns or raises
    L{PortMapperError}; C{table_complete} returns a bool; a table that parses renders
    again (when its names can be rendered) and parses back to the same entries. As an
    address (UTF-8, undecodable bytes kept as surrogates): C{parse_mq_url} returns an
    address with a port in 1..65535 and a one-word service, or raises L{MqAddressError}.
    As what a client sends to the port mapper: the protocol, on a fake transport and
    clock, never raises, writes the table first, and closes after at most its line and
    byte limits or its timeout.
    """

    name = "portmap"
    dictionary = (
        b"101", b"101 ", b" ", b"\n", b"\r\n", b".\n", b"[", b"]", b"=", b",", b"mq://",
        b"mqtcp://", b"mqssl://", b"http://", b"[::1]", b":", b"/", b"7676", b"65535",
        b"65536", b"0", b"\xc2\xb2", b"\xd9\xa3", b"\xef\xbc\x91", b"\t", b"\x00", b"301",
        b" jms tcp NORMAL 7677", b" [a=b,c=d]", b"\xff",
    )

    def __init__(self):
        from twisted.internet.task import Clock
        from twisted.internet.testing import StringTransport
        from mqgate.net import portmapper
        from mqgate.portmap import table
        self.table = table
        self.portmapper = portmapper
        self.Clock = Clock
        self.StringTransport = StringTransport
        entries = [table.ServiceEntry("portmapper", "tcp", "PORTMAPPER", 7676),
                   table.ServiceEntry("jms", "tcp", "NORMAL", 7677, {"a": "b"}),
                   table.ServiceEntry("admin", "tcp", "ADMIN", 7678),
                   table.ServiceEntry("ssljms", "tls", "NORMAL", 7679, {"k": "", "x": "y z"})]
        self.rendered = table.render_table("imqbroker", entries)

    def valid_seeds(self):
        return [
            self.rendered,
            self.rendered.replace(b"\n", b"\r\n"),
            b"101 b 301\njms tcp NORMAL 1\njms tcp NORMAL 2 [a=b]\n\nafter\n",
            b"101\n",
            b"101\n\n\n\n\n\n\n",
            b"mq://localhost:7676/jms",
            b"mqtcp://[::1]:7677/ssljms",
            b"mqssl://host.example:9/",
            b"host:1234",
            b"mq:///admin",
        ]

    def length_fields(self, data):
        fields = []
        for i in range(len(data)):
            if 0x30 <= data[i] <= 0x39 and (i == 0 or not 0x30 <= data[i - 1] <= 0x39):
                fields.append((i, 0))
        return fields

    def run(self, data, cuts):
        t = self.table
        outcome = []
        try:
            name, packet, entries = t.parse_table(data)
        except t.PortMapperError as e:
            outcome.append(e.condition)
        else:
            outcome.append(len(entries))
            self._round_trip(name, packet, entries)
        complete = t.table_complete(data)
        if not isinstance(complete, bool):
            raise Violation(f"table_complete returned {complete!r}")
        outcome.append(complete)
        outcome.append(self._url(data.decode("utf-8", "surrogateescape")))
        outcome.append(self._serve(data, cuts))
        return tuple(outcome)

    def _round_trip(self, name, packet, entries):
        t = self.table
        try:
            rendered = t.render_table(name, entries, packet_version=packet)
        except ValueError:
            return      # a name the renderer refuses: not something the broker renders
        again = t.parse_table(rendered)
        if again != (name, packet, entries):
            raise Violation(f"a parsed table does not survive rendering: "
                            f"{(name, packet, entries)!r} became {again!r}")

    def _url(self, text):
        t = self.table
        try:
            address = t.parse_mq_url(text)
        except t.MqAddressError:
            return "refused"
        if not 1 <= address.port <= 65535 or not address.service \
                or any(c.isspace() or c in "[]/" for c in address.service):
            raise Violation(f"parse_mq_url({text!r}) returned {address!r}")
        return "address"

    def _serve(self, data, cuts):
        pm = self.portmapper
        clock = self.Clock()
        factory = pm.PortMapperFactory(lambda: self.rendered, clock)
        proto = factory.buildProtocol(None)
        transport = self.StringTransport()
        proto.makeConnection(transport)
        if transport.value() != self.rendered:
            raise Violation("the port mapper did not write the table first")
        lines = received = 0
        for chunk in pieces(data, cuts):
            if transport.disconnecting:
                break
            proto.dataReceived(chunk)
            lines += chunk.count(b"\n")
            received += len(chunk)
        over = lines >= pm.MAX_LINES or received > pm.MAX_LINES * pm.MAX_LINE_LENGTH
        if over and not transport.disconnecting:
            raise Violation(f"the port mapper kept reading after {lines} lines and "
                            f"{received} bytes")
        clock.advance(factory.timeout)
        if not transport.disconnecting:
            raise Violation("the port mapper did not close after its timeout")
        proto.connectionLost(None)
        if clock.getDelayedCalls():
            raise Violation("the port mapper left a timer behind")
        return over


# -- sniffing -------------------------------------------------------------------------------

class SniffTarget(Target):
    """Protocol sniffing (mqgate.sniff) and port unification (mqgate.net.unify).

    C{sniff} of every prefix (the input cut into arrivals) answers with a L{Kind};
    it never changes its mind once it has decided; it has decided once
    L{SNIFF_BUDGET} bytes are in; and bytes, bytearray and memoryview get the same
    answer. The unification protocol, fed the same arrivals on a fake transport, hands
    the connection to the protocol of the kind sniff decided, with every byte exactly
    once and in order, or rejects it (closing the transport); it never raises.
    """

    name = "sniff"
    dictionary = (
        b"AMQP", b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00", b"AMQP\x02\x01\x00\x00",
        b"CONNECT", b"STOMP", b"\n", b"\r", b"\r\n", b"GET ", b"POST ", b"OPTIONS ",
        b"\x16\x03\x01", b"\x16\x03\x03\x00\x05\x01", b"HTTP/1.1\r\n", b" ",
    )

    def __init__(self):
        from twisted.internet.protocol import Factory, Protocol
        from twisted.internet.task import Clock
        from twisted.internet.testing import StringTransport
        from mqgate import sniff
        from mqgate.net import unify
        self.sniff = sniff
        self.unify = unify
        self.Clock = Clock
        self.StringTransport = StringTransport

        class Recorder(Protocol):
            def __init__(self, kind):
                self.kind = kind
                self.received = bytearray()

            def dataReceived(self, data):
                self.received += data

        class RecorderFactory(Factory):
            def __init__(self, kind):
                self.kind = kind
                self.built = []

            def buildProtocol(self, addr):
                proto = Recorder(self.kind)
                self.built.append(proto)
                return proto

        self.RecorderFactory = RecorderFactory

    def valid_seeds(self):
        return [b"AMQP\x00\x01\x00\x00\x00\x00\x00\x21\x02\x00\x00\x00",
                b"AMQP\x03\x01\x00\x00", b"AMQP\x02\x01\x00\x00", b"AMQP\x00\x00\x09\x01",
                b"CONNECT\naccept-version:1.2\n\n\x00", b"\n\r\n\nSTOMP\r\nhost:h\r\n\r\n\x00",
                b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", b"OPTIONS * HTTP/1.1\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"\n" * 70, b"\r\r\n"]

    def run(self, data, cuts):
        s = self.sniff
        decided = None
        arrived = 0
        for chunk in pieces(data, cuts):
            arrived += len(chunk)
            prefix = data[:arrived]
            kind = s.sniff(prefix)
            if not isinstance(kind, s.Kind):
                raise Violation(f"sniff({prefix!r}) returned {kind!r}")
            for other in (bytearray(prefix), memoryview(prefix)):
                if s.sniff(other) is not kind:
                    raise Violation(f"sniff gives {kind} for bytes but "
                                    f"{s.sniff(other)} for {type(other).__name__}")
            if decided is not None and kind is not decided:
                raise Violation(f"sniff changed its mind from {decided} to {kind} at "
                                f"{arrived} bytes")
            if kind is s.NEED_MORE and arrived >= s.SNIFF_BUDGET:
                raise Violation(f"sniff still needs more after {arrived} bytes")
            if kind is not s.NEED_MORE:
                decided = kind
        return decided, self._unify(data, cuts, decided)

    def _unify(self, data, cuts, decided):
        s = self.sniff
        served = (s.AMQP, s.AMQP_SASL, s.STOMP)
        factories = {kind: self.RecorderFactory(kind) for kind in served}
        rejected = []

        def rejection(transport, kind):
            rejected.append(kind)
            transport.loseConnection()

        clock = self.Clock()
        factory = self.unify.PortUnificationFactory(factories, clock, rejection=rejection)
        proto = factory.buildProtocol(None)
        transport = self.StringTransport()
        proto.makeConnection(transport)
        for chunk in pieces(data, cuts):
            proto.dataReceived(chunk)
        built = [p for f in factories.values() for p in f.built]
        if decided in served:
            if len(built) != 1 or built[0].kind is not decided or rejected:
                raise Violation(f"sniff decided {decided} but unify built {built} and "
                                f"rejected {rejected}")
            if bytes(built[0].received) != data:
                raise Violation("unify did not hand over every byte exactly once")
        elif decided is not None:
            if built or rejected != [decided] or not transport.disconnecting:
                raise Violation(f"{decided} has no factory, yet unify built {built}, "
                                f"rejected {rejected}")
        else:
            clock.advance(factory.timeout)
            if built or rejected != [s.NEED_MORE] or not transport.disconnecting:
                raise Violation(f"undecided input was not rejected at the timeout: "
                                f"{built} {rejected}")
        proto.connectionLost(None)
        return tuple(rejected)


TARGETS = {"amqp": AmqpTarget, "stomp": StompTarget, "portmap": PortmapTarget,
           "sniff": SniffTarget}


# ======================================================================================
# Running inputs
# ======================================================================================

class Finding:
    """A crash or hang: the input, how it was fed, and what happened."""

    def __init__(self, target, kind, data, cuts, text, signature, index=None):
        self.target = target
        self.kind = kind            # "crash" or "hang"
        self.data = data
        self.cuts = cuts
        self.text = text            # the traceback or the description
        self.signature = signature
        self.index = index

    def __repr__(self):
        return f"<{self.kind} {self.target} {self.signature} {len(self.data)} bytes>"


def _on_budget(signum, frame):
    raise Hang()


def signature_of(kind, error, tb):
    """What identifies a bug: the kind, the exception type and the innermost line of
    mqgate's code on the traceback (of this driver when mqgate's is not on it, as for
    a L{Violation}). Returns C{(short hash, readable label)}."""
    where = "?"
    for entry in traceback.extract_tb(tb):
        if "/mqgate/" in entry.filename:
            where = f"{entry.filename.split('/mqgate/', 1)[1]}:{entry.lineno}"
        elif where == "?" or not where.startswith(("amqp", "stomp", "net", "portmap",
                                                   "sniff", "glue", "core", "errors")):
            where = f"{Path(entry.filename).name}:{entry.lineno}"
    text = f"{kind}:{type(error).__name__}:{where}"
    return hashlib.sha1(text.encode()).hexdigest()[:8], text


def execute(target, data, cuts, budget):
    """Run one input under a CPU budget.

    @return: C{(behaviour, None)} when the contract held, or C{(None, Finding)}.
    """
    signal.setitimer(signal.ITIMER_PROF, budget)
    try:
        try:
            behaviour = target.run(data, cuts)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except Hang as error:
        tb = error.__traceback__
        sig, label = signature_of("hang", error, tb)
        text = f"hang: more than {budget} s of CPU\n" + "".join(traceback.format_tb(tb))
        return None, Finding(target.name, "hang", data, cuts, text, (sig, label))
    except Exception as error:  # noqa: BLE001 - every exception here breaks a contract
        tb = error.__traceback__
        kind = "crash"
        sig, label = signature_of(kind, error, tb)
        text = "".join(traceback.format_exception(error))
        return None, Finding(target.name, kind, data, cuts, text, (sig, label))
    return behaviour, None


class Fuzzer:
    """One worker's fuzzing of one target: corpus, mutator and feedback.

    Input number I{i} is drawn from a generator seeded with (C{seed}, target, I{i}), so a
    run is the same every time for the same seed and number of workers, and a worker
    restarted after a crash goes on with new inputs rather than repeating its first
    ones. (Which corpus an input is drawn from depends on what the worker saw before.)
    """

    def __init__(self, target, seed=0, budget=1.0, include_open=True):
        self.target = target
        self.budget = budget
        self.base = (seed * 1000003 + zlib_crc(target.name)) << 32
        self.rng = random.Random(self.base)
        self.mutator = Mutator(self.rng, target)
        self.corpus = [s for s in target.seeds(include_open) if len(s[0]) <= MAX_INPUT]
        self.datas = [s[0] for s in self.corpus]       # for splicing
        self.behaviours = set()
        self.count = 0

    def next_input(self, index=None):
        """A mutated input and its cuts: the parent's own cuts (those still inside
        the input) a third of the time, else new ones."""
        if index is not None:
            self.rng.seed(self.base + index)
        parent, parent_cuts = self.rng.choice(self.corpus)
        data = self.mutator.mutate(parent, self.datas)
        if parent_cuts and self.rng.random() < 0.34:
            return data, [c for c in parent_cuts if c < len(data)]
        return data, self.mutator.cuts(len(data))

    def feedback(self, data, cuts, behaviour):
        """Keep an input whose behaviour is new in the corpus."""
        try:
            key = hash(behaviour)
        except TypeError:
            key = hash(repr(behaviour))
        if key in self.behaviours:
            return
        self.behaviours.add(key)
        if len(self.corpus) < MAX_CORPUS:
            self.corpus.append((data, cuts))
            self.datas.append(data)
        else:
            at = self.rng.randrange(len(self.corpus))
            self.corpus[at] = (data, cuts)
            self.datas[at] = data

    def run_one(self, index, on_input=None):
        """Make and run input number C{index}; return its L{Finding} or None."""
        data, cuts = self.next_input(index)
        if on_input is not None:
            on_input(data, cuts)
        self.count += 1
        behaviour, finding = execute(self.target, data, cuts, self.budget)
        if finding is None:
            self.feedback(data, cuts, behaviour)
        else:
            finding.index = index
        return finding


def zlib_crc(text):
    return zlib.crc32(text.encode())


def check_seeds(target, budget=5.0):
    """Run every seed unmutated and whole; return the findings (there should be none
    but the regression inputs not fixed yet)."""
    findings = []
    for data, cuts in target.seeds():
        _, finding = execute(target, data, cuts, budget)
        if finding is not None:
            findings.append(finding)
    return findings


def run_inputs(name, runs, seed=0, budget=1.0, include_open=True):
    """Fuzz target C{name} for C{runs} inputs in this process (for the suite's short
    run); return the list of L{Finding}s."""
    previous = signal.signal(signal.SIGPROF, _on_budget)
    try:
        fuzzer = Fuzzer(TARGETS[name](), seed=seed, budget=budget,
                        include_open=include_open)
        findings = []
        for index in range(runs):
            finding = fuzzer.run_one(index)
            if finding is not None:
                findings.append(finding)
        return findings
    finally:
        signal.signal(signal.SIGPROF, previous)


# ======================================================================================
# Workers (one process each, watched by the parent)
# ======================================================================================

_SLOT_HEADER = struct.Struct("<qdII")       # index, started (monotonic), size, cuts


class InFlight:
    """Shared memory where a worker keeps the input it is running, so that the parent
    can report it if the worker hangs where no signal reaches it, or dies."""

    SIZE = _SLOT_HEADER.size + MAX_INPUT + 4 * MAX_INPUT

    def __init__(self, name=None):
        if name is None:
            self.shm = shared_memory.SharedMemory(create=True, size=self.SIZE)
        else:
            self.shm = shared_memory.SharedMemory(name=name)
        self.buf = self.shm.buf
        if name is None:
            self.idle()

    def put(self, index, data, cuts):
        size = len(data)
        self.buf[_SLOT_HEADER.size:_SLOT_HEADER.size + size] = data
        at = _SLOT_HEADER.size + MAX_INPUT
        packed = struct.pack(f"<{len(cuts)}I", *cuts)
        self.buf[at:at + len(packed)] = packed
        _SLOT_HEADER.pack_into(self.buf, 0, index, time.monotonic(), size, len(cuts))

    def idle(self):
        _SLOT_HEADER.pack_into(self.buf, 0, -1, 0.0, 0, 0)

    def get(self):
        index, started, size, ncuts = _SLOT_HEADER.unpack_from(self.buf, 0)
        data = bytes(self.buf[_SLOT_HEADER.size:_SLOT_HEADER.size + size])
        at = _SLOT_HEADER.size + MAX_INPUT
        cuts = list(struct.unpack_from(f"<{ncuts}I", self.buf, at))
        return index, started, data, cuts

    def close(self, unlink=False):
        self.buf = None
        self.shm.close()
        if unlink:
            self.shm.unlink()


def _worker(name, seed, worker, jobs, first, last, budget, slot_name, stack_path, queue):
    """Run inputs C{first, first + jobs, ...} below C{last}; report to C{queue}.

    Progress and the end are reported as the number of inputs done since input
    C{worker} (the worker's very first), so that a restarted worker continues the count.
    """
    stacks = open(stack_path, "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    except (ValueError, OSError):
        pass
    signal.signal(signal.SIGPROF, _on_budget)
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent handles ^C
    slot = InFlight(slot_name)
    fuzzer = Fuzzer(TARGETS[name](), seed=seed, budget=budget)
    report_every = 2000
    index = first
    try:
        while index < last:
            finding = fuzzer.run_one(index, lambda data, cuts: slot.put(index, data, cuts))
            slot.idle()
            if finding is not None:
                queue.put(("finding", worker, finding))
            index += jobs
            done = (index - worker) // jobs
            if done % report_every == 0:
                queue.put(("progress", worker, done))
        queue.put(("done", worker, (index - worker) // jobs))
    finally:
        slot.close()


class Results:
    """Findings of one run: counted by signature, the first few saved to files."""

    def __init__(self, folder, seed):
        self.folder = Path(folder)
        self.seed = seed
        self.by_signature = {}      # (target, sig) -> [count, label, kind, first path]

    def add(self, finding):
        sig, label = finding.signature
        key = (finding.target, sig)
        entry = self.by_signature.setdefault(key, [0, label, finding.kind, None])
        entry[0] += 1
        if entry[0] <= KEEP_PER_SIGNATURE:
            path = self.save(finding, entry[0] - 1)
            entry[3] = entry[3] or path

    def save(self, finding, n):
        folder = self.folder / finding.target
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"{finding.kind}-{finding.signature[0]}-{n}"
        stem.with_suffix(".bin").write_bytes(finding.data)
        stem.with_suffix(".txt").write_text(
            f"cuts: {','.join(map(str, finding.cuts))}\n"
            f"target: {finding.target}\nkind: {finding.kind}\n"
            f"signature: {finding.signature[1]}\n"
            f"seed: {self.seed} input: {finding.index}\n"
            f"replay: python -m tests.fuzz.driver --replay {stem.with_suffix('.bin')}\n"
            f"input ({len(finding.data)} bytes): {finding.data[:2000]!r}\n\n"
            f"{finding.text}")
        return stem.with_suffix(".bin")

    def summary(self, target):
        return sorted(((v[0], v[2], v[1], v[3]) for (t, _), v in self.by_signature.items()
                       if t == target), reverse=True)


def fuzz_target(name, runs, seed, jobs, budget, results, log=print, stall_limit=None):
    """Fuzz one target with C{jobs} worker processes; return its statistics.

    @param stall_limit: wall-clock seconds after which a worker still on one input is
        killed (its input reported as a hang); by default 20 CPU budgets, at least 30 s.
    """
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    if stall_limit is None:
        stall_limit = max(30.0, 20 * budget)
    workers = {}

    def start(worker, first):
        slot = InFlight()
        stack_path = results.folder / name / f".stacks-{worker}"
        stack_path.parent.mkdir(parents=True, exist_ok=True)
        proc = ctx.Process(target=_worker, name=f"fuzz-{name}-{worker}", daemon=True,
                           args=(name, seed, worker, jobs, first, runs, budget,
                                 slot.shm.name, str(stack_path), queue))
        proc.start()
        workers[worker] = [proc, slot, (first - worker) // jobs, stack_path]

    started = time.monotonic()
    for worker in range(jobs):
        start(worker, worker)
    finished = {}
    exited = {}
    since = {}
    crashes = hangs = 0
    last_report = started
    while len(finished) < jobs:
        try:
            message = queue.get(timeout=0.1)
        except Exception:  # noqa: BLE001 - queue.Empty
            message = None
        if message is not None:
            kind, worker, value = message
            if kind == "finding":
                results.add(value)
                crashes += value.kind == "crash"
                hangs += value.kind == "hang"
            elif kind == "progress":
                workers[worker][2] = value
            elif kind == "done":
                finished[worker] = value
                proc, slot, _, _ = workers[worker]
                proc.join()
                slot.close(unlink=True)
        now = time.monotonic()
        for worker, (proc, slot, done, stack_path) in list(workers.items()):
            if worker in finished:
                continue
            index, _, data, cuts = slot.get()
            # A stall is the same input seen for stall_limit by our own clock: the
            # worker's header may be read half-written, never twice the same way.
            if since.get(worker, (None,))[0] != index:
                since[worker] = (index, now)
            at = since[worker][1]
            died = not proc.is_alive()
            if died and proc.exitcode == 0:
                # Its "done" may still be on its way; a worker that exits cleanly
                # without one (a SystemExit out of the code under test) is a crash.
                gone = exited.setdefault(worker, time.monotonic())
                if time.monotonic() - gone < 5.0:
                    continue
            stalled = not died and index >= 0 and now - at > stall_limit
            if not (stalled or died):
                continue
            if stalled:
                os.kill(proc.pid, signal.SIGUSR1)       # faulthandler: dump the stacks
                time.sleep(0.5)
                proc.kill()
            proc.join()
            stacks = stack_path.read_text(errors="replace") if stack_path.exists() else ""
            if stalled:
                what = ("hang", f"the worker ran one input for more than {stall_limit:g} s "
                        f"and was killed; its stacks then:\n{stacks}")
                label = "hang:worker:killed"
            else:
                what = ("crash", f"the worker died with exit code {proc.exitcode} "
                        f"{'on this input' if index >= 0 else 'between inputs'}")
                label = f"crash:worker:{proc.exitcode}"
            finding = Finding(name, what[0], data, cuts, what[1],
                              (hashlib.sha1(label.encode()).hexdigest()[:8], label), index)
            results.add(finding)
            crashes += what[0] == "crash"
            hangs += what[0] == "hang"
            slot.close(unlink=True)
            exited.pop(worker, None)
            since.pop(worker, None)
            log(f"  {name}: worker {worker}: {what[1].splitlines()[0]} at input {index}; "
                "restarting")
            start(worker, index + jobs if index >= 0 else worker + jobs * (done + 1))
        now = time.monotonic()
        if now - last_report > 30:
            last_report = now
            total = sum(w[2] for w in workers.values())
            log(f"  {name}: {total} inputs, {total / (now - started):.0f}/s, "
                f"{crashes} crashes, {hangs} hangs")
    elapsed = time.monotonic() - started
    total = sum(finished.values())
    return {"target": name, "inputs": total, "seconds": elapsed,
            "rate": total / elapsed if elapsed else 0.0, "crashes": crashes,
            "hangs": hangs}


def minimize(target, data, cuts, signature, budget=1.0, tries=3000):
    """Shrink an input while it still fails with the same signature: first without
    cuts, then deleting ever smaller chunks. Returns C{(data, cuts)}."""

    def same(candidate, candidate_cuts):
        _, finding = execute(target, candidate, candidate_cuts, budget)
        return finding is not None and finding.signature[0] == signature

    if cuts and same(data, []):
        cuts = []
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and tries > 0:
        at = 0
        while at < len(data) and tries > 0:
            tries -= 1
            candidate = data[:at] + data[at + chunk:]
            moved = [c - chunk if c > at + chunk else c for c in cuts if not
                     at < c <= at + chunk]
            moved = [c for c in moved if 0 < c < len(candidate)]
            if same(candidate, moved):
                data, cuts = candidate, moved
            else:
                at += chunk
        chunk //= 2
    return data, cuts


def replay(path, budget=5.0, shrink=False):
    """Run one saved input (with the cuts from its .txt file); print and return the
    finding, or None when the contract now holds."""
    path = Path(path)
    data = path.read_bytes()
    cuts = read_cuts(path)
    target = path.parent.name
    info = path.with_suffix(".txt")
    if info.exists():
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("target:"):
                target = line.split(":", 1)[1].strip()
    signal.signal(signal.SIGPROF, _on_budget)
    fuzz_target_ = TARGETS[target]()
    _, finding = execute(fuzz_target_, data, cuts, budget)
    if finding is None:
        print(f"{path}: the {target} contract holds for this input")
        return None
    if shrink:
        data, cuts = minimize(fuzz_target_, data, cuts, finding.signature[0], budget)
        _, finding = execute(fuzz_target_, data, cuts, budget)
        stem = path.with_name(path.stem + "-min")
        stem.with_suffix(".bin").write_bytes(data)
        stem.with_suffix(".txt").write_text(
            f"cuts: {','.join(map(str, cuts))}\ntarget: {target}\nkind: {finding.kind}\n"
            f"signature: {finding.signature[1]}\ninput ({len(data)} bytes): {data!r}\n\n"
            f"{finding.text}")
        print(f"minimized to {len(data)} bytes, cuts {cuts}: {data!r}\n"
              f"saved as {stem.with_suffix('.bin')}")
    print(f"{path}: {finding.kind} {finding.signature[1]}\n{finding.text}")
    return finding


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.driver",
        description="Fuzz mqgate's AMQP, STOMP, port mapper and sniffing code.")
    parser.add_argument("--targets", default=os.environ.get("FUZZ_TARGETS") or
                        ",".join(TARGETS), help="comma-separated: " + ",".join(TARGETS))
    parser.add_argument("--runs", type=int, default=int(os.environ.get("FUZZ_RUNS") or
                                                        1_000_000),
                        help="inputs per target (default 1,000,000; FUZZ_RUNS)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED") or 1))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("FUZZ_JOBS") or 1),
                        help="worker processes per target (FUZZ_JOBS)")
    parser.add_argument("--timeout", type=float, default=1.0,
                        help="CPU seconds one input may use before it is a hang")
    parser.add_argument("--results", default=str(DEFAULT_RESULTS))
    parser.add_argument("--replay", nargs="*", help="run saved inputs instead of fuzzing")
    parser.add_argument("--minimize", action="store_true",
                        help="with --replay: shrink each failing input, save it as "
                             "<name>-min.bin")
    args = parser.parse_args(argv)
    if args.replay:
        found = [replay(p, shrink=args.minimize) for p in args.replay]
        return 1 if any(found) else 0
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {list(TARGETS)}")
    results = Results(args.results, args.seed)
    print(f"fuzzing {', '.join(names)}: {args.runs} inputs each, seed {args.seed}, "
          f"{args.jobs} job(s), {args.timeout:g} s CPU per input; findings in "
          f"{args.results}", flush=True)
    stats = []
    for name in names:
        for finding in check_seeds(TARGETS[name]()):
            print(f"  {name}: a seed itself fails: {finding.signature[1]}")
        stat = fuzz_target(name, args.runs, args.seed, args.jobs, args.timeout, results,
                           log=lambda text: print(text, flush=True))
        stats.append(stat)
        print(f"{name}: {stat['inputs']} inputs in {stat['seconds']:.0f} s "
              f"({stat['rate']:.0f}/s): {stat['crashes']} crashes, {stat['hangs']} hangs",
              flush=True)
        for count, kind, label, path in results.summary(name):
            print(f"    {count:7d} x {kind}  {label}  e.g. {path}")
    bad = sum(s["crashes"] + s["hangs"] for s in stats)
    print(f"total: {sum(s['inputs'] for s in stats)} inputs, {bad} findings")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
