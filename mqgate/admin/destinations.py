"""
The destination and durable subscription commands, as admin request handlers (S11.1).

    list dst [-t q|t] [-tmp]                    the destinations, one row each
    query dst -t q|t -n NAME                    one destination, its figures and limits
    create dst -t q|t -n NAME [-o p=v]...       make one, with limits
    update dst -t q|t -n NAME -o p=v...         change its limits now
    destroy dst -t q|t -n NAME                  delete it and its messages; detach its
                                                clients' links
    purge dst -t q|t -n NAME                    drop its waiting messages
    pause dst -t q|t -n NAME [-pst WHAT]        hold its producers, consumers or both
    resume dst -t q|t -n NAME                   undo pause
    compact dst -t q|t -n NAME                  compact the store (destination paused)
    list dur [-d TOPIC]                         the durable subscriptions
    destroy dur -n NAME -c CLIENTID             delete one with its backlog
    purge dur -n NAME -c CLIENTID               drop its waiting backlog

The words and options are imqcmd's (FACTS 1.8), read with L{parse_options}. Limits are
the source's destination properties (FACTS 1.6) that mqgate keeps: C{maxNumMsgs},
C{maxTotalMsgBytes} and C{maxBytesPerMsg} (sizes: C{1600}, C{1600b}, C{16k}, C{16m}),
C{limitBehavior} (C{FLOW_CONTROL}, C{REJECT_NEWEST}, C{REMOVE_OLDEST},
C{REMOVE_LOW_PRIORITY}), C{maxNumProducers}, C{consumerFlowLimit}, C{useDMQ}, and
mqgate's C{maxDeliveryCount} (S2.3, S2.4), and for queues the consumer modes
C{maxNumActiveConsumers} and C{maxNumBackupConsumers} (L{mqgate.core.modes}); the
source's other properties are refused by name, as is anything else. The dead message
queue C{mq.sys.dmq} takes the same ones, except that it never holds its producers back
(FLOW_CONTROL is refused for it).

A topic's figures, and what pause, purge and destroy act on, are its subscriptions on
exactly its name, durable ones included (L{mqgate.core.broker.Broker.own_queues}); a
wildcard subscription also holds other topics' messages and is left alone. Temporary
destinations (C{mqgate.tmp.*}) and the broker's own names (anything starting with
C{mq}: C{mqgate.admin}, C{mq.metrics.*}) are not user destinations: C{list dst} shows
them only with C{-tmp}.

Each handler is C{run(context, arguments) -> Reply}: it calls the core, no I/O.
"""

import re

from twisted.logger import Logger
from twisted.python.failure import Failure

from mqgate.admin.options import (
    PAUSE_TARGETS, destination_type, parse_options, property_pairs)
from mqgate.admin.requests import AdminError, BadRequest, Command, NotFoundError, Reply
from mqgate.admin.tables import render_pairs, render_table
from mqgate.core.addresses import (
    QUEUE, TOPIC, AddressError, NameLimitExceeded, NotAllowed, NotFound, check_name)
from mqgate.core.destinations import RUNNING, Queue
from mqgate.core.capture import CAPTURE_PREFIX
from mqgate.core.dead import DMQ_NAME
from mqgate.core.ring import is_ring, ring_size
from mqgate.core.limits import FLOW_CONTROL, LIMIT_BEHAVIORS
from mqgate.core.modes import MAX_ACTIVE, MAX_BACKUP, ConsumerModes

__all__ = ["COMMANDS", "InUse", "parse_size", "limits_from_properties"]

_log = Logger(namespace="mqgate.admin")

_LIST_USAGE = "list dst [-t q|t] [-tmp]"
_QUERY_USAGE = "query dst -t q|t -n NAME"
_CREATE_USAGE = "create dst -t q|t -n NAME [-o property=value]..."
_UPDATE_USAGE = "update dst -t q|t -n NAME -o property=value..."
_DESTROY_USAGE = "destroy dst -t q|t -n NAME"
_PURGE_USAGE = "purge dst -t q|t -n NAME"
_PAUSE_USAGE = "pause dst -t q|t -n NAME [-pst PRODUCERS|CONSUMERS|ALL]"
_RESUME_USAGE = "resume dst -t q|t -n NAME"
_COMPACT_USAGE = "compact dst -t q|t -n NAME"
_LIST_DUR_USAGE = "list dur [-d TOPIC]"
_DESTROY_DUR_USAGE = "destroy dur -n NAME -c CLIENTID"
_PURGE_DUR_USAGE = "purge dur -n NAME -c CLIENTID"

_TEMPORARY_PREFIX = "mqgate.tmp."
# The source reserves names starting with "mq" for the broker (FACTS 1.6).
_RESERVED_PREFIX = "mq"
# FACTS 1.6: letters, digits, _ and $; mqgate's names are dotted (topic levels).
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z0-9_$]+)*\Z")
# A topic's levels may be separated by / too: MQ Light's topics (sports/football).
_TOPIC_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*([./][A-Za-z0-9_$]+)*\Z")

MAX_NUM_MSGS, MAX_TOTAL_MSG_BYTES, LIMIT_BEHAVIOR = (
    "maxNumMsgs", "maxTotalMsgBytes", "limitBehavior")
MAX_BYTES_PER_MSG, MAX_NUM_PRODUCERS, CONSUMER_FLOW_LIMIT, USE_DMQ, MAX_DELIVERY_COUNT = (
    "maxBytesPerMsg", "maxNumProducers", "consumerFlowLimit", "useDMQ",
    "maxDeliveryCount")
# Each property and the Limits attribute (and keyword) holding it.
_ATTRIBUTES = {
    MAX_NUM_MSGS: "max_count", MAX_TOTAL_MSG_BYTES: "max_bytes",
    LIMIT_BEHAVIOR: "behavior", MAX_BYTES_PER_MSG: "max_message_bytes",
    MAX_NUM_PRODUCERS: "max_producers", CONSUMER_FLOW_LIMIT: "consumer_flow_limit",
    USE_DMQ: "use_dmq", MAX_DELIVERY_COUNT: "max_delivery_count"}
#: A topic's: whether what is published without durable=true is persistent (S8.4).
DEFAULT_PERSISTENCE = "defaultPersistence"
_SUPPORTED = (*_ATTRIBUTES, MAX_ACTIVE, MAX_BACKUP, DEFAULT_PERSISTENCE)
# The source's other destination properties (FACTS 1.6): known, not kept by mqgate.
_NOT_SUPPORTED = (
    "isLocalOnly",
    "localDeliveryPreferred", "validateXMLSchemaEnabled", "XMLSchemaURIList",
    "reloadXMLSchemaOnFailure")
_SIZE = re.compile(r"(\d+)([bkm]?)\Z", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 * 1024}


class InUse(AdminError):
    """The request cannot be done while something uses what it names (a consumer is
    attached to the durable subscription); the message says what to do (400)."""

    status = BadRequest.status


# -- helpers ---------------------------------------------------------------------------


def _kind_word(kind):
    return "queue" if kind == QUEUE else "topic"


def _is_internal(name):
    # Capture's ring queues are the broker's, but an operator should see what capture
    # holds (S7.2): they are listed.
    if name.startswith(CAPTURE_PREFIX):
        return False
    return name.startswith(_TEMPORARY_PREFIX) or name.startswith(_RESERVED_PREFIX)


def _destination_options(arguments, usage, *, values=(), repeated=()):
    options = parse_options(arguments, usage, values={"-t", "-n", *values},
                            repeated=repeated, required={"-t", "-n"})
    return options, destination_type(options["-t"]), options["-n"]


def _find(context, kind, name):
    broker = context.broker
    try:
        return broker.destination(kind, name)
    except NotFound:
        hint = ""
        if kind == QUEUE and any(q.name == name for q in broker.durables()):
            hint = (": that is a durable subscription's queue, not a destination;"
                    " use destroy dur / purge dur -n NAME -c CLIENTID")
        raise NotFoundError(f"no {_kind_word(kind)} {name!r}{hint}") from None


def _figures(broker, destination):
    """What list and query show of one destination, as data."""
    queues = broker.own_queues(destination)
    kind = QUEUE if type(destination) is Queue else TOPIC
    return {
        "name": destination.name, "type": _kind_word(kind), "state": destination.state,
        "producers": destination.producers,
        "consumers": sum(len(q.consumers) for q in queues),
        "messages": sum(q.held for q in queues),
        "bytes": sum(q.held_bytes for q in queues),
        "unacked": sum(q.in_flight for q in queues),
        "temporary": destination.temporary,
        # S7.1: a ring queue's size (its oldest message goes when it is full), or None.
        "ring": ring_size(destination) if kind == QUEUE and is_ring(destination)
        else None,
    }


def _survives(context):
    """The sentence a create or update adds when nothing will keep it."""
    if context.broker.persistence is None:
        return (" This broker has no message store: the destination and its limits"
                " will not be there after a restart.")
    return ""


# -- limits (FACTS 1.6) ----------------------------------------------------------------


def parse_size(text, name):
    """A size as the source writes it (C{1600}, C{1600b}, C{16k}, C{16m}) or -1.

    @raise BadRequest: naming the property.
    """
    if text.strip() == "-1":
        return -1
    match = _SIZE.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise BadRequest(f"{name}={text}: give -1 (no limit) or a size above 0 such as"
                         " 1600, 1600b, 16k or 16m")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


#: The largest count a limit may be set to: past it a limit means nothing (and the
#: stored attributes should stay ordinary 64-bit integers).
_MAX_COUNT = 2 ** 62


def _count(text, name):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < -1 or value == 0 or value > _MAX_COUNT:
        raise BadRequest(f"{name}={text}: give -1 (no limit) or a whole number from 1 "
                         f"to {_MAX_COUNT}")
    return value


def _behavior(text, name):
    value = text.strip().upper()
    if value in LIMIT_BEHAVIORS:
        return value
    raise BadRequest(f"{name}={text}: give one of " + ", ".join(LIMIT_BEHAVIORS))


def _unlimited_count(text, name):
    # -1 (or, as the source allows, 0) for no limit, else a whole number.
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1 or value > _MAX_COUNT:
        raise BadRequest(f"{name}={text}: give -1 (no limit) or a whole number from 1 "
                         f"to {_MAX_COUNT}")
    return -1 if value == 0 else value


def _deliveries(text, name):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or value > _MAX_COUNT:
        raise BadRequest(f"{name}={text}: give 0 (no limit) or the number of failed"
                         " deliveries after which a message goes to the dead message"
                         f" queue {DMQ_NAME}")
    return value


def _boolean(text, name):
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise BadRequest(f"{name}={text}: give true or false")
    return value == "true"


_PARSERS = {MAX_NUM_MSGS: _count, MAX_TOTAL_MSG_BYTES: parse_size,
            LIMIT_BEHAVIOR: _behavior, MAX_BYTES_PER_MSG: parse_size,
            MAX_NUM_PRODUCERS: _unlimited_count, CONSUMER_FLOW_LIMIT: _unlimited_count,
            USE_DMQ: _boolean, MAX_DELIVERY_COUNT: _deliveries}


def limits_from_properties(properties, current, name=None):
    """New L{Limits}: C{current} with the C{-o} C{properties} (a dict) applied.

    Every property is checked before anything is applied.

    @param name: the queue's name: the DMQ's limit behaviour may not be FLOW_CONTROL.
    @raise BadRequest: a property mqgate does not keep or does not know, or a bad
        value, named.
    """
    changes = {}
    for prop, text in properties.items():
        if prop in _NOT_SUPPORTED:
            raise BadRequest(f"property {prop} is not supported by mqgate; it keeps "
                             + ", ".join(_SUPPORTED))
        if prop not in _PARSERS:
            raise BadRequest(f"unknown property {prop!r}; the destination properties"
                             " are " + ", ".join(_SUPPORTED))
        changes[_ATTRIBUTES[prop]] = _PARSERS[prop](text, prop)
    if name == DMQ_NAME and changes.get("behavior") == FLOW_CONTROL:
        raise BadRequest(f"{LIMIT_BEHAVIOR}={FLOW_CONTROL} is not allowed for {DMQ_NAME}:"
                         " dead messages must never hold the broker back; give"
                         " REMOVE_OLDEST, REMOVE_LOW_PRIORITY or REJECT_NEWEST")
    return current.replace(**changes)


# -- default persistence (S8.4): topics only --------------------------------------------


def split_persistence(kind, properties):
    """C{(the other properties, the topic's default persistence or None)}: the
    C{defaultPersistence} pair taken out of C{properties} (a dict, left unchanged).

    @raise BadRequest: given for a queue, or not true or false.
    """
    if DEFAULT_PERSISTENCE not in properties:
        return properties, None
    if kind == QUEUE:
        raise BadRequest(f"{DEFAULT_PERSISTENCE} applies to topics only: a message sent"
                         " to a queue is persistent when its publisher says so")
    others = {k: v for k, v in properties.items() if k != DEFAULT_PERSISTENCE}
    return others, _boolean(properties[DEFAULT_PERSISTENCE], DEFAULT_PERSISTENCE)


# -- consumer modes (FACTS 1.6; mqgate.core.modes): queues only -------------------------

_MODES = (MAX_ACTIVE, MAX_BACKUP)


def split_modes(properties):
    """C{(limits properties, modes properties)}: the C{-o} pairs of the consumer
    modes taken out of C{properties} (a dict, left unchanged)."""
    limits = {k: v for k, v in properties.items() if k not in _MODES}
    return limits, {k: v for k, v in properties.items() if k in _MODES}


def modes_from_properties(kind, properties, current):
    """New L{ConsumerModes}: C{current} with C{properties} applied, or C{None} when
    none is given. @raise BadRequest: a topic, or a bad value, named."""
    if not properties:
        return None
    if kind != QUEUE:
        raise BadRequest(", ".join(properties) + " apply to queues only: a topic's"
                         " subscribers each have their own subscription")
    values = {MAX_ACTIVE: current.max_active, MAX_BACKUP: current.max_backup}
    for name, text in properties.items():
        try:
            values[name] = int(text)
        except ValueError:
            raise BadRequest(f"{name}={text}: give a whole number, or -1 for no"
                             " limit") from None
    try:
        return ConsumerModes(values[MAX_ACTIVE], values[MAX_BACKUP])
    except ValueError as error:
        raise BadRequest(str(error)) from None


def _modes_data(modes):
    return {MAX_ACTIVE: modes.max_active, MAX_BACKUP: modes.max_backup}


def _limits_data(limits):
    data = {prop: getattr(limits, attribute) for prop, attribute in _ATTRIBUTES.items()}
    if data[MAX_BYTES_PER_MSG] > _MAX_COUNT:
        data[MAX_BYTES_PER_MSG] = -1    # no limit
    return data


# -- list and query dst ----------------------------------------------------------------

_LIST_HEADERS = ("Name", "Type", "State", "Producers", "Consumers", "Msgs Count",
                 "Msgs Bytes", "Unacked")


def list_dst(context, arguments):
    """C{list dst [-t q|t] [-tmp]}."""
    options = parse_options(arguments, _LIST_USAGE, values={"-t"}, flags={"-tmp"})
    kinds = (QUEUE, TOPIC) if "-t" not in options else (destination_type(options["-t"]),)
    broker = context.broker
    data = []
    for kind in kinds:
        names = broker.queues() if kind == QUEUE else broker.topics()
        if kind == QUEUE and "-tmp" in options:
            names = sorted(names + [q.name for q in broker.system_queues()])
        for name in names:
            if _is_internal(name) and "-tmp" not in options:
                continue
            data.append(_figures(broker, broker.destination(kind, name)))
    rows = [(d["name"], d["type"] if d["ring"] is None else f"ring({d['ring']})",
             d["state"], d["producers"], d["consumers"], d["messages"], d["bytes"],
             d["unacked"]) for d in data]
    what = "destinations" if len(kinds) == 2 else f"{_kind_word(kinds[0])}s"
    text = f"{len(data)} {what}\n" + render_table(_LIST_HEADERS, rows)
    return Reply(text, data)


def query_dst(context, arguments):
    """C{query dst -t q|t -n NAME}."""
    _, kind, name = _destination_options(arguments, _QUERY_USAGE)
    broker = context.broker
    destination = _find(context, kind, name)
    data = _figures(broker, destination)
    counters = ("messages_in", "messages_out", "delivered", "dropped", "expired")
    if kind == QUEUE:
        data.update({counter: getattr(destination, counter) for counter in counters})
        data["waiting"] = destination.depth
    else:
        queues = broker.own_queues(destination)
        data.update(messages_in=destination.messages_in,
                    subscriptions=len(queues),
                    durable_subscriptions=sum(q.durable_key is not None for q in queues),
                    waiting=sum(q.depth for q in queues))
    # What its paused producers keep back (those attached to it by name).
    data["kept_by_producers"] = sum(p.kept() for p in destination.attached)
    data["limits"] = _limits_data(broker.limits_of(destination))
    data["limits_from"] = broker.limits_source(destination)
    if kind == QUEUE:
        data["consumer_modes"] = _modes_data(destination.modes)
        data["backup_consumers"] = len(destination.backups)
    else:
        data[DEFAULT_PERSISTENCE] = destination.default_persistence
    rows = [("Destination Name", data["name"]), ("Destination Type", data["type"]),
            ("Destination State", data["state"]),
            ("Current Number of Producers", data["producers"]),
            ("Current Number of Consumers", data["consumers"]),
            ("Current Number of Messages", data["messages"]),
            ("  Waiting", data["waiting"]), ("  Unacknowledged", data["unacked"]),
            ("Current Total Message Bytes", data["bytes"]),
            ("Kept by Paused Producers", data["kept_by_producers"])]
    if kind == QUEUE:
        rows += [("Messages In", data["messages_in"]),
                 ("Messages Out", data["messages_out"]),
                 ("Deliveries", data["delivered"]), ("Dropped", data["dropped"]),
                 ("Expired", data["expired"])]
    else:
        rows += [("Messages In", data["messages_in"]),
                 ("Subscriptions (on its name)", data["subscriptions"]),
                 ("  Durable", data["durable_subscriptions"])]
    rows.append(("Limits From", data["limits_from"]))
    rows += [(name, _limit_text(value)) for name, value in data["limits"].items()]
    if kind == QUEUE:
        rows += [(name, _limit_text(value))
                 for name, value in data["consumer_modes"].items()]
        rows.append(("  Backup Consumers Waiting", data["backup_consumers"]))
    else:
        rows.append((DEFAULT_PERSISTENCE,
                     "true" if data[DEFAULT_PERSISTENCE] else "false"))
    rows.append(("Temporary", "true" if data["temporary"] else "false"))
    return Reply(render_pairs(rows), data)


def _limit_text(value):
    return "unlimited (-1)" if value == -1 else value


# -- create and update dst -------------------------------------------------------------


def create_dst(context, arguments):
    """C{create dst -t q|t -n NAME [-o p=v]...}."""
    options, kind, name = _destination_options(arguments, _CREATE_USAGE,
                                               repeated={"-o"})
    properties = property_pairs(options["-o"], _CREATE_USAGE)
    broker = context.broker
    _check_new_name(broker, kind, name)
    try:
        broker.destination(kind, name)
    except NotFound:
        pass
    else:
        raise BadRequest(f"{_kind_word(kind)} {name!r} exists already; change its limits"
                         f" with update dst -t {kind[0]} -n {name} -o property=value")
    # Checked before anything is made: a bad property leaves no destination behind.
    properties, persistent = split_persistence(kind, properties)
    properties, mode_properties = split_modes(properties)
    limits = limits_from_properties(properties, broker.config.limits)
    modes = modes_from_properties(kind, mode_properties, broker.config.consumer_modes)
    if kind == QUEUE:
        broker.create_queue(name)
    else:
        broker.create_topic(name)
    if properties:
        broker.set_limits(kind, name, limits)
    # What it got: its own limits, or what the defaults and an address setting give.
    created = {"name": name, "type": _kind_word(kind),
               "limits": _limits_data(broker.limits_of(broker.destination(kind, name)))}
    if modes is not None:
        broker.set_consumer_modes(name, modes)
    if kind == QUEUE:
        created["consumer_modes"] = _modes_data(broker.queue(name).modes)
    else:
        if persistent is not None:
            broker.set_default_persistence(name, persistent)
        created[DEFAULT_PERSISTENCE] = broker.topic(name).default_persistence
    text = f"created {_kind_word(kind)} {name!r}." + _survives(context)
    return Reply(text, {"created": created})


def _check_new_name(broker, kind, name):
    if name.lower().startswith(_RESERVED_PREFIX):
        raise BadRequest(f"destination name {name!r}: names starting with mq are"
                         " reserved for the broker's own destinations")
    if not (_TOPIC_NAME if kind == TOPIC else _NAME).match(name):
        separators = "dots or slashes" if kind == TOPIC else "dots"
        raise BadRequest(f"destination name {name!r}: use letters, digits, _ and $,"
                         f" in levels separated by {separators} (no wildcards), starting"
                         " with a letter, _ or $")
    config = broker.config
    try:
        check_name(kind, name, config.max_name_length, config.max_topic_levels)
    except (AddressError, NameLimitExceeded) as error:
        raise BadRequest(f"destination name {name!r}: {error.description}") from None


def update_dst(context, arguments):
    """C{update dst -t q|t -n NAME -o p=v...}."""
    options, kind, name = _destination_options(arguments, _UPDATE_USAGE,
                                               repeated={"-o"})
    properties = property_pairs(options["-o"], _UPDATE_USAGE)
    if not properties:
        raise BadRequest(f"give at least one -o property=value; usage: {_UPDATE_USAGE}")
    broker = context.broker
    destination = _find(context, kind, name)
    others, persistent = split_persistence(kind, properties)
    limit_properties, mode_properties = split_modes(others)
    limits = limits_from_properties(limit_properties, broker.limits_of(destination),
                                    name if kind == QUEUE else None)
    modes = modes_from_properties(kind, mode_properties, getattr(
        destination, "modes", None))
    if limit_properties:
        broker.set_limits(kind, name, limits)
    if modes is not None:
        broker.set_consumer_modes(name, modes)
    if persistent is not None:
        broker.set_default_persistence(name, persistent)
    updated = {"name": name, "type": _kind_word(kind), "limits": _limits_data(limits)}
    shown = dict(updated["limits"])
    if kind == QUEUE:
        updated["consumer_modes"] = _modes_data(destination.modes)
        shown.update(updated["consumer_modes"])
    else:
        updated[DEFAULT_PERSISTENCE] = destination.default_persistence
        shown[DEFAULT_PERSISTENCE] = "true" if destination.default_persistence else "false"
    changed = ", ".join(f"{p}={v}" for p, v in shown.items() if p in properties)
    text = f"updated {_kind_word(kind)} {name!r}: {changed}." + _survives(context)
    return Reply(text, {"updated": updated})


# -- destroy, purge, pause, resume, compact dst ------------------------------------------


def destroy_dst(context, arguments):
    """C{destroy dst -t q|t -n NAME}."""
    _, kind, name = _destination_options(arguments, _DESTROY_USAGE)
    _find(context, kind, name)
    description = (f"{_kind_word(kind)} {name} was destroyed by an administrator"
                   " (destroy dst)")
    consumers, producers = context.broker.destroy_destination(kind, name, description)
    text = (f"destroyed {_kind_word(kind)} {name!r}, with its messages; {consumers}"
            f" consumer(s) and {producers} producer(s) detached.")
    return Reply(text, {"destroyed": {"name": name, "type": _kind_word(kind)},
                        "consumers": consumers, "producers": producers})


def purge_dst(context, arguments):
    """C{purge dst -t q|t -n NAME}."""
    _, kind, name = _destination_options(arguments, _PURGE_USAGE)
    destination = _find(context, kind, name)
    unacked = sum(q.in_flight for q in context.broker.own_queues(destination))
    purged = context.broker.purge_destination(kind, name)
    text = (f"purged {_kind_word(kind)} {name!r}: {purged} waiting message(s) removed;"
            f" {unacked} delivered but unacknowledged message(s) kept.")
    return Reply(text, {"purged": purged, "kept_unacked": unacked, "name": name,
                        "type": _kind_word(kind)})


def pause_dst(context, arguments):
    """C{pause dst -t q|t -n NAME [-pst PRODUCERS|CONSUMERS|ALL]}."""
    options, kind, name = _destination_options(arguments, _PAUSE_USAGE, values={"-pst"})
    what = options.get("-pst", "ALL").upper()
    if what not in PAUSE_TARGETS:
        raise BadRequest(f"-pst {options['-pst']}: give one of "
                         + ", ".join(PAUSE_TARGETS) + f"; usage: {_PAUSE_USAGE}")
    _find(context, kind, name)
    destination = context.broker.pause_destination(
        kind, name, producers=what in ("PRODUCERS", "ALL"),
        consumers=what in ("CONSUMERS", "ALL"))
    text = (f"paused {_kind_word(kind)} {name!r} ({what}); it is now {destination.state}."
            f" resume dst -t {kind[0]} -n {name} undoes it.")
    return Reply(text, {"paused": what, "state": destination.state, "name": name,
                        "type": _kind_word(kind)})


def resume_dst(context, arguments):
    """C{resume dst -t q|t -n NAME}."""
    _, kind, name = _destination_options(arguments, _RESUME_USAGE)
    _find(context, kind, name)
    destination = context.broker.resume_destination(kind, name)
    text = f"resumed {_kind_word(kind)} {name!r}; it is now {destination.state}."
    return Reply(text, {"state": destination.state, "name": name,
                        "type": _kind_word(kind)})


def compact_dst(context, arguments):
    """C{compact dst -t q|t -n NAME}: the destination must be paused (as imqcmd's)."""
    _, kind, name = _destination_options(arguments, _COMPACT_USAGE)
    destination = _find(context, kind, name)
    if destination.state == RUNNING:
        raise BadRequest(f"{_kind_word(kind)} {name!r} is running: pause it first"
                         f" (pause dst -t {kind[0]} -n {name}), then compact it")
    persistence = context.broker.persistence
    if persistence is None:
        return Reply("this broker keeps no messages on disk: nothing to compact.",
                     {"compacted": False, "reason": "no store"})
    done = persistence.store.compact()
    outcome = []

    def known(result):    # what is known already (the memory store: all); passed on
        outcome.append(result)
        return result
    done.addBoth(known)
    if outcome:
        if isinstance(outcome[0], Failure):
            done.addErrback(lambda _: None)   # told in the reply, not the log
            raise AdminError("the message store could not be compacted: "
                             + outcome[0].getErrorMessage())
        return _compacted(outcome[0])
    done.addCallbacks(_log_compaction, _compaction_failed)
    return Reply("compaction of the message store started: the store compacts all its"
                 " files at once, not one destination's; the broker's log gives the"
                 " figures when it is done.", {"compacted": "started"})


def _compacted(figures):
    if not figures.get("bytes_before"):
        return Reply("this message store needs no compaction (it has no files to"
                     " compact).", {"compacted": False, "figures": figures})
    text = (f"compacted the message store: {figures['bytes_before']} bytes before,"
            f" {figures['bytes_after']} after ({figures.get('live_bytes', '?')} live).")
    return Reply(text, {"compacted": True, "figures": figures})


def _log_compaction(figures):
    _log.info("compact dst: the message store went from {before} to {after} bytes",
              before=figures.get("bytes_before"), after=figures.get("bytes_after"))


def _compaction_failed(failure):
    _log.warn("compact dst: compacting the message store failed: {why}",
              why=failure.getErrorMessage())


# -- durable subscriptions -------------------------------------------------------------

_DUR_HEADERS = ("Name", "Client ID", "Topic", "State", "Msgs Count", "Msgs Bytes",
                "Unacked", "Owner")


def list_dur(context, arguments):
    """C{list dur [-d TOPIC]}."""
    options = parse_options(arguments, _LIST_DUR_USAGE, values={"-d"})
    topic = options.get("-d")
    data = []
    for queue in context.broker.durables():
        if topic is not None and queue.pattern != topic:
            continue
        container_id, name = queue.durable_key
        data.append({
            "name": name, "client_id": container_id, "topic": queue.pattern,
            "selector": None if queue.selector is None else queue.selector.text,
            "state": "ACTIVE" if queue.consumers else "INACTIVE",
            "consumers": len(queue.consumers), "messages": queue.held,
            "bytes": queue.held_bytes, "unacked": queue.in_flight, "owner": queue.owner})
    rows = [(d["name"], d["client_id"], d["topic"], d["state"], d["messages"],
             d["bytes"], d["unacked"], d["owner"] or "-") for d in data]
    text = f"{len(data)} durable subscriptions\n" + render_table(_DUR_HEADERS, rows)
    return Reply(text, data)


def _durable_options(arguments, usage):
    options = parse_options(arguments, usage, values={"-n", "-c"},
                            required={"-n", "-c"})
    return options["-n"], options["-c"]


def _durable(context, name, client_id):
    try:
        return context.broker.subscription(client_id, name)
    except NotFound:
        raise NotFoundError(f"no durable subscription {name!r} of client id"
                            f" {client_id!r}; list dur shows them") from None


def destroy_dur(context, arguments):
    """C{destroy dur -n NAME -c CLIENTID}: refused while a consumer is attached."""
    name, client_id = _durable_options(arguments, _DESTROY_DUR_USAGE)
    queue = _durable(context, name, client_id)
    held = queue.held
    try:
        context.broker.destroy_durable(client_id, name)
    except NotAllowed:
        raise InUse(f"durable subscription {name!r} of client id {client_id!r} has a"
                    " consumer attached; it can be destroyed once that consumer has"
                    " gone (destroy cxn can close its connection)") from None
    return Reply(f"destroyed durable subscription {name!r} of client id {client_id!r},"
                 f" with its {held} message(s).",
                 {"destroyed": {"name": name, "client_id": client_id},
                  "messages": held})


def purge_dur(context, arguments):
    """C{purge dur -n NAME -c CLIENTID}."""
    name, client_id = _durable_options(arguments, _PURGE_DUR_USAGE)
    queue = _durable(context, name, client_id)
    unacked = queue.in_flight
    purged = context.broker.purge_durable(client_id, name)
    return Reply(f"purged durable subscription {name!r} of client id {client_id!r}:"
                 f" {purged} waiting message(s) removed; {unacked} delivered but"
                 " unacknowledged message(s) kept.",
                 {"purged": purged, "kept_unacked": unacked, "name": name,
                  "client_id": client_id})


#: The destination and durable commands, C{(verb, object) -> Command} (S11.1).
COMMANDS = {
    ("list", "dst"): Command(_LIST_USAGE, list_dst,
                             "the destinations: state, clients, messages held"),
    ("query", "dst"): Command(_QUERY_USAGE, query_dst,
                              "one destination in detail, with its limits"),
    ("create", "dst"): Command(_CREATE_USAGE, create_dst,
                               "create a destination, with limits (maxNumMsgs,"
                               " maxTotalMsgBytes, limitBehavior, maxBytesPerMsg,"
                               " maxNumProducers, consumerFlowLimit, useDMQ,"
                               " maxDeliveryCount)"),
    ("update", "dst"): Command(_UPDATE_USAGE, update_dst,
                               "change a destination's limits now"),
    ("destroy", "dst"): Command(_DESTROY_USAGE, destroy_dst,
                                "delete a destination and its messages; its clients'"
                                " links are closed"),
    ("purge", "dst"): Command(_PURGE_USAGE, purge_dst,
                              "remove a destination's waiting messages"),
    ("pause", "dst"): Command(_PAUSE_USAGE, pause_dst,
                              "hold a destination's producers, consumers or both"),
    ("resume", "dst"): Command(_RESUME_USAGE, resume_dst, "undo pause dst"),
    ("compact", "dst"): Command(_COMPACT_USAGE, compact_dst,
                                "compact the message store (destination paused)"),
    ("list", "dur"): Command(_LIST_DUR_USAGE, list_dur, "the durable subscriptions"),
    ("destroy", "dur"): Command(_DESTROY_DUR_USAGE, destroy_dur,
                                "delete a durable subscription and its messages"),
    ("purge", "dur"): Command(_PURGE_DUR_USAGE, purge_dur,
                              "remove a durable subscription's waiting messages"),
}
