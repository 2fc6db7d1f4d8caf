"""
Persistence (S3): the store interface, the in-memory store and the file store.

The broker creates one store at start-up, calls C{recover()} first, and then uses the
L{IMessageStore} methods; each returns a Deferred. The file store needs a
C{run_in_thread(f, *args) -> Deferred} (production: C{deferToThreadPool} bound to the
reactor and a thread pool); nothing in this package imports the reactor.
"""

from mqgate.store.filestore import FileStore
from mqgate.store.interfaces import (
    CorruptStore, DuplicateMessage, IMessageStore, PreparedTransaction, Recovered,
    StoreClosed, StoreError, StoreFailed, StoredDestination, StoredDurable,
    StoredMessage, TransactionStateError, UnknownMessage, destination_key, durable_key)
from mqgate.store.memory import MemoryStore

__all__ = [
    "CorruptStore", "DuplicateMessage", "FileStore", "IMessageStore", "MemoryStore",
    "PreparedTransaction", "Recovered", "StoreClosed", "StoreError", "StoreFailed",
    "StoredDestination", "StoredDurable", "StoredMessage", "TransactionStateError",
    "UnknownMessage", "destination_key", "durable_key",
]
