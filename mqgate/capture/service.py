# -*- test-case-name: tests.capture.test_service -*-
"""
The capture index as a broker service: opened at start, written out and closed at
stop, built from the C{mqgate.capture.*} settings (S7.5).

SQLite is the default: a file under the instance directory
(C{instances/NAME/capture/index.sqlite}). PostgreSQL uses the SQL message store's
database settings (C{mqgate.persist.jdbc.*}: URL, user, password, brokerid) and the
same adbapi connection pool and dialect, in tables of its own, so an operator who set
up one database for the store sets up nothing more for capture.
"""

import dataclasses
import os

from twisted.application.service import Service
from twisted.logger import Logger

from mqgate.capture.index import CaptureIndex
from mqgate.capture.schema import CaptureSchema
from mqgate.capture.tail import TailHub
from mqgate.store.sqlconfig import SqlConfig, connection_pool, sql_config_from_settings

__all__ = ["CaptureIndexService", "capture_index_from_settings"]


class CaptureIndexService(Service):
    """Opens the index when the broker starts and closes it when it stops.

    @ivar index: the L{CaptureIndex} (the sink capture subscriptions feed).
    @ivar hub: its live tail's L{TailHub}.
    """

    name = "capture-index"
    log = Logger()

    def __init__(self, index, hub):
        self.index = index
        self.hub = hub

    def startService(self):
        super().startService()
        d = self.index.open()
        d.addCallback(lambda _: self.log.info(
            "capture index open: {where}", where=self.index.where))
        d.addErrback(lambda f: self.log.failure(
            "the capture index ({where}) could not be opened; captured messages are "
            "dropped and counted until the broker restarts", f, where=self.index.where))
        return d

    def stopService(self):
        super().stopService()
        return self.index.close()


def capture_index_from_settings(settings, reactor, bounds_of=lambda name: None):
    """The L{CaptureIndexService} the settings describe, or None when the index is
    off (C{mqgate.capture.index.enabled=false}).

    @param bounds_of: a subscription's L{mqgate.core.capture.CaptureBounds}, or None
        (then the broker-wide C{mqgate.capture.body_max}, C{retention} and
        C{stored_max} apply).

    @raise mqgate.errors.ConfigError: the PostgreSQL settings are wrong (as the
        store's: L{sql_config_from_settings}).
    """
    if not settings["mqgate.capture.index.enabled"]:
        return None
    vendor = settings["mqgate.capture.index.dbVendor"]
    if vendor == "postgresql":
        store = sql_config_from_settings(settings)
        config = dataclasses.replace(store, vendor="postgresql",
                                     url=settings["mqgate.persist.jdbc.opendburl"])
        brokerid = store.brokerid
    else:
        config = SqlConfig(vendor="sqlite",
                           url=os.path.join(settings.instance_dir,
                                            settings["mqgate.capture.index.file"]),
                           create_url="", user=None, password=None,
                           brokerid=settings.instance, tables={},
                           # Copies are not acknowledged to anyone: a commit need not
                           # wait for the disk (SQLite synchronous=NORMAL).
                           sync=False)
        brokerid = "idx"
    hub = TailHub()
    index = CaptureIndex(
        connection_pool(config, reactor), CaptureSchema(config.dialect, brokerid),
        reactor, tail=hub, where=config.where(), bounds_of=bounds_of,
        max_body=settings["mqgate.capture.body_max"],
        max_pending=settings["mqgate.capture.index.max_pending"],
        retention=settings["mqgate.capture.retention"],
        max_bytes=settings["mqgate.capture.stored_max"],
        prune_interval=settings["mqgate.capture.index.prune_interval"])
    return CaptureIndexService(index, hub)
