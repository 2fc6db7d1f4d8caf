"""
STOMP connection services: the factory that gives L{EngineProtocol} a STOMP engine and
its broker glue (S10.2).

How a client may log in is the service's L{LoginPolicy} (S4.2, S4.7), which the glue
applies to CONNECT: without a login only guests (where allowed) or a client whose TLS
certificate the service verified (it logs in as the certificate's user); a password
not over cleartext where the service refuses that.
"""

from mqgate import __version__
from mqgate.glue.stomp import StompBrokerSession
from mqgate.net.engine import EngineFactory, EventBudget
from mqgate.net.tls import certificate_user_of
from mqgate.security.auth import LoginPolicy
from mqgate.stomp.connection import DEFAULT_UNAUTHENTICATED_BYTES, StompConnection
from mqgate.stomp.events import Abort, Commit, Send, Subscribe, Unsubscribe
from mqgate.stomp.frames import FrameLimits

__all__ = ["StompServerFactory", "EVENT_BUDGET", "READ_SLICE"]


def _send_cost(event):
    return 4 if event.persistent else 1


#: Frames of one connection acted on per reactor turn (S10.4). 64 KiB of small SENDs
#: are two thousand frames, tens of milliseconds of broker work that every other client
#: would wait for; 128 SENDs take a few. A SUBSCRIBE or UNSUBSCRIBE makes or ends a
#: subscription (about eight SENDs' worth of work: 16 a turn); a COMMIT or ABORT
#: settles a transaction's frames, counted as four; so is a persistent SEND (32 a
#: turn): besides its store record it is what makes a producer outrun its consumers,
#: whose ACKs (one each) must get their share of the turns or the queue fills, and
#: every message then waits in it, which costs more per message than a hand-over.
EVENT_BUDGET = EventBudget(128, {Send: _send_cost, Subscribe: 8, Unsubscribe: 8,
                                 Commit: 4, Abort: 4})
#: Bytes of one connection given to the engine per reactor turn. The engine parses at
#: most EVENT_BUDGET's frames of them a turn (the rest waits, unparsed, for the next),
#: so this bounds memory, not work: a 64 KiB read of tiny frames costs a turn what
#: 128 frames cost, and 4 KiB messages go sixteen a turn (an 8 KiB slice let two
#: through, and each turn costs a pause and a resume of the socket besides).
READ_SLICE = 64 * 1024


class StompServerFactory(EngineFactory):
    """Builds STOMP connections for one connection service.

    @param login_policy: the service's L{LoginPolicy}; without one (tests), any login
        and guests.
    @param identities: what maps a certificate's user to a principal; the
        authenticator by default.
    @param audit: the audit trail for certificate logins and CONNECTs the login
        policy refuses (S4.8), or None.
    """

    protocol_label = "STOMP"
    # A STOMP server may send ERROR at any time: a refused client hears why at once.
    speaks_first = True
    event_budget = EVENT_BUDGET
    read_slice = READ_SLICE

    def __init__(self, *, broker, authenticator, clock, flusher, glue_config,
                 setup_timeout, heartbeat=(10000, 10000), egress=None,
                 max_unauthenticated_bytes=DEFAULT_UNAUTHENTICATED_BYTES,
                 login_policy=None, identities=None, audit=None):
        super().__init__(clock=clock, flusher=flusher, setup_timeout=setup_timeout,
                         egress=egress)
        self.max_unauthenticated_bytes = max_unauthenticated_bytes
        self.broker = broker
        self.authenticator = authenticator
        self.glue_config = glue_config
        self.heartbeat = heartbeat
        self.login_policy = login_policy or LoginPolicy(
            glue_config.service, allow_anonymous=True)
        self.identities = identities
        self.audit = audit

    def make_session(self, protocol):
        guaranteed, direct = self.egress.ingress_limits
        engine = StompConnection(server=True, server_name=f"mqgate/{__version__}",
                                 heartbeat=self.heartbeat,
                                 limits=FrameLimits(max_body_size=direct,
                                                    max_guaranteed_size=guaranteed),
                                 max_unauthenticated_bytes=self.max_unauthenticated_bytes,
                                 frame_budget=EVENT_BUDGET.total)
        glue = StompBrokerSession(engine, self.broker, self.authenticator, self.clock,
                                  self.glue_config, protocol.request_flush,
                                  peer=protocol.peer, pause_reading=protocol.pause_reading,
                                  resume_reading=protocol.resume_reading,
                                  egress=self.egress, keepalive=protocol.set_keepalive,
                                  login_policy=self.login_policy,
                                  certificate_user=(
                                      certificate_user_of(protocol)
                                      if self.login_policy.client_certificates else None),
                                  identities=self.identities, audit=self.audit)
        return engine, glue

    def abandon(self, engine, why, description):
        message = {"shutdown": "server shutting down",
                   "capacity": "resource limit exceeded"}.get(why, "timeout")
        engine.send_error(message, description)
