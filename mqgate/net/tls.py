"""
TLS material for the TLS services (S1.8): PEM files to a Twisted context factory.

L{load_context_factory} reads a key (encrypted or not) and a certificate (optionally
followed by its chain) and returns a C{CertificateOptions}, the server-side context
factory Twisted's TLS transports take. L{server_endpoint} builds a listening
endpoint from it (IPv4 or IPv6).

Why an endpoint and not an C{ssl:} description string: Twisted's C{ssl:} endpoint
parser (C{privateKey=}, C{certKey=}, C{extraCertChain=}) loads the key with no
passphrase, so an encrypted key store (S1.8: the password comes from the password
file or a prompt) cannot be described as text. L{server_endpoint_description} is
still there for unencrypted keys, but L{server_endpoint} works for both and is the
one the services should use.
"""

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from twisted.internet import endpoints, ssl
from twisted.internet.endpoints import quoteStringArgument
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.protocols.tls import TLSMemoryBIOFactory
from zope.interface import implementer

from mqgate.errors import MqgateError

__all__ = [
    "TLSServerEndpoint", "TlsMaterialError", "load_context_factory", "server_endpoint",
    "server_endpoint_description",
]


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


def load_context_factory(key_path, cert_path, password=None):
    """A server context factory from PEM files (S1.8).

    @param key_path: the private key (PKCS#8 or traditional PEM; encrypted or not).
    @param cert_path: the certificate, optionally followed by its chain (leaf first).
    @param password: the key's password (C{str} or C{bytes}), or C{None}.
    @return: a C{twisted.internet.ssl.CertificateOptions} (TLS 1.2 at least).
    @raise TlsMaterialError: a file that cannot be read or parsed, a wrong or missing
        password, or a key that does not belong to the certificate.
    """
    key = _load_key(key_path, password)
    leaf, *chain = _load_certificates(cert_path)
    if _public_der(leaf.public_key()) != _public_der(key.public_key()):
        raise TlsMaterialError(key_path, f"this key does not belong to the "
                               f"certificate in {cert_path}")
    # cryptography objects, not pyOpenSSL's PKey/X509: pyOpenSSL (>= 24.3) takes
    # them directly and deprecates its own wrappers.
    return ssl.CertificateOptions(
        privateKey=key, certificate=leaf, extraCertChain=chain or None,
        raiseMinimumTo=ssl.TLSVersion.TLSv1_2,
    )


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
