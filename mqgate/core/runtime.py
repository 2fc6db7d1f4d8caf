"""
What the broker makes at run time and keeps across restarts (S7.1): diverts, address
settings, security settings and capture subscriptions, as one plain document (dicts,
lists, strings and numbers) that the runtime catalog writes under the instance
directory (L{mqgate.store.catalog}). The core builds and reads the document; it never
touches the file (design rule 1).

A capture's own divert and settings are not listed apart: restoring the capture makes
them again, so that they always come and go together (S7.8).
"""

from mqgate.core.capture import CaptureBounds
from mqgate.core.settings import AddressSetting, SecuritySetting

__all__ = ["snapshot", "restore", "VERSION"]

VERSION = 1


def snapshot(broker):
    """The document of what C{broker} made at run time."""
    captures = broker.captures
    return {
        "version": VERSION,
        "diverts": [_divert_spec(d) for d in broker.diverts.table if d.owner is None],
        "address_settings": [s.describe() for s in broker.settings.address.values()
                             if s.owner is None],
        "security_settings": [s.describe() for s in broker.settings.security.values()
                              if s.owner is None],
        "captures": [] if captures is None else [sub.spec() for sub in captures],
    }


def restore(broker, document):
    """Make again what C{document} lists; return a list of warnings (one per item
    that could not be made, saying which and why: the rest is made all the same)."""
    warnings = []
    if not isinstance(document, dict) or document.get("version") != VERSION:
        return [f"the runtime catalog is not version {VERSION} of its format; nothing in"
                " it was restored"]
    for spec in document.get("address_settings", ()):
        _attempt(warnings, f"address setting {spec.get('match')!r}", lambda: (
            broker.settings.address.__setitem__(spec["match"], AddressSetting(
                spec["match"], spec["full_policy"], spec.get("expiry_delay"),
                max_bytes=spec.get("max_bytes"), max_messages=spec.get("max_messages")))))
    for spec in document.get("security_settings", ()):
        _attempt(warnings, f"security setting {spec.get('match')!r}", lambda: (
            broker.settings.security.__setitem__(spec["match"], SecuritySetting(
                spec["match"], spec["permissions"]))))
    for spec in document.get("diverts", ()):
        _attempt(warnings, f"divert {spec.get('name')!r}", lambda: broker.create_divert(
            spec["name"], spec["address"], spec["target"],
            exclusive=spec.get("exclusive", False), selector=spec.get("selector")))
    captures = broker.captures
    for spec in document.get("captures", ()):
        if captures is None:
            warnings.append(f"capture {spec.get('name')!r} not restored: capture is not"
                            " set up on this broker")
            continue
        _attempt(warnings, f"capture {spec.get('name')!r}", lambda: captures.install(
            spec["name"], spec["address"], selector=spec.get("filter"),
            bounds=CaptureBounds(**spec["bounds"]), restoring=True,
            created_by=spec.get("created_by")))
    # The queues recovered from the store (or made since) get what the settings say.
    broker.apply_address_settings()
    return warnings


def _divert_spec(divert):
    return {"name": divert.name, "address": divert.source, "target": divert.target,
            "exclusive": divert.exclusive,
            "selector": None if divert.selector is None else divert.selector.text}


def _attempt(warnings, what, make):
    # One bad entry (edited by hand, or refused now: an exclusive divert since) must
    # not keep the others, or the broker, from starting.
    try:
        make()
    except Exception as e:
        warnings.append(f"{what} not restored: {e}")

