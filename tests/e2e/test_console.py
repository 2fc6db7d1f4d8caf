"""The web console in a real browser: Debian's Chromium, headless, driven by
Playwright, against a real `twistd -n mqgate` broker, with stomp.py clients making the
traffic an operator would watch.

One broker and one browser serve the whole module; each test uses names of its own.
Every wait is Playwright's wait for the page to show something, with a deadline. A
failing test leaves a screenshot of the page in test-output/console/ (its path is
printed).

Chromium and Playwright are found or the module is skipped, except under `make test`
(MQGATE_REQUIRE_CHROMIUM=1), which installs Chromium and fails here if it is missing.
"""

import os
import shutil

import pytest

from tests.e2e.broker import REPO_ROOT
from tests.e2e.stomp_client import clients, unique as _unique

pytestmark = pytest.mark.e2e

#: Where Debian's chromium package puts the browser (Playwright's own download does
#: not work on the CI machines).
CHROMIUM = os.environ.get("MQGATE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = REPO_ROOT / "test-output" / "console"
#: Milliseconds the page may take to show what a test waits for (a loaded 2-core CI
#: machine; the console polls every 2-3 s).
WAIT = 15_000


def _playwright():
    required = (os.environ.get("MQGATE_REQUIRE_CHROMIUM") == "1"
                or bool(os.environ.get("CI")))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "playwright is not installed (pip install -e '.[test]')"
    else:
        if os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM):
            return sync_playwright
        why = f"{CHROMIUM} is missing (make browser installs Debian's chromium)"
    if required:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    return module_broker_factory(listening=("jms", "stomp", "httpadmin"))


@pytest.fixture(scope="module")
def browser():
    sync_playwright = _playwright()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def console_url(broker):
    return f"http://127.0.0.1:{broker.port('httpadmin')}/console/"


@pytest.fixture(scope="module")
def logged_in(browser, console_url):
    """One page of the console, logged in as admin, for the module's tests."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.script_errors = []
    page.on("pageerror", lambda error: page.script_errors.append(str(error)))
    page.goto(console_url)
    log_in(page, "admin", "admin")
    page.get_by_text("logged in as admin").wait_for(timeout=WAIT)
    yield page
    page.close()


@pytest.fixture
def page(logged_in, request):
    """The logged-in page; a screenshot of it when the test fails."""
    yield logged_in
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}.png"
        logged_in.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the console: {path}")
    errors, logged_in.script_errors[:] = list(logged_in.script_errors), []
    assert errors == [], "the console's scripts failed"


def unique(prefix):
    """A destination or client name of this run's own, valid for create dst (no
    hyphens)."""
    return _unique(prefix).replace("-", "_")


def log_in(page, user, password):
    page.get_by_label("User").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def go(page, name):
    page.get_by_role("link", name=name).click()


def stomp(broker):
    return ("127.0.0.1", broker.port("stomp"))


def destination_row(page, name):
    return page.locator(f'#dst-table tr[data-name="{name}"]')


def test_a_wrong_password_is_refused_and_no_data_shown(browser, console_url):
    """The console asks for the API's login; a wrong password is told as such, and no
    page of data shows."""
    from playwright.sync_api import expect
    page = browser.new_page()
    try:
        page.goto(console_url)
        log_in(page, "admin", "not-the-password")
        expect(page.locator("#login-error")).to_have_text("Wrong user or password.",
                                                          timeout=WAIT)
        expect(page.locator("#page-overview")).to_be_hidden()
        log_in(page, "guest", "guest")
        expect(page.locator("#login-error")).to_contain_text("may not use the console",
                                                             timeout=WAIT)
    finally:
        page.close()


def test_overview_shows_live_figures_and_memory_state(page, broker):
    """The overview streams the broker's figures: the held count follows messages
    sent, with the memory state and the load factor beside it."""
    from playwright.sync_api import expect
    go(page, "Overview")
    figures = page.locator("#figures")
    expect(figures).to_contain_text("Memory state", timeout=WAIT)
    expect(figures).to_contain_text("GREEN")
    expect(figures).to_contain_text("Egress load factor")
    queue = unique("console.overview")
    held = page.locator(".figure", has_text="Messages held").locator(".value")
    before = int(held.inner_text(timeout=WAIT))
    with clients() as open_client:
        producer = open_client(stomp(broker))
        for n in range(4):
            producer.send(f"/queue/{queue}", f"m{n}")
    expect(held).to_have_text(str(before + 4), timeout=WAIT)
    expect(page.locator("#stream-state")).to_have_text("live")


def test_destination_depth_follows_sends_and_purge(page, broker):
    """Create a queue in the console, send to it, watch its depth change, purge it."""
    from playwright.sync_api import expect
    go(page, "Destinations")
    queue = unique("console.depth")
    form = page.locator("#dst-create")
    form.get_by_label("Name").fill(queue)
    form.get_by_role("button", name="Create").click()
    expect(page.locator("#notice")).to_have_text(f"created queue {queue}", timeout=WAIT)
    page.locator("#dst-filter").fill(queue)
    row = destination_row(page, queue)
    expect(row.locator(".depth")).to_have_text("0", timeout=WAIT)
    with clients() as open_client:
        producer = open_client(stomp(broker))
        for n in range(3):
            producer.send(f"/queue/{queue}", f"m{n}")
        expect(row.locator(".depth")).to_have_text("3", timeout=WAIT)
        # Purge asks first; the question outlasts the table's redraw (the new depth).
        row.get_by_role("button", name="Purge").click()
        producer.send(f"/queue/{queue}", "m3")
        expect(row.locator(".depth")).to_have_text("4", timeout=WAIT)
    row.get_by_role("button", name="Really purge?").click()
    expect(row.locator(".depth")).to_have_text("0", timeout=WAIT)
    expect(page.locator("#notice")).to_have_text(f"purged queue {queue}")


def test_filter_and_pages_are_the_servers(page, broker):
    """Sixty queues of one prefix: the filter finds them, fifty to a page, and the
    next page has the other ten."""
    from playwright.sync_api import expect
    prefix = unique("console.many")
    with clients() as open_client:
        producer = open_client(stomp(broker))
        for n in range(60):
            producer.send(f"/queue/{prefix}.{n:02d}", "x", receipt=(n == 59))
    go(page, "Destinations")
    page.locator("#dst-filter").fill(prefix)
    expect(page.locator("#dst-range")).to_have_text("1–50 of 60", timeout=WAIT)
    expect(page.locator("#dst-table tbody tr")).to_have_count(50)
    page.get_by_role("button", name="Next →").click()
    expect(page.locator("#dst-range")).to_have_text("51–60 of 60", timeout=WAIT)
    expect(destination_row(page, f"{prefix}.59")).to_be_visible()
    page.locator("#dst-filter").fill(f"{prefix}.nothing")
    expect(page.locator("#dst-table tbody")).to_contain_text("no destination's name",
                                                             timeout=WAIT)


def test_pause_and_resume_a_topic_with_its_rate(page, broker):
    """A topic with a subscriber shows its message rate; pause and resume change its
    state."""
    from playwright.sync_api import expect
    topic = unique("console.topic")
    with clients() as open_client:
        consumer = open_client(stomp(broker))
        consumer.subscribe(f"/topic/{topic}")
        producer = open_client(stomp(broker))
        go(page, "Destinations")
        page.locator("#dst-filter").fill(topic)
        row = destination_row(page, topic)
        expect(row).to_be_visible(timeout=WAIT)
        for n in range(20):
            producer.send(f"/topic/{topic}", f"m{n}")
        # The rate of the readings around the sends: not zero for one of them.
        expect(row.locator("td").nth(6)).not_to_have_text("-", timeout=WAIT)
        row.get_by_role("button", name="Pause").click()
        expect(row.locator("td").nth(2)).to_have_text("PAUSED", timeout=WAIT)
        row.get_by_role("button", name="Resume").click()
        expect(row.locator("td").nth(2)).to_have_text("RUNNING", timeout=WAIT)


def test_disconnect_a_client_and_destroy_its_durable(page, broker):
    """A STOMP client with a durable subscription shows on the connections and the
    durables pages; Disconnect closes its connection, Destroy removes the durable."""
    from playwright.sync_api import expect
    client_id = unique("console-app")
    topic = unique("console.durable")
    with clients() as open_client:
        client = open_client(stomp(broker), **{"client-id": client_id})
        client.subscribe(f"/topic/{topic}", **{"activemq.subscriptionName": "audit"})
        go(page, "Connections")
        row = page.locator("#cxn-table tr", has_text=client_id)
        expect(row).to_be_visible(timeout=WAIT)
        expect(page.locator("#client-table")).to_contain_text(client_id)
        row.get_by_role("button", name="Disconnect").click()
        row.get_by_role("button", name="Really disconnect?").click()
        client.collector.wait_for(lambda: client.collector.disconnected,
                                  "the broker closing the connection")
        expect(row).to_have_count(0, timeout=WAIT)
    go(page, "Durable subscriptions")
    durable = page.locator("#dur-table tr", has_text=client_id)
    expect(durable).to_contain_text("audit", timeout=WAIT)
    durable.get_by_role("button", name="Destroy").click()
    durable.get_by_role("button", name="Really destroy?").click()
    expect(durable).to_have_count(0, timeout=WAIT)


def test_capture_install_tail_trace_and_remove(page, broker):
    """Install captures on a service's address and its replies' in the console; the
    live tail shows a request and its reply as they are sent; the trace view pairs
    them with a latency; removing the captures takes them off the list."""
    from playwright.sync_api import expect
    from proton import Message
    from tests.e2e.proton_client import opened
    service, replies = unique("console_svc"), unique("console_replies")
    request_id = f"{service}-request"
    go(page, "Capture")
    form = page.locator("#cap-install")
    for address in (service, replies):
        form.get_by_label("Name").fill(f"cap_{address}")
        form.get_by_label("Address").fill(address)
        form.get_by_role("button", name="Install").click()
        expect(page.locator("#notice")).to_have_text(
            f"installed the capture cap_{address} of {address}", timeout=WAIT)
        expect(page.locator(f'#cap-table tr[data-name="cap_{address}"]')).to_be_visible(
            timeout=WAIT)
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#tail-state")).to_have_text("live", timeout=WAIT)
    with opened(broker) as connection:
        connection.create_sender(service).send(
            Message(id=request_id, reply_to=replies, body=f"ping {service}"))
        connection.create_sender(replies).send(
            Message(correlation_id=request_id, body=f"pong {service}"))
    tail = page.locator("#tail-table tbody")
    expect(tail).to_contain_text(f"ping {service}", timeout=WAIT)
    expect(tail).to_contain_text(f"pong {service}", timeout=WAIT)
    page.get_by_role("button", name="Stop").click()

    traces = page.locator("#cap-traces")
    traces.get_by_label("Address").fill(service)
    traces.get_by_role("button", name="Trace").click()
    pair = page.locator("#trace-table tr.answered", has_text=request_id)
    expect(pair).to_contain_text(replies, timeout=WAIT)
    expect(pair.locator("td").last).to_contain_text(" ms")

    for address in (service, replies):
        row = page.locator(f'#cap-table tr[data-name="cap_{address}"]')
        row.get_by_role("button", name="Remove").click()
        row.get_by_role("button", name="Really remove?").click()
        expect(row).to_have_count(0, timeout=WAIT)
