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

The JSON lines are the generator's (each names its ``generator``: ``node-rhea`` or
``node-stomp``), printed and appended to ``bench/results/<UTC time>.jsonl`` like
bench/run.py's. The exit code is 1 if a scenario failed or Node is missing.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from tests.e2e.broker import BrokerError, BrokerProcess  # noqa: E402

NODE_DIR = BENCH_DIR / "node"
GENERATOR = NODE_DIR / "bench.js"
#: Seconds the whole generator run may take before it counts as hung (it fails a
#: scenario that makes no progress for --timeout seconds by itself).
RUN_TIMEOUT = 1800


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
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results",
                        help="directory for the .jsonl record (default bench/results)")
    parser.add_argument("--no-save", action="store_true", help="print only")
    options = parser.parse_args(argv)
    if bool(options.amqp_url) != bool(options.stomp_url):
        parser.error("give both --amqp-url and --stomp-url (one broker), or neither")
    return options


def node_problem():
    """Why the generator cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (the Node generator needs Node.js 18 or later)"
    if not (NODE_DIR / "node_modules" / "rhea").is_dir():
        return "bench/node/node_modules is missing: run `npm ci` in bench/node (make bench does)"
    return None


def generator_argv(options, amqp_url, stomp_url):
    argv = ["node", str(GENERATOR), "--amqp-url", amqp_url, "--stomp-url", stomp_url,
            "--messages", str(options.messages), "--seconds", str(options.seconds),
            "--rate", str(options.rate), "--timeout", str(options.timeout),
            "--user", options.user, "--password", options.password]
    for name in options.only:
        argv += ["--only", name]
    return argv


def run_generator(options, amqp_url, stomp_url):
    """Run bench.js; return its JSON lines (an error line if it printed none)."""
    try:
        done = subprocess.run(generator_argv(options, amqp_url, stomp_url),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return [{"scenario": "node", "error": f"still running after {RUN_TIMEOUT} s"}]
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.startswith("{")]
    if not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        lines.append({"scenario": "node", "error": f"exit code {done.returncode}: {why}"})
    return lines


def on_new_broker(options):
    """Start mqgate on OS-chosen ports, run the generator on it, stop it."""
    with tempfile.TemporaryDirectory(prefix="mqgate-bench-node-") as varhome:
        broker = BrokerProcess(varhome, defines=dict(options.define))
        try:
            broker.spawn()
            amqp = "amqp://%s:%d" % broker.address("jms")
            stomp = "stomp://%s:%d" % broker.address("stomp")
        except BrokerError as e:
            broker.kill()
            return [{"scenario": "node", "error": f"the broker did not start: {e}"}]
        try:
            lines = run_generator(options, amqp, stomp)
        finally:
            try:
                broker.terminate()
            except BrokerError:
                print("warning: the broker did not stop on SIGTERM", file=sys.stderr)
            broker.kill()
        if any("error" in line for line in lines):
            tail = "".join(broker.output[-20:]).rstrip()
            print(f"--- broker output (last lines) ---\n{tail}\n--- end ---",
                  file=sys.stderr, flush=True)
        return lines


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    problem = node_problem()
    if problem:
        print(f"run_node.py: {problem}", file=sys.stderr)
        return 1
    if options.amqp_url:
        lines = run_generator(options, options.amqp_url, options.stomp_url)
    else:
        lines = on_new_broker(options)
    record = None
    if not options.no_save:
        options.results.mkdir(parents=True, exist_ok=True)
        record = options.results / time.strftime("%Y%m%dT%H%M%SZ-node.jsonl", time.gmtime())
    for line in lines:
        text = json.dumps(line)
        print(text, flush=True)
        if record is not None:
            with record.open("a", encoding="utf-8") as out:
                out.write(text + "\n")
    return 1 if any("error" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
