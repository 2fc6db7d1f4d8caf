"""Run the Node load generator (bench/node/bench.js) against mqgate or another broker.

The generator shares no code with mqgate (rhea for AMQP 1.0, a plain STOMP 1.2 client
over Node's ``net``), so the same run against mqgate and against another broker on the
same machine gives a ratio that does not favour either. Without ``--amqp-url`` and
``--stomp-url`` this starts one mqgate broker the way the other benchmarks do
(tests/e2e/broker.py, shipped configuration, OS-chosen ports) and runs every Node
scenario on it in turn; with both, it runs them on the broker already listening there::

    python bench/run_node.py                               # on a new mqgate broker
    python bench/run_node.py --messages 20000 --seconds 3  # a quick run
    python bench/run_node.py --amqp-url amqp://127.0.0.1:5672 --stomp-url stomp://127.0.0.1:61613

With ``--broker`` it compares brokers: each one named (mqgate, rabbitmq, activemq, or
``all`` of them) is started in turn on the same two ports (``--amqp-port``,
``--stomp-port``), runs every scenario and is stopped, ``--rounds`` times over, the
brokers taking turns within each round so that a load that comes and goes touches
them alike; ``--summary`` then prints a table of the medians and mqgate's ratio to the
best of the others per scenario. The other brokers are Debian's packages, started from
bench/peers/ (``make bench BROKER=...`` installs them)::

    python bench/run_node.py --broker all --rounds 3 --summary

The JSON lines are the generator's (each names its ``generator``: ``node-rhea`` or
``node-stomp``; in a comparison also its ``broker`` and ``round``), printed and
appended to ``bench/results/<UTC time>.jsonl`` like bench/run.py's. The exit code is 1
if a scenario failed, a broker did not start, or Node is missing.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from bench.peers.brokers import PEERS, PeerError, free_port  # noqa: E402
from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

NODE_DIR = BENCH_DIR / "node"
GENERATOR = NODE_DIR / "bench.js"
#: Seconds the whole generator run may take before it counts as hung (it fails a
#: scenario that makes no progress for --timeout seconds by itself).
RUN_TIMEOUT = 1800

#: The brokers --broker knows, mqgate first; "all" means every one of them.
BROKERS = ("mqgate",) + tuple(PEERS)

#: The issue's five shapes: (row, AMQP scenario, STOMP scenario, the figure compared).
#: RATE is the latency scenarios' --rate. A figure named *_ms is better when lower.
ROWS = (
    ("(a) queue 256 B, non-persistent", "amqp-queue-presettled", "stomp-queue-auto", "msgs_per_s"),
    ("(b) queue 256 B, persistent, 1,000 in flight", "amqp-queue-persistent",
     "stomp-queue-persistent", "msgs_per_s"),
    ("(c) topic, 10 consumers (deliveries/s)", "amqp-fanout-10", "stomp-fanout-10",
     "deliveries_per_s"),
    ("(d) RATE msg/s, p99 latency (ms)", "amqp-latency-RATE", "stomp-latency-RATE", "p99_ms"),
    ("(e) queue 4 KiB", "amqp-queue-4k", "stomp-queue-4k", "msgs_per_s"),
)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amqp-url", help="amqp://HOST:PORT of a broker already running")
    parser.add_argument("--stomp-url", help="stomp://HOST:PORT of a broker already running")
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages received per scenario (default 200000)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long the latency scenarios send (default 10)")
    parser.add_argument("--rate", type=int, default=2000,
                        help="the latency scenarios' messages a second (default 2000)")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a scenario may go without progress (default 30)")
    parser.add_argument("--only", action="append", default=[], metavar="SCENARIO",
                        help="run only these scenarios (repeatable, comma-separated)")
    parser.add_argument("-D", "--define", action="append", default=[], metavar="KEY=VALUE",
                        type=lambda text: tuple(text.split("=", 1)),
                        help="extra setting for the mqgate broker started here")
    parser.add_argument("--broker", type=broker_list, metavar="NAMES",
                        help="compare brokers: comma-separated names from %s, or all; "
                             "each is started in turn on --amqp-port and --stomp-port"
                             % ",".join(BROKERS))
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --broker: run every broker this many times (default 1)")
    parser.add_argument("--summary", action="store_true",
                        help="with --broker: print a table of medians and mqgate's ratio "
                             "to the best other broker")
    parser.add_argument("--amqp-port", type=int, default=5672,
                        help="with --broker: every broker's AMQP port (default 5672; 0 "
                             "picks a free one for the whole run)")
    parser.add_argument("--stomp-port", type=int, default=61613,
                        help="with --broker: every broker's STOMP port (default 61613; "
                             "0 picks a free one)")
    parser.add_argument("--summary-of", type=Path, metavar="JSONL",
                        help="print the summary table of a comparison saved in "
                             "bench/results/ (a run cut short included) and exit")
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results",
                        help="directory for the .jsonl record (default bench/results)")
    parser.add_argument("--no-save", action="store_true", help="print only")
    options = parser.parse_args(argv)
    if bool(options.amqp_url) != bool(options.stomp_url):
        parser.error("give both --amqp-url and --stomp-url (one broker), or neither")
    if options.broker and options.amqp_url:
        parser.error("--broker starts the brokers itself: leave out --amqp-url and --stomp-url")
    if options.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {options.rounds}")
    if (options.rounds > 1 or options.summary) and not options.broker:
        parser.error("--rounds and --summary go with --broker (e.g. --broker mqgate)")
    return options


def broker_list(text):
    """--broker's value: names from BROKERS, or "all"; mqgate first if named."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(BROKERS)
    unknown = [name for name in names if name not in BROKERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown broker {', '.join(unknown) or repr(text)}: choose from "
            f"{', '.join(BROKERS)}, or all")
    return sorted(set(names), key=BROKERS.index)


def node_problem():
    """Why the generator cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (the Node generator needs Node.js 18 or later)"
    if not (NODE_DIR / "node_modules" / "rhea").is_dir():
        return "bench/node/node_modules is missing: run `npm ci` in bench/node (make bench does)"
    return None


def generator_argv(options, amqp_url, stomp_url, only=None, extra=()):
    argv = ["node", str(GENERATOR), "--amqp-url", amqp_url, "--stomp-url", stomp_url,
            "--messages", str(options.messages), "--seconds", str(options.seconds),
            "--rate", str(options.rate), "--timeout", str(options.timeout),
            "--user", options.user, "--password", options.password, *extra]
    for name in options.only if only is None else only:
        argv += ["--only", name]
    return argv


def scenario_names(rate):
    """Every scenario of the generator, AMQP's then STOMP's, as bench.js names them."""
    names = [row[1] for row in ROWS] + [row[2] for row in ROWS]
    return [name.replace("RATE", str(rate)) for name in names]


def chosen_scenarios(options):
    """The scenarios --only asks for (bench.js's own names, comma-separated), or all."""
    wanted = {name for text in options.only for name in text.split(",") if name}
    return [name for name in scenario_names(options.rate) if not wanted or name in wanted]


def run_generator(options, amqp_url, stomp_url, only=None, extra=()):
    """Run bench.js; return its JSON lines (an error line if it printed none)."""
    try:
        done = subprocess.run(generator_argv(options, amqp_url, stomp_url, only, extra),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return [{"scenario": "node", "error": f"still running after {RUN_TIMEOUT} s"}]
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.startswith("{")]
    if not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        lines.append({"scenario": "node", "error": f"exit code {done.returncode}: {why}"})
    return lines


def start_mqgate(options, varhome, amqp_port=0, stomp_port=0):
    """An mqgate broker on the shipped configuration; its AMQP and STOMP URLs.

    The ``jms`` service speaks AMQP (and STOMP); the ``stomp`` service STOMP alone,
    like the other brokers' STOMP ports. Ports 0 are chosen by the OS.
    """
    defines = {"mqgate.jms.tcp.port": str(amqp_port), "mqgate.stomp.tcp.port": str(stomp_port)}
    defines.update(options.define)
    broker = BrokerProcess(varhome, defines=defines)
    try:
        broker.spawn()
        amqp = "amqp://%s:%d" % broker.address("jms")
        stomp = "stomp://%s:%d" % broker.address("stomp")
    except BaseException:
        broker.kill()
        raise
    return broker, amqp, stomp


def stop_mqgate(broker, lines):
    try:
        broker.terminate()
    except BrokerError:
        print("warning: the broker did not stop on SIGTERM", file=sys.stderr)
    broker.kill()
    if any("error" in line for line in lines):
        tail = "".join(broker.output[-20:]).rstrip()
        print(f"--- broker output (last lines) ---\n{tail}\n--- end ---",
              file=sys.stderr, flush=True)


def on_new_broker(options):
    """Start mqgate on OS-chosen ports, run the generator on it, stop it."""
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-node-") as varhome:
        try:
            broker, amqp, stomp = start_mqgate(options, varhome)
        except BrokerError as e:
            return [{"scenario": "node", "error": f"the broker did not start: {e}"}]
        lines = []
        try:
            lines = run_generator(options, amqp, stomp)
        finally:
            stop_mqgate(broker, lines)
        return lines


def on_broker(options, name, ports, round_number):
    """Start broker C{name} on C{ports}, run the chosen scenarios on it, stop it.

    A protocol the broker does not serve here gives its scenarios a ``skipped`` line
    with the reason, not an error.
    """
    amqp_port, stomp_port = ports
    scenarios = chosen_scenarios(options)
    head = {"broker": name, "round": round_number}
    with tempfile.TemporaryDirectory(prefix=f"mqgate-bench-{name}-") as workdir:
        if name == "mqgate":
            try:
                broker, amqp, stomp = start_mqgate(options, workdir, amqp_port, stomp_port)
            except BrokerError as e:
                return [{**head, "scenario": "node", "error": f"mqgate did not start: {e}"}]
            lines = []
            try:
                lines = run_generator(options, amqp, stomp, scenarios)
            finally:
                stop_mqgate(broker, lines)
            return [{**line, **head} for line in lines]
        peer = PEERS[name](workdir, amqp_port, stomp_port, options.user, options.password)
        served = [s for s in scenarios if s.split("-", 1)[0] in peer.protocols]
        skipped = [{**head, "scenario": s, "skipped": peer.note} for s in scenarios
                   if s not in served]
        if not served:
            return skipped
        try:
            with peer:
                lines = run_generator(options, peer.amqp_url, peer.stomp_url, served,
                                      peer.generator_args)
                if any("error" in line for line in lines):
                    print(f"--- {name} output (last lines) ---\n{peer.output_tail()}\n--- end ---",
                          file=sys.stderr, flush=True)
        except PeerError as e:
            return [{**head, "scenario": "node", "error": str(e)}] + skipped
        return [{**line, **head} for line in lines] + skipped


def compare(options, emit):
    """Every broker of --broker, --rounds times, on the same ports; every line emitted."""
    ports = (options.amqp_port or free_port(), options.stomp_port or free_port())
    for name in options.broker:
        if name != "mqgate":
            problem = PEERS[name].problem()
            if problem:
                emit({"broker": name, "scenario": "node", "error": problem})
                return
            note = PEERS[name](".", *ports).note
            if note:
                print(f"run_node.py: {name}: {note}", file=sys.stderr, flush=True)
    for round_number in range(1, options.rounds + 1):
        for name in options.broker:
            print(f"run_node.py: round {round_number} of {options.rounds}: {name} on "
                  f"127.0.0.1 ports {ports[0]} (AMQP) and {ports[1]} (STOMP)",
                  file=sys.stderr, flush=True)
            for line in on_broker(options, name, ports, round_number):
                emit(line)


# --- the summary ------------------------------------------------------------------------

def figure(line, key):
    """The number a line is compared by, or None (failed, skipped, other scenario)."""
    value = line.get(key)
    return value if isinstance(value, (int, float)) and "error" not in line else None


def summarize(lines, brokers, rate):
    """One row per scenario run: the median of each broker's rounds, the best other
    broker, and mqgate's ratio to it (mqgate's figure over the best one's).

    @return: a list of dicts: C{row}, C{scenario}, C{generator}, C{key},
        C{medians} ({broker: value or None}), C{p50} ({broker: median p50 or None},
        latency only), C{counts} ({broker: (successful rounds, rounds)}), C{notes}
        ({broker: why skipped}), C{best} (a broker or None), C{ratio} (or None).
    """
    rows = []
    for label, *names, key in ROWS:
        for name in names:
            scenario = name.replace("RATE", str(rate))
            mine = [line for line in lines if line.get("scenario") == scenario]
            if not mine:
                continue
            row = {"row": label.replace("RATE", f"{rate:,}"), "scenario": scenario, "key": key,
                   "generator": next((line["generator"] for line in mine if "generator" in line),
                                     "node-rhea" if scenario.startswith("amqp") else "node-stomp"),
                   "medians": {}, "p50": {}, "counts": {}, "notes": {}}
            for broker in brokers:
                runs = [line for line in mine if line.get("broker", "mqgate") == broker]
                values = [v for v in (figure(line, key) for line in runs) if v is not None]
                notes = [line["skipped"] for line in runs if "skipped" in line]
                if notes:
                    row["notes"][broker] = notes[0]
                row["counts"][broker] = (len(values), len([r for r in runs if "skipped" not in r]))
                row["medians"][broker] = statistics.median(values) if values else None
                p50s = [v for v in (figure(line, "p50_ms") for line in runs) if v is not None]
                row["p50"][broker] = statistics.median(p50s) if p50s else None
            lower_is_better = key.endswith("_ms")
            others = {b: v for b, v in row["medians"].items() if b != "mqgate" and v is not None}
            row["best"] = None
            row["ratio"] = None
            if others:
                pick = min if lower_is_better else max
                row["best"] = pick(others, key=others.get)
                mqgate = row["medians"].get("mqgate")
                if mqgate is not None and others[row["best"]]:
                    row["ratio"] = mqgate / others[row["best"]]
            rows.append(row)
    return rows


def _cell(row, broker):
    value = row["medians"].get(broker)
    if value is None:
        if broker in row["notes"]:
            return "no " + row["scenario"].split("-", 1)[0].upper()
        done, runs = row["counts"].get(broker, (0, 0))
        return "failed" if runs else "-"
    if row["key"].endswith("_ms"):
        text = f"{value:.2f}"
        if row["p50"].get(broker) is not None:
            text += f" (p50 {row['p50'][broker]:.2f})"
    else:
        text = f"{value:,.0f}"
    done, runs = row["counts"][broker]
    if done < runs:
        text += f" ({done} of {runs} runs)"
    return text


def render_summary(rows, brokers, rounds):
    """The summary as a Markdown table (it reads as plain text too)."""
    peers = [b for b in brokers if b != "mqgate"]
    head = ["scenario", "generator"] + brokers
    if "mqgate" in brokers and peers:
        head += ["best other", "mqgate / best"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        cells = [f"{row['row']}: `{row['scenario']}`", row["generator"]]
        cells += [_cell(row, broker) for broker in brokers]
        if "mqgate" in brokers and peers:
            cells.append(row["best"] or "-")
            cells.append("-" if row["ratio"] is None else f"{row['ratio']:.2f}")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append(f"Medians of {rounds} run{'s' if rounds > 1 else ''} per broker, msg/s unless "
               "said. mqgate / best: mqgate's median over the best other broker's (for "
               "latency the lowest p99, so there below 1 means mqgate is ahead).")
    notes = {note for row in rows for note in row["notes"].values() if note}
    for broker in brokers:
        for note in sorted(n for n in notes if any(row["notes"].get(broker) == n for row in rows)):
            out.append(f"{broker}: {note}.")
    return "\n".join(out)


def generator_description():
    """Which generator made the figures, with rhea's version as installed."""
    try:
        rhea = json.loads((NODE_DIR / "node_modules" / "rhea" / "package.json").read_text())
        version = " " + rhea["version"]
    except (OSError, ValueError, KeyError):
        version = ""
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    return (f"bench/node/bench.js under Node {node}: rhea{version} for AMQP 1.0, "
            "its own plain STOMP 1.2 client for STOMP")


def summary_of(path, rate):
    """The summary of a saved comparison: the brokers and rounds its lines name."""
    lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()
             if text.startswith("{")]
    named = {line.get("broker", "mqgate") for line in lines}
    brokers = [name for name in BROKERS if name in named]
    rounds = max((line.get("round", 1) for line in lines), default=0)
    return render_summary(summarize(lines, brokers, rate), brokers, rounds)


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    if options.summary_of:
        print(summary_of(options.summary_of, options.rate))
        return 0
    problem = node_problem()
    if problem:
        print(f"run_node.py: {problem}", file=sys.stderr)
        return 1
    # SIGTERM and SIGHUP unwind like Ctrl-C, so that every broker started here is stopped.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda signum, frame: sys.exit(128 + signum))
    record = None
    if not options.no_save:
        options.results.mkdir(parents=True, exist_ok=True)
        record = options.results / time.strftime("%Y%m%dT%H%M%SZ-node.jsonl", time.gmtime())
    lines = []

    def emit(line):
        lines.append(line)
        text = json.dumps(line)
        print(text, flush=True)
        if record is not None:
            with record.open("a", encoding="utf-8") as out:
                out.write(text + "\n")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    if options.broker:
        compare(options, emit)
    else:
        for line in (run_generator(options, options.amqp_url, options.stomp_url)
                     if options.amqp_url else on_new_broker(options)):
            emit(line)
    if options.summary:
        print(f"\n{generator_description()}; started {started}, load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before the run.\n")
        print(render_summary(summarize(lines, options.broker, options.rate), options.broker,
                             options.rounds), flush=True)
    return 1 if any("error" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
