"""
The broker's connected clients as the egress layer and the admin commands see them
(S9.4, S9.6, S9.7).

One L{EgressClient} per client connection, made by the connection adapter when the peer
has logged in, listed in the broker's L{ClientRegistry} until the connection goes. The
admin show commands read them; the load factor (S9.6) sums their queued bytes and picks
the slowest slow subscribers to disconnect. Pure objects: the adapter supplies the
scheduler, the meter and the way to disconnect.
"""

import collections
import fnmatch
import itertools

from mqgate.egress.profiles import DEFAULT_PROFILE

__all__ = ["ClientRegistry", "EgressClient"]


class EgressClient:
    """One connected client.

    @ivar name: the client name shown by the admin commands: the AMQP container-id or
        the STOMP C{client-id} header, made unique among the connected clients; a
        client that gave none gets C{PROTOCOL/HOST:PORT}.
    @ivar user: the authenticated user name.
    @ivar peer: C{HOST:PORT} of the peer.
    @ivar protocol: C{'amqp'} or C{'stomp'}.
    @ivar service: the connection service it came through (C{'jms'}, C{'admin'} ...).
    @ivar profile: the L{mqgate.egress.profiles.ClientProfile} it runs under.
    @ivar scheduler: its L{mqgate.egress.scheduler.EgressScheduler}.
    @ivar meter: its L{mqgate.egress.slowness.SlowSubscriberMeter}.
    @ivar disconnect: C{disconnect(reason)} closes the connection with C{reason} as
        the protocol's error description.
    """

    __slots__ = ("name", "user", "peer", "protocol", "service", "profile", "scheduler",
                 "meter", "disconnect", "connected_at")

    def __init__(self, name, *, user, peer, protocol, service, profile, scheduler, meter,
                 disconnect, connected_at=0.0):
        self.name = name
        self.user = user
        self.peer = peer
        self.protocol = protocol
        self.service = service
        self.profile = profile
        self.scheduler = scheduler
        self.meter = meter
        self.disconnect = disconnect
        self.connected_at = connected_at

    def __repr__(self):
        return f"<EgressClient {self.name!r} user={self.user!r} peer={self.peer}>"

    @property
    def profile_name(self):
        return self.profile.name if self.profile is not None else DEFAULT_PROFILE

    @property
    def queued_bytes(self):
        """This client's share of the egress buffer budget (S9.6)."""
        return self.scheduler.queued_bytes

    @property
    def slow(self):
        """Whether the client is a slow subscriber now (S9.4)."""
        return self.meter.is_slow()


class ClientRegistry:
    """The connected clients by name, in connection order."""

    def __init__(self):
        self._clients = {}
        self._suffixes = itertools.count(2)
        # Connections per user name, kept as clients come and go: every login asks
        # (S9.7's max connections per user), and a login storm of thousands of
        # clients must not walk the whole registry each time.
        self._per_user = collections.Counter()
        # Egress discards of the clients that have gone (S5.1): the broker's total
        # stays monotonic as clients come and go.
        self.retired_discards = 0

    def __len__(self):
        return len(self._clients)

    def __iter__(self):
        return iter(list(self._clients.values()))

    def unique_name(self, wanted):
        """C{wanted}, or C{wanted#N} when a connected client already has that name."""
        if wanted not in self._clients:
            return wanted
        while True:
            name = f"{wanted}#{next(self._suffixes)}"
            if name not in self._clients:
                return name

    def add(self, client):
        """List C{client}; its name must be unique (see L{unique_name})."""
        if client.name in self._clients:
            raise ValueError(f"a client named {client.name!r} is already connected")
        self._clients[client.name] = client
        self._per_user[client.user] += 1

    def remove(self, client):
        """Forget C{client} (its connection went); unknown clients are ignored."""
        if self._clients.get(client.name) is client:
            del self._clients[client.name]
            self.retired_discards += client.scheduler.discards
            left = self._per_user[client.user] - 1
            if left:
                self._per_user[client.user] = left
            else:
                del self._per_user[client.user]

    def get(self, name):
        """The client called C{name}, or None."""
        return self._clients.get(name)

    def matching(self, pattern):
        """Clients whose name matches C{pattern} (C{*} and C{?} wildcards, as the
        source's show commands take them), in connection order."""
        if pattern == "*":
            return list(self._clients.values())
        if not any(ch in pattern for ch in "*?["):
            client = self._clients.get(pattern)
            return [] if client is None else [client]
        return [c for c in self._clients.values() if fnmatch.fnmatchcase(c.name, pattern)]

    def by_user(self, user):
        """Clients logged in as C{user} (S9.7's max connections per user name)."""
        return [c for c in self._clients.values() if c.user == user]

    def count_user(self, user):
        """How many clients are logged in as C{user}, in O(1)."""
        return self._per_user[user]

    @property
    def queued_bytes(self):
        """Bytes waiting in every client's egress queues: the load factor's input."""
        return sum(client.scheduler.queued_bytes for client in self._clients.values())
