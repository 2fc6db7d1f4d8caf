"""
A throw-away OpenLDAP server for the tests of the LDAP user repository (S4.4).

L{LdapServer} runs Debian's C{slapd} on a configuration it writes into a fresh
temporary directory: the mdb backend holding one suffix (L{SUFFIX}) with a root DN
(L{ROOT_DN}, L{ROOT_PASSWORD}), plain LDAP on one free loopback port and LDAPS on
another, with a CA and a server certificate (for 127.0.0.1 and localhost) made for the
occasion with C{cryptography}. It never meets the machine's own slapd (if any): its own
ports, its own pid and socket files, its own database directory.

L{LdapServer.load} adds entries through the root DN with ldap3 (the library the broker
uses), L{LdapServer.pause} and L{LdapServer.resume} stop and continue the process
(SIGSTOP, SIGCONT): the server still accepts TCP connections in the kernel but answers
nothing, which is what a hung directory looks like to a client.

Like tests/pgcluster.py: L{start_for_test} skips the test when slapd is missing, or
fails it under C{make test} (C{MQGATE_REQUIRE_SLAPD=1}) or CI, where the Makefile
installs it.
"""

import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["SUFFIX", "ROOT_DN", "ROOT_PASSWORD", "PEOPLE", "GROUPS", "SERVICE_DN",
           "SERVICE_PASSWORD", "JSMITH_DN", "SAMPLE_ENTRIES", "LdapServer",
           "LdapUnavailable", "find_slapd", "slapd_required", "start_for_test", "make_ca"]

#: How long slapd may take to answer after it was started.
START_DEADLINE = 30.0
SUFFIX = "dc=mqgate,dc=test"
ROOT_DN = f"cn=root,{SUFFIX}"
ROOT_PASSWORD = "root-secret"

PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
SERVICE_DN = f"cn=mqgate,ou=system,{SUFFIX}"
SERVICE_PASSWORD = "service-secret"
JSMITH_DN = f"cn=Smith\\, John,{PEOPLE}"


def _person(uid, password, dn=None, **extra):
    """An inetOrgPerson entry (dn, attributes) with C{uid} and C{password}."""
    attributes = {"objectClass": ["inetOrgPerson"], "uid": uid, "cn": uid, "sn": uid,
                  "userPassword": password, **extra}
    return dn or f"uid={uid},{PEOPLE}", attributes


def _unique_group(name, *members):
    """A groupOfUniqueNames entry (uniqueMember, the default memattr)."""
    return f"cn={name},{GROUPS}", {"objectClass": ["groupOfUniqueNames"], "cn": name,
                                   "uniqueMember": list(members)}


#: A small directory: users (alice in groups admin and staff, bob in staff and ops,
#: jsmith with a comma in his DN, carol described as disabled, two entries named twin
#: in different branches), groups, and a search principal for the broker.
SAMPLE_ENTRIES = [
    (f"ou=people,{SUFFIX}", {"objectClass": ["organizationalUnit"], "ou": "people"}),
    (f"ou=others,{SUFFIX}", {"objectClass": ["organizationalUnit"], "ou": "others"}),
    (f"ou=groups,{SUFFIX}", {"objectClass": ["organizationalUnit"], "ou": "groups"}),
    (f"ou=system,{SUFFIX}", {"objectClass": ["organizationalUnit"], "ou": "system"}),
    (SERVICE_DN, {"objectClass": ["organizationalRole", "simpleSecurityObject"],
                  "cn": "mqgate", "userPassword": SERVICE_PASSWORD}),
    _person("alice", "alice-pw"),
    _person("bob", "bob-pw"),
    _person("jsmith", "john-pw", dn=JSMITH_DN),
    _person("carol", "carol-pw", description="disabled"),
    _person("twin", "twin-pw"),
    _person("twin", "twin-pw", dn=f"uid=twin,ou=others,{SUFFIX}"),
    _unique_group("admin", f"uid=alice,{PEOPLE}"),
    _unique_group("staff", f"uid=alice,{PEOPLE}", f"uid=bob,{PEOPLE}", JSMITH_DN),
    (f"cn=ops,{GROUPS}", {"objectClass": ["groupOfNames"], "cn": "ops",
                          "member": [f"uid=bob,{PEOPLE}"]}),
]

_SCHEMAS = ("core", "cosine", "inetorgperson", "nis")
_MODULE_DIRS = ("/usr/lib/ldap", "/usr/lib/openldap", "/usr/lib64/openldap")
_SCHEMA_DIRS = ("/etc/ldap/schema", "/etc/openldap/schema")


class LdapUnavailable(Exception):
    """No slapd, or it would not start; says why."""


def find_slapd():
    """The path of the slapd binary, or None."""
    for candidate in (shutil.which("slapd"), "/usr/sbin/slapd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def slapd_required():
    """Whether a missing slapd must fail the tests instead of skipping them: in CI and
    under C{make test} (C{MQGATE_REQUIRE_SLAPD=1}), which installs it."""
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("MQGATE_REQUIRE_SLAPD", "") not in ("", "0"))


def start_for_test(**kwargs):
    """Start a throw-away slapd (C{LdapServer(**kwargs)}) for a pytest fixture, or
    skip (or fail) the test."""
    import pytest
    try:
        return LdapServer(**kwargs).start()
    except LdapUnavailable as e:
        if slapd_required():
            pytest.fail(f"slapd is required here but unavailable: {e}", pytrace=False)
        pytest.skip(f"slapd unavailable: {e}")


def sample_directory():
    """A throw-away slapd holding the sample directory (alice in admin and staff, bob in
    staff ...), for a module-scoped pytest fixture: yields it and stops it."""
    server = start_for_test()
    try:
        server.load(SAMPLE_ENTRIES)
        yield server
    finally:
        server.stop()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_dir(candidates, wanted):
    for directory in candidates:
        if os.path.exists(os.path.join(directory, wanted)):
            return directory
    return None


def make_ca(directory, names=("127.0.0.1", "localhost")):
    """Write a throw-away CA (ca.pem) and a server key and certificate signed by it
    (server.key, server.pem, valid for C{names}) into C{directory}; return their paths
    as (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    now = datetime.datetime.now(datetime.timezone.utc)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def name(common):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder()
               .subject_name(name("mqgate test LDAP CA"))
               .issuer_name(name("mqgate test LDAP CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(validity[0]).not_valid_after(validity[1])
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=True,
                   crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    alt = []
    for entry in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            alt.append(x509.DNSName(entry))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(name(names[0])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(validity[0]).not_valid_after(validity[1])
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return paths


class LdapServer:
    """One private slapd: L{start}, L{load}, L{pause}/L{resume}, L{stop}.

    @ivar port: the plain LDAP port on 127.0.0.1, once started.
    @ivar ssl_port: the LDAPS port on 127.0.0.1, once started.
    @ivar ca_file: the PEM file of the CA that signed the server's certificate.

    @param cert_names: the names (and addresses) the server's certificate is for.
    """

    def __init__(self, cert_names=("127.0.0.1", "localhost")):
        self.cert_names = tuple(cert_names)
        self.slapd = find_slapd()
        if self.slapd is None:
            raise LdapUnavailable(
                "slapd not found (not on PATH, no /usr/sbin/slapd); install it with "
                "`apt-get install -y slapd` (make test does)")
        self.port = self.ssl_port = None
        self.ca_file = None
        self._root = None
        self._process = None
        self._paused = False

    @property
    def address(self):
        """C{host:port} of the plain LDAP listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def ssl_address(self):
        """C{host:port} of the LDAPS listener."""
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def pid(self):
        return self._process.pid

    def start(self):
        """Write the configuration and start slapd; return once it answers a search
        (or raise L{LdapUnavailable} with its output, having removed what it made)."""
        self._root = Path(tempfile.mkdtemp(prefix="mqgate-slapd-"))
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _config(self):
        modules = _first_dir(_MODULE_DIRS, "back_mdb.la") or _first_dir(
            _MODULE_DIRS, "back_mdb.so")
        schemas = _first_dir(_SCHEMA_DIRS, "core.schema")
        if schemas is None:
            raise LdapUnavailable(f"no core.schema in any of {', '.join(_SCHEMA_DIRS)}")
        lines = [f"include {schemas}/{name}.schema" for name in _SCHEMAS]
        # Like many directories in the field, accept an unauthenticated bind (a DN with
        # an empty password) as a success: the broker must refuse empty passwords itself.
        lines += ["allow bind_anon_dn",
                  f"pidfile {self._root}/slapd.pid",
                  f"argsfile {self._root}/slapd.args"]
        if modules:   # else back_mdb is built in
            lines += [f"modulepath {modules}", "moduleload back_mdb"]
        ca, cert, key = make_ca(self._root, self.cert_names)
        self.ca_file = str(ca)
        lines += [f"TLSCACertificateFile {ca}", f"TLSCertificateFile {cert}",
                  f"TLSCertificateKeyFile {key}",
                  "database mdb", "maxsize 16777216", f"suffix {SUFFIX}",
                  f"rootdn {ROOT_DN}", f"rootpw {ROOT_PASSWORD}",
                  f"directory {self._root}/data",
                  "index objectClass eq", "index uid eq", "index member,uniqueMember eq",
                  # Everyone may read (the broker's anonymous search); passwords are only
                  # compared by binds, never read.
                  "access to attrs=userPassword by anonymous auth by * none",
                  "access to * by * read"]
        return "\n".join(lines) + "\n"

    def _start(self):
        (self._root / "data").mkdir(mode=0o700)
        conf = self._root / "slapd.conf"
        conf.write_text(self._config())
        for attempt in range(3):
            # Another process may take a port between _free_port and slapd's bind.
            self.port, self.ssl_port = _free_port(), _free_port()
            log = open(self._root / "slapd.log", "wb")
            # -d 0: stay in the foreground (a child of this process, so SIGSTOP and the
            # final kill reach it) without debug output.
            self._process = subprocess.Popen(
                [self.slapd, "-f", str(conf), "-d", "0", "-h",
                 f"ldap://127.0.0.1:{self.port}/ ldaps://127.0.0.1:{self.ssl_port}/"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            log.close()
            if self._wait_until_answering(last=attempt == 2):
                break
        self.load([(SUFFIX, {"objectClass": ["dcObject", "organization"],
                             "dc": "mqgate", "o": "mqgate tests"})])
        return self

    def _log_tail(self):
        log = self._root / "slapd.log" if self._root else None
        if log is None or not log.exists():
            return ""
        return "\n--- slapd output ---\n" + "\n".join(
            log.read_text(errors="replace").splitlines()[-30:])

    def _wait_until_answering(self, last):
        import ldap3
        deadline = time.monotonic() + START_DEADLINE
        while True:
            if self._process.poll() is not None:
                if last:
                    raise LdapUnavailable(
                        f"slapd exited with {self._process.returncode}{self._log_tail()}")
                return False
            try:
                conn = ldap3.Connection(ldap3.Server("127.0.0.1", self.port,
                                                     connect_timeout=2),
                                        ROOT_DN, ROOT_PASSWORD, receive_timeout=2)
                if conn.bind():
                    conn.unbind()
                    return True
            except ldap3.core.exceptions.LDAPException:
                pass
            if time.monotonic() > deadline:
                raise LdapUnavailable(
                    f"slapd on port {self.port} does not answer{self._log_tail()}")
            time.sleep(0.05)

    def connection(self):
        """An ldap3 connection bound as the root DN (close it with C{unbind()})."""
        import ldap3
        conn = ldap3.Connection(ldap3.Server("127.0.0.1", self.port, connect_timeout=5),
                                ROOT_DN, ROOT_PASSWORD, receive_timeout=5,
                                raise_exceptions=True)
        conn.bind()
        return conn

    def load(self, entries):
        """Add C{entries}, a sequence of (dn, attributes), in order."""
        conn = self.connection()
        try:
            for dn, attributes in entries:
                attributes = dict(attributes)
                classes = attributes.pop("objectClass")
                conn.add(dn, classes, attributes)
        finally:
            conn.unbind()

    def pause(self):
        """Stop the process (SIGSTOP): connections are still accepted by the kernel,
        nothing is answered."""
        os.kill(self._process.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self):
        """Let a paused process go on (SIGCONT)."""
        os.kill(self._process.pid, signal.SIGCONT)
        self._paused = False

    def stop(self):
        """Stop slapd (resumed first if paused) and remove its directory."""
        try:
            if self._process is not None and self._process.poll() is None:
                if self._paused:
                    self.resume()
                self._process.terminate()
                try:
                    self._process.wait(10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(10)
        finally:
            self._process = None
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None
