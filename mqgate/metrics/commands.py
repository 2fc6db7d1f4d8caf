"""
The C{metrics} admin commands (S5.1, S11.1), imqcmd's words:

    metrics bkr [-m ttl|rts]                    the broker's totals
    metrics svc -n NAME [-m ttl|rts]            one connection service
    metrics dst -t q|t -n NAME [-m ttl|rts|con] one queue or topic

Each answers one reading: C{data} is the snapshot dict of L{mqgate.metrics.snapshot}
(totals since the broker started, and what is held now), C{text} an imqcmd-like
table of it. C{-m} picks the table: C{ttl} (default) the totals, C{con} the
producers and consumers of a destination; C{rts}, rates, needs two readings some
seconds apart, which C{mqgate cmd} takes itself with imqcmd's C{-int SECONDS} and
C{-msp SAMPLES} (see L{mqgate.admin.cmd}): the broker answers the same totals, and
the client divides the differences by the time between them.
"""

from dataclasses import dataclass

from mqgate.admin import tables
from mqgate.admin.options import destination_type, parse_options
from mqgate.admin.requests import BadRequest, Command, NotFoundError, Reply
from mqgate.core.addresses import NotFound
from mqgate.metrics import snapshot

__all__ = ["COMMANDS", "metrics_broker", "metrics_service", "metrics_destination",
           "BKR_USAGE", "SVC_USAGE", "DST_USAGE", "render_table", "RATE_KEYS",
           "Sampling", "sampling", "rates", "SampleTable"]

BKR_USAGE = "metrics bkr [-m ttl|rts]"
SVC_USAGE = "metrics svc -n NAME [-m ttl|rts]"
DST_USAGE = "metrics dst -t q|t -n NAME [-m ttl|rts|con]"

_BROKER_KINDS = ("ttl", "rts")
_DESTINATION_KINDS = ("ttl", "rts", "con")


def _kind(options, allowed, usage):
    kind = options.get("-m", "ttl").lower()
    if kind not in allowed:
        raise BadRequest(f"-m {options['-m']!r}: use {' or '.join(allowed)}; "
                         f"usage: {usage}")
    return kind


def render_table(title, columns, rows):
    """The table of a metrics command: a title over right-aligned figures.

    @param columns: C{(head, key)} pairs; C{rows}: dicts holding those keys.
    """
    table = tables.render_table([head for head, _ in columns],
                                [[row.get(key) for _, key in columns] for row in rows],
                                title=title, figures=True)
    return table + "\n"


# -- metrics bkr -----------------------------------------------------------------------

_BROKER_COLUMNS = (
    ("Msgs in", "messages_in"), ("Msgs out", "messages_out"),
    ("Bytes in", "bytes_in"), ("Bytes out", "bytes_out"),
    ("Msgs held", "messages"), ("Bytes held", "messages_bytes"),
    ("Destinations", "destinations"), ("Connections", "connections"),
)
# The process's figures (snapshot.process_snapshot, as Prometheus' process_* and the
# jvm metrics topic have them) that metrics bkr adds to its data; its table shows
# the memory in MiB and the CPU time of both modes.
_PROCESS_KEYS = ("rss_bytes", "peak_rss_bytes", "virtual_bytes", "cpu_user_seconds",
                 "cpu_system_seconds")
_PROCESS_COLUMNS = (("Memory (MiB)", "memory_mib"), ("CPU (s)", "cpu_seconds"))


def metrics_broker(context, arguments):
    """C{metrics bkr}: the broker's totals and its process's memory and CPU (S5.1)."""
    options = parse_options(arguments, BKR_USAGE, values={"-m"})
    _kind(options, _BROKER_KINDS, BKR_USAGE)
    data = snapshot.broker_snapshot(context)
    figures = snapshot.process_snapshot()
    data.update((key, figures[key]) for key in _PROCESS_KEYS)
    shown = dict(data, memory_mib=data["rss_bytes"] / (1 << 20),
                 cpu_seconds=data["cpu_user_seconds"] + data["cpu_system_seconds"])
    return Reply(render_table("Broker metrics", _BROKER_COLUMNS + _PROCESS_COLUMNS,
                              [shown]), data)


# -- metrics svc -----------------------------------------------------------------------

_SERVICE_COLUMNS = (
    ("Connections", "connections"), ("Opened", "connections_opened"),
    ("Closed", "connections_closed"), ("Bytes in", "bytes_in"),
    ("Bytes out", "bytes_out"), ("Workers in use", "workers_in_use"),
)


def metrics_service(context, arguments):
    """C{metrics svc -n NAME}: one connection service's figures (S5.1)."""
    options = parse_options(arguments, SVC_USAGE, values={"-n", "-m"}, required={"-n"})
    _kind(options, _BROKER_KINDS, SVC_USAGE)
    name = options["-n"]
    try:
        data = snapshot.service_snapshot(context, name)
    except KeyError:
        running = ", ".join(snapshot.service_names(context)) or "none"
        raise NotFoundError(f"no service {name!r} is running (running: {running}; "
                            "list svc lists them)") from None
    return Reply(render_table(f"Metrics of service {name}", _SERVICE_COLUMNS, [data]),
                 data)


# -- metrics dst -----------------------------------------------------------------------

_TOTAL_COLUMNS = (
    ("Msgs in", "messages_in"), ("Msgs out", "messages_out"),
    ("Bytes in", "bytes_in"), ("Bytes out", "bytes_out"),
    ("Msgs held", "messages"), ("Peak held", "peak_messages"),
    ("Bytes held", "messages_bytes"), ("Oldest (s)", "oldest_message_age_seconds"),
)
_CONSUMER_COLUMNS = (
    ("Producers", "producers"), ("Consumers", "consumers"),
    ("Msgs ready", "messages_ready"), ("Msgs unacked", "messages_unacked"),
    ("Delivered", "delivered"),
)


def metrics_destination(context, arguments):
    """C{metrics dst -t q|t -n NAME [-m ttl|rts|con]}: one destination (S5.1)."""
    options = parse_options(arguments, DST_USAGE, values={"-t", "-n", "-m"},
                            required={"-t", "-n"})
    kind = _kind(options, _DESTINATION_KINDS, DST_USAGE)
    dest_type, name = destination_type(options["-t"]), options["-n"]
    broker = context.broker
    try:
        dest = broker.queue(name) if dest_type == "queue" else broker.topic(name)
    except NotFound:
        raise NotFoundError(f"no {dest_type} {name!r} (list dst lists the "
                            "destinations)") from None
    data = snapshot.destination_snapshot(dest)
    columns = _CONSUMER_COLUMNS if kind == "con" else _TOTAL_COLUMNS
    return Reply(render_table(f"Metrics of {dest_type} {name}", columns, [data]), data)


COMMANDS = {
    ("metrics", "bkr"): Command(BKR_USAGE, metrics_broker,
                                "the broker's messages and bytes in and out, what it "
                                "holds, its destinations and connections, its "
                                "memory and CPU time"),
    ("metrics", "svc"): Command(SVC_USAGE, metrics_service,
                                "a service's connections (now, opened, closed), bytes "
                                "in and out, workers in use"),
    ("metrics", "dst"): Command(DST_USAGE, metrics_destination,
                                "a destination's messages and bytes in and out, held, "
                                "peak, oldest message age; -m con: producers and "
                                "consumers"),
}


# -- sampling: mqgate cmd's -int and -msp ----------------------------------------------

#: The totals whose differences make the rates (per second).
RATE_KEYS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
_RATE_HEADS = {"messages_in": "Msgs/s in", "messages_out": "Msgs/s out",
               "bytes_in": "Bytes/s in", "bytes_out": "Bytes/s out"}
# What a sampled line shows of the reading itself, besides the totals.
_NOW_KEYS = (("Msgs held", "messages"), ("Connections", "connections"),
             ("Consumers", "consumers"))


@dataclass(frozen=True)
class Sampling:
    """How C{mqgate cmd} reads a C{metrics} command (imqcmd's C{-int} and C{-msp}).

    @ivar words: the command's words without C{-int} and C{-msp} (sent as they are).
    @ivar interval: seconds between readings (imqcmd's default, 5).
    @ivar samples: lines to print (imqcmd's C{-msp}; default 1).
    @ivar rates: C{-m rts}: every line shows rates, so one more reading is taken
        first.
    """

    words: tuple
    interval: float = 5.0
    samples: int = 1
    rates: bool = False

    @property
    def readings(self):
        """How many times the broker is asked."""
        return self.samples + 1 if self.rates else self.samples

    @property
    def single(self):
        """One reading, shown as the broker's own table."""
        return self.readings == 1


def sampling(words):
    """Take C{-int SECONDS} and C{-msp SAMPLES} out of a C{metrics} command's words.

    @raise BadRequest: a value that is not a positive number.
    """
    words = list(words)
    found = {}
    for option in ("-int", "-msp"):
        if option in words:
            at = words.index(option)
            if at + 1 >= len(words):
                raise BadRequest(f"{option} needs a value")
            found[option] = words[at + 1]
            del words[at:at + 2]
    try:
        interval = float(found.get("-int", 5))
        samples = int(found.get("-msp", 1))
    except ValueError:
        raise BadRequest("-int takes seconds and -msp a number of samples") from None
    if not interval > 0 or samples < 1:
        raise BadRequest("-int takes seconds above 0 and -msp a number of samples, "
                         "1 or more")
    mode = words[words.index("-m") + 1].lower() if "-m" in words[:-1] else "ttl"
    return Sampling(tuple(words), interval, samples, mode == "rts")


def rates(previous, current, seconds):
    """C{{key: per second}} of L{RATE_KEYS} between two readings C{seconds} apart."""
    return {key: (current[key] - previous[key]) / seconds for key in RATE_KEYS
            if key in current and key in previous and seconds > 0}


class SampleTable:
    """The lines of a sampled C{metrics} command: a head once, then one per reading.

    @param first: the first reading's data (says which columns there are).
    """

    def __init__(self, first):
        self._totals = [(head, key) for head, key in _BROKER_COLUMNS[:4]
                        if key in first]
        self._rates = [(_RATE_HEADS[key], key) for key in RATE_KEYS if key in first]
        self._now = [(head, key) for head, key in _NOW_KEYS if key in first]
        heads = ["Time"] + [h for h, _ in self._totals + self._rates + self._now]
        self._widths = [max(len(h), 8) for h in heads]
        line = "  ".join(h.rjust(w) for h, w in zip(heads, self._widths))
        self.head = "\n".join(["-" * len(line), line, "-" * len(line)])

    def line(self, when, data, rates_now):
        """One reading: C{when} (text), the totals, C{rates_now} (or none: C{-})."""
        cells = [when] + [tables.cell(data.get(k)) for _, k in self._totals]
        cells += [tables.cell(rates_now.get(k)) if rates_now else "-" for _, k in self._rates]
        cells += [tables.cell(data.get(k)) for _, k in self._now]
        return "  ".join(c.rjust(w) for c, w in zip(cells, self._widths))
