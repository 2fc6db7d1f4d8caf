"""Raw clients for login tests (S4.2, S4.7): AMQP's SASL layer and a STOMP CONNECT
spoken by hand, so that a test sees the exact frames the broker answers with."""

import socket
import time

from mqgate.amqp import codec
from mqgate.amqp.frames import SASL_FRAME, SASL_HEADER, FrameReader, encode_frame, split_body
from mqgate.amqp.performatives import (
    SaslInit, SaslMechanisms, SaslOutcome, encode_composite, from_described)
from mqgate.amqp.types import Symbol
from tests.e2e.proton_client import DEFAULT_TIMEOUT
from tests.e2e.stomp_client import RawStomp

__all__ = ["SaslPeer", "stomp_connect"]


class SaslPeer:
    """A socket speaking AMQP's SASL layer by hand; every read has a deadline.

    @param sock: a connected socket (a TLS one to present a client certificate), or
        None to connect to C{address} in cleartext.
    """

    def __init__(self, address, sock=None):
        self.sock = sock or socket.create_connection(address, timeout=DEFAULT_TIMEOUT)
        self.reader = FrameReader(1 << 20)
        self.buffer = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def _more(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        self.buffer += data
        return data

    def header(self):
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while len(self.buffer) < 8:
            assert self._more(deadline), f"closed after {self.buffer!r}"
        header, self.buffer = self.buffer[:8], self.buffer[8:]
        return header

    def performative(self):
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        frames = self.reader.feed(self.buffer)
        self.buffer = b""
        while not frames:
            assert self._more(deadline), "closed before the next frame"
            frames = self.reader.feed(self.buffer)
            self.buffer = b""
        assert len(frames) == 1, frames
        value, _ = split_body(frames[0][2], codec.decode)
        return from_described(value)

    def rest_until_closed(self):
        """What the broker still sends before it closes the socket."""
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while time.monotonic() < deadline:
            if not self._more(deadline):
                return self.buffer
        raise AssertionError(f"still open after {DEFAULT_TIMEOUT} s: {self.buffer!r}")

    def sasl(self, mechanism, response=b""):
        """The mechanisms offered, and the outcome of trying C{mechanism}."""
        self.sock.sendall(SASL_HEADER)
        assert self.header() == SASL_HEADER
        offered = self.performative()
        assert isinstance(offered, SaslMechanisms)
        self.sock.sendall(encode_frame(encode_composite(SaslInit(
            mechanism=Symbol(mechanism), initial_response=response)),
            frame_type=SASL_FRAME))
        outcome = self.performative()
        assert isinstance(outcome, SaslOutcome)
        return [str(m) for m in offered.sasl_server_mechanisms], outcome


def stomp_connect(address, *headers, sock=None):
    """Send CONNECT with C{headers} on a raw socket (or on C{sock}, a TLS one); the
    broker's answer. After an ERROR on a cleartext socket, the broker must close it
    (read until it does); over TLS it does not close the connection promptly after an
    ERROR (a limit of the TLS close, not of logins), so there only the ERROR is read."""
    client = RawStomp(address)
    if sock is not None:
        client.sock.close()   # RawStomp connects in cleartext: use the TLS socket
        client.sock = sock
    try:
        lines = ["accept-version:1.2", "host:localhost", *headers]
        client.send(("CONNECT\n" + "\n".join(lines) + "\n\n").encode() + b"\x00")
        frame = client.read_frame()
        if frame.command == "ERROR" and sock is None:
            client.read_until_closed()
        return frame
    finally:
        client.close()
