"""
The order and timing of connection attempts over an address list (S6.1): pure, so the
schedule is tested without a clock or a socket.

The first connection tries each address of the list once, in order, without waiting:
the first that answers wins (failover at start-up). After a connection breaks, with
reconnection enabled, the client goes round the list again, first the address it had
lost, then the ones after it (wrapping round to the start), C{attempts} rounds (-1: no
end), waiting C{interval} seconds before each round.
"""

__all__ = ["first_connection", "after_break"]


def first_connection(addresses):
    """C{(address, delay)} pairs for the first connection: every address once."""
    for address in addresses:
        yield address, 0.0


def after_break(addresses, lost_index, attempts, interval):
    """C{(address, delay)} pairs after the connection to C{addresses[lost_index]} broke.

    @param attempts: rounds through the list; -1 for no end, 0 for none.
    @param interval: seconds to wait before each round.
    """
    count = len(addresses)
    order = [addresses[(lost_index + i) % count] for i in range(count)]
    done = 0
    while attempts < 0 or done < attempts:
        for position, address in enumerate(order):
            yield address, (interval if position == 0 else 0.0)
        done += 1
