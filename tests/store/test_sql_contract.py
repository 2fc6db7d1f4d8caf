"""
The store contract suite (tests/store/test_contract.py) on the SQL store (S3.5, S3.1,
S3.6), on SQLite and on PostgreSQL.

The suite's classes are imported here; pytest runs them with this module's C{harness}
fixture, which opens SQL stores instead. A "clean" restart closes the store first; a
"killed" one abandons it with its connection still open, as a killed broker would.
"""

import pytest

from tests.store.test_contract import TestStoreContract as _Contract
from tests.store.test_contract import result


class SqlHarness:
    """The contract harness on one database (see tests/store/conftest.py)."""

    def __init__(self, opener):
        self.opener = opener

    def open(self):
        store, _ = self.opener.store("inline")
        return store, result(store.recover())

    def restart(self, store, clean):
        if clean:
            result(store.close())
        fresh, _ = self.opener.store("inline")
        return fresh, result(fresh.recover())


@pytest.fixture
def harness(sql_opener):
    return SqlHarness(sql_opener)


@pytest.fixture(params=[True, False], ids=["clean", "killed"])
def clean(request):
    return request.param


class TestSqlStoreContract(_Contract):
    """S3.5: the SQL store keeps the contract every IMessageStore keeps (S3.1, S3.6)."""
