"""``GET /docs``: the OpenAPI document, browsable (Swagger UI 5).

Swagger UI's files come from the ``flask-swagger-ui`` package (its ``dist``
folder; only that folder is used, not its blueprint, whose page runs inline
script): served here, so the page works offline and under a CSP without
inline script. ``static/docs.html`` and ``static/ui/docs.js`` start it on
``/openapi.json``. (swagger-ui-bundle ships Swagger UI 4, which cannot
render an OpenAPI 3.1 document.)
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from flask import Blueprint, Response

from cronman.api.common import ApiView
from cronman.api.dashboard import asset_response, static_bytes
from cronman.errors import NotFound

bp = Blueprint("docs", __name__)

SWAGGER_PACKAGE = "flask_swagger_ui"
SWAGGER_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css")
# Swagger UI sets inline styles and shows data: images.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@cache
def swagger_asset(name: str) -> bytes:
    return files(SWAGGER_PACKAGE).joinpath("dist").joinpath(name).read_bytes()


class Docs(ApiView):
    def get(self) -> Response:
        data = static_bytes("docs.html")
        if data is None:
            raise NotFound("the API docs page is not installed")
        return asset_response(data, "docs.html", csp=DOCS_CSP)


class DocsAsset(ApiView):
    def get(self, asset: str) -> Response:
        if asset not in SWAGGER_ASSETS:
            raise NotFound(f"no docs file {asset!r}")
        return asset_response(swagger_asset(asset), asset, csp=DOCS_CSP)


bp.add_url_rule("/docs", view_func=Docs.as_view("docs"))
bp.add_url_rule("/docs/<asset>", view_func=DocsAsset.as_view("asset"))
