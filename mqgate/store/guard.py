"""What every store method does before its work (S3.1: failures arrive as errbacks).

A store that is not open says why, a store that cannot write now refuses new data at
once (L{refused_while_failing}), and a caller's bad argument becomes a L{StoreError}
errback, never an exception raised at the caller.
"""

from twisted.internet import defer

from mqgate.store.interfaces import StoreClosed, StoreError

__all__ = ["guarded", "refused_while_failing"]


def guarded(method):
    """Decorate a store method. The store has C{_state} (C{'new'}, C{'open'},
    C{'closed'})."""
    def wrapper(self, *args, **kwargs):
        if self._state != "open":
            return defer.fail(StoreClosed(
                "call recover() first" if self._state == "new" else "the store is closed"))
        try:
            return method(self, *args, **kwargs)
        except (StoreError, ValueError, TypeError) as e:
            if not isinstance(e, StoreError):
                e = StoreError(str(e))
            return defer.fail(e)
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


def refused_while_failing(method):
    """Decorate (inside L{guarded}) a method that stores new data: while the store's
    C{health} is failing it is refused at once with L{StoreFailed}, before anything
    changes (S3.6: nothing piles up behind a fault)."""
    def wrapper(self, *args, **kwargs):
        if self.health.failing:
            # Not raised: a refusal is the expected answer, many a second maybe, and a
            # raised exception would carry a traceback (frames for the collector).
            return defer.fail(self.health.refuse())
        return method(self, *args, **kwargs)
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper
