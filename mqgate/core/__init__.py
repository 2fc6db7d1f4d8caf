"""
The broker core: messages, addresses, queues, topics, subscriptions, deliveries.

No I/O here (design rule 1): time comes from an injected clock and deliveries
leave through the consumer's target object.
"""

from mqgate.core.addresses import (
    QUEUE, TOPIC, AddressError, NotAllowed, NotFound, resolve, topic_matches)
from mqgate.core.broker import Broker, CoreConfig, Producer
from mqgate.core.deliveries import (
    ACCEPTED, MODIFIED, REJECTED, RELEASED, Consumer, Delivery)
from mqgate.core.message import BrokerMessage

__all__ = [
    "ACCEPTED", "AddressError", "Broker", "BrokerMessage", "Consumer", "CoreConfig",
    "Delivery", "MODIFIED", "NotAllowed", "NotFound", "Producer", "QUEUE", "REJECTED",
    "RELEASED", "TOPIC", "resolve", "topic_matches",
]
