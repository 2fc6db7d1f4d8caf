"""The port mapper's wire format (S1.3, FACTS 1.1): no networking code at all.

The broker renders the table with L{render_table}; the client library parses it with
L{parse_table} and reads broker addresses with L{parse_mq_url}.
"""

from mqgate.portmap.table import (
    PACKET_VERSION, PORTMAPPER_VERSION, MqAddress, MqAddressError, PortMapperError,
    ServiceEntry, parse_mq_url, parse_table, render_table, table_complete)

__all__ = [
    "PACKET_VERSION", "PORTMAPPER_VERSION", "MqAddress", "MqAddressError",
    "PortMapperError", "ServiceEntry", "parse_mq_url", "parse_table", "render_table",
    "table_complete",
]
