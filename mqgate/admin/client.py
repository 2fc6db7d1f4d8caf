"""
A small blocking AMQP client for admin requests (S11.1): what `mqgate cmd` speaks.

It drives the broker's own sans-IO engine (L{mqgate.amqp.connection.Connection},
C{server=False}) over a plain socket: write what the engine has to say, read, feed,
look at the events, until what we wait for has happened or the deadline has passed.
One connection serves one or more requests:

1. find the admin service: ask the port mapper (S1.3) for the C{admin} service's port,
   as the source's imqcmd does, unless the address names the port directly
   (C{mqtcp://host:port/admin});
2. SASL PLAIN as an admin-group user (the admin service refuses anyone else);
3. a receiver on a dynamic queue (the reply-to) and a sender to C{mqgate.admin};
4. per request: send it unsettled, wait for its disposition (a rejection carries the
   broker's reason) and for the reply with our message-id as correlation-id.

Errors are L{AdminClientError}s whose text says what happened and what to do; the CLI
prints them as they are.
"""

import itertools
import os
import socket
import time

from mqgate.admin.wire import ADMIN_ADDRESS, read_reply, request_body
from mqgate.amqp.connection import Connection
from mqgate.amqp.events import (
    ConnectionClosed, DeliveriesSettled, LinkDetached, MessageReceived, SaslCompleted,
    SessionEnded,
)
from mqgate.amqp.link import LinkState
from mqgate.amqp.message import Properties, encode_message, parse_message
from mqgate.amqp.performatives import RECEIVER, SENDER, Rejected, Source, Target
from mqgate.errors import MqgateError
from mqgate.portmap.table import PortMapperError, parse_table, table_complete

__all__ = ["AdminClient", "AdminClientError", "find_service_port"]

#: Requests wait this long for the broker by default (the source's imqcmd -rtm: 10 s).
DEFAULT_TIMEOUT = 10.0
_READ_SIZE = 65536
#: A port mapper table is a few lines; anything longer is not one.
_MAX_TABLE = 64 * 1024
#: Replies the broker may send before we grant more credit.
_REPLY_CREDIT = 10


class AdminClientError(MqgateError):
    """The request could not be made or answered; the text says why and what to do."""


def _connect(host, port, timeout, what):
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise AdminClientError(
            f"cannot connect to {what} at {host}:{port}: connection refused. Is the "
            f"broker running, and is {host}:{port} its address? (-b HOST:PORT names "
            "the broker's port mapper)") from None
    except socket.timeout:
        raise AdminClientError(f"cannot connect to {what} at {host}:{port}: no answer "
                               f"within {timeout:g} s") from None
    except OSError as e:
        raise AdminClientError(f"cannot connect to {what} at {host}:{port}: "
                               f"{e.strerror or e}") from None


def find_service_port(host, port, service="admin", timeout=DEFAULT_TIMEOUT):
    """Ask the port mapper at C{host:port} where C{service} listens (S1.3).

    @return: the service's port.
    @raise AdminClientError: no port mapper there, or no such service running.
    """
    sock = _connect(host, port, timeout, "the port mapper")
    data = bytearray()
    try:
        while len(data) < _MAX_TABLE and not table_complete(data):
            chunk = sock.recv(_READ_SIZE)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise AdminClientError(f"reading the port mapper at {host}:{port}: "
                               f"{e.strerror or e}") from None
    finally:
        sock.close()
    try:
        _name, _version, entries = parse_table(bytes(data))
    except PortMapperError as e:
        raise AdminClientError(f"{host}:{port} is not a port mapper ({e.description}); "
                               "-b names the broker's port mapper, 7676 by default")
    for entry in entries:
        if entry.name == service:
            if entry.type != "ADMIN":
                raise AdminClientError(f"service {service} is not an ADMIN service")
            if entry.protocol != "tcp":
                raise AdminClientError(f"service {service} speaks {entry.protocol}; "
                                       "mqgate cmd connects over plain tcp only")
            return entry.port
    running = ", ".join(e.name for e in entries) or "none"
    raise AdminClientError(f"the broker at {host}:{port} runs no {service} service "
                           f"(running: {running}); add it to mqgate.service.activelist")


class AdminClient:
    """One admin connection; use L{request}, then L{close} (or a C{with} block).

    @param host: the admin service's host.
    @param port: the admin service's port.
    @param user: an admin-group user name.
    @param password: its password.
    @param timeout: seconds any one step may take.
    """

    def __init__(self, host, port, user, password, timeout=DEFAULT_TIMEOUT):
        self.host, self.port, self.user, self.timeout = host, port, user, timeout
        self._ids = itertools.count(1)
        self._replies = {}
        self._sock = _connect(host, port, timeout, "the admin service")
        self._engine = Connection(
            server=False, container_id=f"mqgate-cmd-{os.getpid()}",
            credentials=(user, password), hostname=host, idle_timeout=None)
        try:
            self._open()
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the exchange ------------------------------------------------------------------

    def _open(self):
        self._wait_for(lambda: self._engine.ready, "the broker to accept the login")
        session = self._engine.begin_session()
        self._wait_for(lambda: session.remote_channel is not None, "the session")
        self._receiver = session.attach_link("mqgate-cmd-replies", RECEIVER)
        self._receiver.attach(source=Source(dynamic=True), target=Target())
        self._sender = session.attach_link("mqgate-cmd-requests", SENDER)
        self._sender.attach(source=Source(), target=Target(address=ADMIN_ADDRESS))
        self._wait_for(lambda: self._attached(self._receiver)
                       and self._attached(self._sender), "the admin links")
        source = self._receiver.remote.source
        self.reply_to = None if source is None else source.address
        if not self.reply_to:
            raise AdminClientError("the broker gave no reply queue (dynamic source)")
        self._receiver.flow(_REPLY_CREDIT)
        self._wait_for(lambda: self._sender.credit > 0, "credit to send requests")

    @staticmethod
    def _attached(link):
        return link.state is LinkState.ATTACHED and link.remote is not None

    def request(self, verb, object_, arguments=()):
        """Send one request; return the broker's L{mqgate.admin.requests.Reply}."""
        message_id = f"mqgate-cmd-{os.getpid()}-{next(self._ids)}"
        data = encode_message(request_body(verb, object_, arguments), properties=Properties(
            message_id=message_id, to=ADMIN_ADDRESS, reply_to=self.reply_to))
        if self._sender.credit <= 0:
            self._wait_for(lambda: self._sender.credit > 0, "credit to send requests")
        # Unsettled, so that a request the broker cannot take comes back rejected,
        # with its reason, instead of never being answered.
        self._sender.send(data, settled=False, context=message_id)
        self._wait_for(lambda: message_id in self._replies, "the reply")
        return self._replies.pop(message_id)

    def close(self):
        """Close the connection politely, then the socket."""
        try:
            if not self._engine.finished:
                self._engine.close()
                self._sock.sendall(self._engine.data_to_send())
        except OSError:
            pass
        finally:
            self._sock.close()

    # -- driving the engine ---------------------------------------------------------

    def _wait_for(self, done, what):
        deadline = time.monotonic() + self.timeout
        while True:
            out = self._engine.data_to_send()
            if out:
                self._sock.sendall(out)
            if done():
                return
            if self._engine.finished:
                raise self._finished_error(what)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AdminClientError(f"no answer from {self.host}:{self.port} within "
                                       f"{self.timeout:g} s while waiting for {what}")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(_READ_SIZE)
            except socket.timeout:
                continue
            except OSError as e:
                raise AdminClientError(f"connection to {self.host}:{self.port} failed "
                                       f"while waiting for {what}: {e.strerror or e}")
            if not data:
                self._engine.connection_lost()
                raise self._finished_error(what)
            for event in self._engine.receive_data(data):
                self._event(event)

    def _finished_error(self, what):
        if not self._engine.ready:
            return AdminClientError(f"the broker at {self.host}:{self.port} closed the "
                                    "connection before the login completed")
        error = self._engine.error
        reason = f": {error.description}" if error is not None else ""
        return AdminClientError(f"the broker closed the connection while we waited "
                                f"for {what}{reason}")

    def _event(self, event):
        kind = type(event)
        if kind is SaslCompleted and not event.ok:
            raise AdminClientError(
                f"login to the admin service at {self.host}:{self.port} failed for user "
                f"{self.user!r}: wrong user name or password (the broker's log says "
                "more)")
        if kind is ConnectionClosed or kind is SessionEnded or kind is LinkDetached:
            if event.error is not None:
                raise AdminClientError(f"the broker refused: {event.error.description} "
                                       f"({event.error.condition})")
            if kind is not LinkDetached:
                raise AdminClientError("the broker closed the admin connection")
        elif kind is MessageReceived:
            self._received(event)
        elif kind is DeliveriesSettled:
            if isinstance(event.state, Rejected):
                error = event.state.error
                reason = error.description if error is not None else "no reason given"
                raise AdminClientError(f"the broker rejected the request: {reason}")

    def _received(self, event):
        link = event.link
        if not event.settled:
            link.settle(event.delivery_id)
        message = parse_message(event.payload)
        self._replies[message.properties.correlation_id] = read_reply(message)
        link.flow(_REPLY_CREDIT)
