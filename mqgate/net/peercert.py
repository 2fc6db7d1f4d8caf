"""
The user a TLS client certificate names (S4.7), read off a connection's transport.

Kept apart from L{mqgate.net.tls}, which loads keys and certificates: every AMQP and
STOMP factory asks for the certificate user, but only a broker running a TLS service
needs pyOpenSSL and the certificate parsers, and importing them costs every other
broker's start a tenth of a second of CPU.
"""

__all__ = ["certificate_user", "certificate_user_of"]


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
    # A certificate exists only on a TLS connection, where these are loaded already.
    from cryptography.x509.oid import NameOID

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
