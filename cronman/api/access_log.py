"""Access lines without secrets: sensitive query values redacted.

The API takes its token from ``Authorization`` only (``?token=`` is a 400, as
every query parameter a route does not know), but a caller may still put one
in a URL, and the opt-in access log (``cronman api --access-log``; werkzeug's
request lines in ``cronman standalone`` at debug level) would keep it. Values
of query parameters whose names look like a secret (``SENSITIVE``: token,
key, secret, password, signature, auth, session, credential...) are written
as ``***``, in the request line and in the Referer alike; the
``Authorization``, ``Cookie`` and ``Proxy-Authorization`` headers never are
written (gunicorn: ``cronman.api.gunicorn_conf.AccessLogger``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from werkzeug.serving import WSGIRequestHandler

REDACTED = "***"
SENSITIVE = re.compile(r"token|secret|passw|pwd|key|auth|sig|session|credential|cookie", re.I)
SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie")


def redact_query(query: str) -> str:
    """``query`` (``a=1&token=x``) with the values of sensitive names redacted;
    the rest as it was (no decoding, no reordering)."""
    if not query:
        return query
    parts = []
    for item in query.split("&"):
        name, sep, _ = item.partition("=")
        parts.append(f"{name}={REDACTED}" if sep and SENSITIVE.search(name) else item)
    return "&".join(parts)


def redact_target(target: str) -> str:
    """A request target or URL (``/v1/jobs?token=x``) with its query redacted."""
    path, sep, query = target.partition("?")
    if not sep:
        return target
    query, hash_sep, fragment = query.partition("#")
    return f"{path}?{redact_query(query)}{hash_sep}{fragment}"


def redact_url(url: str) -> str:
    """A Referer with its query redacted (and any user:password@)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_target(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, redact_query(parts.query),
                       parts.fragment))


class RequestHandler(WSGIRequestHandler):
    """werkzeug's request handler (``cronman standalone``), its request lines redacted."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = getattr(self, "path", None)
        if isinstance(path, str):
            self.path = redact_target(path)
        try:
            super().log_request(code, size)
        finally:
            if isinstance(path, str):
                self.path = path
