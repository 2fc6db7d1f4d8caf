"""
Connection services as Twisted services (S1.1, S1.4, S1.5): each listens on an endpoint
and says where it really listens; a L{ServiceRegistry} collects what is running for the
port mapper (S1.3). A service can be paused by an administrator (S11.1): it accepts no
new sockets and reads none of its connections until it is resumed.
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
    @param details: what C{query svc} shows of its settings (bind address, threads ...).
    @ivar address: the bound C{IAddress} while listening (dynamic ports resolved).
    @ivar paused: whether an administrator paused it (L{pause}).
    """

    log = Logger()

    def __init__(self, name, reactor, endpoint, factory, protocol_name="AMQP",
                 registry=None, entry=None, details=None):
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
        self.details = dict(details or {})
        self.paused = False
        self._held_read = None   # the port's own doRead while paused (see pause)

    @property
    def kind(self):
        """C{NORMAL}, C{ADMIN} or C{PORTMAPPER}: the type the port mapper shows."""
        return self.entry[1] if self.entry is not None else "NORMAL"

    @property
    def state(self):
        if not self.running:
            return "STOPPED"
        return "PAUSED" if self.paused else "RUNNING"

    def engine_factories(self):
        """The engine factories behind the port (one per protocol; the sniffer's)."""
        inner = getattr(self.factory, "inner_factories", None)
        factories = inner() if inner is not None else [self.factory]
        return [f for f in factories if hasattr(f, "connections")]

    def pause(self):
        """Accept no new sockets and read none of the connections (S11.1): new clients
        wait in the kernel's listen queue, unanswered, until L{resume}."""
        if self.paused:
            return
        self.paused = True
        for factory in self.engine_factories():
            factory.paused_by_admin = True
            for protocol in list(factory.connections):
                protocol.pause_by_admin()
        self._stop_accepting()

    def resume(self):
        """Undo L{pause}: read the connections again and accept new ones."""
        if not self.paused:
            return
        self.paused = False
        for factory in self.engine_factories():
            factory.paused_by_admin = False
            for protocol in list(factory.connections):
                protocol.resume_by_admin()
        self._start_accepting()

    def _stop_accepting(self):
        port = self._port
        if port is None or not hasattr(port, "stopReading"):
            return
        # The accept pacer (S4.2) may start reading the port again when a login slot
        # frees: while paused, a wake-up goes straight back to sleep instead.
        self._held_read = port.__dict__.get("doRead")
        port.doRead = port.stopReading
        port.stopReading()

    def _start_accepting(self):
        port = self._port
        if port is None or not hasattr(port, "startReading"):
            return
        if self._held_read is not None:
            port.doRead, self._held_read = self._held_read, None
        else:
            port.__dict__.pop("doRead", None)
        port.startReading()

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
        if self.paused:
            self._stop_accepting()   # paused before the port was bound
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
        self._held_read = None
        if self._port is not None:
            port, self._port = self._port, None
            return port.stopListening()
        return None
