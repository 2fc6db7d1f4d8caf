"""The ``twistd mqgate`` plugin (S0.4). Everything else is in mqgate.tap."""

from twisted.application.service import ServiceMaker

mqgate_service_maker = ServiceMaker(
    "mqgate",
    "mqgate.tap",
    "mqgate message broker and protocol gateway (AMQP 1.0, STOMP)",
    "mqgate",
)
