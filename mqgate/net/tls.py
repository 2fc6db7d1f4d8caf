"""
TLS material for the TLS services (S1.8): PEM files to a Twisted context factory.

L{load_context_factory} reads a key (encrypted or not) and a certificate (optionally
followed by its chain) and returns a C{CertificateOptions}, the server-side context
factory Twisted's TLS transports take. With C{client_auth} C{want} or C{need} it also
asks clients for a certificate and verifies it against the CA certificates of a PEM
file (S4.7): C{need} fails the handshake of a client without one, C{want} lets it on
(to log in with a password); a certificate that does not verify fails the handshake
either way, so a certificate a connection has is one the broker verified.
L{certificate_user} reads the user name (the subject's CN) off such a connection.
L{server_endpoint} builds a listening endpoint from the context factory (IPv4 or IPv6).

Why an endpoint and not an C{ssl:} description string: Twisted's C{ssl:} endpoint
parser (C{privateKey=}, C{certKey=}, C{extraCertChain=}) loads the key with no
passphrase, so an encrypted key store (S1.8: the password comes from the password
file or a prompt) cannot be described as text. L{server_endpoint_description} is
still there for unencrypted keys, but L{server_endpoint} works for both and is the
one the services should use.
"""

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from OpenSSL import SSL, crypto
from twisted.internet import endpoints, ssl
from twisted.internet.endpoints import quoteStringArgument
from twisted.internet.interfaces import IProtocolNegotiationFactory, IStreamServerEndpoint
from twisted.protocols.tls import TLSMemoryBIOFactory
from zope.interface import implementer

from mqgate.errors import MqgateError

__all__ = [
    "CLIENT_AUTH", "TLSServerEndpoint", "TlsMaterialError", "certificate_user",
    "certificate_user_of",
    "load_context_factory", "server_endpoint", "server_endpoint_description",
]

#: The values of C{mqgate.SERVICE.ssl.client_auth}.
CLIENT_AUTH = ("none", "want", "need")


class TlsMaterialError(MqgateError):
    """A key or certificate file cannot be used.

    @ivar path: the file in question.
    @ivar reason: what is wrong with it.
    """

    def __init__(self, path, reason):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsMaterialError(path, f"cannot read: {e.strerror}") from e


def _load_key(path, password):
    if isinstance(password, str):
        password = password.encode("utf-8")
    try:
        return serialization.load_pem_private_key(_read(path), password=password)
    except TypeError as e:
        # cryptography says "password was not given but private key is encrypted"
        # or the reverse
        raise TlsMaterialError(path, f"wrong use of a password: {e}") from e
    except ValueError as e:
        raise TlsMaterialError(path, "not a PEM private key, or the password is "
                               "wrong") from e


def _load_certificates(path):
    try:
        certificates = x509.load_pem_x509_certificates(_read(path))
    except ValueError as e:
        raise TlsMaterialError(path, "holds no PEM certificate") from e
    return certificates


def _public_der(key):
    return key.public_bytes(serialization.Encoding.DER,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_context_factory(key_path, cert_path, password=None, *, client_auth="none",
                         ca_path=None):
    """A server context factory from PEM files (S1.8, S4.7).

    @param key_path: the private key (PKCS#8 or traditional PEM; encrypted or not).
    @param cert_path: the certificate, optionally followed by its chain (leaf first).
    @param password: the key's password (C{str} or C{bytes}), or C{None}.
    @param client_auth: C{"none"}, C{"want"} or C{"need"} (see the module doc).
    @param ca_path: the PEM file of the CAs that sign client certificates; needed
        unless C{client_auth} is C{"none"}.
    @return: a C{twisted.internet.ssl.CertificateOptions} (TLS 1.2 at least).
    @raise TlsMaterialError: a file that cannot be read or parsed, a wrong or missing
        password, or a key that does not belong to the certificate.
    @raise ValueError: C{client_auth} is not one of L{CLIENT_AUTH}, or needs a
        C{ca_path} that was not given.
    """
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"client_auth {client_auth!r}: one of {', '.join(CLIENT_AUTH)}")
    verify = client_auth != "none"
    if verify and not ca_path:
        raise ValueError(f"client_auth {client_auth} needs the CA file of client "
                         "certificates")
    # The CAs first: a wrong CA file is the likelier mistake once a service worked.
    ca_certs = _load_ca_certificates(ca_path) if verify else None
    key = _load_key(key_path, password)
    leaf, *chain = _load_certificates(cert_path)
    if _public_der(leaf.public_key()) != _public_der(key.public_key()):
        raise TlsMaterialError(key_path, f"this key does not belong to the "
                               f"certificate in {cert_path}")
    # cryptography objects, not pyOpenSSL's PKey/X509: pyOpenSSL (>= 24.3) takes
    # them directly and deprecates its own wrappers.
    options = ssl.CertificateOptions(
        privateKey=key, certificate=leaf, extraCertChain=chain or None,
        raiseMinimumTo=ssl.TLSVersion.TLSv1_2,
        verify=verify, caCerts=ca_certs, requireCertificate=client_auth == "need",
    )
    _answer_alpn(options.getContext())
    return options


def _answer_alpn(context):
    """Answer a client's ALPN offer with the first protocol the connection's factory
    also lists (C{acceptableProtocols}, e.g. HTTP/1.1 on an HTTPS service), and
    otherwise go on without ALPN, as a server that does not know the extension would.

    Twisted's own choice answers "no overlap" with an empty name, which pyOpenSSL
    (>= 25) turns into a fatal alert: an AMQP client that offers C{amqp} would never
    get past the handshake. The options object keeps this one context for every
    connection, so setting the choice once serves them all."""
    def select(connection, offered):
        factory = connection.get_app_data().factory.wrappedFactory
        negotiation = IProtocolNegotiationFactory(factory, None)
        for protocol in negotiation.acceptableProtocols() if negotiation else ():
            if protocol in offered:
                return protocol
        return SSL.NO_OVERLAPPING_PROTOCOLS
    context.set_alpn_select_callback(select)


def _load_ca_certificates(path):
    """The CA certificates of a PEM file, as the pyOpenSSL objects Twisted's
    C{caCerts} takes (it adds them to the context's trust store)."""
    certificates = _load_certificates(path)
    for certificate in certificates:
        try:
            certificate.public_key()
        except ValueError as e:
            raise TlsMaterialError(path, f"a certificate has an unusable key: {e}") from e
    return [crypto.X509.from_cryptography(c) for c in certificates]


def certificate_user(transport):
    """The user a TLS connection's client certificate names (its subject's CN), or
    None: not TLS, no certificate, or no CN.

    Call it once the handshake is over (any application data has arrived): before,
    there is no certificate yet. Only meaningful on a service that verifies client
    certificates (C{client_auth} want or need): one that asks for none has none.
    """
    get = getattr(transport, "getPeerCertificate", None)
    certificate = get() if get is not None else None
    if certificate is None:
        return None
    names = certificate.to_cryptography().subject.get_attributes_for_oid(
        NameOID.COMMON_NAME)
    if len(names) != 1:
        return None   # none, or ambiguous: no user
    return names[0].value or None


def certificate_user_of(protocol):
    """A callable with no arguments giving L{certificate_user} of C{protocol}'s
    transport at the time it is called: the engines ask once the handshake is over
    (at the SASL header, at CONNECT), not when the connection is made."""
    return lambda: certificate_user(protocol.transport)


def server_endpoint(reactor, host, port, context_factory, backlog=50):
    """A TLS listening endpoint on C{host}:C{port} (C{host} empty or None: all IPv4).

    @param context_factory: from L{load_context_factory}.
    @return: an C{SSL4ServerEndpoint}, or for an IPv6 address (C{::1}) a
        L{TLSServerEndpoint} over a C{TCP6ServerEndpoint}.
    """
    if host and ":" in host:
        tcp = endpoints.TCP6ServerEndpoint(reactor, int(port), backlog=int(backlog),
                                           interface=host)
        return TLSServerEndpoint(tcp, context_factory, clock=reactor)
    return endpoints.SSL4ServerEndpoint(reactor, int(port), context_factory,
                                        backlog=int(backlog), interface=host or "")


@implementer(IStreamServerEndpoint)
class TLSServerEndpoint:
    """TLS over any stream server endpoint: listen with the factory wrapped in
    C{TLSMemoryBIOFactory}, which is what C{listenSSL} does inside."""

    def __init__(self, wrapped, context_factory, clock=None):
        self.wrapped = wrapped
        self.context_factory = context_factory
        self.clock = clock      # TLSMemoryBIOFactory batches small writes on it

    def listen(self, factory):
        """Listen on the wrapped endpoint; every connection is TLS first."""
        return self.wrapped.listen(
            TLSMemoryBIOFactory(self.context_factory, False, factory, clock=self.clock))


def server_endpoint_description(host, port, key_path, cert_path, backlog=None):
    """The C{serverFromString} text of a TLS listener, for an B{unencrypted} key.

    An encrypted key cannot be given a password through this text; use
    L{server_endpoint} with L{load_context_factory} for that (see the module doc).
    """
    text = (f"ssl:port={int(port)}:privateKey={quoteStringArgument(str(key_path))}"
            f":certKey={quoteStringArgument(str(cert_path))}")
    if host:
        text += ":interface=" + quoteStringArgument(host)
    if backlog:
        text += f":backlog={int(backlog)}"
    return text
