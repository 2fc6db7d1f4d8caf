"""
The broker's live connections by id, for the admin's C{list|query|destroy cxn} (S11.1).

Every socket an engine-driven service accepts (L{mqgate.net.engine.EngineProtocol})
is listed here from C{connectionMade} to C{connectionLost}, logged in or not, under a
short integer id that is never reused while the broker runs. The L{ClientRegistry}
of the egress layer lists only logged-in clients and by name; this one is what an
operator names a connection by, and it knows the protocol object, so that a
connection can be closed in its protocol's words (L{close_by_admin}).

It is the broker's one count of open connections: C{list svc} and C{query bkr} (through
L{mqgate.net.control.BrokerControl}), C{metrics svc}, C{metrics bkr}, Prometheus'
C{mqgate_connections} and the C{numConnections} of C{mq.metrics.broker} (through
L{mqgate.metrics.snapshot}, whose L{MetricsSources} holds this same registry) all read
L{count} or C{len} of it. The engine factories count only totals (connections opened
and closed, bytes read and written); their C{connections} sets are what shutdown,
C{pause svc} and ping walk, not a figure anyone reports.

What a connection is shown as (L{describe}) is read from the protocol, its engine and
its glue when asked: nothing is counted per message for it.
"""

import itertools

from mqgate.amqp import conditions as c
from mqgate.amqp.connection import Connection as AmqpConnection

__all__ = ["ConnectionRegistry", "ADMIN_CLOSE", "close_by_admin", "describe"]

#: What a client whose connection an administrator destroyed is told.
ADMIN_CLOSE = "closed by an administrator"


class ConnectionRegistry:
    """The live connections of every service, by id, in the order they came."""

    def __init__(self):
        self._ids = itertools.count(1)
        self._live = {}

    def __len__(self):
        return len(self._live)

    def __iter__(self):
        return iter(list(self._live.values()))

    def add(self, protocol):
        """List C{protocol}; return its new id."""
        connection_id = next(self._ids)
        self._live[connection_id] = protocol
        return connection_id

    def remove(self, connection_id):
        """Forget a connection (it is gone); an unknown id is ignored."""
        self._live.pop(connection_id, None)

    def get(self, connection_id):
        """The protocol of connection C{connection_id} (an int), or None."""
        return self._live.get(connection_id)

    def of_service(self, name):
        """The connections of service C{name}, in the order they came."""
        return [p for p in self._live.values() if p.factory.service_name == name]

    def count(self, name):
        """How many connections service C{name} has now."""
        return sum(1 for p in self._live.values() if p.factory.service_name == name)


def close_by_admin(protocol, description=ADMIN_CLOSE):
    """Close C{protocol}'s connection in its protocol's words: an AMQP close with
    C{amqp:connection:forced}, a STOMP ERROR frame; both with C{description}.

    What it held unsettled goes back to its queues by the usual path: the glue lets go
    of its consumers once the goodbye is written, and again when the socket goes."""
    engine = protocol.engine
    if engine is None or engine.finished:
        return
    if not engine.ready:
        # Still logging in: the factory knows how to say goodbye at that stage (the
        # AMQP SASL outcome), as it does at shutdown.
        protocol.factory.abandon(engine, "shutdown", description)
    elif isinstance(engine, AmqpConnection):
        engine.abort(c.CONNECTION_FORCED, description)
    else:
        engine.send_error(description, description)
    protocol.flush()


def describe(protocol, now, detail=False):
    """What C{list cxn} (and with C{detail}, C{query cxn}) shows of a connection.

    @param now: the clock's time, for the connection's age.
    """
    glue = protocol.glue
    client = getattr(glue, "client", None)
    principal = getattr(glue, "principal", None)
    row = {
        "id": protocol.connection_id,
        "service": protocol.factory.service_name,
        "protocol": protocol.factory.protocol_label,
        "user": (client.user if client is not None
                 else getattr(principal, "name", None)),
        "host": protocol.peer.rpartition(":")[0],
        "port": _port(protocol.peer),
        "client_id": client.name if client is not None else None,
        "connected_seconds": round(now - protocol.connected_at, 3),
        "state": _state(protocol),
        "messages_out": _delivered(client),
    }
    if detail:
        row.update(glue.flows() if glue is not None else {})
        row["reading_paused"] = protocol.reading_paused
        row["profile"] = client.profile_name if client is not None else None
        row["queued_bytes"] = client.queued_bytes if client is not None else 0
    return row


def _port(peer):
    port = peer.rpartition(":")[2]
    return int(port) if port.isdigit() else None


def _state(protocol):
    engine = protocol.engine
    if engine is None or not engine.ready:
        return "LOGGING_IN"
    if engine.finished:
        return "CLOSING"
    return "PAUSED" if protocol.paused_by_admin else "OPEN"


def _delivered(client):
    """Messages written to the client so far: the egress queues count them anyway."""
    if client is None:
        return 0
    return sum(stats.deliveries for stats in client.scheduler.stats())
