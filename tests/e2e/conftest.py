"""Fixtures that start the real broker (tests/e2e/broker.py) and always clean it up.

Every broker a test starts is killed at the end of the test, whatever happened, so a
failing test never leaves a twistd process behind holding ports or the CI job open.
"""

import pytest

from tests.e2e.broker import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    """A function ``start(defines=None, **kwargs) -> BrokerProcess``.

    Each call starts a new broker with its own VARHOME under the test's C{tmp_path}
    and waits until its jms service listens (pass C{wait=False} to only spawn it,
    e.g. to watch it fail). C{defines} are extra ``-D key=value`` overrides.
    """
    started = []

    def start(defines=None, wait=True, **kwargs):
        varhome = tmp_path / f"varhome{len(started)}"
        broker = BrokerProcess(varhome, defines=defines, **kwargs)
        started.append(broker)
        return broker.start() if wait else broker.spawn()

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture
def broker(broker_factory):
    """A broker on the shipped configuration, with OS-chosen ports, listening."""
    return broker_factory()


@pytest.fixture
def passfile(tmp_path):
    """A password file with the default admin user's password (S4.6)."""
    path = tmp_path / "cmd-passfile"
    path.write_text("imq.imqcmd.password=admin\n", encoding="utf-8")
    path.chmod(0o600)   # a password file others can read is refused (S4.6)
    return path
