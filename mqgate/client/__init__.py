"""
mqgate.client: the Python client library of mqgate (S6), on mqgate's own AMQP engine.

The Twisted API (Deferreds) is here; the blocking API for scripts is
L{mqgate.client.blocking}. docs/client.md is the guide.
"""

from mqgate.client.connection import (
    AUTO, CLIENT, DUPS_OK, AuthenticationError, ClientError, ConnectError, Connection,
    ConnectionLostError, LinkError, Receiver, RequestTimeout, SendError, Sender, connect,
)
from mqgate.client.message import Message, ReceivedMessage
from mqgate.client.urls import BrokerUrl, ClientOptions, UrlError, parse_url

__all__ = [
    "connect", "Connection", "Sender", "Receiver", "Message", "ReceivedMessage",
    "AUTO", "CLIENT", "DUPS_OK", "ClientError", "ConnectError", "AuthenticationError",
    "LinkError", "SendError", "ConnectionLostError", "RequestTimeout", "UrlError",
    "BrokerUrl", "ClientOptions", "parse_url",
]
