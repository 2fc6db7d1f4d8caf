"""
The one place where mqgate is wired together (docs/design.md): settings in, a MultiService out.

Children are added in dependency order (the core first, listeners last), so that
MultiService, which stops its children in reverse, stops accepting before anything they
depend on goes away (design rule 6).
"""

import gc
import os
import signal
import socket

from twisted.application import service
from twisted.internet import defer
from twisted.internet.threads import deferToThreadPool
from twisted.logger import ILogObserver, Logger
from twisted.python.threadpool import ThreadPool

from mqgate import __version__, sniff
from mqgate.admin.commands import admin_commands
from mqgate.admin.requests import AdminContext, AdminRequests
from mqgate.amqp.message import EncodedMessage, dead_copy, parse_message
from mqgate.amqp.types import Symbol, Timestamp
from mqgate.capture.service import capture_index_from_settings
from mqgate.config.schema import RETIRED_ANONYMOUS_KEY, SERVICES
from mqgate.core.broker import Broker, CoreConfig
from mqgate.core.dead import TIME as DEAD_TIME
from mqgate.core.expiry import ExpiryReaper
from mqgate.core.paging import Pager
from mqgate.core.persistence import Persistence
from mqgate.core.transactions import TransactionLimits as CoreTransactionLimits
from mqgate.egress.clients import ClientRegistry
from mqgate.egress.profiles import PREFIX as CLIENT_PROFILE_PREFIX, profiles_from_settings
from mqgate.errors import ConfigError
from mqgate.glue.amqp import GlueConfig
from mqgate.glue.egress import EgressContext
from mqgate.glue.ingress import IngressBudget
from mqgate.glue.session import broker_message
from mqgate.glue.stomp import StompGlueConfig, TransactionLimits
from mqgate.glue.stomp_mapping import RenderLimits
from mqgate.metrics.topics import MetricsTopics, TopicSettings
from mqgate.metrics.log import MetricsLogService
from mqgate.metrics.snapshot import MetricsSources
from mqgate.net.amqp import AmqpServerFactory, Flusher
from mqgate.net.connections import ConnectionRegistry
from mqgate.net.control import BrokerControl
from mqgate.net.loadwatch import LoadFactorService
from mqgate.net.memory_watch import MemoryWatchService
from mqgate.net.ping import PingService
from mqgate.net.pool import LoginSlots, ServicePool
from mqgate.net.portmapper import PortMapperFactory
from mqgate.net.services import ConnectionService, ServiceRegistry, endpoint_description
from mqgate.net.stomp import StompServerFactory
from mqgate.net.tls import TlsMaterialError, load_context_factory, server_endpoint
from mqgate.net.unify import PortUnificationFactory
from mqgate.portmap.table import render_table
from mqgate.security.access_control import (
    Reloadables, RuleFileWatcher, RuleSet, ServiceAccess, ensure_rule_file)
from mqgate.security.audit import (
    NO_AUDIT, AuditingAuthenticator, AuditTrail, LogSink, RotatingFile)
from mqgate.security.auth import FileAuthenticator, LoginPolicy
from mqgate.security.authcache import AuthCache
from mqgate.security.guard import FailureThrottle, LoginGuard
from mqgate.security.keytool import CERT_FILE, KEY_FILE
from mqgate.security.passfile import check_passfile, find_password
from mqgate.security.users import (
    UserRepository, default_password_warnings, ensure_repository)
from mqgate.core.capture import CaptureBounds, CaptureConfig, Captures
from mqgate.core.capture_sinks import CountingSink
from mqgate.core.runtime import restore as restore_runtime
from mqgate.core.runtime import snapshot as snapshot_runtime
from mqgate.store.factory import open_store
from mqgate.store.runtime_catalog import RuntimeCatalog
from mqgate.web.capture import CaptureResource
from mqgate.web.site import HTTP, HTTPS, MadeAtFirstRequest, web_endpoint, web_service

__all__ = ["build_broker", "BrokerService"]

log = Logger(namespace="mqgate")

# The services this version can run; the others of S1.1 come with their issues.
_RUNNABLE = ("jms", "admin", "stomp", "ssljms", "ssladmin", "httpadmin", "httpsadmin",
             "httpjms", "httpsjms")


class BrokerService(service.MultiService):
    """The whole broker: says hello and goodbye, and holds what the children share.

    With a L{store_service}, starting is: recover the store and rebuild the broker from
    it (S3.1), then start the children, listeners included, so that no client connects
    to a half-recovered broker; stopping is: stop the children (connections closed),
    then close the store (design rule 6).

    @ivar store_service: the L{mqgate.store.factory.StoreService}, or C{None}.
    """

    store_service = None
    #: the L{mqgate.capture.service.CaptureIndexService} (S7.5), or None when the
    #: capture index is off; capture subscriptions feed its C{index}.
    capture_index = None
    #: the L{mqgate.net.control.BrokerControl} of the admin commands (S11.1), or None.
    control = None
    #: the audit trail (S4.8): L{NO_AUDIT} when mqgate.audit.enabled is false.
    audit = NO_AUDIT
    #: the log observer made from the mqgate.log.* settings (S5.2) by mqgate.tap, and
    #: where it writes, for the banner; None: twistd's own.
    log_observer = None
    log_destination = "twistd's log"

    def __init__(self, settings, broker, flusher, reactor):
        super().__init__()
        self.settings = settings
        self.broker = broker
        self.flusher = flusher
        self._reactor = reactor
        self.pools = {}   # service name -> its ServicePool (S1.6), for admin and metrics
        self.egress = None   # the EgressContext: clients, profiles, event counts (S9)

    def setServiceParent(self, parent):
        # twistd asks the application for its log observer (an ILogObserver component)
        # after making this service and before it starts logging (S5.2).
        if self.log_observer is not None and hasattr(parent, "setComponent"):
            parent.setComponent(ILogObserver, self.log_observer)
        return super().setServiceParent(parent)

    def startService(self):
        log.info("mqgate {version} starting: instance {instance}, data in {home}, "
                 "log to {where}", version=__version__, instance=self.settings.instance,
                 home=self.settings.instance_dir, where=self.log_destination)
        self._reactor.callWhenRunning(self._running)
        if self.store_service is None:
            self._audit_destinations()
            super().startService()
            self._started = defer.succeed(None)
            return
        # twistd calls this before the reactor runs: the file store recovers inline
        # (the Deferred has fired when recover() returns), a store that needs the
        # reactor recovers once it runs, and the listeners start after either way.
        service.Service.startService(self)
        d = self._started = self.store_service.recover()
        d.addCallback(self._recovered)
        d.addCallbacks(lambda _: super(BrokerService, self).startService(),
                       self._not_recovered)

    def _recovered(self, recovered):
        summary = self.broker.persistence.restore(self.broker, recovered)
        log.info("recovered {messages} persistent messages, held by {holding} of the "
                 "{destinations} stored destinations and {durables} durable "
                 "subscriptions, from the {store}", messages=summary.messages,
                 holding=summary.holding, destinations=summary.destinations,
                 durables=summary.durables, store=self.store_service.description)
        for warning in summary.warnings:
            log.warn("store recovery: {warning}", warning=warning)
        self._audit_destinations()

    def _audit_destinations(self):
        # After recovery: the destinations restored were audited when they were made.
        audit = self.audit

        def on_destination(event, kind, name, user):
            audit.record(f"destination.{event}", "ok", user=user, dest_type=kind,
                         name=name)

        self.broker.on_destination = on_destination

    def _not_recovered(self, failure):
        self._unrecovered = True
        log.critical("mqgate cannot start: recovering the {store} failed: {why}",
                     store=self.store_service.description, why=failure.getErrorMessage(),
                     log_failure=failure)
        self._reactor.callWhenRunning(self._reactor.stop)

    def _running(self):
        # SIGTERM is how operators and init systems ask for an orderly stop (S0.4), so
        # it ends with exit code 0. Twisted's own handler would re-raise the signal
        # after shutdown and make every clean stop look like a kill. Installed once the
        # reactor runs, after Twisted's handlers, so it replaces them for SIGTERM only.
        signal.signal(signal.SIGTERM, self._sigterm)
        if self.store_service is not None:
            self.store_service.reactor_running()
        self._started.addCallback(self._ready)

    def _ready(self, _):
        if not getattr(self, "_unrecovered", False):
            _collect_less()
            log.info("mqgate ready")

    def _sigterm(self, signum, frame):
        if self.control is not None:
            self._reactor.callFromThread(self.control.stop_for_good)
        self._reactor.callFromThread(self._reactor.stop)

    def stopService(self):
        log.info("mqgate stopping: closing connections")
        d = super().stopService()

        if self.store_service is not None:
            d.addBoth(self._close_store)

        def stopped(result):
            self.flusher.stop()
            for pool in self.pools.values():
                pool.stop()
            log.info("mqgate stopped")
            return result

        return d.addBoth(stopped)


    def _close_store(self, result):
        # After the children: no connection is left to use the store (rule 6); the
        # last turn's writes (removals of settled messages) go to it before it closes.
        if self.broker.persistence is not None:
            self.broker.persistence.flush()
        d = self.store_service.stopService()
        return d.addBoth(lambda _: result)


def _collect_less():
    """Keep the garbage collector's full passes short and rare (S4.2's storms).

    What the broker holds at start-up (modules, settings, recovered messages) lives as
    long as the process: frozen, full collections no longer walk it. Connections are
    made of many small objects; with Python's default of a collection every 700 new
    objects, ten thousand connections logging in at once cost a full pass over all of
    them again and again, each a pause of the one thread every client waits on."""
    gc.freeze()
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, gen1, gen2)


#: New objects between two collections of the youngest generation (Python's default is
#: 700): connections and messages are allocated in bursts of thousands.
_GC_YOUNG_THRESHOLD = 20_000


def _instance_dir(settings):
    path = settings.instance_dir
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _stored_bytes(message):
    """What the store keeps of a persistent message: its encoded AMQP bytes (STOMP
    messages are converted to that form at the edge, design rule 2)."""
    return message.payload.data


def _stored_messages(clock):
    """Rebuilds a stored message at recovery exactly as the glue built it on arrival.
    The header's ttl counts again from the restart; an absolute expiry time is kept."""
    return lambda data: broker_message(parse_message(data), clock)


def _delivery_semantics(settings):
    """The CoreConfig fields of S2.3's other limits and S2.4's dead message queue."""
    prefix = "mqgate.autocreate.destination."
    return dict(
        max_bytes_per_msg=settings[prefix + "maxBytesPerMsg"],
        max_num_producers=settings[prefix + "maxNumProducers"],
        consumer_flow_limit=settings[prefix + "consumerFlowLimit"],
        use_dmq=settings[prefix + "useDMQ"],
        max_delivery_count=settings["mqgate.destination.max_delivery_count"],
        dmq_max_num_msgs=settings["mqgate.destination.DMQ.maxNumMsgs"],
        dmq_max_total_msg_bytes=settings["mqgate.destination.DMQ.maxTotalMsgBytes"],
        dmq_truncate_body=settings["mqgate.destination.DMQ.truncateBody"],
        log_dead_messages=settings["mqgate.destination.logDeadMsgs"])


def _dead_annotations(payload, annotations, keep_body):
    """A dead message's copy with its annotations (S2.4): symbol keys (AMQP 1.0 Part 3
    section 3.2.3), the time of death an AMQP timestamp."""
    if not isinstance(payload, EncodedMessage):
        return payload
    amqp = {Symbol(key): Timestamp(value) if key == DEAD_TIME else value
            for key, value in annotations.items()}
    return parse_message(dead_copy(payload, amqp, keep_body))


class _ReaperService(service.Service):
    """Runs the expiry reaper (S2.2) while the broker runs."""

    def __init__(self, reaper):
        self.reaper = reaper

    def startService(self):
        super().startService()
        self.reaper.start()

    def stopService(self):
        self.reaper.stop()
        return super().stopService()


def _authenticator(settings, reactor):
    """The login checker of the configured user repository (S4.2), behind the login
    guard and the authentication cache; the service running its thread pool; and the
    admin C{reload} of the repository (C{() -> (ok, text)}), or None when it has none."""
    if settings["mqgate.authentication.basic.user_repository"] == "ldap":
        return _ldap_authenticator(settings, reactor)
    path = settings.user_repository_path
    made = {}   # the default users' hashes, if the repository is new
    warnings = ensure_repository(path, made=made)

    def warn(message):
        # Called on a login thread when a changed repository does not parse.
        reactor.callFromThread(log.warn, "{warning}", warning=message)

    repository = UserRepository.load(path, warn=warn)
    warnings += default_password_warnings(repository, known=made)
    for warning in warnings:
        log.warn("{warning}", warning=warning)

    # The slow hashes run in a pool of their own, of fewer threads than CPUs: a login
    # flood then neither fills the reactor's pool nor takes every core from the reactor.
    pool = ThreadPool(minthreads=0, maxthreads=_check_threads(settings),
                      name="mqgate-login")

    def run_in_thread(f, *args):
        return deferToThreadPool(reactor, pool, f, *args)

    # Whether guests may log in is each service's LoginPolicy (S4.2).
    checker = FileAuthenticator(repository, run_in_thread)
    guard = _login_guard(checker, settings, reactor)

    def generation():
        # A login the cache answers never reaches the repository, so the cache asks it
        # to look at its file: one stat a second at most, on the reactor thread (a
        # changed file, a few KiB, is then read here too), so that a password changed
        # with `mqgate usermgr` ends the old one's cached logins at once.
        repository.refresh()
        return repository.generation

    cache = _auth_cache(guard, settings, reactor, generation=generation)

    def reload_users():
        # The admin `reload` request: re-read the repository now. A small file, read
        # and parsed without hashing anything, so the reactor does it in one go.
        try:
            changed = repository.reload()
        except ConfigError as e:
            return False, f"kept the previous users: {e}"
        return True, ("users changed" if changed else "no change")

    return cache, checker, _ThreadPoolService(pool), reload_users


def _auth_cache(authenticator, settings, reactor, generation=None):
    """Successful logins remembered in front of C{authenticator} (S4.2), when enabled.

    The cache goes outside the login guard: logins it answers, or that wait on another
    login's check of the same credentials, cost no check and take none of the guard's
    room; the checks it does ask for are bounded and slowed by the guard as before.
    C{generation} returns the user repository's generation (the cache empties when it
    changes); None: the cache only expires."""
    if not settings["mqgate.authentication.cache.enabled"]:
        return authenticator
    extra = {} if generation is None else {"generation": generation}
    return AuthCache(authenticator, reactor,
                     ttl=settings["mqgate.authentication.cache.ttl"],
                     max_entries=settings["mqgate.authentication.cache.max_entries"],
                     **extra)


def _ldap_authenticator(settings, reactor):
    """The LDAP repository (S4.4). Its checks wait on the network, not the CPU, so
    they get a pool of their own sized by the LDAP setting rather than by the CPUs."""
    # Imported by the brokers that use LDAP only.
    from mqgate.security.ldap import (
        PASSWORD_KEY as LDAP_PASSWORD_KEY, LdapAuthenticator, LdapConfig, LdapDirectory)
    principal = settings["mqgate.user_repository.ldap.principal"]
    password = None
    if principal:
        password = find_password(settings, LDAP_PASSWORD_KEY,
                                 f"Password of the LDAP principal {principal}: ")
    config = LdapConfig.from_settings(settings, password)
    log.info("users are checked against the LDAP directory {directory}",
             directory=config.describe())
    pool = ThreadPool(minthreads=0,
                      maxthreads=settings["mqgate.user_repository.ldap.max_connections"],
                      name="mqgate-ldap")

    def run_in_thread(f, *args):
        return deferToThreadPool(reactor, pool, f, *args)

    directory = LdapDirectory(config)
    checker = LdapAuthenticator(directory, run_in_thread, reactor)
    # At stop, checks still queued or waiting on a silent directory end at once
    # instead of holding the shutdown for their timeouts.
    # The directory cannot say when a user changes: cached logins only expire (ttl).
    return (_auth_cache(_login_guard(checker, settings, reactor), settings, reactor),
            checker, _ThreadPoolService(pool, before_join=directory.close), None)


def _audit_trail(settings, reactor):
    """The audit trail (S4.8) and the thread pool its file is written on (or None)."""
    if not settings["mqgate.audit.enabled"]:
        return NO_AUDIT, None
    limit = settings["mqgate.audit.max_pending"]
    name = settings["mqgate.audit.file"]
    if not name:
        return AuditTrail(LogSink(), reactor, max_pending=limit,
                          description="the broker's log"), None
    path = name if os.path.isabs(name) else os.path.join(
        settings.instance_dir, "log", name)
    # One thread: the batches are written in order, and a slow disk holds that thread
    # only, while the records wait (bounded) in the trail.
    pool = ThreadPool(minthreads=0, maxthreads=1, name="mqgate-audit")
    trail = AuditTrail(RotatingFile(path), reactor,
                       lambda f, *args: deferToThreadPool(reactor, pool, f, *args),
                       max_pending=limit, description=path)
    log.info("audit trail in {path}", path=path)
    return trail, pool


def _check_threads(settings):
    """Threads for password checks: the setting, or one fewer than the CPUs (at least
    one) when it is 0."""
    threads = settings["mqgate.authentication.check_threads"]
    return threads or max(1, (os.cpu_count() or 2) - 1)


class _ThreadPoolService(service.Service):
    """Starts a thread pool with the broker and stops it (joining its threads) after
    the services that use it, which stop first (they were started after it).

    @param before_join: called before the threads are joined, to cut short work that
        would otherwise hold the stop (the LDAP checks of a silent directory).
    """

    def __init__(self, pool, before_join=None):
        self.pool = pool
        self._before_join = before_join

    def startService(self):
        super().startService()
        self.pool.start()

    def stopService(self):
        super().stopService()
        if self._before_join is not None:
            self._before_join()
        self.pool.stop()


def _login_guard(checker, settings, reactor):
    """The bounds and the slowing down of failed logins around C{checker} (S4.2)."""
    throttle = FailureThrottle(
        reactor, free_failures=settings["mqgate.authentication.failures.free"],
        window=settings["mqgate.authentication.failures.window"],
        max_delay=settings["mqgate.authentication.failures.max_delay"],
        max_sources=settings["mqgate.authentication.failures.max_addresses"])
    # An attempt slowed down past three quarters of the login deadline is refused at
    # once: its answer would come too close to the deadline (or after it) to be heard.
    return LoginGuard(
        checker, reactor, throttle=throttle,
        max_pending=settings["mqgate.authentication.max_pending_checks"],
        horizon=0.75 * settings["mqgate.authentication.client.response.timeout"])


def build_broker(settings, reactor):
    """Build the broker's MultiService from C{settings}; C{reactor} is the clock and I/O."""
    _refuse_retired_keys(settings)
    _instance_dir(settings)
    if settings["mqgate.passfile.enabled"]:
        check_passfile(settings.passfile_path)   # S4.6: not one others can read
    store_service = open_store(settings, reactor)   # S3.2; recovered in startService
    audit, audit_threads = _audit_trail(settings, reactor)
    broker = Broker(reactor, CoreConfig(
        autocreate_queue=settings["mqgate.autocreate.queue"],
        autocreate_topic=settings["mqgate.autocreate.topic"],
        default_type=settings["mqgate.destination.default_type"],
        max_num_msgs=settings["mqgate.autocreate.destination.maxNumMsgs"],
        max_total_msg_bytes=settings["mqgate.autocreate.destination.maxTotalMsgBytes"],
        limit_behavior=settings["mqgate.autocreate.destination.limitBehavior"],
        max_count=settings["mqgate.system.max_count"],
        max_size=settings["mqgate.system.max_size"],
        max_message_size=settings["mqgate.message.max_size"],
        max_destinations=settings["mqgate.system.max_destinations"],
        max_name_length=settings["mqgate.destination.max_name_length"],
        max_topic_levels=settings["mqgate.topic.max_levels"],
        max_active_consumers=settings["mqgate.autocreate.queue.maxNumActiveConsumers"],
        max_backup_consumers=settings["mqgate.autocreate.queue.maxNumBackupConsumers"],
        topic_default_persistence=settings["mqgate.topic.default_persistence"],
        **_delivery_semantics(settings)),
        persistence=Persistence(store_service.store, _stored_bytes, _stored_messages(reactor),
                                clock=reactor),
        audit=audit)
    broker.set_annotate(_dead_annotations)
    captures = _capture(settings, broker, reactor)
    # S7.5: the capture index takes every capture subscription's copies (those the
    # runtime catalog made again too); None when it is off.
    capture = capture_index_from_settings(settings, reactor, captures.bounds_of)
    if capture is not None:
        captures.use_sink(capture.index)
    # S2.6: the glues ask it before granting producer credit; the timer lets it fall.
    memory_watch = MemoryWatchService.from_settings(settings, broker)
    broker.memory = memory_watch.memory
    memory_watch.pager = Pager(broker, broker.memory,
                               keep=settings["mqgate.memory.page_keep"],
                               reads=settings["mqgate.memory.page_reads"])
    broker.transaction_limits = CoreTransactionLimits(
        max_messages=settings["mqgate.transaction.max_messages"],
        max_bytes=settings["mqgate.transaction.max_bytes"],
        max_per_connection=settings["mqgate.transaction.max_per_connection"],
        timeout=settings["mqgate.transaction.timeout"])
    authenticator, identities, login_threads, reload_users = _authenticator(
        settings, reactor)
    authenticator = AuditingAuthenticator(authenticator, audit)
    flusher = Flusher(reactor)
    top = BrokerService(settings, broker, flusher, reactor)
    top.store_service = store_service
    top.audit = audit
    _ReaperService(ExpiryReaper(broker, reactor,
                                settings["mqgate.message.expiration.interval"])
                   ).setServiceParent(top)
    # First in, last out: the trail records until every listener has stopped.
    if audit_threads is not None:
        _ThreadPoolService(audit_threads).setServiceParent(top)
    if audit is not NO_AUDIT:
        audit.setServiceParent(top)
    login_threads.setServiceParent(top)
    registry = ServiceRegistry()
    portmapper = _port_mapper(settings, reactor, registry)
    portmapper.setServiceParent(top)
    # S9.7: the connected clients (each logged-in connection registers) and the
    # client profiles; the admin service's show commands read both (S11.1).
    clients = ClientRegistry()
    profiles = profiles_from_settings(settings.family(CLIENT_PROFILE_PREFIX))
    reloadables = top.reloadables = Reloadables()
    access = _access_control(settings, reactor, reloadables, audit, top)
    if reload_users is not None:
        reloadables.add("users", reload_users)
    # S11.1: the services, the connections and the broker's stop and restart, for the
    # svc, cxn and bkr commands; it is given the services once they are made, below.
    connections = ConnectionRegistry()
    control = top.control = BrokerControl(
        reactor, instance=settings.instance, connections=connections, broker=broker,
        store=store_service.description if store_service is not None else None)
    context = AdminContext(broker, clients, profiles, reloadables, control=control)
    # S5.1, S5.4: what the metrics commands and /metrics read beside the core.
    context.metrics = MetricsSources(reactor, reactor.seconds(), pools=top.pools,
                                     store=store_service.store,
                                     connections=connections)
    context.metrics_exposition = _exposition_of(context)
    # Opened before the services that show it, closed after them.
    top.capture_index = capture
    if capture is not None:
        capture.setServiceParent(top)
        context.capture_index = capture.index
    # S5.3: the metrics topics read the same snapshots; started before the services.
    _metrics_topics(settings, context, reactor, portmapper).setServiceParent(top)
    admin_requests = AdminRequests(context, admin_commands(reloadables.names()),
                                   audit=audit)
    egress = top.egress = EgressContext(
        reactor, clients=clients, profiles=profiles,
        slow_threshold=settings["mqgate.egress.slow_subscriber.threshold"] / 100,
        ingress_limits=(settings["mqgate.ingress.guaranteed.max_message_size"],
                        settings["mqgate.ingress.direct.max_message_size"]),
        ingress_budget=IngressBudget(settings["mqgate.ingress.buffer.budget"]))
    # TLS certificate users are looked up without the login guard: there is no
    # password to check or slow down (S4.7).
    shared = dict(settings=settings, broker=broker, authenticator=authenticator,
                  reactor=reactor, flusher=flusher, admin_requests=admin_requests,
                  egress=egress, access=access, identities=identities, audit=audit)
    services = []
    web_services = []   # listed by the svc and bkr commands; no pings, no pools
    for name in settings["mqgate.service.activelist"]:
        if name not in _RUNNABLE:
            log.warn("service {name} is not available in this version; skipped", name=name)
            continue
        kind, transport = SERVICES[name]
        if transport in (HTTP, HTTPS) and kind == "ADMIN":
            web_services.append(_admin_api_service(name, top, registry, **shared))
            web_services[-1].setServiceParent(top)
            continue
        if transport in (HTTP, HTTPS):
            # WebSocket and the HTTP tunnel (S10.3): broker connections carried by HTTP.
            services.append(_gateway_service(name, top, registry, **shared))
            services[-1].setServiceParent(top)
            _attach_registry(name, services[-1], connections)
            context.metrics.services[name] = services[-1]
            continue
        host, port = settings.service_address(name)
        protocols = settings[f"mqgate.{name}.protocols"]
        factory = _service_factory(name, protocols, **shared)
        _attach_pool(top, name, factory, settings, reactor)
        if transport == "tls":
            endpoint = server_endpoint(reactor, host, port, _tls_context(settings, name),
                                       backlog=settings[f"mqgate.{name}.backlog"])
        else:
            endpoint = endpoint_description(host, port, settings[f"mqgate.{name}.backlog"])
        services.append(ConnectionService(
            name, reactor, endpoint, factory,
            protocol_name="+".join(p.upper() for p in protocols),
            registry=registry, entry=(transport, kind),
            details=_service_details(settings, name)))
        services[-1].setServiceParent(top)
        _attach_registry(name, services[-1], connections)
        context.metrics.services[name] = services[-1]
    control.services = [portmapper, *services, *web_services]
    PingService(settings["mqgate.ping.interval"], services, reactor).setServiceParent(top)
    load_watch = LoadFactorService.from_settings(settings, egress, reactor)
    load_watch.setServiceParent(top)
    context.metrics.load_factor = load_watch.load_factor   # the console's overview
    memory_watch.setServiceParent(top)
    MetricsLogService(settings["mqgate.metrics.interval"], context, reactor,
                      settings["mqgate.metrics.enabled"]).setServiceParent(top)
    return top


def _exposition_of(context):
    """C{metrics_exposition} of the admin context: the Prometheus text of C{/metrics}
    (S5.4). prometheus_client is imported at the first scrape, not by every start."""

    def exposition():
        from mqgate.metrics.prometheus import exposition_of
        return exposition_of(context)()

    return exposition


def _capture(settings, broker, reactor):
    """Capture subscriptions (S7.2) and the runtime catalog (S7.1): what was made at
    run time is made again, then every change is written."""
    config = CaptureConfig(
        node=settings.instance, broker_role=settings["mqgate.capture.broker-role"],
        writers=tuple(settings["mqgate.capture.writers"]),
        bounds=CaptureBounds(
            ring_size=settings["mqgate.capture.ring_size"],
            expiry_delay=float(settings["mqgate.capture.expiry_delay"]),
            rate=float(settings["mqgate.capture.rate"]),
            body_bytes=settings["mqgate.capture.body_max"],
            retention=float(settings["mqgate.capture.retention"]),
            stored_bytes=settings["mqgate.capture.stored_max"]))
    # Until a capture index is configured, a sink that counts; the index takes over
    # with captures.use_sink().
    captures = broker.captures = Captures(broker, reactor, config, None)
    captures.sink = CountingSink(captures.bounds_of)
    catalog = RuntimeCatalog(os.path.join(settings.instance_dir, "runtime",
                                          "catalog.json"))
    document = catalog.load()
    if document is not None:
        for warning in restore_runtime(broker, document):
            log.warn("runtime catalog {path}: {warning}", path=catalog.path,
                     warning=warning)
        log.info("made again what was made at run time: {diverts} diverts, {captures}"
                 " capture subscriptions", diverts=len(broker.diverts.table),
                 captures=len(list(captures)))

    def changed():
        catalog.save(snapshot_runtime(broker))

    broker.on_runtime_change = captures.on_change = changed
    return captures


#: How long after a recorded HTTP admin login the same one goes unrecorded (seconds).
HTTP_LOGIN_QUIET_SECONDS = 300.0


def _admin_api_service(name, top, registry, *, settings, reactor, admin_requests,
                       authenticator, access, audit, **_):
    """The HTTP admin API on service C{name} (S11.2): the admin service's commands and
    context, the broker's logins, the service's access rules."""
    _kind, transport = SERVICES[name]
    host, port = settings.service_address(name)
    tls = _tls_context(settings, name) if transport == HTTPS else None
    capture = None
    if top.capture_index is not None:
        capture = CaptureResource(
            top.capture_index.index, top.capture_index.hub, reactor, broker=top.broker,
            heartbeat=settings["mqgate.capture.tail.heartbeat"],
            max_readers=settings["mqgate.capture.tail.max_readers"],
            max_backlog=settings["mqgate.capture.tail.backlog"])
    # Every HTTP request logs in: the trail records a user's first login from an
    # address, not one per request of a console polling the API.
    authenticator = authenticator.quiet_repeats(reactor, HTTP_LOGIN_QUIET_SECONDS)

    def api():
        # At the first request: the API's modules (klein) cost every start otherwise.
        from mqgate.web.admin import AdminApi, broker_health
        return AdminApi(admin_requests, authenticator, access=access.get(name),
                        service=name, audit=audit, health=broker_health(top),
                        capture=capture, clock=reactor).resource()

    return web_service(
        name, reactor, web_endpoint(reactor, transport, host, port, tls_context=tls),
        MadeAtFirstRequest(api), transport=transport, kind="ADMIN", registry=registry,
        timeout=settings["mqgate.adminapi.idle_timeout"],
        max_body=settings["mqgate.adminapi.max_body_size"],
        max_connections=settings["mqgate.adminapi.max_connections"])


def _gateway_service(name, top, registry, **shared):
    """The HTTP gateway service C{name} (httpjms, httpsjms; S1.1, S10.3): its carriers
    build their connections with the service's own protocol factory, pooled and
    bounded as a socket service's are.

    The gateway's modules (autobahn's among them) are imported here, by the brokers
    that run such a service: they cost every other broker's start a fifth of a second.
    """
    from mqgate.web.gateway import gateway_root, gateway_service
    settings, reactor = shared["settings"], shared["reactor"]
    _kind, transport = SERVICES[name]
    host, port = settings.service_address(name)
    tls = _tls_context(settings, name) if transport == HTTPS else None
    factory = _service_factory(name, settings[f"mqgate.{name}.protocols"], **shared)
    _attach_pool(top, name, factory, settings, reactor)
    endpoint = web_endpoint(reactor, transport, host, port,
                            backlog=settings[f"mqgate.{name}.backlog"], tls_context=tls)
    try:
        websocket = _gateway_children(name, factory, settings, reactor)
        tunnel = _tunnel_children(name, factory, settings, reactor)
        for path in websocket.keys() & tunnel.keys():
            raise ValueError(f"{path!r} is the HTTP tunnel's")
        root = gateway_root({**websocket, **tunnel})
    except ValueError as e:   # two carriers at one path
        raise ConfigError(f"mqgate.{name}.ws.path", settings[f"mqgate.{name}.ws.path"],
                          f"a path no other carrier of the service uses ({e})") from None
    return gateway_service(
        name, reactor, endpoint, root, factory, transport=transport, registry=registry,
        timeout=settings[f"mqgate.{name}.idle_timeout"],
        max_body=settings[f"mqgate.{name}.max_body_size"],
        max_connections=settings[f"mqgate.{name}.max_connections"],
        details=_service_details(settings, name))


def _gateway_children(name, factory, settings, reactor):
    """The carriers of gateway service C{name}: C{{path: resource}}."""
    from mqgate.ws.policy import parse_origins
    from mqgate.ws.server import ws_resource
    prefix = f"mqgate.{name}.ws"
    origins = settings[f"{prefix}.allowed_origins"]
    try:
        parse_origins(origins)
    except ValueError:
        raise ConfigError(f"{prefix}.allowed_origins", ",".join(origins),
                          "origins as scheme://host[:port] (http or https), "
                          "comma-separated, or *") from None
    return {
        settings[f"{prefix}.path"]: ws_resource(
            factory, service=name, reactor=reactor, secure=SERVICES[name][1] == HTTPS,
            allowed_origins=origins,
            max_message_size=settings[f"{prefix}.max_message_size"],
            ping_interval=settings[f"{prefix}.ping_interval"]),
    }


def _tunnel_children(name, factory, settings, reactor):
    """The HTTP tunnel of gateway service C{name} (S10.3), at its own path and at the
    source system's: one resource, so a connection id is known at both."""
    from mqgate.net.tunnel import PATHS as TUNNEL_PATHS, TunnelResource
    _kind, transport = SERVICES[name]
    tunnel = TunnelResource(
        factory, reactor, service_name=name,
        pull_period=settings[f"mqgate.{name}.{transport}.pullPeriod"],
        connection_timeout=settings[f"mqgate.{name}.{transport}.connectionTimeout"])
    return {path: tunnel for path in TUNNEL_PATHS}


def _access_control(settings, reactor, reloadables, audit, top):
    """Access control (S4.1, S4.5): one L{RuleSet} per distinct rule file (installed
    with the shipped rules when missing), watched for changes by a service started
    before the listeners, and one L{ServiceAccess} per service.

    @return: C{service name -> ServiceAccess}.
    """
    directory = (settings["mqgate.accesscontrol.file.dirpath"]
                 or os.path.join(settings.instance_dir, "etc"))
    default_name = settings["mqgate.accesscontrol.file.filename"]
    rule_sets = {}
    access = {}
    for name, (kind, _transport) in SERVICES.items():
        enabled = settings[f"mqgate.{name}.accesscontrol.enabled"].lower()
        if not (enabled == "true" if enabled else settings["mqgate.accesscontrol.enabled"]):
            access[name] = ServiceAccess(name, kind, None, audit=audit, clock=reactor)
            continue
        filename = settings[f"mqgate.{name}.accesscontrol.file.filename"] or default_name
        path = os.path.join(directory, filename)
        if path not in rule_sets:
            try:
                created = ensure_rule_file(path)
            except OSError as e:
                raise ConfigError("mqgate.accesscontrol.file.dirpath", directory,
                                  "a directory where the access control file "
                                  f"{filename} can be created ({e.strerror})") from None
            for warning in created:
                log.info("{warning}", warning=warning)
            rule_sets[path] = RuleSet(path, audit=audit)
        access[name] = ServiceAccess(name, kind, rule_sets[path], audit=audit,
                                     clock=reactor)
    if rule_sets:
        RuleFileWatcher(rule_sets.values(), reactor).setServiceParent(top)
        reloadables.add("rules", lambda: _reload_all(rule_sets.values()))
    return access


def _reload_all(rule_sets):
    """Reload every rule file: C{(all ok, what happened to each)}."""
    results = [rule_set.reload() for rule_set in rule_sets]
    return all(ok for ok, _ in results), "; ".join(text for _, text in results)
def _refuse_retired_keys(settings):
    """A key this version replaced stops the start-up, naming its replacement: going on
    without it would change who may log in behind the operator's back."""
    if settings.source_of(RETIRED_ANONYMOUS_KEY) != "default":
        raise ConfigError(
            RETIRED_ANONYMOUS_KEY, settings[RETIRED_ANONYMOUS_KEY],
            "nothing: it was replaced by one key per service, "
            "mqgate.SERVICE.allow_anonymous (default false), e.g. "
            "mqgate.jms.allow_anonymous=true; remove this key",
            settings.source_of(RETIRED_ANONYMOUS_KEY))


def _login_policy(settings, name):
    """How clients of service C{name} may log in (S4.2, S4.7)."""
    kind, transport = SERVICES[name]
    tls = transport in ("tls", HTTPS)
    allow_anonymous = settings[f"mqgate.{name}.allow_anonymous"]
    allow_password = tls or settings[f"mqgate.{name}.sasl.plain.allow_cleartext"]
    if not (allow_password or allow_anonymous):
        raise ConfigError(
            f"mqgate.{name}.sasl.plain.allow_cleartext", "false",
            f"true while mqgate.{name}.allow_anonymous is false: otherwise no client can "
            f"log in to the {name} service (take it off mqgate.service.activelist "
            "instead)")
    return LoginPolicy(
        name, allow_anonymous=allow_anonymous, allow_password=allow_password,
        tls_services=tuple(other for other, (other_kind, other_transport)
                           in SERVICES.items()
                           if other_transport == "tls" and other_kind == kind),
        client_certificates=tls and settings[f"mqgate.{name}.ssl.client_auth"] != "none")


def _port_mapper(settings, reactor, registry):
    """The port mapper (S1.3): always running, first in its own table (FACTS 1.1)."""
    host, port = settings.portmapper_address()
    instance = settings.instance

    def table():
        return render_table(instance, registry.entries())

    return ConnectionService(
        "portmapper", reactor,
        endpoint_description(host, port, settings["mqgate.portmapper.backlog"]),
        PortMapperFactory(table, reactor), protocol_name="port mapper",
        registry=registry, entry=("tcp", "PORTMAPPER"))


def _metrics_topics(settings, context, reactor, portmapper):
    """The metrics topics' publisher (S5.3); its samples name the broker by its host
    and its port mapper's port, as the source system's do (FACTS 1.5)."""
    host = settings.portmapper_address()[0]
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()

    def identity():
        address = portmapper.address   # the port the OS chose, once listening
        if address is None:
            return host, settings.portmapper_address()[1]
        return host, address.port

    return MetricsTopics(context, reactor, TopicSettings.from_settings(settings),
                         identity=identity)


def _tls_context(settings, name):
    """The TLS context of a tls service, from the keystore made by `mqgate keytool`."""
    directory = settings.keystore_dir
    key_path = os.path.join(directory, KEY_FILE)
    cert_path = os.path.join(directory, CERT_FILE)
    if not (os.path.exists(key_path) and os.path.exists(cert_path)):
        raise ConfigError("mqgate.service.activelist", name,
                          f"a TLS service only with a key pair in {directory}: create one "
                          f"with `mqgate keytool --varhome {settings.varhome} --instance "
                          f"{settings.instance}`")
    client_auth = settings[f"mqgate.{name}.ssl.client_auth"]
    ca_key = f"mqgate.{name}.ssl.ca_file"
    ca_path = settings[ca_key] or None
    if client_auth != "none" and ca_path is None:
        raise ConfigError(ca_key, "", f"the PEM file of the CA certificates that sign "
                          f"client certificates, needed while mqgate.{name}.ssl.client_auth "
                          f"is {client_auth}")
    if client_auth == "none":
        ca_path = None
    try:
        return _load_tls(key_path, cert_path, None, client_auth, ca_path, ca_key)
    except TlsMaterialError:
        password = find_password(settings, "mqgate.keystore.password",
                                 f"Password of the TLS key {key_path}: ")
        if password is None:
            raise ConfigError("mqgate.keystore.password", "(not given)",
                              "the key's password in the password file "
                              "(mqgate.passfile.enabled=true) or typed at start-up") from None
        try:
            return _load_tls(key_path, cert_path, password, client_auth, ca_path, ca_key)
        except TlsMaterialError as e:
            raise ConfigError("mqgate.keystore.password", "(hidden)",
                              f"the password of {key_path} ({e.reason})") from None


def _load_tls(key_path, cert_path, password, client_auth, ca_path, ca_key):
    """L{load_context_factory}, a CA file that does not load named by its key."""
    try:
        return load_context_factory(key_path, cert_path, password,
                                    client_auth=client_auth, ca_path=ca_path)
    except TlsMaterialError as e:
        if ca_path is not None and e.path == ca_path:
            raise ConfigError(ca_key, ca_path, f"a readable PEM file of CA certificates "
                              f"({e.reason})") from None
        raise


def _attach_pool(top, name, factory, settings, reactor):
    """Give every protocol factory of service C{name} the service's one thread pool
    (S1.6): AMQP and STOMP on one port share its workers."""
    pool = top.pools[name] = ServicePool.from_settings(name, settings, reactor)
    # S4.2: the service's own room for sockets that have not logged in yet, taken by
    # the sniffer first when there is one and handed on with the connection.
    slots = LoginSlots(name, settings["mqgate.authentication.max_unauthenticated"], reactor)
    factory.login_slots = slots
    for inner in getattr(factory, "factories", {}).values() or (factory,):
        inner.pool = pool
        inner.login_slots = slots


def _attach_registry(name, service, connections):
    """List every connection of service C{name} in C{connections} (S11.1)."""
    for engine_factory in service.engine_factories():
        engine_factory.registry = connections
        engine_factory.service_name = name


def _service_details(settings, name):
    """What `query svc` shows of a service's settings (S11.1)."""
    details = {
        "backlog": settings[f"mqgate.{name}.backlog"],
        "protocols": ",".join(settings[f"mqgate.{name}.protocols"]),
        "allow_anonymous": settings[f"mqgate.{name}.allow_anonymous"],
    }
    if f"mqgate.{name}.threadpool_model" in settings:
        details.update(
            thread_model=settings[f"mqgate.{name}.threadpool_model"],
            min_threads=settings[f"mqgate.{name}.min_threads"],
            max_threads=settings[f"mqgate.{name}.max_threads"])
    return details


def _store_backlog(settings):
    """A connection's bound on messages waiting for the store (S2.7): (count, bytes)."""
    return (settings["mqgate.persist.max_unstored_messages"],
            settings["mqgate.persist.max_unstored_bytes"])


def _service_factory(name, protocols, *, settings, broker, authenticator, reactor,
                     flusher, egress, admin_requests=None, access=None,
                     identities=None, audit=NO_AUDIT):
    """The factory of one service: one protocol's, or a sniffing one over several."""
    kind, _transport = SERVICES[name]
    policy = _login_policy(settings, name)
    setup_timeout = settings["mqgate.authentication.client.response.timeout"]
    factories = {}
    if "amqp" in protocols:
        amqp = AmqpServerFactory(
            settings=settings, broker=broker, authenticator=authenticator, clock=reactor,
            flusher=flusher, container_id=f"mqgate:{settings.instance}", egress=egress,
            login_policy=policy, identities=identities, audit=audit,
            glue_config=GlueConfig(
                producer_credit=settings["mqgate.amqp.producer_credit"],
                max_message_size=settings["mqgate.message.max_size"],
                admin_only=(kind == "ADMIN"), service=name,
                access=(access or {}).get(name),
                admin_requests=admin_requests if kind == "ADMIN" else None,
                store_backlog=_store_backlog(settings),
                max_presettled_refusals=settings["mqgate.amqp.max_presettled_refusals"],
                client_id_takeover=settings["mqgate.amqp.client_id_takeover"]))
        factories[sniff.AMQP] = factories[sniff.AMQP_SASL] = amqp
    if "stomp" in protocols and kind == "NORMAL":
        heartbeat = settings["mqgate.stomp.heartbeat"]
        factories[sniff.STOMP] = StompServerFactory(
            broker=broker, authenticator=authenticator, clock=reactor, flusher=flusher,
            setup_timeout=setup_timeout, heartbeat=(heartbeat, heartbeat), egress=egress,
            max_unauthenticated_bytes=settings["mqgate.authentication.client.max_bytes"],
            login_policy=policy, identities=identities, audit=audit,
            glue_config=StompGlueConfig(
                max_message_size=settings["mqgate.message.max_size"], service=name,
                access=(access or {}).get(name),
                store_backlog=_store_backlog(settings),
                render_limits=RenderLimits(
                    max_value=settings["mqgate.stomp.mapping.max_value_size"],
                    max_total=settings["mqgate.stomp.mapping.max_headers_size"],
                    max_json_values=settings["mqgate.stomp.mapping.max_json_values"]),
                tx_limits=TransactionLimits(
                    max_open=settings["mqgate.stomp.transaction.max_open"],
                    max_frames=settings["mqgate.stomp.transaction.max_frames"],
                    max_bytes=settings["mqgate.stomp.transaction.max_bytes"],
                    max_connection_bytes=settings[
                        "mqgate.stomp.transaction.max_connection_bytes"])))
    distinct = set(factories.values())
    if len(distinct) == 1:
        return distinct.pop()   # one protocol: no need to look at the first bytes
    return PortUnificationFactory(factories, reactor, timeout=min(setup_timeout, 10.0))
