"""The client profile's connections per user are decided before the password check
(S4.2, S9.7): a connection that would be refused for it costs no hash and is told at
once, in its protocol's words. Through the real factories on task.Clock and
StringTransport."""

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from mqgate.config import Settings
from mqgate.core.broker import Broker
from mqgate.egress.profiles import profiles_from_settings
from mqgate.glue.amqp import GlueConfig
from mqgate.glue.egress import EgressContext
from mqgate.glue.stomp import StompGlueConfig
from mqgate.net.amqp import AmqpServerFactory, Flusher
from mqgate.net.stomp import StompServerFactory
from tests.net.test_login_slots import CONNECT, _Flusher, frames_of
from tests.net.test_pool import AmqpPeer, AnsweringAuthenticator, StepClock

ONE_EACH = {"mqgate.client_profile.default.max_connections_per_user": "1"}


def egress(clock, limits=ONE_EACH):
    return EgressContext(clock, profiles=profiles_from_settings(limits))


class Stomp:
    """A STOMP factory whose client profile allows each user one connection."""

    def __init__(self, limits=ONE_EACH):
        self.clock = StepClock()
        self.authenticator = AnsweringAuthenticator()
        self.factory = StompServerFactory(
            broker=Broker(self.clock), authenticator=self.authenticator,
            clock=self.clock, flusher=_Flusher(), setup_timeout=20,
            glue_config=StompGlueConfig(), egress=egress(self.clock, limits))
        self.ports = iter(range(30000, 31000))

    def login(self, frame=CONNECT):
        address = IPv4Address("TCP", "127.0.0.1", next(self.ports))
        protocol = self.factory.buildProtocol(address)
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        protocol.dataReceived(frame)
        return protocol, transport


def test_a_stomp_login_past_the_users_limit_costs_no_check():
    """With admin's one connection taken, a second CONNECT as admin gets an ERROR at
    once, naming the limit, and no password check is asked for."""
    stomp = Stomp()
    stomp.login()
    stomp.authenticator.succeed_all()
    _, transport = stomp.login()
    assert stomp.authenticator.pending == []
    (error,) = frames_of(transport)
    assert error.command == "ERROR"
    assert dict(error.headers)["message"] == "connection limit reached"
    assert b"max_connections_per_user" in error.body


def test_another_user_is_still_checked():
    """The limit is per user: another user's login goes to the password check."""
    stomp = Stomp()
    stomp.login()
    stomp.authenticator.succeed_all()
    stomp.login(CONNECT.replace(b"login:admin", b"login:alice"))
    assert len(stomp.authenticator.pending) == 1


def test_under_the_limit_logins_are_checked():
    """Below the limit nothing is refused early: every login is checked."""
    stomp = Stomp({"mqgate.client_profile.default.max_connections_per_user": "3"})
    for _ in range(3):
        stomp.login()
    assert len(stomp.authenticator.pending) == 3


def test_an_amqp_login_past_the_users_limit_costs_no_check(tmp_path):
    """An AMQP client past admin's limit gets through SASL unchecked and its open is
    answered with a close, amqp:resource-limit-exceeded, naming the limit."""
    clock = StepClock()
    authenticator = AnsweringAuthenticator()
    factory = AmqpServerFactory(
        settings=Settings.from_properties([], {}, varhome=str(tmp_path)),
        broker=Broker(clock), authenticator=authenticator, clock=clock,
        flusher=Flusher(clock), glue_config=GlueConfig(), container_id="mqgate:test",
        egress=egress(clock))
    first = AmqpPeer(factory, 40000)
    first.pump()
    authenticator.succeed_all()
    clock.advance(0)
    first.pump()
    assert first.close_error() is None
    second = AmqpPeer(factory, 40001)
    second.pump()
    assert authenticator.pending == []
    clock.advance(0)
    second.pump()
    error = second.close_error()
    assert str(error.condition) == "amqp:resource-limit-exceeded"
    assert "max_connections_per_user" in error.description

