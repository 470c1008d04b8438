"""``/v1/calendars``: named exclusion calendars (holiday dates per zone).

A calendar is ``{"namespace", "name", "timezone", "dates": [...]}``: dates
``YYYY-MM-DD`` (once) or ``--MM-DD`` (every year), local to the calendar's
zone (:mod:`cronman.schedules.calendars`). Jobs name calendars in their
``calendars`` key; a fire on one of a named calendar's dates is recorded as
a ``skipped`` run naming the calendar. Token scopes apply as for jobs. A
calendar jobs name is deleted only with ``force=true`` (and keeps its
namespace and name while they name it).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import MAX_BODY_BYTES, ApiView, json_response, principal, read_json
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.names import ID_RE
from cronman.errors import NotFound, ValidationError
from cronman.schedules.calendars import ExclusionCalendar, parse_calendar
from cronman.store.base import CalendarRecord
from cronman.timeutil import format_rfc3339
from cronman.vocabulary import DEFAULT_NAMESPACE

bp = Blueprint("calendars", __name__, url_prefix="/v1/calendars")

READ_ONLY = ("id", "version", "created_at", "updated_at")


def _store() -> Any:
    return api_context().store


def calendar_json(record: CalendarRecord) -> dict[str, Any]:
    return {"id": record.id, "namespace": record.namespace, "name": record.name,
            "timezone": record.timezone, "dates": record.dates, "version": record.version,
            "created_at": format_rfc3339(record.created_at),
            "updated_at": format_rfc3339(record.updated_at)}


def _body(body: Any, *, stored: CalendarRecord | None) -> tuple[str, ExclusionCalendar]:
    """(namespace, calendar) of a POST or PUT body."""
    obj = v.require_object(body, None)
    for key in obj:
        if key in READ_ONLY:
            if stored is None:
                raise ValidationError(f"{key!r} is read-only; it is assigned by the server",
                                      field=key)
    if stored is not None and "id" in obj and obj["id"] != stored.id:
        raise ValidationError("does not match the calendar id of the URL", field="id")
    raw_namespace = obj.get("namespace")
    namespace = v.check_namespace(DEFAULT_NAMESPACE if raw_namespace is None else raw_namespace)
    spec = {k: val for k, val in obj.items() if k not in READ_ONLY and k != "namespace"}
    if spec.get("timezone") is None:
        spec.pop("timezone", None)
    return namespace, parse_calendar(spec, path="")


def _version(body: Any) -> int | None:
    raw = body.get("version") if isinstance(body, dict) else None
    return None if raw is None else v.check_int(raw, "version", lo=0, hi=2**62)


def _force() -> bool:
    raw = request.args.get("force")
    return False if raw is None else v.parse_bool_param(raw, "force")


def _load(calendar_id: str) -> CalendarRecord:
    record: CalendarRecord | None = (_store().calendars.get(calendar_id)
                                     if ID_RE.match(calendar_id) else None)
    if record is None:
        raise NotFound(f"no calendar {calendar_id!r}")
    principal().require(record.namespace)
    return record


class CalendarCollection(ApiView):
    query_params = {"get": ("namespace", "limit", "cursor")}

    def get(self) -> Response:
        namespace = request.args.get("namespace")
        if namespace is not None:
            v.check_namespace(namespace)
            principal().require(namespace, field="namespace")
        limit = v.parse_int_param(request.args.get("limit"), "limit",
                                  default=LIST_LIMIT_DEFAULT, lo=1, hi=LIST_LIMIT_MAX)
        page = _store().calendars.list_calendars(
            namespace=namespace, namespaces=principal().restriction(), limit=limit,
            cursor=request.args.get("cursor") or None)
        return json_response({"items": [calendar_json(r) for r in page.items],
                              "next_cursor": page.next_cursor})

    def post(self) -> Response:
        namespace, calendar = _body(read_json(max_bytes=MAX_BODY_BYTES), stored=None)
        principal().require(namespace, field="namespace")
        record = _store().calendars.create(namespace, calendar)
        return json_response(calendar_json(record), 201,
                             {"Location": f"/v1/calendars/{record.id}"})


class CalendarItem(ApiView):
    query_params = {"delete": ("force",)}

    def get(self, calendar_id: str) -> Response:
        return json_response(calendar_json(_load(calendar_id)))

    def put(self, calendar_id: str) -> Response:
        body = read_json(max_bytes=MAX_BODY_BYTES)
        stored = _load(calendar_id)
        namespace, calendar = _body(body, stored=stored)
        principal().require(namespace, field="namespace")
        record = _store().calendars.replace(calendar_id, namespace=namespace,
                                            calendar=calendar, version=_version(body))
        return json_response(calendar_json(record))

    def delete(self, calendar_id: str) -> Response:
        force = _force()
        _load(calendar_id)
        if not _store().calendars.delete(calendar_id, force=force):
            raise NotFound(f"no calendar {calendar_id!r}")
        return Response(status=204)


bp.add_url_rule("", view_func=CalendarCollection.as_view("collection"))
bp.add_url_rule("/<id:calendar_id>", view_func=CalendarItem.as_view("item"))
