"""How a service lets clients in (S4.2, S4.7): the login policy, and the users of TLS
client certificates found without a password."""

import pytest
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from mqgate.security.auth import (
    AuthenticationFailed, FileAuthenticator, IPrincipalSource, LoginPolicy, Principal,
)
from mqgate.security.users import UserRepository, hash_password
from tests.deferreds import result as result_of, run_now


def entry(name, password, group="user", active=1):
    """A repository line, hashed cheaply (the cost is not what is tested here)."""
    return f"{name}:{hash_password(password, iterations=1000)}:{group}:{active}\n"


def failure_of(d, kind):
    """The failure of a Deferred that has fired, which must be a C{kind}."""
    box = []
    d.addBoth(box.append)
    assert box and isinstance(box[0], Failure) and box[0].check(kind), box
    return box[0]


@pytest.fixture
def identities(tmp_path):
    """A file authenticator over admin, alice (group user) and inactive mallory."""
    path = tmp_path / "passwd"
    path.write_text(entry("admin", "adm1n", "admin") + entry("alice", "wonder")
                    + entry("mallory", "evil", active=0))
    return FileAuthenticator(UserRepository.load(path), run_now)


def test_a_certificate_user_gets_its_groups_without_a_password(identities):
    """S4.7: principal_for gives the repository's user with its groups."""
    assert verifyObject(IPrincipalSource, identities)
    assert result_of(identities.principal_for("alice")) == Principal("alice", {"user"})


@pytest.mark.parametrize("name,reason", [("nobody", "unknown user"),
                                         ("mallory", "inactive user")])
def test_an_unknown_or_inactive_certificate_user_is_refused(identities, name, reason):
    """S4.7: a certificate naming no active user is an AuthenticationFailed, whose
    message does not tell which."""
    failure = failure_of(identities.principal_for(name), AuthenticationFailed)
    assert failure.value.reason == reason
    assert str(failure.value) == f"authentication failed for user {name!r}"


def test_by_default_a_service_takes_passwords_and_no_guests():
    """S4.2: PLAIN only; ANONYMOUS and EXTERNAL refused with what to do."""
    policy = LoginPolicy("jms")
    assert policy.mechanisms == ("PLAIN",)
    assert "mqgate.jms.allow_anonymous=true" in policy.refusals["ANONYMOUS"]
    assert "certificate" in policy.refusals["EXTERNAL"]
    assert "PLAIN" not in policy.refusals


def test_a_service_refusing_cleartext_passwords_points_to_its_tls_service():
    """S4.2: with passwords refused over cleartext, PLAIN is withheld and a client
    trying it is told which TLS service to use and which setting is behind it."""
    policy = LoginPolicy("jms", allow_anonymous=True, allow_password=False,
                         tls_services=("ssljms",))
    assert policy.mechanisms == ("ANONYMOUS",)
    assert "use the TLS service ssljms" in policy.refusals["PLAIN"]
    assert "mqgate.jms.sasl.plain.allow_cleartext" in policy.refusals["PLAIN"]


@pytest.mark.parametrize("policy,login,certified,refused", [
    (LoginPolicy("stomp"), None, False, "needs a login"),
    (LoginPolicy("stomp"), None, True, None),
    (LoginPolicy("stomp"), "alice", False, None),
    (LoginPolicy("stomp", allow_anonymous=True), None, False, None),
    (LoginPolicy("stomp", allow_anonymous=True, allow_password=False), "alice", False,
     "does not accept passwords over cleartext"),
])
def test_stomp_connect_refusals(policy, login, certified, refused):
    """S4.2, S4.7: a CONNECT without login needs guests allowed or a verified
    certificate; one with a login needs passwords accepted."""
    refusal = policy.refusal(login, certified)
    if refused is None:
        assert refusal is None
    else:
        assert refused in refusal
