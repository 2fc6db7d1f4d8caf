"""What every store method does before its work (S3.1: failures arrive as errbacks).

A store that failed a disk write earlier refuses everything (fail-stop), a store that
is not open says why, and a caller's bad argument becomes a L{StoreError} errback,
never an exception raised at the caller.
"""

from twisted.internet import defer

from mqgate.store.interfaces import StoreClosed, StoreError, StoreFailed

__all__ = ["guarded"]


def guarded(method):
    """Decorate a store method. The store has C{_state} (C{'new'}, C{'open'},
    C{'closed'}) and C{_failed} (the exception of an earlier failed write, or None)."""
    def wrapper(self, *args, **kwargs):
        if self._failed is not None:
            return defer.fail(StoreFailed(self._failed))
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
