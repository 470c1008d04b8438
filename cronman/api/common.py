"""Request and response helpers shared by the blueprints."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from flask import Response, current_app, g, request
from flask.views import MethodView
from werkzeug.exceptions import RequestEntityTooLarge

from cronman.api.auth import OPEN, Principal
from cronman.errors import (
    CronmanError,
    Forbidden,
    Unauthorized,
    UnsupportedMediaType,
    ValidationError,
)

# Request size caps: a single job (with its 64 KiB target body) fits in the
# first; a bulk request of up to 1000 jobs in the second.
MAX_BODY_BYTES = 1024 * 1024
MAX_BULK_BODY_BYTES = 16 * 1024 * 1024


_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def is_json_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json`` (parameters aside)."""
    media = (content_type or "").partition(";")[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or (sub.endswith("+json") and len(sub) > 5))


def read_json(*, max_bytes: int | None = None, required: bool = True) -> Any:
    """The request body parsed as JSON; 400 when it is not, 413 when too large,
    415 when it does not say it is JSON (``Content-Type: application/json``).

    Only a JSON content type is read: a browser sends ``text/plain`` and form
    bodies to another site without asking it first (no CORS preflight), so a
    body read whatever it says would let any page write (see ``origins``).
    A body sent without a length (chunked) is held to the same limit: werkzeug
    stops reading such a stream at the limit without a word, so one byte more
    is let through to see whether the body goes on.
    """
    limit = max_bytes if max_bytes is not None else request.max_content_length
    if limit is not None:
        g.body_limit = limit
        request.max_content_length = limit + 1
    data = request.get_data(cache=False)
    if limit is not None and len(data) > limit:
        raise RequestEntityTooLarge()
    if not data.strip():
        if required:
            raise ValidationError("the request body must be a JSON object")
        return None
    if not is_json_type(request.content_type):
        given = request.content_type
        raise UnsupportedMediaType(
            "the request body must be JSON, sent with 'Content-Type: application/json' "
            f"(this one's: {repr(given[:100]) if given else 'none'})")
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"malformed JSON: {exc}") from None
    # Strict JSON has no raw control characters in strings, so NULs and lone
    # surrogates can only come from escapes: walk the value only when one is there.
    if _SUSPECT_ESCAPE.search(data):
        reject_bad_strings(value, "")
    return value


def reject_bad_strings(value: Any, field: str) -> None:
    """NUL characters and lone surrogates cannot be stored (PostgreSQL, UTF-8)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError("must not contain NUL characters", field=field or None)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("must be valid Unicode (no lone surrogates)",
                                  field=field or None) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{field}.{key}" if field else str(key)
            reject_bad_strings(key, sub)
            reject_bad_strings(item, sub)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            reject_bad_strings(item, f"{field}[{i}]")


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    resp = current_app.response_class(
        current_app.json.dumps(payload) + "\n", status=status, mimetype="application/json")
    if headers:
        resp.headers.update(headers)
    return resp


def error_response(exc: CronmanError, status: int | None = None) -> Response:
    return json_response(exc.to_dict(), status or exc.http_status)


def principal() -> Principal:
    who: Principal = g.get("principal", OPEN)
    return who


class ApiView(MethodView):
    """A MethodView that refuses query parameters it does not know (400 naming it).

    ``query_params`` maps a lower-case method name to the parameters it takes.
    """

    query_params: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def dispatch_request(self, **kwargs: Any) -> Any:
        method = "get" if request.method == "HEAD" else request.method.lower()
        allowed = self.query_params.get(method, ())
        for key in request.args:
            if key not in allowed:
                raise ValidationError(f"unknown query parameter {key!r}", field=key)
        return super().dispatch_request(**kwargs)


BOOTSTRAP_HINT = ("the first admin token is made with database access: "
                  "cronman tokens create --admin")


def require_admin(what: str = "managing API tokens") -> Principal:
    """The caller, when it holds an admin token; else 401 (no token) or 403."""
    who = principal()
    if who.token_id is None:
        raise Unauthorized(f"{what} needs an admin token "
                           f"(Authorization: Bearer <token>); {BOOTSTRAP_HINT}")
    if not who.is_admin:
        raise Forbidden(f"{what} needs an admin token; this one is limited to namespaces")
    return who
