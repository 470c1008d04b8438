"""Read-only tokens, and ``GET /v1/whoami``: what the caller's token allows.

A token made with ``cronman tokens create --read-only`` may call GET (and
HEAD) only, and the POSTs that change nothing (``READ_POSTS``); any other
method on ``/v1`` is a 403, whatever its namespaces.
The dashboard asks ``/v1/whoami`` to decide whether to show action buttons.
"""

from __future__ import annotations

from flask import Blueprint, Response

from cronman.api.auth import Principal
from cronman.api.common import ApiView, json_response, principal
from cronman.errors import Forbidden

bp = Blueprint("whoami", __name__, url_prefix="/v1")

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# POSTs that only read: the forecast of a proposal (its body is too large
# for a query).
READ_POSTS = frozenset({"/v1/forecast"})


def require_write_access(who: Principal, method: str, path: str) -> None:
    """403 for a read-only token on anything but a read."""
    if method.upper() == "POST" and path in READ_POSTS:
        return
    if who.read_only and method.upper() not in READ_METHODS:
        raise Forbidden("this token is read-only: it may only read (GET)")


def whoami_json(who: Principal) -> dict[str, object]:
    return {
        "token": None if who.token_id is None else {"id": who.token_id, "name": who.name},
        "namespaces": None if who.namespaces is None else sorted(who.namespaces),
        "admin": who.is_admin,
        "read_only": who.read_only,
        "can_write": not who.read_only,
    }


class WhoAmI(ApiView):
    def get(self) -> Response:
        return json_response(whoami_json(principal()))


bp.add_url_rule("/whoami", view_func=WhoAmI.as_view("whoami"))
