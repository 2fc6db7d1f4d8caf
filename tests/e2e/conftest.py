"""Fixtures that start the real broker (tests/e2e/broker.py) and always clean it up.

Every broker a test starts is killed at the end of the test (or, for the module-scoped
fixtures, of the module's last test), whatever happened, so a failing test never
leaves a twistd process behind holding ports or the CI job open.

A broker starts with the default users already in its repository, hashed with few
rounds (tests/e2e/users.py), so that its logins cost no CPU to speak of; a test or
module marked ``production_hashes`` gets a broker that creates its repository itself,
with the production work factor, as the tests that time logins need.
"""

import pytest

from tests.e2e.broker import BrokerProcess
from tests.e2e.users import seed_default_users


def _production_hashes(request):
    """Whether the requesting test (or its module) is marked ``production_hashes``."""
    return request.node.get_closest_marker("production_hashes") is not None


def _brokers(new_varhome, fast_users=True):
    """Yield a function ``start(...) -> BrokerProcess``; kill every broker it started
    once the generator is resumed (the fixture's teardown).

    ``start(defines=None, wait=True, listening=("jms",), varhome=None, **kwargs)``
    starts a broker with ``-D`` overrides C{defines} and waits until every service in
    C{listening} listens, the first one named first (C{wait=False}: only spawn it, e.g.
    to watch it fail). C{varhome} is a directory the test prepared (a key pair, a
    password file); without it, C{new_varhome(n)} makes one. C{kwargs} go to
    L{BrokerProcess} (C{config}, C{instance}, C{extra_args}). With C{fast_users}, the
    VARHOME gets the default users with few rounds unless it has a repository already.
    """
    started = []

    def start(defines=None, wait=True, listening=("jms",), varhome=None, **kwargs):
        if varhome is None:
            varhome = new_varhome(len(started))
        if fast_users:
            seed_default_users(varhome, defines, kwargs.get("instance"))
        broker = BrokerProcess(varhome, defines=defines, **kwargs)
        started.append(broker)
        if not wait:
            return broker.spawn()
        first, *others = listening
        broker.start(first)
        for service in others:
            broker.port(service)
        return broker

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture
def broker_factory(tmp_path, request):
    """A function ``start(defines=None, ...) -> BrokerProcess`` (see L{_brokers}) for
    the brokers of one test, each with its own VARHOME under the test's C{tmp_path}."""
    yield from _brokers(lambda n: tmp_path / f"varhome{n}",
                        fast_users=not _production_hashes(request))


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory, request):
    """The same ``start`` for brokers a whole module's tests share (the module's own
    fixture says which defines and services it needs); killed after its last test."""
    yield from _brokers(lambda n: tmp_path_factory.mktemp("module-varhome"),
                        fast_users=not _production_hashes(request))


@pytest.fixture
def broker(broker_factory):
    """A broker on the shipped configuration, with OS-chosen ports, listening."""
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(module_broker_factory):
    """One broker on the shipped configuration for a module's tests that leave it
    running as they found it, its jms and stomp services listening."""
    return module_broker_factory(listening=("jms", "stomp"))


@pytest.fixture(scope="session")
def passfile(tmp_path_factory):
    """A password file with the default admin user's password (S4.6), which `mqgate
    cmd --passfile` reads; one for the whole run (nothing writes to it)."""
    path = tmp_path_factory.mktemp("cmd") / "cmd-passfile"
    path.write_text("imq.imqcmd.password=admin\n", encoding="utf-8")
    path.chmod(0o600)   # a password file others can read is refused (S4.6)
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (C{item.rep_call} ...), so that a
    fixture's teardown can tell a failed test (the console's screenshots)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
