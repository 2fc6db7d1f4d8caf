"""Producer flow control through the real broker (S2.3, S2.7, design rule 4).

A broker started with ``maxNumMsgs=100`` and a producer credit of 20: a Proton producer
with no consumer on its queue runs out of credit after about 100 messages, and gets
more only once a consumer drains the queue. Nothing is lost on the way.
"""

from proton import Message
from proton.reactor import AtMostOnce

from tests.e2e.proton_client import Scenario, run_container

TOTAL = 1000
LIMIT = 100
CREDIT = 20
ADDRESS = "queue://flow-control"
#: How long the producer's credit must stay at zero for the test to call it stalled.
QUIET = 1.0


class StalledProducer(Scenario):
    """Send TOTAL pre-settled messages as fast as credit allows; when the credit stays at
    zero for QUIET seconds, note how many went and start a consumer; finish when the
    consumer has every message."""

    timeout = 30.0

    def __init__(self, broker):
        super().__init__(auto_accept=True, prefetch=50)
        self.broker = broker
        self.sent = 0
        self.sent_when_stalled = None
        self.bodies = []
        self.sender = None
        self._container = None
        self._check = None

    def begin(self, container):
        self._container = container
        conn = self.connect_to(container, self.broker)
        self.sender = container.create_sender(conn, ADDRESS, options=AtMostOnce())
        self.progress = "sending"

    def on_sendable(self, event):
        if event.sender != self.sender:
            return
        while self.sender.credit > 0 and self.sent < TOTAL:
            self.sender.send(Message(body=self.sent))
            self.sent += 1
        if self.sent_when_stalled is None and self._check is None:
            self._check = self._container.schedule(QUIET, _StallCheck(self, self.sent))

    def stall_checked(self, sent_then):
        self._check = None
        if self.sent_when_stalled is not None or self.finished:
            return
        self.progress = f"sending: {self.sent} sent, credit {self.sender.credit}"
        if self.sent == sent_then and self.sender.credit == 0:
            self.sent_when_stalled = self.sent
            self.progress = f"stalled after {self.sent}; draining"
            self._container.create_receiver(self.connections[0], ADDRESS)
        else:
            self._check = self._container.schedule(QUIET, _StallCheck(self, self.sent))

    def on_message(self, event):
        self.bodies.append(event.message.body)
        self.progress = f"received {len(self.bodies)} (sent {self.sent})"
        if len(self.bodies) == TOTAL:
            self.finish()


class _StallCheck:
    """Timer handler: has the producer sent anything since?"""

    def __init__(self, scenario, sent):
        self.scenario = scenario
        self.sent = sent

    def on_timer_task(self, event):
        self.scenario.stall_checked(self.sent)


def test_full_queue_stalls_producer_until_drained(broker_factory):
    """S2.7: with no consumer, a producer stops getting credit once the queue holds
    maxNumMsgs (overshooting by at most its credit); a consumer draining the queue
    lets it finish, and all 1,000 messages arrive exactly once, in order."""
    broker = broker_factory({"mqgate.autocreate.destination.maxNumMsgs": str(LIMIT),
                             "mqgate.amqp.producer_credit": str(CREDIT)})
    scenario = run_container(StalledProducer(broker))
    assert scenario.errors == []
    assert LIMIT <= scenario.sent_when_stalled <= LIMIT + CREDIT, scenario.sent_when_stalled
    assert scenario.bodies == list(range(TOTAL))
