"""Persistent AMQP messages through mqgate's store: messages/s and fsyncs/s, so that
group commit shows (S3.4, issue 6).

One scenario: a broker with the store and sync setting of the scenario (``-D``
settings), one consumer accepting everything, and 1 or 10 producers, each in its own
process on mqgate's own AMQP engine (the lean load generator of
bench/amqp_engine_throughput.py), sending persistent (``durable=true``) messages
unsettled: a producer's transfer is settled by the broker only once the store has the
message. Each producer keeps up to its credit (1,000) in flight, so concurrent
producers give the store something to group.

The broker's figures come from its own log: on shutdown the store logs one line
``store closed (...): fsyncs=N records=N records_per_fsync=X ...`` (see
mqgate/store/factory.py), which this script reads after the SIGTERM. ``fsyncs_per_s``
divides the journal fsyncs by the producers' window (first send to last outcome).

    {"scenario": "persistent-file-sync-on-10p", "messages": 20000, "size": 256,
     "msgs_per_s": ..., "producer_msgs_per_s": ..., "fsyncs": ..., "fsyncs_per_s": ...,
     "msgs_per_fsync": ...}

Scenarios: the file, SQLite and PostgreSQL stores, each with sync on and off, with 1
and 10 producers. PostgreSQL runs on the server ``MQGATE_BENCH_PG_DSN`` names (a
libpq connection string, as ``mqgate.persist.jdbc.opendburl`` takes it), else on a
private server with fsync on, started for the run (tests/pgcluster.py).

    python bench/persistent.py [--messages N] [--mode persistent-file-sync-on-10p]
"""

import argparse
import atexit
import os
import re
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

import amqp_engine_throughput  # noqa: E402
import amqp_throughput  # noqa: E402
import stomp_throughput  # noqa: E402
from amqp_throughput import BenchError, _emit, _fail, _rate  # noqa: E402

from mqgate.amqp.events import DeliveriesSettled, MessageReceived  # noqa: E402
from mqgate.amqp.message import Header, encode_message  # noqa: E402
from mqgate.amqp.performatives import (  # noqa: E402
    RECEIVER, SENDER, SND_UNSETTLED, Accepted)
from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

#: Persistent scenarios move fewer messages than the others: with sync on and one
#: producer every message waits for a disk flush.
DEFAULT_MESSAGES = 20_000
READY_TIMEOUT = amqp_throughput.READY_TIMEOUT
CLOSE_GRACE = 5.0
BATCH = 200
STORE_CLOSED = re.compile(r"store closed \((.*?)\): (.*)$")
PG_DSN = "MQGATE_BENCH_PG_DSN"


def _stores():
    """Store name -> its -D settings."""
    jdbc = {"mqgate.persist.store": "jdbc"}
    return {"file": {},
            "sqlite": dict(jdbc, **{"mqgate.persist.jdbc.dbVendor": "sqlite"}),
            "postgresql": dict(jdbc, **{"mqgate.persist.jdbc.dbVendor": "postgresql"})}


_CLUSTER = []


def _postgresql_url():
    """A fresh database: in C{MQGATE_BENCH_PG_DSN}'s server when set, else in a
    private PostgreSQL server with fsync on (tests/pgcluster.py), started once and
    stopped when this process ends.

    @raise BenchError: no PostgreSQL server binaries here.
    """
    dsn = os.environ.get(PG_DSN)
    if dsn:
        return dsn
    if not _CLUSTER:
        from tests.pgcluster import PostgresCluster, PostgresUnavailable
        try:
            _CLUSTER.append(PostgresCluster(durable=True).start())
        except PostgresUnavailable as e:
            raise BenchError(f"no PostgreSQL to run on ({e}); set {PG_DSN}") from None
        atexit.register(_CLUSTER[0].stop)
    cluster = _CLUSTER[0]
    return cluster.dsn(cluster.create_database())


STORES = _stores()
SCENARIOS = tuple(f"persistent-{store}-sync-{sync}-{n}p"
                  for store in STORES for sync in ("on", "off") for n in (1, 10))


def _scenario_settings(name):
    """C{(store defines or skip reason, sync defines, producers)} of a scenario."""
    _, store, _, sync, producers = name.split("-")
    defines = dict(STORES[store])
    if store == "postgresql":
        defines["mqgate.persist.jdbc.opendburl"] = _postgresql_url()
    key = ("mqgate.persist.file.sync.enabled" if store == "file"
           else "mqgate.persist.jdbc.sync.enabled")
    return defines, {key: "true" if sync == "on" else "false"}, int(producers[:-1])


# -- the client roles ----------------------------------------------------------------------

def run_producer(options):
    """Send C{--messages} persistent messages, unsettled; print a JSON result line."""
    payload = encode_message(b"p" * options.size, header=Header(durable=True))
    try:
        client = amqp_engine_throughput._client(options,
                                                amqp_engine_throughput.STALL_TIMEOUT)
        link = client.open_link(SENDER, options.address, SND_UNSETTLED)
        sent = accepted = refused = 0
        first = time.perf_counter()
        while accepted + refused < options.messages:
            batch = 0
            while link.credit and sent < options.messages and batch < BATCH:
                link.send(payload, settled=False)
                sent += 1
                batch += 1
            client.flush()
            for event in client.read():
                if isinstance(event, DeliveriesSettled):
                    if isinstance(event.state, Accepted):
                        accepted += len(event.deliveries)
                    else:
                        refused += len(event.deliveries)
        done = time.perf_counter()
    except (OSError, BenchError) as e:
        _fail("producer", str(e))
    _emit(role="producer", sent=sent, accepted=accepted, refused=refused,
          first=first, last=done, msgs_per_s=_rate(accepted, done - first))
    client.close()


def run_consumer(options):
    """Attach, print ``ready``, accept C{--messages} messages; print a JSON line."""
    try:
        client = amqp_engine_throughput._client(options, READY_TIMEOUT)
        link = client.open_link(RECEIVER, options.address, SND_UNSETTLED)
        link.flow(options.prefetch)
        client.flush()
        print("ready", flush=True)
        client.sock.settimeout(options.timeout)
        received = 0
        first = last = None
        accepted = Accepted()
        while received < options.messages:
            for event in client.read():
                if isinstance(event, MessageReceived):
                    received += 1
                    link.settle(event.delivery_id, accepted)
            now = time.perf_counter()
            first = first or now
            last = now
            if link.credit < options.prefetch // 2:
                link.flow(options.prefetch)
            client.flush()
    except (OSError, BenchError) as e:
        _fail("consumer", str(e))
    _emit(role="consumer", received=received, seconds=last - first,
          msgs_per_s=_rate(received, last - first))
    client.close()


# -- one scenario ----------------------------------------------------------------------------

def measure(options, name, producers, url):
    """Consumer, then the producers; the client half of the scenario's JSON dict."""
    each = options.messages // producers
    total = each * producers
    common = ["--url", url, "--size", str(options.size), "--prefetch",
              str(options.prefetch), "--timeout", str(options.timeout), "--address",
              options.address, "--user", options.user, "--password", options.password]
    children = []
    try:
        consumer = stomp_throughput.ScriptChild(
            __file__, "consume", common + ["--messages", str(total), "--mode", "c"])
        children.append(consumer)
        consumer.wait_for_line("ready", READY_TIMEOUT)
        senders = []
        for index in range(producers):
            senders.append(stomp_throughput.ScriptChild(
                __file__, "produce", common + ["--messages", str(each),
                                               "--mode", f"p{index}"],
                label=f"producer {index}"))
        children.extend(senders)
        deadline = time.monotonic() + options.timeout + READY_TIMEOUT
        results = [s.result(max(1.0, deadline - time.monotonic())) for s in senders]
        got = consumer.result(max(1.0, deadline - time.monotonic()))
        for child in children:
            child.close(CLOSE_GRACE)
    finally:
        for child in children:
            child.kill()
    refused = sum(r["refused"] for r in results)
    if refused:
        raise BenchError(f"the broker refused {refused} persistent messages")
    window = max(r["last"] for r in results) - min(r["first"] for r in results)
    return {
        "scenario": name, "messages": got["received"], "size": options.size,
        "producers": producers,
        "msgs_per_s": got["msgs_per_s"],
        "producer_msgs_per_s": _rate(sum(r["accepted"] for r in results), window),
        "seconds": round(window, 3),
    }, window


def store_figures(output):
    """The store's closing figures from the broker's log, as a dict of numbers."""
    for line in reversed(output):
        match = STORE_CLOSED.search(line)
        if match:
            figures = {}
            for item in match.group(2).split():
                key, _, value = item.partition("=")
                try:
                    figures[key] = float(value) if "." in value else int(value)
                except ValueError:
                    continue
            return figures
    raise BenchError("the broker logged no 'store closed' line on shutdown")


def run_scenario(options, name):
    defines, sync, producers = _scenario_settings(name)
    defines.update(sync)
    defines.update(dict(options.define))
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-persistent-") as varhome:
        broker = BrokerProcess(varhome, defines=defines)
        try:
            try:
                host, port = broker.spawn().address("jms")
            except BrokerError as e:
                raise BenchError(f"the broker did not start: {e}") from None
            result, window = measure(options, name, producers, f"amqp://{host}:{port}")
            code = broker.terminate()
            if code != 0:
                raise BenchError(f"the broker exited with code {code} on SIGTERM")
        except BenchError:
            tail = "".join(broker.output[-20:]).rstrip()
            print(f"--- broker output (last lines) ---\n{tail}\n--- end ---",
                  file=sys.stderr, flush=True)
            raise
        finally:
            broker.kill()
        figures = store_figures(broker.output)
    fsyncs = figures.get("fsyncs", 0)
    result.update(fsyncs=fsyncs, fsyncs_per_s=_rate(fsyncs, window),
                  msgs_per_fsync=round(result["messages"] / fsyncs, 1) if fsyncs else None,
                  store_batches=figures.get("batches"),
                  store_max_batch=figures.get("max_batch"))
    return result


def scenario_line(options, name):
    """The scenario's one JSON line: its measurement, its skip reason, or its error."""
    try:
        return run_scenario(options, name)
    except BenchError as e:
        return stomp_throughput.failure_line(name, options, e)


def options_from(run_options):
    """This script's options from bench/run.py's (fewer messages, see the module doc)."""
    options = argparse.Namespace(**vars(run_options))
    options.messages = min(run_options.messages, DEFAULT_MESSAGES)
    options.address = "bench.persistent"
    return options


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="bench",
                        choices=("bench", "consume", "produce"))
    amqp_throughput.add_common_arguments(parser)
    parser.add_argument("--mode", "--scenario", dest="mode", default="all",
                        help="a scenario name (" + ", ".join(SCENARIOS) + ") or all")
    parser.add_argument("-D", "--define", type=amqp_throughput._define, action="append",
                        default=[], metavar="KEY=VALUE")
    parser.set_defaults(messages=DEFAULT_MESSAGES, address="bench.persistent")
    options = parser.parse_args(argv)
    if options.role == "bench" and options.mode not in SCENARIOS + ("all",):
        parser.error(f"unknown scenario {options.mode!r}")
    return options


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    roles = {"consume": run_consumer, "produce": run_producer}
    scenarios = SCENARIOS if options.mode == "all" else (options.mode,)
    return amqp_throughput.run_roles(options, roles, scenarios, scenario_line)


if __name__ == "__main__":
    sys.exit(main())
