"""The broker's log under twistd: which of twistd's options decide the console, and the
observer twistd is given (S5.2)."""

import io

import pytest
from twisted.application import service
from twisted.logger import ILogObserver, Logger
from twisted.scripts.twistd import ServerOptions

from mqgate import tap
from mqgate.logs.setup import CONSOLE_STREAM, NO_CONSOLE


def twistd(*args):
    """Parse a twistd command line (`twistd ARGS mqgate --config ''`); return mqgate's
    options, whose parent is twistd's."""
    options = ServerOptions()
    options.parseOptions([*args, "mqgate", "--config", ""])
    return options.subOptions


@pytest.mark.parametrize("args, expected", [
    (["-n"], CONSOLE_STREAM),
    (["-n", "--logfile", "-"], CONSOLE_STREAM),
    ([], NO_CONSOLE),
])
def test_console_follows_twistd_options(args, expected):
    """In the foreground the console is mqgate.log.console.stream; a daemon without
    --logfile has none."""
    assert tap._twistd_console(twistd(*args)) == expected


def test_twistd_logfile_is_the_console(tmp_path):
    """twistd --logfile PATH sends the console output to PATH."""
    path = tmp_path / "twistd.log"
    assert tap._twistd_console(twistd("-n", "--logfile", str(path))) == str(path)


@pytest.mark.parametrize("args", [["-n", "--syslog"],
                                  ["-n", "--logger", "twisted.logger.globalLogPublisher"]])
def test_syslog_and_logger_leave_logging_to_twistd(args):
    """With --syslog or --logger twistd's choice stands and mqgate sets no observer."""
    assert tap._twistd_console(twistd(*args)) is tap._TWISTD_DECIDES


def test_make_service_gives_twistd_the_log_observer(tmp_path, monkeypatch):
    """The service makeService returns puts its log observer on the application twistd
    makes, so twistd logs through it: the file gets the events."""
    options = ServerOptions()
    options.parseOptions(["-n", "mqgate", "--config", "", "--varhome", str(tmp_path),
                          "-D", "mqgate.log.file.format=json"])
    top = tap.makeService(options.subOptions)
    application = service.Application("mqgate")
    top.setServiceParent(application)
    observer = application.getComponent(ILogObserver)
    assert observer is top.log_observer
    log_txt = tmp_path / "instances" / "mqgate" / "log" / "log.txt"
    assert top.log_destination == f"the console (stdout) and {log_txt}"
    monkeypatch.setattr("sys.stdout", io.StringIO())   # not the console: taken before
    Logger(namespace="mqgate", observer=observer).info("hello from a test")
    assert '"message": "hello from a test"' in log_txt.read_text()
