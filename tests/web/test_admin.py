"""The HTTP admin API (S11.2) against a real twisted.web site in memory: each route's
command words checked exactly against a small fake command table, the login (Basic,
401/403/503), the JSON errors, the bounds on bodies, /healthz and /metrics."""

import pytest
from twisted.internet import defer
from twisted.logger import capturedLogs, formatEvent

from mqgate.admin.requests import (
    AdminContext, AdminError, AdminRequests, BadRequest, Command, NotFoundError, Reply,
    reload_commands)
from mqgate.admin.show import COMMANDS as SHOW_COMMANDS
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable
from mqgate.security.auth import AuthenticationFailed, Principal
from mqgate.security.guard import LoginBusy
from mqgate.web.admin import AdminApi
from mqgate.web.site import make_site
from tests.web.wire import basic, exchange, send, Response

ADMIN = basic("admin", "secret")

#: The agreed command words (common ground of the operations work), by (verb, object).
VERBS = [("list", "dst"), ("query", "dst"), ("create", "dst"), ("update", "dst"),
         ("destroy", "dst"), ("purge", "dst"), ("pause", "dst"), ("resume", "dst"),
         ("list", "dur"), ("destroy", "dur"), ("purge", "dur"), ("list", "svc"),
         ("query", "svc"), ("list", "cxn"), ("query", "cxn"), ("destroy", "cxn"),
         ("query", "bkr"), ("show", "client"), ("show", "client-profile"),
         ("reload", "all"), ("reload", "rules")]


class FakeAuthenticator:
    """admin/secret (group admin) and alice/pw (group user); 'busy' is refused as busy."""

    def __init__(self):
        self.calls = []

    def authenticate(self, username, password, source=None, service=None):
        self.calls.append((username, source, service))
        if username == "busy":
            return defer.fail(LoginBusy(username))
        users = {"admin": ("secret", {"admin"}), "alice": ("pw", {"user"})}
        if username in users and users[username][0] == password:
            return defer.succeed(Principal(username, users[username][1]))
        return defer.fail(AuthenticationFailed(username, "wrong password"))


class Audit:
    def __init__(self):
        self.records = []

    def record(self, kind, outcome, **fields):
        self.records.append((kind, outcome, fields))


class Recorder:
    """A command table that answers every agreed command with the words it got."""

    def __init__(self):
        self.words = []
        self.answers = {}   # (verb, object) -> Reply or exception, for one test

    def table(self):
        return {key: Command(" ".join(key), self._runner(key)) for key in VERBS}

    def _runner(self, key):
        def run(context, arguments):
            words = [*key, *arguments]
            self.words.append(words)
            answer = self.answers.get(key)
            if isinstance(answer, Exception):
                raise answer
            return answer or Reply("done", {"words": words})
        return run


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def audit():
    return Audit()


@pytest.fixture
def authenticator():
    return FakeAuthenticator()


def api_site(commands, authenticator, audit, context=None, health=lambda: (True, None),
             max_body=1024):
    context = context or AdminContext(None, ClientRegistry(), ProfileTable())
    api = AdminApi(AdminRequests(context, commands), authenticator, audit=audit,
                   health=health)
    return make_site(api.resource(), max_body=max_body)


@pytest.fixture
def site(recorder, authenticator, audit):
    return api_site(recorder.table(), authenticator, audit)


ROUTES = [
    ("GET", "/api/broker", None, ["query", "bkr"]),
    ("GET", "/api/services", None, ["list", "svc"]),
    ("GET", "/api/services/jms", None, ["query", "svc", "-n", "jms"]),
    ("GET", "/api/destinations", None, ["list", "dst"]),
    ("GET", "/api/destinations?type=queue", None, ["list", "dst", "-t", "q"]),
    ("GET", "/api/destinations?type=t", None, ["list", "dst", "-t", "t"]),
    ("GET", "/api/destinations/queue/orders", None,
     ["query", "dst", "-t", "q", "-n", "orders"]),
    ("DELETE", "/api/destinations/topic/prices.eu", None,
     ["destroy", "dst", "-t", "t", "-n", "prices.eu"]),
    ("POST", "/api/destinations/queue/orders/purge", None,
     ["purge", "dst", "-t", "q", "-n", "orders"]),
    ("POST", "/api/destinations/queue/orders/pause", None,
     ["pause", "dst", "-t", "q", "-n", "orders"]),
    ("POST", "/api/destinations/queue/orders/pause", {"what": "PRODUCERS"},
     ["pause", "dst", "-t", "q", "-n", "orders", "-pst", "PRODUCERS"]),
    ("POST", "/api/destinations/topic/t1/resume", None,
     ["resume", "dst", "-t", "t", "-n", "t1"]),
    ("GET", "/api/connections", None, ["list", "cxn"]),
    ("GET", "/api/connections?service=jms", None, ["list", "cxn", "-svn", "jms"]),
    ("GET", "/api/connections/1234", None, ["query", "cxn", "-n", "1234"]),
    ("DELETE", "/api/connections/1234", None, ["destroy", "cxn", "-n", "1234"]),
    ("GET", "/api/durables", None, ["list", "dur"]),
    ("GET", "/api/durables?topic=prices", None, ["list", "dur", "-d", "prices"]),
    ("DELETE", "/api/durables/client-1/sub1", None,
     ["destroy", "dur", "-n", "sub1", "-c", "client-1"]),
    ("POST", "/api/durables/client-1/sub1/purge", None,
     ["purge", "dur", "-n", "sub1", "-c", "client-1"]),
    ("GET", "/api/clients", None, ["show", "client", "*", "stats", "queue"]),
    ("GET", "/api/clients/alice", None, ["show", "client", "alice", "stats", "queue"]),
    ("GET", "/api/client-profiles", None, ["show", "client-profile", "*"]),
    ("GET", "/api/client-profiles/gold", None, ["show", "client-profile", "gold"]),
    ("POST", "/api/reload", None, ["reload", "all"]),
    ("POST", "/api/reload/rules", None, ["reload", "rules"]),
    # URL-quoted names: a slash, a dot, a space and a non-ASCII letter stay in the name.
    ("GET", "/api/destinations/queue/a%2Fb.c", None,
     ["query", "dst", "-t", "q", "-n", "a/b.c"]),
    ("POST", "/api/destinations/queue/x%2Fpurge/purge", None,
     ["purge", "dst", "-t", "q", "-n", "x/purge"]),
    ("DELETE", "/api/durables/a%2Fb/s%20%C3%A9", None,
     ["destroy", "dur", "-n", "s \u00e9", "-c", "a/b"]),
    ("GET", "/api/services/%2A", None, ["query", "svc", "-n", "*"]),
]


@pytest.mark.parametrize("method, path, body, words", ROUTES)
def test_route_runs_exactly_its_command(site, recorder, method, path, body, words):
    """Each route runs exactly the agreed command words and answers their data."""
    response = send(site, method, path, body=body, auth=ADMIN)
    assert recorder.words == [words]
    assert response.status == 200, response.body
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.json() == {"words": words}


def test_put_creates_a_missing_destination_with_its_properties(site, recorder):
    """PUT of a destination that does not exist creates it with -o for each property."""
    recorder.answers[("query", "dst")] = NotFoundError("no queue orders")
    response = send(site, "PUT", "/api/destinations/queue/orders",
                    body={"maxNumMsgs": 1000, "limitBehavior": "REJECT_NEWEST",
                          "useDMQ": False}, auth=ADMIN)
    assert response.status == 200
    assert recorder.words == [
        ["query", "dst", "-t", "q", "-n", "orders"],
        ["create", "dst", "-t", "q", "-n", "orders", "-o", "maxNumMsgs=1000",
         "-o", "limitBehavior=REJECT_NEWEST", "-o", "useDMQ=false"]]


def test_put_updates_an_existing_destination(site, recorder):
    """PUT of an existing destination updates it; an empty object changes nothing."""
    send(site, "PUT", "/api/destinations/topic/t", body={"maxNumMsgs": 5}, auth=ADMIN)
    assert recorder.words[-1] == ["update", "dst", "-t", "t", "-n", "t", "-o",
                                  "maxNumMsgs=5"]
    recorder.words.clear()
    response = send(site, "PUT", "/api/destinations/topic/t", body={}, auth=ADMIN)
    assert response.status == 200
    assert recorder.words == [["query", "dst", "-t", "t", "-n", "t"]]


@pytest.mark.parametrize("body, why", [
    (b"{not json", "not JSON"), (b"[1, 2]", "JSON object"),
    (b'{"a": {"b": 1}}', "property 'a'"), (b"", "takes a JSON object")])
def test_put_with_a_bad_body_is_a_400(site, recorder, body, why):
    """A PUT body that is not a JSON object of plain values is refused with 400."""
    response = send(site, "PUT", "/api/destinations/queue/q", body=body, auth=ADMIN)
    assert response.status == 400
    assert why in response.json()["error"]
    assert response.json()["status"] == 400
    assert recorder.words == []


def test_pause_with_a_bad_body_is_a_400(site, recorder):
    """A pause body other than {"what": ...}, a JSON null included, is refused before
    any command runs (no body at all pauses everything)."""
    for body in ({"who": "x"}, b"null", b'"CONSUMERS"'):
        response = send(site, "POST", "/api/destinations/queue/q/pause",
                        body=body, auth=ADMIN)
        assert response.status == 400
    assert recorder.words == []


def test_reply_status_and_error_come_from_the_command(site, recorder):
    """A command's 404 or 400 is the HTTP status, its message the JSON error."""
    recorder.answers[("query", "dst")] = NotFoundError("no queue nosuch")
    response = send(site, "GET", "/api/destinations/queue/nosuch", auth=ADMIN)
    assert response.status == 404
    assert response.json() == {"error": "no queue nosuch", "status": 404}
    recorder.answers[("purge", "dst")] = BadRequest("no -t")
    assert send(site, "POST", "/api/destinations/queue/x/purge", auth=ADMIN).status == 400


def test_a_missing_command_answers_what_dispatch_answers(authenticator, audit):
    """A route whose command is not in the table is a 400 naming the unknown command."""
    site = api_site(dict(SHOW_COMMANDS), authenticator, audit)
    response = send(site, "GET", "/api/broker", auth=ADMIN)
    assert response.status == 400
    assert "unknown command 'query' 'bkr'" in response.json()["error"]


def test_a_failing_command_is_a_500_without_details(site, recorder):
    """A command that raises something unexpected is a 500 that points at the log."""
    recorder.answers[("query", "bkr")] = ZeroDivisionError("secret detail")
    response = send(site, "GET", "/api/broker", auth=ADMIN)
    assert response.status == 500
    assert "see its log" in response.json()["error"]
    assert "secret" not in response.body.decode()


def test_a_command_returning_a_deferred_is_waited_for(authenticator, audit):
    """A command may answer with a Deferred; the response waits for it."""
    pending = defer.Deferred()
    table = {("query", "bkr"): Command("query bkr", lambda c, a: pending)}
    site = api_site(table, authenticator, audit)
    transport, _ = exchange(site, b"GET /api/broker HTTP/1.1\r\nHost: x\r\n"
                            b"Authorization: " + ADMIN.encode() + b"\r\n\r\n")
    assert transport.value() == b""
    pending.callback(Reply("up", {"state": "RUNNING"}))
    assert Response(transport.value()).json() == {"state": "RUNNING"}


def test_no_credentials_is_a_401_with_a_challenge(site, recorder):
    """A request without Basic credentials gets 401 and a WWW-Authenticate header."""
    response = send(site, "GET", "/api/broker")
    assert response.status == 401
    assert response.headers["www-authenticate"].startswith('Basic realm="mqgate admin"')
    assert response.json()["status"] == 401
    assert recorder.words == []


@pytest.mark.parametrize("auth", [basic("admin", "wrong"), basic("nobody", "x"),
                                  "Basic !!!notbase64", "Bearer abc", "Basic " +
                                  "bm9jb2xvbg=="])
def test_wrong_or_unreadable_credentials_are_a_401(site, recorder, auth):
    """A wrong password, an unknown user or an unreadable header: 401, no command."""
    response = send(site, "GET", "/api/broker", auth=auth)
    assert response.status == 401
    assert "www-authenticate" in response.headers
    assert recorder.words == []


def test_login_goes_to_the_authenticator_with_address_and_service(site, authenticator):
    """The login is checked with the client's address and the service's name, which
    the login guard throttles and the audit records by."""
    send(site, "GET", "/api/broker", auth=basic("admin", "wrong"))
    assert authenticator.calls == [("admin", "127.0.0.1", "httpadmin")]


def test_a_user_outside_the_admin_group_is_a_403(site, recorder):
    """A user who logs in but is not in the admin group gets 403 and runs nothing."""
    response = send(site, "GET", "/api/broker", auth=basic("alice", "pw"))
    assert response.status == 403
    assert "admin group" in response.json()["error"]
    assert recorder.words == []


def test_a_busy_login_guard_is_a_503(site):
    """A login refused for load is a 503 with Retry-After, not a wrong password."""
    response = send(site, "GET", "/api/broker", auth=basic("busy", "x"))
    assert response.status == 503
    assert response.headers["retry-after"] == "1"


def test_no_cookie_is_ever_set(site):
    """The API keeps no session: no response sets a cookie."""
    for auth in (ADMIN, None):
        response = send(site, "GET", "/api/broker", auth=auth)
        assert "set-cookie" not in response.headers


def test_each_change_is_audited_as_an_admin_request(site, audit, recorder):
    """Every command that changes something is one audit record of kind admin, with
    user and status."""
    send(site, "POST", "/api/destinations/queue/orders/purge", auth=ADMIN)
    recorder.answers[("destroy", "cxn")] = AdminError("broken")
    send(site, "DELETE", "/api/connections/12", auth=ADMIN)
    assert audit.records == [
        ("admin", "ok", {"user": "admin", "address": "127.0.0.1",
                         "service": "httpadmin",
                         "command": "purge dst -t q -n orders", "status": 200}),
        ("admin", "failed", {"user": "admin", "address": "127.0.0.1",
                             "service": "httpadmin", "command": "destroy cxn -n 12",
                             "status": 500})]


def test_reads_are_not_audited(site, audit, recorder):
    """A read changes nothing: a console polling the API leaves no audit records."""
    for _ in range(3):
        assert send(site, "GET", "/api/services/jms", auth=ADMIN).status == 200
    recorder.answers[("query", "bkr")] = AdminError("broken")
    assert send(site, "GET", "/api/broker", auth=ADMIN).status == 500
    assert len(recorder.words) == 4
    assert audit.records == []


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/api/nothing", 404), ("GET", "/", 404),
    ("GET", "/api/destinations/queue", 404),
    ("GET", "/api/destinations/queue/a/b", 404),
    ("POST", "/api/destinations/queue/a/explode", 404),
    ("POST", "/api/durables/c/n/other", 404),
    ("PATCH", "/api/broker", 405), ("DELETE", "/api/broker", 405),
    ("POST", "/api/destinations", 405)])
def test_unknown_resources_and_methods_answer_json(site, recorder, method, path, status):
    """An unknown path is a JSON 404, a method a route does not take a JSON 405."""
    response = send(site, method, path, auth=ADMIN)
    assert response.status == status
    assert response.json()["status"] == status
    assert recorder.words == []


def test_a_405_names_the_allowed_methods(site):
    """A wrong method's answer lists the methods the resource takes."""
    response = send(site, "PUT", "/api/broker", auth=ADMIN)
    assert response.headers["allow"] == "GET, HEAD"


def test_a_bad_destination_type_or_query_is_a_400(site, recorder):
    """A type other than queue/topic, or an unknown query parameter, is a 400; the
    type's message speaks the URL's words."""
    response = send(site, "GET", "/api/destinations/table/x", auth=ADMIN)
    assert response.status == 400
    assert response.json()["error"] == "destination type 'table': use queue or topic"
    response = send(site, "GET", "/api/destinations?kind=queue", auth=ADMIN)
    assert response.status == 400
    assert "unknown query parameter 'kind'" in response.json()["error"]
    assert send(site, "GET", "/api/destinations?type=q&type=t", auth=ADMIN).status == 400
    assert recorder.words == []


def test_a_path_that_is_not_utf8_is_a_json_400_without_a_traceback(site, recorder):
    """%FF in a name: a JSON 400 saying the path must be UTF-8, and no error logged."""
    with capturedLogs() as events:
        response = send(site, "GET", "/api/destinations/queue/%FF", auth=ADMIN)
    assert response.status == 400
    assert "URL-quoted UTF-8" in response.json()["error"]
    assert [e for e in events if e.get("log_failure") is not None] == []
    assert recorder.words == []


def test_control_characters_of_a_name_are_escaped_in_the_log(site, recorder):
    """A name with a carriage return and an escape sequence reaches the command as
    it is, but the log line shows them escaped: it cannot forge a line."""
    with capturedLogs() as events:
        send(site, "GET", "/api/destinations/queue/x%0Dforged%1B%5B2J", auth=ADMIN)
    assert recorder.words == [["query", "dst", "-t", "q", "-n", "x\rforged\x1b[2J"]]
    [line] = [formatEvent(e) for e in events if "over HTTP" in formatEvent(e)]
    assert "x\\rforged\\x1b[2J" in line
    assert line.isprintable()


@pytest.mark.parametrize("quoted, name", [
    ("a%2F%2Fb", "a//b"), ("%2Fa", "/a"), ("a%2F", "a/"), ("a%2F..%2Fb", "a/../b"), ("%2F..%2F", "/../")])
def test_slashes_quoted_in_a_name_stay_as_they_are(site, recorder, quoted, name):
    """Quoted slashes, doubled, leading or trailing, are the name's own: the command
    gets them unchanged, with no redirect to a path with fewer slashes."""
    response = send(site, "GET", f"/api/destinations/queue/{quoted}", auth=ADMIN)
    assert response.status == 200
    assert recorder.words == [["query", "dst", "-t", "q", "-n", name]]


@pytest.mark.parametrize("method, path, words", [
    ("GET", "/api/services/%2Fx", ["query", "svc", "-n", "/x"]),
    ("GET", "/api/clients/%2Fapp%2F1", ["show", "client", "/app/1", "stats", "queue"]),
    ("DELETE", "/api/durables/%2Fapp/sub", ["destroy", "dur", "-n", "sub", "-c", "/app"]),
    ("GET", "/api/connections/%2F7", ["query", "cxn", "-n", "/7"])])
def test_a_name_starting_with_a_quoted_slash_is_not_redirected(site, recorder, method,
                                                               path, words):
    """A client id or other name that starts with a slash reaches its command as it
    is, not a redirect to the name without it (another client's, perhaps)."""
    response = send(site, method, path, auth=ADMIN)
    assert response.status == 200, response.body
    assert recorder.words == [words]


def test_clients_is_an_empty_list_when_none_is_connected(authenticator, audit):
    """GET /api/clients with no client connected: 200 and [] (the real show command)."""
    site = api_site(dict(SHOW_COMMANDS), authenticator, audit)
    response = send(site, "GET", "/api/clients", auth=ADMIN)
    assert response.status == 200
    assert response.json() == []
    assert send(site, "GET", "/api/clients/ghost", auth=ADMIN).status == 404


def test_profiles_come_from_the_real_show_command(authenticator, audit):
    """GET /api/client-profiles/default answers the show command's data."""
    site = api_site(dict(SHOW_COMMANDS), authenticator, audit)
    response = send(site, "GET", "/api/client-profiles/default", auth=ADMIN)
    assert response.status == 200
    assert response.json()[0]["name"] == "default"


def test_reload_refused_is_a_500_with_its_data(authenticator, audit):
    """A reload whose file is refused answers 500, with what happened as data."""
    class Reloadables:
        def reload(self, which):
            return [("rules", False, "line 3: bad rule")]
    context = AdminContext(None, ClientRegistry(), ProfileTable(), Reloadables())
    site = api_site(reload_commands(["rules"]), authenticator, audit, context=context)
    response = send(site, "POST", "/api/reload/rules", auth=ADMIN)
    assert response.status == 500
    assert response.json()["data"] == [{"name": "rules", "ok": False,
                                        "text": "line 3: bad rule"}]


def test_healthz_needs_no_login(authenticator, audit):
    """/healthz answers 200 ok without credentials, 503 with why when unhealthy."""
    site = api_site({}, authenticator, audit)
    response = send(site, "GET", "/healthz")
    assert (response.status, response.json()) == (200, {"status": "ok"})
    sick = api_site({}, authenticator, audit,
                    health=lambda: (False, "the message store is failing"))
    response = send(sick, "GET", "/healthz")
    assert response.status == 503
    assert response.json()["error"] == "the message store is failing"
    assert authenticator.calls == []


def test_metrics_is_a_404_until_the_broker_has_an_exposition(site):
    """/metrics needs a login, and is a JSON 404 while no exposition is set."""
    assert send(site, "GET", "/metrics").status == 401
    response = send(site, "GET", "/metrics", auth=ADMIN)
    assert response.status == 404
    assert "no metrics" in response.json()["error"]


def test_metrics_serves_the_exposition(authenticator, audit):
    """With an exposition set on the context, /metrics answers its bytes and type."""
    context = AdminContext(None, ClientRegistry(), ProfileTable())
    context.metrics_exposition = lambda: (b"mqgate_up 1\n",
                                          "text/plain; version=0.0.4; charset=utf-8")
    site = api_site({}, authenticator, audit, context=context)
    response = send(site, "GET", "/metrics", auth=ADMIN)
    assert response.status == 200
    assert response.body == b"mqgate_up 1\n"
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_a_body_over_the_bound_is_a_413_before_it_is_read(site, recorder):
    """A Content-Length over the bound is refused with 413 and the connection closed,
    without waiting for the body."""
    transport, _ = exchange(site, b"PUT /api/destinations/queue/q HTTP/1.1\r\n"
                            b"Host: x\r\nContent-Length: 100000000\r\n"
                            b"Authorization: " + ADMIN.encode() + b"\r\n\r\n{")
    response = Response(transport.value())
    assert response.status == 413
    assert response.json()["status"] == 413
    assert transport.disconnecting
    assert recorder.words == []


def test_a_chunked_body_over_the_bound_is_a_413(site, recorder):
    """A chunked body is counted as it comes; past the bound it is refused."""
    chunk = b"x" * 600
    transport, protocol = exchange(
        site, b"PUT /api/destinations/queue/q HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\nAuthorization: " + ADMIN.encode() + b"\r\n\r\n")
    for _ in range(2):
        protocol.dataReceived(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    assert Response(transport.value()).status == 413
    assert transport.disconnecting
    assert recorder.words == []
