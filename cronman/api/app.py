"""The Flask app factory of the cronman API.

``create_app`` takes the settings and how to reach the store and the
coordinator; the processes wire them (``cronman.processes.api.make_app`` for
gunicorn and ``wsgi.py``, ``cronman.processes.standalone`` sharing its
scheduler's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from cronman.api import (
    audit,
    calendars,
    cluster,
    dashboard,
    forecast,
    health,
    history,
    host_policies,
    jobs,
    limits,
    metrics,
    notifications,
    quotas,
    request_ids,
    runs,
    signing_keys,
    tokens,
    work,
)
from cronman.api.auth import EXTENSION_KEY as AUTH_KEY
from cronman.api.auth import TokenAuth
from cronman.api.common import MAX_BODY_BYTES, error_response, json_response, principal
from cronman.api.console import CONSOLE_BLUEPRINTS, require_write_access
from cronman.api.context import EXTENSION_KEY, ApiContext
from cronman.api.openapi import document as openapi
from cronman.api.origins import OriginGuard
from cronman.config import Settings
from cronman.coordination.base import Coordinator
from cronman.errors import CronmanError
from cronman.store.base import Store
from cronman.store.dag import DependencyCycle
from cronman.timeutil import utcnow

log = logging.getLogger(__name__)

V1_PREFIX = "/v1/"


def create_app(settings: Settings, *, store: Store | None = None,
               coordinator: Coordinator | None = None,
               open_store: Callable[[], Store] | None = None,
               open_coordinator: Callable[[], Coordinator | None] | None = None) -> Flask:
    """The API app. ``store``/``coordinator``, when given, are shared and not
    closed; otherwise they are opened on first use by ``open_store`` /
    ``open_coordinator`` (no coordinator without the latter)."""
    app = Flask("cronman.api", static_folder=None)
    app.config.update(MAX_CONTENT_LENGTH=MAX_BODY_BYTES)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.compact = True  # type: ignore[attr-defined]
    app.url_map.strict_slashes = True
    app.url_map.converters["id"] = jobs.IdConverter

    ctx = ApiContext(settings, store=store, coordinator=coordinator, open_store=open_store,
                     open_coordinator=open_coordinator)
    app.extensions[EXTENSION_KEY] = ctx
    auth = TokenAuth(settings, lambda: ctx.store.tokens)
    app.extensions[AUTH_KEY] = auth
    guard = OriginGuard(settings, auth)

    metrics.install(app, lambda: ctx.store.jobs.count_live_jobs(), ctx.database_member,
                    lambda: ctx.store.work.queues(None, now=utcnow()))
    request_ids.install(app)
    for bp in (jobs.bp, runs.bp, history.bp, audit.bp, cluster.bp, health.bp, metrics.bp,
               openapi.bp, dashboard.bp, notifications.bp, tokens.bp, calendars.bp,
               signing_keys.bp, host_policies.bp, work.bp, limits.bp, quotas.bp, forecast.bp):
        app.register_blueprint(bp)
    for bp in CONSOLE_BLUEPRINTS:
        app.register_blueprint(bp)

    @app.before_request
    def _authenticate() -> Response | None:
        auth.note_local_address(local_address(request.environ))
        guard.check()
        preflight = guard.preflight()
        if preflight is not None:
            return preflight
        if request.path.startswith(V1_PREFIX) or request.path == "/v1":
            g.principal = auth.authenticate(request.headers.get("Authorization"))
            require_write_access(g.principal, request.method, request.path)
        return None

    app.after_request(guard.add_cors)

    _install_error_handlers(app)
    return app


def local_address(environ: dict[str, Any]) -> str | None:
    """The address this end of the request's connection is bound to, when the
    server tells (gunicorn and werkzeug hand the socket over)."""
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    try:
        name = sock.getsockname() if sock is not None else None
    except OSError:
        return None
    return name[0] if isinstance(name, tuple) and name else None


def _install_error_handlers(app: Flask) -> None:
    @app.errorhandler(DependencyCycle)
    def _cycle(exc: DependencyCycle) -> Response:  # jobs of other namespaces go unnamed
        return error_response(exc.shown_to(principal().allows))

    @app.errorhandler(CronmanError)
    def _cronman_error(exc: CronmanError) -> Response:
        if exc.http_status >= 500:
            log.warning("%s %s: %s", request.method, request.path, exc.message)
        resp = error_response(exc)
        if exc.http_status == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="cronman"'
        return resp

    @app.errorhandler(RequestEntityTooLarge)
    def _too_large(exc: RequestEntityTooLarge) -> Response:
        limit = g.get("body_limit", request.max_content_length)
        return json_response({"error": {
            "code": "too_large",
            "message": f"the request body is larger than {limit} bytes",
            "field": None,
        }}, 413)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = (exc.name or "error").lower().replace(" ", "_").replace("-", "_")
        message = exc.description or exc.name
        if status == 404:
            message = f"nothing at {request.method} {request.path}"
        elif status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        resp = json_response({"error": {"code": code, "message": message, "field": None}},
                             status)
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                resp.headers[name] = value
        return resp

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_response({"error": {
            "code": "internal", "message": "internal server error", "field": None}}, 500)
