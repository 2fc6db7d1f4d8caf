"""/api/captures (S7.2, S7.9) against a real twisted.web site in memory and the real
capture commands on a core Broker: the routes, the PUT body, and the 403 of a user
without capture:write."""

from twisted.internet.task import Clock

from mqgate.admin.captures import COMMANDS
from mqgate.admin.requests import AdminContext
from mqgate.core import Broker
from mqgate.core.capture import CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import ProfileTable

from tests.web.test_admin import ADMIN, Audit, FakeAuthenticator, api_site
from tests.web.wire import send


def capture_site(writers=("admin",)):
    broker = Broker(Clock())
    broker.captures = Captures(broker, broker.clock,
                               CaptureConfig(node="n", writers=writers), CountingSink())
    context = AdminContext(broker, ClientRegistry(), ProfileTable())
    return api_site(dict(COMMANDS), FakeAuthenticator(), Audit(), context), broker


def test_put_get_list_delete():
    site, broker = capture_site()
    response = send(site, "PUT", "/api/captures/tap", auth=ADMIN, body={
        "address": "queue://orders", "filter": "JMSPriority > 4",
        "bounds": {"ringSize": 100, "rate": 10}})
    assert response.status == 200, response.body
    data = response.json()
    assert (data["queue"], data["ring_size"], data["rate"], data["filter"]) == (
        "mqgate.capture.n.orders.tap", 100, 10.0, "JMSPriority > 4")
    assert send(site, "GET", "/api/captures/tap", auth=ADMIN).json()["name"] == "tap"
    assert [c["name"] for c in send(site, "GET", "/api/captures", auth=ADMIN).json()] \
        == ["tap"]
    assert send(site, "DELETE", "/api/captures/tap", auth=ADMIN).status == 200
    assert send(site, "GET", "/api/captures/tap", auth=ADMIN).status == 404
    assert len(broker.diverts.table) == 0


def test_without_capture_write_403_names_the_right():
    """S7.9: an admin outside mqgate.capture.writers gets 403 and nothing is made."""
    site, broker = capture_site(writers=("ops",))
    response = send(site, "PUT", "/api/captures/tap", auth=ADMIN,
                    body={"address": "queue://orders"})
    assert response.status == 403
    assert "capture:write" in response.json()["error"]
    assert "mqgate.capture.writers" in response.json()["error"]
    assert list(broker.captures) == []


def test_bad_body_is_a_400():
    site, _ = capture_site()
    response = send(site, "PUT", "/api/captures/tap", auth=ADMIN, body={"adress": "q"})
    assert response.status == 400 and '"address"' in response.json()["error"]
    response = send(site, "PUT", "/api/captures/tap", auth=ADMIN,
                    body={"address": "queue://q", "bounds": {"ringSize": 0}})
    assert response.status == 400 and "ring_size=0" in response.json()["error"]
