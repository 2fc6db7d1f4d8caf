"""The shipped systemd unit (etc/mqgate.service) runs a command twistd accepts."""

import configparser
import shlex

from twisted.scripts.twistd import ServerOptions

from tests.config.test_tap import ROOT


def unit():
    """The unit file, read as an INI file (systemd's syntax is close enough here)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(ROOT / "etc" / "mqgate.service")
    return parser


def test_unit_runs_twistd_in_the_foreground_with_the_documented_paths(tmp_path):
    """ExecStart parses as a twistd command line: -n, no pid file, the mqgate plugin
    with /etc/mqgate/mqgate.properties and varhome /var/lib/mqgate."""
    argv = shlex.split(unit()["Service"]["ExecStart"])
    assert argv[0].endswith("/bin/twistd")
    config = tmp_path / "mqgate.properties"
    config.write_text("mqgate.jms.tcp.port=5672\n")
    args = [str(config) if a == "/etc/mqgate/mqgate.properties" else a
            for a in argv[1:]]
    options = ServerOptions()
    options.parseOptions(args)
    assert options["nodaemon"] and options["pidfile"] == ""
    assert options.subCommand == "mqgate"
    assert options.subOptions["varhome"] == "/var/lib/mqgate"
    assert options.subOptions["settings"].config_path == str(config)


def test_unit_runs_as_mqgate_with_limits_and_restart_policy():
    """The service runs as the unprivileged user mqgate, with room for many connections,
    and is restarted when it fails."""
    service = unit()["Service"]
    assert service["User"] == "mqgate"
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["Restart"] == "on-failure"
    assert service["StateDirectory"] == "mqgate"
