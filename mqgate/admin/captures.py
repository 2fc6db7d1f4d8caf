"""
The capture, divert and setting commands, as admin request handlers (S7.1-S7.4, S7.8,
S7.9).

    list capture                                  the capture subscriptions, figures
    query capture -n NAME                         one, with its bounds and drops
    create capture -n NAME -d ADDRESS [-s SELECTOR] [-o bound=value]...
                                                  install one (needs capture:write)
    destroy capture -n NAME                       remove it and all it installed
    list divert                                   the diverts
    create divert -n NAME -d ADDRESS -target ADDRESS [-exclusive] [-s SELECTOR]
    destroy divert -n NAME
    list setting                                  the address and security settings
    create setting -t address -m MATCH [-o fullPolicy=DROP|FAIL|BLOCK|PAGE]
                   [-o maxSizeBytes=SIZE] [-o maxSizeMessages=N]
                   [-o expiryDelay=SECONDS]
    create setting -t security -m MATCH -o consume=GROUP[,GROUP]...
    destroy setting -t address|security -m MATCH

Addresses are written as clients write them: C{queue://orders}, C{topic://prices}, or
a bare name (the broker's default type). The capture bounds C{-o} takes are
C{ringSize}, C{expiryDelay} (seconds), C{rate} (copies a second), C{bodyMax},
C{retention} (seconds) and C{storedMax} (sizes: C{256k}, C{5g}); the broker's
C{mqgate.capture.*} settings are the defaults. What these commands make is kept by
the runtime catalog and made again after a restart; a capture's own divert, ring
queue and settings are removed with it, never one by one.

An address setting bounds the queues it matches (C{maxSizeBytes}, C{maxSizeMessages})
and its full policy says what a full one does (FAIL refuses the send, BLOCK holds the
producer back, DROP drops the message silently; PAGE takes no bounds); its expiry delay
gives messages without an expiry one. Limits an operator gave a destination
(C{update dst -o}) win over it; see L{mqgate.core.settings} and docs/settings.md.

Each handler is C{run(context, arguments[, principal]) -> Reply}: it calls the core.
"""

import attr

from mqgate.admin.destinations import parse_size
from mqgate.admin.options import parse_options
from mqgate.admin.requests import BadRequest, Command, NotFoundError, Reply
from mqgate.admin.tables import render_pairs, render_table
from mqgate.admin.wire import AdminError, Forbidden
from mqgate.core.addresses import AddressError, NotAllowed, NotFound
from mqgate.core.broker import Requester
from mqgate.core.capture import OWNER, CaptureForbidden, CaptureRefused
from mqgate.core.selectors import SelectorError
from mqgate.core.settings import AddressSetting, SecuritySetting

__all__ = ["COMMANDS"]

_LIST_CAPTURE = "list capture"
_QUERY_CAPTURE = "query capture -n NAME"
_CREATE_CAPTURE = ("create capture -n NAME -d ADDRESS [-s SELECTOR]"
                   " [-o ringSize|expiryDelay|rate|bodyMax|retention|storedMax=VALUE]...")
_DESTROY_CAPTURE = "destroy capture -n NAME"
_LIST_DIVERT = "list divert"
_CREATE_DIVERT = ("create divert -n NAME -d ADDRESS -target ADDRESS [-exclusive]"
                  " [-s SELECTOR]")
_DESTROY_DIVERT = "destroy divert -n NAME"
_LIST_SETTING = "list setting"
_CREATE_SETTING = ("create setting -t address|security -m MATCH"
                   " [-o fullPolicy=DROP|FAIL|BLOCK|PAGE] [-o maxSizeBytes=SIZE]"
                   " [-o maxSizeMessages=N] [-o expiryDelay=SECONDS]"
                   " [-o consume=GROUPS]")
_DESTROY_SETTING = "destroy setting -t address|security -m MATCH"


class Refused(AdminError):
    """The broker refused to make or remove it (409); the message says why."""

    status = 409


def _captures(context):
    captures = context.broker.captures
    if captures is None:
        raise NotFoundError("capture is not set up on this broker")
    return captures


def _requester(principal):
    return None if principal is None else Requester.of(principal, None)


# -- capture ---------------------------------------------------------------------------

_CAPTURE_HEADERS = ("Name", "Address", "Queue", "Copied", "Ingested", "Dropped rate",
                    "Dropped ring", "Ring size")


def list_capture(context, arguments):
    """C{list capture}."""
    parse_options(arguments, _LIST_CAPTURE)
    data = [sub.describe() for sub in _captures(context)]
    rows = [(d["name"], d["address"], d["queue"], d["copied"], d["ingested"],
             d["dropped_rate"], d["dropped_ring"], d["ring_size"]) for d in data]
    return Reply(f"{len(data)} capture subscriptions\n"
                 + render_table(_CAPTURE_HEADERS, rows), data)


def query_capture(context, arguments):
    """C{query capture -n NAME}."""
    options = parse_options(arguments, _QUERY_CAPTURE, values={"-n"}, required={"-n"})
    captures = _captures(context)
    try:
        sub = captures.get(options["-n"])
    except NotFound as e:
        raise NotFoundError(e.description) from None
    data = sub.describe()
    sink = captures.sink
    if hasattr(sink, "figures"):
        data["sink"] = sink.figures(sub.name)
    pairs = [(key, data[key]) for key in data if key != "sink"]
    pairs += [(f"sink {key}", value) for key, value in data.get("sink", {}).items()]
    if data["per_address"]:
        pairs.append(("note", "a topic is captured once per routed message: which"
                      " subscriptions got it is not known"))
    return Reply(render_pairs(pairs), data)


_BOUNDS = {"ringSize": ("ring_size", int), "expiryDelay": ("expiry_delay", float),
           "rate": ("rate", float), "retention": ("retention", float),
           "bodyMax": ("body_bytes", "size"), "storedMax": ("stored_bytes", "size")}


def _bounds(defaults, properties, usage):
    changes = {}
    for prop in properties:
        name, sep, text = prop.partition("=")
        if not sep or name not in _BOUNDS:
            raise BadRequest(f"-o {prop!r}: a capture bound is one of"
                             f" {', '.join(_BOUNDS)} written name=value; usage: {usage}")
        field, kind = _BOUNDS[name]
        try:
            changes[field] = parse_size(text, name) if kind == "size" else kind(text)
        except ValueError:
            raise BadRequest(f"-o {prop!r}: {name} must be a number") from None
    try:
        return attr.evolve(defaults, **changes)
    except ValueError as e:
        raise BadRequest(str(e)) from None


def create_capture(context, arguments, principal=None):
    """C{create capture -n NAME -d ADDRESS [-s SELECTOR] [-o bound=value]...}."""
    options = parse_options(arguments, _CREATE_CAPTURE, values={"-n", "-d", "-s"},
                            repeated={"-o"}, required={"-n", "-d"})
    captures = _captures(context)
    bounds = _bounds(captures.config.bounds, options["-o"], _CREATE_CAPTURE)
    try:
        sub = captures.install(options["-n"], options["-d"], selector=options.get("-s"),
                               bounds=bounds, requester=_requester(principal))
    except CaptureForbidden as e:
        raise Forbidden(e.description) from None
    except CaptureRefused as e:
        raise Refused(e.description) from None
    except (SelectorError, AddressError) as e:
        raise BadRequest(e.description) from None
    return Reply(f"installed capture {sub.name!r} on {sub.address}: copies go to"
                 f" {sub.queue_name} (a ring of {sub.bounds.ring_size}), at most"
                 f" {sub.bounds.rate:g} a second.", sub.describe())


def destroy_capture(context, arguments, principal=None):
    """C{destroy capture -n NAME}."""
    options = parse_options(arguments, _DESTROY_CAPTURE, values={"-n"}, required={"-n"})
    try:
        sub = _captures(context).remove(options["-n"], requester=_requester(principal))
    except CaptureForbidden as e:
        raise Forbidden(e.description) from None
    except NotFound as e:
        raise NotFoundError(e.description) from None
    return Reply(f"removed capture {sub.name!r} from {sub.address}: its divert, its"
                 f" queue {sub.queue_name} and, with the last capture, the capture"
                 " settings are gone.", {"removed": sub.name})


# -- divert ----------------------------------------------------------------------------

_DIVERT_HEADERS = ("Name", "Address", "Target", "Exclusive", "Selector", "Taken",
                   "Failed", "Owner")


def list_divert(context, arguments):
    """C{list divert}."""
    parse_options(arguments, _LIST_DIVERT)
    data = [d.describe() for d in context.broker.diverts.table]
    rows = [(d["name"], d["address"], d["target"], "yes" if d["exclusive"] else "no",
             d["selector"], d["taken"], d["failed"], d["owner"] or "-") for d in data]
    return Reply(f"{len(data)} diverts\n" + render_table(_DIVERT_HEADERS, rows), data)


def create_divert(context, arguments):
    """C{create divert -n NAME -d ADDRESS -target ADDRESS [-exclusive] [-s SEL]}."""
    options = parse_options(arguments, _CREATE_DIVERT, values={"-n", "-d", "-target", "-s"},
                            flags={"-exclusive"}, required={"-n", "-d", "-target"})
    broker = context.broker
    if options["-n"].startswith("capture."):
        raise BadRequest("divert names starting with 'capture.' are kept for capture"
                         " subscriptions")
    try:
        divert = broker.create_divert(options["-n"], options["-d"], options["-target"],
                                      exclusive="-exclusive" in options,
                                      selector=options.get("-s"))
    except NotAllowed as e:
        raise Refused(e.description) from None
    except (SelectorError, AddressError) as e:
        raise BadRequest(e.description) from None
    how = "moves" if divert.exclusive else "copies"
    return Reply(f"created divert {divert.name!r}: {how} what {divert.source} routes to"
                 f" {divert.target}.", divert.describe())


def destroy_divert(context, arguments):
    """C{destroy divert -n NAME}: not a capture's (remove the capture instead)."""
    options = parse_options(arguments, _DESTROY_DIVERT, values={"-n"}, required={"-n"})
    broker = context.broker
    divert = broker.diverts.table.get(options["-n"])
    if divert is None:
        raise NotFoundError(f"no divert called {options['-n']!r}; list divert shows them")
    if divert.owner == OWNER:
        raise Refused(f"divert {divert.name!r} belongs to a capture subscription: remove"
                      " the capture (destroy capture -n NAME) and it goes with it")
    broker.destroy_divert(divert.name)
    return Reply(f"destroyed divert {divert.name!r}.", {"destroyed": divert.name})


# -- setting ---------------------------------------------------------------------------

_SETTING_HEADERS = ("Type", "Match", "Full policy", "Max bytes", "Max messages",
                    "Expiry delay", "Consume", "Owner")


def list_setting(context, arguments):
    """C{list setting}."""
    parse_options(arguments, _LIST_SETTING)
    settings = context.broker.settings
    data = ([dict(s.describe(), type="address") for s in settings.address.values()]
            + [dict(s.describe(), type="security") for s in settings.security.values()])
    rows = [(d["type"], d["match"], d.get("full_policy"), d.get("max_bytes"),
             d.get("max_messages"), d.get("expiry_delay"),
             ",".join(d.get("permissions", {}).get("consume", ())) or None,
             d["owner"] or "-") for d in data]
    return Reply(f"{len(data)} settings\n" + render_table(_SETTING_HEADERS, rows), data)


def _setting_type(options, usage):
    which = options["-t"]
    if which not in ("address", "security"):
        raise BadRequest(f"-t {which!r}: a setting is of type address or security;"
                         f" usage: {usage}")
    return which


def create_setting(context, arguments):
    """C{create setting -t address|security -m MATCH -o name=value...}."""
    options = parse_options(arguments, _CREATE_SETTING, values={"-t", "-m"},
                            repeated={"-o"}, required={"-t", "-m"})
    which = _setting_type(options, _CREATE_SETTING)
    match = options["-m"]
    if match.startswith("mqgate.capture."):
        raise Refused(f"{match}: the capture settings are made and removed by capture"
                      " subscriptions (create capture)")
    properties = dict(p.partition("=")[::2] for p in options["-o"])
    allowed = ({"fullPolicy", "expiryDelay", "maxSizeBytes", "maxSizeMessages"}
               if which == "address" else {"consume"})
    unknown = set(properties) - allowed
    if unknown:
        raise BadRequest(f"-o {', '.join(sorted(unknown))}: a {which} setting takes"
                         f" {', '.join(sorted(allowed))}; usage: {_CREATE_SETTING}")
    broker = context.broker
    try:
        if which == "address":
            setting = AddressSetting(
                match, properties.get("fullPolicy", "DROP"),
                _setting_number(properties, "expiryDelay", float),
                max_bytes=_setting_number(properties, "maxSizeBytes", parse_size),
                max_messages=_setting_number(properties, "maxSizeMessages", int))
            broker.set_address_setting(setting)
        else:
            if "consume" not in properties:
                raise BadRequest(f"a security setting needs -o consume=GROUP[,GROUP];"
                                 f" usage: {_CREATE_SETTING}")
            groups = tuple(g.strip() for g in properties["consume"].split(",")
                           if g.strip())
            setting = SecuritySetting(match, {"consume": groups})
            broker.set_security_setting(setting)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    return Reply(f"{which} setting on {match} in force.", setting.describe())


def _setting_number(properties, name, parse):
    # -o name=value: absent is None; a bad value is refused naming it. parse is float
    # (seconds), int (messages) or parse_size (bytes: 1600, 16k, 16m; it names a bad
    # value itself); -1 means no bound for the last two.
    text = properties.get(name)
    if text is None:
        return None
    if parse is parse_size:
        value = parse_size(text, name)
    else:
        try:
            value = parse(text.strip())
        except ValueError:
            value = 0
    if value == -1 and parse is not float:
        return None
    if not value > 0:
        what = "a number of seconds above 0" if parse is float else \
            "a whole number of messages above 0, or -1 (no bound)"
        raise BadRequest(f"-o {name}={text}: give {what}; usage: {_CREATE_SETTING}")
    return value


def destroy_setting(context, arguments):
    """C{destroy setting -t address|security -m MATCH}."""
    options = parse_options(arguments, _DESTROY_SETTING, values={"-t", "-m"},
                            required={"-t", "-m"})
    which = _setting_type(options, _DESTROY_SETTING)
    match = options["-m"]
    broker = context.broker
    table = broker.settings.address if which == "address" else broker.settings.security
    setting = table.get(match)
    if setting is None:
        raise NotFoundError(f"no {which} setting on {match!r}; list setting shows them")
    if setting.owner == OWNER:
        raise Refused(f"the {which} setting on {match} belongs to capture: it goes with"
                      " the last capture subscription (destroy capture)")
    broker.remove_setting(which, match)
    return Reply(f"removed the {which} setting on {match}.", {"removed": match})


#: C{(verb, object) -> Command}.
COMMANDS = {
    ("list", "capture"): Command(_LIST_CAPTURE, list_capture,
                                 "the capture subscriptions: copies, drops"),
    ("query", "capture"): Command(_QUERY_CAPTURE, query_capture,
                                  "one capture subscription: bounds and drops"),
    ("create", "capture"): Command(_CREATE_CAPTURE, create_capture,
                                   "install a capture subscription (capture:write)",
                                   with_principal=True),
    ("destroy", "capture"): Command(_DESTROY_CAPTURE, destroy_capture,
                                    "remove a capture subscription and all it installed"
                                    " (capture:write)", with_principal=True),
    ("list", "divert"): Command(_LIST_DIVERT, list_divert, "the diverts"),
    ("create", "divert"): Command(_CREATE_DIVERT, create_divert,
                                  "copy (or with -exclusive move) what an address"
                                  " routes to another"),
    ("destroy", "divert"): Command(_DESTROY_DIVERT, destroy_divert, "remove a divert"),
    ("list", "setting"): Command(_LIST_SETTING, list_setting,
                                 "the address and security settings made at run time"),
    ("create", "setting"): Command(_CREATE_SETTING, create_setting,
                                   "make or replace an address setting (bounds for"
                                   " the queues it matches: FAIL refuses past them,"
                                   " BLOCK holds producers, DROP drops) or a security"
                                   " setting"),
    ("destroy", "setting"): Command(_DESTROY_SETTING, destroy_setting,
                                    "remove an address or security setting"),
}
