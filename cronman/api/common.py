"""Request and response helpers shared by the blueprints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from flask import Response, current_app, g, request
from flask.views import MethodView

from cronman.api.auth import OPEN, Principal
from cronman.errors import CronmanError, ValidationError

# Request size caps: a single job (with its 64 KiB target body) fits in the
# first; a bulk request of up to 1000 jobs in the second.
MAX_BODY_BYTES = 1024 * 1024
MAX_BULK_BODY_BYTES = 16 * 1024 * 1024


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(*, max_bytes: int | None = None, required: bool = True) -> Any:
    """The request body parsed as JSON; 400 when it is not, 413 when too large.

    The content type is not checked: a body is read as JSON whatever it says.
    """
    if max_bytes is not None:
        request.max_content_length = max_bytes
    data = request.get_data(cache=False)
    if not data.strip():
        if required:
            raise ValidationError("the request body must be a JSON object")
        return None
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"malformed JSON: {exc}") from None


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
    return g.get("principal", OPEN)


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
