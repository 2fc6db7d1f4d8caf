# -*- test-case-name: tests.ws.test_framing -*-
"""
STOMP over WebSocket, outbound: one frame per message (S10.3).

The STOMP engine writes whole frames, but several at a time (the egress queues write
in batches), and browser clients (stomp.js) parse each message as whole frames. So the
broker's output is cut into frames here, before it becomes messages. A frame is text
when it is valid UTF-8 and binary otherwise (a text message must be UTF-8, RFC 6455
s5.6, and a STOMP body may be anything). A heart-beat (the EOLs between frames) is a
message of its own.

How a frame of ours ends: its headers end at the first blank line; a frame with a body
carries C{content-length} (L{mqgate.stomp.frames.encode_frame} and the MESSAGE
templates always add it), so the body and its NUL are counted; a frame without one
ends at the next NUL.
"""

__all__ = ["StompSplitter"]

_LENGTH = b"\ncontent-length:"


class StompSplitter:
    """Cut a stream of STOMP frames into C{(frame, is_text)} pieces; keeps an
    incomplete frame until the rest comes."""

    def __init__(self):
        self._rest = b""

    def split(self, data):
        """The whole frames and heart-beats of what came so far, in order."""
        buffer = self._rest + data if self._rest else data
        pieces = []
        start, n = 0, len(buffer)
        while start < n:
            end = _heartbeats_end(buffer, start)
            if end > start:
                pieces.append((buffer[start:end], True))
                start = end
                continue
            end = _frame_end(buffer, start)
            if end is None:
                break
            frame = buffer[start:end]
            pieces.append((frame, _is_text(frame)))
            start = end
        self._rest = buffer[start:]
        return pieces


def _heartbeats_end(buffer, start):
    """Where the EOLs from C{start} end (C{start}: none)."""
    i, n = start, len(buffer)
    while i < n:
        byte = buffer[i]
        if byte == 0x0A:
            i += 1
        elif byte == 0x0D and i + 1 < n and buffer[i + 1] == 0x0A:
            i += 2
        else:
            break
    return i


def _frame_end(buffer, start):
    """The end (after the NUL) of the frame at C{start}, or None if incomplete."""
    head_end = buffer.find(b"\n\n", start)
    crlf_end = buffer.find(b"\r\n\r\n", start)
    if crlf_end != -1 and (head_end == -1 or crlf_end < head_end):
        body = crlf_end + 4
        head = buffer[start:crlf_end].replace(b"\r\n", b"\n")
    elif head_end != -1:
        body = head_end + 2
        head = buffer[start:head_end]
    else:
        return None
    at = head.find(_LENGTH)
    if at != -1:
        value_end = head.find(b"\n", at + 1)
        value = head[at + len(_LENGTH):value_end if value_end != -1 else len(head)]
        try:
            length = int(value)
        except ValueError:
            length = None
        if length is not None and length >= 0:
            end = body + length + 1
            return end if end <= len(buffer) else None
    nul = buffer.find(b"\x00", body)
    return nul + 1 if nul != -1 else None


def _is_text(frame):
    """Whether the frame may go as a text message (valid UTF-8)."""
    if frame.isascii():
        return True
    try:
        frame.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
