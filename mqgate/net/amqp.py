"""
AMQP 1.0 connection services: the factory that gives an L{mqgate.net.engine.EngineProtocol}
an AMQP engine
and its broker glue.

The engine processes a bounded amount of a peer's frames per read (its frame budget);
L{mqgate.net.engine.EngineProtocol} stops reading a peer whose frames wait and processes them in the next
reactor turn, after the other connections had theirs. One client pipelining a thousand
attaches (each one a consumer or producer to create) thus costs others a few
milliseconds per turn, not the whole burst at once.

How a client may log in is the service's L{LoginPolicy} (S4.2, S4.7): the mechanisms
offered (PLAIN unless passwords are refused over cleartext, ANONYMOUS and the plain
AMQP header only where guests are allowed), what a client trying a withheld one is
told, and EXTERNAL for a client whose TLS certificate the service verified.
"""

from twisted.internet.interfaces import ISSLTransport

from mqgate.amqp import conditions as c
from mqgate.amqp.connection import SASL_AUTH, SASL_SYS_TEMP, Connection
from mqgate.glue.amqp import AmqpBrokerSession
from mqgate.net.engine import EngineFactory, Flusher
from mqgate.net.tls import certificate_user_of
from mqgate.security.auth import LoginPolicy

__all__ = ["AmqpServerFactory", "Flusher"]

#: Frames (an attach or begin counting 4) one read of one connection processes before
#: the others are served: 128 transfers, or 32 attaches (each tens to hundreds of
#: microseconds of work for the broker).
FRAME_BUDGET = 128

# The setting behind each engine limit, quoted to a client that passes one.
_SETTING_NAMES = {
    "channel_max": "mqgate.amqp.channel_max",
    "handle_max": "mqgate.amqp.handle_max",
    "max_preauth_bytes": "mqgate.authentication.client.max_bytes",
    "max_partial_bytes": "mqgate.ingress.partial.max_bytes",
}


class AmqpServerFactory(EngineFactory):
    """Builds AMQP connections for one connection service.

    @param login_policy: the service's L{LoginPolicy}; without one (tests), PLAIN, and
        guests if C{allow_anonymous}.
    @param identities: what maps a certificate's user to a principal (see
        L{mqgate.glue.session.BrokerSession}); the authenticator by default.
    @param audit: the audit trail for certificate logins (S4.8), or None.
    """

    protocol_label = "AMQP"

    def __init__(self, *, settings, broker, authenticator, clock, flusher, glue_config,
                 container_id, allow_anonymous=True, header_timeout=None, egress=None,
                 login_policy=None, identities=None, audit=None):
        super().__init__(clock=clock, flusher=flusher, setup_timeout=header_timeout or
                         settings["mqgate.authentication.client.response.timeout"],
                         egress=egress)
        self.settings = settings
        self.broker = broker
        self.authenticator = authenticator
        self.glue_config = glue_config
        self.container_id = container_id
        self.login_policy = login_policy or LoginPolicy(
            glue_config.service, allow_anonymous=allow_anonymous)
        self.identities = identities
        self.audit = audit

    @property
    def allow_anonymous(self):
        """Whether guests may log in on this service."""
        return self.login_policy.allow_anonymous

    def make_session(self, protocol):
        settings = self.settings
        policy = self.login_policy
        identity = certificate_user_of(protocol) if policy.client_certificates else None
        engine = Connection(
            server=True, container_id=self.container_id,
            max_frame_size=settings["mqgate.amqp.max_frame_size"],
            channel_max=settings["mqgate.amqp.channel_max"],
            idle_timeout=settings["mqgate.amqp.idle_timeout"],
            sasl_mechanisms=policy.mechanisms, allow_no_sasl=policy.allow_anonymous,
            sasl_refusals=policy.refusals, external_identity=identity,
            handle_max=settings["mqgate.amqp.handle_max"],
            heartbeat_floor=settings["mqgate.amqp.min_heartbeat_interval"] / 1000,
            max_preauth_bytes=settings["mqgate.authentication.client.max_bytes"],
            max_partial_bytes=settings["mqgate.ingress.partial.max_bytes"],
            ingress_budget=None if self.egress is None else self.egress.ingress_budget,
            setting_names=_SETTING_NAMES, frame_budget=FRAME_BUDGET)
        glue = AmqpBrokerSession(engine, self.broker, self.authenticator, self.clock,
                                 self.glue_config, protocol.request_flush, peer=protocol.peer,
                                 local=_local_address(protocol.transport),
                                 pause_reading=protocol.pause_reading,
                                 resume_reading=protocol.resume_reading,
                                 egress=self.egress, keepalive=protocol.set_keepalive,
                                 login_policy=policy, certificate_user=identity,
                                 identities=self.identities, audit=self.audit)
        return engine, glue

    def abandon(self, engine, why, description):
        condition = {"shutdown": c.CONNECTION_FORCED, "setup-timeout": c.UNAUTHORIZED_ACCESS,
                     }.get(why, c.RESOURCE_LIMIT_EXCEEDED)
        if not engine.ready:
            # A client still logging in hears it in the SASL exchange: "auth" when it
            # never got its credentials to us in time, "sys-temp" when we did not
            # finish with them (a slow check, a shutdown, no room): it may try again.
            code = (SASL_AUTH if why == "setup-timeout" and not engine.authenticating
                    else SASL_SYS_TEMP)
            engine.end_login(code, description, condition)
            return
        engine.abort(condition, description)

    def wave_through(self, engine):
        """A refused client's SASL succeeds unchecked; it is closed at its open."""
        return engine.sasl_outcome(True)


def _local_address(transport):
    """(host, port, tls) of our end of the connection: the service as the client
    reached it, which the MQ Light client expects in its deliveries' addresses."""
    host = transport.getHost()
    return (getattr(host, "host", "localhost"), getattr(host, "port", 0),
            ISSLTransport.providedBy(transport))
