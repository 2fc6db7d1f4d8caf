"""
MQ Light subscriptions (S8.3, S8.5; docs/mqlight.md): their addresses, their topic
patterns, and how long a subscription outlives its last subscriber.

An MQ Light client subscribes with a receiving link whose address is

 - C{private:<pattern>}: a subscription of its own, identified by its client id (the
   AMQP container-id) and the pattern; the same client id resubscribing later resumes
   it, backlog and all;
 - C{share:<name>:<pattern>}: a subscription shared by every client that subscribes
   with the same name and pattern, whatever their ids; its messages are split among
   them (each goes to one).

Patterns use C{/} between levels, C{+} for exactly one level and C{#} for any number;
C{*} is an ordinary character there. The publisher names a plain topic
(C{sports/football}), which matches C{private:sports/+} and C{share:fans:sports/#}.

A subscription lives as long as it has subscribers, and then for its time-to-live: the
C{timeout} (seconds) of the link's source, which the client always sends with the
expiry policy C{link-detach}. A subscriber coming back within it resumes the
subscription; after it, the subscription and every message it held (persistent ones
too) are removed. A time-to-live of 0 removes it when its last subscriber leaves; a
detach with C{closed=true} (the client's unsubscribe with ttl 0) removes it then too.
The expiry policy C{never} keeps it until it is closed. A broker restart restores the
subscriptions that store their messages (those with a time-to-live), and the
time-to-live of each starts again then: nobody is subscribed to them yet.

Nothing here does I/O: the reactor comes in as C{clock} (a C{task.Clock} in tests).
"""

import re

import attr

from mqgate.core import addresses
from mqgate.core.addresses import AddressError

PRIVATE = "private"
SHARE = "share"

#: The container-id of every shared subscription's key: C{share:} names are one
#: namespace for all clients.
SHARED_CONTAINER = "mqlight:share"

#: What the client's ids are made of (FACTS 3.1): up to 256 of these characters.
_CLIENT_ID = re.compile(r"[A-Za-z0-9%/._]{1,256}")
#: The id the client makes up when the application gives none.
_AUTO_ID = re.compile(r"AUTO_[0-9a-f]{7}")
#: The client's sender link names: the topic, C{_}, and a version 4 UUID.
_SENDER_SUFFIX = re.compile(
    r"_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_MAX_FRAME = 4294967295


@attr.s(frozen=True, slots=True)
class Subscription:
    """A parsed C{private:}/C{share:} address.

    @ivar kind: L{PRIVATE} or L{SHARE}.
    @ivar share: the share name (C{None} for a private subscription).
    @ivar pattern: the topic pattern.
    @ivar address: the address as the client wrote it (the subscription's name).
    """

    kind = attr.ib()
    share = attr.ib()
    pattern = attr.ib()
    address = attr.ib()

    @property
    def shared(self):
        return self.kind == SHARE

    def key(self, client_id):
        """The subscription's C{(container_id, name)} among the broker's durable
        subscriptions: a private one is its client's, a shared one everybody's."""
        if self.shared:
            return SHARED_CONTAINER, self.address
        return client_id or "", self.address


def parse(address):
    """The L{Subscription} named by C{address}, or C{None} when it is not an MQ Light
    subscription address (neither C{private:} nor C{share:}).

    @raise AddressError: it starts like one but is malformed (no pattern, no share
        name, or a share name without the colon that ends it).
    """
    if not isinstance(address, str):
        return None
    if address.startswith("private:"):
        pattern = address[len("private:"):]
        if not pattern:
            raise AddressError(f"{address!r} names no topic pattern: write"
                               " private:<pattern>, e.g. private:sports/#")
        return Subscription(PRIVATE, None, pattern, address)
    if address.startswith("share:"):
        share, colon, pattern = address[len("share:"):].partition(":")
        if not colon or not share or not pattern:
            raise AddressError(f"{address!r} is not share:<name>:<pattern> (the share"
                               " name cannot contain ':'), e.g. share:fans:sports/#")
        return Subscription(SHARE, share, pattern, address)
    return None


def is_subscription_name(name):
    """Whether a durable subscription's name is an MQ Light address (recovery)."""
    return name.startswith("private:") or name.startswith("share:")


# -- topics ---------------------------------------------------------------------------

_LITERAL_STAR = "\0*"


def _levels(text, wildcards):
    # The dotted matcher's levels: "+" becomes its one-level wildcard, a literal "*"
    # something it cannot take for one.
    levels = text.split("/")
    return [("*" if level == "+" and wildcards else
             _LITERAL_STAR if level == "*" else level) for level in levels]


def topic_matches(pattern, topic):
    """Whether the MQ Light C{pattern} matches the topic name C{topic}.

    Levels are separated by C{/}; C{+} matches exactly one level, C{#} zero or more.
    Wildcards count only as whole levels. The cost is bounded as in
    L{mqgate.core.addresses.topic_matches}, whose matcher this one uses.
    """
    if pattern == topic:
        return True
    if "+" not in pattern and "#" not in pattern:
        return False
    return addresses.match_levels(_levels(pattern, True), _levels(topic, False))


def is_pattern(pattern):
    """Whether an MQ Light pattern has a wildcard level."""
    return any(level in ("+", "#") for level in pattern.split("/"))


# -- who the peer is (S8.5, FACTS 3.1) ----------------------------------------------

def is_client_id(container_id):
    """Whether C{container_id} is one the MQ Light client could send."""
    return isinstance(container_id, str) and _CLIENT_ID.fullmatch(container_id) is not None


def open_looks_like_mqlight(open_frame):
    """Whether an AMQP open frame is the MQ Light client's: an id of its form, the
    largest frame size and the C{en-US} locale, which other clients do not send."""
    locales = open_frame.outgoing_locales or ()
    if isinstance(locales, str):
        locales = (locales,)
    return (is_client_id(open_frame.container_id)
            and (_AUTO_ID.fullmatch(open_frame.container_id) is not None
                 or (open_frame.max_frame_size == _MAX_FRAME
                     and "en-US" in (str(locale) for locale in locales))))


def is_mqlight_sender(link_name, target_address):
    """Whether a sending link is the MQ Light client's: it names each sender after its
    topic, C{<topic>_<uuid>}, a form no other client uses."""
    if not isinstance(link_name, str) or not isinstance(target_address, str):
        return False
    if not target_address or not link_name.startswith(target_address):
        return False
    return _SENDER_SUFFIX.fullmatch(link_name[len(target_address):]) is not None


# -- time-to-live (S8.3) -------------------------------------------------------------

#: A time-to-live that never runs out (the expiry policy C{never}).
FOREVER = None

_TTL_RECORD = re.compile(r"mqlight-ttl=(\d+|never)")


class TtlRecord:
    """A subscription's time-to-live as the store keeps it: in the selector slot of
    its durable subscription record, which an MQ Light subscription never uses (the
    client sends no filter). L{ttl_of_record} reads it back."""

    __slots__ = ("text",)

    def __init__(self, ttl):
        self.text = f"mqlight-ttl={'never' if ttl is FOREVER else int(ttl)}"


def ttl_of_record(text):
    """The time-to-live a L{TtlRecord} stored (C{FOREVER}, or seconds); 0 when the
    record is missing or unreadable: such a subscription goes if nobody resumes it."""
    match = _TTL_RECORD.fullmatch(text or "")
    if match is None:
        return 0
    value = match.group(1)
    return FOREVER if value == "never" else int(value)


def ttl_of_source(expiry_policy, timeout):
    """The time-to-live a receiving link's source asks for: C{FOREVER} for the expiry
    policy C{never}, else its C{timeout} in seconds (the client sends C{link-detach}
    and the ttl rounded to seconds; another policy ends at the link's end too, for a
    subscription, which has nothing else to outlive)."""
    if str(expiry_policy) == "never":
        return FOREVER
    return int(timeout or 0)


class Lifetimes:
    """The time-to-live of every MQ Light subscription, and the timers that remove
    those nobody is subscribed to.

    @param clock: an C{IReactorTime} (C{callLater}).
    @param remove: C{remove(queue)} deletes a subscription and its messages.
    """

    def __init__(self, clock, remove):
        self._clock = clock
        self._remove = remove
        self._ttl = {}       # subscription queue -> seconds, or FOREVER
        self._timers = {}    # subscription queue -> its pending removal

    def ttl(self, queue):
        """The subscription's time-to-live (seconds, or C{FOREVER})."""
        return self._ttl.get(queue, 0)

    def subscribed(self, queue, ttl):
        """A subscriber attached: the subscription stays while it is there, and its
        time-to-live is now C{ttl} (the last subscriber's says how long it outlives
        them)."""
        self._cancel(queue)
        self._ttl[queue] = ttl

    def unsubscribed(self, queue, close=False):
        """A subscriber left. When none is left, the subscription goes at once
        (C{close}: the client unsubscribed for good; or a time-to-live of 0) or after
        its time-to-live; C{FOREVER} keeps it until it is closed."""
        if queue.consumers or queue.deleted:
            return
        ttl = 0 if close else self._ttl.get(queue, 0)
        if ttl == 0:
            self.forget(queue)
            self._remove(queue)
        elif ttl is not FOREVER:
            self._cancel(queue)
            self._timers[queue] = self._clock.callLater(ttl, self._expired, queue)

    def restored(self, queue, ttl):
        """A subscription the store kept: its time-to-live starts now (one of 0 runs
        out on the reactor's next turn, once the broker is restored)."""
        self._ttl[queue] = ttl
        if ttl is not FOREVER:
            self._timers[queue] = self._clock.callLater(ttl, self._expired, queue)

    def forget(self, queue):
        """The subscription is gone (removed here, or by an operator)."""
        self._cancel(queue)
        self._ttl.pop(queue, None)

    def pending(self):
        """How many subscriptions wait for their time-to-live to run out."""
        return len(self._timers)

    def _expired(self, queue):
        del self._timers[queue]
        if not queue.consumers and not queue.deleted:
            self._ttl.pop(queue, None)
            self._remove(queue)

    def _cancel(self, queue):
        timer = self._timers.pop(queue, None)
        if timer is not None and timer.active():
            timer.cancel()
