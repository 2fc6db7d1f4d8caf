"""Tests for the wiring in mqgate/service.py: settings in, a MultiService out (docs/design.md).

The reactor is a MemoryReactorClock: listening is recorded, not done, so nothing here
opens a socket or installs a signal handler (the SIGTERM hook is only ever stored in
C{whenRunningHooks}, never run).
"""

import os
import stat

import pytest
from twisted.application.service import IServiceCollection, MultiService
from twisted.internet.error import CannotListenError, ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import LogLevel, capturedLogs
from twisted.python.failure import Failure

from mqgate import sniff
from mqgate.errors import ConfigError
from mqgate.amqp.frames import SASL_HEADER
from mqgate.config import Settings
from mqgate.net.amqp import AmqpServerFactory
from mqgate.net.services import ConnectionService, endpoint_description
from mqgate.net.stomp import StompServerFactory
from mqgate.net.unify import PortUnificationFactory
from mqgate.security.users import UserRepository, ensure_repository
from mqgate.service import BrokerService, build_broker


def make_settings(tmp_path, overrides=None, *, fast_users=True):
    """Settings with VARHOME in C{tmp_path}; with C{fast_users} the user repository is
    made beforehand with cheap hashes, so building the broker does no slow PBKDF2."""
    settings = Settings.from_properties([], overrides or {}, varhome=str(tmp_path))
    if fast_users:
        ensure_repository(settings.user_repository_path, iterations=1000)
    return settings


def build(tmp_path, overrides=None, **kwargs):
    """build_broker on a MemoryReactorClock; returns (service, reactor, log events)."""
    reactor = MemoryReactorClock()
    with capturedLogs() as events:
        top = build_broker(make_settings(tmp_path, overrides, **kwargs), reactor)
    return top, reactor, events


def children(top):
    """The connection services of the broker (the port mapper and ping aside)."""
    return {child.name: child for child in top
            if isinstance(child, ConnectionService) and child.name != "portmapper"}


def amqp_factory(service):
    """The AMQP factory behind a service, sniffing in front of it or not."""
    factory = service.factory
    if isinstance(factory, PortUnificationFactory):
        factory = factory.factories[sniff.AMQP_SASL]
    assert isinstance(factory, AmqpServerFactory), factory
    return factory


def warnings(events):
    return [e for e in events if e["log_level"] == LogLevel.warn]


def test_build_broker_returns_a_multiservice_with_jms_and_admin(tmp_path):
    """The default active list gives ConnectionServices "jms" and "admin", each a TCP
    description on 127.0.0.1 with the OS-chosen port 0 and the default listen backlog
    (S1.1, S1.4, S1.5)."""
    top, _reactor, _events = build(tmp_path)
    assert isinstance(top, BrokerService)
    assert isinstance(top, MultiService) and IServiceCollection.providedBy(top)
    services = children(top)
    assert sorted(services) == ["admin", "jms"]
    for service in services.values():
        assert isinstance(service, ConnectionService)
        assert service.endpoint == "tcp:port=0:interface=127.0.0.1:backlog=4096"


def test_jms_sniffs_amqp_and_stomp_while_admin_speaks_amqp_only(tmp_path):
    """jms tells AMQP (with or without SASL) from STOMP by the first bytes; admin is
    AMQP alone, without a sniffer in front (S1.1)."""
    services = children(build(tmp_path)[0])
    jms, admin = services["jms"], services["admin"]
    assert isinstance(jms.factory, PortUnificationFactory)
    kinds = jms.factory.factories
    assert kinds[sniff.AMQP] is kinds[sniff.AMQP_SASL]
    assert isinstance(kinds[sniff.AMQP], AmqpServerFactory)
    assert isinstance(kinds[sniff.STOMP], StompServerFactory)
    assert jms.protocol_name == "AMQP+STOMP"
    assert isinstance(admin.factory, AmqpServerFactory)
    assert admin.protocol_name == "AMQP"


def test_a_service_limited_to_amqp_gets_no_sniffer(tmp_path):
    """mqgate.jms.protocols=amqp makes jms a plain AMQP service (S1.1)."""
    services = children(build(tmp_path, {"mqgate.jms.protocols": "amqp"})[0])
    assert isinstance(services["jms"].factory, AmqpServerFactory)
    assert services["jms"].protocol_name == "AMQP"


def test_services_share_one_broker_core_and_flusher(tmp_path):
    """Every connection service routes into the same core and flushes through the
    same Flusher, so a message can cross from one service to another."""
    top, reactor, _events = build(tmp_path)
    factories = [amqp_factory(s) for s in children(top).values()]
    assert {id(f.broker) for f in factories} == {id(top.broker)}
    assert {id(f.flusher) for f in factories} == {id(top.flusher)}
    assert {id(f.authenticator) for f in factories} == {id(factories[0].authenticator)}
    assert all(f.clock is reactor for f in factories)
    assert {f.container_id for f in factories} == {"mqgate:mqgate"}


def test_admin_service_glue_is_admin_only(tmp_path):
    """The admin service admits only group admin; jms admits everyone (S1.1)."""
    services = children(build(tmp_path)[0])
    admin = amqp_factory(services["admin"]).glue_config
    jms = amqp_factory(services["jms"]).glue_config
    assert (admin.admin_only, admin.service) == (True, "admin")
    assert (jms.admin_only, jms.service) == (False, "jms")


def test_glue_and_factory_settings_come_from_settings(tmp_path):
    """Producer credit, message size limit and anonymous login are read from Settings;
    guests are let in only on the service that allows them (S4.2)."""
    top, _reactor, _events = build(tmp_path, {
        "mqgate.amqp.producer_credit": "17",
        "mqgate.jms.allow_anonymous": "true",
        "mqgate.authentication.client.response.timeout": "7"})
    factory = amqp_factory(children(top)["jms"])
    assert factory.glue_config.producer_credit == 17
    assert factory.glue_config.max_message_size == top.settings["mqgate.message.max_size"]
    assert factory.allow_anonymous is True
    assert factory.login_policy.mechanisms == ("PLAIN", "ANONYMOUS")
    assert factory.setup_timeout == 7
    admin = amqp_factory(children(top)["admin"])
    assert admin.login_policy.mechanisms == ("PLAIN",)


def test_the_retired_anonymous_switch_stops_the_start_up_naming_its_replacement(tmp_path):
    """S4.2: the broker-wide anonymous switch, set to anything, is a configuration
    error that names the per-service key replacing it."""
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, {"mqgate.authentication.anonymous.enabled": "true"})
    assert caught.value.key == "mqgate.authentication.anonymous.enabled"
    assert "mqgate.jms.allow_anonymous=true" in str(caught.value)


def test_a_cleartext_service_with_no_way_in_stops_the_start_up(tmp_path):
    """S4.2: passwords refused over cleartext and no guests leave the service no way
    in: a configuration error naming the key, not a service nobody can use."""
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, {"mqgate.jms.sasl.plain.allow_cleartext": "false"})
    assert caught.value.key == "mqgate.jms.sasl.plain.allow_cleartext"


def test_start_listens_on_the_configured_interface_and_ports(tmp_path):
    """startService listens through serverFromString on the reactor, at each
    service's bind address and port, and records the bound address (S1.4, S1.5)."""
    top, reactor, _events = build(tmp_path, {
        "mqgate.jms.tcp.port": "15672", "mqgate.admin.tcp.port": "15673",
        "mqgate.admin.tcp.hostname": "127.0.0.2"})
    services = children(top)
    assert reactor.tcpServers == []
    with capturedLogs() as events:
        top.startService()
    listened = {(port, interface): factory
                for port, factory, _backlog, interface in reactor.tcpServers}
    portmapper = [child for child in top if child.name == "portmapper"][0]
    assert listened == {(15672, "127.0.0.1"): services["jms"].factory,
                        (15673, "127.0.0.2"): services["admin"].factory,
                        (7676, "127.0.0.1"): portmapper.factory}
    assert services["jms"].address is not None
    assert all(s.running for s in children(top).values())
    said = {e.get("name"): e.get("protocol") for e in events if "protocol" in e}
    assert said == {"admin": "AMQP", "jms": "AMQP+STOMP", "portmapper": "port mapper"}
    # "mqgate ready" once the reactor runs (the capture index's connection pool has
    # its own hook: it starts its thread then).
    ready = [hook for hook, _, _ in reactor.whenRunningHooks
             if getattr(hook, "__self__", None) is top]
    assert len(ready) == 1


def test_a_failed_listen_stops_the_reactor_with_a_critical_message(tmp_path):
    """A service that cannot bind logs a critical line naming the service and where,
    and stops the broker (S1.4)."""

    class Busy(MemoryReactorClock):
        def listenTCP(self, port, factory, backlog=50, interface=""):
            if port != 0:  # the port mapper's 7676 is free; jms's port is not
                return super().listenTCP(port, factory, backlog, interface)
            raise CannotListenError(interface, port, OSError(98, "Address in use"))

    reactor = Busy()
    top = build_broker(make_settings(tmp_path, {"mqgate.service.activelist": "jms"}),
                       reactor)
    with capturedLogs() as events:
        top.startService()
    critical = [e for e in events if e["log_level"] == LogLevel.critical]
    assert [e["name"] for e in critical] == ["jms"]
    assert "tcp:port=0:interface=127.0.0.1:backlog=4096" == critical[0]["where"]
    assert reactor.hasStopped


def test_stop_closes_connections_and_stops_listening(tmp_path):
    """stopService closes every live connection and stops listening (S0.4,
    design rule 6)."""
    top, reactor, _events = build(tmp_path)
    top.startService()
    factory = children(top)["admin"].factory
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    with capturedLogs():
        d = top.stopService()
    assert transport.disconnecting
    protocol.connectionLost(Failure(ConnectionDone()))
    assert d.called
    assert not any(s.running for s in top)
    assert reactor.getDelayedCalls() == []


def test_stop_closes_amqp_connections_behind_the_sniffer(tmp_path):
    """On jms, an AMQP connection handed over by the port-unification sniffer is closed
    by stopService too (S0.4)."""
    top, _reactor, _events = build(tmp_path)
    top.startService()
    protocol = children(top)["jms"].factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(SASL_HEADER)
    assert transport.value().startswith(SASL_HEADER)  # the AMQP engine answered
    with capturedLogs():
        top.stopService()
    assert transport.disconnecting


def test_instance_directory_and_user_repository_are_created(tmp_path):
    """build_broker makes VARHOME/instances/NAME with mode 0700 and a user repository
    with the default users, and says so in a warning (S0.5, S4.3, S4.7)."""
    settings = make_settings(tmp_path, fast_users=False)
    assert not os.path.exists(settings.instance_dir)
    with capturedLogs() as events:
        build_broker(settings, MemoryReactorClock())
    mode = stat.S_IMODE(os.stat(settings.instance_dir).st_mode)
    assert mode == 0o700
    assert settings.instance_dir == str(tmp_path / "instances" / "mqgate")
    repository = UserRepository.load(settings.user_repository_path)
    assert repository.get("admin") is not None
    assert repository.get("guest") is not None
    texts = [e["warning"] for e in warnings(events) if "warning" in e]
    assert any("created user repository" in text for text in texts)


def test_existing_instance_directory_is_kept(tmp_path):
    """Building again over an existing instance keeps its files (S0.5)."""
    settings = make_settings(tmp_path)
    marker = os.path.join(settings.instance_dir, "keep")
    with open(marker, "w") as f:
        f.write("x")
    build_broker(settings, MemoryReactorClock())
    assert os.path.exists(marker)


def test_http_gateway_service_is_built_with_both_engines(tmp_path):
    """httpjms in the active list is built as a connection service whose (carried)
    connections are AMQP or STOMP, told apart as on jms (S1.1, S10.3)."""
    top, _reactor, _events = build(
        tmp_path, {"mqgate.service.activelist": "jms,httpjms,admin"})
    assert sorted(children(top)) == ["admin", "httpjms", "jms"]
    gateway = top.getServiceNamed("httpjms")
    assert gateway.entry == ("http", "NORMAL")
    assert sorted(f.protocol_label for f in gateway.engine_factories()) == ["AMQP", "STOMP"]


@pytest.mark.parametrize("host, port, backlog, text", [
    ("127.0.0.1", 5672, None, "tcp:port=5672:interface=127.0.0.1"),
    ("", 0, None, "tcp:port=0"),
    ("::1", 7676, 50, "tcp:port=7676:interface=\\:\\:1:backlog=50"),
])
def test_endpoint_description(host, port, backlog, text):
    """A bind address and port become a serverFromString description; IPv6 colons
    are escaped, an empty host listens everywhere (S1.5)."""
    assert endpoint_description(host, port, backlog) == text


def test_bad_websocket_origin_is_a_config_error_naming_the_key(tmp_path):
    """An allowed_origins item that is not an origin stops the build with the key
    named and what it accepts (S10.3)."""
    with pytest.raises(ConfigError) as error:
        build(tmp_path, {"mqgate.service.activelist": "jms,httpjms",
                         "mqgate.httpjms.ws.allowed_origins": "app.example.com"})
    assert error.value.key == "mqgate.httpjms.ws.allowed_origins"
    assert "scheme://host" in str(error.value)


def test_websocket_path_must_be_below_the_root(tmp_path):
    """mqgate.SERVICE.ws.path "/" is refused by name: the root is the service's own."""
    with pytest.raises(ConfigError) as error:
        build(tmp_path, {"mqgate.service.activelist": "jms,httpjms",
                         "mqgate.httpjms.ws.path": "/"})
    assert error.value.key == "mqgate.httpjms.ws.path"
