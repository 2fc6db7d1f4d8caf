"""Every consumer's target provides what the core and the egress ask of it
(L{mqgate.core.deliveries.IConsumerTarget}, L{mqgate.glue.egress.IEgressTarget}):
the targets the AMQP and STOMP glue and the capture subscriptions really open, on the
real core and adapters (L{tests.glue.stomp_harness}).
"""

import pytest
from zope.interface.verify import verifyObject

from mqgate.amqp.performatives import RECEIVER
from mqgate.core.capture import CaptureBounds, CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink
from mqgate.core.deliveries import IConsumerTarget
from mqgate.glue.egress import IEgressTarget

from tests.core.test_capture import ADMIN
from tests.glue.stomp_harness import Gateway
from tests.net.test_amqp_adapter import attach


@pytest.fixture
def gateway(tmp_path):
    """The gateway, with the targets the glue opens consumers for recorded."""
    gateway = Gateway(tmp_path)
    gateway.targets = []
    broker = gateway.broker
    for name in ("open_consumer", "open_mqlight"):
        opened = getattr(broker, name)

        def recording(where, target, *args, _opened=opened, **kwargs):
            gateway.targets.append(target)
            return _opened(where, target, *args, **kwargs)

        setattr(broker, name, recording)
    return gateway


@pytest.mark.parametrize("address", ["queue://q", "topic://t", "private:sports/#"])
def test_an_amqp_link_is_an_egress_target(gateway, address):
    """A receiving link (on a queue, a topic, an MQ Light subscription) is what its
    consumer hands deliveries to."""
    peer = gateway.opened()
    attach(peer, RECEIVER, address, credit=10)
    (target,) = gateway.targets
    assert verifyObject(IEgressTarget, target)
    assert verifyObject(IConsumerTarget, target)


@pytest.mark.parametrize("destination", ["/queue/q", "/topic/t"])
def test_a_stomp_subscription_is_an_egress_target(gateway, destination):
    gateway.stomp().subscribe(destination)
    (target,) = gateway.targets
    assert verifyObject(IEgressTarget, target)


def test_a_capture_subscription_is_a_consumer_target(gateway):
    captures = Captures(gateway.broker, gateway.clock, CaptureConfig(
        node="n1", bounds=CaptureBounds()), CountingSink())
    sub = captures.install("s1", "queue://orders", requester=ADMIN)
    assert gateway.targets == [sub]
    assert verifyObject(IConsumerTarget, sub)
