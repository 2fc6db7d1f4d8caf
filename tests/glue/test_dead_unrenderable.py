"""A message STOMP cannot carry is dead (S2.4, reason UNRENDERABLE): the STOMP glue
gives it to the dead message queue instead of keeping it for ever in its queue.

The real core and STOMP adapter on StringTransports (L{tests.glue.stomp_harness}).
"""

from mqgate.core import BrokerMessage
from mqgate.core.dead import UNRENDERABLE

from tests.core import consume
from tests.glue.stomp_harness import Gateway


def test_a_message_no_frame_can_carry_goes_to_the_dmq(tmp_path):
    """When not even a bare MESSAGE frame can be written, the message leaves its queue
    for mq.sys.dmq with reason UNRENDERABLE; the connection lives on."""
    gateway = Gateway(tmp_path)
    broker = gateway.broker
    seen = []
    broker.set_annotate(lambda payload, annotations, keep: seen.append(annotations)
                        or payload)
    peer = gateway.stomp()
    peer.subscribe("/queue/q", ack="client-individual")

    def broken(*args, **kwargs):
        raise RuntimeError("a frame that cannot be written")

    peer.protocol.glue.engine.write_message = broken
    broker.open_producer("queue://q").send(BrokerMessage(b"x"))
    peer.read()
    assert broker.queue("q").held == 0
    assert [a["x-opt-dead-reason"] for a in seen] == [UNRENDERABLE]
    _, target = consume(broker, "queue://mq.sys.dmq", credit=1)
    assert len(target.deliveries) == 1 and not peer.closed
