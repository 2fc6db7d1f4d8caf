"""
The dead message queue C{mq.sys.dmq} (S2.4): where a message goes that the broker will
not deliver from where it was.

A message is dead when it expired (L{EXPIRED}), a full queue removed it to make room
(L{OLDEST}, L{LOW_PRIORITY}: S2.3's REMOVE_OLDEST and REMOVE_LOW_PRIORITY), it failed
delivery as often as its destination allows (L{UNDELIVERABLE}: C{maxDeliveryCount}),
a consumer rejected it (L{REJECTED}: the AMQP C{rejected} outcome) or its consumer's
protocol cannot carry it (L{UNRENDERABLE}). The queue it leaves has already let go of
it in its counts; L{DeadLetters.take} decides where it goes:

 - its destination says C{useDMQ=false}, or it dies on the DMQ itself: dropped
   (counted as such) and removed from the store;
 - otherwise a copy with three message annotations more goes to the DMQ: why
   (C{x-opt-dead-reason}), when (C{x-opt-dead-time}, milliseconds since the epoch) and
   from where (C{x-opt-original-address}). The annotations are spliced into the
   encoded message by the injected C{annotate} (the core never decodes a body, design
   rule 2); with C{truncate_body} only the headers and properties are kept.

A persistent dead message stays persistent: its copy is added under the DMQ's key and
the original removed from its queue's key in one store transaction, so that a crash
leaves it in one place or the other, never in both and never in neither (S3.6).

The DMQ has limits of its own (FACTS 1.6: 1000 messages, 10m) and removes its oldest
messages when full: dead messages never hold a producer back, and the broker-wide
limits (S2.2) do not refuse them (a message that dies was accepted already).
"""

import itertools

from twisted.logger import Logger

from mqgate.core.limits import REMOVE_OLDEST, Limits

__all__ = ["DMQ_NAME", "DeadLetters", "EXPIRED", "OLDEST", "LOW_PRIORITY",
           "UNDELIVERABLE", "REJECTED", "UNRENDERABLE", "REASON", "TIME",
           "ORIGINAL_ADDRESS", "dmq_limits"]

#: The dead message queue's name (FACTS 1.6).
DMQ_NAME = "mq.sys.dmq"

#: Why a message died, as C{x-opt-dead-reason} says it.
EXPIRED = "EXPIRED"
OLDEST = "REMOVED_OLDEST"
LOW_PRIORITY = "REMOVED_LOW_PRIORITY"
UNDELIVERABLE = "MAX_DELIVERY_COUNT"
REJECTED = "REJECTED"
UNRENDERABLE = "UNRENDERABLE"

#: The message-annotation keys (symbols starting x-opt-, AMQP 1.0 Part 3 section 3.2.3).
REASON = "x-opt-dead-reason"
TIME = "x-opt-dead-time"
ORIGINAL_ADDRESS = "x-opt-original-address"

_log = Logger(namespace="mqgate.dmq")


def dmq_limits(max_count=1000, max_bytes=10 << 20):
    """The DMQ's L{Limits}: REMOVE_OLDEST, so that it never blocks anything."""
    return Limits(max_count, max_bytes, REMOVE_OLDEST, use_dmq=False)


def _no_annotations(payload, annotations, keep_body):
    return payload


class DeadLetters:
    """Takes dead messages from every queue of one broker to its DMQ.

    @param dmq: the DMQ, a L{mqgate.core.destinations.Queue}; its own dead messages
        (what its REMOVE_OLDEST removes) are dropped.
    @param clock: an C{IReactorTime} (the time of death).
    @param next_seq: the broker's arrival numbering (a copy on the DMQ is a new message
        there).
    @param annotate: C{annotate(payload, annotations, keep_body) -> payload}: the
        payload with the C{annotations} (a dict of str keys) added to its message
        annotations, its body left out unless C{keep_body}; the glue's, as the core
        never looks inside a payload. By default the payload is kept as it is.
    @param store: the broker's L{mqgate.store.interfaces.IMessageStore} (through its
        L{mqgate.core.persistence.Persistence}), or C{None}.
    @param truncate_body: C{mqgate.destination.DMQ.truncateBody}.
    @param log_dead: C{mqgate.destination.logDeadMsgs}: one log line per dead message.
    @ivar annotate: the C{annotate} in use (the glue sets its own once built).
    @ivar counts: dead messages by reason (to the DMQ or dropped).
    @ivar dropped: dead messages that went nowhere (C{useDMQ=false}, or dead on the
        DMQ).
    """

    def __init__(self, dmq, clock, next_seq, *, annotate=None, persistence=None,
                 truncate_body=False, log_dead=False):
        self.dmq = dmq
        self._seconds = clock.seconds
        self._next_seq = next_seq
        self.annotate = annotate or _no_annotations
        self._persistence = persistence
        self.truncate_body = truncate_body
        self.log_dead = log_dead
        self.counts = {}
        self.dropped = 0
        self._txn_ids = itertools.count(1)

    def __repr__(self):
        return f"<DeadLetters {self.dmq!r} dropped={self.dropped}>"

    def take(self, queue, message, reason):
        """C{message} died on C{queue} for C{reason}: to the DMQ, or dropped.

        The caller has taken it out of C{queue}'s counts (waiting, in flight, bytes);
        what the store holds of it is moved (or removed) here.
        """
        self.counts[reason] = self.counts.get(reason, 0) + 1
        dmq = self.dmq
        address = _address_of(queue)
        stored = message.durable and queue.store is not None
        if queue is dmq or not queue.limits.use_dmq or dmq.deleted:
            self.dropped += 1
            if stored:
                queue.store.remove(message)
            self._log(message, address, reason, "dropped")
            return
        copy = self._copy(message, address, reason)
        if stored and dmq.store is not None:
            self._move(queue.store, dmq.store, message, copy)
        elif stored:
            queue.store.remove(message)
        elif copy.durable and dmq.store is not None:
            # Persistent, but from a queue that stores nothing (a temporary queue, a
            # non-durable subscription): it never was in the store, and still is not.
            copy.durable = False
        queue.dead += 1
        self._log(message, address, reason, f"moved to {DMQ_NAME}")
        dmq.publish(copy)

    def _copy(self, message, address, reason):
        # A new message of its own: the original may be shared with other subscriptions.
        annotations = {REASON: reason, TIME: int(self._seconds() * 1000),
                       ORIGINAL_ADDRESS: address}
        payload = self.annotate(message.payload, annotations, not self.truncate_body)
        copy = type(message)(payload, durable=message.durable, priority=message.priority,
                             expiry=None, to=message.to, reply_to=message.reply_to,
                             message_id=message.message_id,
                             correlation_id=message.correlation_id)
        copy.seq = self._next_seq()
        return copy

    def _move(self, source, target, message, copy):
        # One store transaction: added to the DMQ and removed from its queue together.
        persistence = self._persistence
        store = persistence.store
        txn = f"mqgate.dmq.{copy.seq}.{next(self._txn_ids)}"
        failed = persistence.failed
        store.begin(txn).addErrback(failed, "begin moving a message to", target.key)
        store.add_message(target.key, copy.seq, persistence.record(copy, True),
                          txn=txn).addErrback(failed, "move a message to", target.key)
        store.remove_message(source.key, message.seq, txn=txn).addErrback(
            failed, "move a message from", source.key)
        store.commit(txn).addErrback(failed, "move a message to", target.key)

    def _log(self, message, address, reason, outcome):
        if self.log_dead:
            # Never the body, nor the properties: what, where from, why.
            _log.info("dead message {id} from {address} ({reason}): {outcome}",
                      id=message.message_id, address=address, reason=reason,
                      outcome=outcome)


def _address_of(queue):
    # The destination a message died on, as clients name it.
    if queue.durable_key is not None or queue.pattern is not None:
        return f"topic://{queue.pattern}"
    return f"queue://{queue.name}"
