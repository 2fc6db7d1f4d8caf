# -*- test-case-name: tests.security.test_audit -*-
"""
The audit trail (S4.8): one structured record per security-relevant event.

Whatever records an event (the login guard, the access control, the admin requests, the
core's destination life cycle) is handed an object with L{IAuditTrail}'s one method and
calls it; it never knows where the record goes. L{NO_AUDIT} is that object when
auditing is off, so callers never test for it.

Event kinds, and the C{outcome} values they use:

    authentication        ok | failed            (user, address, service, mechanism)
    admin                 ok | failed            (user, address, service, command)
    destination.create    ok                     (user or None, dest_type, name)
    destination.destroy   ok                     (user or None, dest_type, name)
    access.denied         denied                 (user, address, service, operation,
                                                  dest_type, name, rule subject)
    access.reload         ok | failed            (file, why)
"""

from zope.interface import Interface, implementer

__all__ = ["IAuditTrail", "NO_AUDIT"]


class IAuditTrail(Interface):
    """Where audit records go."""

    def record(kind, outcome, *, user=None, address=None, service=None, **details):
        """Record one event of C{kind} with C{outcome} (see the module docstring).

        Must be cheap and must not raise: it is called on the reactor thread, on paths
        a hostile client can drive. C{details} values are JSON-serialisable (str, int,
        float, bool, None).
        """


@implementer(IAuditTrail)
class _NoAudit:
    """Auditing is off: every record is dropped."""

    def record(self, kind, outcome, *, user=None, address=None, service=None, **details):
        pass


#: The audit trail when C{mqgate.audit.enabled} is false.
NO_AUDIT = _NoAudit()
