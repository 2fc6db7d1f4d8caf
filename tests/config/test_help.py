"""Help texts, log lines and error messages speak to operators: no requirement ids
(``S5.2`` and the like) in ``twistd mqgate --help``, ``mqgate --help`` and each of its
subcommands' help, the shipped configuration, or any log or error text in mqgate/."""

import ast
import re
import subprocess

import pytest

from mqgate.admin.cli import main
from mqgate.config import shipped_properties
from tests.config.test_tap import ROOT
from tests.e2e.broker import broker_environment, twistd_command

#: A requirement id (docs/requirements.md), as it would leak into a text.
SID = re.compile(r"\bS\d+\.\d+")

#: Method names that log (twisted.logger and the legacy twisted.python.log).
LOG_METHODS = {"debug", "info", "warn", "error", "critical", "failure", "msg", "err"}


def help_of(capsys, *argv):
    """What `mqgate ARGV --help` prints (argparse prints, then exits 0)."""
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_twistd_mqgate_help_has_no_requirement_ids():
    """`twistd mqgate --help` explains the options in words, and names init-config."""
    result = subprocess.run(twistd_command("mqgate", "--help"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=broker_environment(), timeout=60)
    assert result.returncode == 0, result.stdout
    assert "--config" in result.stdout and "init-config" in result.stdout
    assert SID.findall(result.stdout) == []


def test_mqgate_help_and_every_subcommand_help_have_no_requirement_ids(capsys):
    """`mqgate --help` and the help of each subcommand it lists."""
    top = help_of(capsys)
    names = re.search(r"\{([a-z,-]+)\}", top).group(1).split(",")
    assert {"keytool", "cmd", "usermgr", "dbmgr", "init-config"} <= set(names)
    offences = {name: SID.findall(help_of(capsys, name)) for name in names}
    offences["(mqgate --help)"] = SID.findall(top)
    assert {name: found for name, found in offences.items() if found} == {}


def test_shipped_configuration_has_no_requirement_ids():
    """The documented configuration an operator edits."""
    assert SID.findall(shipped_properties()) == []


@pytest.mark.parametrize("name", ["passwd", "accesscontrol.properties", "mqgate.service"])
def test_other_shipped_files_have_no_requirement_ids(name):
    """The user repository's and the access rules' headers, written into each new
    instance for the operator to edit, and the systemd unit."""
    assert SID.findall((ROOT / "etc" / name).read_text(encoding="utf-8")) == []


def texts_with_ids(source):
    """(line, text) of every string with a requirement id in a log call's message or
    in a raised exception's arguments, in Python source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_METHODS):
            parts = node.args[:1]
        elif isinstance(node, ast.Raise) and node.exc is not None:
            parts = [node.exc]
        else:
            continue
        for part in parts:
            for leaf in ast.walk(part):
                if (isinstance(leaf, ast.Constant) and isinstance(leaf.value, str)
                        and SID.search(leaf.value)):
                    found.append((node.lineno, leaf.value))
    return found


def test_the_checker_finds_ids_in_log_calls_and_raised_errors():
    """The scan below can fail: it sees an id in a log format, an f-string error and a
    failure message, and leaves comments and docstrings alone."""
    source = (
        '"""Docstring citing S5.2 is fine."""\n'
        "# so is a comment (S5.2)\n"
        "log.info('listening (S1.4) on {port}', port=1)\n"
        "raise ConfigError(f'bad {key} (S4.6)')\n"
        "log.failure('store broke (S3.1)')\n"
        "log.info('fine')\n")
    assert sorted(line for line, _ in texts_with_ids(source)) == [3, 4, 5]


@pytest.mark.parametrize("path", sorted((ROOT / "mqgate").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_log_and_error_texts_have_no_requirement_ids(path):
    """Every log format string and raised error text in mqgate/ speaks without ids."""
    assert texts_with_ids(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", sorted((ROOT / "bench").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_help_has_no_requirement_ids(path):
    """A bench script's --help: its description (most use the docstring's first line)
    and every help= and description= text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    texts = [(ast.get_docstring(tree) or "").splitlines()[:1]]
    texts += [[leaf.value] for node in ast.walk(tree) if isinstance(node, ast.keyword)
              and node.arg in ("help", "description")
              for leaf in ast.walk(node.value)
              if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str)]
    assert [text for group in texts for text in group if SID.search(text)] == []
