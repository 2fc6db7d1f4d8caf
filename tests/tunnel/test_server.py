"""The tunnel's server resource (S10.3) with a Clock: long polls, resends, the
connection timeout, and a broker-side protocol that sees a plain byte stream."""

import io

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyChannel, DummyRequest

from mqgate.net.tunnel import TunnelResource
from mqgate.tunnel import packets as p


class Echo(Protocol):
    """A broker-side stand-in: echoes what it reads, remembers how it ended."""

    def __init__(self, log):
        self.log = log

    def dataReceived(self, data):
        self.log.append(("data", data))
        self.transport.write(data.upper())

    def connectionLost(self, reason):
        self.log.append(("lost", reason.type.__name__))


def setup(pull_period=10, timeout=30):
    clock, log = Clock(), []
    factory = Factory.forProtocol(lambda: Echo(log))
    resource = TunnelResource(factory, clock, service_name="httpjms",
                              pull_period=pull_period, connection_timeout=timeout)
    return clock, log, resource


def call(resource, kind, body=b"", conn_id=None, token=None):
    """Render one request; return C{(request, result)}. The connection's own token is
    sent unless C{token} says otherwise."""
    args = {b"Type": [kind.encode()]}
    if conn_id is not None:
        args[b"ConnId"] = [str(conn_id).encode()]
        known = resource.connections.get(conn_id)
        if token is None and known is not None:
            token = known.token
        args[b"Token"] = [(token or "").encode()]
    request = DummyRequest([b""])
    request.channel = DummyChannel()
    request.method = b"POST"
    request.args = args
    request.content = io.BytesIO(body)
    return request, resource.render(request)


def connect(resource):
    request, body = call(resource, "connect", p.encode(p.Packet(p.CONN_INIT)))
    init = p.parse_all(body)[0]
    assert init.type == p.CONN_INIT_ACK
    assert init.body.decode() == resource.connections[init.conn_id].token
    return init.conn_id


def data(conn_id, seq, body):
    return p.encode(p.Packet(p.DATA, conn_id, seq, body=body))


def answer(request, result):
    """The packets of a pull, answered now or later."""
    raw = result if result is not NOT_DONE_YET else b"".join(request.written)
    return p.parse_all(raw)


def test_push_reaches_the_protocol_once_and_the_reply_comes_with_the_pull():
    """A pushed DATA packet is read once even if pushed twice; the protocol's answer is
    in the next pull, acknowledged there."""
    clock, log, resource = setup()
    conn_id = connect(resource)
    for _ in range(2):
        request, ack = call(resource, "push", data(conn_id, 1, b"hello"), conn_id)
        assert p.parse_all(ack)[0].seq == 1
    assert log == [("data", b"hello")]
    request, result = call(resource, "pull", p.encode(p.Packet(p.ACK, conn_id, 0, 64)),
                           conn_id)
    got = answer(request, result)
    assert [q.body for q in got if q.type == p.DATA] == [b"HELLO"]


def test_a_pull_with_nothing_to_send_is_held_until_data_or_the_pull_period():
    """An idle pull waits; data written meanwhile answers it in the next turn; an idle
    one is answered with an ACK after the pull period."""
    clock, log, resource = setup(pull_period=10)
    conn_id = connect(resource)
    request, result = call(resource, "pull", b"", conn_id)
    assert result is NOT_DONE_YET and not request.finished
    call(resource, "push", data(conn_id, 1, b"ping"), conn_id)
    clock.advance(0)
    assert request.finished
    assert [q.body for q in answer(request, result) if q.type == p.DATA] == [b"PING"]
    ack = p.encode(p.Packet(p.ACK, conn_id, 1, 64))
    request, result = call(resource, "pull", ack, conn_id)
    assert result is NOT_DONE_YET
    clock.advance(9.9)
    assert not request.finished
    clock.advance(0.1)
    assert request.finished and [q.type for q in answer(request, result)] == [p.ACK]


def test_an_unacknowledged_answer_is_sent_again_with_the_next_pull():
    """A pull answer that was lost (the next pull does not acknowledge it) is repeated."""
    clock, log, resource = setup()
    conn_id = connect(resource)
    call(resource, "push", data(conn_id, 1, b"x"), conn_id)
    first = answer(*call(resource, "pull", b"", conn_id))
    again = answer(*call(resource, "pull", p.encode(p.Packet(p.ACK, conn_id, 0, 64)),
                         conn_id))
    assert [q.seq for q in first if q.type == p.DATA] == [1]
    assert [q.seq for q in again if q.type == p.DATA] == [1]


def test_no_pull_for_the_connection_timeout_closes_the_connection():
    """A connection nobody pulls for `connectionTimeout` seconds is lost (its protocol
    hears connectionLost) and its id is unknown afterwards (404)."""
    clock, log, resource = setup(timeout=30)
    conn_id = connect(resource)
    clock.advance(29)
    assert ("lost", "ConnectionLost") not in log
    clock.advance(1.5)
    assert log[-1] == ("lost", "ConnectionLost")
    request, body = call(resource, "pull", b"", conn_id)
    assert request.responseCode == 404


def test_a_held_pull_keeps_the_connection_alive():
    """While a pull is held the client is there: the timeout does not close it."""
    clock, log, resource = setup(pull_period=60, timeout=30)
    conn_id = connect(resource)
    call(resource, "pull", b"", conn_id)
    clock.advance(45)
    assert not any(entry[0] == "lost" for entry in log)


def test_the_clients_close_ends_the_protocol_after_its_data():
    """A numbered CONN_CLOSE ends the broker-side connection cleanly after the data."""
    clock, log, resource = setup()
    conn_id = connect(resource)
    body = data(conn_id, 1, b"bye") + p.encode(p.Packet(p.CONN_CLOSE, conn_id, 2))
    call(resource, "push", body, conn_id)
    assert log == [("data", b"bye"), ("lost", "ConnectionDone")]
    assert conn_id not in resource.connections


def test_packets_of_another_connection_are_refused():
    """A push whose packets name another connection id than ConnId= is a 400."""
    clock, log, resource = setup()
    conn_id = connect(resource)
    request, body = call(resource, "push", data(conn_id + 1, 1, b"x"), conn_id)
    assert request.responseCode == 400 and log == []


class Flood(Protocol):
    """A broker-side protocol that writes more than the tunnel window holds."""

    paused = False

    def connectionMade(self):
        self.transport.registerProducer(self, True)
        self.transport.write(b"m" * (64 * p.MAX_BODY + 1))

    def pauseProducing(self):
        self.paused = True

    def resumeProducing(self):
        self.paused = False

    def stopProducing(self):
        pass


def test_output_beyond_the_window_pauses_the_protocol_until_acknowledged():
    """The broker-side protocol is paused once a window's worth waits unacknowledged
    (its deliveries then wait in the egress queues), and resumed by the client's ACK."""
    clock = Clock()
    flood = Flood()
    resource = TunnelResource(Factory.forProtocol(lambda: flood), clock,
                              service_name="httpjms", pull_period=10,
                              connection_timeout=30)
    conn_id = connect(resource)
    assert flood.paused
    got = answer(*call(resource, "pull", b"", conn_id))
    sent = [q for q in got if q.type == p.DATA]
    assert len(sent) == 64 and flood.paused
    call(resource, "pull", p.encode(p.Packet(p.ACK, conn_id, 64, 64)), conn_id)
    assert not flood.paused


def test_a_wrong_token_is_answered_as_an_unknown_connection():
    """A push or pull with the right id but not its token gets 404 and reaches nothing."""
    clock, log, resource = setup()
    conn_id = connect(resource)
    request, body = call(resource, "push", data(conn_id, 1, b"x"), conn_id, token="guess")
    assert request.responseCode == 404 and log == []


def test_a_close_the_client_never_acknowledges_ends_after_a_while():
    """The broker's close is waited for CLOSE_WAIT seconds at most, not the whole
    connection timeout."""
    clock, log, resource = setup(timeout=300)
    conn_id = connect(resource)
    resource.connections[conn_id].transport.loseConnection()
    clock.advance(10)
    assert log[-1] == ("lost", "ConnectionLost") and conn_id not in resource.connections


def test_the_source_systems_pull_period_means_the_longest_hold():
    """pullPeriod -1 (the source system's default) or 0 hold a pull 60 s; more is capped."""
    for configured, held in ((-1, 60), (0, 60), (90, 60), (5, 5)):
        clock, log, resource = setup(pull_period=configured)
        assert resource.pull_period == held
