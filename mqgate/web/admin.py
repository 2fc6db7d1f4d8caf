# -*- test-case-name: tests.web.test_admin -*-
"""
The HTTP admin API (S11.2): JSON resources over the admin commands, on Klein.

A thin adapter: each route builds the command words of the admin command table (the
words `mqgate cmd` sends, L{mqgate.admin.requests}) and runs them with
L{mqgate.admin.requests.dispatch}, with the same context and table as the admin
service. The HTTP status is the reply's status; the body is the reply's data as JSON,
or C{{"error": "why", "status": N}}.

    GET    /api/broker                             query bkr
    GET    /api/services                           list svc
    GET    /api/services/NAME                      query svc -n NAME
    GET    /api/destinations[?type=queue|topic]    list dst [-t q|t]
    GET    /api/destinations?offset=&limit=&filter=[&type=]
                                                   one page, filtered by name, with
                                                   rates (L{mqgate.admin.pages})
    GET    /api/destinations/TYPE/NAME             query dst -t q|t -n NAME
    PUT    /api/destinations/TYPE/NAME  {props}    create dst ... -o p=v... (or update
                                                   dst ..., when it exists)
    DELETE /api/destinations/TYPE/NAME             destroy dst -t q|t -n NAME
    POST   /api/destinations/TYPE/NAME/purge       purge dst -t q|t -n NAME
    POST   /api/destinations/TYPE/NAME/pause       pause dst ... [-pst WHAT]
           {"what": "PRODUCERS"|"CONSUMERS"|"ALL"}
    POST   /api/destinations/TYPE/NAME/resume      resume dst -t q|t -n NAME
    GET    /api/connections[?service=NAME]         list cxn [-svn NAME]
    GET    /api/connections/ID                     query cxn -n ID
    DELETE /api/connections/ID                     destroy cxn -n ID
    GET    /api/durables[?topic=NAME]              list dur [-d NAME]
    DELETE /api/durables/CLIENTID/NAME             destroy dur -n NAME -c CLIENTID
    POST   /api/durables/CLIENTID/NAME/purge       purge dur -n NAME -c CLIENTID
    GET    /api/clients                            show client * stats queue
    GET    /api/clients/NAME                       show client NAME stats queue
    GET    /api/client-profiles                    show client-profile *
    GET    /api/client-profiles/NAME               show client-profile NAME
    POST   /api/reload[/NAME]                      reload all | reload NAME
    GET    /api/overview                           the broker's figures, egress
                                                   queues, memory state, load factor
    GET    /api/stream/metrics[?interval=SECONDS]  the same with message rates, one
                                                   JSON line every interval (NDJSON)
    GET    /console/...                            the web console's files (no login:
                                                   they hold no data; L{console})
    GET    /api/capture/...                        the capture views (S7.6), served by
                                                   L{mqgate.web.capture} once logged in
    GET    /metrics                                Prometheus text (when the broker
                                                   has an exposition)
    GET    /healthz                                200 running, 503 not (no login)

Names are URL-quoted path segments: a queue C{a/b.c} is C{/api/destinations/queue/
a%2Fb.c}. They are read from the raw path, one segment each, so that a quoted slash
stays in its name (Klein's own matching sees the path unquoted).

Every request but C{/healthz} logs in with HTTP Basic against the broker's
authenticator, as a client of the service (the login guard's throttling and the audit
of logins apply), and must be allowed on it as an ADMIN service (the admin group, or
the access control rules): 401 with a C{WWW-Authenticate} challenge for no or wrong
credentials, 403 for a user who may not. There are no cookies and no sessions, so
no cross-site request can borrow a login. Each command that changes something is
audited (kind C{admin}); reads are not, so that a console or a script polling the API
does not bury the changes in the trail (the login of each request is audited as the
broker's audit trail says: L{mqgate.security.audit.AuditingAuthenticator}).
"""

import base64
import binascii
import json
from urllib.parse import unquote_to_bytes

from klein import Klein
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource
from werkzeug.routing import PathConverter

from mqgate.admin.options import destination_type
from mqgate.admin.pages import (
    LatestReading, OverviewRates, RateBook, destination_page, overview, page_arguments)
from mqgate.admin.requests import (
    NOT_FOUND, OK, AdminError, AdminRequest, BadRequest, Reply, dispatch)
from mqgate.errors import printable
from mqgate.security.audit import NO_AUDIT
from mqgate.security.auth import AuthenticationFailed
from mqgate.security.guard import LoginBusy
from mqgate.web.console import console_resource
from mqgate.web.ndjson import stream_readings
from mqgate.web.site import json_answer, json_error

__all__ = ["AdminApi", "HttpError", "basic_credentials", "broker_health"]

#: The challenge of a 401 (RFC 7617; the charset says how the password is encoded).
CHALLENGE = b'Basic realm="mqgate admin", charset="UTF-8"'
_TYPE_WORDS = {"queue": "q", "topic": "t"}
_DESTINATION_ACTIONS = ("purge", "pause", "resume")
_READS = (b"GET", b"HEAD")
_EMPTY = object()   # a request without a body, told apart from a JSON null
_PAGE_ARGUMENTS = ("type", "offset", "limit", "filter")
#: A live stream's interval, seconds: the default, and the bounds a client may ask.
STREAM_INTERVAL = 1.0
_STREAM_INTERVALS = (0.5, 60.0)
#: A live stream ends after this many seconds; the console opens the next at once.
STREAM_MAX_SECONDS = 600.0


class HttpError(Exception):
    """An answer other than the command's: C{status} and the error message."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status = status
        self.headers = tuple(headers)


def basic_credentials(request):
    """C{(user, password)} of the request's HTTP Basic C{Authorization}, or None when
    it has none or one that cannot be read (not Basic, not base64, no colon, not
    UTF-8)."""
    header = request.getHeader(b"authorization")
    if header is None:
        return None
    scheme, _, encoded = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        return None
    return user, password


class _Rest(PathConverter):
    """The rest of a path, whatever its first character: a name read from the raw
    path may start with a quoted slash (a client id C{/app}), which Klein sees
    unquoted, and werkzeug's C{path} would not match it but answer a redirect to the
    path with the slash merged away, another name's."""

    regex = ".+?"
    part_isolating = False   # werkzeug would guess True: the regex names no slash


class _Call:
    """One API request on its way: who, from where, and the command it became."""

    __slots__ = ("request", "principal", "peer", "command")

    def __init__(self, request, peer):
        self.request = request
        self.peer = peer
        self.principal = None
        self.command = None


class AdminApi:
    """The admin API's Klein app over one admin request handler.

    @param requests: the admin service's L{mqgate.admin.requests.AdminRequests}: its
        command table and context are the ones used here.
    @param authenticator: the broker's L{mqgate.security.auth.IAuthenticator} (the
        login guard and cache, audited).
    @param access: the service's L{mqgate.security.access_control.ServiceAccess}, or
        None (then only the admin group may use the API).
    @param service: the service's name (C{httpadmin}), for the login rules and audit.
    @param health: C{() -> (ok, why)} for C{/healthz}.
    @param capture: the resource of the capture views (L{mqgate.web.capture}), or
        None when the broker keeps no capture index.
    @param clock: an C{IReactorTime} for the rates and the live streams (the
        reactor when not given).
    """

    app = Klein()
    # Before the routes: they use it, and a doubled slash is part of a name here.
    app.url_map.converters["rest"] = _Rest
    app.url_map.merge_slashes = False
    log = Logger()

    def __init__(self, requests, authenticator, *, access=None, service="httpadmin",
                 audit=NO_AUDIT, health=lambda: (True, None), capture=None, clock=None):
        if clock is None:
            from twisted.internet import reactor as clock
        self._clock = clock
        self._rates = RateBook()
        self._console = console_resource()
        self._requests = requests
        self._overview = LatestReading(lambda: overview(requests.context))
        self._capture = capture
        self._authenticator = authenticator
        self._access = access
        self._service = service
        self._audit = audit
        self._health = health

    def resource(self):
        """The twisted.web resource to serve."""
        return _Utf8Only(self.app.resource())

    # -- the routes -------------------------------------------------------------------

    @app.route("/api/broker", methods=["GET"])
    def broker(self, request):
        return self._admin(request, lambda call: self._run(call, "query", "bkr"))

    @app.route("/api/services", methods=["GET"])
    def services(self, request):
        return self._admin(request, lambda call: self._run(call, "list", "svc"))

    @app.route("/api/services/<rest:_name>", methods=["GET"])
    def service(self, request, _name):
        def run(call):
            (name,) = _names(request, 1)
            return self._run(call, "query", "svc", "-n", name)
        return self._admin(request, run)

    @app.route("/api/destinations", methods=["GET"])
    def destinations(self, request):
        def run(call):
            args = _query(request, _PAGE_ARGUMENTS)
            if set(args) - {"type"}:
                return self._page(call, args)
            kind = args.get("type")
            words = [] if kind is None else ["-t", _type_word(kind)]
            return self._run(call, "list", "dst", *words)
        return self._admin(request, run)

    @app.route("/api/overview", methods=["GET"])
    def overview(self, request):
        def run(call):
            call.command = "overview"
            return Reply("overview", overview(self._requests.context))
        return self._admin(request, run)

    @app.route("/api/stream/metrics", methods=["GET"])
    def metrics_stream(self, request):
        call = _Call(request, _peer(request))
        d = self._login(call)
        d.addCallback(lambda _: self._metrics_stream(call))
        d.addErrback(self._failed, request)
        return d

    @app.route("/console", methods=["GET"])
    def console_root(self, request):
        request.redirect(b"/console/")
        return b""

    @app.route("/console/", methods=["GET"], branch=True)
    def console(self, request):
        return self._console

    @app.route("/api/destinations/<rest:_rest>",
               methods=["GET", "PUT", "DELETE", "POST"])
    def destination(self, request, _rest):
        return self._admin(request, lambda call: self._destination(call, request))

    @app.route("/api/connections", methods=["GET"])
    def connections(self, request):
        def run(call):
            service = _query(request, ("service",)).get("service")
            words = [] if service is None else ["-svn", service]
            return self._run(call, "list", "cxn", *words)
        return self._admin(request, run)

    @app.route("/api/connections/<rest:_id>", methods=["GET", "DELETE"])
    def connection(self, request, _id):
        def run(call):
            (cid,) = _names(request, 1)
            verb = "query" if request.method == b"GET" else "destroy"
            return self._run(call, verb, "cxn", "-n", cid)
        return self._admin(request, run)

    @app.route("/api/durables", methods=["GET"])
    def durables(self, request):
        def run(call):
            topic = _query(request, ("topic",)).get("topic")
            words = [] if topic is None else ["-d", topic]
            return self._run(call, "list", "dur", *words)
        return self._admin(request, run)

    @app.route("/api/durables/<rest:_rest>", methods=["DELETE", "POST"])
    def durable(self, request, _rest):
        def run(call):
            if request.method == b"DELETE":
                client_id, name = _names(request, 2)
                verb = "destroy"
            else:
                client_id, name, action = _names(request, 3)
                if action != "purge":
                    raise _no_resource(request)
                verb = "purge"
            return self._run(call, verb, "dur", "-n", name, "-c", client_id)
        return self._admin(request, run)

    @app.route("/api/clients", methods=["GET"])
    def clients(self, request):
        def run(call):
            d = self._run(call, "show", "client", "*", "stats", "queue")
            # A pattern that matches nobody is a 404 to the command; a list is empty.
            return d.addCallback(lambda reply: Reply(reply.text, [])
                                 if reply.status == NOT_FOUND else reply)
        return self._admin(request, run)

    @app.route("/api/clients/<rest:_name>", methods=["GET"])
    def client(self, request, _name):
        def run(call):
            (name,) = _names(request, 1)
            return self._run(call, "show", "client", name, "stats", "queue")
        return self._admin(request, run)

    @app.route("/api/client-profiles", methods=["GET"])
    def profiles(self, request):
        return self._admin(request, lambda call: self._run(
            call, "show", "client-profile", "*"))

    @app.route("/api/client-profiles/<rest:_name>", methods=["GET"])
    def profile(self, request, _name):
        def run(call):
            (name,) = _names(request, 1)
            return self._run(call, "show", "client-profile", name)
        return self._admin(request, run)

    @app.route("/api/captures", methods=["GET"])
    def captures(self, request):
        return self._admin(request, lambda call: self._run(call, "list", "capture"))

    @app.route("/api/captures/<rest:_name>", methods=["GET", "PUT", "DELETE"])
    def capture(self, request, _name):
        # PUT installs (a body {"address": ..., "filter": ..., "bounds": {...}});
        # installing and removing need capture:write, else 403 (S7.9).
        def run(call):
            (name,) = _names(request, 1)
            if request.method == b"GET":
                return self._run(call, "query", "capture", "-n", name)
            if request.method == b"DELETE":
                return self._run(call, "destroy", "capture", "-n", name)
            return self._run(call, "create", "capture", "-n", name,
                             *_capture_words(_json_body(request)))
        return self._admin(request, run)

    @app.route("/api/reload", methods=["POST"])
    def reload_all(self, request):
        return self._admin(request, lambda call: self._run(call, "reload", "all"))

    @app.route("/api/reload/<rest:_name>", methods=["POST"])
    def reload(self, request, _name):
        def run(call):
            (name,) = _names(request, 1)
            return self._run(call, "reload", name)
        return self._admin(request, run)

    @app.route("/api/capture/<rest:_rest>", methods=["GET", "POST", "PUT", "DELETE"])
    def capture_views(self, request, _rest):
        # Logged in here, answered there: reading captured messages reads production
        # data, so it is audited like a command.
        call = _Call(request, _peer(request))
        d = self._login(call)
        d.addCallback(lambda _: self._capture_view(call))
        d.addErrback(self._failed, request)
        return d

    def _capture_view(self, call):
        if self._capture is None:
            raise HttpError(NOT_FOUND, "this broker keeps no capture index "
                                       "(mqgate.capture.index.enabled=false)")
        user = call.principal.name
        command = _describe(call.request)
        self.log.info("capture view {request} over HTTP from {user}",
                      request=command, user=user)
        self._audit.record("admin", "ok", user=user, address=call.peer,
                           service=self._service, command=command, status=OK)
        return self._capture

    @app.route("/metrics", methods=["GET"])
    def metrics(self, request):
        d = self._login(_Call(request, _peer(request)))
        d.addCallback(lambda _: self._exposition(request))
        d.addErrback(self._failed, request)
        return d

    @app.route("/healthz", methods=["GET"])
    def healthz(self, request):
        ok, why = self._health()
        if ok:
            return json_answer(request, OK, {"status": "ok"})
        return json_answer(request, 503, {"status": "unavailable", "error": why})

    @app.handle_errors
    def routing_error(self, request, failure):
        # Klein's routing raises werkzeug's HTTP errors: no route (404), or a route
        # without this method (405, with the methods it takes). JSON like the rest.
        error = failure.value
        status = getattr(error, "code", None)
        if not isinstance(status, int):
            self.log.failure("HTTP admin request {request} failed", failure,
                             request=_describe(request))
            return json_error(request, 500, "the broker failed to answer; see its log")
        methods = getattr(error, "valid_methods", None)
        if status == 405 and methods:
            request.setHeader(b"allow", ", ".join(sorted(methods)).encode("ascii"))
        if status == 404:
            return json_error(request, 404, str(_no_resource(request)))
        return json_error(request, status, getattr(error, "description", None) or
                          "the request cannot be answered")

    # -- the console's reads ----------------------------------------------------------

    def _page(self, call, args):
        """One page of destinations (L{mqgate.admin.pages}), as a command's reply."""
        kind, text, offset, limit = page_arguments(args)
        call.command = f"page dst offset={offset} limit={limit}"
        if kind is not None:
            kind = "queue" if _type_word(kind) == "q" else "topic"
        page = destination_page(self._requests.context.broker, self._rates,
                                self._clock.seconds(), kind=kind, text=text,
                                offset=offset, limit=limit)
        return defer.succeed(Reply("page", page))

    def _metrics_stream(self, call):
        request = call.request
        try:
            interval = _interval(_query(request, ("interval",)).get("interval"))
        except AdminError as e:
            raise HttpError(e.status, str(e)) from None
        self.log.info("metrics stream over HTTP for {user} from {peer}",
                      user=call.principal.name, peer=call.peer)
        readings = OverviewRates(self._overview)
        d = stream_readings(request, self._clock, readings.reading, interval,
                            STREAM_MAX_SECONDS)
        return d.addErrback(self._stream_failed, request)

    def _stream_failed(self, failure, request):
        if failure.check(defer.CancelledError):
            return b""
        self.log.failure("the metrics stream over HTTP failed", failure)
        return b""

    # -- destinations -----------------------------------------------------------------

    def _destination(self, call, request):
        method = request.method
        if method == b"POST":
            kind, name, action = _names(request, 3)
            if action not in _DESTINATION_ACTIONS:
                raise _no_resource(request)
        else:
            kind, name = _names(request, 2)
        target = ["-t", _type_word(kind), "-n", name]
        if method == b"GET":
            return self._run(call, "query", "dst", *target)
        if method == b"DELETE":
            return self._run(call, "destroy", "dst", *target)
        if method == b"PUT":
            options = [word for prop in _properties(_json_body(request))
                       for word in ("-o", prop)]
            return self._put_destination(call, target, options)
        if action == "pause":
            what = _pause_target(_json_body(request, required=False, empty=_EMPTY))
            return self._run(call, "pause", "dst", *target,
                             *(() if what is None else ("-pst", what)))
        return self._run(call, action, "dst", *target)

    def _put_destination(self, call, target, options):
        """Create the destination, or update it when it exists (PUT is idempotent)."""
        def created_or_updated(reply):
            if reply.status == NOT_FOUND:
                return self._run(call, "create", "dst", *target, *options)
            if reply.status == OK and options:
                return self._run(call, "update", "dst", *target, *options)
            return reply   # it exists and nothing changes, or the query failed
        return self._run(call, "query", "dst", *target).addCallback(created_or_updated)

    # -- running a command --------------------------------------------------------------

    def _run(self, call, *words):
        """Run one command: a Deferred firing with its L{Reply}, errors included."""
        command = AdminRequest(words[0], words[1], tuple(words[2:]))
        call.command = str(command)
        d = defer.maybeDeferred(dispatch, self._requests.commands,
                                self._requests.context, command, call.principal)
        return d.addErrback(self._error_reply, call)

    def _error_reply(self, failure, call):
        if failure.check(AdminError):
            return Reply(str(failure.value), status=failure.value.status)
        self.log.failure("admin request {request} over HTTP failed", failure,
                         request=printable(call.command))
        return Reply("the broker failed to carry out the request; see its log",
                     status=500)

    def _admin(self, request, run):
        """Log in, then C{run(call) -> Deferred[Reply]}, then answer and audit."""
        call = _Call(request, _peer(request))
        d = self._login(call)
        d.addCallback(lambda _: run(call))
        d.addErrback(_refusal_reply)
        d.addCallback(self._answer, call)
        d.addErrback(self._failed, request)
        return d

    def _answer(self, reply, call):
        user = call.principal.name
        command = call.command or _describe(call.request)
        if call.request.method in _READS:
            # A read changes nothing: no audit record, and the log line is a debug
            # one, or a console polling every few seconds would fill both.
            self.log.debug("admin read {request} over HTTP from {user}: {status}",
                           request=printable(command), user=user, status=reply.status)
        else:
            self.log.info("admin request {request} over HTTP from {user}: {status}",
                          request=printable(command), user=user, status=reply.status)
            self._audit.record("admin", "ok" if reply.status == OK else "failed",
                               user=user, address=call.peer, service=self._service,
                               command=command, status=reply.status)
        if reply.status == OK:
            return json_answer(call.request, OK, reply.data if reply.data is not None
                               else {"text": reply.text})
        body = {"error": reply.text, "status": reply.status}
        if reply.data is not None:
            body["data"] = reply.data
        return json_answer(call.request, reply.status, body)

    def _failed(self, failure, request):
        if failure.check(HttpError):
            error = failure.value
            for name, value in error.headers:
                request.setHeader(name, value)
            return json_error(request, error.status, str(error))
        self.log.failure("HTTP admin request {request} failed", failure,
                         request=_describe(request))
        return json_error(request, 500, "the broker failed to answer; see its log")

    def _exposition(self, request):
        exposition = getattr(self._requests.context, "metrics_exposition", None)
        if exposition is None:
            raise HttpError(NOT_FOUND, "this broker has no metrics to expose")

        def write(result):
            body, content_type = result
            request.setResponseCode(OK)
            request.setHeader(b"content-type", _bytes(content_type))
            request.setHeader(b"cache-control", b"no-store")
            return body
        return defer.maybeDeferred(exposition).addCallback(write)

    # -- logging in ---------------------------------------------------------------------

    def _login(self, call):
        """A Deferred firing when the request's user may use the API; failing with
        L{HttpError} (401, 403, 503) otherwise."""
        credentials = basic_credentials(call.request)
        if credentials is None:
            return defer.fail(HttpError(
                401, "log in with HTTP Basic as a user of the admin group",
                [(b"www-authenticate", CHALLENGE)]))
        user, password = credentials
        d = self._authenticator.authenticate(user, password, call.peer, self._service)
        return d.addCallbacks(self._admitted, self._not_authenticated,
                              callbackArgs=(call,))

    def _admitted(self, principal, call):
        call.principal = principal
        if self._access is not None:
            denied = self._access.check_connection(principal, call.peer)
            why = None if denied is None else denied.description
        elif "admin" not in principal.groups:
            why = (f"user {principal.name} may not use the {self._service} service: "
                   "it is for the admin group")
        else:
            why = None
        if why is not None:
            raise HttpError(403, why)
        return principal

    def _not_authenticated(self, failure):
        error = failure.value
        if isinstance(error, LoginBusy):
            raise HttpError(503, str(error), [(b"retry-after", b"1")])
        if isinstance(error, AuthenticationFailed):
            raise HttpError(401, str(error), [(b"www-authenticate", CHALLENGE)])
        return failure


class _Utf8Only(Resource):
    """The API's resource behind a check that the path and host are UTF-8.

    Klein answers a request whose unquoted path is not UTF-8 (C{%FF}) with a plain
    text 400 and logs a traceback for it: any stranger could fill the log with them.
    Here it is a JSON 400 like every other refusal, and nothing is logged."""

    isLeaf = True

    def __init__(self, inner):
        super().__init__()
        self._inner = inner

    def render(self, request):
        try:
            b"/".join(request.prepath + request.postpath).decode("utf-8")
            request.getRequestHostname().decode("utf-8")
        except UnicodeDecodeError:
            return json_error(request, 400, "the path and host of a request are"
                              " URL-quoted UTF-8")
        return self._inner.render(request)


def _refusal_reply(failure):
    """A request the words could not be made of (a bad body, a bad query) is answered
    like a command that refused it; anything else goes on down the errbacks."""
    failure.trap(AdminError)
    return Reply(str(failure.value), status=failure.value.status)


def broker_health(top):
    """C{/healthz}'s check of a L{mqgate.service.BrokerService}: C{() -> (ok, why)}.

    Healthy while the broker runs (it stops being so as soon as a shutdown begins) and
    its message store can write (a failing or broken store is unhealthy, S3.6)."""
    def health():
        if not top.running:
            return False, "the broker is not running"
        persistence = getattr(top.broker, "persistence", None)
        status = persistence.store_status() if persistence is not None else None
        if status is not None and status["state"] != "healthy":
            why = status.get("reason") or "see the broker's log"
            return False, f"the message store is {status['state']}: {why}"
        return True, None
    return health


# -- reading requests ---------------------------------------------------------------------


def _peer(request):
    address = request.getClientAddress()
    return getattr(address, "host", None)


def _describe(request):
    return printable(f"{request.method.decode('ascii', 'replace')} "
                      f"{request.path.decode('ascii', 'replace')}")


def _no_resource(request):
    return HttpError(NOT_FOUND, f"no such resource: {_describe(request)}")


def _names(request, count):
    """The last C{count} segments of the request's path after the resource's
    (C{/api/KIND/...}), unquoted one by one so that C{%2F} stays in its name.

    @raise HttpError: 404 when the path has another number of segments.
    """
    segments = request.path.split(b"/")[3:]
    if len(segments) != count or not all(segments):
        raise _no_resource(request)
    try:
        return [unquote_to_bytes(segment).decode("utf-8") for segment in segments]
    except UnicodeDecodeError:
        raise BadRequest("a name in the path is not URL-quoted UTF-8") from None


def _query(request, allowed):
    """The query parameters, each given once, all of them in C{allowed}."""
    found = {}
    for key, values in request.args.items():
        name = key.decode("utf-8", "replace")
        if name not in allowed:
            raise BadRequest(f"unknown query parameter {name!r}; this resource takes: "
                             + ", ".join(allowed))
        if len(values) != 1:
            raise BadRequest(f"query parameter {name!r} given more than once")
        try:
            found[name] = values[0].decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"query parameter {name!r} is not UTF-8") from None
    return found


def _interval(text):
    """A live stream's interval in seconds, from its query parameter (or None)."""
    if text is None:
        return STREAM_INTERVAL
    low, high = _STREAM_INTERVALS
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise BadRequest(f"interval={text}: give seconds from {low:g} to {high:g}")
    return value


def _type_word(kind):
    """The C{-t} word of a type in a path or a query, in the URL's words if wrong."""
    try:
        return _TYPE_WORDS[destination_type(kind)]
    except BadRequest:
        raise BadRequest(f"destination type {kind!r}: use queue or topic") from None


def _json_body(request, required=True, empty=None):
    """The request's JSON body; C{empty} when it has none and need not."""
    raw = request.content.getvalue() if request.content is not None else b""
    if not raw.strip():
        if required:
            raise BadRequest("this request takes a JSON object as its body")
        return empty
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequest(f"the request body is not JSON: {e}") from None


def _properties(body):
    """A JSON object of destination properties as C{name=value} words (C{-o})."""
    if not isinstance(body, dict):
        raise BadRequest('the body is a JSON object of properties, such as '
                         '{"maxNumMsgs": 1000, "limitBehavior": "REJECT_NEWEST"}')
    pairs = []
    for name, value in body.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            value = str(value)
        else:
            raise BadRequest(f"property {name!r}: a string, a number or true/false")
        pairs.append(f"{name}={value}")
    return pairs


def _capture_words(body):
    """The words of C{create capture} from a PUT body."""
    if not isinstance(body, dict) or not isinstance(body.get("address"), str) \
            or set(body) - {"address", "filter", "bounds"}:
        raise BadRequest('the body is a JSON object such as {"address": "queue://orders",'
                         ' "filter": "JMSPriority > 4", "bounds": {"ringSize": 1000}}'
                         ' (filter and bounds optional)')
    words = ["-d", body["address"]]
    selector = body.get("filter")
    if selector is not None:
        if not isinstance(selector, str):
            raise BadRequest("filter: a selector, as a string")
        words += ["-s", selector]
    bounds = body.get("bounds")
    if bounds is not None:
        words += [word for prop in _properties(bounds) for word in ("-o", prop)]
    return words


def _pause_target(body):
    # No body pauses ALL; a JSON null is not "no body" but a mistake.
    if body is _EMPTY:
        return None
    what = body.get("what") if isinstance(body, dict) else None
    if not isinstance(what, str) or set(body) - {"what"}:
        raise BadRequest('the body of a pause is empty or {"what": "PRODUCERS"}, '
                         '"CONSUMERS" or "ALL"')
    return what


# -- writing answers ----------------------------------------------------------------------


def _bytes(value):
    return value if isinstance(value, bytes) else value.encode("ascii")


