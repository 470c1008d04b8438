"""``/healthz`` (the process answers) and ``/readyz`` (ready to serve).

``/readyz`` reports each check: the database and Redis reachable, plus any
check the process registers (``cronman standalone`` adds its node's run
writes), the database member written to (``database_member``: host:port and
since when; under Patroni the primary, null on SQLite), and the auth state (``required``, ``off`` or ``open``; see
``cronman.api.auth``), which is shown, not checked. Redis is "not
configured" where no CRONMAN_REDIS_URL is set (standalone coordinates in
process): it is never reported ``ok`` without a Redis behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import Blueprint, Flask, Response, current_app

from cronman.api.auth import token_auth
from cronman.api.common import ApiView, json_response
from cronman.api.context import api_context
from cronman.errors import CronmanError
from cronman.observability.db_member import member_json

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

CHECKS_KEY = "cronman_readiness"
# A readiness check: None when fine, else what is wrong.
ReadinessCheck = Callable[[], str | None]


def add_readiness_check(app: Flask, name: str, check: ReadinessCheck) -> None:
    """Make ``/readyz`` answer 503 while ``check()`` returns a problem."""
    app.extensions.setdefault(CHECKS_KEY, {})[name] = check


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
            failed.append("database unreachable")
        coordinator = ctx.coordinator if ctx.settings.redis_urls else None
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
                failed.append("redis unreachable")
        extra: dict[str, ReadinessCheck] = current_app.extensions.get(CHECKS_KEY, {})
        for name, check in extra.items():
            try:
                problem = check()
            except Exception as exc:  # a failing check means "not ready"
                problem = f"check failed: {exc}"
            checks[name] = "ok" if problem is None else problem
            if problem is not None:
                failed.append(f"{name}: {problem}")
        body: dict[str, object] = {"status": "ready", "checks": checks,
                                   "database_member": member_json(ctx.database_member()),
                                   "auth": self._auth_state()}
        if failed:
            log.warning("not ready: %s", checks)
            body["status"] = "unavailable"
            body["error"] = {"code": "unavailable", "field": None,
                             "message": "; ".join(failed)}
            return json_response(body, 503)
        return json_response(body)

    @staticmethod
    def _auth_state() -> dict[str, str]:
        try:
            return token_auth().state().to_dict()
        except Exception as exc:  # the token table could not be read
            return {"mode": "unknown", "reason": f"cannot read the API tokens: {exc}"}


bp.add_url_rule("/healthz", view_func=Healthz.as_view("healthz"))
bp.add_url_rule("/readyz", view_func=Readyz.as_view("readyz"))
