"""The building blocks of ``/openapi.json``: schema primitives and helpers
for operations, parameters and responses, shared by every part of the
document (``schemas``, ``targets``, the feature modules
of this package), which ``document`` assembles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronman.api.names import ID_PATTERN, NAMESPACE_MAX, NAMESPACE_RE
from cronman.store.codec import JOB_CURSOR_PATTERN, RUN_CURSOR_PATTERN
from cronman.vocabulary import RUN_STATUSES

REF = "#/components/schemas/"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    out["type"] = [schema["type"], "null"]
    return out


def obj(props: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = True,
         description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out



STRING = {"type": "string"}
# Text the server stores: no NUL (refused in every request body).
TEXT = {"type": "string", "pattern": "^[^\\u0000]*$"}
TIME = {"type": "string", "format": "date-time"}
# Times a job may hold: years 1970 to 8999.
JOB_TIME = {"type": "string", "format": "date-time",
            "pattern": "^(?:19[7-9][0-9]|[2-8][0-9]{3})-"}
STRING_MAP = {"type": "object", "additionalProperties": STRING}
SECONDS = {"type": "number", "minimum": 0}
JOB_CURSOR = {"type": "string", "pattern": f"^(?:{JOB_CURSOR_PATTERN})?$"}
RUN_CURSOR = {"type": "string", "pattern": f"^(?:{RUN_CURSOR_PATTERN})?$"}


def list_of(item: str) -> dict[str, Any]:
    return obj({"items": {"type": "array", "items": ref(item)},
                 "next_cursor": nullable(STRING)}, ("items", "next_cursor"))


JSON = "application/json"
# Operations whose query string can grow past what gunicorn reads (4094 bytes).
URI_TOO_LONG = {"description": "request line too long for the server (gunicorn: 4094 bytes)"}


def resp(status: str) -> dict[str, Any]:
    name = {"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden",
            "404": "NotFound", "409": "Conflict", "413": "TooLarge",
            "415": "UnsupportedMediaType", "503": "Unavailable"}[status]
    return {"$ref": f"#/components/responses/{name}"}


def ok(status: str, schema: str | None, description: str) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {JSON: {"schema": ref(schema)}}
    return {status: out}


def op(op_id: str, summary: str, ok: dict[str, Any], errors: str,
        params: list[dict[str, Any]] | None = None, body: str | None = None,
        secured: bool = True, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    responses = {**ok, **(extra or {})}
    for status in errors.split():
        responses[status] = resp(status)
    if secured:
        responses.setdefault("401", resp("401"))
        responses.setdefault("503", resp("503"))
    out: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": responses}
    if params:
        out["parameters"] = params
    if body is not None:  # a body not sent as JSON is not read
        responses.setdefault("415", resp("415"))
        out["requestBody"] = {"required": True,
                              "content": {JSON: {"schema": ref(body)}}}
    if not secured:
        out["security"] = []
    return out


def query(name: str, schema: dict[str, Any], description: str,
           **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description, **extra}


def path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": f"^{ID_PATTERN}$"}}


_STATUS = "(?:" + "|".join(RUN_STATUSES) + ")"
STATUS_LIST_PATTERN = f"^(?:{_STATUS}(?:,{_STATUS})*)?$"
LIMIT = query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
               "page size (a maximum)")
NAMESPACE = {"type": "string", "pattern": NAMESPACE_RE.pattern, "maxLength": NAMESPACE_MAX}
NAMESPACE_QUERY = query("namespace", NAMESPACE, "only this namespace")
CURSOR_TEXT = ("the next_cursor of the previous page: a position, any of this form is "
               "valid (empty: the first page); anything else is a 400")


def collection_paths(path: str, item_param: str, schema: str, *, noun: str, plural: str,
                     list_summary: str, create_summary: str, get_summary: str,
                     replace_summary: str, delete_summary: str,
                     delete_errors: str = "403 404",
                     delete_params: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The paths of a collection of ``schema`` objects kept by id: ``path``
    lists them (a page of a namespace's: ``<schema>List``) and creates one
    (``<schema>Create``); ``path/{item_param}`` reads, replaces
    (``<schema>Replace``) and deletes one. ``noun`` and ``plural`` name them
    in the responses' descriptions."""
    item = [path_param(item_param)]
    the = f"the {noun}"
    return {
        path: {
            "get": op(f"list{schema}s", list_summary,
                       ok("200", f"{schema}List", f"a page of {plural}"), "400 403",
                       [NAMESPACE_QUERY, LIMIT, query("cursor", JOB_CURSOR, CURSOR_TEXT)]),
            "post": op(f"create{schema}", create_summary, ok("201", schema, the),
                        "400 403 409 413", body=f"{schema}Create"),
        },
        f"{path}/{{{item_param}}}": {
            "get": op(f"get{schema}", get_summary, ok("200", schema, the), "403 404", item),
            "put": op(f"replace{schema}", replace_summary, ok("200", schema, the),
                       "400 403 404 409 413", item, body=f"{schema}Replace"),
            "delete": op(f"delete{schema}", delete_summary, ok("204", None, "deleted"),
                          delete_errors, [*item, *delete_params]),
        },
    }
