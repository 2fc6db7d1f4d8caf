"""
AMQP 1.0 connection services: the factory that gives L{EngineProtocol} an AMQP engine
and its broker glue.
"""

from mqgate.amqp import conditions as c
from mqgate.amqp.connection import Connection
from mqgate.glue.amqp import AmqpBrokerSession
from mqgate.net.engine import EngineFactory, Flusher

__all__ = ["AmqpServerFactory", "Flusher"]


class AmqpServerFactory(EngineFactory):
    """Builds AMQP connections for one connection service."""

    def __init__(self, *, settings, broker, authenticator, clock, flusher, glue_config,
                 container_id, allow_anonymous=True, header_timeout=None, egress=None):
        super().__init__(clock=clock, flusher=flusher, setup_timeout=header_timeout or
                         settings["mqgate.authentication.client.response.timeout"],
                         egress=egress)
        self.settings = settings
        self.broker = broker
        self.authenticator = authenticator
        self.glue_config = glue_config
        self.container_id = container_id
        self.allow_anonymous = allow_anonymous
        self.sasl_mechanisms = ("PLAIN", "ANONYMOUS") if allow_anonymous else ("PLAIN",)

    def make_session(self, protocol):
        settings = self.settings
        engine = Connection(
            server=True, container_id=self.container_id,
            max_frame_size=settings["mqgate.amqp.max_frame_size"],
            channel_max=settings["mqgate.amqp.channel_max"],
            idle_timeout=settings["mqgate.amqp.idle_timeout"],
            sasl_mechanisms=self.sasl_mechanisms, allow_no_sasl=self.allow_anonymous)
        glue = AmqpBrokerSession(engine, self.broker, self.authenticator, self.clock,
                                 self.glue_config, protocol.request_flush, peer=protocol.peer,
                                 pause_reading=protocol.pause_reading,
                                 resume_reading=protocol.resume_reading,
                                 egress=self.egress, keepalive=protocol.set_keepalive)
        return engine, glue

    def abandon(self, engine, why, description):
        # Before the SASL exchange is over, nothing can be said (close drops the socket).
        condition = {"shutdown": c.CONNECTION_FORCED, "setup-timeout": c.UNAUTHORIZED_ACCESS,
                     }.get(why, c.RESOURCE_LIMIT_EXCEEDED)
        engine.close(condition, description)
        engine.finished = True

    def wave_through(self, engine):
        """A refused client's SASL succeeds unchecked; it is closed at its open."""
        return engine.sasl_outcome(True)
