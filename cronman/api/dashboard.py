"""``GET /``: the operator dashboard; ``GET /ui/<asset>``: its files.

The dashboard is plain HTML, CSS and JavaScript modules in
``cronman/api/static`` (no build step, nothing fetched from elsewhere: charts
are SVG drawn by ``ui/charts.js``). It calls the ``/v1`` API from the
browser with the operator's token (kept in the browser's localStorage) and
never runs inline script: the Content-Security-Policy allows scripts,
styles, images and connections from this origin only.
"""

from __future__ import annotations

import mimetypes
from functools import cache
from importlib.resources import files

from flask import Blueprint, Response, request

from cronman.api.common import ApiView
from cronman.errors import NotFound

bp = Blueprint("dashboard", __name__)

STATIC = "static"
UI_DIR = "ui"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
         ".html": "text/html"}


@cache
def static_bytes(relative: str) -> bytes | None:
    """A file under cronman/api/static (None when there is none)."""
    node = files("cronman.api").joinpath(STATIC)
    for part in relative.split("/"):
        node = node.joinpath(part)
    return node.read_bytes() if node.is_file() else None


@cache
def ui_assets() -> frozenset[str]:
    """The dashboard's files, by path under ``static/ui`` (nothing else is served)."""
    root = files("cronman.api").joinpath(STATIC).joinpath(UI_DIR)
    found: set[str] = set()

    def walk(node: object, prefix: str) -> None:
        for child in node.iterdir():  # type: ignore[attr-defined]
            name = prefix + child.name
            if child.is_dir():
                walk(child, name + "/")
            elif child.name.rsplit(".", 1)[-1] in ("js", "css", "svg"):
                found.add(name)

    walk(root, "")
    return frozenset(found)


def asset_response(data: bytes, name: str, *, csp: str = CSP) -> Response:
    suffix = "." + name.rsplit(".", 1)[-1]
    mimetype = TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    resp = Response(data, mimetype=mimetype)
    # Revalidated on every load (an upgrade shows at once), answered 304 when unchanged.
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["Content-Security-Policy"] = csp
    resp.headers["X-Content-Type-Options"] = "nosniff"
    # Nothing to other sites; to this one, its own URL. Under "no-referrer" a
    # browser following the Fetch standard sends "Origin: null" with the
    # console's POSTs, which the origin check (``origins``) must refuse.
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.add_etag()
    resp.make_conditional(request)
    return resp


class Dashboard(ApiView):
    def get(self) -> Response:
        data = static_bytes("dashboard.html")
        if data is None:
            raise NotFound("the dashboard is not installed")
        resp = asset_response(data, "dashboard.html")
        resp.headers["X-Frame-Options"] = "DENY"
        return resp


class UiAsset(ApiView):
    def get(self, asset: str) -> Response:
        data = static_bytes(f"{UI_DIR}/{asset}") if asset in ui_assets() else None
        if data is None:
            raise NotFound(f"no dashboard file {asset!r}")
        return asset_response(data, asset)


bp.add_url_rule("/", view_func=Dashboard.as_view("dashboard"))
bp.add_url_rule("/ui/<path:asset>", view_func=UiAsset.as_view("asset"))
