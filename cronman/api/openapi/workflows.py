"""The OpenAPI description of workflows (merged by ``openapi``): ``after``
schedules, a job's ``depends_on`` and ``calendars``, a run's ``gate``, a
job's upstream and downstream jobs, and ``/v1/calendars``. Patterns and
bounds come from the validation modules."""

from __future__ import annotations

from typing import Any

from cronman.api import workflow_validation as wv
from cronman.api.names import NAMESPACE_MAX, NAMESPACE_RE
from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    JOB_CURSOR,
    LIMIT,
    NAMESPACE_QUERY,
    STRING,
    TIME,
    nullable,
    obj,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.schedules.after import JOB_REF_MAX, JOB_REF_PATTERN, MAX_UPSTREAM_JOBS
from cronman.schedules.calendars import MAX_DATES
from cronman.schedules.calendars import NAME_MAX as CALENDAR_NAME_MAX
from cronman.schedules.calendars import NAME_RE as CALENDAR_NAME_RE
from cronman.schedules.cron import zone_names
from cronman.vocabulary import (
    DEFAULT_DEPENDENCY_WAIT,
    DEFAULT_NAMESPACE,
    DEFAULT_TRIGGER_MODE,
    TRIGGER_MODES,
    EdgeKind,
)

JOB_REF = {"type": "string", "minLength": 1, "maxLength": JOB_REF_MAX,
           "pattern": f"^{JOB_REF_PATTERN}$",
           "description": "a job id, namespace/name, or a name in this job's namespace "
                          "(stored as the job's id)"}
CALENDAR_DATE_PATTERN = r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|--[0-9]{2}-[0-9]{2})$"


def after_schedule() -> dict[str, Any]:
    return obj({
        "kind": {"const": "after"},
        "jobs": {"type": "array", "minItems": 1, "maxItems": MAX_UPSTREAM_JOBS,
                 "items": JOB_REF},
        "mode": {"enum": [*TRIGGER_MODES, None], "default": DEFAULT_TRIGGER_MODE.value,
                 "description": "all: one run each time every job named succeeded since "
                                "the last; any: one run per success of any of them"},
    }, ("kind", "jobs"), description=(
        "Fired by the success of other jobs (a DAG edge); no fire times of its own. The "
        "run made records the upstream runs it consumed (gate.upstream)."))


def definition_props() -> dict[str, Any]:
    """The workflow keys of a job definition."""
    return {
        "depends_on": {
            "type": ["array", "null"], "maxItems": wv.DEPENDS_MAX, "items": obj({
                "job": JOB_REF,
                "within": {"type": "number", "minimum": wv.WITHIN_MIN,
                           "maximum": wv.WITHIN_MAX,
                           "description": "seconds: the upstream's success must be "
                                          "scheduled at most this long before the fire"},
                "wait": {"type": ["number", "null"], "minimum": 0, "maximum": wv.WAIT_MAX,
                         "default": DEFAULT_DEPENDENCY_WAIT,
                         "description": "seconds past its due time a fire waits for the "
                                        "upstream's success before it is skipped"},
            }, ("job", "within")),
            "description": "upstream jobs whose fresh success each fire waits for"},
        "calendars": {
            "type": ["array", "null"], "maxItems": wv.CALENDARS_MAX,
            "items": {"type": "string", "pattern": f"^{wv.CALENDAR_REF_PATTERN}$"},
            "description": "exclusion calendars (a name in this job's namespace, or "
                           "namespace/name): a fire on one of their dates is recorded "
                           "skipped, naming the calendar"},
    }


GATE = {"type": ["object", "null"], "description": (
    "what gated the run: upstream (the upstream runs a trigger consumed), depends_on "
    "(the fresh upstream runs found), waiting_for/waiting_since (while it waits), "
    "waited_for/waited_ms, stale (upstreams whose success never came), calendar (the "
    "calendar whose date skipped it)")}

EXCLUDED = {"type": "array", "items": obj({"fire_time": TIME, "calendar": STRING},
                                           ("fire_time", "calendar")),
            "description": "the fire times above an exclusion calendar skips"}

# What JSON Schema cannot say about workflows (see schemas.SEMANTIC_RULES).
SEMANTIC_RULES: list[dict[str, str]] = [
    {"field": "", "message": "names no job",
     "rule": "a job reference (depends_on[].job, schedule.jobs[]) names a live job"},
    {"field": "", "message": "names no calendar",
     "rule": "a job's calendars name existing calendars"},
    {"field": "", "message": "cannot depend on itself",
     "rule": "a job does not depend on itself"},
    {"field": "", "message": "would make a cycle",
     "rule": "dependencies and after schedules make no cycle"},
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
    replace = {**write, "id": STRING, "version": {"type": ["integer", "null"], "minimum": 0,
                                                  "maximum": 2**62},
               "created_at": TIME, "updated_at": TIME}
    edge = obj({
        "job_id": STRING, "kind": {"enum": [k.value for k in EdgeKind]},
        "namespace": nullable(STRING), "name": nullable(STRING), "deleted": {"type": "boolean"},
    }, ("job_id", "kind", "namespace", "name", "deleted"), description=(
        "namespace and name are null for a job outside the token's namespaces"))
    return {
        "CalendarCreate": obj(write, ("name", "dates"), description=(
            "A named exclusion calendar. Unknown and read-only keys are refused.")),
        "CalendarReplace": obj(replace, ("name", "dates"), description=(
            "The whole calendar. Read-only keys may be sent back: id must match, version "
            "must be the current one (else 409). While jobs name it, it keeps its namespace "
            "and name (409).")),
        "Calendar": obj(read, ("id", "namespace", "name", "timezone", "dates", "version",
                                "created_at", "updated_at")),
        "CalendarList": obj({"items": {"type": "array", "items": ref("Calendar")},
                              "next_cursor": nullable(STRING)}, ("items", "next_cursor")),
        "JobEdge": edge,
        "JobDependencies": obj({"upstream": {"type": "array", "items": ref("JobEdge")},
                                 "downstream": {"type": "array", "items": ref("JobEdge")}},
                                ("upstream", "downstream")),
    }


FORCE = query("force", {"type": "boolean", "default": False},
               "delete even though jobs depend on it (they are left as they are)")


def paths() -> dict[str, Any]:
    calendar = [path_param("calendar_id")]
    return {
        "/v1/calendars": {
            "get": op("listCalendars", "Exclusion calendars",
                       ok("200", "CalendarList", "a page of calendars"), "400 403",
                       [NAMESPACE_QUERY, LIMIT, query("cursor", JOB_CURSOR, CURSOR_TEXT)]),
            "post": op("createCalendar", "Create an exclusion calendar",
                        ok("201", "Calendar", "the calendar"), "400 403 409 413",
                        body="CalendarCreate"),
        },
        "/v1/calendars/{calendar_id}": {
            "get": op("getCalendar", "An exclusion calendar",
                       ok("200", "Calendar", "the calendar"), "403 404", calendar),
            "put": op("replaceCalendar", "Replace an exclusion calendar",
                       ok("200", "Calendar", "the calendar"), "400 403 404 409 413",
                       calendar, body="CalendarReplace"),
            "delete": op("deleteCalendar", "Delete an exclusion calendar (409 while jobs "
                          "name it, unless forced: the error's field is force)", ok("204", None, "deleted"),
                          "400 403 404 409", [*calendar, FORCE]),
        },
        "/v1/jobs/{job_id}/dependencies": {
            "get": op("getJobDependencies", "A job's upstream jobs (it depends on them or "
                       "runs after them) and downstream jobs (the reverse)",
                       ok("200", "JobDependencies", "the job's edges"), "403 404",
                       [path_param("job_id")]),
        },
    }
