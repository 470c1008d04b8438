"""``/v1/limits``: named limits per destination (``cronman.limits``), for
admin tokens only (whatever the auth state, as ``/v1/tokens``).

- ``GET /v1/limits``: every limit, by name; ``POST`` makes one (201, 409 when
  the name is taken).
- ``GET/PUT/DELETE /v1/limits/{name}``: one limit; a PUT replaces it (a
  ``version`` in the body must be the stored one: 409 otherwise).

Every scheduler node reads the limits each sync poll: a change holds the
fires of the whole cluster within a poll (2 s by default). A ``GET`` adds
to each limit its ``usage`` now, from the shared counters (Redis; null
without Redis or while it does not answer), and ``waiting``: the attempts
waiting on it now (their runs' ``gate``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app

from cronman.api.common import ApiView, json_response, read_json, require_admin
from cronman.api.context import api_context
from cronman.coordination.limit_counters import LimitCounters
from cronman.errors import CoordinatorUnavailable, NotFound, ValidationError
from cronman.limits import LIMIT_NAME_RE, Limit, parse_limit

bp = Blueprint("limits", __name__, url_prefix="/v1/limits")

ADMIN_ONLY = "managing limits"


def limit_json(limit: Limit) -> dict[str, Any]:
    return {**limit.to_dict(), "version": limit.version}


COUNTERS_KEY = "cronman_limit_counters"


def _counters() -> LimitCounters | None:
    """The shared counters (one per app, opened on first use); None without Redis."""
    settings = api_context().settings
    if not settings.redis_url:
        return None
    counters: LimitCounters | None = current_app.extensions.get(COUNTERS_KEY)
    if counters is None:
        from cronman.coordination.redis_limits import RedisLimitCounters

        counters = current_app.extensions[COUNTERS_KEY] = RedisLimitCounters(settings)
    return counters


def usage(limits: list[Limit]) -> list[dict[str, int] | None]:
    """Per limit: slots in flight and starts within the window now,
    cluster-wide (one round trip; None each without Redis)."""
    counters = _counters()
    if counters is None or not limits:
        return [None] * len(limits)
    try:
        got = counters.usage([lim.name for lim in limits],
                             [lim.window_ms or 1000 for lim in limits])
    except CoordinatorUnavailable:
        return [None] * len(limits)
    return [{"in_flight": in_flight, "starts_in_window": started}
            for in_flight, started in got]


def _with_state(limits: list[Limit]) -> list[dict[str, Any]]:
    """The limits' JSON with what holds on them now: ``usage`` and ``waiting``."""
    waiting = api_context().store.limits.waiting_counts()
    return [{**limit_json(lim), "usage": used, "waiting": waiting.get(lim.name, 0)}
            for lim, used in zip(limits, usage(limits), strict=True)]


def _name(name: str) -> str:
    if not LIMIT_NAME_RE.match(name):
        raise NotFound(f"no limit named {name!r}")
    return name


def _version(body: Any) -> int | None:
    version = body.get("version") if isinstance(body, dict) else None
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValidationError("must be a positive integer", field="version")
    return version


class LimitCollection(ApiView):
    def get(self) -> Response:
        require_admin(ADMIN_ONLY)
        return json_response({"items": _with_state(api_context().store.limits.list_limits())})

    def post(self) -> Response:
        who = require_admin(ADMIN_ONLY)
        body = read_json()
        if isinstance(body, dict) and "version" in body:
            raise ValidationError("'version' is read-only; it is assigned by the server",
                                  field="version")
        limit = api_context().store.limits.create_limit(parse_limit(body), by=who.token_id)
        return json_response(limit_json(limit), 201, {"Location": f"/v1/limits/{limit.name}"})


class LimitItem(ApiView):
    def get(self, name: str) -> Response:
        require_admin(ADMIN_ONLY)
        limit = api_context().store.limits.get_limit(_name(name))
        if limit is None:
            raise NotFound(f"no limit named {name!r}")
        return json_response(_with_state([limit])[0])

    def put(self, name: str) -> Response:
        who = require_admin(ADMIN_ONLY)
        body = read_json()
        limit = parse_limit(body, name=_name(name))
        stored = api_context().store.limits.update_limit(limit, version=_version(body),
                                                         by=who.token_id)
        return json_response(limit_json(stored))

    def delete(self, name: str) -> Response:
        require_admin(ADMIN_ONLY)
        if not api_context().store.limits.delete_limit(_name(name)):
            raise NotFound(f"no limit named {name!r}")
        return Response(status=204)


bp.add_url_rule("", view_func=LimitCollection.as_view("limits"))
bp.add_url_rule("/<name>", view_func=LimitItem.as_view("limit"))
