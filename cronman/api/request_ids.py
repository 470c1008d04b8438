"""Request ids: every API answer carries ``X-Request-Id``.

A caller's own ``X-Request-Id`` (up to 128 characters of ``A-Z a-z 0-9 . _ :
/ + = -``) is kept, so a change can be followed from the caller's logs to the
job history; otherwise the API makes one. Job history entries record it.
"""

from __future__ import annotations

import re
import uuid

from flask import Flask, Response, g, request

HEADER = "X-Request-Id"
_ACCEPTED = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")


def request_id() -> str | None:
    """The current request's id (None outside a request)."""
    value = g.get("request_id")
    return value if isinstance(value, str) else None


def install(app: Flask) -> None:
    @app.before_request
    def _assign() -> None:
        given = request.headers.get(HEADER, "")
        g.request_id = given if _ACCEPTED.match(given) else uuid.uuid4().hex

    @app.after_request
    def _answer(resp: Response) -> Response:
        value = request_id()
        if value:
            resp.headers[HEADER] = value
        return resp
