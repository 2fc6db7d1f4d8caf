"""What a broker start costs: the CPU of ``twistd -n mqgate`` from exec to "mqgate
ready", then an orderly stop (SIGTERM), on the shipped configuration with OS-chosen
ports and a new VARHOME each time -- exactly what each end-to-end test's broker does.

    .venv/bin/python bench/startup.py [--starts 10] [-D key=value ...]

prints one JSON line::

    {"scenario": "startup", "starts": 10, "cpu_s_median": 0.52, "cpu_s_min": ...,
     "cpu_s_max": ..., "ready_s_median": ...}

``cpu_s_*``: user plus system CPU of the broker process, start to exit (it is the
child of this script, so ``RUSAGE_CHILDREN`` counts it and its threads);
``ready_s_median``: wall time from exec to the "mqgate ready" line. The suite starts
some 350 brokers, so each 0.1 s here is about half a minute of its CPU. The machine is
shared: compare medians of runs made one after the other, not single starts.
"""

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.broker import BrokerProcess  # noqa: E402


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_start(defines):
    """(CPU seconds of one start-ready-stop cycle, seconds to "mqgate ready")."""
    before = _children_cpu()
    with tempfile.TemporaryDirectory(prefix="mqgate-startup-") as varhome:
        began = time.monotonic()
        broker = BrokerProcess(varhome, defines=defines)
        try:
            broker.spawn()
            broker.wait_for_line(r"mqgate ready")
            ready = time.monotonic() - began
            code = broker.terminate()
        finally:
            broker.kill()
    if code != 0:
        raise SystemExit(f"the broker exited with code {code}:\n"
                         + "".join(broker.output[-50:]))
    return _children_cpu() - before, ready


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10,
                        help="how many brokers to start one after the other (10)")
    parser.add_argument("-D", dest="defines", action="append", default=[],
                        metavar="KEY=VALUE", help="a setting for every broker")
    args = parser.parse_args(argv)
    defines = {}
    for item in args.defines:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"-D expects key=value, got {item!r}")
        defines[key] = value
    runs = [one_start(defines) for _ in range(args.starts)]
    cpu = [c for c, _ in runs]
    print(json.dumps({
        "scenario": "startup", "starts": args.starts,
        "cpu_s_median": round(statistics.median(cpu), 3),
        "cpu_s_min": round(min(cpu), 3), "cpu_s_max": round(max(cpu), 3),
        "ready_s_median": round(statistics.median(r for _, r in runs), 3)}))


if __name__ == "__main__":
    main()
