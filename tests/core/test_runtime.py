"""What is made at run time comes back after a restart (S7.1): the runtime document
the core builds and restores; the file is tests/store/test_runtime_catalog.py."""

import json

from mqgate.core.capture import CaptureBounds, CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink
from mqgate.core.broker import Requester
from mqgate.core.runtime import restore, snapshot
from mqgate.core.settings import AddressSetting, SecuritySetting

from tests.core import make_broker

ADMIN = Requester("ann", True, groups=("admin",))


def broker_with_captures():
    broker, clock = make_broker()
    broker.captures = Captures(broker, clock, CaptureConfig(node="n"), CountingSink())
    return broker


def test_round_trip_through_json():
    """Diverts, settings and captures made at run time are made again, the same,
    from the document (through JSON, as the file keeps it)."""
    broker = broker_with_captures()
    broker.create_divert("copy", "queue://a", "queue://b", selector="JMSPriority > 3")
    broker.create_divert("move", "topic://x", "queue://y", exclusive=True)
    broker.set_address_setting(AddressSetting("orders.#", "DROP", 60))
    broker.set_security_setting(SecuritySetting("secret.*", {"consume": ("ops",)}))
    broker.captures.install("cap", "queue://orders", selector="JMSPriority > 1",
                            bounds=CaptureBounds(ring_size=7), requester=ADMIN)
    document = json.loads(json.dumps(snapshot(broker)))
    # the capture's own divert and settings are not listed apart
    assert [d["name"] for d in document["diverts"]] == ["copy", "move"]
    assert [s["match"] for s in document["address_settings"]] == ["orders.#"]

    again = broker_with_captures()
    assert restore(again, document) == []
    assert snapshot(again) == document
    sub = again.captures.get("cap")
    assert sub.bounds.ring_size == 7 and sub.created_by == "ann"
    assert again.queue(sub.queue_name).limits.max_count == 7
    assert again.settings.security_for("secret.x").permissions == {"consume": ("ops",)}


def test_bad_entries_are_skipped_with_a_warning():
    """One entry that cannot be made is named in a warning; the others are made."""
    broker = broker_with_captures()
    document = {"version": 1, "diverts": [
        {"name": "bad", "address": "queue://a", "target": "queue://a"},
        {"name": "good", "address": "queue://a", "target": "queue://b"}],
        "address_settings": [{"match": "x", "full_policy": "SOMETIMES"}]}
    warnings = restore(broker, document)
    assert len(warnings) == 2
    assert "divert 'bad' not restored" in warnings[1] and "itself" in warnings[1]
    assert "address setting 'x' not restored" in warnings[0]
    assert broker.diverts.table.get("good") is not None


def test_other_version_is_not_restored():
    broker = broker_with_captures()
    assert "not version 1" in restore(broker, {"version": 99})[0]


def test_changes_are_announced():
    """Each change of a divert or setting calls on_runtime_change (the catalog
    writes itself then)."""
    broker = broker_with_captures()
    calls = []
    broker.on_runtime_change = lambda: calls.append(1)
    broker.create_divert("d", "queue://a", "queue://b")
    broker.destroy_divert("d")
    broker.set_address_setting(AddressSetting("a.#"))
    broker.remove_setting("address", "a.#")
    assert len(calls) == 4
