"""
The admin protocol's words on the wire (S11.1): the address requests go to, the reply
statuses, and how a client writes a request and reads a reply.

What a client of the admin service (`mqgate cmd`, L{mqgate.admin.client}) needs, apart
from the broker's side of it (L{mqgate.admin.requests}, which documents the protocol):
so that the command line starts without importing the broker.
"""

from dataclasses import dataclass

__all__ = ["ADMIN_ADDRESS", "OK", "BAD_REQUEST", "FORBIDDEN", "NOT_FOUND", "ERROR",
           "AdminError", "BadRequest", "Forbidden", "NotFoundError", "Reply",
           "request_body", "read_reply"]

#: The reserved address admin requests are sent to (the source system's is
#: C{__JMQAdmin}).
ADMIN_ADDRESS = "mqgate.admin"

#: Reply statuses (the source's admin status codes, HTTP's numbers).
OK, BAD_REQUEST, NOT_FOUND, ERROR = 200, 400, 404, 500
#: The requester lacks a right the command needs (capture:write, S7.9).
FORBIDDEN = 403


class AdminError(Exception):
    """A request that cannot be done; becomes an error reply with C{status}."""

    status = ERROR


class BadRequest(AdminError):
    """The request is malformed or names an unknown command or argument (400)."""

    status = BAD_REQUEST


class Forbidden(AdminError):
    """The requester may not do this (403); the message names the right needed."""

    status = FORBIDDEN


class NotFoundError(AdminError):
    """The request names something that does not exist: a client, a profile (404)."""

    status = NOT_FOUND


@dataclass(frozen=True)
class Reply:
    """What a command answers: the text the CLI prints and the same as data."""

    text: str
    data: object = None
    status: int = OK


def request_body(verb, object_, arguments=()):
    """The body of a request (what L{parse_request} reads): used by the CLI."""
    return {"verb": verb, "object": object_, "arguments": list(arguments)}


def read_reply(encoded):
    """The L{Reply} in a reply message (an EncodedMessage): for clients.

    @raise BadRequest: it is not a reply of this protocol.
    """
    sections = encoded.body_sections()
    body = sections[0][1] if len(sections) == 1 else None
    if not isinstance(body, dict) or not isinstance(body.get("status"), int):
        raise BadRequest("the reply is not an admin reply (no status in its body)")
    status = body["status"]
    text = body.get("text") if status == OK else body.get("error", body.get("text"))
    return Reply(text or "", body.get("data"), status)
