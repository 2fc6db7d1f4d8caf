# -*- test-case-name: tests.ws.test_server -*-
"""
What a WebSocket carrying a byte stream does on either end (S10.3): the broker's
WebSocket (L{mqgate.ws.server}) and the client's (L{mqgate.ws.client}) mix this into
their autobahn protocol.

The stream's other end is a L{mqgate.net.VirtualTransport} (C{_virtual}, set when the
WebSocket opens): the TCP connection's producer calls pause and resume its writing,
its close is a WebSocket close (or a drop when aborted or not open), and the
WebSocket's loss is the stream's loss, told once (or L{_never_opened} when it closed
before it opened).
"""

__all__ = ["CarrierMixin"]


class CarrierMixin:
    """The carrier half of a WebSocket protocol: mix in before autobahn's class."""

    _virtual = None

    def _close(self, abort):
        if abort or self.state != self.STATE_OPEN:
            self.dropConnection(abort=True)
        else:
            self.sendClose(1000)

    # -- the TCP transport's producer ---------------------------------------------------

    def pauseProducing(self):
        """The TCP send buffer is full: the carried connection stops writing."""
        if self._virtual is not None:
            self._virtual.pause_writing()

    def resumeProducing(self):
        """The TCP send buffer drained."""
        if self._virtual is not None:
            self._virtual.resume_writing()

    def stopProducing(self):
        """The TCP connection is going; connectionLost follows."""

    def connectionLost(self, reason):
        super().connectionLost(reason)
        virtual, self._virtual = self._virtual, None
        if virtual is not None:
            virtual.carrier_lost(reason)
        else:
            self._never_opened(reason)

    def _never_opened(self, reason):
        """The WebSocket closed before it opened (a refused handshake): nothing was
        carried, so nothing is lost."""
