"""
The blocking API of the client library, for scripts (S6.1)::

    from mqgate.client.blocking import connect

    with connect("amqp://127.0.0.1:5672", credentials=("admin", "admin")) as connection:
        connection.sender("queue://examples").send("Hello, mqgate!")
        message = connection.receiver("queue://examples").receive(timeout=10)
        print(message.body)

Design: the Twisted reactor runs in a daemon thread, and every call here hands its work
to that thread with C{blockingCallFromThread} and waits for the Deferred's result. Why
this and not a loop of its own: the library then has one implementation, the Twisted
one, and the blocking API is a thin shell over it, so both behave alike (reconnect, flow
control, acknowledge modes, every transport, the tunnel and WebSocket endpoints
included); a loop of its own would need a second adapter for every transport. The cost
is a thread and that Twisted's reactor runs once per process: all blocking connections
share the one thread, and a program that already runs the reactor (in another thread)
has its reactor used as it is. Do not call this API from the reactor thread itself
(from a Twisted callback): it would wait for itself; use the Twisted API there
(L{mqgate.client.connect}).

Errors are the Twisted API's (L{mqgate.client.ClientError} and its kinds), raised in
the caller's thread.
"""

import threading

from twisted.internet import defer, threads

from mqgate.client import connection as _twisted
from mqgate.client.connection import AUTO, ClientError

__all__ = ["connect", "BlockingConnection", "BlockingSender", "BlockingReceiver"]

_lock = threading.Lock()
_thread = None
#: How long a blocking call waits at most when the caller gave no timeout, seconds.
DEFAULT_TIMEOUT = 60.0


def _reactor():
    """The global reactor, running (in a daemon thread of ours unless it already runs)."""
    global _thread
    from twisted.internet import reactor
    with _lock:
        if reactor.running:
            if threading.current_thread() is _thread or _in_reactor_thread():
                raise ClientError("the blocking API was called from the reactor thread, "
                                  "where it would wait for itself; use "
                                  "mqgate.client.connect (the Twisted API) there")
            return reactor
        if _thread is None:
            started = threading.Event()
            reactor.callWhenRunning(started.set)
            _thread = threading.Thread(target=reactor.run,
                                       kwargs={"installSignalHandlers": False},
                                       name="mqgate-client-reactor", daemon=True)
            _thread.start()
            started.wait(10.0)
    return reactor


def _in_reactor_thread():
    from twisted.python import threadable
    return threadable.isInIOThread()


def _call(where, function, *args, timeout=None, **kwargs):
    """Run C{function} on the reactor C{where}'s thread; wait for its (Deferred's)
    result, C{timeout} seconds at most."""
    def run():
        result = defer.maybeDeferred(function, *args, **kwargs)
        if timeout is not None:
            result.addTimeout(timeout, where)
        return result
    try:
        return threads.blockingCallFromThread(where, run)
    except defer.TimeoutError:
        raise ClientError(f"no answer within {timeout:g} s") from None


def connect(urls, **kwargs):
    """Connect (see L{mqgate.client.connect} for the arguments); return a
    L{BlockingConnection}, once logged in.

    @raise ClientError: the connection could not be made (its kind says why).
    """
    reactor = _reactor()
    connection = _call(reactor, _twisted.connect, urls, reactor=reactor, **kwargs)
    return BlockingConnection(reactor, connection)


class BlockingConnection:
    """A connection for scripts; a context manager that closes it."""

    def __init__(self, reactor, connection):
        self._reactor = reactor
        self.connection = connection

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def url(self):
        return self.connection.url

    def sender(self, address, *, at_least_once=True, timeout=DEFAULT_TIMEOUT):
        """A L{BlockingSender}, once the broker accepted the link."""
        sender = _call(self._reactor, self._attached, self.connection.sender, address,
                       at_least_once=at_least_once, timeout=timeout)
        return BlockingSender(self._reactor, sender)

    def receiver(self, address, *, timeout=DEFAULT_TIMEOUT, **kwargs):
        """A L{BlockingReceiver}, once the broker accepted the link; C{kwargs} as
        L{mqgate.client.Connection.receiver} (without C{callback})."""
        receiver = _call(self._reactor, self._attached, self.connection.receiver,
                         address, timeout=timeout, **kwargs)
        return BlockingReceiver(self._reactor, receiver)

    @staticmethod
    def _attached(make, *args, **kwargs):
        return make(*args, **kwargs).ready

    def request(self, address, body, timeout=10.0, **kwargs):
        """Send a request and wait for its reply (L{mqgate.client.Connection.request})."""
        reply = _call(self._reactor, self.connection.request, address, body, timeout,
                      timeout=timeout + 5.0, **kwargs)
        return _blocking_message(self._reactor, reply)

    def close(self, timeout=10.0):
        """Close the connection, waiting for the broker's answer up to C{timeout} s."""
        try:
            _call(self._reactor, self.connection.close, timeout=timeout)
        except ClientError:
            pass


class BlockingSender:
    """Sends messages, each call waiting for the broker's outcome (at-least-once)."""

    def __init__(self, reactor, sender):
        self._reactor = reactor
        self.sender = sender

    def send(self, body, properties=None, timeout=DEFAULT_TIMEOUT, **fields):
        """Send one message; return once the broker accepted it (at-most-once: once
        written).

        @raise SendError: the broker did not take it (its condition and description).
        """
        return _call(self._reactor, self.sender.send, body, properties, timeout=timeout,
                     **fields)

    def send_many(self, bodies, properties=None, timeout=DEFAULT_TIMEOUT):
        """Send several messages at once, then wait for all their outcomes: much faster
        than one L{send} at a time, which waits a round trip for each."""
        def all_sent():
            return defer.gatherResults(
                [self.sender.send(body, properties) for body in bodies],
                consumeErrors=True).addErrback(lambda f: f.value.subFailure)
        return _call(self._reactor, all_sent, timeout=timeout)

    def close(self):
        _call(self._reactor, self.sender.close, timeout=DEFAULT_TIMEOUT)


class BlockingReceiver:
    """Receives messages one call at a time."""

    def __init__(self, reactor, receiver):
        self._reactor = reactor
        self.receiver = receiver

    @property
    def address(self):
        return self.receiver.address

    def receive(self, timeout=None):
        """The next message, or None after C{timeout} seconds without one (None: wait
        as long as it takes). In AUTO mode it is settled as it is returned; in CLIENT
        mode call its C{acknowledge()}."""
        message = _call(self._reactor, self.receiver.get, timeout)
        return None if message is None else _blocking_message(self._reactor, message)

    def close(self):
        _call(self._reactor, self.receiver.close, timeout=DEFAULT_TIMEOUT)

    def unsubscribe(self):
        """Close, and end the durable subscription (C{close} keeps it)."""
        _call(self._reactor, self.receiver.unsubscribe, timeout=DEFAULT_TIMEOUT)


def _blocking_message(reactor, message):
    """Make C{message.acknowledge()} safe to call from the caller's thread."""
    if message.receiver is not None and message.receiver.ack_mode != AUTO:
        acknowledge = message.acknowledge
        message.acknowledge = lambda: _call(reactor, acknowledge)
    return message
