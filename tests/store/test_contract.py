"""
One contract suite run against every store (docs/design.md; SPEC S3.1, S3.6).

Each test runs on the memory store and on the file store with sync on and off. A
"restart" is what the broker sees after a stop: the memory store's C{restarted()}, or a
new file store opened on the same directory, either after C{close()} (clean) or with
the old one simply abandoned (a killed process: its files are left as they are).
"""

import pytest
from twisted.python.failure import Failure

from mqgate.store import (
    DuplicateMessage, FileStore, IMessageStore, MemoryStore, StoreClosed, StoreError,
    TransactionStateError, UnknownMessage, destination_key, durable_key)
from tests.deferreds import result, run_now

Q = destination_key("queue", "orders")
Q2 = destination_key("queue", "audit")
#: Larger than the file store's max_record_size below: goes to an own file.
BIG = bytes(range(256)) * 40


def failure(d, kind):
    """The exception of a Deferred that failed with C{kind}."""
    box = []
    d.addBoth(box.append)
    assert box and isinstance(box[0], Failure), f"expected a failure, got {box}"
    assert box[0].check(kind), box[0]
    return box[0].value


class MemoryHarness:
    def open(self):
        store = MemoryStore()
        return store, result(store.recover())

    def restart(self, store, clean):
        if clean:
            result(store.close())
        fresh = store.restarted()
        return fresh, result(fresh.recover())


class FileHarness:
    def __init__(self, directory, sync):
        self.directory = directory
        self.sync = sync

    def _new(self):
        return FileStore(self.directory, run_now, sync=self.sync, max_record_size=1024,
                         segment_size=4096)

    def open(self):
        store = self._new()
        return store, result(store.recover())

    def restart(self, store, clean):
        if clean:
            result(store.close())
        fresh = self._new()
        return fresh, result(fresh.recover())


@pytest.fixture(params=["memory", "file-sync", "file-nosync"])
def harness(request, tmp_path):
    if request.param == "memory":
        return MemoryHarness()
    return FileHarness(tmp_path / "filestore", sync=request.param == "file-sync")


@pytest.fixture(params=[True, False], ids=["clean", "killed"])
def clean(request):
    return request.param


def ids(recovered, destination):
    """The message ids recovered for C{destination}, in order."""
    return [m.message_id for m in recovered.messages.get(destination, [])]


class TestStoreContract:
    """The behaviour every IMessageStore shares (S3.1, S3.6)."""

    def test_provides_interface(self, harness):
        """Every store provides IMessageStore and starts empty."""
        store, recovered = harness.open()
        assert IMessageStore.providedBy(store)
        assert recovered.messages == {} and recovered.destinations == []
        assert recovered.prepared == {} and recovered.max_message_id == 0

    def test_messages_come_back_in_order(self, harness, clean):
        """S3.1: persistent messages are restored per destination in their original order."""
        store, _ = harness.open()
        for mid in (5, 3, 9, 1):
            result(store.add_message(Q, mid, b"m%d" % mid))
        result(store.add_message(Q2, 2, BIG))
        result(store.remove_message(Q, 3))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [5, 9, 1]
        assert [m.data for m in recovered.messages[Q]] == [b"m5", b"m9", b"m1"]
        assert recovered.messages[Q2][0].data == BIG
        assert recovered.max_message_id >= 9

    def test_removed_and_readded_ids(self, harness, clean):
        """S3.6: an id removed and stored again comes back once, at its new place."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.add_message(Q, 2, b"b"))
        result(store.remove_message(Q, 1))
        result(store.add_message(Q, 1, b"again"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [2, 1]
        assert recovered.messages[Q][1].data == b"again"

    def test_large_messages_removed_do_not_come_back(self, harness, clean):
        """S3.3: messages over max_record_size are stored and removed like any other."""
        store, _ = harness.open()
        for mid in range(1, 6):
            result(store.add_message(Q, mid, BIG + bytes([mid])))
        for mid in (1, 3):
            result(store.remove_message(Q, mid))
        result(store.add_message(Q, 6, BIG))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [2, 4, 5, 6]
        assert recovered.messages[Q][1].data == BIG + b"\x04"

    def test_duplicate_and_unknown_ids_are_refused(self, harness):
        """S3.6: nothing is stored twice; removing or counting an unknown id fails."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        failure(store.add_message(Q, 1, b"b"), DuplicateMessage)
        failure(store.remove_message(Q, 2), UnknownMessage)
        failure(store.update_delivery_count(Q2, 1, 3), UnknownMessage)
        result(store.add_message(Q2, 1, b"same id, other destination"))

    def test_delivery_counts_survive(self, harness, clean):
        """S2.9: the latest recorded delivery count comes back with the message."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.add_message(Q, 2, BIG))
        result(store.update_delivery_count(Q, 1, 1))
        result(store.update_delivery_count(Q, 1, 4))
        result(store.update_delivery_count(Q, 2, 2))
        store, recovered = harness.restart(store, clean)
        assert [m.delivery_count for m in recovered.messages[Q]] == [4, 2]

    def test_destinations(self, harness, clean):
        """S3.1: destinations come back in creation order with their latest attributes;
        a removed destination takes its messages with it."""
        store, _ = harness.open()
        result(store.add_destination("queue", "orders", {"maxNumMsgs": 10}))
        result(store.add_destination("topic", "prices", {}))
        result(store.add_destination("queue", "audit", {}))
        result(store.add_destination("queue", "orders", {"maxNumMsgs": 20}))
        result(store.add_message(Q2, 1, b"a"))
        result(store.add_message(Q, 2, b"b"))
        result(store.remove_destination("queue", "audit"))
        store, recovered = harness.restart(store, clean)
        assert [(d.kind, d.name, d.attributes) for d in recovered.destinations] == [
            ("queue", "orders", {"maxNumMsgs": 20}), ("topic", "prices", {})]
        assert Q2 not in recovered.messages and ids(recovered, Q) == [2]

    def test_durable_subscriptions_and_backlog(self, harness, clean):
        """S3.1: durable subscriptions and their backlog survive; removing one drops
        its backlog."""
        store, _ = harness.open()
        keep, gone = durable_key("c1", "s1"), durable_key("c1", "s2")
        result(store.add_durable("c1", "s1", "prices.#", "price > 3"))
        result(store.add_durable("c1", "s2", "news", None))
        result(store.add_message(keep, 1, b"p"))
        result(store.add_message(gone, 1, b"n"))
        result(store.remove_durable("c1", "s2"))
        store, recovered = harness.restart(store, clean)
        assert [(d.container_id, d.name, d.topic, d.selector)
                for d in recovered.durables] == [("c1", "s1", "prices.#", "price > 3")]
        assert ids(recovered, keep) == [1] and gone not in recovered.messages

    def test_durable_owner_survives(self, harness, clean):
        """Ownership: the user a durable subscription belongs to comes back with it,
        a changed owner is stored in place, and one stored without owner has none."""
        store, _ = harness.open()
        result(store.add_durable("c1", "s1", "prices.#", None, "alice"))
        result(store.add_durable("c1", "s2", "news", None))
        result(store.add_durable("c1", "s2", "news", None, "bob"))
        result(store.add_durable("c2", "s3", "news", None))
        store, recovered = harness.restart(store, clean)
        assert [(d.container_id, d.name, d.owner) for d in recovered.durables] == [
            ("c1", "s1", "alice"), ("c1", "s2", "bob"), ("c2", "s3", None)]

    def test_commit_applies(self, harness, clean):
        """S3.1: a committed transaction's adds and removes are applied, adds in order."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 3, b"c", txn="t1"))
        result(store.add_message(Q, 2, BIG, txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        result(store.commit("t1"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [3, 2]
        assert recovered.messages[Q][1].data == BIG

    def test_uncommitted_work_is_invisible(self, harness):
        """S3.1: before the commit, transactional adds are not stored and removes not
        applied (the message can still be removed outside the transaction)."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 2, b"b", txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        failure(store.remove_message(Q, 2), UnknownMessage)
        result(store.update_delivery_count(Q, 1, 2))

    def test_rollback_discards(self, harness, clean):
        """S3.1: a rolled-back transaction leaves no trace."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 2, BIG, txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        result(store.rollback("t1"))
        failure(store.commit("t1"), TransactionStateError)
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [1] and recovered.prepared == {}

    def test_open_transaction_rolled_back_at_restart(self, harness, clean):
        """S3.1: an open transaction is rolled back by a restart."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 2, b"b", txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [1] and recovered.prepared == {}
        failure(store.commit("t1"), TransactionStateError)
        result(store.begin("t1"))

    def test_prepared_transaction_kept_then_committed(self, harness, clean):
        """S3.1: a prepared transaction survives restarts until its coordinator commits."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 2, b"b", txn="t1"))
        result(store.add_message(Q2, 7, BIG, txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        result(store.prepare("t1"))
        store, recovered = harness.restart(store, clean)
        prepared = recovered.prepared["t1"]
        assert [(m.destination, m.message_id, m.data) for m in prepared.adds] == [
            (Q, 2, b"b"), (Q2, 7, BIG)]
        assert list(prepared.removes) == [(Q, 1)]
        assert ids(recovered, Q) == [1] and recovered.max_message_id >= 7
        result(store.commit("t1"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [2] and ids(recovered, Q2) == [7]
        assert recovered.prepared == {}

    def test_prepared_transaction_rolled_back_after_restart(self, harness, clean):
        """S3.1: a kept prepared transaction can be rolled back after the restart."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"a"))
        result(store.begin("t1"))
        result(store.add_message(Q, 2, BIG, txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        result(store.prepare("t1"))
        store, _ = harness.restart(store, clean)
        result(store.rollback("t1"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [1] and recovered.prepared == {}

    def test_transaction_states_are_checked(self, harness):
        """S3.1: begin twice, work in a prepared or unknown transaction, and prepare of
        an unknown one are refused."""
        store, _ = harness.open()
        result(store.begin("t1"))
        failure(store.begin("t1"), TransactionStateError)
        result(store.prepare("t1"))
        failure(store.add_message(Q, 1, b"a", txn="t1"), TransactionStateError)
        failure(store.prepare("t1"), TransactionStateError)
        failure(store.prepare("t2"), TransactionStateError)
        failure(store.add_message(Q, 1, b"a", txn="t2"), TransactionStateError)
        failure(store.rollback("t2"), TransactionStateError)

    def test_remove_inside_transaction_cancels_its_own_add(self, harness, clean):
        """S3.1: a transaction that adds and then removes a message stores nothing."""
        store, _ = harness.open()
        result(store.begin("t1"))
        result(store.add_message(Q, 1, b"a", txn="t1"))
        result(store.add_message(Q, 2, b"b", txn="t1"))
        result(store.remove_message(Q, 1, txn="t1"))
        failure(store.remove_message(Q, 1, txn="t1"), UnknownMessage)
        result(store.commit("t1"))
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == [2]

    def test_compaction_keeps_the_same_state(self, harness, clean):
        """S3.3: compacting changes nothing a restart recovers."""
        store, _ = harness.open()
        for mid in range(1, 60):
            result(store.add_message(Q, mid, b"x" * 200 if mid % 7 else BIG))
        for mid in range(1, 60, 2):
            result(store.remove_message(Q, mid))
        result(store.update_delivery_count(Q, 4, 3))
        result(store.begin("t1"))
        result(store.remove_message(Q, 2, txn="t1"))
        result(store.prepare("t1"))
        figures = result(store.compact())
        assert figures["bytes_after"] <= figures["bytes_before"]
        store, recovered = harness.restart(store, clean)
        assert ids(recovered, Q) == list(range(2, 60, 2))
        assert recovered.messages[Q][1].delivery_count == 3
        assert list(recovered.prepared["t1"].removes) == [(Q, 2)]

    def test_read_message_returns_the_stored_bytes(self, harness):
        """S2.6: a live message is read back by its key, small, large or committed in a
        transaction; an unknown or removed one is refused with UnknownMessage."""
        store, _ = harness.open()
        result(store.add_message(Q, 1, b"one"))
        result(store.add_message(Q, 2, BIG))
        result(store.begin("t1"))
        result(store.add_message(Q2, 3, b"in a transaction", txn="t1"))
        result(store.commit("t1"))
        result(store.add_message(Q, 4, b"removed"))
        result(store.remove_message(Q, 4))
        assert result(store.read_message(Q, 1)) == b"one"
        assert result(store.read_message(Q, 2)) == BIG
        assert result(store.read_message(Q2, 3)) == b"in a transaction"
        failure(store.read_message(Q, 4), UnknownMessage)
        failure(store.read_message(Q2, 1), UnknownMessage)

    def test_read_message_after_restart_and_compaction(self, harness, clean):
        """S2.6: a message recovered after a restart, or moved by a compaction, is still
        read back with its own bytes (an id removed and stored again: the new ones)."""
        store, _ = harness.open()
        for mid in range(1, 40):
            result(store.add_message(Q, mid, b"%d-" % mid + b"x" * 200))
        for mid in range(1, 40, 2):
            result(store.remove_message(Q, mid))
        result(store.add_message(Q, 1, b"again"))
        store, _ = harness.restart(store, clean)
        result(store.compact())
        assert result(store.read_message(Q, 1)) == b"again"
        for mid in range(2, 40, 2):
            assert result(store.read_message(Q, mid)) == b"%d-" % mid + b"x" * 200

    def test_closed_store_refuses_calls(self, harness):
        """A closed store errbacks StoreClosed instead of writing."""
        store, _ = harness.open()
        result(store.close())
        failure(store.add_message(Q, 1, b"a"), StoreClosed)
        failure(store.begin("t"), StoreClosed)

    def test_unstorable_arguments_are_refused(self, harness):
        """Keys, ids and data no store can keep are refused with StoreError, and the
        store goes on working."""
        store, _ = harness.open()
        failure(store.add_message(Q, -1, b"a"), StoreError)
        failure(store.add_message(Q, 1 << 64, b"a"), StoreError)
        failure(store.add_message(Q, "1", b"a"), StoreError)
        failure(store.add_message(None, 1, b"a"), StoreError)
        failure(store.add_message(Q, 1, "text"), StoreError)
        failure(store.begin(7), StoreError)
        result(store.add_message(Q2, 1, b"a"))
        failure(store.update_delivery_count(Q2, 1, -1), StoreError)
        result(store.add_message(Q, 1, memoryview(b"view")))
        store, recovered = harness.restart(store, clean=False)
        assert recovered.messages[Q][0].data == b"view"


def test_file_store_reads_durables_written_without_owner(tmp_path):
    """Ownership: a durables.json written before durables had owners is read, each
    subscription without owner; an owner set afterwards comes back."""
    directory = tmp_path / "filestore"
    directory.mkdir()
    (directory / "durables.json").write_text(
        '{"durables": [{"container_id": "c", "name": "s", "topic": "news",'
        ' "selector": null}]}', encoding="utf-8")
    store = FileStore(directory, run_now)
    recovered = result(store.recover())
    assert [(d.name, d.topic, d.owner) for d in recovered.durables] == [
        ("s", "news", None)]
    result(store.add_durable("c", "s", "news", None, "alice"))
    result(store.close())
    again = FileStore(directory, run_now)
    assert [d.owner for d in result(again.recover()).durables] == ["alice"]
    result(again.close())
