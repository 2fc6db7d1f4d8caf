"""
Admin requests as request/reply messages on the ADMIN services (S11.1).

The protocol
------------
A user of group C{admin}, logged in on an ADMIN service (C{admin}, C{ssladmin}), sends
each request as an AMQP message to the reserved address C{mqgate.admin}
(L{mqgate.admin.wire.ADMIN_ADDRESS}; the source system's reserved admin queue is
C{__JMQAdmin}), on a link whose target is that address or through the anonymous relay
with C{to} set to it. The broker never stores or routes these messages: the admin
service's glue hands them to L{AdminRequests}. Every other service refuses the
address with C{amqp:unauthorized-access} (a link attach is refused; a relayed message
is rejected).

Request::

    properties.message-id      any id; the reply's correlation-id (required in practice)
    properties.reply-to        where the reply goes: an existing destination, usually a
                               dynamic queue the requester attached a receiver to
    body (amqp-value map)      {"verb": "show", "object": "client-profile",
                                "arguments": ["gold", "detail"]}

C{verb} and C{object} are strings, C{arguments} a list of strings (may be missing: no
arguments). The command is the source's C{VERB OBJECT ARGUMENT...} command line,
word by word (FACTS 1.8 for imqcmd, seed 004 for the show commands).

Reply, sent to the request's reply-to::

    properties.correlation-id       the request's message-id (else its correlation-id)
    application-properties.status   200 ok, 400 bad request, 404 not found, 500 error
                                    (the source's admin status codes)
    body (amqp-value map)           {"status": 200, "text": "<the table>",
                                     "data": <the same, machine-readable>}
                                    on an error: {"status": 4xx/5xx, "error": "why",
                                     "text": "why"}

A request without a usable reply-to cannot be answered: it is rejected (the message's
disposition carries the error), as is one whose reply-to names no destination. Any
other problem, a bug in a handler included, becomes an error reply: a request never
takes the broker down (S10.4).

Commands are looked up in a table, C{(verb, object) -> L{Command}}; L{mqgate.admin.show}
holds the S9.7 show commands, and the other admin operations of S11.1 add their own
tables.
"""

from dataclasses import dataclass, field
import itertools

from twisted.logger import Logger

from mqgate.admin.wire import (
    ADMIN_ADDRESS, BAD_REQUEST, ERROR, NOT_FOUND, OK, AdminError, BadRequest,
    NotFoundError, Reply, read_reply, request_body)
from mqgate.amqp.message import Properties, build_message
from mqgate.amqp.types import ULong
from mqgate.core.addresses import QUEUE, NotFound, resolve
from mqgate.core.message import BrokerMessage
from mqgate.errors import ProtocolError, printable
from mqgate.security.audit import NO_AUDIT

__all__ = [
    "ADMIN_ADDRESS", "OK", "BAD_REQUEST", "NOT_FOUND", "ERROR", "AdminError",
    "BadRequest", "NotFoundError", "Command", "AdminContext", "AdminRequest", "Reply",
    "parse_request", "request_body", "reply_message", "read_reply", "dispatch",
    "AdminRequests", "AdminProducer", "RELOAD_USAGE", "reload_commands",
]

@dataclass(frozen=True)
class Command:
    """One admin command.

    @ivar usage: the command line, e.g. C{"show client-profile NAME [detail]"}.
    @ivar run: C{run(context, arguments) -> Reply}; raises L{AdminError}.
    @ivar help: one line saying what it shows or does.
    """

    usage: str
    run: object
    help: str = ""
    #: C{run(context, arguments, principal)}: the command needs to know who asks
    #: (capture:write, S7.9).
    with_principal: bool = False


@dataclass
class AdminContext:
    """What the commands read: the core, the connected clients, the profiles (S9.7).

    @ivar broker: the core L{mqgate.core.broker.Broker}.
    @ivar clients: the L{mqgate.egress.clients.ClientRegistry}.
    @ivar profiles: the L{mqgate.egress.profiles.ProfileTable}.
    @ivar reloadables: the L{mqgate.security.access_control.Reloadables} the C{reload}
        command re-reads (access control rules, ...), or None.
    @ivar control: the L{mqgate.net.control.BrokerControl} (services, connections, the
        broker's stop and restart) the svc, cxn and bkr commands act on, or None.
    @ivar metrics: the L{mqgate.metrics.snapshot.MetricsSources} (services, pools,
        store) the C{metrics} commands read besides the core, or None.
    @ivar metrics_exposition: C{metrics_exposition() -> (bytes, content_type)}, the
        Prometheus text the HTTP API serves at C{/metrics}, or None.
    """

    broker: object
    clients: object
    profiles: object
    reloadables: object = None
    control: object = None
    metrics: object = None
    metrics_exposition: object = None


@dataclass(frozen=True)
class AdminRequest:
    """A parsed request: the command words."""

    verb: str
    object: str
    arguments: tuple = field(default_factory=tuple)

    def __str__(self):
        return " ".join((self.verb, self.object) + self.arguments)


def parse_request(encoded):
    """Read the command of a request message.

    @param encoded: an L{mqgate.amqp.message.EncodedMessage}.
    @raise BadRequest: the body is not the documented map.
    """
    try:
        sections = encoded.body_sections()
    except ProtocolError as e:
        raise BadRequest(f"the request body cannot be decoded: {e}") from None
    body = sections[0][1] if len(sections) == 1 else None
    if not isinstance(body, dict):
        raise BadRequest("a request body is one amqp-value map: "
                         "{verb: str, object: str, arguments: [str, ...]}")
    verb, object_ = body.get("verb"), body.get("object")
    arguments = body.get("arguments", [])
    if not isinstance(verb, str) or not verb or not isinstance(object_, str) \
            or not object_:
        raise BadRequest("a request names its verb and object, both strings")
    if not isinstance(arguments, (list, tuple)) or \
            not all(isinstance(a, str) for a in arguments):
        raise BadRequest("the request's arguments are a list of strings")
    return AdminRequest(verb, object_, tuple(arguments))


def dispatch(commands, context, request, principal=None):
    """Run C{request} (asked by C{principal}, when known) with the command table;
    always returns a L{Reply}.

    @raise AdminError: the command failed (caught by the caller, which replies).
    """
    command = commands.get((request.verb, request.object))
    if command is None:
        known = sorted({c.usage for c in commands.values()})
        raise BadRequest(f"unknown command {request.verb!r} {request.object!r}; "
                         "known: " + "; ".join(known))
    if command.with_principal:
        return command.run(context, list(request.arguments), principal)
    return command.run(context, list(request.arguments))


RELOAD_USAGE = "reload NAME | reload all"


def reload_commands(names):
    """The C{reload} commands: C{reload NAME} for each of C{names} (C{rules}: the
    access control files, S4.5), and C{reload all}. Each re-reads at once and answers
    what happened; a file refused keeps what was in force (the reply says why)."""
    help_ = ("re-read now, and say what happened: " + ", ".join(names) +
             " (all: every one of them)")
    return {("reload", name): Command(RELOAD_USAGE, _reloader(name), help_)
            for name in (*names, "all")}


def _reloader(which):
    def run(context, arguments):
        if arguments:
            raise BadRequest(f"reload takes no arguments; usage: {RELOAD_USAGE}")
        if context.reloadables is None:
            raise NotFoundError("this broker has nothing to reload")
        results = context.reloadables.reload(None if which == "all" else which)
        if not results:
            raise NotFoundError(f"nothing called {which!r} to reload")
        ok = all(result for _, result, _ in results)
        text = "\n".join(f"{name}: {'reloaded' if result else 'REFUSED'}: {what}"
                         for name, result, what in results)
        data = [{"name": name, "ok": result, "text": what}
                for name, result, what in results]
        return Reply(text, data, OK if ok else ERROR)
    return run


def _correlation(message):
    cid = message.message_id if message.message_id is not None else message.correlation_id
    if type(cid) is int and cid >= 0:
        cid = ULong(cid)   # a message-id is a ulong, never a long (Part 3 3.2.4)
    return cid


def reply_message(request_message, reply, message_id=None):
    """The reply to C{request_message} (a L{BrokerMessage}) as a L{BrokerMessage}."""
    body = {"status": reply.status, "text": reply.text}
    if reply.status == OK:
        body["data"] = reply.data
    else:
        body["error"] = reply.text
    cid = _correlation(request_message)
    to = request_message.reply_to
    encoded = build_message(
        body, properties=Properties(message_id=message_id, to=to, correlation_id=cid),
        application_properties={"status": reply.status})
    return BrokerMessage(encoded, to=to, message_id=message_id, correlation_id=cid)


class AdminRequests:
    """The admin service's request handler (S11.1): one per broker.

    @param context: the L{AdminContext} the commands read.
    @param commands: C{(verb, object) -> L{Command}}.
    @param audit: the L{mqgate.security.audit.IAuditTrail} each request is recorded in.
    """

    log = Logger()

    def __init__(self, context, commands, *, audit=NO_AUDIT):
        self.context = context
        self.commands = dict(commands)
        self.audit = audit
        self._ids = itertools.count(1)
        self._relay = None

    def open_producer(self, principal):
        """A producer for one link of C{principal} to L{ADMIN_ADDRESS}."""
        return AdminProducer(self, principal)

    def handle(self, message, principal=None):
        """Answer the request C{message} (a L{BrokerMessage}) on its reply-to.

        @raise ProtocolError: it cannot be answered (no reply-to, or one that names no
            destination); the glue rejects the message with this error.
        """
        self._check_reply_to(message.reply_to)
        user = getattr(principal, "name", None)
        request = "(unreadable request)"
        try:
            request = parse_request(message.payload)
            reply = dispatch(self.commands, self.context, request, principal)
        except AdminError as e:
            reply = Reply(str(e), status=e.status)
        except Exception:
            self.log.failure("admin request {request} from {user} failed",
                             request=printable(str(request)), user=user)
            reply = Reply("the broker failed to carry out the request; see its log",
                          status=ERROR)
        self.log.info("admin request {request} from {user}: {status}",
                      request=printable(str(request)), user=user, status=reply.status)
        # S4.8: one audit record per admin request, whatever became of it.
        self.audit.record("admin", "ok" if reply.status == OK else "failed", user=user,
                          command=str(request), status=reply.status)
        self._send(reply_message(message, reply, f"mqgate-admin-{next(self._ids)}"))

    def _check_reply_to(self, reply_to):
        if not isinstance(reply_to, str) or not reply_to:
            raise ProtocolError("an admin request needs a reply-to address",
                                "amqp:invalid-field")
        broker = self.context.broker
        kind, name = resolve(reply_to, (), broker.config.default_type)
        # Never create a destination for a reply: a requester that has gone away
        # would leave it behind.
        if kind == QUEUE:
            broker.queue(name)
        else:
            broker.topic(name)

    def _send(self, reply):
        if self._relay is None:
            self._relay = self.context.broker.open_producer(None)
        try:
            self._relay.send(reply)
        except NotFound:
            self.log.info("admin reply to {to} dropped: the destination went away",
                          to=reply.to)


class AdminProducer:
    """What the glue's producer link to L{ADMIN_ADDRESS} sends to: each message is a
    request, answered at once (the show commands only read)."""

    __slots__ = ("_requests", "_principal")

    blocked = False
    #: Nothing holds admin requests back: the glue grants its full credit.
    room = None

    def __init__(self, requests, principal):
        self._requests = requests
        self._principal = principal

    def send(self, message):
        self._requests.handle(message, self._principal)

    def when_unblocked(self, callback):
        callback()

    def close(self):
        pass
