"""Fixtures of the hostile end-to-end tests: the real broker, and a liveness probe.

The broker fixtures are those of tests/e2e/conftest.py (re-exported, so a hostile test
starts the broker exactly as the end-to-end tests do and it is always killed at the
end); C{probe} starts L{tests.hostile.probe.Probe}s and stops them at the end.
"""

from pathlib import Path

import pytest

from tests.e2e.conftest import (  # noqa: F401 - fixtures
    broker, broker_factory, module_broker, module_broker_factory, passfile)
from tests.hostile.probe import Probe

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Mark every hostile test ``e2e``: each one starts a real broker process.

    (The rootdir conftest marks tests/e2e and tests/crash the same way.)
    """
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def probe():
    """A function ``start(broker, **kwargs) -> Probe``: a running probe, stopped at teardown.

    The keyword arguments are L{Probe}'s (C{interval}, C{protocol}, C{user} ...).
    """
    started = []

    def start(broker, **kwargs):
        watcher = Probe(broker, **kwargs)
        started.append(watcher)
        return watcher.start()

    yield start
    for watcher in started:
        watcher.stop()
