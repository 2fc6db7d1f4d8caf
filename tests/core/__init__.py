"""Tests of the broker core, and the small fakes they share."""

from twisted.internet.task import Clock

from mqgate.core import Broker, BrokerMessage, CoreConfig


class RecordingTarget:
    """A consumer's delivery target that records what it is given.

    @ivar deliveries: every delivery handed over, in order.
    @ivar consumer: set by L{attach}; needed for C{settle} and C{on_deliver}.
    @ivar settle: when not C{None}, the outcome to settle each delivery with, from
        inside C{deliver} (re-entrantly, like a glue that settles at once).
    @ivar on_deliver: an optional callable C{(target, delivery)} run after recording.
    """

    def __init__(self, settle=None, on_deliver=None):
        self.deliveries = []
        self.consumer = None
        self.settle = settle
        self.on_deliver = on_deliver

    def deliver(self, delivery):
        self.deliveries.append(delivery)
        if self.settle is not None:
            self.consumer.settle(delivery, self.settle)
        if self.on_deliver is not None:
            self.on_deliver(self, delivery)

    @property
    def payloads(self):
        """The payloads received, in order."""
        return [d.message.payload for d in self.deliveries]

    def settle_all(self, outcome="accepted", **kwargs):
        """Settle every delivery received so far (no-op for already settled ones)."""
        for delivery in list(self.deliveries):
            self.consumer.settle(delivery, outcome, **kwargs)


def make_broker(**config):
    """A broker on a fresh Clock; returns C{(broker, clock)}."""
    clock = Clock()
    return Broker(clock, CoreConfig(**config)), clock


def consume(broker, address, credit=0, **kwargs):
    """Attach a consumer with a L{RecordingTarget}; returns C{(consumer, target)}."""
    settle = kwargs.pop("settle", None)
    target = RecordingTarget(settle=settle)
    consumer = broker.open_consumer(address, target, **kwargs)
    target.consumer = consumer
    if credit:
        consumer.set_credit(credit)
    return consumer, target


def send(broker, address, *payloads, **fields):
    """Send one message per payload through a fresh producer on C{address}."""
    producer = broker.open_producer(address)
    for payload in payloads:
        producer.send(BrokerMessage(payload, **fields))
    producer.close()
