"""The order and timing of connection attempts (S6.1: address list, reconnect
attempts and interval)."""

import itertools

from mqgate.client.reconnect import after_break, first_connection


def test_first_connection_tries_each_address_once_without_waiting():
    """At start-up each address is tried once, in list order, at once."""
    assert list(first_connection(["a", "b", "c"])) == [("a", 0.0), ("b", 0.0),
                                                        ("c", 0.0)]


def test_after_a_break_rounds_start_with_the_lost_address_after_the_interval():
    """After losing b, each round waits the interval, then tries b, c, a; attempts
    counts rounds."""
    assert list(after_break(["a", "b", "c"], 1, 2, 3.0)) == [
        ("b", 3.0), ("c", 0.0), ("a", 0.0), ("b", 3.0), ("c", 0.0), ("a", 0.0)]


def test_zero_attempts_means_none_and_minus_one_no_end():
    """0 attempts: nothing is tried; -1: the schedule does not end."""
    assert list(after_break(["a"], 0, 0, 1.0)) == []
    assert len(list(itertools.islice(after_break(["a", "b"], 0, -1, 1.0), 1000))) == 1000
