"""The log file's rollover by size and by age, and its bounded old files (S5.2)."""

import io
import os
import stat

from twisted.internet.task import Clock

from mqgate.logs.files import NO_LIMIT, RollingLogFile


def rolling(tmp_path, clock=None, **limits):
    """A RollingLogFile in tmp_path/log/log.txt with the given limits."""
    options = dict(rollover_bytes=NO_LIMIT, rollover_secs=NO_LIMIT, max_files=3)
    options.update(limits)
    return RollingLogFile(tmp_path / "log" / "log.txt",
                          clock=(clock or Clock()).seconds, **options)


def on_disk(tmp_path):
    """{file name: text} of every file in the log directory."""
    directory = tmp_path / "log"
    return {name: (directory / name).read_text() for name in sorted(os.listdir(directory))}


def test_rolls_over_before_a_line_would_pass_the_size(tmp_path):
    """A line that would take the file past rollover_bytes starts a new file, and the
    old one becomes log.txt.1 with its lines whole."""
    log = rolling(tmp_path, rollover_bytes=25)
    log.write("first line: 12 bytes\n")   # 21 bytes
    log.write("second\n")                 # 28 > 25: rolls over first
    assert on_disk(tmp_path) == {"log.txt": "second\n",
                                 "log.txt.1": "first line: 12 bytes\n"}


def test_a_line_longer_than_the_limit_gets_a_file_of_its_own(tmp_path):
    """An empty file is never rolled over, so a long line is written, not lost."""
    log = rolling(tmp_path, rollover_bytes=10)
    log.write("x" * 30 + "\n")
    log.write("y\n")
    assert on_disk(tmp_path) == {"log.txt": "y\n", "log.txt.1": "x" * 30 + "\n"}


def test_rolls_over_by_age_on_the_injected_clock(tmp_path):
    """Once the file is rollover_secs old the next line starts a new file; before
    that, lines stay in it."""
    clock = Clock()
    log = rolling(tmp_path, clock, rollover_secs=60)
    log.write("at 0\n")
    clock.advance(59)
    log.write("at 59\n")
    assert on_disk(tmp_path) == {"log.txt": "at 0\nat 59\n"}
    clock.advance(1)
    log.write("at 60\n")
    clock.advance(60)
    log.write("at 120\n")
    assert on_disk(tmp_path) == {"log.txt": "at 120\n", "log.txt.1": "at 60\n",
                                 "log.txt.2": "at 0\nat 59\n"}


def test_old_files_are_bounded_and_the_oldest_goes(tmp_path):
    """With max_files=3, ten rollovers leave log.txt.1..3: the three newest old files."""
    log = rolling(tmp_path, rollover_bytes=1024, max_files=3)
    for n in range(11):
        log.write(f"{n}\n" + "." * 1020 + "\n")
    files = on_disk(tmp_path)
    assert sorted(files) == ["log.txt", "log.txt.1", "log.txt.2", "log.txt.3"]
    assert [files[name].split("\n")[0] for name in
            ("log.txt", "log.txt.1", "log.txt.2", "log.txt.3")] == ["10", "9", "8", "7"]
    assert log.old_files() == [str(tmp_path / "log" / f"log.txt.{n}") for n in (1, 2, 3)]


def test_max_files_zero_keeps_no_old_file(tmp_path):
    """max_files=0: a rollover simply starts the file again."""
    log = rolling(tmp_path, rollover_bytes=1024, max_files=0)
    log.write("a" * 1000 + "\n")
    log.write("b" * 1000 + "\n")
    assert on_disk(tmp_path) == {"log.txt": "b" * 1000 + "\n"}


def test_appends_to_an_existing_file_and_counts_its_size(tmp_path):
    """A restarted broker appends to log.txt, and its size counts towards the limit."""
    rolling(tmp_path, rollover_bytes=1024).write("a" * 1000 + "\n")
    again = rolling(tmp_path, rollover_bytes=1024)
    again.write("b" * 30 + "\n")
    assert on_disk(tmp_path) == {"log.txt": "b" * 30 + "\n", "log.txt.1": "a" * 1000 + "\n"}


def test_the_file_and_its_directory_are_owner_only(tmp_path):
    """The log names users and addresses: 0600 for the file, 0700 for a directory it makes."""
    rolling(tmp_path).write("x\n")
    assert stat.S_IMODE(os.stat(tmp_path / "log" / "log.txt").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "log").st_mode) == 0o700


def test_a_write_that_fails_is_reported_once_and_never_raises(tmp_path):
    """A log that cannot be written says so once on stderr, loses the line, and works
    again (saying so) when it can."""
    errors = io.StringIO()
    (tmp_path / "log").write_text("a file where the directory should be")
    log = RollingLogFile(tmp_path / "log" / "log.txt", rollover_bytes=NO_LIMIT,
                         rollover_secs=NO_LIMIT, max_files=1, clock=Clock().seconds,
                         errors=errors)
    log.write("lost 1\n")
    log.write("lost 2\n")
    assert errors.getvalue().count("cannot write the log file") == 1
    (tmp_path / "log").unlink()
    log.write("kept\n")
    assert (tmp_path / "log" / "log.txt").read_text() == "kept\n"
    assert "works again" in errors.getvalue()
