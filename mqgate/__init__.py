"""mqgate: a message broker and protocol gateway (AMQP 1.0, STOMP) on Twisted."""

__version__ = "0.1.0"
