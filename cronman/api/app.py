"""The Flask app factory of the cronman API.

``create_app()`` reads ``Settings.from_env()``; ``cronman standalone`` hands in
the store (and coordinator) its scheduler uses. ``wsgi.py`` at the top of the
repository is ``app = create_app()`` for gunicorn.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from cronman.api import cluster, dashboard, health, jobs, metrics, openapi, runs
from cronman.api.auth import TokenAuth
from cronman.api.common import MAX_BODY_BYTES, error_response, json_response
from cronman.api.context import EXTENSION_KEY, ApiContext
from cronman.config import Settings
from cronman.errors import CronmanError
from cronman.scheduler.coordinator import Coordinator

log = logging.getLogger(__name__)

AUTH_KEY = "cronman_auth"
V1_PREFIX = "/v1/"


def create_app(settings: Settings | None = None, *, store: Any = None,
               coordinator: Coordinator | None = None) -> Flask:
    """The API app. ``store``/``coordinator``, when given, are shared and not closed."""
    settings = settings or Settings.from_env()
    app = Flask("cronman.api", static_folder=None)
    app.config.update(MAX_CONTENT_LENGTH=MAX_BODY_BYTES)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.compact = True  # type: ignore[attr-defined]
    app.url_map.strict_slashes = True
    app.url_map.converters["id"] = jobs.IdConverter

    ctx = ApiContext(settings, store=store, coordinator=coordinator)
    app.extensions[EXTENSION_KEY] = ctx
    auth = TokenAuth(lambda: ctx.store.tokens)
    app.extensions[AUTH_KEY] = auth

    metrics.install(app, metrics.count_live_jobs(lambda: ctx.store))
    for bp in (jobs.bp, runs.bp, cluster.bp, health.bp, metrics.bp, openapi.bp, dashboard.bp):
        app.register_blueprint(bp)

    @app.before_request
    def _authenticate() -> None:
        if request.path.startswith(V1_PREFIX) or request.path == "/v1":
            g.principal = auth.authenticate(request.headers.get("Authorization"))

    _install_error_handlers(app)
    return app


def _install_error_handlers(app: Flask) -> None:
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
        limit = request.max_content_length
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
