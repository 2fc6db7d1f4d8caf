"""
The admin commands for services, connections and the broker itself (S11.1), in
imqcmd's words and options (FACTS 1.8):

    list svc                      every service: port, protocols, type, state, connections
    query svc -n NAME             one service, with the settings that shape it
    pause svc -n NAME             stop accepting and reading its connections (NORMAL only)
    resume svc -n NAME            undo pause
    list cxn [-svn SERVICE]       the connections, of one service or all
    query cxn -n ID               one connection in detail
    destroy cxn -n ID             close it ("closed by an administrator")
    query bkr                     version, instance, host, uptime, state, counts
    pause bkr | resume bkr        every NORMAL service at once; ADMIN ones keep working
    shutdown bkr [-time SECONDS]  reply, then stop cleanly (as on SIGTERM, exit 0)
    restart bkr                   reply, stop cleanly, then run the same command again

They read an L{mqgate.net.control.BrokerControl} (the context's C{control}); each
returns a L{Reply} whose C{text} is a table and whose C{data} is the same figures.
"""

from mqgate.admin.options import parse_options
from mqgate.admin.requests import BadRequest, Command, NotFoundError, Reply
from mqgate.admin.tables import render_pairs, render_table
from mqgate.net.connections import close_by_admin, describe

__all__ = ["COMMANDS"]

_LIST_SVC = "list svc"
_QUERY_SVC = "query svc -n NAME"
_PAUSE_SVC = "pause svc -n NAME"
_RESUME_SVC = "resume svc -n NAME"
_LIST_CXN = "list cxn [-svn SERVICE]"
_QUERY_CXN = "query cxn -n ID"
_DESTROY_CXN = "destroy cxn -n ID"
_QUERY_BKR = "query bkr"
_PAUSE_BKR = "pause bkr"
_RESUME_BKR = "resume bkr"
_SHUTDOWN_BKR = "shutdown bkr [-time SECONDS]"
_RESTART_BKR = "restart bkr"


def _control(context):
    control = getattr(context, "control", None)
    if control is None:
        raise NotFoundError("this broker does not expose its services to admin commands")
    return control


def _no_arguments(arguments, usage):
    parse_options(arguments, usage)


# -- services ----------------------------------------------------------------------------


def _service_row(control, service):
    address = service.address
    return {
        "name": service.name,
        "port": address.port if address is not None else None,
        "protocol": service.protocol_name,
        "transport": service.entry[0] if service.entry is not None else "tcp",
        "type": service.kind,
        "state": service.state,
        "connections": control.connections.count(service.name),
    }


def _service(control, arguments, usage):
    name = parse_options(arguments, usage, values={"-n"}, required={"-n"})["-n"]
    service = control.service(name)
    if service is None:
        known = ", ".join(s.name for s in control.services)
        raise NotFoundError(f"no service {name!r} is running; running: {known}")
    return service


def list_services(context, arguments):
    """C{list svc}."""
    _no_arguments(arguments, _LIST_SVC)
    control = _control(context)
    rows = [_service_row(control, s) for s in control.services]
    text = render_table(
        ("Service Name", "Port", "Protocol", "Transport", "Type", "State", "Connections"),
        [(r["name"], r["port"], r["protocol"], r["transport"], r["type"], r["state"],
          r["connections"]) for r in rows])
    return Reply(text, rows)


def query_service(context, arguments):
    """C{query svc -n NAME}."""
    control = _control(context)
    service = _service(control, arguments, _QUERY_SVC)
    row = _service_row(control, service)
    address = service.address
    row["host"] = address.host if address is not None else None
    row.update(service.details)
    return Reply(render_pairs(row.items()), row)


def pause_service(context, arguments):
    """C{pause svc -n NAME}: a NORMAL service only."""
    control = _control(context)
    service = _service(control, arguments, _PAUSE_SVC)
    if service.kind != "NORMAL":
        raise BadRequest(
            f"service {service.name} is of type {service.kind} and cannot be paused: "
            "pausing the way administrators reach the broker would lock them out; "
            "pause a NORMAL service, or every one with `pause bkr`")
    was = service.paused
    service.pause()
    text = (f"Service {service.name} was already paused." if was else
            f"Service {service.name} paused: it accepts no new connections and reads "
            f"none of its {control.connections.count(service.name)} connections until "
            f"`resume svc -n {service.name}`.")
    return Reply(text, {"paused": service.name, "already": was})


def resume_service(context, arguments):
    """C{resume svc -n NAME}."""
    control = _control(context)
    service = _service(control, arguments, _RESUME_SVC)
    was = service.paused
    service.resume()
    text = (f"Service {service.name} resumed." if was else
            f"Service {service.name} was not paused.")
    return Reply(text, {"resumed": service.name, "was_paused": was})


# -- connections -------------------------------------------------------------------------


def _connection(control, arguments, usage):
    value = parse_options(arguments, usage, values={"-n"}, required={"-n"})["-n"]
    try:
        connection_id = int(value)
    except ValueError:
        raise BadRequest(f"a connection id is a number, as `list cxn` shows, not "
                         f"{value!r}; usage: {usage}") from None
    protocol = control.connections.get(connection_id)
    if protocol is None:
        raise NotFoundError(f"no connection {connection_id} (it may have closed); "
                            "see `list cxn`")
    return protocol


def list_connections(context, arguments):
    """C{list cxn [-svn SERVICE]}."""
    control = _control(context)
    name = parse_options(arguments, _LIST_CXN, values={"-svn"}).get("-svn")
    if name is None:
        connections = list(control.connections)
    elif control.service(name) is None:
        raise NotFoundError(f"no service {name!r} is running; running: "
                            + ", ".join(s.name for s in control.services))
    else:
        connections = control.connections.of_service(name)
    now = control.now()
    rows = [describe(p, now) for p in connections]
    text = render_table(
        ("Id", "Service", "Protocol", "User", "Host:Port", "Client Id", "Connected (s)",
         "State", "Msgs Out"),
        [(r["id"], r["service"], r["protocol"], r["user"], f"{r['host']}:{r['port']}",
          r["client_id"], f"{r['connected_seconds']:.0f}", r["state"], r["messages_out"])
         for r in rows])
    return Reply(text, rows)


def query_connection(context, arguments):
    """C{query cxn -n ID}."""
    control = _control(context)
    protocol = _connection(control, arguments, _QUERY_CXN)
    row = describe(protocol, control.now(), detail=True)
    return Reply(render_pairs(row.items()), row)


def destroy_connection(context, arguments):
    """C{destroy cxn -n ID}: closed in its protocol's words; what it held unsettled
    goes back to its queues."""
    control = _control(context)
    protocol = _connection(control, arguments, _DESTROY_CXN)
    row = describe(protocol, control.now())
    close_by_admin(protocol)
    return Reply(f"Connection {row['id']} ({row['protocol']} from "
                 f"{row['host']}:{row['port']}, user {row['user']}) destroyed.",
                 {"destroyed": row["id"], "connection": row})


# -- the broker ----------------------------------------------------------------------------


def query_broker(context, arguments):
    """C{query bkr}."""
    _no_arguments(arguments, _QUERY_BKR)
    control = _control(context)
    broker = control.broker
    row = {
        "version": control.version,
        "instance": control.instance,
        "host": control.host,
        "uptime_seconds": round(control.uptime, 1),
        "state": control.state,
        "services": {s.name: s.state for s in control.services},
        "connections": len(control.connections),
        "queues": len(broker.queues()) if broker is not None else 0,
        "topics": len(broker.topics()) if broker is not None else 0,
        "store": control.store,
    }
    if broker is not None and broker.memory is not None:
        memory = broker.memory   # S2.6
        row["memory_state"] = memory.state
        row["memory"] = (f"{memory.used} of {memory.config.limit} bytes"
                         f" ({memory.percent:.1f} %)")
        # Bodies of persistent messages paged out to the store (not counted above).
        row["memory_paged"] = (f"{memory.paged.count} messages,"
                               f" {memory.paged.bytes} bytes")
    shown = dict(row, services=", ".join(f"{n} ({s})" for n, s in row["services"].items()))
    return Reply(render_pairs(shown.items()), row)


def pause_broker(context, arguments):
    """C{pause bkr}: every NORMAL service; ADMIN ones keep working."""
    _no_arguments(arguments, _PAUSE_BKR)
    paused = _control(context).pause()
    text = ("Broker paused: services " + ", ".join(paused) + " accept and read nothing "
            "until `resume bkr`; admin services keep working." if paused else
            "Broker already paused.")
    return Reply(text, {"paused": paused})


def resume_broker(context, arguments):
    """C{resume bkr}."""
    _no_arguments(arguments, _RESUME_BKR)
    resumed = _control(context).resume()
    text = ("Broker resumed: services " + ", ".join(resumed) + " running again."
            if resumed else "Broker was not paused.")
    return Reply(text, {"resumed": resumed})


def shutdown_broker(context, arguments):
    """C{shutdown bkr [-time SECONDS]}: answered first, then the clean stop."""
    value = parse_options(arguments, _SHUTDOWN_BKR, values={"-time"}).get("-time", "0")
    try:
        delay = float(value)
    except ValueError:
        delay = -1.0
    if not 0 <= delay <= 86400:
        raise BadRequest(f"-time takes seconds from 0 to 86400, not {value!r}; "
                         f"usage: {_SHUTDOWN_BKR}")
    control = _control(context)
    control.shutdown(delay)
    return Reply(f"Broker {control.instance} shutting down in {delay:g} s.",
                 {"shutdown": control.instance, "seconds": delay})


def restart_broker(context, arguments):
    """C{restart bkr}: answered first, then a clean stop and the process re-executed."""
    _no_arguments(arguments, _RESTART_BKR)
    control = _control(context)
    control.restart()
    return Reply(f"Broker {control.instance} restarting: it stops cleanly and runs its "
                 "command line again in the same process.",
                 {"restart": control.instance})


#: The service, connection and broker commands, C{(verb, object) -> Command} (S11.1).
COMMANDS = {
    ("list", "svc"): Command(_LIST_SVC, list_services,
                             "the services: port, protocols, type, state, connections"),
    ("query", "svc"): Command(_QUERY_SVC, query_service,
                              "one service and the settings that shape it"),
    ("pause", "svc"): Command(_PAUSE_SVC, pause_service,
                              "stop accepting and reading a NORMAL service's connections"),
    ("resume", "svc"): Command(_RESUME_SVC, resume_service, "undo pause svc"),
    ("list", "cxn"): Command(_LIST_CXN, list_connections,
                             "the connections, of one service or of all"),
    ("query", "cxn"): Command(_QUERY_CXN, query_connection,
                              "one connection: user, client id, flows, state"),
    ("destroy", "cxn"): Command(_DESTROY_CXN, destroy_connection,
                                "close a connection; its unsettled messages are requeued"),
    ("query", "bkr"): Command(_QUERY_BKR, query_broker,
                              "version, instance, host, uptime, state and counts"),
    ("pause", "bkr"): Command(_PAUSE_BKR, pause_broker,
                              "pause every NORMAL service (admin services keep working)"),
    ("resume", "bkr"): Command(_RESUME_BKR, resume_broker, "resume every NORMAL service"),
    ("shutdown", "bkr"): Command(_SHUTDOWN_BKR, shutdown_broker,
                                 "stop cleanly after SECONDS (default 0), as on SIGTERM"),
    ("restart", "bkr"): Command(_RESTART_BKR, restart_broker,
                                "stop cleanly, then re-execute the same command line "
                                "(same process id unless daemonized)"),
}
