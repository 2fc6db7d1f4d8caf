"""Failed logins over real connections (S4.2): answered after the same time whether or
not the user exists, and logged with the user name and the client's address. Raw STOMP
sockets against the real broker (a twistd subprocess)."""

import re
import statistics

import pytest

from tests.e2e.conftest import broker_factory  # noqa: F401 - the fixture
from tests.hostile.probe import wait_until
from tests.hostile.test_logins import stomp_login

# The time of a failed login is the time of the production hash (~100 ms).
pytestmark = [pytest.mark.e2e, pytest.mark.production_hashes]

ATTEMPTS = 20
#: How far apart the two medians may be, as a ratio. The work itself is counted, not
#: timed, in tests/security/test_guard.py (one PBKDF2 check of the same strength per
#: attempt); here the whole path through a real broker is timed, and a busy machine
#: moves a median by tens of per cent. A check skipped for unknown users would answer
#: them in a millisecond or two against the ~100 ms of the hash, a ratio of 50 or more.
MAX_RATIO = 3


def failed_login(address, login, passcode):
    """One STOMP CONNECT that must fail; return the seconds until its ERROR arrived."""
    data, took = stomp_login(address, login, passcode)
    assert data.startswith(b"ERROR\n") and b"authentication failed" in data, data
    return took


def test_failed_logins_take_as_long_for_unknown_users(broker_factory):  # noqa: F811
    """A failed login takes about as long for a user that does not exist as for an
    existing user with a wrong password (medians of 20 attempts each, interleaved,
    within a factor of 3 either way, where a skipped check would be 50 times faster);
    each failure is logged with the user name and the address."""
    # Every attempt comes from 127.0.0.1: the failure throttle is widened so that it
    # slows none of them (its delays are not what is measured here).
    broker = broker_factory({"mqgate.authentication.failures.free": "1000"})
    address = broker.address("stomp")
    failed_login(address, "admin", "warm-up")   # the first check pays for imports
    existing, unknown = [], []
    for _ in range(ATTEMPTS):
        existing.append(failed_login(address, "admin", "not-the-password"))
        unknown.append(failed_login(address, "nobody-by-this-name", "not-the-password"))
    a, b = statistics.median(existing), statistics.median(unknown)
    figures = (f"median {a * 1000:.1f} ms for an existing user, {b * 1000:.1f} ms for "
               f"an unknown one ({ATTEMPTS} each)")
    print(figures)
    assert a > 0.01, f"no password check at all? {figures}"
    assert max(a, b) <= MAX_RATIO * min(a, b), figures

    def logged():
        lines = "".join(broker.output)
        return (re.search(r"failed login from 127\.0\.0\.1 as 'admin'", lines)
                and re.search(r"failed login from 127\.0\.0\.1 as 'nobody-by-this-name'",
                              lines))
    wait_until(logged, 5, "failed-login lines naming the address and the user")
    assert "not-the-password" not in "".join(broker.output)
