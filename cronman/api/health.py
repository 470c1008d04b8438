"""``/healthz`` (the process answers) and ``/readyz`` (database and Redis reachable)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response

from cronman.api.common import ApiView, json_response
from cronman.api.context import api_context
from cronman.errors import CronmanError

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)


class Healthz(ApiView):
    def get(self) -> Response:
        return json_response({"status": "ok"})


class Readyz(ApiView):
    def get(self) -> Response:
        ctx = api_context()
        checks: dict[str, str] = {}
        failed: list[str] = []
        try:
            ok = ctx.store.ping()
            checks["database"] = "ok" if ok is not False else "unreachable"
        except CronmanError as exc:
            checks["database"] = f"unreachable: {exc.message}"
        except Exception as exc:  # any driver error means "not ready", not a 500
            checks["database"] = f"unreachable: {exc}"
        if checks["database"] != "ok":
            failed.append("database")
        coordinator = ctx.coordinator
        if coordinator is None:
            checks["redis"] = "not configured"
        else:
            try:
                reachable = coordinator.ping()
            except Exception:  # ping() should not raise; treat it as unreachable
                log.warning("coordinator ping failed", exc_info=True)
                reachable = False
            checks["redis"] = "ok" if reachable else "unreachable"
            if not reachable:
                failed.append("redis")
        if failed:
            log.warning("not ready: %s", checks)
            return json_response({
                "status": "unavailable",
                "checks": checks,
                "error": {"code": "unavailable", "field": None,
                          "message": f"{' and '.join(failed)} unreachable"},
            }, 503)
        return json_response({"status": "ready", "checks": checks})


bp.add_url_rule("/healthz", view_func=Healthz.as_view("healthz"))
bp.add_url_rule("/readyz", view_func=Readyz.as_view("readyz"))
