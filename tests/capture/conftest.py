"""
Fixtures for the capture index tests (S7.5): indexes on real SQLite files (and, for a
few cases, a real PostgreSQL database from tests/pgcluster.py), and captured copies
made as the core makes them (L{mqgate.core.taps.CapturedCopy} of a
L{mqgate.core.message.BrokerMessage} holding an encoded AMQP message).
"""

import pytest

from mqgate.amqp.message import Properties, build_message
from mqgate.capture.index import CaptureIndex
from mqgate.capture.schema import CaptureSchema
from mqgate.capture.tail import TailHub
from mqgate.core.message import BrokerMessage
from mqgate.core.taps import CapturedCopy
from mqgate.store.sqldialects import DIALECTS
from tests.store.conftest import InlineReactor, InlineThreadPool, sql_config
from mqgate.store.sqlconfig import connection_pool


def copy(address="orders", *, body=b"hello", at=1000.0, subscription="s1",
         kind="queue", routed_to=None, message_id=None, correlation_id=None,
         reply_to=None, properties=None, original_id=None, verify_reason=None):
    """A captured copy of a message sent to C{address}."""
    encoded = build_message(
        body, properties=Properties(message_id=message_id, reply_to=reply_to,
                                    correlation_id=correlation_id),
        application_properties=properties)
    message = BrokerMessage(encoded, message_id=message_id, reply_to=reply_to,
                            correlation_id=correlation_id)
    if routed_to is None and kind == "queue":
        routed_to = (address,)
    return CapturedCopy(subscription=subscription, node="n1", address=address,
                        kind=kind, routed_to=routed_to, captured_at=at,
                        message=message, original_id=original_id,
                        verify_reason=verify_reason)


class Clocked(InlineReactor):
    """The inline reactor with a settable time (retention, heartbeats)."""

    now = 0.0

    def seconds(self):
        return self.now


class IndexOpener:
    """Opens indexes on one database; closes what is left at the end."""

    def __init__(self, vendor, url):
        self.vendor = vendor
        self.url = url
        self.pools = []

    def index(self, *, tail=None, now=lambda: 2000.0, **kwargs):
        # sync off, as the broker opens the index: copies are acknowledged to nobody.
        config = sql_config(self.vendor, self.url, sync=False)
        reactor = Clocked()
        pool = connection_pool(config, reactor)
        pool.threadpool = InlineThreadPool()
        pool.start()
        self.pools.append(pool)
        index = CaptureIndex(pool, CaptureSchema(DIALECTS[self.vendor], "b1"), reactor,
                             now=now, tail=tail, where=config.where(), **kwargs)
        index.open()
        return index, reactor

    def close_all(self):
        for pool in self.pools:
            if pool.running:
                pool.close()


@pytest.fixture
def opener(tmp_path):
    o = IndexOpener("sqlite", str(tmp_path / "capture" / "index.sqlite"))
    yield o
    o.close_all()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_opener(request, tmp_path):
    if request.param == "sqlite":
        o = IndexOpener("sqlite", str(tmp_path / "capture" / "index.sqlite"))
    else:
        o = IndexOpener("postgresql", request.getfixturevalue("pg_dsn"))
    yield o
    o.close_all()


@pytest.fixture
def hub():
    return TailHub()
