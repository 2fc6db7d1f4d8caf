"""The broker's log file as a running broker writes it (S5.2): rolled over by size with
a bounded number of old files, JSON lines, and categories chosen per output."""

import json
import re

import pytest

pytestmark = pytest.mark.e2e


def log_dir(broker):
    """The broker's log directory (the default, under its instance)."""
    return broker.varhome / "instances" / "mqgate" / "log"


def test_small_rolloverbytes_rolls_the_log_over_and_keeps_maxfiles(broker_factory):
    """With rolloverbytes=1k and maxfiles=2 the start-up alone rolls the log over: log.txt
    and log.txt.1, .2 are there, none past 1 KiB and no .3; the banner names the file."""
    broker = broker_factory({"mqgate.log.file.rolloverbytes": "1k",
                             "mqgate.log.file.maxfiles": "2"})
    broker.wait_for_line("mqgate ready")
    assert broker.terminate() == 0
    directory = log_dir(broker)
    names = sorted(p.name for p in directory.iterdir() if p.name.startswith("log.txt"))
    assert names == ["log.txt", "log.txt.1", "log.txt.2"]
    assert all((directory / name).stat().st_size <= 1024 for name in names)
    # Oldest file first, the lines read on without a gap to the broker's last words
    # (wherever the last rollover fell: the lines' length depends on the paths in them).
    text = "".join((directory / name).read_text() for name in reversed(names))
    assert "mqgate stopped" in text
    assert text.rstrip().endswith("Server Shut Down.")
    banner = broker.wait_for_line(r"starting: .*log to (.*)").group(1)
    assert banner == f"the console (stdout) and {directory / 'log.txt'}"


def test_json_file_with_its_own_categories(broker_factory):
    """format=json and file.output=WARNING|ERROR: the file has one JSON object per line,
    warnings only (the default-password warnings), while the console still has INFO."""
    broker = broker_factory({"mqgate.log.file.format": "json",
                             "mqgate.log.file.output": "WARNING|ERROR",
                             "mqgate.log.file.filename": "broker.jsonl"})
    broker.wait_for_line("mqgate ready")
    assert broker.terminate() == 0
    records = [json.loads(line)
               for line in (log_dir(broker) / "broker.jsonl").read_text().splitlines()]
    assert records and {r["level"] for r in records} == {"WARNING"}
    assert any(re.search("user 'admin' still has the default password", r["message"])
               for r in records)
    assert all(set(r) >= {"time", "level", "namespace", "message"} for r in records)
    assert any("mqgate ready" in line for line in broker.output)
