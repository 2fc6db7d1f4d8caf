"""
The runtime catalog (S7.1): diverts, address settings, security settings and capture
subscriptions made at run time, kept in one small JSON file under the instance
directory (C{runtime/catalog.json}) so that they survive a restart.

The core makes and reads the document (L{mqgate.core.runtime}); this module only reads
and writes the file: written whole on every change (temporary file, fsync, rename, so
a crash leaves the old file or the new one), owner-only. Changes come from operators'
commands, a handful a minute at most, so a small synchronous write is cheaper than any
machinery; it happens on the reactor thread.
"""

import json
import os

from twisted.logger import Logger

from mqgate.errors import MqgateError

__all__ = ["RuntimeCatalog", "CatalogError"]

log = Logger(namespace="mqgate.runtime")


class CatalogError(MqgateError):
    """The runtime catalog's file cannot be read; the message names it and says what
    to do."""


class RuntimeCatalog:
    """The file at C{path}."""

    def __init__(self, path):
        self.path = path

    def load(self):
        """The document, or C{None} when there is no file yet.

        @raise CatalogError: the file cannot be read or is not JSON (naming the file
            and what to do).
        """
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise CatalogError(
                f"the runtime catalog {self.path} cannot be read ({e}); fix or move it"
                " away (the diverts, settings and captures it lists are then not made"
                " again)") from None

    def save(self, document):
        """Write C{document}; a failure is logged (the change is in force, but would
        not survive a restart) and not raised: the operator's command succeeded."""
        directory = os.path.dirname(self.path)
        temporary = self.path + ".tmp"
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(document, f, indent=1, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)
        except OSError as e:
            log.error("the runtime catalog {path} could not be written ({why}): the last"
                      " change is in force but will not survive a restart",
                      path=self.path, why=e)
