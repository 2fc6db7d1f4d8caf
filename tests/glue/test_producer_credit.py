"""What the AMQP glue grants its producers as credit (S2.7, S11.1)."""

from mqgate.admin.requests import AdminProducer
from mqgate.glue.amqp import AmqpBrokerSession, GlueConfig


class _Glue:
    """Just what L{AmqpBrokerSession._credit_for} reads."""

    config = GlueConfig(producer_credit=100)


def test_an_admin_producer_gets_the_full_credit():
    """S11.1: the admin requests' producer has no room limit, so the glue grants its
    producers' full credit to it as to any unlimited producer."""
    producer = AdminProducer(requests=None, principal=None)
    assert producer.room is None
    assert AmqpBrokerSession._credit_for(_Glue(), producer) == 100
