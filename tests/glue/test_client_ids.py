"""One connection per MQ Light client id (S8.5): when a new connection takes over the
container-id of another, by mqgate.amqp.client_id_takeover."""

import pytest

from mqgate.glue.client_ids import ALWAYS, MQLIGHT, NEVER, ContainerIds, takes_over


class Session:
    """What the table reads of a connection."""

    def __init__(self, container_id, user="guest", mqlight=False):
        self.container_id = container_id
        self.user = user
        self.mqlight = mqlight


@pytest.mark.parametrize("policy, new, old, replaced", [
    # mqlight: either connection shows itself as the client's, with an id of its form
    (MQLIGHT, Session("c1", mqlight=True), Session("c1"), True),
    (MQLIGHT, Session("c1"), Session("c1", mqlight=True), True),
    (MQLIGHT, Session("c1"), Session("c1"), False),
    # our benchmarks' and Proton's ids have dashes, which the client's never have
    (MQLIGHT, Session("bench-presettled", mqlight=True), Session("bench-presettled"),
     False),
    (ALWAYS, Session("bench-presettled"), Session("bench-presettled"), True),
    (NEVER, Session("c1", mqlight=True), Session("c1", mqlight=True), False),
    # never another user's connection, whatever the policy
    (ALWAYS, Session("c1", user="mallory"), Session("c1"), False),
    (MQLIGHT, Session("c1", user="mallory", mqlight=True), Session("c1", mqlight=True),
     False),
])
def test_who_takes_over(policy, new, old, replaced):
    assert takes_over(policy, new, old) is replaced


def test_the_table_hands_back_the_replaced_connection_and_forgets_the_gone():
    ids = ContainerIds()
    first, second, third = Session("c1", mqlight=True), Session("c1"), Session("c1")
    assert ids.claim(first, MQLIGHT) is None
    assert ids.claim(second, MQLIGHT) is first
    ids.release(first)            # the replaced one going frees nothing of second's
    assert ids.claim(third, NEVER) is None
    assert len(ids) == 1
    ids.release(second)
    assert len(ids) == 0
    assert ids.claim(Session(None), ALWAYS) is None and len(ids) == 0
