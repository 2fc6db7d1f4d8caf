"""Raw-socket helpers shared by the hostile tests."""

import socket
import time


def read_until_closed(sock, timeout):
    """Everything the broker writes until it closes the socket, a reset, or C{timeout}.

    @return: C{(data, how)}, how in C{"eof"}, C{"reset"}, C{"timeout"}."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionError:
            return data, "reset"
        if not chunk:
            return data, "eof"
        data += chunk
    return data, "timeout"
