"""
Connection services as Twisted services (S1.1, S1.4, S1.5): each listens on an endpoint
and says where it really listens; a L{ServiceRegistry} collects what is running for the
port mapper (S1.3).
"""

from twisted.application import service
from twisted.internet import endpoints
from twisted.logger import Logger

from mqgate.net.pool import AcceptPacer
from mqgate.portmap.table import ServiceEntry

__all__ = ["ConnectionService", "ServiceRegistry", "endpoint_description"]


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


class ServiceRegistry:
    """The services running now, in the order they started (the port mapper's table)."""

    def __init__(self):
        self._entries = {}

    def register(self, entry):
        self._entries[entry.name] = entry

    def unregister(self, name):
        self._entries.pop(name, None)

    def entries(self):
        return list(self._entries.values())


class ConnectionService(service.Service):
    """Listen for one service's connections while running.

    @param endpoint: a C{serverFromString} description, or an C{IStreamServerEndpoint}
        (TLS with an encrypted key cannot be described as text).
    @param entry: C{(transport, type)} to publish in the port mapper, or None.
    @ivar address: the bound C{IAddress} while listening (dynamic ports resolved).
    """

    log = Logger()

    def __init__(self, name, reactor, endpoint, factory, protocol_name="AMQP",
                 registry=None, entry=None):
        self.setName(name)
        self._reactor = reactor
        self.endpoint = endpoint
        self.factory = factory
        self.protocol_name = protocol_name
        self.registry = registry
        self.entry = entry
        self.address = None
        self._port = None
        self._pacer = None

    def startService(self):
        """Start listening; a failure to bind stops the broker with a message."""
        super().startService()
        endpoint = self.endpoint
        if isinstance(endpoint, str):
            endpoint = endpoints.serverFromString(self._reactor, endpoint)
        d = endpoint.listen(self.factory)
        d.addCallbacks(self._listening, self._failed)
        return d

    def _listening(self, port):
        self._port = port
        self.address = port.getHost()
        slots = getattr(self.factory, "login_slots", None)
        if slots is not None:
            # S4.2: accept no faster than logins free the service's slots.
            self._pacer = AcceptPacer(slots, self._reactor)
            self._pacer.attach(port)
        if self.registry is not None and self.entry is not None:
            transport, kind = self.entry
            self.registry.register(ServiceEntry(self.name, transport, kind,
                                                self.address.port))
        self.log.info("service {name} listening on {host}:{port} ({protocol})",
                      name=self.name, host=self.address.host, port=self.address.port,
                      protocol=self.protocol_name)

    def _failed(self, failure):
        self.log.critical("service {name} cannot listen on {where}: {why}; check the "
                          "port and hostname settings of this service",
                          name=self.name, where=self.endpoint,
                          why=failure.getErrorMessage())
        self._reactor.stop()

    def stopService(self):
        """Close every connection in its protocol's words, then stop listening."""
        super().stopService()
        if self.registry is not None:
            self.registry.unregister(self.name)
        shutdown = getattr(self.factory, "shutdown", None)
        if shutdown is not None:
            shutdown()
        if self._pacer is not None:
            self._pacer.detach()
            self._pacer = None
        if self._port is not None:
            port, self._port = self._port, None
            return port.stopListening()
        return None
