"""The OpenAPI description of exclusion calendars (merged by ``document``):
``/v1/calendars`` and its objects. Patterns and bounds come from
``cronman.schedules.calendars``; a job's ``calendars`` key is in
``workflows``."""

from __future__ import annotations

from typing import Any

from cronman.api.names import NAMESPACE_MAX, NAMESPACE_RE
from cronman.api.openapi.parts import (
    STRING,
    TEXT,
    TIME,
    collection_paths,
    list_of,
    obj,
    query,
)
from cronman.schedules.calendars import MAX_DATES
from cronman.schedules.calendars import NAME_MAX as CALENDAR_NAME_MAX
from cronman.schedules.calendars import NAME_RE as CALENDAR_NAME_RE
from cronman.schedules.cron import zone_names
from cronman.vocabulary import DEFAULT_NAMESPACE

CALENDAR_DATE_PATTERN = r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|--[0-9]{2}-[0-9]{2})$"

# What JSON Schema cannot say about calendars (see schemas.SEMANTIC_RULES).
SEMANTIC_RULES: list[dict[str, str]] = [
    {"field": "", "message": "is not a calendar date",
     "rule": "a calendar's YYYY-MM-DD dates exist"},
    {"field": "", "message": "no month has that day",
     "rule": "a calendar's --MM-DD dates exist in some year"},
    {"field": "", "message": "the year must be",
     "rule": "a calendar's years are 0001-9999"},
]


def schemas() -> dict[str, Any]:
    namespace = {"type": ["string", "null"], "minLength": 1, "maxLength": NAMESPACE_MAX,
                 "pattern": NAMESPACE_RE.pattern, "default": DEFAULT_NAMESPACE}
    write = {
        "namespace": namespace,
        "name": {"type": "string", "minLength": 1, "maxLength": CALENDAR_NAME_MAX,
                 "pattern": f"^{CALENDAR_NAME_RE.pattern}$"},
        "timezone": {"enum": [*sorted(zone_names()), None], "default": "UTC",
                     "description": "an IANA zone: dates are local to it"},
        "dates": {"type": "array", "maxItems": MAX_DATES,
                  "items": {"type": "string", "pattern": CALENDAR_DATE_PATTERN},
                  "description": "YYYY-MM-DD (one date) or --MM-DD (every year)"},
    }
    read = {**write, "id": STRING, "namespace": STRING, "timezone": STRING,
            "version": {"type": "integer", "minimum": 1}, "created_at": TIME,
            "updated_at": TIME}
    replace = {**write, "id": TEXT, "version": {"type": ["integer", "null"], "minimum": 0,
                                                  "maximum": 2**62},
               "created_at": TIME, "updated_at": TIME}
    return {
        "CalendarCreate": obj(write, ("name", "dates"), description=(
            "A named exclusion calendar. Unknown and read-only keys are refused.")),
        "CalendarReplace": obj(replace, ("name", "dates"), description=(
            "The whole calendar. Read-only keys may be sent back: id must match, version "
            "must be the current one (else 409). While jobs name it, it keeps its namespace "
            "and name (409).")),
        "Calendar": obj(read, ("id", "namespace", "name", "timezone", "dates", "version",
                                "created_at", "updated_at")),
        "CalendarList": list_of("Calendar"),
    }


FORCE = query("force", {"type": "boolean", "default": False},
               "delete even though jobs depend on it (they are left as they are)")


def paths() -> dict[str, Any]:
    return collection_paths(
        "/v1/calendars", "calendar_id", "Calendar", noun="calendar", plural="calendars",
        list_summary="Exclusion calendars",
        create_summary="Create an exclusion calendar",
        get_summary="An exclusion calendar",
        replace_summary="Replace an exclusion calendar",
        delete_summary=("Delete an exclusion calendar (409 while jobs name it, unless "
                        "forced: the error's field is force)"),
        delete_errors="400 403 404 409", delete_params=[FORCE])
