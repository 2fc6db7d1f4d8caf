"""
Per-client egress: the five priority queues (S9.1-S9.3), slow subscribers and the
egress buffer load factor (S9.4, S9.6), client profiles and their show tables (S9.7).

Pure objects only (design rule 1): no reactor, no sockets, no clock but the one
passed in. The connection adapters drive them.
"""

from mqgate.egress.profiles import (
    DEFAULT_PROFILE, ClientProfile, ProfileTable, TcpKeepAlive, profiles_from_settings,
    render_client_queue_stats, render_profile, render_slow_subscribers,
)
from mqgate.egress.scheduler import (
    C1, D1, D2, D3, DISPLAY_ORDER, G1, QUEUE_NAMES, EgressScheduler, QueueLimits,
    QueueStats, cos_for, direct_queue_for, work_units,
)
from mqgate.egress.slowness import (
    LOAD_CLEAR, LOAD_SET, ClientLoad, LoadFactor, SlowSubscriberMeter,
)

__all__ = [
    "C1", "D1", "D2", "D3", "G1", "QUEUE_NAMES", "DISPLAY_ORDER", "DEFAULT_PROFILE",
    "ClientLoad", "ClientProfile", "EgressScheduler", "LOAD_CLEAR", "LOAD_SET",
    "LoadFactor", "ProfileTable", "QueueLimits", "QueueStats", "SlowSubscriberMeter",
    "TcpKeepAlive", "cos_for", "direct_queue_for", "profiles_from_settings",
    "render_client_queue_stats", "render_profile", "render_slow_subscribers",
    "work_units",
]
