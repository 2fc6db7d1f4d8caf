"""
Connection services as Twisted services (S1.1, S1.4, S1.5): each listens on an endpoint
built from a C{serverFromString} description, and says where it really listens.
"""

from twisted.application import service
from twisted.internet import endpoints
from twisted.logger import Logger

__all__ = ["ConnectionService", "endpoint_description"]


def endpoint_description(host, port, backlog=None):
    """The C{serverFromString} text of a TCP listener bound to C{host}:C{port}.

    Another transport (TLS, a UNIX socket) is another description, not another class.
    """
    text = f"tcp:port={int(port)}"
    if host:
        text += ":interface=" + host.replace(":", "\\:")
    if backlog:
        text += f":backlog={int(backlog)}"
    return text


class ConnectionService(service.Service):
    """Listen for one service's connections while running.

    @ivar name: the service name (C{jms}, C{admin}, ...).
    @ivar address: the bound C{IAddress} while listening (dynamic ports resolved).
    """

    log = Logger()

    def __init__(self, name, reactor, description, factory, protocol_name="AMQP"):
        self.setName(name)
        self._reactor = reactor
        self.description = description
        self.factory = factory
        self.protocol_name = protocol_name
        self.address = None
        self._port = None

    def startService(self):
        """Start listening; a failure to bind stops the broker with a message."""
        super().startService()
        endpoint = endpoints.serverFromString(self._reactor, self.description)
        d = endpoint.listen(self.factory)
        d.addCallbacks(self._listening, self._failed)
        return d

    def _listening(self, port):
        self._port = port
        self.address = port.getHost()
        self.log.info("service {name} listening on {host}:{port} ({protocol})",
                      name=self.name, host=self.address.host, port=self.address.port,
                      protocol=self.protocol_name)

    def _failed(self, failure):
        self.log.critical("service {name} cannot listen on {where}: {why}; check the "
                          "port and hostname settings of this service",
                          name=self.name, where=self.description,
                          why=failure.getErrorMessage())
        self._reactor.stop()

    def stopService(self):
        """Close every connection with a close frame, then stop listening."""
        super().stopService()
        self.factory.shutdown()
        if self._port is not None:
            port, self._port = self._port, None
            return port.stopListening()
        return None
