"""``GET /``: the operator dashboard, one self-contained HTML page.

The page polls ``/v1/cluster`` every few seconds and shows the membership
table. When the API needs a token, the operator pastes one; it is kept in
the browser's localStorage and sent as a Bearer token.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from flask import Blueprint, Response

from cronman.api.common import ApiView

bp = Blueprint("dashboard", __name__)


@cache
def dashboard_html() -> bytes:
    return files("cronman.api").joinpath("static/dashboard.html").read_bytes()


class Dashboard(ApiView):
    def get(self) -> Response:
        resp = Response(dashboard_html(), mimetype="text/html")
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["Content-Security-Policy"] = (
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'")
        return resp


bp.add_url_rule("/", view_func=Dashboard.as_view("dashboard"))
