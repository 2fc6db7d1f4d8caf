"""
Consumer modes of a queue (S2.3; FACTS 1.6): active and backup (failover) consumers.

A queue delivers to at most C{maxNumActiveConsumers} consumers at once (-1: any
number). A consumer attached past that waits as a backup: it is attached, its credit
is kept, but it receives nothing until an active consumer goes, when the backup that
waited longest becomes active and gets what the queue holds, the departed one's
unsettled messages first (they go back to the head of the queue, design rule 3). At
most C{maxNumBackupConsumers} may wait (-1: any number); one more is refused with
a LIMIT_EXCEEDED error naming the queue and both limits. With one active
consumer and some backups, a queue has an exclusive consumer with hot standbys: the
JMS failover pattern.

Only plain queues have these limits: a topic subscription's queue has one consumer
(a durable one refuses a second), and a temporary queue belongs to the connection
that made it. The queue (L{mqgate.core.destinations.Queue}) keeps its backups apart
from its active consumers, so dispatch never sees them and costs nothing more.
"""

from mqgate.core.limits import ResourceLimitExceeded

__all__ = ["ConsumerModes", "DEFAULT_MODES", "MAX_ACTIVE", "MAX_BACKUP",
           "modes_attributes", "modes_from_attributes", "refusal"]

#: The destination properties (FACTS 1.6 names), as operators and the store spell them.
MAX_ACTIVE, MAX_BACKUP = "maxNumActiveConsumers", "maxNumBackupConsumers"


class ConsumerModes:
    """How many consumers of a queue are active, and how many may wait as backups.

    @ivar max_active: consumers delivered to at once; -1 means no limit.
    @ivar max_backup: consumers that may wait beyond those; -1 means no limit.
    """

    __slots__ = ("max_active", "max_backup")

    def __init__(self, max_active=-1, max_backup=0):
        if max_active < -1 or max_active == 0:
            raise ValueError(f"{MAX_ACTIVE}={max_active}: give -1 (no limit) or at"
                             " least 1")
        if max_backup < -1:
            raise ValueError(f"{MAX_BACKUP}={max_backup}: give -1 (no limit) or 0 or"
                             " more")
        self.max_active = max_active
        self.max_backup = max_backup

    def __repr__(self):
        return f"<ConsumerModes active={self.max_active} backup={self.max_backup}>"

    def __eq__(self, other):
        return (type(other) is ConsumerModes and self.max_active == other.max_active
                and self.max_backup == other.max_backup)

    def __hash__(self):
        return hash((self.max_active, self.max_backup))

    def room_for_active(self, active):
        """Whether a queue with C{active} active consumers takes one more."""
        return self.max_active < 0 or active < self.max_active

    def room_for_backup(self, backups):
        """Whether a queue with C{backups} waiting takes one more."""
        return self.max_backup < 0 or backups < self.max_backup


#: What a queue has unless configured otherwise (FACTS 1.6: -1 and 0).
DEFAULT_MODES = ConsumerModes()


def refusal(queue_name, modes, active, backups):
    """The error for a consumer past both limits of queue C{queue_name}."""
    return ResourceLimitExceeded(
        f"queue {queue_name!r} has {active} active consumer(s) and {backups} backup"
        f" consumer(s), as many as it may ({MAX_ACTIVE}={modes.max_active},"
        f" {MAX_BACKUP}={modes.max_backup}); an administrator can raise them with"
        f" update dst -t q -n {queue_name} -o {MAX_BACKUP}=N")


def modes_attributes(modes):
    """C{modes} as the attributes stored with a destination (nothing for the
    defaults, so a store written before them reads the same)."""
    if modes == DEFAULT_MODES:
        return {}
    return {MAX_ACTIVE: modes.max_active, MAX_BACKUP: modes.max_backup}


def modes_from_attributes(attributes, default):
    """The L{ConsumerModes} of stored C{attributes}; what they do not name comes from
    C{default}. @raise ValueError: values that make no modes."""
    return ConsumerModes(int(attributes.get(MAX_ACTIVE, default.max_active)),
                         int(attributes.get(MAX_BACKUP, default.max_backup)))
