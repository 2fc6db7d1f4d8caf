"""STOMP frames out over WebSocket (S10.3): one frame per message, whatever the
engine's writes hold, text when UTF-8 and binary otherwise."""

from mqgate.stomp.frames import encode_frame
from mqgate.ws.framing import StompSplitter


def test_a_batch_of_frames_becomes_one_message_each():
    """Several frames in one write come out as several messages, heart-beats apart."""
    one = encode_frame("MESSAGE", [("destination", "/queue/a")], b"hello")
    two = encode_frame("RECEIPT", [("receipt-id", "7")])
    pieces = StompSplitter().split(one + b"\n" + two + one)
    assert pieces == [(one, True), (b"\n", True), (two, True), (one, True)]


def test_bodies_with_nul_are_counted_by_content_length():
    """A body holding NULs is framed by its content-length, not cut at the first NUL."""
    frame = encode_frame("MESSAGE", [("destination", "/queue/a")], b"a\x00b\x00")
    assert StompSplitter().split(frame) == [(frame, True)]


def test_a_body_that_is_not_utf8_goes_binary():
    """A frame whose body is not UTF-8 cannot be a text message: it goes binary."""
    frame = encode_frame("MESSAGE", [("destination", "/queue/a")], b"\xff\xfe")
    text = encode_frame("MESSAGE", [("destination", "/queue/a")], "été".encode())
    assert StompSplitter().split(frame + text) == [(frame, False), (text, True)]


def test_a_frame_cut_between_writes_waits_for_its_end():
    """Part of a frame is kept until the rest comes, then sent whole."""
    frame = encode_frame("MESSAGE", [("destination", "/queue/a")], b"x" * 100)
    splitter = StompSplitter()
    assert splitter.split(frame[:20]) == []
    assert splitter.split(frame[20:-1]) == []
    assert splitter.split(frame[-1:]) == [(frame, True)]


def test_crlf_frames_and_frames_without_body():
    """Frames with CRLF line ends, and a CONNECTED without body, end at their NUL."""
    frame = b"CONNECTED\r\nversion:1.2\r\n\r\n\x00"
    assert StompSplitter().split(frame + b"\r\n") == [(frame, True), (b"\r\n", True)]
