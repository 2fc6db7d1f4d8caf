"""The admin request/reply protocol (S11.1): parsing, dispatch, replies, and the glue
that gives the reserved address to the ADMIN service only. In memory: a core Broker on
a task.Clock, and AMQP peers on StringTransports (tests/net/test_amqp_adapter.py)."""

import pytest
from twisted.internet import task

from mqgate.admin.requests import (
    ADMIN_ADDRESS, BAD_REQUEST, ERROR, NOT_FOUND, OK, AdminContext, AdminRequests,
    BadRequest, Command, parse_request, read_reply, request_body)
from mqgate.admin.show import COMMANDS
from mqgate.amqp import conditions as c
from mqgate.errors import printable
from mqgate.amqp.events import DeliveriesSettled, LinkDetached, MessageReceived
from mqgate.amqp.message import Properties, build_message, encode_message, parse_message
from mqgate.amqp.performatives import RECEIVER, SENDER, Rejected, Source, Target
from mqgate.config import Settings
from mqgate.core.broker import Broker, BrokerMessage
from mqgate.core.addresses import NotFound
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable
from mqgate.errors import ProtocolError
from mqgate.glue.amqp import GlueConfig
from mqgate.net.amqp import AmqpServerFactory, Flusher
from tests.net.test_amqp_adapter import ADMIN, FakeAuthenticator, Peer


def request(verb="show", object_="client-profile", arguments=("default",), **props):
    """An encoded request message, as a client sends it."""
    return build_message(request_body(verb, object_, arguments),
                         properties=Properties(**props))


class Collector:
    """A core delivery target that keeps what it gets."""

    def __init__(self):
        self.deliveries = []

    def deliver(self, delivery):
        self.deliveries.append(delivery)


@pytest.fixture
def broker():
    return Broker(task.Clock())


@pytest.fixture
def requests(broker):
    return AdminRequests(AdminContext(broker, ClientRegistry(), ProfileTable()), COMMANDS)


@pytest.fixture
def reply_queue(broker):
    """A dynamic reply queue with a consumer: C{(address, collector)}."""
    target = Collector()
    consumer = broker.open_consumer(None, target, dynamic=True, presettled=True)
    consumer.set_credit(100)
    return consumer.address, target


def ask(requests, encoded, reply_to, message_id="req-1"):
    message = BrokerMessage(encoded, reply_to=reply_to, message_id=message_id)
    requests.handle(message, ADMIN)


def replies(target):
    """The (correlation-id, Reply) of every reply delivered to C{target}."""
    out = []
    for delivery in target.deliveries:
        encoded = parse_message(b"".join(bytes(c) for c in
                                         delivery.message.payload.for_delivery()))
        out.append((encoded.properties.correlation_id, read_reply(encoded)))
    return out


# -- the message format -----------------------------------------------------------------


def test_parse_request_reads_verb_object_and_arguments():
    """S11.1: the body map gives the command words."""
    parsed = parse_request(request("show", "client", ["*", "slow-subscriber"]))
    assert (parsed.verb, parsed.object, parsed.arguments) == \
        ("show", "client", ("*", "slow-subscriber"))
    assert str(parsed) == "show client * slow-subscriber"


def test_arguments_may_be_left_out():
    """S11.1: a request without arguments has none."""
    encoded = build_message({"verb": "show", "object": "client-profile"})
    assert parse_request(encoded).arguments == ()


@pytest.mark.parametrize("body", [
    b"show client-profile default",          # a data section, not a map
    "show client-profile default",           # a string
    {"object": "client-profile"},            # no verb
    {"verb": "show", "object": 7},           # object not a string
    {"verb": "show", "object": "client", "arguments": "x"},
    {"verb": "show", "object": "client", "arguments": [1, 2]},
])
def test_malformed_bodies_are_bad_requests(body):
    """S11.1: anything but the documented map is a bad request, never a crash."""
    with pytest.raises(BadRequest):
        parse_request(build_message(body))


def test_no_body_is_a_bad_request():
    """S11.1: a message with no body at all is a bad request."""
    with pytest.raises(BadRequest):
        parse_request(build_message(properties=Properties(message_id="x"),
                                    body_type=0x75))


# -- answering -------------------------------------------------------------------------------


def test_reply_goes_to_reply_to_with_the_request_id_as_correlation(requests, reply_queue):
    """S11.1: the reply reaches the reply-to queue, correlated by the request's
    message-id, with status 200, the table and the data."""
    address, target = reply_queue
    ask(requests, request(), address, message_id="req-7")
    [(cid, reply)] = replies(target)
    assert cid == "req-7"
    assert reply.status == OK
    assert "Profile Name" in reply.text
    assert reply.data[0]["name"] == "default"


def test_status_is_also_an_application_property(requests, reply_queue):
    """S11.1: the status is in the application properties, for selectors."""
    address, target = reply_queue
    ask(requests, request(arguments=("nope",)), address)
    payload = target.deliveries[0].message.payload
    assert payload.application_properties == {"status": NOT_FOUND}


@pytest.mark.parametrize("encoded,status", [
    (request(arguments=("nope",)), NOT_FOUND),
    (request("show", "client-profile", ()), BAD_REQUEST),
    (request("destroy", "everything", ()), BAD_REQUEST),
    (build_message(b"not a map"), BAD_REQUEST),
])
def test_errors_are_replies_with_a_status_and_a_reason(requests, reply_queue, encoded,
                                                         status):
    """S11.1: an unknown name is a 404, a malformed or unknown command a 400; the
    reply says why."""
    address, target = reply_queue
    ask(requests, encoded, address)
    [(_cid, reply)] = replies(target)
    assert reply.status == status
    assert reply.text


def test_a_failing_handler_is_a_500_reply_and_the_next_request_works(broker, reply_queue):
    """S10.4/S11.1: a bug in a command becomes a 500 reply, logged; nothing else
    breaks."""
    def broken(context, arguments):
        raise KeyError("oops")

    commands = dict(COMMANDS)
    commands[("show", "bug")] = Command("show bug", broken)
    requests = AdminRequests(AdminContext(broker, ClientRegistry(), ProfileTable()),
                             commands)
    address, target = reply_queue
    ask(requests, request("show", "bug", ()), address, message_id="a")
    ask(requests, request(), address, message_id="b")
    statuses = [(cid, reply.status) for cid, reply in replies(target)]
    assert statuses == [("a", ERROR), ("b", OK)]


def test_a_request_without_reply_to_is_refused(requests):
    """S11.1: with no reply-to there is nobody to answer: the message is refused with
    invalid-field (the glue rejects it)."""
    with pytest.raises(ProtocolError) as caught:
        requests.handle(BrokerMessage(request(), message_id="x"), ADMIN)
    assert caught.value.condition == "amqp:invalid-field"


def test_a_reply_to_naming_no_destination_is_refused_and_not_created(requests, broker):
    """S11.1: replies never create destinations: a reply-to that names none is
    refused with not-found, and nothing is left behind."""
    with pytest.raises(NotFound):
        ask(requests, request(), "queue://gone")
    assert "gone" not in broker.queues()


def test_numeric_message_ids_correlate_as_ulong(requests, reply_queue):
    """Part 3 3.2.4: a ulong message-id comes back as the reply's correlation-id."""
    address, target = reply_queue
    ask(requests, request(), address, message_id=12)
    [(cid, _reply)] = replies(target)
    assert cid == 12


# -- through the glue: only the ADMIN service serves the address -----------------------


class Service:
    """An AMQP connection factory over one core broker, as build_broker makes one."""

    def __init__(self, tmp_path, admin):
        self.clock = task.Clock()
        self.broker = Broker(self.clock)
        self.authenticator = FakeAuthenticator()
        self.requests = AdminRequests(
            AdminContext(self.broker, ClientRegistry(), ProfileTable()), COMMANDS)
        self.factory = AmqpServerFactory(
            settings=Settings.from_properties([], {}, varhome=str(tmp_path)),
            broker=self.broker, authenticator=self.authenticator, clock=self.clock,
            flusher=Flusher(self.clock), container_id="mqgate:test",
            glue_config=GlueConfig(admin_only=admin, service="admin" if admin else "jms",
                                   admin_requests=self.requests if admin else None))

    def opened(self):
        peer = Peer(self.factory)
        peer.pump()
        self.authenticator.succeed_all()
        self.clock.advance(0)
        peer.pump()
        return peer

    def settle(self, peer):
        self.clock.advance(0)
        peer.pump()


def link(peer, role, source, target, credit=0):
    sessions = peer.client.sessions
    session = sessions[0] if sessions else peer.client.begin_session()
    new = session.attach_link(f"link-{len(peer.events)}-{role}", role)
    new.attach(source=source, target=target)
    peer.pump()
    if credit:
        new.flow(credit)
        peer.pump()
    return new


def detach_errors(peer):
    return [e.error for e in peer.events if isinstance(e, LinkDetached) and e.error]


def rejections(peer):
    return [e.state for e in peer.events
            if isinstance(e, DeliveriesSettled) and isinstance(e.state, Rejected)]


def test_admin_service_answers_a_request_on_the_reserved_address(tmp_path):
    """S11.1: on the admin service, a request sent to mqgate.admin is answered on the
    requester's dynamic reply queue, correlated by message-id."""
    service = Service(tmp_path, admin=True)
    peer = service.opened()
    receiver = link(peer, RECEIVER, Source(dynamic=True), Target(), credit=5)
    reply_to = receiver.remote.source.address
    sender = link(peer, SENDER, Source(), Target(address=ADMIN_ADDRESS))
    sender.send(encode_message(request_body("show", "client-profile", ["default"]),
                               properties=Properties(message_id="q1", reply_to=reply_to)),
                settled=False)
    peer.pump()
    service.settle(peer)
    [message] = [e for e in peer.events if isinstance(e, MessageReceived)]
    reply = parse_message(message.payload)
    assert reply.properties.correlation_id == "q1"
    assert read_reply(reply).status == OK
    assert ADMIN_ADDRESS not in service.broker.queues()


def test_admin_service_takes_requests_through_the_anonymous_relay(tmp_path):
    """S11.1: an anonymous sender with `to` = mqgate.admin reaches the admin requests."""
    service = Service(tmp_path, admin=True)
    peer = service.opened()
    receiver = link(peer, RECEIVER, Source(dynamic=True), Target(), credit=5)
    sender = link(peer, SENDER, Source(), None)
    sender.send(encode_message(request_body("show", "client-profile", ["default"]),
                               properties=Properties(message_id="q2", to=ADMIN_ADDRESS,
                                                     reply_to=receiver.remote.source.address)),
                settled=False)
    peer.pump()
    service.settle(peer)
    assert [e for e in peer.events if isinstance(e, MessageReceived)]
    assert ADMIN_ADDRESS not in service.broker.queues()


def test_admin_request_without_reply_to_is_rejected_with_the_reason(tmp_path):
    """S11.1: a request that cannot be answered is rejected, saying why."""
    service = Service(tmp_path, admin=True)
    peer = service.opened()
    sender = link(peer, SENDER, Source(), Target(address=ADMIN_ADDRESS))
    sender.send(encode_message(request_body("show", "client-profile", ["default"]),
                               properties=Properties(message_id="q3")), settled=False)
    peer.pump()
    [state] = rejections(peer)
    assert state.error.condition == "amqp:invalid-field"
    assert "reply-to" in state.error.description


@pytest.mark.parametrize("address", [ADMIN_ADDRESS, "queue://mqgate.admin",
                                     "/topic/mqgate.admin"])
def test_jms_service_refuses_to_attach_to_the_admin_address(tmp_path, address):
    """S11.1: on a NORMAL service the reserved address is refused with
    unauthorized-access, in every spelling, and no such destination appears."""
    service = Service(tmp_path, admin=False)
    peer = service.opened()
    link(peer, SENDER, Source(), Target(address=address))
    [error] = detach_errors(peer)
    assert error.condition == c.UNAUTHORIZED_ACCESS
    assert "admin service" in error.description
    assert "mqgate.admin" not in service.broker.queues() + service.broker.topics()


def test_jms_service_rejects_relayed_messages_to_the_admin_address(tmp_path):
    """S11.1: the anonymous relay of a NORMAL service rejects a message `to`
    mqgate.admin with unauthorized-access; other messages on the same link still go."""
    service = Service(tmp_path, admin=False)
    peer = service.opened()
    sender = link(peer, SENDER, Source(), None)
    sender.send(encode_message(b"x", properties=Properties(to=ADMIN_ADDRESS,
                                                           reply_to="q")), settled=False)
    sender.send(encode_message(b"y", properties=Properties(to="ordinary")), settled=False)
    peer.pump()
    [state] = rejections(peer)
    assert state.error.condition == c.UNAUTHORIZED_ACCESS
    assert "mqgate.admin" not in service.broker.queues()
    assert "ordinary" in service.broker.queues()


def test_printable_escapes_what_could_forge_a_log_line():
    """Names a client sent are logged with CR, LF and ESC escaped, and plain text as
    it is."""
    assert printable("orders.eu") == "orders.eu"
    assert printable("a\r\nFAKE\x1b[2J") == "a\\r\\nFAKE\\x1b[2J"
