# -*- test-case-name: tests.web.test_console -*-
"""
The web console's files: plain HTML, CSS and JavaScript from the package
directory C{mqgate/web/console/}, served under C{/console/} by the HTTP admin services.

The files hold no data and need no login; the page logs in with the API's own HTTP
Basic login and sends it with every API request it makes (L{mqgate.web.admin}). A
strict content security policy lets the page load only its own files and talk only to
its own origin: no inline script, no other site, no frame around it.
"""

from pathlib import Path

from twisted.web import static
from twisted.web.pages import notFound

__all__ = ["CONSOLE_DIR", "console_resource", "SECURITY_HEADERS"]

CONSOLE_DIR = Path(__file__).with_name("console")

SECURITY_HEADERS = (
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; object-src 'none'; "
     b"base-uri 'none'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
)


class _ConsoleFiles(static.File):
    """The console directory: its files with the headers above, no listings."""

    def directoryListing(self):
        return _not_found()

    def render_GET(self, request):
        for name, value in SECURITY_HEADERS:
            request.setHeader(name, value)
        return super().render_GET(request)

    def createSimilarFile(self, path):
        similar = super().createSimilarFile(path)
        similar.childNotFound = _not_found()
        return similar


def _not_found():
    return notFound("No such file", "There is no such file in the console.")


def console_resource():
    """The resource to serve at C{/console/}."""
    files = _ConsoleFiles(str(CONSOLE_DIR), defaultType="application/octet-stream")
    files.contentTypes = {**files.contentTypes, ".js": "text/javascript; charset=utf-8",
                          ".css": "text/css; charset=utf-8",
                          ".html": "text/html; charset=utf-8",
                          ".svg": "image/svg+xml"}
    files.childNotFound = _not_found()
    return files
