"""
The Twisted API of the client library (S6.1-S6.3): connections, senders, receivers,
request/reply, each operation a Deferred.

Theory of operation
-------------------
A L{Connection} is what the user holds; under it there is at most one live transport at a
time (an L{AmqpClientProtocol} with its own engine). The connection keeps the user's
L{Sender}s and L{Receiver}s as descriptions (address, mode, selector, ...), so that
after a reconnect (S6.1: C{imqReconnectEnabled}) it can begin a new session and attach
every link again on the new transport. Each link object keeps, for the transport of the
moment, the engine's link in C{_link}.

Sending: an at-least-once message is written unsettled and its Deferred fires with the
broker's outcome (accepted), or fails with a L{SendError} carrying the AMQP condition
and description (rejected, released, modified). Messages wait in the sender while the
link has no credit. When the transport breaks, the messages written and not yet settled
go back, in order, to the front of the queue and are sent again on the next transport:
the broker may then have them twice, which at-least-once allows (a consumer may see a
duplicate; it is marked redelivered only when the broker knew it). At-most-once
messages are sent pre-settled and their Deferred fires once written.

Receiving: credit follows S6.2 (L{mqgate.client.flow}); a message is handed to the
receiver's callback, or to a L{Receiver.get} Deferred, and settled by the acknowledge
mode: AUTO when the callback returns (or when C{get} hands it over), CLIENT when
L{ReceivedMessage.acknowledge} is called (that message and every earlier one of the
connection), DUPS_OK in batches, lazily. A callback that raises in AUTO mode has its
message given back for redelivery (modified, delivery-failed).

Everything runs on the reactor thread; the blocking API (L{mqgate.client.blocking})
calls in from other threads through C{blockingCallFromThread}.
"""

import collections
import itertools
import uuid

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.amqp.connection import Connection as Engine
from mqgate.amqp.events import (
    ConnectionClosed, ConnectionOpened, CreditGranted, DeliveriesSettled, LinkAttached,
    LinkDetached, MessageReceived, SaslCompleted, SessionBegun, SessionEnded,
    WindowOpened,
)
from mqgate.amqp.link import LinkState
from mqgate.amqp.performatives import (
    RECEIVER, SENDER, SND_SETTLED, SND_UNSETTLED, Accepted, Modified, Rejected, Released,
    Source, Target,
)
from mqgate.amqp.types import Described, Symbol, ULong
from mqgate.client.endpoints import CONNECT_TIMEOUT, endpoint_for
from mqgate.client.flow import ConnectionFlow, ConsumerFlow
from mqgate.client.message import Message, ReceivedMessage
from mqgate.client.protocol import AmqpClientFactory
from mqgate.client.reconnect import after_break, first_connection
from mqgate.client.urls import UrlError, options_from, parse_address_list
from mqgate.errors import MqgateError

__all__ = ["connect", "Connection", "Sender", "Receiver", "AUTO", "CLIENT", "DUPS_OK",
           "ClientError", "ConnectError", "AuthenticationError", "LinkError", "SendError",
           "ConnectionLostError", "RequestTimeout"]

log = Logger()

AUTO, CLIENT, DUPS_OK = "AUTO", "CLIENT", "DUPS_OK"
ACK_MODES = (AUTO, CLIENT, DUPS_OK)

#: The JMS selector filter (the AMQP JMS mapping, FACTS section 5).
SELECTOR_FILTER = ULong(0x0000468C00000004)
#: Seconds a DUPS_OK receiver waits before settling a batch that has not filled up.
DUPS_OK_DELAY = 0.2


class ClientError(MqgateError):
    """Something the client library could not do.

    @ivar condition: the AMQP error condition the broker gave, or None.
    @ivar description: the broker's description, or ours.
    """

    def __init__(self, description, condition=None):
        self.condition = None if condition is None else str(condition)
        self.description = description
        super().__init__(f"{condition}: {description}" if condition else description)


class ConnectError(ClientError):
    """No address of the list could be connected to (each one's reason is in the text)."""


class AuthenticationError(ConnectError):
    """The broker refused the login."""


class LinkError(ClientError):
    """The broker refused or closed a sender or receiver (detach with an error)."""


class SendError(ClientError):
    """The broker did not accept a message (rejected, released or modified)."""


class ConnectionLostError(ClientError):
    """The connection broke and is not (or could not be) connected again."""


class RequestTimeout(ClientError):
    """No reply came in time."""


def _error_of(error, default):
    """A L{ClientError} subclass instance from an AMQP Error (or None)."""
    if error is None:
        return default[0](default[1])
    return default[0](error.description or "(no description)", error.condition)


def connect(urls, *, credentials=None, reactor=None, properties=None, client_id=None,
            ca_file=None, verify=True, server_name=None, proxy=None, origin=None,
            idle_timeout=60.0, connect_timeout=CONNECT_TIMEOUT, endpoint_factory=None,
            **options):
    """Connect to the first broker of C{urls} that answers; return a Deferred firing with
    the L{Connection}.

    @param urls: a URL, a list of URLs, or a comma-separated string of them (the
        C{imqAddressList} of the C{properties} dict is used when C{urls} is None).
    @param credentials: C{(user, password)} (SASL PLAIN), C{"ANONYMOUS"}, or None for
        the user and password of the URL, else ANONYMOUS.
    @param properties: the source system's connection factory properties
        (C{imqReconnectEnabled}, C{imqConsumerFlowLimit}, ...), see
        L{mqgate.client.urls.ClientOptions}.
    @param options: the same in snake_case: C{reconnect_enabled}, C{reconnect_attempts},
        C{reconnect_interval} (seconds), C{consumer_flow_limit},
        C{consumer_flow_threshold}, C{connection_flow_limit_enabled},
        C{connection_flow_limit}.
    @param ca_file: PEM file of the CAs that sign the broker's certificate (amqps,
        https, wss); the system's CAs by default.
    @param verify: False turns the certificate and host name checks off.
    @param server_name: check the certificate against this name rather than the host.
    @param proxy: the tunnel's HTTP proxy (default: C{http_proxy}/C{https_proxy}).
    @param endpoint_factory: C{f(reactor, url, **endpoint_options)} returning a Deferred
        of the endpoint that reaches C{url} (tests, other transports); by default
        L{mqgate.client.endpoints.endpoint_for}.
    @raise UrlError: (at once) a URL or option that cannot be used.
    """
    if reactor is None:
        from twisted.internet import reactor
    properties = dict(properties or {})
    if urls is None:
        urls = properties.get("imqAddressList")
    addresses = parse_address_list(urls)
    connection = Connection(
        reactor, addresses, credentials=credentials,
        options=options_from(properties, **options), client_id=client_id,
        endpoint_options=dict(ca_file=ca_file, verify=verify, server_name=server_name,
                              proxy=proxy, origin=origin, timeout=connect_timeout),
        idle_timeout=idle_timeout, connect_timeout=connect_timeout,
        endpoint_factory=endpoint_factory)
    return connection._start()


class Connection:
    """A connection to a broker (see the module doc); made by L{connect}.

    @ivar url: the L{BrokerUrl} of the broker connected to now.
    @ivar reconnects: how many times the connection was made again after a break.
    """

    def __init__(self, reactor, addresses, *, credentials, options, client_id=None,
                 endpoint_options=None, idle_timeout=60.0,
                 connect_timeout=CONNECT_TIMEOUT, endpoint_factory=None):
        self.reactor = reactor
        self.addresses = addresses
        self.credentials = credentials
        self.options = options
        self.client_id = client_id or f"mqgate-client-{uuid.uuid4().hex[:12]}"
        self.endpoint_options = dict(endpoint_options or {})
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self._endpoint_for = endpoint_factory or endpoint_for
        self.url = None
        self.reconnects = 0
        self.flow = ConnectionFlow(options.connection_flow_limit
                                   if options.connection_flow_limit_enabled else None)
        self._protocol = None
        self._engine = None         # the engine of the transport of the moment
        self._close_error = None    # what the broker said when it closed
        self._session = None
        self._opening = None        # Deferred of the attempt under way
        self._links = []            # Senders and Receivers, in creation order
        self._names = itertools.count(1)
        self._closing = None        # Deferred of close()
        self._closed = False
        self._reconnecting = False
        self._index = 0             # position of self.url in the address list
        self._unacked = collections.OrderedDict()   # _Delivery -> None, arrival order
        self._requests = {}         # message id -> Deferred of the reply
        self._reply_receiver = None
        self._request_senders = {}
        self._request_ids = itertools.count(1)
        self._lost_listeners = []

    def __repr__(self):
        return f"<mqgate.client.Connection {self.url} {self.client_id}>"

    # -- connecting ------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _start(self):
        yield self._walk(first_connection(self.addresses), "connect")
        return self

    @defer.inlineCallbacks
    def _walk(self, schedule, what):
        """Try the addresses of C{schedule} in turn until one connects."""
        reasons = collections.deque(maxlen=len(self.addresses))   # the last round's
        for url, delay in schedule:
            if self._closed:
                raise ConnectionLostError("the connection was closed")
            if delay:
                yield _sleep(self.reactor, delay)
            try:
                yield self._attempt(url)
            except UrlError:
                raise
            except AuthenticationError:
                raise
            except Exception as e:
                reasons.append(f"{url}: {_certificate_refused(e) or e}")
                continue
            self._index = self.addresses.index(url)
            return
        raise ConnectError(f"cannot {what}: " + "; ".join(reasons)
                           if reasons else f"cannot {what}: no address to try")

    def _credentials_for(self, url):
        if self.credentials is not None:
            return self.credentials
        if url.user is not None:
            return (url.user, url.password or "")
        return "ANONYMOUS"

    @defer.inlineCallbacks
    def _attempt(self, url):
        """Connect to C{url}, log in, begin the session, attach every link."""
        endpoint = yield self._endpoint_for(self.reactor, url, **self.endpoint_options)
        credentials = self._credentials_for(url)
        engine = Engine(server=False, container_id=self.client_id, credentials=credentials,
                        hostname=url.host, idle_timeout=self.idle_timeout)
        # Events and losses count only from this attempt's engine (an older transport
        # may still be going away).
        self._engine = engine
        self._opening = opening = defer.Deferred()
        self._close_error = None
        self._user = credentials[0] if isinstance(credentials, tuple) else credentials
        try:
            protocol = yield endpoint.connect(AmqpClientFactory(engine, self,
                                                                self.reactor))
        except Exception:
            self._engine = self._opening = None
            raise
        self._protocol = protocol
        timer = self.reactor.callLater(self.connect_timeout, self._opening_timed_out,
                                       protocol, opening)
        try:
            yield opening
        except Exception:
            if not protocol.lost:
                protocol.transport.abortConnection()
            self._protocol = self._engine = self._opening = None
            raise
        finally:
            if timer.active():
                timer.cancel()
        self.url = url
        for link in self._links:
            link._attach(self._session)
        self._top_up_all()
        self.flush()

    def _opening_timed_out(self, protocol, opening):
        if not opening.called:
            opening.errback(ConnectError(
                f"no answer from the broker within {self.connect_timeout:g} s"))

    def _fail_opening(self, error):
        opening, self._opening = self._opening, None
        if opening is not None and not opening.called:
            opening.errback(error)

    # -- events from the transport ---------------------------------------------------------

    def _engine_events(self, protocol, events):
        if protocol.engine is not self._engine:
            return
        self._protocol = protocol
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)

    def _on_sasl(self, event):
        if not event.ok:
            self._fail_opening(AuthenticationError(
                f"the broker refused the login of {self._user!r} (SASL outcome code "
                f"{event.code}); check the user name and password"))

    def _on_opened(self, event):
        self._session = self._protocol.engine.begin_session()

    def _on_session(self, event):
        if event.session is self._session and self._opening is not None:
            opening, self._opening = self._opening, None
            opening.callback(None)

    def _on_closed(self, event):
        error = _error_of(event.error, (ConnectionLostError, "the broker closed the "
                                        "connection"))
        self._close_error = error
        self._fail_opening(ConnectError(str(error)) if event.error else error)

    def _on_session_ended(self, event):
        if event.session is self._session:
            self._protocol.engine.close()

    def _on_attached(self, event):
        link = event.link.context
        if link is not None:
            link._on_attached(event.link)

    def _on_detached(self, event):
        link = event.link.context
        if link is not None:
            link._on_detached(event.link, event.error)

    def _on_credit(self, event):
        if event.link.context is not None:
            event.link.context._pump()

    def _on_window(self, event):
        for link in event.links:
            if link.context is not None:
                link.context._pump()

    def _on_message(self, event):
        if event.link.context is not None:
            event.link.context._on_message(event)

    def _on_settled(self, event):
        if event.link.context is not None:
            event.link.context._on_settled(event.deliveries, event.state)

    def _transport_lost(self, protocol, reason):
        if protocol.engine is not self._engine:
            return
        self._protocol = self._engine = None
        self._session = None
        if self._opening is not None:
            self._fail_opening(self._close_error or ConnectError(_lost_while_opening(
                reason)))
            return
        self._unacked.clear()
        for link in self._links:
            link._on_break()
        if self._closing is not None:
            self._finish_close()
            return
        if self._closed:
            return
        why = str(self._close_error) if self._close_error else reason.getErrorMessage()
        log.info("mqgate client: connection to {url} lost: {why}", url=self.url, why=why)
        if self.options.reconnect_enabled and self.options.reconnect_attempts != 0:
            self._reconnect()
        else:
            self._give_up(ConnectionLostError(
                f"the connection to {self.url} was lost ({why}) and reconnection is off "
                "(reconnect_enabled, imqReconnectEnabled)",
                self._close_error.condition if self._close_error else None))

    @defer.inlineCallbacks
    def _reconnect(self):
        self._reconnecting = True
        schedule = after_break(self.addresses, self._index,
                               self.options.reconnect_attempts,
                               self.options.reconnect_interval)
        try:
            yield self._walk(schedule, "reconnect")
        except Exception as e:
            self._reconnecting = False
            self._give_up(e if isinstance(e, ClientError) else ConnectionLostError(str(e)))
            return
        self._reconnecting = False
        self.reconnects += 1
        log.info("mqgate client: connected again to {url}", url=self.url)

    def _give_up(self, error):
        self._closed = True
        for link in list(self._links):
            link._fail(error)
        for request in list(self._requests.values()):
            if not request.called:
                request.errback(error)
        self._requests.clear()
        listeners, self._lost_listeners = self._lost_listeners, []
        for listener in listeners:
            listener(error)

    def on_lost(self, callback):
        """Call C{callback(error)} when the connection is lost for good (broken with
        reconnection off or exhausted)."""
        self._lost_listeners.append(callback)

    # -- for the links ---------------------------------------------------------------------

    @property
    def connected(self):
        """Whether a transport is up with its session begun."""
        return self._protocol is not None and self._opening is None and \
            self._session is not None

    def flush(self):
        """Write what the engine has to say now (after acting outside a read)."""
        if self._protocol is not None:
            self._protocol.flush()

    def _new_name(self, kind):
        return f"{self.client_id}-{kind}-{next(self._names)}"

    def _add(self, link):
        if self._closed or self._closing is not None:
            raise ConnectionLostError("the connection is closed")
        self._links.append(link)
        if self.connected:
            link._attach(self._session)
            self.flush()
        return link

    def _remove(self, link):
        if link in self._links:
            self._links.remove(link)

    def _top_up_all(self, receiver=None):
        """Ask for the next batches that are due: C{receiver}'s alone when only its own
        figures changed and no connection-wide cap ties it to the others (a message
        costs one receiver's check, not one per receiver), else every receiver's."""
        if receiver is not None and self.flow.limit is None:
            receiver._top_up()
            return
        for link in self._links:
            if isinstance(link, Receiver):
                link._top_up()

    def _acknowledge_upto(self, delivery):
        """Settle every CLIENT-mode delivery received up to C{delivery}, inclusive."""
        if delivery not in self._unacked:
            return     # settled already, or its transport is gone (redelivered)
        for pending in list(self._unacked):
            if pending.receiver.ack_mode == CLIENT:
                pending.receiver._settle(pending)
            if pending is delivery:
                break
        self._top_up_all()
        self.flush()

    # -- the user's API --------------------------------------------------------------------

    def sender(self, address, *, at_least_once=True):
        """A L{Sender} to C{address} (C{queue://NAME}, C{topic://NAME}, or a bare queue
        name); use C{yield sender.ready} to wait until the broker accepted the link."""
        return self._add(Sender(self, address, at_least_once))

    def receiver(self, address, *, callback=None, flow_limit=None, threshold=None,
                 ack_mode=AUTO, selector=None, durable_name=None, dynamic=False):
        """A L{Receiver} from C{address}.

        @param callback: called with each L{ReceivedMessage}; without one, use
            L{Receiver.get}.
        @param flow_limit: messages held at most (default C{consumer_flow_limit}).
        @param threshold: percent of the limit at which the next batch is asked for
            (default C{consumer_flow_threshold}).
        @param ack_mode: L{AUTO}, L{CLIENT} or L{DUPS_OK}.
        @param selector: a JMS selector on the message's properties.
        @param durable_name: a durable subscription's name (topics).
        @param dynamic: a temporary queue made by the broker (C{address} None); its
            name is in C{receiver.address} once ready.
        """
        if ack_mode not in ACK_MODES:
            raise UrlError(f"ack_mode {ack_mode!r}: give one of {', '.join(ACK_MODES)}")
        limit = self.options.consumer_flow_limit if flow_limit is None else flow_limit
        share = self.options.consumer_flow_threshold if threshold is None else threshold
        options_from(consumer_flow_limit=limit, consumer_flow_threshold=share)   # checks
        return self._add(Receiver(self, address, callback=callback,
                                  flow=ConsumerFlow(limit, share, self.flow),
                                  ack_mode=ack_mode, selector=selector,
                                  durable_name=durable_name, dynamic=dynamic))

    def send(self, address, body, **kwargs):
        """Send one message on a sender of its own (made once per address); return the
        Deferred of the outcome."""
        sender = self._request_senders.get(address)
        if sender is None or sender.closed:
            sender = self._request_senders[address] = self.sender(address)
        return sender.send(body, **kwargs)

    @defer.inlineCallbacks
    def request(self, address, body, timeout=10.0, **kwargs):
        """Send C{body} to C{address} with a reply-to of our own temporary queue; return
        (through the Deferred) the reply, the message whose correlation-id is our
        request's message-id.

        @raise RequestTimeout: no reply within C{timeout} seconds.
        """
        replies = self._reply_receiver
        if replies is None or replies.closed:
            replies = self._reply_receiver = self.receiver(
                None, dynamic=True, callback=self._on_reply)
        yield replies.ready
        message_id = f"{self.client_id}-request-{next(self._request_ids)}"
        waiting = self._requests[message_id] = defer.Deferred()
        timer = self.reactor.callLater(timeout, self._request_timed_out, message_id,
                                       timeout, address)
        try:
            yield self.send(address, body, message_id=message_id,
                            reply_to=replies.address, **kwargs)
            reply = yield waiting
        finally:
            self._requests.pop(message_id, None)
            if timer.active():
                timer.cancel()
        return reply

    def _on_reply(self, message):
        waiting = self._requests.pop(message.correlation_id, None)
        if waiting is not None and not waiting.called:
            waiting.callback(message)

    def _request_timed_out(self, message_id, timeout, address):
        waiting = self._requests.pop(message_id, None)
        if waiting is not None and not waiting.called:
            waiting.errback(RequestTimeout(f"no reply from {address} within {timeout:g} s"))

    def close(self):
        """Close every link and the connection; the Deferred fires once the broker
        answered (or the transport is gone)."""
        if self._closing is not None:
            return self._closing
        self._closing = defer.Deferred()
        self._closed = True
        if self._protocol is None:
            self._finish_close()
            return self._closing
        # What was consumed is settled before the close (after it the broker would
        # not read the dispositions, and would deliver those messages again).
        for link in self._links:
            if isinstance(link, Receiver):
                link._settle_lazy()
        self.flush()
        self._protocol.engine.close()
        self.flush()
        return self._closing

    def _finish_close(self):
        for link in list(self._links):
            link._fail(ConnectionLostError("the connection is closed"))
        closing = self._closing
        if closing is not None and not closing.called:
            closing.callback(None)


_HANDLERS = {
    SaslCompleted: Connection._on_sasl,
    ConnectionOpened: Connection._on_opened,
    SessionBegun: Connection._on_session,
    ConnectionClosed: Connection._on_closed,
    SessionEnded: Connection._on_session_ended,
    LinkAttached: Connection._on_attached,
    LinkDetached: Connection._on_detached,
    CreditGranted: Connection._on_credit,
    WindowOpened: Connection._on_window,
    MessageReceived: Connection._on_message,
    DeliveriesSettled: Connection._on_settled,
}


def _lost_while_opening(reason):
    """Why a connection went before it was open, in words that say what to do."""
    refused = _certificate_refused(reason)
    if refused is not None:
        return refused
    return f"the connection was lost while logging in: {reason.getErrorMessage()}"


def _certificate_refused(reason):
    """The words for a broker certificate the client did not accept, when C{reason}
    (a Failure, or an exception a transport's endpoint failed with, which may hold
    the Failures of its attempts in C{reasons}, as twisted.web's client errors do)
    is one; otherwise C{None}."""
    from OpenSSL import SSL
    from service_identity import VerificationError
    if isinstance(reason, Failure):
        failures = [reason]
    elif isinstance(reason, (SSL.Error, VerificationError)):
        failures = [Failure(reason)]
    else:
        failures = [f for f in getattr(reason, "reasons", ()) if isinstance(f, Failure)]
    for failure in failures:
        if failure.check(SSL.Error, VerificationError):
            return (f"the broker's TLS certificate was not accepted "
                    f"({failure.getErrorMessage()}); give the CA that signed it (ca_file,"
                    " --ca-file), the name it was made for (server_name, --server-name),"
                    " or turn verification off explicitly (verify=False, --no-verify)")
    return None


def _sleep(reactor, seconds):
    waiting = defer.Deferred()
    reactor.callLater(seconds, waiting.callback, None)
    return waiting


class _Link:
    """What senders and receivers share: attaching on each transport, the ready
    Deferred, closing."""

    kind = "link"

    def __init__(self, connection, address):
        self._connection = connection
        self.address = address
        self.name = connection._new_name(self.kind)
        self.ready = defer.Deferred()   # fires with self once the broker attached
        self.closed = False
        self.error = None
        self._link = None
        self._closing = None

    def _attached_now(self):
        return self._link is not None and self._link.state is LinkState.ATTACHED

    def _on_attached(self, link):
        if link is not self._link:
            return
        if self._terminus(link.remote) is None:
            return     # refused: the detach with the reason follows
        self._ready_now(link)
        if not self.ready.called:
            self.ready.callback(self)

    def _on_detached(self, link, error):
        if link is not self._link:
            return
        self._link = None
        closing = self._closing
        if closing is not None:
            self._closed_now()
            if not closing.called:
                closing.callback(None)
            return
        self._fail(_error_of(error, (LinkError, f"the broker closed the link to "
                                     f"{self.address}")))

    def _fail(self, error):
        """The link is over for good: say so to whoever waits."""
        if self.closed:
            return
        self.error = error
        self._closed_now()
        if not self.ready.called:
            self.ready.errback(error)
        self._fail_waiters(error)
        if self._closing is not None and not self._closing.called:
            self._closing.callback(None)

    def _closed_now(self):
        self.closed = True
        self._connection._remove(self)

    def _on_break(self):
        """The transport broke: the engine link is gone; a new one comes with the
        next transport."""
        self._link = None

    #: Whether L{close} ends the link for good at the broker (section 2.6.6): a
    #: durable subscription's receiver leaves it in place instead.
    _ends_for_good = True

    def close(self):
        """Detach the link; the Deferred fires when the broker answered."""
        return self._detach(self._ends_for_good)

    def _detach(self, closed):
        if self._closing is not None:
            return self._closing
        self._closing = defer.Deferred()
        if self._link is None or not self._connection.connected:
            self._closed_now()
            self._closing.callback(None)
            return self._closing
        self._link.detach(closed=closed)
        self._connection.flush()
        return self._closing


class _Outgoing:
    __slots__ = ("payload", "result")

    def __init__(self, payload, result):
        self.payload = payload
        self.result = result


class Sender(_Link):
    """Sends messages to one address (see L{Connection.sender})."""

    kind = "sender"

    def __init__(self, connection, address, at_least_once):
        super().__init__(connection, address)
        self.at_least_once = at_least_once
        self._pending = collections.deque()       # _Outgoing not written yet
        self._unsettled = collections.OrderedDict()   # written, outcome awaited

    def __repr__(self):
        return f"<Sender {self.address}>"

    @staticmethod
    def _terminus(attach):
        return attach.target

    def _attach(self, session):
        link = self._link = session.attach_link(self.name, SENDER)
        link.context = self
        link.attach(source=Source(address=self._connection.client_id),
                    target=Target(address=self.address),
                    snd_settle_mode=SND_UNSETTLED if self.at_least_once else SND_SETTLED)

    def _ready_now(self, link):
        self._pump()

    def send(self, body, properties=None, **fields):
        """Send one message: C{body} and application C{properties}, or a L{Message}
        as C{body}; C{fields} are L{Message}'s keywords (C{durable}, C{ttl},
        C{correlation_id}, ...).

        @return: a Deferred firing with the outcome (at-least-once: once the broker
            accepted it; at-most-once: once written), or failing with L{SendError}
            (the broker's condition and description) or L{LinkError}.
        """
        if self.closed:
            return defer.fail(self.error or LinkError(f"the sender to {self.address} is "
                                                      "closed"))
        message = body if isinstance(body, Message) else Message(body, properties,
                                                                 **fields)
        result = defer.Deferred()
        self._pending.append(_Outgoing(message.encode(), result))
        if self._attached_now():
            self._pump()
        return result

    @property
    def in_flight(self):
        """Messages handed to C{send} whose outcome is not known yet."""
        return len(self._pending) + len(self._unsettled)

    def _pump(self):
        link = self._link
        if link is None:
            return
        sent = False
        while self._pending and link.writable:
            outgoing = self._pending.popleft()
            if self.at_least_once:
                self._unsettled[outgoing] = None
                link.send(outgoing.payload, settled=False, context=outgoing)
            else:
                link.send(outgoing.payload, settled=True)
                outgoing.result.callback(None)
            sent = True
        if sent:
            self._connection.flush()

    def _on_settled(self, deliveries, state):
        for outgoing in deliveries:
            if outgoing not in self._unsettled:
                continue     # failed or resent meanwhile: this outcome is stale
            del self._unsettled[outgoing]
            if state is None or isinstance(state, Accepted):
                outgoing.result.callback(state)
            elif isinstance(state, Rejected):
                outgoing.result.errback(_error_of(
                    state.error, (SendError, f"the broker rejected the message to "
                                             f"{self.address}")))
            else:
                what = "released" if isinstance(state, Released) else "modified"
                outgoing.result.errback(SendError(
                    f"the broker {what} the message to {self.address} without taking "
                    "it", what))

    def _on_break(self):
        super()._on_break()
        # At-least-once: what was written and not settled goes again, first and in order.
        resend = list(self._unsettled)
        self._unsettled.clear()
        self._pending.extendleft(reversed(resend))

    def _fail_waiters(self, error):
        waiting = list(self._unsettled) + list(self._pending)
        self._unsettled.clear()
        self._pending.clear()
        for outgoing in waiting:
            if not outgoing.result.called:
                outgoing.result.errback(error)


class _Delivery:
    __slots__ = ("receiver", "link", "delivery_id", "settled", "consumed")

    def __init__(self, receiver, link, delivery_id):
        self.receiver = receiver
        self.link = link
        self.delivery_id = delivery_id
        self.settled = False
        self.consumed = False


class Receiver(_Link):
    """Receives messages from one address (see L{Connection.receiver}).

    @ivar flow: its L{ConsumerFlow} (held, credit).
    @ivar received: messages that arrived on it so far.
    """

    kind = "receiver"

    def __init__(self, connection, address, *, callback, flow, ack_mode, selector,
                 durable_name, dynamic):
        super().__init__(connection, address)
        if durable_name:
            self.name = durable_name
            self._ends_for_good = False
        self.callback = callback
        self.flow = flow
        self.ack_mode = ack_mode
        self.selector = selector
        self.durable_name = durable_name
        self.dynamic = dynamic
        self.received = 0
        self._queue = collections.deque()      # messages waiting for get()
        self._waiters = collections.deque()    # get() Deferreds waiting for messages
        self._lazy = []                        # DUPS_OK: consumed, not settled yet
        self._lazy_timer = None
        self._batch = max(1, flow.limit // 4)

    def __repr__(self):
        return f"<Receiver {self.address} {self.ack_mode}>"

    @staticmethod
    def _terminus(attach):
        return attach.source

    def _attach(self, session):
        link = self._link = session.attach_link(self.name, RECEIVER)
        link.context = self
        filters = None
        if self.selector:
            filters = {Symbol("jms-selector"): Described(SELECTOR_FILTER, self.selector)}
        durable = bool(self.durable_name)
        source = Source(address=None if self.dynamic else self.address,
                        durable=2 if durable else 0,
                        expiry_policy=Symbol("never") if durable else None,
                        dynamic=self.dynamic or None, filter=filters)
        link.attach(source=source, target=Target(address=self._connection.client_id),
                    snd_settle_mode=SND_UNSETTLED)

    def unsubscribe(self):
        """Close the receiver and end its durable subscription at the broker (what
        C{close} keeps)."""
        return self._detach(True)

    def _ready_now(self, link):
        if self.dynamic:
            self.address = str(link.remote.source.address)
        if self.selector and not (link.remote.source.filter or {}):
            link.detach(closed=True)
            self._fail(LinkError(f"the broker does not apply the selector of the "
                                 f"receiver from {self.address}", "amqp:not-implemented"))
            return
        self._connection._top_up_all(self)

    def _top_up(self):
        if self._attached_now() and not self.closed:
            credit = self.flow.top_up()
            if credit is not None:
                self._link.flow(credit)

    def _pump(self):
        pass   # a receiving link has no credit of its own to use

    def _on_message(self, event):
        self.received += 1
        self.flow.received()
        delivery = _Delivery(self, event.link, event.delivery_id)
        try:
            message = ReceivedMessage(event.payload, self, delivery)
        except Exception as e:
            # Not a message we can read: give it back as undeliverable here, go on.
            log.warn("mqgate client: unreadable message from {address}: {error}",
                     address=self.address, error=e)
            event.link.settle(event.delivery_id, Rejected())
            self.flow.settled()
            self._connection._top_up_all(self)
            return
        if event.settled:
            delivery.settled = True
            self.flow.settled()
        else:
            self._connection._unacked[delivery] = None
        if self.callback is not None:
            self._run_callback(message, delivery)
        elif self._waiters:
            self._hand_over(self._waiters.popleft(), message)
        else:
            self._queue.append(message)
        self._connection._top_up_all(self)

    def _run_callback(self, message, delivery):
        try:
            self.callback(message)
        except Exception:
            log.failure("mqgate client: the callback of the receiver from {address} "
                        "failed; the message goes back for redelivery",
                        address=self.address)
            if self.ack_mode != CLIENT:
                self._settle(delivery, Modified(delivery_failed=True))
            return
        self._consumed(delivery)

    def _hand_over(self, waiting, message):
        # Settled first: the waiter may close the connection as soon as it has it.
        self._consumed(message._delivery)
        waiting.callback(message)

    def _consumed(self, delivery):
        """The application has the message: settle it as the ack mode says."""
        delivery.consumed = True
        if self.ack_mode == AUTO:
            self._settle(delivery)
        elif self.ack_mode == DUPS_OK:
            self._lazy.append(delivery)
            if len(self._lazy) >= self._batch:
                self._settle_lazy()
            elif self._lazy_timer is None:
                self._lazy_timer = self._connection.reactor.callLater(
                    DUPS_OK_DELAY, self._settle_lazy)

    def _settle_lazy(self):
        if self._lazy_timer is not None and self._lazy_timer.active():
            self._lazy_timer.cancel()
        self._lazy_timer = None
        lazy, self._lazy = self._lazy, []
        for delivery in lazy:
            self._settle(delivery)
        self._connection._top_up_all(self)
        self._connection.flush()

    def _settle(self, delivery, state=None):
        if delivery.settled:
            return
        delivery.settled = True
        self._connection._unacked.pop(delivery, None)
        if delivery.link is not self._link:
            return   # from a transport that is gone: the broker redelivers it
        delivery.link.settle(delivery.delivery_id, state)
        self.flow.settled()

    def get(self, timeout=None):
        """The next message (a Deferred), or None after C{timeout} seconds without one.

        In AUTO mode the message is settled as it is handed over."""
        if self.callback is not None:
            raise ClientError(f"the receiver from {self.address} has a callback; get() "
                              "is for receivers without one")
        if self._queue:
            message = self._queue.popleft()
            self._consumed(message._delivery)
            self._connection._top_up_all(self)
            self._connection.flush()
            return defer.succeed(message)
        if self.closed:
            return defer.fail(self.error or LinkError(f"the receiver from {self.address} "
                                                      "is closed"))
        waiting = defer.Deferred(lambda d: self._forget(d))
        self._waiters.append(waiting)
        if timeout is not None:
            timer = self._connection.reactor.callLater(timeout, self._timed_out, waiting)
            waiting.addBoth(_cancel_timer, timer)
        waiting.addBoth(self._after_hand_over)
        return waiting

    def _after_hand_over(self, result):
        self._connection._top_up_all(self)
        self._connection.flush()
        return result

    def _forget(self, waiting):
        if waiting in self._waiters:
            self._waiters.remove(waiting)

    def _timed_out(self, waiting):
        if not waiting.called:
            self._forget(waiting)
            waiting.callback(None)

    def _on_settled(self, deliveries, state):
        pass   # we never send on a receiving link

    def _on_break(self):
        super()._on_break()
        # What the broker gave the old link is requeued there and comes again.
        self._queue.clear()
        self._lazy = []
        self.flow.reset()

    def _closed_now(self):
        super()._closed_now()
        self.flow.close()

    def _fail_waiters(self, error):
        waiters, self._waiters = self._waiters, collections.deque()
        for waiting in waiters:
            if not waiting.called:
                waiting.errback(error)


def _cancel_timer(result, timer):
    if timer.active():
        timer.cancel()
    return result
