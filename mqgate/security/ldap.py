# -*- test-case-name: tests.security.test_ldap -*-
"""
The LDAP user repository (S4.4): users and their groups live in a directory server.

A login goes as an LDAP-aware application does it:

 1. bind as the search principal (C{mqgate.user_repository.ldap.principal}, its
    password from the password file, S4.6), or search anonymously when it is empty;
 2. search C{base} (subtree) for the one entry whose C{uidattr} equals the user name,
    ANDed with C{usrfilter}; the name is escaped as an assertion value (RFC 4515), so
    a name like C{*)(uid=*} matches only an entry literally called that;
 3. bind as that entry's DN with the password (on a second connection). An empty
    password is refused before this step: a simple bind with a DN and no password is
    an unauthenticated bind (RFC 4513 section 5.1.2), which many servers answer with
    success;
 4. when C{grpsearch}, search C{grpbase} (default C{base}) for the groups whose
    C{memattr} holds the DN (ANDed with C{grpfilter}); their C{gidattr} values are the
    L{Principal}'s groups, which access control (S4.5) matches. The file repository's
    groups C{admin} and C{anonymous} are simply directory groups of those names.

Unknown user, wrong password and a bind refused for any other reason (an account
locked by the server's password policy: the directory's "inactive") all fail with the
same L{AuthenticationFailed} as the file repository; the reason is for the log only.
For an unknown user the step 3 bind is still made, as a DN that does not exist, so
that the answer costs the same round trips as a wrong password.

Library: ldap3, pure Python and synchronous, run on a thread pool of its own (the
C{run_in_thread} given), so the reactor never waits on the directory. Chosen over
ldaptor (Twisted-native) because ldap3 bounds both connecting (C{connect_timeout})
and every answer, the TLS handshake included (C{receive_timeout}), does LDAPS with a
chosen CA file and the host name checked, and is the more widely used and tested of
the two; ldaptor's client has no timeout at all (none in 21.2.0's client or
connector: each operation would need a Deferred timeout and a dropped connection of our
own) and its LDAPS is an endpoint to assemble by hand. Both see little upstream work
(last releases 2021); ldap3 is packaged by Debian (python3-ldap3 2.9.1) and its
protocol layer has been stable for years. The cost of a thread per login in progress
is bounded by C{mqgate.user_repository.ldap.max_connections}.

Servers: C{server} is C{host[:port]} or several separated by spaces, tried in order; a
server that did not answer is tried last for L{RETRY_AFTER} seconds. When none
answers within the timeout, the login fails with the reason C{"directory not
answering"} and a warning names the servers and what went wrong.

When the broker stops, L{LdapDirectory.close} fails the checks still waiting for a
thread and shuts the sockets of those in progress, so that a silent directory cannot
hold the shutdown for its timeouts.

Nothing in this module touches the reactor; L{LdapDirectory} blocks and is meant for a
thread, L{LdapAuthenticator} is called on the reactor thread.
"""

import re
import secrets
import socket
import ssl
import threading
import time

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from mqgate.errors import ConfigError
from mqgate.security.auth import (
    AuthenticationFailed, IAuthenticator, IPrincipalSource, Principal,
    RepositoryUnavailable)

__all__ = ["LdapConfig", "LdapDirectory", "LdapAuthenticator", "DirectoryUnavailable",
           "escape_filter_value", "escape_dn_value", "and_filter", "parse_servers",
           "NOT_ANSWERING", "PASSWORD_KEY"]

#: The password file key of the search principal's password (S4.6).
PASSWORD_KEY = "mqgate.user_repository.ldap.password"
#: The log reason of a login that failed because no directory server answered.
NOT_ANSWERING = "directory not answering"
#: Seconds a server that did not answer goes to the end of the list.
RETRY_AFTER = 30.0
#: Seconds between two warnings about the same unanswering servers.
WARN_EVERY = 60.0
#: The log reason of a login cut short because the broker is stopping.
STOPPING = "broker stopping"

_DEFAULT_PORTS = {False: 389, True: 636}
# RFC 4512 section 2.5: an attribute description is a descriptor or an OID, with options.
_ATTRIBUTE = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9-]*|[0-9]+(?:\.[0-9]+)+)(?:;[A-Za-z0-9-]+)*")
# Result codes of a bind (RFC 4511 appendix A).
_INVALID_CREDENTIALS = 49


def escape_filter_value(value):
    """C{value} as an assertion value in a search filter (RFC 4515 section 3): the
    characters with a meaning there (C{* ( ) \\} and NUL) as C{\\XX} hex escapes, the
    rest as it is (the filter is sent as UTF-8)."""
    out = []
    for char in value:
        if char in "*()\\\0":
            out.append(f"\\{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def escape_dn_value(value):
    """C{value} as an attribute value in a DN (RFC 4514 section 2.4): the special
    characters escaped with a backslash, a leading C{#} or space and a trailing space
    too, NUL as C{\\00}."""
    out = []
    last = len(value) - 1
    for i, char in enumerate(value):
        if char == "\0":
            out.append("\\00")
        elif (char in ',+"\\<>;=' or (i == 0 and char in "# ")
              or (i == last and char == " ")):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def and_filter(*parts):
    """The AND of the non-empty filters in C{parts}; a configured filter written
    without its outer parentheses (C{objectClass=person}) gets them."""
    parts = [p.strip() for p in parts if p and p.strip()]
    parts = [p if p.startswith("(") else f"({p})" for p in parts]
    if len(parts) == 1:
        return parts[0]
    return "(&" + "".join(parts) + ")"


def parse_servers(text, use_ssl):
    """The (host, port) pairs of C{mqgate.user_repository.ldap.server}: C{host},
    C{host:port} or C{[v6address]:port}, separated by spaces.

    @raise ConfigError: empty, or a port that is not a number from 1 to 65535.
    """
    servers = []
    for item in text.split():
        host, port = item, None
        if item.startswith("["):
            end = item.find("]")
            host, rest = item[1:end], item[end + 1:]
            if end < 0 or (rest and not rest.startswith(":")):
                raise _server_error(text)
            port = rest[1:] or None
        elif item.count(":") == 1:
            host, port = item.split(":")
        if not host:
            raise _server_error(text)
        if port is None:
            port = _DEFAULT_PORTS[use_ssl]
        elif not port.isdigit() or not 0 < int(port) < 65536:
            raise _server_error(text)
        servers.append((host, int(port)))
    if not servers:
        raise _server_error(text)
    return tuple(servers)


def _server_error(text):
    return ConfigError("mqgate.user_repository.ldap.server", text,
                       "host:port of the directory server (389 or, with ssl.enabled, 636 "
                       "when the port is left out), or several separated by spaces")


@attrs.frozen
class LdapConfig:
    """The settings of the LDAP repository (S4.4), checked.

    @ivar servers: (host, port) pairs, tried in order.
    @ivar password: the search principal's password, or None for an anonymous search.
    @ivar timeout: seconds for connecting and for each answer.
    @ivar ca_file: the PEM file of the CAs LDAPS trusts; empty for the system's.
    """

    servers: tuple
    principal: str = ""
    password: str | None = attrs.field(default=None, repr=False)
    base: str = ""
    uidattr: str = "uid"
    usrfilter: str = ""
    grpsearch: bool = False
    grpbase: str = ""
    gidattr: str = "cn"
    memattr: str = "uniqueMember"
    grpfilter: str = ""
    timeout: int = 5
    ssl: bool = False
    ca_file: str = ""

    @classmethod
    def from_settings(cls, settings, password):
        """Read the C{mqgate.user_repository.ldap.*} settings; C{password} comes from
        the password file (L{mqgate.security.passfile.find_password}).

        @raise ConfigError: a setting that cannot work, naming it.
        """
        prefix = "mqgate.user_repository.ldap."

        def get(name):
            return settings[prefix + name]

        use_ssl = get("ssl.enabled")
        config = cls(
            servers=parse_servers(get("server"), use_ssl), principal=get("principal"),
            password=password, base=get("base"), uidattr=get("uidattr"),
            usrfilter=get("usrfilter"), grpsearch=get("grpsearch"),
            grpbase=get("grpbase"), gidattr=get("gidattr"), memattr=get("memattr"),
            grpfilter=get("grpfilter"), timeout=get("timeout"), ssl=use_ssl,
            ca_file=get("ssl.ca_file"))
        config.check()
        return config

    def check(self):
        """@raise ConfigError: a setting that cannot work, naming it."""
        prefix = "mqgate.user_repository.ldap."
        for name in ("uidattr", "gidattr", "memattr"):
            if not _ATTRIBUTE.fullmatch(getattr(self, name)):
                raise ConfigError(prefix + name, getattr(self, name),
                                  "an attribute name such as uid, cn or member")
        if not self.base:
            raise ConfigError(prefix + "base", "",
                              "the DN under which users are searched, such as "
                              "ou=people,dc=example,dc=com")
        for name in ("usrfilter", "grpfilter"):
            text = getattr(self, name)
            if text and not _valid_filter(text):
                raise ConfigError(prefix + name, text,
                                  "an LDAP filter (RFC 4515), such as "
                                  "(objectClass=inetOrgPerson)")
        if self.principal and self.password is None:
            raise ConfigError(PASSWORD_KEY, "(not given)",
                              "the password of the search principal "
                              f"{self.principal!r}, in the password file "
                              "(mqgate.passfile.enabled=true); or an empty "
                              "mqgate.user_repository.ldap.principal to search "
                              "anonymously")
        if self.ca_file and not self.ssl:
            raise ConfigError(prefix + "ssl.ca_file", self.ca_file,
                              "empty unless mqgate.user_repository.ldap.ssl.enabled=true")
        if self.ca_file:
            try:
                ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(prefix + "ssl.ca_file", self.ca_file,
                                  f"a readable PEM file of CA certificates ({e})") from None

    def describe(self):
        """The servers and base, for the start-up log line (no secret)."""
        scheme = "ldaps" if self.ssl else "ldap"
        servers = " ".join(f"{scheme}://{_host_port(s)}" for s in self.servers)
        who = f"as {self.principal}" if self.principal else "anonymously"
        return f"{servers} (users under {self.base}, searched {who})"


def _valid_filter(text):
    """Whether C{text} is a filter ldap3 can send (balanced parentheses first: its
    parser takes some unbalanced ones)."""
    from ldap3.core.exceptions import LDAPException
    from ldap3.operation.search import compile_filter, parse_filter
    if not _balanced(text):
        return False
    try:
        tree = parse_filter(and_filter("x=y", text), None, False, True, None, False)
        compile_filter(tree.elements[0])
    except (LDAPException, ValueError, IndexError):
        return False
    return True


def _balanced(text):
    depth = 0
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _host_port(server):
    host, port = server
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class DirectoryUnavailable(Exception):
    """No server of the list answered (or the TLS handshake failed).

    @ivar failures: (server, why) for each server tried, C{server} as C{host:port}.
    """

    def __init__(self, failures):
        self.failures = tuple(failures)
        super().__init__("; ".join(f"{server}: {why}" for server, why in self.failures))


class DirectoryRefused(Exception):
    """The directory answered but refused the search principal's bind or the search:
    a configuration problem, not the user's.

    @ivar server: C{host:port}.
    @ivar why: the directory's answer.
    @ivar setting: the setting to look at.
    """

    def __init__(self, server, why, setting):
        self.server, self.why, self.setting = server, why, setting
        super().__init__(f"{server}: {why}")


class _Stopping(Exception):
    """A check found the directory closed (the broker is stopping)."""


class LdapDirectory:
    """The blocking half: checks one login against the directory. Runs in a thread;
    several threads may use one instance at once (each check opens its own
    connections; the only shared state, which servers failed lately, is locked).

    @param config: an L{LdapConfig}.
    @param now: a monotonic clock, replaceable for tests.
    """

    def __init__(self, config, now=time.monotonic):
        import ldap3   # here, so that a broker on the file repository never imports it
        self._ldap3 = ldap3
        self._config = config
        self._now = now
        self._lock = threading.Lock()
        self._failed_at = {}   # server -> when it last did not answer
        self._open = set()     # connections of the checks in progress, for close()
        self._closed = False
        self._tls = None
        if config.ssl:
            self._tls = ldap3.Tls(validate=ssl.CERT_REQUIRED,
                                  ca_certs_file=config.ca_file or None)

    def check(self, username, password):
        """(DN, name, groups) of the user if C{password} is right: C{name} is the
        entry's own spelling of the user name (the directory matches C{uidattr} without
        regard to case, access control does not).

        @raise AuthenticationFailed: unknown user, wrong password, bind refused.
        @raise DirectoryUnavailable: no server answered.
        @raise DirectoryRefused: the search principal or the search was refused.
        """
        if not password:
            # An unauthenticated bind: success on many servers (RFC 4513 5.1.2).
            raise AuthenticationFailed(username, "empty password")
        return self._on_a_server(username, password)

    def look_up(self, username):
        """(DN, name, groups) of the user, its password unchecked: for a client that
        proved who it is otherwise (a verified TLS client certificate naming the user).

        @raise AuthenticationFailed: unknown user.
        @raise DirectoryUnavailable: no server answered.
        @raise DirectoryRefused: the search principal or the search was refused.
        """
        return self._on_a_server(username, None)

    def _on_a_server(self, username, password):
        """L{_check_on} on the first server that answers (C{password} None: look up
        only)."""
        if self._closed:
            raise AuthenticationFailed(username, STOPPING)
        if not username:
            raise AuthenticationFailed(username, "unknown user")
        if not (_is_utf8(username) and (password is None or _is_utf8(password))):
            # LDAP strings are UTF-8; a lone surrogate cannot be sent at all.
            raise AuthenticationFailed(username, "user name or password not valid UTF-8")
        failures = []
        for server in self._servers_in_order():
            try:
                return self._check_on(server, username, password)
            except _Stopping:
                raise AuthenticationFailed(username, STOPPING) from None
            except self._ldap3.core.exceptions.LDAPExceptionError as e:
                # Communication, TLS and certificate errors: the next server may do.
                failures.append((_host_port(server), _why(e)))
            except OSError as e:
                failures.append((_host_port(server), _why(e)))
            if self._closed:
                raise AuthenticationFailed(username, STOPPING)
            with self._lock:
                self._failed_at[server] = self._now()
        raise DirectoryUnavailable(failures)

    def close(self):
        """The broker is stopping: checks waiting for a thread fail at once, and the
        connections of those in progress are shut, so that none waits out its timeout
        on a directory that does not answer (the pool's threads are joined next).
        Called from another thread than the checks'."""
        with self._lock:
            self._closed = True
            connections = list(self._open)
        for conn in connections:
            try:
                conn.socket.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):   # not opened yet, or closed already
                pass

    def _servers_in_order(self):
        """The configured order, with servers that did not answer lately moved last."""
        now = self._now()
        with self._lock:
            failed = {s for s, at in self._failed_at.items() if now - at < RETRY_AFTER}
        servers = self._config.servers
        return [s for s in servers if s not in failed] + [s for s in servers if s in failed]

    def _server(self, server):
        host, port = server
        return self._ldap3.Server(host, port, use_ssl=self._config.ssl, tls=self._tls,
                                  get_info=self._ldap3.NONE,
                                  connect_timeout=self._config.timeout)

    def _connection(self, server, user=None, password=None):
        """A new connection, known to L{close} until L{_release}d."""
        # auto_escape off: every value put in a filter here is escaped already, and
        # ldap3 would otherwise guess at backslashes. receive_timeout bounds each
        # answer, the TLS handshake included.
        conn = self._ldap3.Connection(
            self._server(server), user=user, password=password,
            authentication=self._ldap3.SIMPLE if user else self._ldap3.ANONYMOUS,
            receive_timeout=self._config.timeout, auto_escape=False,
            raise_exceptions=False, read_only=True, check_names=False)
        with self._lock:
            if self._closed:
                raise _Stopping()
            self._open.add(conn)
        return conn

    def _release(self, conn):
        with self._lock:
            self._open.discard(conn)
        _close(conn)

    def _check_on(self, server, username, password):
        """Find the user and, unless C{password} is None, bind as it with C{password}."""
        config = self._config
        search = self._connection(server, config.principal or None, config.password)
        try:
            if not _open_and_bind(search):
                self._raise_refused(search, server, "mqgate.user_repository.ldap.principal")
            dn, name = self._find_user(search, server, username)
            if dn is None:
                if password is not None:
                    # Same round trips as a real user: the answer's time tells nothing.
                    self._bind(server, self._nowhere_dn(), password)
                raise AuthenticationFailed(username, "unknown user")
            result = None if password is None else self._bind(server, dn, password)
            if result is not None:
                code, description = result
                reason = ("wrong password" if code == _INVALID_CREDENTIALS
                          else f"bind refused ({description}): inactive user?")
                raise AuthenticationFailed(username, reason)
            groups = self._find_groups(search, server, dn) if config.grpsearch else ()
        finally:
            self._release(search)
        return dn, name, frozenset(groups)

    def _raise_refused(self, conn, server, setting):
        result = conn.result or {}
        why = result.get("description") or "refused"
        if result.get("message"):
            why += f": {result['message']}"
        raise DirectoryRefused(_host_port(server), why, setting)

    def _find_user(self, conn, server, username):
        config = self._config
        query = and_filter(f"{config.uidattr}={escape_filter_value(username)}",
                           config.usrfilter)
        # Two entries are enough to know the name is ambiguous.
        conn.search(config.base, query, self._ldap3.SUBTREE, attributes=[config.uidattr],
                    size_limit=2, time_limit=config.timeout)
        code = (conn.result or {}).get("result")
        entries = [r for r in conn.response or () if r.get("type") == "searchResEntry"]
        if code not in (0, 4, 32) and not entries:   # 4 sizeLimitExceeded, 32 noSuchObject
            self._raise_refused(conn, server, "mqgate.user_repository.ldap.base")
        if len(entries) != 1:
            if entries:
                raise AuthenticationFailed(
                    username, f"user name matches {len(entries)}+ directory entries "
                              f"({config.uidattr} is not unique under {config.base})")
            return None, None
        entry = entries[0]
        return entry["dn"], _spelling(entry, config.uidattr, username)

    def _nowhere_dn(self):
        """A DN under the base that names nobody."""
        token = secrets.token_hex(16)
        value = escape_dn_value("mqgate-no-such-user-" + token)
        return f"{self._config.uidattr}={value},{self._config.base}"

    def _bind(self, server, dn, password):
        """None if C{dn} binds with C{password}, else (result code, description)."""
        conn = self._connection(server, dn, password)
        try:
            if _open_and_bind(conn):
                return None
            result = conn.result or {}
            return result.get("result"), result.get("description") or "refused"
        finally:
            self._release(conn)

    def _find_groups(self, conn, server, dn):
        config = self._config
        query = and_filter(f"{config.memattr}={escape_filter_value(dn)}", config.grpfilter)
        conn.search(config.grpbase or config.base, query, self._ldap3.SUBTREE,
                    attributes=[config.gidattr], time_limit=config.timeout)
        code = (conn.result or {}).get("result")
        if code not in (0, 32):
            self._raise_refused(conn, server, "mqgate.user_repository.ldap.grpbase")
        groups = set()
        for entry in conn.response or ():
            if entry.get("type") != "searchResEntry":
                continue
            values = entry.get("attributes", {}).get(config.gidattr, ())
            groups.update([values] if isinstance(values, str) else values)
        return groups


def _open_and_bind(conn):
    """Connect (and do the TLS handshake), then bind; whether the bind succeeded.

    TCP_NODELAY in between: without it the bind request, the first small write after
    the handshake, waits for the server's delayed ACK of the client's last handshake
    message (about 40 ms on Linux, every LDAPS login)."""
    conn.open()
    try:
        conn.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (AttributeError, OSError):   # not a TCP socket: nothing to tune
        pass
    return conn.bind()


def _close(conn):
    """Unbind and close C{conn}, whatever state it is in: called on the way out of a
    check, where an error here must not hide the check's own outcome."""
    try:
        conn.unbind()
    except Exception:   # a socket that timed out or was never opened; nothing to do
        pass


def _is_utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _spelling(entry, attribute, username):
    """The value of C{attribute} in C{entry} that equals C{username} but for case,
    else C{username}."""
    values = entry.get("attributes", {}).get(attribute, ())
    for value in [values] if isinstance(values, str) else values:
        if isinstance(value, str) and value.casefold() == username.casefold():
            return value
    return username


def _why(error):
    """A one-line account of a communication failure, for the operator."""
    text = str(error) or type(error).__name__
    if (isinstance(error, ssl.SSLCertVerificationError)
            or "CERTIFICATE_VERIFY_FAILED" in text or "doesn't match any name" in text):
        return ("the server's certificate was not accepted (check "
                "mqgate.user_repository.ldap.ssl.ca_file and the server name): "
                + text.splitlines()[0][:300])
    if "timed out" in text:
        return "no answer within mqgate.user_repository.ldap.timeout"
    return text.splitlines()[0][:300]


@implementer(IAuthenticator, IPrincipalSource)
class LdapAuthenticator:
    """L{IAuthenticator} over an L{LdapDirectory} (S4.4).

    @param directory: the L{LdapDirectory} (or anything with its C{check}).
    @param run_in_thread: C{run_in_thread(f, *args) -> Deferred}, off the reactor thread.
    @param clock: an C{IReactorTime}, for spacing out the warnings.
    @param allow_anonymous: whether L{authenticate_anonymous} may succeed; the directory
        has no anonymous user, so such a client is C{guest} in group C{anonymous}.
    """

    _log = Logger(namespace="mqgate.security.ldap")

    def __init__(self, directory, run_in_thread, clock, *, allow_anonymous=True,
                 anonymous_user="guest"):
        self._directory = directory
        self._run_in_thread = run_in_thread
        self._clock = clock
        self._allow_anonymous = allow_anonymous
        self._anonymous_user = anonymous_user
        self._warned = {}   # what was warned about -> (when, how many left out since)

    def authenticate(self, username, password, source=None, service=None):
        """See L{IAuthenticator.authenticate}."""
        if not password:
            return defer.fail(AuthenticationFailed(username, "empty password"))
        if not username:
            return defer.fail(AuthenticationFailed(username, "unknown user"))
        d = self._run_in_thread(self._directory.check, username, password)
        d.addCallbacks(self._principal, self._failed, errbackArgs=(username,))
        return d

    def principal_for(self, name):
        """See L{IPrincipalSource.principal_for}: the directory's user C{name} and its
        groups, found by the search principal; no password is checked."""
        if not name:
            return defer.fail(AuthenticationFailed(name, "unknown user"))
        d = self._run_in_thread(self._directory.look_up, name)
        d.addCallbacks(self._principal, self._failed, errbackArgs=(name,))
        return d

    def authenticate_anonymous(self, source=None, service=None):
        """See L{IAuthenticator.authenticate_anonymous}."""
        if not self._allow_anonymous:
            return defer.fail(AuthenticationFailed(None, "anonymous not allowed"))
        return defer.succeed(Principal(self._anonymous_user, frozenset(["anonymous"]),
                                       anonymous=True))

    @staticmethod
    def _principal(found):
        _dn, name, groups = found
        return Principal(name, groups)

    def _failed(self, failure, username):
        if failure.check(DirectoryUnavailable):
            error = failure.value
            self._warn(
                ("unavailable",) + tuple(server for server, _ in error.failures),
                "LDAP directory not answering, login of user {user!r} refused: {why}. "
                "Check the servers in mqgate.user_repository.ldap.server",
                user=username, why=str(error))
            raise RepositoryUnavailable(username, NOT_ANSWERING)
        if failure.check(DirectoryRefused):
            error = failure.value
            self._warn(("refused", error.server, error.setting),
                       "LDAP directory {server} refused the broker's search, login of user "
                       "{user!r} refused: {why}. Check {setting} (and the principal's "
                       "password in the password file)", server=error.server,
                       user=username, why=error.why, setting=error.setting)
            raise AuthenticationFailed(username, "directory refused the search")
        if failure.check(AuthenticationFailed):
            return failure
        self._log.failure("LDAP login of user {user!r} failed unexpectedly", failure,
                          user=username)
        raise AuthenticationFailed(username, "directory error")

    def _warn(self, key, fmt, **fields):
        """Log C{fmt} as a warning, at most once per L{WARN_EVERY} seconds for C{key};
        the next one says how many were left out."""
        now = self._clock.seconds()
        last = self._warned.get(key)
        if last is not None and now - last[0] < WARN_EVERY:
            self._warned[key] = (last[0], last[1] + 1)
            return
        left_out = last[1] if last else 0
        if left_out:
            fmt += " ({left_out} more like this in the last minute not logged)"
        self._warned[key] = (now, 0)
        self._log.warn(fmt, left_out=left_out, **fields)
