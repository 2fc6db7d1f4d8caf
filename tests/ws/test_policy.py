"""Who may open a WebSocket and in which subprotocol (S10.3): the answers real clients
need, and the refusals with their HTTP status."""

import pytest

from mqgate.ws.policy import (
    AMQP, STOMP, Choice, Refused, choose_subprotocol, origin_allowed, parse_origins)


@pytest.mark.parametrize("offered, answer", [
    (["binary", "AMQPWSB10", "amqp"], Choice("amqp", AMQP)),     # rhea users
    (["amqp"], Choice("amqp", AMQP)),                              # qpid-jms
    (["AMQPWSB10"], Choice("AMQPWSB10", AMQP)),                    # the draft's name
    (["v10.stomp", "v11.stomp", "v12.stomp"], Choice("v12.stomp", STOMP)),  # stomp.js
    (["v12.stomp", "v11.stomp", "v10.stomp"], Choice("v12.stomp", STOMP)),
    (["v10.stomp", "v11.stomp"], Choice("v11.stomp", STOMP)),
    ([" v10.stomp "], Choice("v10.stomp", STOMP)),
    ([], Choice(None, None)),                                      # stomp.py: sniffed
    (["v12.stomp", "amqp"], Choice("v12.stomp", STOMP)),           # the first family
    (["amqp", "v12.stomp"], Choice("amqp", AMQP)),
])
def test_subprotocol_answer_is_one_offered(offered, answer):
    """The answer is spelled as offered: amqp when offered (AMQPWSB10 alone
    otherwise), the highest STOMP version, none when none was offered."""
    assert choose_subprotocol(offered) == answer


@pytest.mark.parametrize("offered", [["mqtt"], ["binary"], ["v13.stomp", "wamp.2.json"]])
def test_unserved_subprotocols_are_refused_with_400(offered):
    """An offer with nothing served is refused with 400, naming what is served."""
    with pytest.raises(Refused) as refused:
        choose_subprotocol(offered)
    assert refused.value.status == 400
    assert "amqp" in refused.value.reason and "v12.stomp" in refused.value.reason


SAME_ORIGIN = parse_origins(())


@pytest.mark.parametrize("origin, host, secure, allowed", [
    (None, "broker:8080", False, True),                       # not a browser
    ("http://broker:8080", "broker:8080", False, True),
    ("http://BROKER:8080", "broker:8080", False, True),       # host names ignore case
    ("http://broker", "broker:80", False, True),              # default ports
    ("https://broker", "broker", True, True),
    ("http://broker:8080", "broker:8081", False, False),      # another port
    ("http://evil.example:8080", "broker:8080", False, False),
    ("https://broker", "broker", False, False),               # 443 is not 80
    ("http://[::1]:8080", "[::1]:8080", False, True),
    ("null", "broker:8080", False, False),                    # sandboxed, file: pages
    ("not an origin", "broker:8080", False, False),
    ("http://broker:8080", None, False, False),
])
def test_empty_allow_list_means_same_origin(origin, host, secure, allowed):
    """With no allowed_origins, only a page of the broker's own host and port may
    connect; a request without Origin (not a browser) always may."""
    assert origin_allowed(origin, host, SAME_ORIGIN, secure) is allowed


def test_allow_list_names_origins_or_star():
    """Listed origins (scheme, host and port) are allowed and only they; * allows any."""
    allowed = parse_origins(["https://app.example.com", "http://localhost:3000"])
    assert origin_allowed("https://app.example.com", "broker", allowed, False)
    assert origin_allowed("https://app.example.com:443", "broker", allowed, False)
    assert origin_allowed("http://localhost:3000", "broker", allowed, False)
    assert not origin_allowed("http://app.example.com", "broker", allowed, False)
    assert not origin_allowed("http://broker", "broker", allowed, False)
    assert origin_allowed("http://anything", "broker", parse_origins(["*"]), False)


def test_a_bad_allow_list_entry_is_named():
    """An allowed_origins item that is not an origin is an error naming it."""
    with pytest.raises(ValueError, match="app.example.com/path"):
        parse_origins(["https://app.example.com/path"])
