"""Synchronous helpers for tests of code that returns Deferreds, without a reactor.

The stores and the authenticator run their blocking work through a function they are
given (``deferToThreadPool`` in the broker); tests give them L{run_now}, which runs the
work at once, so every Deferred has fired by the time the call returns and L{result}
can take its value.
"""

from twisted.internet import defer
from twisted.python.failure import Failure


def run_now(f, *args):
    """A synchronous stand-in for deferToThreadPool: run C{f} now, return a Deferred."""
    return defer.maybeDeferred(f, *args)


def result(d):
    """The result a fired Deferred holds; fails the test if it has none, and raises the
    exception if it failed."""
    box = []
    d.addBoth(box.append)
    assert box, "Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]
