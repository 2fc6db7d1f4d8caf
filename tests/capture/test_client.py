"""
`mqgate capture` (S7.6): how its lines read, and the errors it gives without a broker
(the e2e module runs it against a real one).
"""

import socket

from mqgate.admin.cli import main
from mqgate.capture.client import format_line


def test_a_message_line_says_when_where_ids_properties_and_body():
    line = format_line({
        "type": "message", "id": 7, "captured_at": 0.25, "address": "queue://orders",
        "message_id": "m-1", "correlation_id": None, "reply_to": "replies",
        "properties": {"region": "emea"}, "body_text": "x" * 100, "body_size": 300,
        "truncated": True})
    assert line.startswith("1970-01-01T00:00:00.250Z  #7  queue://orders  id=m-1  "
                           "reply-to=replies  region=emea  'xxx")
    assert "...'" in line and "(body cut at 100 of 300 bytes)" in line


def test_dropped_lines_say_whose_fault():
    assert format_line({"type": "dropped", "count": 3, "reason": "slow reader"}) == \
        "-- 3 message(s) not shown: this reader read too slowly"
    assert "the broker dropped them (ring, subscription s1)" in format_line(
        {"type": "dropped", "count": 1, "reason": "ring", "subscription": "s1"})


def test_no_broker_there_is_exit_2_saying_where_it_looked(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]      # nothing listens there once closed
    passfile = tmp_path / "passfile"
    passfile.write_text("mqgate.imqcmd.password=admin\n")
    passfile.chmod(0o600)
    status = main(["capture", "search", "--varhome", str(tmp_path), "--url",
                   f"http://127.0.0.1:{port}", "--passfile", str(passfile)])
    err = capsys.readouterr().err
    assert status == 2
    assert f"cannot reach the broker's HTTP admin API at http://127.0.0.1:{port}" in err
