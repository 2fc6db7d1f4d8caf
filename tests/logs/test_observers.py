"""Which events reach an output (level and categories) and the lines written (S5.2)."""

import io
import json

import pytest
from twisted.internet.task import Clock
from twisted.logger import Logger, LogPublisher
from twisted.python.failure import Failure

from mqgate.config import Settings
from mqgate.logs.observers import FilteredObserver, json_line, parse_output
from mqgate.logs.setup import CONSOLE_STREAM, NO_CONSOLE, log_file_path, log_plan


def emit_one_of_each(observer):
    """Log one event of every level through observer."""
    log = Logger(namespace="mqgate.test", observer=observer)
    log.debug("a debug event")
    log.info("an info event")
    log.warn("a warning event")
    log.error("an error event")
    log.critical("a critical event")


def passed(level, output):
    """The messages of emit_one_of_each that a filter of level and output lets through."""
    seen = []
    emit_one_of_each(FilteredObserver(seen.append, level, parse_output(output)))
    return [event["log_format"] for event in seen]


def test_level_includes_the_more_severe_levels():
    """WARNING lets warnings and errors (critical included) through, not info or debug."""
    assert passed("WARNING", "ALL") == [
        "a warning event", "an error event", "a critical event"]
    assert passed("DEBUG", "ALL") == [
        "a debug event", "an info event", "a warning event", "an error event",
        "a critical event"]


def test_categories_have_no_implied_inclusion():
    """INFO as an output writes info events only: no warnings, no errors."""
    assert passed("INFO", "INFO") == ["an info event"]
    assert passed("INFO", "ERROR|INFO") == [
        "an info event", "an error event", "a critical event"]


def test_level_and_categories_both_apply():
    """A category named in the output is still held back by the level."""
    assert passed("WARNING", "INFO|WARNING") == ["a warning event"]
    assert passed("ERROR", "DEBUG") == []


@pytest.mark.parametrize("text, expected", [
    ("ALL", {"ERROR", "WARNING", "INFO", "DEBUG"}),
    ("NONE", set()),
    (" error | Warning ", {"ERROR", "WARNING"}),
    ("NONE|INFO", {"INFO"}),
])
def test_parse_output(text, expected):
    """Output settings are '|'-separated words, any letter case, ALL and NONE included."""
    assert parse_output(text) == expected


@pytest.mark.parametrize("text", ["", "ERROR,WARNING", "ERROR|", "FATAL"])
def test_bad_output_settings_are_refused_by_name(text):
    """A bad output value stops start-up with a message naming the key and the words."""
    with pytest.raises(Exception) as raised:
        Settings.from_properties([], {"mqgate.log.file.output": text})
    assert "mqgate.log.file.output" in str(raised.value)
    assert "ERROR, WARNING, INFO, DEBUG, ALL, NONE" in str(raised.value)


def test_json_lines_parse_and_carry_the_fields():
    """Each JSON line is one object with time, level, namespace, message and, for a
    failure, its traceback."""
    lines = []
    log = Logger(namespace="mqgate.test",
                 observer=lambda event: lines.append(json_line(event)))
    log.info("hello {who}", who="operator")
    try:
        1 / 0
    except ZeroDivisionError:
        log.failure("it broke")
    first, second = (json.loads(line) for line in lines)
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert first["level"] == "INFO" and first["message"] == "hello operator"
    assert first["namespace"] == "mqgate.test"
    assert first["time"].endswith("+00:00") and "T" in first["time"]
    assert second["level"] == "ERROR" and "ZeroDivisionError" in second["traceback"]


def settings(tmp_path, **overrides):
    """Settings with VARHOME tmp_path and the given overrides."""
    return Settings.from_properties([], overrides, varhome=str(tmp_path))


def test_plan_writes_console_and_file_with_their_own_categories(tmp_path):
    """The console gets its categories on its stream, the file its own in
    VARHOME/instances/NAME/log/log.txt."""
    out, err = io.StringIO(), io.StringIO()
    plan = log_plan(settings(tmp_path, **{"mqgate.log.console.output": "ERROR",
                                          "mqgate.log.console.stream": "stderr"}),
                    console=CONSOLE_STREAM, clock=Clock().seconds,
                    streams={"stdout": out, "stderr": err})
    emit_one_of_each(plan.observer)
    assert out.getvalue() == ""
    assert [line.split("] ", 1)[1] for line in err.getvalue().splitlines()] == [
        "an error event", "a critical event"]
    path = tmp_path / "instances" / "mqgate" / "log" / "log.txt"
    assert plan.file == str(path) == log_file_path(settings(tmp_path))
    assert [line.split("] ", 1)[1] for line in path.read_text().splitlines()] == [
        "an info event", "a warning event", "an error event", "a critical event"]
    assert plan.describe() == f"the console (stderr) and {path}"


def test_plan_json_file_and_no_console(tmp_path):
    """format=json writes JSON lines; a daemon without --logfile has no console."""
    out = io.StringIO()
    plan = log_plan(settings(tmp_path, **{"mqgate.log.file.format": "json",
                                          "mqgate.log.file.dirpath": str(tmp_path / "d"),
                                          "mqgate.log.file.filename": "b.jsonl"}),
                    console=NO_CONSOLE, clock=Clock().seconds,
                    streams={"stdout": out, "stderr": out})
    emit_one_of_each(plan.observer)
    records = [json.loads(line) for line in (tmp_path / "d" / "b.jsonl").open()]
    assert [r["level"] for r in records] == ["INFO", "WARNING", "ERROR", "ERROR"]
    assert out.getvalue() == "" and plan.console is None
    assert plan.describe() == str(tmp_path / "d" / "b.jsonl")


def test_plan_with_both_outputs_none_writes_nothing(tmp_path):
    """NONE for both outputs: no file is made and nothing is printed."""
    out = io.StringIO()
    plan = log_plan(settings(tmp_path, **{"mqgate.log.file.output": "NONE",
                                          "mqgate.log.console.output": "NONE"}),
                    console=CONSOLE_STREAM, clock=Clock().seconds,
                    streams={"stdout": out, "stderr": out})
    emit_one_of_each(plan.observer)
    assert out.getvalue() == "" and not (tmp_path / "instances").exists()
    assert plan.file is None and "nowhere" in plan.describe()


def test_plan_console_to_twistd_logfile(tmp_path):
    """twistd --logfile PATH: the console output goes to that file."""
    path = tmp_path / "twistd.log"
    plan = log_plan(settings(tmp_path, **{"mqgate.log.console.output": "WARNING"}),
                    console=str(path), clock=Clock().seconds)
    emit_one_of_each(plan.observer)
    assert [line.split("] ", 1)[1] for line in path.read_text().splitlines()] == [
        "a warning event"]
    assert plan.console == str(path)


def test_an_observer_in_a_publisher_survives_a_failing_file(tmp_path):
    """A log file that cannot be written does not make the publisher drop the observer:
    the console keeps getting events."""
    (tmp_path / "instances").write_text("not a directory")
    out, err = io.StringIO(), io.StringIO()
    plan = log_plan(settings(tmp_path), console=CONSOLE_STREAM, clock=Clock().seconds,
                    streams={"stdout": out, "stderr": err})
    publisher = LogPublisher(plan.observer)
    emit_one_of_each(publisher)
    assert out.getvalue().count("\n") == 4
    assert "cannot write the log file" in err.getvalue()


def test_openmq_stream_words_are_accepted(tmp_path):
    """imq.log.console.stream=ERR, from an OpenMQ configuration, means stderr."""
    out, err = io.StringIO(), io.StringIO()
    plan = log_plan(settings(tmp_path, **{"imq.log.console.stream": "ERR",
                                          "mqgate.log.file.output": "NONE"}),
                    console=CONSOLE_STREAM, clock=Clock().seconds,
                    streams={"stdout": out, "stderr": err})
    emit_one_of_each(plan.observer)
    assert out.getvalue() == "" and err.getvalue().count("\n") == 4
    assert plan.console == "stderr"
