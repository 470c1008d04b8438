"""``/v1/tokens``: API tokens managed through the API, by admin tokens only.

- ``POST /v1/tokens`` creates a token for some namespaces or for all
  (``admin``), read-only or not, and answers its secret: the only time it is
  shown (the database keeps a hash).
- ``GET /v1/tokens`` lists tokens, revoked ones too, oldest first, never a
  secret.
- ``DELETE /v1/tokens/{token_id}`` revokes a token. The answer comes once
  every API process refuses it: each caches a token it has checked for
  ``CACHE_SECONDS``, so the call waits that long after the revocation
  commits (a repeated call for a revoked token answers as soon as that is
  past).

Every call needs an admin token (``Authorization: Bearer``), whatever the
auth state (``cronman.api.auth``): without one it is a 401, even while the
API is open or ``CRONMAN_AUTH=off``; a token limited to namespaces gets a 403,
and so does a read-only admin token on a write. So the first admin token
cannot come from here: ``cronman tokens create --admin`` makes it with
database access. Each creation and revocation is recorded in the token
history with the admin token that made it and the request id.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.auth import Principal
from cronman.api.common import (
    ApiView,
    json_response,
    read_json,
    reject_bad_strings,
    require_admin,
)
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.names import ID_RE
from cronman.api.request_ids import request_id
from cronman.errors import NotFound, ValidationError
from cronman.store.records import TokenActor
from cronman.store.tokens import CACHE_SECONDS
from cronman.timeutil import format_rfc3339, utcnow

bp = Blueprint("tokens", __name__, url_prefix="/v1")

TOKEN_NAME_MAX = 128
TOKEN_NAMESPACES_MAX = 100
TOKEN_KEYS = ("name", "namespaces", "admin", "read_only")
# How long after a revocation commits no API process can still accept the
# token from its cache (a little over CACHE_SECONDS, for clock granularity).
REVOCATION_SETTLES = CACHE_SECONDS + 0.1


def token_json(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "name": record["name"],
        "namespaces": record["namespaces"],
        "admin": record["namespaces"] is None,
        "read_only": bool(record["read_only"]),
        "created_at": format_rfc3339(record["created_at"]),
        "revoked_at": format_rfc3339(record["revoked_at"]),
    }


def validate_token_request(body: Any) -> tuple[str, list[str] | None, bool]:
    """(name, namespaces or None for admin, read_only) of a POST body."""
    obj = v.require_object(body, None)
    for key in obj:
        if key not in TOKEN_KEYS:
            raise ValidationError(f"unknown key {key!r}", field=str(key))
    admin = v.check_bool(obj["admin"], "admin") if "admin" in obj else False
    read_only = v.check_bool(obj["read_only"], "read_only") if "read_only" in obj else False
    raw = obj.get("namespaces")
    namespaces: list[str] | None = None
    if admin:
        if raw is not None:
            raise ValidationError("must be left out with admin: true (an admin token holds "
                                  "every namespace)", field="namespaces")
    else:
        if raw is None:
            raise ValidationError("is required: the namespaces the token may use (or "
                                  "admin: true for all)", field="namespaces")
        if not isinstance(raw, list):
            raise ValidationError(f"must be an array, not {v.type_name(raw)}",
                                  field="namespaces")
        if not 1 <= len(raw) <= TOKEN_NAMESPACES_MAX:
            raise ValidationError(f"must hold 1 to {TOKEN_NAMESPACES_MAX} namespaces",
                                  field="namespaces")
        checked = [v.check_namespace(ns, f"namespaces[{i}]") for i, ns in enumerate(raw)]
        namespaces = sorted(set(checked))
    name = obj.get("name")
    if name is None:
        name = "admin" if namespaces is None else ",".join(namespaces)[:TOKEN_NAME_MAX]
    else:
        name = v.check_string(name, "name", max_len=TOKEN_NAME_MAX)
    return name, namespaces, read_only


def _actor(who: Principal) -> TokenActor:
    return TokenActor(token_id=who.token_id, name=who.name or who.token_id or "",
                      request_id=request_id())


class TokenList(ApiView):
    query_params = {"get": ("limit", "cursor")}

    def get(self) -> Response:
        require_admin()
        limit = v.parse_int_param(request.args.get("limit"), "limit",
                                  default=LIST_LIMIT_DEFAULT, lo=1, hi=LIST_LIMIT_MAX)
        cursor = request.args.get("cursor") or None
        if cursor is not None:
            reject_bad_strings(cursor, "cursor")
        page = api_context().store.tokens.list_token_page(limit, cursor)
        return json_response({"items": [token_json(t) for t in page.items],
                              "next_cursor": page.next_cursor})

    def post(self) -> Response:
        who = require_admin()
        name, namespaces, read_only = validate_token_request(read_json())
        secret, record = api_context().store.tokens.create_token(
            name, namespaces, read_only=read_only, actor=_actor(who))
        return json_response({"token": secret, **token_json(record)}, 201)


class TokenItem(ApiView):
    def delete(self, token_id: str) -> Response:
        who = require_admin()
        tokens = api_context().store.tokens
        record = tokens.get_token(token_id) if ID_RE.match(token_id) else None
        if record is None:
            raise NotFound(f"no token {token_id!r}")
        if record["revoked_at"] is None:
            tokens.revoke_token(token_id, actor=_actor(who))
            record = tokens.get_token(token_id) or record
        revoked_at = record["revoked_at"] or utcnow()
        # Answer once no API process can still accept the token from its cache.
        wait = REVOCATION_SETTLES - (utcnow() - revoked_at).total_seconds()
        if wait > 0:
            time.sleep(min(wait, REVOCATION_SETTLES))
        return Response(status=204)


bp.add_url_rule("/tokens", view_func=TokenList.as_view("tokens"))
bp.add_url_rule("/tokens/<id:token_id>", view_func=TokenItem.as_view("token"))
