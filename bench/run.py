"""Run every benchmark scenario in sequence: `make bench` (docs/design.md).

First the scripts that need no broker (bench/core_bench.py, and bench/capture.py: what a
capture costs a producer; the core alone, in
process), then the AMQP queue scenarios of bench/amqp_throughput.py (Proton clients) and
of bench/amqp_engine_throughput.py (clients built on mqgate's own AMQP engine, a lean
load generator that does not saturate before the broker does), the AMQP fan-out
of bench/fanout.py, the STOMP queue scenarios of bench/stomp_throughput.py, the
STOMP fan-out and the persistent scenarios of bench/persistent.py (each store, sync on
and off, 1 and 10 producers: messages/s and fsyncs/s), each on a new broker.
Every scenario prints one JSON line to stdout; the lines are
also appended to ``bench/results/<UTC time>.jsonl`` (ignored by git) so that runs can
be compared later. The exit code is 1 if any scenario failed; a failed scenario's
line carries an ``"error"`` field instead of numbers, and the next one still runs.

    python bench/run.py                    # 200,000 messages of 256 bytes each
    python bench/run.py --messages 20000   # a quick run
    python bench/run.py --only stomp-queue-client --only 'amqp-*'

``--messages`` counts messages received: a fan-out to ten consumers publishes a tenth
of it, so that every scenario moves the same number (see bench/fanout.py).
"""

import argparse
import fnmatch
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import amqp_engine_throughput  # noqa: E402
import amqp_throughput  # noqa: E402
import fanout  # noqa: E402
import persistent  # noqa: E402
import stomp_latency  # noqa: E402
import stomp_throughput  # noqa: E402
import tunnel_throughput  # noqa: E402
import ws_throughput  # noqa: E402


def _amqp(options):
    return options


#: (scenario name, module, mode, the module's options from run.py's) in the order
#: they run; each module has scenario_line(options, mode).
SCENARIOS = (
    [(f"amqp-queue-{mode}", amqp_throughput, mode, _amqp)
     for mode in amqp_throughput.SCENARIOS]
    + [(f"amqp-engine-queue-{mode}", amqp_engine_throughput, mode,
        amqp_engine_throughput.options_from)
       for mode in amqp_engine_throughput.SCENARIOS]
    + [(fanout.scenario_name("amqp", fanout.DEFAULT_CONSUMERS), fanout, "amqp",
        fanout.options_from)]
    + [(f"stomp-queue-{mode}", stomp_throughput, mode, stomp_throughput.options_from)
       for mode in stomp_throughput.SCENARIOS]
    + [(fanout.scenario_name("stomp", fanout.DEFAULT_CONSUMERS), fanout, "stomp",
        fanout.options_from)]
    + [(f"stomp-latency-{stomp_latency.DEFAULT_RATE}", stomp_latency, None,
        stomp_latency.options_from)]
    + [(name, persistent, name, persistent.options_from)
       for name in persistent.SCENARIOS]
    + [(name, tunnel_throughput, name, tunnel_throughput.options_from)
       for name in tunnel_throughput.SCENARIOS]
    + [(ws_throughput.NAME, ws_throughput, mode, ws_throughput.options_from)
       for mode in ws_throughput.SCENARIOS]
)

#: Benchmarks that run as their own script and print their own JSON lines; they
#: take ``--messages`` and are given this run's value. Run first: they need no broker.
SCRIPTS = ["core_bench.py", "capture.py"]
#: The name ``--only`` selects each script by (it prints several scenarios).
SCRIPT_NAMES = {"core_bench.py": "core", "capture.py": "capture"}
#: A script gets this long before it counts as hung.
SCRIPT_TIMEOUT = 900


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    amqp_throughput.add_common_arguments(parser)
    parser.add_argument("-D", "--define", type=amqp_throughput._define,
                        action="append", default=[], metavar="KEY=VALUE",
                        help="extra broker setting for every scenario (repeatable)")
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results",
                        help="directory for the .jsonl record (default bench/results)")
    parser.add_argument("--no-save", action="store_true",
                        help="print only, write no results file")
    parser.add_argument("--stomp-url", default=None,
                        help="run the STOMP scenarios on the broker at stomp://HOST:PORT")
    parser.add_argument("--only", action="append", default=[], metavar="SCENARIO",
                        help="run only this scenario (repeatable, comma-separated, "
                             "shell wildcards; 'core' is bench/core_bench.py): "
                             + ", ".join(_known_names()))
    options = parser.parse_args(argv)
    options.only = [name for text in options.only for name in text.split(",") if name]
    unknown = [name for name in options.only
               if not any(fnmatch.fnmatchcase(known, name) for known in _known_names())]
    if unknown:
        parser.error(f"no scenario matches {', '.join(unknown)}; known: "
                     + ", ".join(_known_names()))
    return options


def _known_names():
    return list(SCRIPT_NAMES.values()) + [entry[0] for entry in SCENARIOS]


def _selected(name, options):
    return not options.only or any(fnmatch.fnmatchcase(name, pattern)
                                   for pattern in options.only)


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    record = None
    if not options.no_save:
        options.results.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        record = options.results / f"{stamp}.jsonl"
    failed = False
    for script in SCRIPTS:
        if not _selected(SCRIPT_NAMES[script], options):
            continue
        lines = run_script(script, options)
        for line in lines:
            _publish(line, record)
        failed = failed or any("error" in line for line in lines)
    for name, module, mode, options_for in SCENARIOS:
        if not _selected(name, options):
            continue
        line = module.scenario_line(options_for(options), mode)
        failed = failed or "error" in line
        _publish(line, record)
    return 1 if failed else 0


def run_script(script, options):
    """Run C{bench/script --messages N}; return its JSON lines (or one error line)."""
    path = BENCH_DIR / script
    if not path.exists():
        return []
    try:
        done = subprocess.run(
            [sys.executable, str(path), "--messages", str(options.messages)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return [{"scenario": script, "error": f"still running after {SCRIPT_TIMEOUT} s"}]
    lines = [json.loads(text) for text in done.stdout.splitlines()
             if text.startswith("{")]
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        lines.append({"scenario": script,
                      "error": f"exit code {done.returncode}: {why}"})
    return lines


def _publish(line, record):
    """Print one scenario's JSON line and append it to the results file."""
    text = json.dumps(line)
    print(text, flush=True)
    if record is not None:
        with record.open("a", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
