"""The audit trail of a real broker (S4.8): logins over AMQP and STOMP, admin requests
through `mqgate cmd`, destinations made by clients, each one JSON line read back from
the audit file (or the broker's log)."""

import json
import os
import re
import stat
import time

from tests.e2e.admin_cmd import mqgate_cmd
from tests.e2e.proton_client import connect
from tests.e2e.test_usermgr import amqp_login, stomp_login

DEADLINE = 10.0   # records are written every quarter second


def audit_path(broker):
    return broker.varhome / "instances" / "mqgate" / "log" / "audit.log"


def records_in_file(broker):
    path = audit_path(broker)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def wait_for_record(read, timeout=DEADLINE, **fields):
    """The first record whose fields include C{fields}, waiting up to C{timeout}."""
    deadline = time.monotonic() + timeout
    while True:
        records = read()
        for record in records:
            if all(record.get(k) == v for k, v in fields.items()):
                return record
        assert time.monotonic() < deadline, f"no record {fields} in {records}"
        time.sleep(0.05)   # polling the file, bounded by the deadline


def test_each_event_kind_is_one_json_line(broker, passfile):
    """S4.8: logins (ok and failed, AMQP and STOMP), admin requests (ok and failed)
    and a destination made by a client each give one JSON line in audit.log, with
    time, user, address, service and outcome; the file is owner-only."""
    assert amqp_login(broker, "admin", "admin")
    assert not amqp_login(broker, "admin", "not-the-password")
    assert stomp_login(broker, "guest", "guest")
    conn = connect(broker)
    conn.create_sender("queue://audit.made.here")
    conn.close()
    assert mqgate_cmd(broker, passfile, "show", "client-profile", "default").returncode == 0
    assert mqgate_cmd(broker, passfile, "show", "client-profile", "nosuch").returncode == 1

    read = lambda: records_in_file(broker)  # noqa: E731
    ok = wait_for_record(read, kind="authentication", outcome="ok", user="admin",
                         service="jms")
    assert ok["address"] == "127.0.0.1" and ok["mechanism"] == "password"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ok["time"])
    failed = wait_for_record(read, kind="authentication", outcome="failed", user="admin")
    assert failed["reason"] == "wrong password" and failed["address"] == "127.0.0.1"
    wait_for_record(read, kind="authentication", outcome="ok", user="guest",
                    service="stomp")
    created = wait_for_record(read, kind="destination.create",
                              name="audit.made.here")
    assert created["dest_type"] == "queue" and created["outcome"] == "ok"
    admin = wait_for_record(read, kind="admin", outcome="ok")
    assert admin["user"] == "admin" and admin["command"] == "show client-profile default"
    refused = wait_for_record(read, kind="admin", outcome="failed")
    assert refused["command"] == "show client-profile nosuch" and refused["status"] == 404
    assert "not-the-password" not in audit_path(broker).read_text(encoding="utf-8")
    assert stat.S_IMODE(os.stat(audit_path(broker)).st_mode) == 0o600

    broker.terminate()
    kinds = {r["kind"] for r in records_in_file(broker)}
    assert {"authentication", "admin", "destination.create"} <= kinds


def test_empty_file_setting_writes_to_the_broker_log(broker_factory):
    """S4.8: with mqgate.audit.file empty the records go to the broker's own log, still
    one JSON object each, and no audit file is made."""
    broker = broker_factory({"mqgate.audit.file": ""})
    assert not amqp_login(broker, "mallory", "guess")

    def read():
        found = []
        for line in list(broker.output):
            match = re.search(r"audit (\{.*\})\s*$", line)
            if match:
                found.append(json.loads(match.group(1)))
        return found

    record = wait_for_record(read, kind="authentication", outcome="failed")
    assert record["user"] == "mallory" and record["reason"] == "unknown user"
    assert not audit_path(broker).exists()


def test_disabled_audit_writes_nothing(broker_factory):
    """S4.8: with mqgate.audit.enabled=false logins leave no audit file."""
    broker = broker_factory({"mqgate.audit.enabled": "false"})
    assert amqp_login(broker, "admin", "admin")
    broker.terminate()
    assert not audit_path(broker).exists()
