"""
One connection per client id, for the clients that need it (S8.5; docs/mqlight.md).

The MQ Light client's id is its AMQP container-id, and the id identifies the client: a
new connection with the id of a connection that is still there replaces it, which is
closed with C{amqp:link:stolen} (the client reports that as "replaced"). Other AMQP
clients, our own benchmarks and tests among them, open several connections with one
container-id at once and expect them all to live, so the rule is chosen per service by
C{mqgate.amqp.client_id_takeover}:

 - C{mqlight} (the default): the new connection takes the id over when either
   connection shows itself as the MQ Light client's (L{mqgate.core.mqlight}: its open
   frame, or a C{private:}/C{share:} subscription, or a sender named the client's
   way), and its id is of the client's form;
 - C{always}: every repeated container-id takes over;
 - C{never}: connections never replace one another.

In every case both connections must have logged in as the same user: nobody can end
another user's connection by guessing its id.
"""

from mqgate.core import mqlight

MQLIGHT = "mqlight"
ALWAYS = "always"
NEVER = "never"
POLICIES = (MQLIGHT, ALWAYS, NEVER)


class ContainerIds:
    """The connections by container-id, for every AMQP service of the broker.

    A session listed here has C{container_id}, C{user} (the logged-in user's name),
    C{mqlight} (whether it showed itself as the MQ Light client) and C{replace(why)}
    (close it as replaced).
    """

    def __init__(self):
        self._sessions = {}

    def __len__(self):
        return len(self._sessions)

    def claim(self, session, policy):
        """List C{session} under its container-id; the connection that had the id
        is returned if C{session} takes it over (the caller replaces it), else
        C{None} (and the older one keeps the listing)."""
        container_id = session.container_id
        if not container_id:
            return None
        old = self._sessions.get(container_id)
        if old is None or old is session:
            self._sessions[container_id] = session
            return None
        if not takes_over(policy, session, old):
            return None
        self._sessions[container_id] = session
        return old

    def release(self, session):
        """C{session} is gone: its container-id is free (if it still held it)."""
        if self._sessions.get(session.container_id) is session:
            del self._sessions[session.container_id]


def takes_over(policy, new, old):
    """Whether the connection C{new} replaces C{old}, which has the same container-id."""
    if policy == NEVER or new.user != old.user:
        return False
    if policy == ALWAYS:
        return True
    return (new.mqlight or old.mqlight) and mqlight.is_client_id(new.container_id)
