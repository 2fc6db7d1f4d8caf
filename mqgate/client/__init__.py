"""
mqgate.client: the Python client library of mqgate (S6), on mqgate's own AMQP engine.

The Twisted API (Deferreds) is here; the blocking API for scripts is
L{mqgate.client.blocking}. docs/client.md is the guide.
"""

import importlib

#: Where each public name is defined. A name is imported when it is first used (PEP
#: 562), not with the package: the `mqgate` command's parsers import the light
#: mqgate.client.urls, and every `mqgate cmd`, `usermgr` or `dbmgr` would otherwise pay
#: for the client and Twisted, which only `mqgate send` and `receive` use.
_HOMES = {
    **dict.fromkeys((
        "AUTO", "CLIENT", "DUPS_OK", "AuthenticationError", "ClientError", "ConnectError",
        "Connection", "ConnectionLostError", "LinkError", "Receiver", "RequestTimeout",
        "SendError", "Sender", "connect"), "connection"),
    **dict.fromkeys(("Message", "ReceivedMessage"), "message"),
    **dict.fromkeys(("BrokerUrl", "ClientOptions", "UrlError", "parse_url"), "urls"),
}

__all__ = [
    "connect", "Connection", "Sender", "Receiver", "Message", "ReceivedMessage",
    "AUTO", "CLIENT", "DUPS_OK", "ClientError", "ConnectError", "AuthenticationError",
    "LinkError", "SendError", "ConnectionLostError", "RequestTimeout", "UrlError",
    "BrokerUrl", "ClientOptions", "parse_url",
]


def __getattr__(name):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value     # looked up once
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
