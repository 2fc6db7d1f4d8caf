"""The runtime catalog's file (S7.1): written whole, owner-only, read back."""

import os
import stat

import pytest

from mqgate.store.runtime_catalog import CatalogError, RuntimeCatalog


def test_missing_file_is_none_and_save_round_trips(tmp_path):
    catalog = RuntimeCatalog(str(tmp_path / "runtime" / "catalog.json"))
    assert catalog.load() is None
    catalog.save({"version": 1, "diverts": [{"name": "d"}]})
    assert catalog.load() == {"version": 1, "diverts": [{"name": "d"}]}
    mode = stat.S_IMODE(os.stat(catalog.path).st_mode)
    assert mode == 0o600
    assert not os.path.exists(catalog.path + ".tmp")


def test_unreadable_file_is_named(tmp_path):
    path = tmp_path / "catalog.json"
    path.write_text("{not json")
    with pytest.raises(CatalogError, match="runtime catalog .*catalog.json cannot be read"):
        RuntimeCatalog(str(path)).load()
