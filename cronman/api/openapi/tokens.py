"""The OpenAPI description of ``/v1/tokens`` (merged by ``openapi``): API tokens
managed through the API by admin tokens (``cronman.api.tokens``)."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    JSON,
    LIMIT,
    NAMESPACE,
    STRING,
    TEXT,
    TIME,
    nullable,
    obj,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.api.tokens import REVOCATION_SETTLES, TOKEN_NAME_MAX, TOKEN_NAMESPACES_MAX
from cronman.store.codec import SEARCH_CURSOR_PATTERN

NOT_ADMIN = {"description": "not an admin token (or a read-only one, on a write)",
             "content": {JSON: {"schema": ref("Error")}}}
NO_ADMIN_TOKEN = {"description": "no token, or an unknown or revoked one: every call here "
                                 "needs an admin token, whatever the auth state",
                  "content": {JSON: {"schema": ref("Error")}}}


def schemas() -> dict[str, Any]:
    token = {
        "id": STRING,
        "name": STRING,
        "namespaces": {"type": ["array", "null"], "items": STRING,
                       "description": "the namespaces the token may use (null: all, an "
                                      "admin token)"},
        "admin": {"type": "boolean"},
        "read_only": {"type": "boolean", "description": "may read (GET), never change"},
        "created_at": TIME,
        "revoked_at": nullable(TIME),
    }
    required = ("id", "name", "namespaces", "admin", "read_only", "created_at", "revoked_at")
    create = obj({
        "name": {**nullable({**TEXT, "minLength": 1, "maxLength": TOKEN_NAME_MAX}),
                 "description": "a label (default: 'admin', or the namespaces joined "
                                "with commas)"},
        "namespaces": {"type": ["array", "null"], "minItems": 1,
                       "maxItems": TOKEN_NAMESPACES_MAX, "items": NAMESPACE,
                       "description": "the namespaces the token may use; required unless "
                                      "admin is true, and left out (or null) when it is"},
        "admin": {"type": "boolean", "default": False,
                  "description": "every namespace, and managing tokens"},
        "read_only": {"type": "boolean", "default": False,
                      "description": "the token may read (GET) but never change anything"},
    }, description="A new token: for some namespaces, or for all (admin)")
    create["oneOf"] = [
        {"required": ["admin"],
         "properties": {"admin": {"const": True}, "namespaces": {"type": "null"}}},
        {"required": ["namespaces"],
         "properties": {"admin": {"const": False}, "namespaces": {"type": "array"}}},
    ]
    return {
        "TokenCreate": create,
        "Token": obj(token, required),
        "TokenCreated": obj({
            "token": {"type": "string", "description": "the secret: shown only in this "
                                                       "answer (the database keeps a hash)"},
            **token}, ("token", *required)),
        "TokenList": obj({"items": {"type": "array", "items": ref("Token")},
                           "next_cursor": nullable(STRING)}, ("items", "next_cursor")),
    }


def paths() -> dict[str, Any]:
    denied = {"401": NO_ADMIN_TOKEN, "403": NOT_ADMIN}
    cursor = {"type": "string", "pattern": f"^(?:{SEARCH_CURSOR_PATTERN})?$"}
    return {
        "/v1/tokens": {
            "get": op("listTokens", "API tokens, revoked ones too, oldest first (admin "
                       "tokens only; never a secret)",
                       ok("200", "TokenList", "a page of tokens"), "400",
                       [LIMIT, query("cursor", cursor, CURSOR_TEXT)], extra=denied),
            "post": op("createToken", "Create an API token (admin tokens only); the answer "
                        "holds its secret, shown this once",
                        ok("201", "TokenCreated", "the token and its secret"), "400 413",
                        body="TokenCreate", extra=denied),
        },
        "/v1/tokens/{token_id}": {
            "delete": op("revokeToken", "Revoke an API token (admin tokens only)",
                          ok("204", None, "revoked (or revoked already): every API process "
                                           "refuses the token from the answer on; the answer "
                                           f"waits up to {REVOCATION_SETTLES:g} s for their "
                                           "caches"),
                          "404", [path_param("token_id")], extra=denied),
        },
    }
