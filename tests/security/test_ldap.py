"""
The LDAP user repository (S4.4): filter and DN escaping, the settings, the
authenticator's handling of failures, and logins against a real slapd
(tests/ldapserver.py) over LDAP and LDAPS.
"""

import time

import pytest
from ldap3.operation.search import compile_filter, parse_filter
from ldap3.utils.dn import parse_dn
from twisted.internet import defer, task
from twisted.logger import Logger

from mqgate.errors import ConfigError
from mqgate.security.auth import (
    AuthenticationFailed, IPrincipalSource, Principal, RepositoryUnavailable)
from mqgate.security.ldap import (
    NOT_ANSWERING, DirectoryRefused, DirectoryUnavailable, LdapAuthenticator, LdapConfig,
    LdapDirectory, and_filter, escape_dn_value, escape_filter_value, parse_servers)
from tests.ldapserver import (
    GROUPS, PEOPLE, SERVICE_DN, SERVICE_PASSWORD, SUFFIX, sample_directory,
    start_for_test)

@pytest.fixture(scope="module")
def slapd():
    """A throw-away slapd holding the sample directory, for this module."""
    yield from sample_directory()


def directory(servers, **settings):
    """An L{LdapDirectory} on C{servers} (text of the server setting), searching
    L{PEOPLE} with groups on unless C{settings} say otherwise."""
    settings.setdefault("base", PEOPLE)
    settings.setdefault("grpsearch", True)
    settings.setdefault("grpbase", GROUPS)
    settings.setdefault("timeout", 2)
    use_ssl = settings.get("ssl", False)
    config = LdapConfig(servers=parse_servers(servers, use_ssl), **settings)
    config.check()
    return LdapDirectory(config)


def failed_reason(call, *args):
    """The C{reason} of the L{AuthenticationFailed} that C{call(*args)} raises."""
    with pytest.raises(AuthenticationFailed) as info:
        call(*args)
    return info.value.reason


# -- escaping (RFC 4515, RFC 4514) -----------------------------------------------------


@pytest.mark.parametrize("raw,escaped", [
    ("alice", "alice"),
    ("*", "\\2a"),
    ("*)(uid=*", "\\2a\\29\\28uid=\\2a"),
    ("a\\b", "a\\5cb"),
    ("nul\0byte", "nul\\00byte"),
    ("Zoë 東京", "Zoë 東京"),
])
def test_filter_value_escaping(raw, escaped):
    """Each character with a meaning in a filter (* ( ) \\ NUL) becomes a hex escape;
    the rest, non-ASCII included, is kept as it is."""
    assert escape_filter_value(raw) == escaped


@pytest.mark.parametrize("name", ["*)(uid=*", "x)(|(uid=*", "a*b", "\\2a", "(", "*"])
def test_escaped_filter_is_one_equality_match_of_the_literal_name(name):
    """Whatever a client sends as a user name, the escaped filter parses as a single
    equality assertion whose value is exactly the name (no wildcard, no extra clause)."""
    tree = parse_filter(f"(uid={escape_filter_value(name)})", None, False, True, None,
                        False)
    [node] = tree.elements
    wire = compile_filter(node)   # what goes to the server
    assert wire.getName() == "equalityMatch"
    assert str(wire["equalityMatch"]["attributeDesc"]) == "uid"
    assert bytes(wire["equalityMatch"]["assertionValue"]) == name.encode("utf-8")


@pytest.mark.parametrize("raw,escaped", [
    ("alice", "alice"),
    ("Smith, John", "Smith\\, John"),
    ("a+b=c", "a\\+b\\=c"),
    ('q"<>;\\', 'q\\"\\<\\>\\;\\\\'),
    ("#hash", "\\#hash"),
    (" padded ", "\\ padded\\ "),
    ("nul\0", "nul\\00"),
])
def test_dn_value_escaping(raw, escaped):
    """RFC 4514 specials are escaped with a backslash, a leading # or space and a
    trailing space too, NUL as \\00."""
    assert escape_dn_value(raw) == escaped


@pytest.mark.parametrize("raw", ["Smith, John", "a+b=c", "#x", " y ", 'q"<>;\\'])
def test_escaped_dn_value_parses_back_to_one_rdn(raw):
    """A DN built with an escaped value has exactly one RDN more than its parent, and
    that RDN is uid=<the escaped value>."""
    dn = f"uid={escape_dn_value(raw)},{PEOPLE}"
    parts = parse_dn(dn, escape=False)
    assert len(parts) == len(parse_dn(PEOPLE)) + 1
    assert parts[0][:2] == ("uid", escape_dn_value(raw))


def test_and_filter():
    """Configured filters are ANDed in, with their outer parentheses added when left
    out; an empty one is dropped."""
    assert and_filter("uid=a") == "(uid=a)"
    assert and_filter("(uid=a)", "") == "(uid=a)"
    assert and_filter("(uid=a)", "objectClass=person") == "(&(uid=a)(objectClass=person))"
    assert and_filter("uid=a", " (!(x=y)) ") == "(&(uid=a)(!(x=y)))"


# -- settings ------------------------------------------------------------------------


def test_parse_servers():
    """host, host:port and [v6]:port, separated by spaces; the port defaults to 389,
    or 636 for LDAPS."""
    assert parse_servers("ldap1 ldap2:1389 [::1]:2389 [fe80::1]", False) == (
        ("ldap1", 389), ("ldap2", 1389), ("::1", 2389), ("fe80::1", 389))
    assert parse_servers("  ldap1  ", True) == (("ldap1", 636),)


@pytest.mark.parametrize("text", ["", "   ", "host:", "host:0", "host:70000", "host:x",
                                  ":389", "[::1", "[::1]x"])
def test_bad_server_setting_is_refused(text):
    """A server setting that names no usable host and port is a ConfigError naming it."""
    with pytest.raises(ConfigError) as info:
        parse_servers(text, False)
    assert "mqgate.user_repository.ldap.server" in str(info.value)


@pytest.mark.parametrize("change,setting", [
    (dict(base=""), "mqgate.user_repository.ldap.base"),
    (dict(uidattr="uid)(x"), "mqgate.user_repository.ldap.uidattr"),
    (dict(memattr=""), "mqgate.user_repository.ldap.memattr"),
    (dict(usrfilter="(a=b"), "mqgate.user_repository.ldap.usrfilter"),
    (dict(grpfilter="a=b)"), "mqgate.user_repository.ldap.grpfilter"),
    (dict(grpfilter="(&(a=b)(c)"), "mqgate.user_repository.ldap.grpfilter"),
    (dict(usrfilter="(objectClass)"), "mqgate.user_repository.ldap.usrfilter"),
    (dict(principal="cn=x"), "mqgate.user_repository.ldap.password"),
    (dict(ca_file="/nonexistent.pem"), "mqgate.user_repository.ldap.ssl.ca_file"),
    (dict(ssl=True, ca_file="/nonexistent.pem"), "mqgate.user_repository.ldap.ssl.ca_file"),
])
def test_unworkable_settings_are_refused_at_start(change, setting):
    """Settings that could never work fail at start-up, naming the setting."""
    config = LdapConfig(servers=(("h", 389),), **{"base": PEOPLE, **change})
    with pytest.raises(ConfigError) as info:
        config.check()
    assert setting in str(info.value)


def test_settings_are_read_from_the_properties():
    """The mqgate.user_repository.ldap.* keys (or their imq. spelling) become the
    repository's settings, the password coming from the caller (the password file)."""
    from mqgate.config.settings import Settings
    settings = Settings.from_properties([], {
        "imq.user_repository.ldap.server": "ldap1 ldap2:1636",
        "mqgate.user_repository.ldap.ssl.enabled": "true",
        "mqgate.user_repository.ldap.base": PEOPLE,
        "mqgate.user_repository.ldap.principal": SERVICE_DN,
        "mqgate.user_repository.ldap.grpsearch": "true",
        "mqgate.user_repository.ldap.memattr": "member",
    }, varhome="/tmp")
    config = LdapConfig.from_settings(settings, "pw")
    assert config.servers == (("ldap1", 636), ("ldap2", 1636))
    assert (config.base, config.principal, config.password) == (PEOPLE, SERVICE_DN, "pw")
    assert (config.uidattr, config.gidattr, config.memattr) == ("uid", "cn", "member")
    assert (config.grpsearch, config.ssl, config.timeout) == (True, True, 5)


def test_password_is_not_in_repr():
    """The search principal's password never shows in the settings' repr (logs)."""
    config = LdapConfig(servers=(("h", 389),), principal="cn=x", password="s3cret")
    assert "s3cret" not in repr(config)
    assert "s3cret" not in config.describe()


# -- the authenticator, over a fake directory ----------------------------------------


class FakeDirectory:
    """Answers C{check} from a script and counts the calls."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = []

    def check(self, username, password):
        self.calls.append(username)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def look_up(self, username):
        return self.check(username, None)


def authenticator(outcome, **kwargs):
    """(L{LdapAuthenticator} over a L{FakeDirectory}, the directory, the clock, the
    logged events)."""
    fake = FakeDirectory(outcome)
    clock = task.Clock()
    events = []
    checker = LdapAuthenticator(fake, lambda f, *a: defer.maybeDeferred(f, *a), clock,
                                **kwargs)
    checker._log = Logger(namespace="test", observer=events.append)
    return checker, fake, clock, events


def result_of(d):
    """The result of a fired Deferred (the Failure's value when it failed)."""
    results = []
    d.addBoth(results.append)
    [result] = results
    return getattr(result, "value", result)


def test_principal_carries_the_directory_groups():
    """A good login gives a Principal with the entry's spelling of the name and the
    directory's groups."""
    checker, _fake, _clock, _events = authenticator(
        ("uid=alice,o=x", "alice", frozenset({"admin", "staff"})))
    assert result_of(checker.authenticate("ALICE", "pw")) == Principal(
        "alice", {"admin", "staff"})


def test_a_certificate_user_gets_its_directory_groups():
    """principal_for (a client proved by its TLS certificate) gives the directory's user
    and groups; a directory that does not answer refuses it like a login."""
    assert IPrincipalSource.providedBy(authenticator(None)[0])
    checker, _fake, _clock, _events = authenticator(
        ("uid=alice,o=x", "alice", frozenset({"admin"})))
    assert result_of(checker.principal_for("alice")) == Principal("alice", {"admin"})
    checker, _fake, _clock, _events = authenticator(DirectoryUnavailable([("h:389", "x")]))
    assert isinstance(result_of(checker.principal_for("alice")), RepositoryUnavailable)


def test_empty_password_is_refused_without_asking_the_directory():
    """An empty password fails at once: the directory never sees an unauthenticated
    bind, which many servers would accept."""
    checker, fake, _clock, _events = authenticator(("dn", "alice", frozenset()))
    error = result_of(checker.authenticate("alice", ""))
    assert isinstance(error, AuthenticationFailed)
    assert error.reason == "empty password"
    assert fake.calls == []


def test_failures_look_alike_to_the_client():
    """Unknown user, wrong password and an unanswering directory give the same message
    as the file repository; only the reason differs."""
    messages = set()
    for outcome in (AuthenticationFailed("bob", "unknown user"),
                    AuthenticationFailed("bob", "wrong password"),
                    DirectoryUnavailable([("h:389", "timed out")])):
        checker, _fake, _clock, _events = authenticator(outcome)
        error = result_of(checker.authenticate("bob", "pw"))
        assert isinstance(error, AuthenticationFailed)
        messages.add(str(error))
    assert messages == {str(AuthenticationFailed("bob", "x"))}


def test_unanswering_directory_is_warned_about_once_a_minute():
    """A directory that does not answer fails the login as 'directory not answering'
    and logs a warning naming the server, at most once a minute, the next one counting
    those left out."""
    checker, _fake, clock, events = authenticator(
        DirectoryUnavailable([("ldap1:389", "no answer within "
                               "mqgate.user_repository.ldap.timeout")]))
    for _ in range(3):
        assert result_of(checker.authenticate("bob", "pw")).reason == NOT_ANSWERING
    assert len(events) == 1
    clock.advance(61)
    assert result_of(checker.authenticate("bob", "pw")).reason == NOT_ANSWERING
    assert len(events) == 2
    from twisted.logger import formatEvent
    text = formatEvent(events[1])
    assert "ldap1:389" in text and "2 more like this" in text
    assert "mqgate.user_repository.ldap.server" in text


def test_refused_search_names_the_setting():
    """A directory refusing the broker's own search bind fails the login and the
    warning names the setting to check."""
    checker, _fake, _clock, events = authenticator(
        DirectoryRefused("ldap1:389", "invalidCredentials",
                         "mqgate.user_repository.ldap.principal"))
    error = result_of(checker.authenticate("bob", "pw"))
    assert isinstance(error, AuthenticationFailed)
    from twisted.logger import formatEvent
    assert "mqgate.user_repository.ldap.principal" in formatEvent(events[0])


def test_anonymous_is_guest_of_group_anonymous_where_allowed():
    """Without credentials a client is guest in group anonymous, only where allowed."""
    checker, *_ = authenticator(None)
    assert result_of(checker.authenticate_anonymous()) == Principal(
        "guest", {"anonymous"}, anonymous=True)
    checker, *_ = authenticator(None, allow_anonymous=False)
    assert isinstance(result_of(checker.authenticate_anonymous()), AuthenticationFailed)


# -- against a real slapd -----------------------------------------------------------


def test_login_with_groups_over_ldap(slapd):
    """A user's password is checked by the directory and its groups come with it."""
    dn, name, groups = directory(slapd.address).check("alice", "alice-pw")
    assert (dn, name, groups) == (f"uid=alice,{PEOPLE}", "alice", {"admin", "staff"})


def test_login_over_ldaps_verifies_the_certificate(slapd):
    """Over LDAPS with the CA file the login works; without it (the system's CAs do not
    know the test CA) the directory counts as unavailable, and the reason names the
    certificate and the CA setting."""
    good = directory(slapd.ssl_address, ssl=True, ca_file=slapd.ca_file)
    assert good.check("bob", "bob-pw")[2] == {"staff"}
    with pytest.raises(DirectoryUnavailable) as info:
        directory(slapd.ssl_address, ssl=True).check("bob", "bob-pw")
    assert "mqgate.user_repository.ldap.ssl.ca_file" in str(info.value)


def test_ldaps_refuses_a_certificate_for_another_name():
    """The certificate must name the host connected to: one made for ldap.example is
    refused on 127.0.0.1 even though its CA is trusted."""
    other = start_for_test(cert_names=("ldap.example",))
    try:
        with pytest.raises(DirectoryUnavailable) as info:
            directory(other.ssl_address, ssl=True, ca_file=other.ca_file).check(
                "bob", "bob-pw")
    finally:
        other.stop()
    assert "certificate" in str(info.value)
    assert "mqgate.user_repository.ldap.ssl.ca_file" in str(info.value)


def test_search_principal_and_its_password(slapd):
    """With a principal the search binds as it; a wrong principal password is the
    operator's problem, reported as such rather than as the user's."""
    found = directory(slapd.address, principal=SERVICE_DN, password=SERVICE_PASSWORD)
    assert found.check("bob", "bob-pw")[1] == "bob"
    wrong = directory(slapd.address, principal=SERVICE_DN, password="nope")
    with pytest.raises(DirectoryRefused) as info:
        wrong.check("bob", "bob-pw")
    assert info.value.setting == "mqgate.user_repository.ldap.principal"


@pytest.mark.parametrize("user,password", [("", "pw"), ("alice\udc80", "pw"),
                                           ("alice", "pw\ud800")])
def test_names_the_directory_cannot_take_are_refused_before_it(user, password):
    """An empty user name and a lone surrogate (not UTF-8) are refused as
    AuthenticationFailed without a connection (the server here does not exist)."""
    ldap = directory("127.0.0.1:1")
    with pytest.raises(AuthenticationFailed):
        ldap.check(user, password)


def test_a_certificate_user_is_looked_up_without_a_password(slapd):
    """A client proved by its TLS certificate is found with its groups, no password
    asked; an unknown name is refused like an unknown user at a login."""
    ldap = directory(slapd.address)
    dn, name, groups = ldap.look_up("alice")
    assert (dn, name, groups) == (f"uid=alice,{PEOPLE}", "alice", {"admin", "staff"})
    assert failed_reason(ldap.look_up, "nobody") == "unknown user"
    assert failed_reason(ldap.look_up, "*)(uid=*") == "unknown user"


def test_wrong_password_and_unknown_user(slapd):
    """A wrong password and an unknown user are both AuthenticationFailed, with their
    own reasons for the log."""
    ldap = directory(slapd.address)
    assert failed_reason(ldap.check, "alice", "bob-pw") == "wrong password"
    assert failed_reason(ldap.check, "nobody", "alice-pw") == "unknown user"


@pytest.mark.parametrize("name", ["*)(uid=*", "*", "alice)(uid=*", "al*", "alice)(|(a=b"])
def test_filter_injection_matches_nobody(slapd, name):
    """A user name written as a filter fragment matches no entry: with a real user's
    password it is still an unknown user."""
    assert failed_reason(directory(slapd.address).check, name, "alice-pw") == "unknown user"


def test_dn_with_a_comma_finds_its_groups(slapd):
    """A user whose DN holds an escaped comma is found as a member of its groups:
    slapd hands the DN back as cn=Smith\\2C John,..., whose backslash the group filter
    must escape in turn."""
    dn, name, groups = directory(slapd.address).check("jsmith", "john-pw")
    assert dn.lower().startswith("cn=smith\\2c john,")
    assert (name, groups) == ("jsmith", {"staff"})


def test_member_attribute_and_group_filter(slapd):
    """memattr=member reads groupOfNames; grpfilter narrows the groups found."""
    assert directory(slapd.address, memattr="member").check("bob", "bob-pw")[2] == {"ops"}
    staff_only = directory(slapd.address, grpfilter="(cn=staff)")
    assert staff_only.check("alice", "alice-pw")[2] == {"staff"}


def test_groups_only_when_grpsearch(slapd):
    """With grpsearch false a user is in no group."""
    assert directory(slapd.address, grpsearch=False).check("alice", "alice-pw")[2] == set()


def test_user_filter_excludes_a_user(slapd):
    """A user excluded by usrfilter cannot log in, even with the right password."""
    ldap = directory(slapd.address, usrfilter="(!(description=disabled))")
    assert failed_reason(ldap.check, "carol", "carol-pw") == "unknown user"
    assert directory(slapd.address).check("carol", "carol-pw")[1] == "carol"


def test_ambiguous_user_name_is_refused(slapd):
    """A name found twice under the base logs in as neither entry."""
    reason = failed_reason(directory(slapd.address, base=SUFFIX).check,
                           "twin", "twin-pw")
    assert "2+ directory entries" in reason


def test_next_server_is_tried_when_the_first_does_not_answer(slapd):
    """With a dead server first in the list, the login goes to the next one; the dead
    one is tried last for a while after."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"   # bound, not listening: refused
    ldap = directory(f"{dead} {slapd.address}")
    assert ldap.check("bob", "bob-pw")[1] == "bob"
    assert ldap._servers_in_order()[0] == ("127.0.0.1", slapd.port)


@pytest.mark.parametrize("use_ssl", [False, True], ids=["ldap", "ldaps"])
def test_stopped_server_times_out_and_recovers(slapd, use_ssl):
    """A slapd that stops answering (SIGSTOP) fails the check within about the timeout
    with 'no answer' (over LDAPS: in the TLS handshake); after SIGCONT the same
    directory logs users in again."""
    if use_ssl:
        ldap = directory(slapd.ssl_address, timeout=1, ssl=True, ca_file=slapd.ca_file)
    else:
        ldap = directory(slapd.address, timeout=1)
    slapd.pause()
    try:
        started = time.monotonic()
        with pytest.raises(DirectoryUnavailable) as info:
            ldap.check("bob", "bob-pw")
        elapsed = time.monotonic() - started
    finally:
        slapd.resume()
    assert "no answer within mqgate.user_repository.ldap.timeout" in str(info.value)
    assert 0.9 < elapsed < 3.0, elapsed
    assert ldap.check("bob", "bob-pw")[1] == "bob"


def test_close_ends_checks_waiting_on_a_stopped_server(slapd):
    """close() (the broker stopping) ends a check blocked on a silent directory at
    once, long before its timeout, and any later check fails without connecting."""
    import threading
    ldap = directory(slapd.address, timeout=30)
    outcome = []

    def check():
        try:
            ldap.check("bob", "bob-pw")
        except AuthenticationFailed as e:
            outcome.append(e.reason)

    slapd.pause()
    try:
        worker = threading.Thread(target=check)
        worker.start()
        deadline = time.monotonic() + 10
        while not ldap._open and time.monotonic() < deadline:   # the bind is out
            time.sleep(0.01)
        time.sleep(0.1)
        started = time.monotonic()
        ldap.close()
        worker.join(5)
        elapsed = time.monotonic() - started
    finally:
        slapd.resume()
    assert outcome == ["broker stopping"]
    assert elapsed < 1.0, elapsed
    assert failed_reason(ldap.check, "bob", "bob-pw") == "broker stopping"


def test_directory_threads_share_nothing_but_the_failure_list(slapd):
    """Checks from several threads at once all get their own answers right."""
    from concurrent.futures import ThreadPoolExecutor
    ldap = directory(slapd.address)
    logins = [("alice", "alice-pw"), ("bob", "bob-pw"), ("jsmith", "john-pw")] * 5
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda login: ldap.check(*login)[1], logins))
    assert names == [user for user, _ in logins]



def _raw_simple_bind(port, dn, password):
    """Send one LDAPv3 simple bind by hand (ldap3 itself will not send an empty
    password) and return the result code of the BindResponse."""
    import socket

    def tlv(tag, body):
        assert len(body) < 128   # short-form lengths are enough here
        return bytes([tag, len(body)]) + body

    bind = tlv(0x60, tlv(0x02, b"\x03") + tlv(0x04, dn.encode()) + tlv(0x80, password))
    message = tlv(0x30, tlv(0x02, b"\x01") + bind)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(message)
        answer = s.recv(4096)
    # 30 len 02 01 01 61 len 0a 01 <code> ...
    return answer[answer.index(b"\x61") + 4]


def test_the_directory_itself_accepts_an_empty_password(slapd):
    """The test slapd, like many directories, answers a bind with a user's DN and an
    empty password with success (an unauthenticated bind), while a wrong password is
    refused: which is why the broker refuses empty passwords before binding."""
    alice = f"uid=alice,{PEOPLE}"
    assert _raw_simple_bind(slapd.port, alice, b"") == 0            # success
    assert _raw_simple_bind(slapd.port, alice, b"wrong") == 49      # invalidCredentials
    assert failed_reason(directory(slapd.address).check, "alice", "") == "empty password"
