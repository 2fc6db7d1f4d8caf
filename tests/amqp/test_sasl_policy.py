"""The SASL side of a service's login policy in the engine (S4.2, S4.7; AMQP Part 5
section 5.3): mechanisms withheld and what a peer trying them hears, EXTERNAL for a
peer whose TLS certificate names a user, and a server that requires SASL."""

import pytest

from mqgate.amqp.connection import Connection
from mqgate.amqp.events import AuthenticationRequested, SaslCompleted
from mqgate.amqp.frames import AMQP_HEADER, SASL_FRAME, SASL_HEADER
from mqgate.amqp.performatives import Open, SaslInit, SaslMechanisms, SaslOutcome
from mqgate.amqp.types import Symbol
from tests.amqp.helpers import (
    EnginePair, decode_stream, names, performatives_of, raw_frame,
)


def _init_bytes(mechanism, response=b""):
    out = bytearray()
    SaslInit(mechanism=Symbol(mechanism), initial_response=response).encode(out)
    return SASL_HEADER + raw_frame(bytes(out), frame_type=SASL_FRAME)


def _offered(server):
    frames = decode_stream(server.data_to_send())
    return [str(m) for m in performatives_of(frames, SaslMechanisms)[0]
            .sasl_server_mechanisms]


def _outcome(data):
    return performatives_of(decode_stream(data), SaslOutcome)[-1]


def test_a_plain_header_to_a_server_requiring_sasl_gets_the_sasl_header_and_nothing_more():
    """Part 2 section 2.2: a server that requires SASL answers the plain AMQP header with
    the SASL header, and ends the connection without an open."""
    server = Connection(server=True, sasl_mechanisms=("PLAIN",), allow_no_sasl=False)
    assert server.receive_data(AMQP_HEADER) == []
    assert server.data_to_send() == SASL_HEADER
    assert server.finished


@pytest.mark.parametrize("mechanism,description", [
    ("ANONYMOUS", "guests are let in only with mqgate.jms.allow_anonymous=true"),
    ("PLAIN", "use the TLS service ssljms"),
])
def test_a_withheld_mechanism_is_refused_with_auth_and_the_reason(mechanism, description):
    """A mechanism the service withholds, tried anyway, gets outcome auth whose
    additional data names what to do; no authentication is asked of the broker."""
    offered = tuple(m for m in ("PLAIN", "ANONYMOUS") if m != mechanism)
    server = Connection(server=True, sasl_mechanisms=offered, allow_no_sasl=False,
                        sasl_refusals={mechanism: f"refused: {description}"})
    events = server.receive_data(_init_bytes(mechanism, b"\x00u\x00p"))
    assert events == []
    data = server.data_to_send()
    assert _offered_from(data) == list(offered)
    outcome = _outcome(data)
    assert outcome.code == 1
    assert outcome.additional_data == f"refused: {description}".encode()
    assert server.finished


def _offered_from(data):
    return [str(m) for m in performatives_of(decode_stream(data), SaslMechanisms)[0]
            .sasl_server_mechanisms]


def test_external_is_offered_first_only_when_the_certificate_names_a_user():
    """S4.7: EXTERNAL is offered, first, to a peer whose verified certificate names a
    user, and not to one without a certificate."""
    with_cert = Connection(server=True, sasl_mechanisms=("PLAIN",),
                           external_identity=lambda: "alice")
    with_cert.receive_data(SASL_HEADER)
    assert _offered(with_cert) == ["EXTERNAL", "PLAIN"]
    without = Connection(server=True, sasl_mechanisms=("PLAIN",),
                         external_identity=lambda: None)
    without.receive_data(SASL_HEADER)
    assert _offered(without) == ["PLAIN"]


def test_external_without_a_certificate_is_refused():
    """S4.7: EXTERNAL tried by a peer that presented no certificate gets outcome auth."""
    server = Connection(server=True, sasl_mechanisms=("PLAIN",),
                        external_identity=lambda: None,
                        sasl_refusals={"EXTERNAL": "no certificate"})
    assert server.receive_data(_init_bytes("EXTERNAL")) == []
    outcome = _outcome(server.data_to_send())
    assert (outcome.code, outcome.additional_data) == (1, b"no certificate")


@pytest.mark.parametrize("authzid", [b"", b"alice"], ids=["none", "same"])
def test_external_logs_in_as_the_certificate_user(authzid):
    """S4.7: EXTERNAL, with no authorization identity or the certificate's own, asks
    the broker to authenticate the certificate's user; on success the connection
    opens."""
    server = Connection(server=True, sasl_mechanisms=("PLAIN",),
                        external_identity=lambda: "alice")
    events = server.receive_data(_init_bytes("EXTERNAL", authzid))
    assert events == [AuthenticationRequested("EXTERNAL", "alice", None, None)]
    assert server.authenticating
    server.sasl_outcome(True)
    assert _outcome(server.data_to_send()).code == 0


def test_external_with_another_authorization_identity_is_refused():
    """S4.7: an authorization identity other than the certificate's user is refused
    with outcome auth naming both, before the broker is asked anything."""
    server = Connection(server=True, sasl_mechanisms=("PLAIN",),
                        external_identity=lambda: "alice")
    assert server.receive_data(_init_bytes("EXTERNAL", b"admin")) == []
    outcome = _outcome(server.data_to_send())
    assert outcome.code == 1
    assert b"'admin'" in outcome.additional_data and b"'alice'" in outcome.additional_data
    assert server.finished


def test_engine_client_and_server_agree_on_external():
    """S4.7: the engine's own client logs in with EXTERNAL and the connection opens."""
    pair = EnginePair(client_kwargs={"credentials": "EXTERNAL"},
                      server_kwargs={"external_identity": lambda: "alice"})
    server_events, _ = pair.pump()
    assert server_events == [AuthenticationRequested("EXTERNAL", "alice", None, None)]
    pair.server.sasl_outcome(True)
    server_events, client_events = pair.pump()
    assert client_events[0] == SaslCompleted(True, 0)
    assert names(server_events) == ["ConnectionOpened"]
    assert pair.server.authenticated == "EXTERNAL"


def test_a_refused_login_says_why_in_the_outcome():
    """Part 5 section 5.3.3.6: a login the broker refuses gets outcome auth with the
    refusal's description as additional data, and no open follows."""
    pair = EnginePair()
    pair.pump()
    pair.server.sasl_outcome(False, "only users of group admin may use this service")
    _, client_events = pair.pump()
    assert client_events == [SaslCompleted(False, 1)]
    frames = decode_stream(bytes(pair.to_client))
    assert performatives_of(frames, SaslOutcome)[0].additional_data == (
        b"only users of group admin may use this service")
    assert not performatives_of(frames, Open)
