"""A lean AMQP client on mqgate's own sans-IO engine over a blocking socket.

For the crash tests (tests/e2e/test_crash.py) and the lean-client benchmark
(bench/amqp_engine_throughput.py): it costs far less CPU per message than Proton, so
the load it makes is limited by the broker, not by the client. Every failure is an
C{OSError}: C{ConnectionError} when the connection breaks or the broker refuses
something, C{TimeoutError} when an awaited answer does not come.
"""

import socket
import time

from mqgate.amqp.connection import Connection
from mqgate.amqp.events import ConnectionClosed, LinkAttached, LinkDetached, SaslCompleted
from mqgate.amqp.performatives import SENDER, SND_UNSETTLED, Source, Target

__all__ = ["EngineClient"]

RECV_SIZE = 1 << 18


class EngineClient:
    """One AMQP connection.

    @param address: C{(host, port)}.
    @param name: the container-id, and the prefix of the link names.
    @param credentials: C{(user, password)} for SASL PLAIN (admin by default: the
        broker lets guests in only where a service allows them, S4.2), or
        C{"ANONYMOUS"}.
    @param timeout: the socket's timeout, and how long L{wait_for} waits.
    """

    def __init__(self, address, name, *, credentials=("admin", "admin"), timeout=20.0):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.engine = Connection(server=False, container_id=name, credentials=credentials,
                                 idle_timeout=None)
        self.name = name
        self.timeout = timeout

    def flush(self):
        data = self.engine.data_to_send()
        if data:
            self.sock.sendall(data)

    def read(self):
        """Read once from the socket; return the engine's events.

        @raise ConnectionError: the broker closed the connection, broke the protocol,
            refused the login, or closed the connection or a link with an error.
        """
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("the broker closed the connection")
        events = self.engine.receive_data(data)
        if self.engine.error is not None:
            raise ConnectionError(f"protocol error: {self.engine.error}")
        for event in events:
            if isinstance(event, SaslCompleted) and not event.ok:
                raise ConnectionError("authentication failed")
            if isinstance(event, (ConnectionClosed, LinkDetached)) and event.error:
                raise ConnectionError(f"{type(event).__name__}: {event.error}")
        return events

    def wait_for(self, predicate, what):
        """Read until an event satisfies C{predicate}; return it.

        @raise TimeoutError: none within the client's timeout.
        """
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self.flush()
            for event in self.read():
                if predicate(event):
                    return event
        raise TimeoutError(f"{self.name}: no {what} within {self.timeout} s")

    def open_link(self, role, address, settle_mode=SND_UNSETTLED):
        """Wait for the broker's open, begin a session, attach one link to C{address}
        (C{role} C{SENDER} or C{RECEIVER}) and wait for the broker's attach."""
        self.flush()
        if not self.engine.ready:
            self.wait_for(lambda _: self.engine.ready, "open from the broker")
        link = self.engine.begin_session().attach_link(f"{self.name}-{role}", role)
        if role is SENDER:
            link.attach(source=Source(), target=Target(address=address),
                        snd_settle_mode=settle_mode)
        else:
            link.attach(source=Source(address=address), target=Target(),
                        snd_settle_mode=settle_mode)
        self.wait_for(lambda e: isinstance(e, LinkAttached) and e.link is link,
                      f"attach of {address}")
        return link

    def close(self, grace=5.0):
        """Close politely, waiting up to C{grace} seconds for the broker's close; a
        broken connection is simply dropped."""
        try:
            self.engine.close()
            self.flush()
            self.sock.settimeout(grace)
            while not self.engine.finished:
                self.read()
        except OSError:
            pass
        self.sock.close()
