"""Small helpers for driving the real broker with python-qpid-proton clients (S8.6).

Proton is synchronous: a L{BlockingConnection} or a L{Container} runs its event loop in
the calling thread. These helpers keep every such loop on a deadline, so that a broker
that stops answering fails a test with a message instead of hanging it:

- L{connect} opens a BlockingConnection whose every wait (open, attach, send, receive)
  times out after C{timeout} seconds;
- L{drain} asks the broker for everything a queue holds *now* (a drain flow, Part 2
  section 2.6.7) and returns when the broker says it has sent it all: this is how a test
  checks "nothing more is there" by waiting on an event rather than on the clock;
- L{Scenario} + L{run_container} run an event-driven client in one Container with a
  deadline timer inside the loop;
- L{run_in_threads} runs blocking clients side by side, each in its own thread with its
  own Container (proton objects are never shared between threads);
- L{HoldingConsumer} is a consumer in a child process that takes messages without
  settling them and can be killed with SIGKILL: the abrupt connection loss of
  design rule 3.

The module is also that child process: ``python -m tests.e2e.proton_client hold URL
ADDRESS COUNT``.
"""

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from proton import Data, Delivery, Endpoint, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection

from tests.e2e.broker import REPO_ROOT

__all__ = [
    "DEFAULT_TIMEOUT", "DeadlineExceeded", "Capabilities", "broker_url", "connect",
    "opened", "drain", "receive_all", "fixed_credit_receiver", "take", "Scenario",
    "run_container", "run_in_threads", "HoldingConsumer",
]

#: Every proton wait gives up after this long: the broker is local, so an answer that
#: takes ten seconds on the 2-core CI machine is not coming.
DEFAULT_TIMEOUT = 10.0


class DeadlineExceeded(AssertionError):
    """A client did not finish within its deadline; the message says what it was doing."""


# -- connections --------------------------------------------------------------------------

def broker_url(broker, service="jms", user=None, password=None):
    """The C{amqp://} URL of a L{tests.e2e.broker.BrokerProcess} service.

    @param user: put C{user:password@} into the URL (SASL PLAIN); L{None} for none.
    """
    host, port = broker.address(service)
    credentials = "" if user is None else f"{user}:{password}@"
    return f"amqp://{credentials}{host}:{port}"


def connect(broker, user="admin", password="admin", service="jms",
            timeout=DEFAULT_TIMEOUT, **kwargs):
    """Open a BlockingConnection to C{broker}; every later wait on it has C{timeout}.

    With C{user=None} the client offers no credentials and authenticates with SASL
    ANONYMOUS; otherwise it uses PLAIN with C{user}/C{password} (S4.2).

    @param kwargs: passed to C{Container.connect} (e.g. C{container_id},
        C{max_frame_size}).
    @raise proton.ConnectionException: the broker refused or dropped the connection.
    """
    mechs = "ANONYMOUS" if user is None else "PLAIN"
    kwargs.setdefault("allowed_mechs", mechs)
    return BlockingConnection(broker_url(broker, service, user, password),
                              timeout=timeout, **kwargs)


@contextlib.contextmanager
def opened(broker, **kwargs):
    """L{connect} as a context manager that always closes the connection.

    A close that fails because the broker already dropped us is not the test's
    failure: whatever happened inside the block is.
    """
    conn = connect(broker, **kwargs)
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class Capabilities(LinkOption):
    """Link option putting terminus capabilities (S2.1: C{queue}/C{topic}) on the link.

    On a receiver they go on the source, on a sender on the target: the terminus that
    names the broker's node.
    """

    def __init__(self, *names):
        self.names = [symbol(name) for name in names]

    def apply(self, link):
        terminus = link.source if link.is_receiver else link.target
        terminus.capabilities.put_array(False, Data.SYMBOL)
        terminus.capabilities.enter()
        for name in self.names:
            terminus.capabilities.put_symbol(name)
        terminus.capabilities.exit()


def drain(conn, receiver, limit=10000, timeout=DEFAULT_TIMEOUT):
    """Everything C{receiver}'s source holds now, up to C{limit} messages.

    Grants C{limit} credit with the drain flag; the broker sends what it has and then
    answers with a flow that uses up the rest of the credit, which ends the wait. The
    messages are taken off the receiver (and left unsettled on unsettled links).

    @param receiver: a BlockingReceiver made with the default C{credit=None}, so that no
        prefetch tops the credit up again behind our back.
    @raise proton.Timeout: the broker never completed the drain.
    """
    link = receiver.link
    link.drain(limit)
    # The flow that ends the drain can be read in the same chunk as the last transfers,
    # whose events are not all dispatched yet: wait until the link's queue is empty too.
    conn.wait(lambda: not link.draining() and link.queued == 0, timeout=timeout,
              msg=f"draining {link.name}")
    messages = []
    while receiver.fetcher.has_message:
        messages.append(receiver.fetcher.pop())
    return messages


def receive_all(receiver, count, timeout=DEFAULT_TIMEOUT, settle="accept"):
    """Receive C{count} messages, each within C{timeout}; settle each as C{settle} says.

    @param settle: C{"accept"}, C{"reject"}, C{"release"} (released, not delivered) or
        L{None} to leave them unsettled (or when the link is pre-settled).
    """
    messages = []
    for _ in range(count):
        message = receiver.receive(timeout=timeout)
        if isinstance(message.body, memoryview):
            # Proton's view over its own buffers: later I/O may reuse them (copy first).
            message.body = bytes(message.body)
        messages.append(message)
        if settle == "release":
            receiver.release(delivered=False)
        elif settle is not None:
            getattr(receiver, settle)()
    return messages


def fixed_credit_receiver(conn, address, name, credit, options=None):
    """A plain proton receiver on C{conn} granted C{credit} once, never topped up.

    A BlockingReceiver's fetcher grants credit again as messages arrive; a test that
    must know exactly how much credit the broker saw, or that the broker sends without
    being prompted by any later frame of ours, uses this with L{take}.
    """
    receiver = conn.container.create_receiver(conn.conn, address, name=name,
                                              options=options)
    conn.wait(lambda: receiver.state & Endpoint.REMOTE_ACTIVE,
              msg=f"attaching receiver {name}")
    receiver.flow(credit)
    # Make sure the broker has applied the credit before we return: it answers the
    # attach of a later link only after every frame sent before it.
    conn.create_sender(address, name=f"{name}-barrier").close()
    return receiver


def take(conn, receivers, count, timeout=DEFAULT_TIMEOUT):
    """Wait until C{count} messages arrived over C{receivers}; accept each one.

    @return: C{[(receiver name, Message)]} in arrival order per receiver.
    """
    arrived = []

    def enough():
        for receiver in receivers:
            while receiver.current is not None and not receiver.current.partial:
                delivery = receiver.current
                message = Message()
                message.decode(receiver.recv(delivery.pending))
                receiver.advance()
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()
                arrived.append((receiver.name, message))
        return len(arrived) >= count

    conn.wait(enough, timeout=timeout, msg=f"waiting for {count} messages")
    return arrived


# -- event-driven clients -----------------------------------------------------------------

class Scenario(MessagingHandler):
    """An event-driven client with a deadline, for L{run_container}.

    Subclasses open their connections and links in L{begin}, keep the connections they
    open in C{self.connections} (L{connect_to} does), and call L{finish} when done.
    Transport, connection and link errors are recorded in C{self.errors} and end the
    scenario, so a test sees them instead of a timeout.

    @ivar timeout: seconds until the scenario is abandoned.
    @ivar progress: what the scenario is doing, for the timeout message; subclasses
        update it.
    """

    timeout = 30.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.connections = []
        self.errors = []
        self.finished = False
        self.timed_out = False
        self.progress = "starting"
        self._deadline = None

    def begin(self, container):
        """Open connections and links; called once the container runs."""
        raise NotImplementedError

    def connect_to(self, container, broker, user="admin", password="admin", **kwargs):
        """Open and remember one connection to C{broker}'s jms service."""
        kwargs.setdefault("allowed_mechs", "ANONYMOUS" if user is None else "PLAIN")
        conn = container.connect(broker_url(broker, "jms", user, password), **kwargs)
        self.connections.append(conn)
        return conn

    def on_start(self, event):
        self._deadline = event.container.schedule(self.timeout, _Deadline(self))
        self.begin(event.container)

    def finish(self):
        """Close every connection and cancel the deadline: the container then stops."""
        if self.finished:
            return
        self.finished = True
        if self._deadline is not None:
            self._deadline.cancel()
        for conn in self.connections:
            conn.close()

    def _error(self, what, event, endpoint):
        condition = getattr(endpoint, "remote_condition", None) or \
            getattr(endpoint, "condition", None)
        self.errors.append(f"{what}: {condition}")
        self.finish()

    def on_transport_error(self, event):
        if not self.finished:
            self._error("transport error", event, event.transport)

    def on_connection_error(self, event):
        self._error("connection error", event, event.connection)

    def on_link_error(self, event):
        self._error("link error", event, event.link)


class _Deadline:
    """Timer handler: the scenario ran out of time."""

    def __init__(self, scenario):
        self.scenario = scenario

    def on_timer_task(self, event):
        scenario = self.scenario
        if scenario.finished:
            return
        scenario.timed_out = True
        scenario.finish()
        event.container.stop()


def run_container(scenario):
    """Run C{scenario} in a new Container in this thread until it finishes.

    @return: C{scenario}.
    @raise DeadlineExceeded: the scenario's deadline passed first.
    """
    Container(scenario).run()
    if scenario.timed_out:
        raise DeadlineExceeded(
            f"{type(scenario).__name__} did not finish within {scenario.timeout} s: "
            f"{scenario.progress}; errors: {scenario.errors}")
    return scenario


# -- threads ------------------------------------------------------------------------------

def run_in_threads(functions, timeout=60.0):
    """Run each no-argument function in its own thread; return their results in order.

    Each function must bound its own waits (they use proton with timeouts); C{timeout}
    is the backstop for the whole group. Threads are daemons, so a stuck one cannot keep
    the test process alive.

    @raise DeadlineExceeded: some thread still ran after C{timeout}.
    @raise Exception: the first exception raised by a function, re-raised here.
    """
    results = [None] * len(functions)
    errors = []

    def run(index, function):
        try:
            results[index] = function()
        except BaseException as error:  # re-raised in the test thread below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i, f), daemon=True,
                                name=f"proton-client-{i}")
               for i, f in enumerate(functions)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if errors:
        raise errors[0]
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        raise DeadlineExceeded(f"threads still running after {timeout} s: {stuck}")
    return results


# -- a consumer in a child process, to be killed ------------------------------------------

class HoldingConsumer:
    """A child process that receives C{count} messages, settles none, and waits.

    L{start} returns once the child reports every message it holds; L{kill} then drops
    its connection the hard way (SIGKILL: no detach, no close, just a dead socket).

    @ivar held: C{[(message_id, delivery_count)]} as the child reported them.
    """

    def __init__(self, url, address, count):
        self.url = url
        self.address = address
        self.count = count
        self.held = []
        self._lines = queue.Queue()
        self._process = None

    def start(self, timeout=DEFAULT_TIMEOUT * 3):
        """Spawn the child and wait until it holds C{count} messages.

        @raise DeadlineExceeded: it did not report them all within C{timeout}.
        """
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
                os.pathsep) if p]), PYTHONUNBUFFERED="1")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.proton_client", "hold", self.url,
             self.address, str(self.count)],
            cwd=str(REPO_ROOT), env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True, name="holding-consumer").start()
        deadline = time.monotonic() + timeout
        output = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise DeadlineExceeded(
                    f"holding consumer did not report {self.count} messages within "
                    f"{timeout} s; said: {''.join(output)}") from None
            if line is None:
                raise DeadlineExceeded(f"holding consumer exited: {''.join(output)}")
            output.append(line)
            words = line.split()
            if words[:1] == ["held"]:
                self.held.append((words[1], int(words[2])))
            elif words[:1] == ["holding"]:
                return self

    def _read(self):
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def kill(self):
        """SIGKILL the child and reap it. Safe to call twice."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
        self._process.wait(DEFAULT_TIMEOUT)
        for stream in (self._process.stdin, self._process.stdout):
            with contextlib.suppress(Exception):
                stream.close()


def _hold(url, address, count):
    """Child side of L{HoldingConsumer}: receive, report, never settle, wait for death."""
    conn = BlockingConnection(url, timeout=DEFAULT_TIMEOUT, allowed_mechs="PLAIN")
    receiver = conn.create_receiver(address, credit=count)
    for _ in range(count):
        message = receiver.receive(timeout=DEFAULT_TIMEOUT)
        print("held", message.id, message.delivery_count, flush=True)
    print("holding", flush=True)
    # Wait for SIGKILL (or for the parent to go away, which closes our stdin).
    sys.stdin.read()


def main(argv):
    """``hold URL ADDRESS COUNT``: see L{HoldingConsumer}."""
    if len(argv) != 4 or argv[0] != "hold":
        print("usage: python -m tests.e2e.proton_client hold URL ADDRESS COUNT",
              file=sys.stderr)
        return 2
    _hold(argv[1], argv[2], int(argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

