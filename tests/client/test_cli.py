"""`mqgate send` and `mqgate receive` refusing bad arguments before connecting: exit
2 and a message naming the bad value (the broker round trips are in
tests/e2e/test_client.py)."""

import pytest

from mqgate.admin.cli import main


@pytest.mark.parametrize("words, named", [
    (["send", "amqp://h", "q", "--body", "x", "--property", "novalue"], "'novalue'"),
    (["send", "amqp://h", "q", "--body", "x", "--count", "-1"], "--count -1"),
    (["send", "ftp://h", "q", "--body", "x"], "'ftp://h'"),
    (["send", "amqp://u:hunter2@h", "q", "--body", "x"], "MQGATE_PASSWORD"),
    (["send", "amqp://h", "q", "--file", "/no/such/file"], "/no/such/file"),
    (["receive", "amqp://h", "q", "--timeout", "0"], "--timeout 0"),
])
def test_bad_arguments_exit_2_naming_them(words, named, capsys, monkeypatch):
    """Each bad argument exits 2 with its value named, and a password given in the URL
    is not repeated."""
    monkeypatch.setenv("MQGATE_PASSWORD", "pw")
    assert main(words) == 2
    error = capsys.readouterr().err
    assert named in error and "hunter2" not in error


def test_send_needs_a_body(capsys):
    """send without --body or --file is a usage error that says which to give."""
    with pytest.raises(SystemExit) as exit_:
        main(["send", "amqp://h", "q"])
    assert exit_.value.code == 2 and "--body" in capsys.readouterr().err


def test_no_password_without_a_terminal_says_where_to_give_it(capsys, monkeypatch):
    """A user without a password and no terminal to ask at: exit 2 naming
    MQGATE_PASSWORD and --password-file."""
    monkeypatch.delenv("MQGATE_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["send", "-u", "bob", "amqp://h", "q", "--body", "x"]) == 2
    error = capsys.readouterr().err
    assert "'bob'" in error and "--password-file" in error
