"""``GET /openapi.json``: the OpenAPI 3.1 description of the API, kept as data.

tests/integration/test_api_openapi.py checks that every Flask route is here
and every path here is a Flask route, and fuzzes the API against it.
"""

from __future__ import annotations

from copy import deepcopy
from functools import cache
from typing import Any

from flask import Blueprint, Response

from cronman import __version__
from cronman.api import validation as v
from cronman.api.common import ApiView, json_response
from cronman.api.jobs import ID_PATTERN
from cronman.store.tables import RUN_STATUSES

bp = Blueprint("openapi", __name__)

REF = "#/components/schemas/"
JSON = "application/json"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    out["type"] = [schema["type"], "null"]
    return out


STRING = {"type": "string"}
TIME = {"type": "string", "format": "date-time"}
STRING_MAP = {"type": "object", "additionalProperties": STRING}
SECONDS = {"type": "number", "minimum": 0}


def _obj(props: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = True,
         description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


SCHEDULES = {
    "OnceSchedule": _obj({
        "kind": {"const": "once"},
        "at": {**TIME, "description": "RFC 3339 with offset; must not be in the past"},
    }, ("kind", "at")),
    "IntervalSchedule": _obj({
        "kind": {"const": "interval"},
        "every": {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
        "anchor": {**TIME, "description": "default: the creation time, to the second"},
    }, ("kind", "every")),
    "CronSchedule": _obj({
        "kind": {"const": "cron"},
        "cron": {"type": "string", "minLength": 1,
                 "description": "5 fields, 6 with leading seconds, or @hourly/@daily/..."},
        "timezone": {"type": "string", "default": "UTC", "description": "an IANA zone"},
        "dst": _obj({
            "gap": {"enum": ["shift", "skip"]},
            "repeat": {"enum": ["first", "both"]},
        }),
    }, ("kind", "cron")),
}

TARGETS = {
    "HttpTarget": _obj({
        "kind": {"const": "http"},
        "url": {"type": "string", "description": "http or https URL"},
        "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"], "default": "POST"},
        "headers": {**STRING_MAP, "description": "values are redacted in answers"},
        "body": {"type": "string", "description": "at most 64 KiB"},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "default": 10},
    }, ("kind", "url")),
    "SqsTarget": _obj({
        "kind": {"const": "sqs"},
        "queue_url": STRING,
        "region": STRING,
        "body": {"type": "string", "description": "at most 64 KiB"},
        "attributes": STRING_MAP,
        "endpoint_url": nullable(STRING),
        "message_group_id": nullable(STRING),
    }, ("kind", "queue_url")),
    "ContainerTarget": _obj({
        "kind": {"const": "container"},
        "image": STRING,
        "command": {"type": "array", "items": STRING},
        "env": {**STRING_MAP, "description": "values are redacted in answers"},
        "cpu": {"type": "number", "exclusiveMinimum": 0},
        "memory_mb": {"type": "integer", "minimum": 1},
        "timeout": {"type": "number", "exclusiveMinimum": 0},
    }, ("kind", "image")),
}

RETRY = _obj({
    "max_attempts": {"type": "integer", "minimum": 1, "maximum": v.MAX_ATTEMPTS_MAX,
                     "default": v.DEFAULT_RETRY["max_attempts"]},
    "min_backoff": {**SECONDS, "maximum": v.BACKOFF_MAX, "default": v.DEFAULT_RETRY["min_backoff"]},
    "max_backoff": {**SECONDS, "maximum": v.BACKOFF_MAX, "default": v.DEFAULT_RETRY["max_backoff"]},
})
MISFIRE = _obj({
    "policy": {"enum": list(v.MISFIRE_POLICIES), "default": v.DEFAULT_MISFIRE["policy"]},
    "grace": {**SECONDS, "maximum": v.GRACE_MAX, "default": v.DEFAULT_MISFIRE["grace"]},
})


def _definition_props() -> dict[str, Any]:
    return {
        "name": {"type": "string", "minLength": 1, "maxLength": v.NAME_MAX,
                 "pattern": v.NAME_RE.pattern},
        "namespace": {"type": "string", "minLength": 1, "maxLength": v.NAMESPACE_MAX,
                      "pattern": v.NAMESPACE_RE.pattern, "default": v.DEFAULT_NAMESPACE},
        "schedule": ref("Schedule"),
        "target": ref("Target"),
        "retry": nullable(ref("Retry")),
        "misfire": nullable(ref("Misfire")),
        "delivery": {"enum": [*v.DELIVERY_MODES, None], "default": v.DEFAULT_DELIVERY},
        "concurrency": {"enum": [*v.CONCURRENCY_POLICIES, None],
                        "default": v.DEFAULT_CONCURRENCY},
        "priority": {"type": ["integer", "null"], "minimum": v.PRIORITY_MIN,
                     "maximum": v.PRIORITY_MAX, "default": 0},
        "start_at": nullable(TIME),
        "end_at": nullable(TIME),
        "jitter": {"type": ["number", "null"], "minimum": 0, "maximum": v.JITTER_MAX},
        "paused": {"type": ["boolean", "null"], "default": False},
        "labels": {"type": ["object", "null"], "maxProperties": v.LABELS_MAX,
                   "additionalProperties": {"type": "string", "maxLength": v.LABEL_VALUE_MAX},
                   "propertyNames": {"pattern": v.LABEL_KEY_RE.pattern,
                                     "maxLength": v.LABEL_KEY_MAX}},
        "dead_letter": nullable(ref("DeadLetterTarget")),
    }


def _read_only_props() -> dict[str, Any]:
    return {
        "id": STRING,
        "version": {"type": "integer", "minimum": 1},
        "created_at": TIME,
        "updated_at": TIME,
        "next_fire_at": nullable(TIME),
        "last_run": nullable(ref("Run")),
    }


def _job_schemas() -> dict[str, Any]:
    definition = _definition_props()
    read_only = _read_only_props()
    job_props = {"id": STRING, **definition, **read_only}
    # Answers carry normalised values: no nulls where a default exists.
    job_props.update({
        "namespace": STRING, "name": STRING,
        "retry": ref("Retry"), "misfire": ref("Misfire"),
        "delivery": {"enum": list(v.DELIVERY_MODES)},
        "concurrency": {"enum": list(v.CONCURRENCY_POLICIES)},
        "priority": {"type": "integer"}, "paused": {"type": "boolean"},
        "labels": STRING_MAP,
    })
    answer_required = ("id", *v.DEFINITION_KEYS, "version", "created_at", "updated_at",
                       "next_fire_at")
    writable = {**deepcopy(definition), **deepcopy(read_only)}
    create = _obj(deepcopy(definition), v.REQUIRED_KEYS, description=(
        "A new job. Unknown and read-only keys are refused (400)."))
    create["examples"] = [JOB_EXAMPLE]
    replace = _obj(writable, v.REQUIRED_KEYS, description=(
        "The whole new definition. Read-only keys may be sent back as read: id and "
        "created_at must match, version must be the current one (else 409). A "
        "redacted header or env value equal to the redacted stored one keeps it."))
    replace["examples"] = [{**JOB_EXAMPLE, "name": "daily-digest-v2"}]
    patch = _obj(deepcopy(writable), description=(
        "Top-level keys to change; nested objects (schedule, target, retry, ...) "
        "are replaced whole. The merged definition is validated as a PUT."))
    patch["examples"] = [{"priority": 5, "labels": {"team": "billing", "tier": "1"}},
                         {"paused": True}]
    return {
        "JobCreate": create,
        "JobReplace": replace,
        "JobPatch": patch,
        "Job": _obj(job_props, answer_required, closed=True),
    }


JOB_EXAMPLE: dict[str, Any] = {
    "name": "daily-digest",
    "namespace": "billing",
    "schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin"},
    "target": {"kind": "http", "url": "https://billing.example.com/digest", "method": "POST",
               "headers": {"Content-Type": "application/json"},
               "body": "{\"kind\":\"digest\"}", "timeout": 10},
    "retry": {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
    "misfire": {"policy": "fire_once", "grace": 300},
    "delivery": "at_least_once",
    "concurrency": "allow",
    "priority": 0,
    "paused": False,
    "labels": {"team": "billing"},
}

RUN = _obj({
    "id": STRING,
    "job_id": STRING,
    "scheduled_for": TIME,
    "status": {"enum": list(RUN_STATUSES)},
    "attempt": {"type": "integer", "minimum": 0},
    "origin": STRING,
    "node_id": nullable(STRING),
    "claimed_at": nullable(TIME),
    "started_at": nullable(TIME),
    "finished_at": nullable(TIME),
    "next_attempt_at": nullable(TIME),
    "lateness_ms": {"type": ["integer", "null"]},
    "duration_ms": {"type": ["integer", "null"]},
    "skipped_before": {"type": "integer", "minimum": 0},
    "result": {"type": ["object", "null"]},
    "error": nullable(STRING),
}, ("id", "job_id", "scheduled_for", "status", "attempt", "origin", "result", "error"))

ERROR = _obj({
    "error": _obj({
        "code": STRING,
        "message": STRING,
        "field": {**nullable(STRING), "description": "dotted path of the offending value"},
    }, ("code", "message", "field")),
}, ("error",))

NODE = _obj({
    "id": STRING,
    "address": STRING,
    "started_at": nullable(TIME),
    "last_heartbeat": nullable(TIME),
    "heartbeat_age_s": {"type": ["number", "null"], "minimum": 0},
    "owned_jobs": {"type": "integer"},
    "fires_last_minute": {"type": "integer"},
    "lock_wins": {"type": "integer"},
    "lock_losses": {"type": "integer"},
}, ("id", "address", "started_at", "last_heartbeat", "heartbeat_age_s", "owned_jobs",
    "fires_last_minute", "lock_wins", "lock_losses"))


def _list_of(item: str) -> dict[str, Any]:
    return _obj({"items": {"type": "array", "items": ref(item)},
                 "next_cursor": nullable(STRING)}, ("items", "next_cursor"))


def components() -> dict[str, Any]:
    schemas: dict[str, Any] = {**deepcopy(SCHEDULES), **deepcopy(TARGETS)}
    schemas["Schedule"] = {"oneOf": [ref(k) for k in SCHEDULES]}
    schemas["Target"] = {"oneOf": [ref(k) for k in TARGETS]}
    schemas["DeadLetterTarget"] = {"oneOf": [ref("HttpTarget"), ref("SqsTarget")]}
    schemas["Retry"] = RETRY
    schemas["Misfire"] = MISFIRE
    schemas.update(_job_schemas())
    schemas["Run"] = RUN
    schemas["Error"] = ERROR
    schemas["JobList"] = _list_of("Job")
    schemas["RunList"] = _list_of("Run")
    schemas["BulkCreate"] = _obj({"jobs": {"type": "array", "items": ref("JobCreate"),
                                           "minItems": 1, "maxItems": v.BULK_MAX}}, ("jobs",))
    schemas["BulkCreated"] = _obj({"items": {"type": "array", "items": ref("Job")}},
                                  ("items",))
    schemas["FireTimes"] = _obj({"fire_times": {"type": "array", "items": TIME}},
                                ("fire_times",))
    schemas["Backfill"] = _obj({"since": TIME, "until": TIME}, ("since", "until"))
    schemas["BackfillAccepted"] = _obj({
        "requested": {"type": "integer", "minimum": 0,
                      "description": "runs stored (fire times that had none yet)"},
        "fire_times": {"type": "integer", "minimum": 0,
                       "description": "fire times in the range"},
    }, ("requested", "fire_times"))
    schemas["Node"] = NODE
    schemas["Cluster"] = _obj({
        "replicas": {"type": "integer", "minimum": 1},
        "nodes": {"type": "array", "items": ref("Node")},
        "agents": {"type": "array", "items": {"type": "object"}},
    }, ("replicas", "nodes", "agents"))
    schemas["Health"] = _obj({"status": STRING}, ("status",), closed=False)
    schemas["Ready"] = _obj({"status": STRING, "checks": STRING_MAP,
                             "error": ERROR["properties"]["error"]},
                            ("status", "checks"))
    return {
        "schemas": schemas,
        "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Needed on /v1 once any API token exists "
                           "(`cronman tokens create`).",
        }},
        "responses": {
            name: {"description": desc, "content": {JSON: {"schema": ref("Error")}}}
            for name, desc in (
                ("BadRequest", "invalid input; `field` names the offending value"),
                ("Unauthorized", "missing, unknown or revoked token"),
                ("Forbidden", "namespace outside the token's namespaces"),
                ("NotFound", "no such resource"),
                ("Conflict", "name taken in its namespace, stale version, or run in flight"),
                ("TooLarge", "request body too large"),
                ("Unavailable", "database or Redis unreachable"),
            )
        },
    }


def _resp(status: str) -> dict[str, Any]:
    name = {"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden",
            "404": "NotFound", "409": "Conflict", "413": "TooLarge",
            "503": "Unavailable"}[status]
    return {"$ref": f"#/components/responses/{name}"}


def _ok(status: str, schema: str | None, description: str) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {JSON: {"schema": ref(schema)}}
    return {status: out}


def _op(op_id: str, summary: str, ok: dict[str, Any], errors: str,
        params: list[dict[str, Any]] | None = None, body: str | None = None,
        secured: bool = True) -> dict[str, Any]:
    responses = dict(ok)
    for status in errors.split():
        responses[status] = _resp(status)
    if secured:
        responses.setdefault("401", _resp("401"))
        responses.setdefault("503", _resp("503"))
    out: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": responses}
    if params:
        out["parameters"] = params
    if body is not None:
        out["requestBody"] = {"required": True,
                              "content": {JSON: {"schema": ref(body)}}}
    if not secured:
        out["security"] = []
    return out


def _query(name: str, schema: dict[str, Any], description: str,
           **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description, **extra}


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": f"^{ID_PATTERN}$"}}


_STATUS = "(?:" + "|".join(RUN_STATUSES) + ")"
STATUS_LIST_PATTERN = f"^(?:{_STATUS}(?:,{_STATUS})*)?$"
LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
               "page size (a maximum)")
CURSOR = _query("cursor", STRING, "the next_cursor of the previous page (opaque; "
                "anything else is a 400)")


def paths() -> dict[str, Any]:
    job = [_path_param("job_id")]
    run = [_path_param("run_id")]
    return {
        "/v1/jobs": {
            "get": _op("listJobs", "List jobs (id order, keyset pagination)",
                       _ok("200", "JobList", "a page of jobs"), "400 403", [
                           _query("namespace", {"type": "string", "pattern": v.NAMESPACE_RE.pattern,
                                                "maxLength": v.NAMESPACE_MAX},
                                  "only this namespace"),
                           _query("label", {"type": "array",
                                            "items": {"type": "string",
                                                      "pattern": "^[^:\\x00]+:[^\\x00]*$"}},
                                  "key:value; repeat for more (all must match)",
                                  style="form", explode=True),
                           _query("paused", {"type": "boolean"}, "only paused / active jobs"),
                           LIMIT, CURSOR]),
            "post": _op("createJob", "Create a job",
                        _ok("201", "Job", "the job created"), "400 403 409 413",
                        body="JobCreate"),
        },
        "/v1/jobs/bulk": {
            "post": _op("createJobs", f"Create up to {v.BULK_MAX} jobs, all or nothing",
                        _ok("201", "BulkCreated", "the jobs created, in request order"),
                        "400 403 409 413", body="BulkCreate"),
        },
        "/v1/jobs/{job_id}": {
            "get": _op("getJob", "A job, with its last run",
                       _ok("200", "Job", "the job"), "403 404", job),
            "put": _op("replaceJob", "Replace a job's definition",
                       _ok("200", "Job", "the job"), "400 403 404 409 413", job,
                       body="JobReplace"),
            "patch": _op("updateJob", "Change some top-level keys of a job",
                         _ok("200", "Job", "the job"), "400 403 404 409 413", job,
                         body="JobPatch"),
            "delete": _op("deleteJob", "Delete a job",
                          _ok("204", None, "deleted; no fire after the answer plus 2 s"),
                          "403 404", job),
        },
        "/v1/jobs/{job_id}/pause": {
            "post": _op("pauseJob", "Pause a job", _ok("200", "Job", "the job"),
                        "403 404", job),
        },
        "/v1/jobs/{job_id}/resume": {
            "post": _op("resumeJob", "Resume a job", _ok("200", "Job", "the job"),
                        "403 404", job),
        },
        "/v1/jobs/{job_id}/trigger": {
            "post": _op("triggerJob", "Fire once now, outside the schedule",
                        _ok("202", "Run", "the requested run"), "403 404 409", job),
        },
        "/v1/jobs/{job_id}/next": {
            "get": _op("nextFireTimes", "The next fire times of the schedule",
                       _ok("200", "FireTimes", "fire times, earliest first"), "400 403 404",
                       [*job, _query("count", {"type": "integer", "minimum": 1,
                                               "maximum": 100, "default": 10},
                                     "how many")]),
        },
        "/v1/jobs/{job_id}/runs": {
            "get": _op("listRuns", "A job's runs, newest first",
                       _ok("200", "RunList", "a page of runs"), "400 403 404", [
                           *job,
                           _query("since", TIME, "scheduled at or after"),
                           _query("until", TIME, "scheduled before"),
                           _query("status", {"type": "array", "items": {
                               "type": "string", "pattern": STATUS_LIST_PATTERN,
                               "description": "a status, or a comma-separated list: "
                                              + ", ".join(RUN_STATUSES)}},
                                  "only these statuses", style="form", explode=True),
                           LIMIT, CURSOR]),
        },
        "/v1/jobs/{job_id}/backfill": {
            "post": _op("backfillJob",
                        f"Fire every scheduled time in [since, until) with no run yet "
                        f"(at most {BACKFILL_LIMIT_TEXT})",
                        _ok("202", "BackfillAccepted", "runs requested"),
                        "400 403 404 413", job, body="Backfill"),
        },
        "/v1/runs/{run_id}": {
            "get": _op("getRun", "A run", _ok("200", "Run", "the run"), "403 404", run),
        },
        "/v1/runs/{run_id}/replay": {
            "post": _op("replayRun", "Dispatch a finished run's target again",
                        _ok("202", "Run", "the run, back in flight"), "403 404 409", run),
        },
        "/v1/cluster": {
            "get": _op("getCluster", "Scheduler nodes and worker agents",
                       _ok("200", "Cluster", "the membership"), ""),
        },
        "/healthz": {
            "get": _op("healthz", "Liveness", _ok("200", "Health", "alive"), "",
                       secured=False),
        },
        "/readyz": {
            "get": _op("readyz", "Readiness: database and Redis reachable", {
                "200": {"description": "ready", "content": {JSON: {"schema": ref("Ready")}}},
                "503": {"description": "not ready",
                        "content": {JSON: {"schema": ref("Ready")}}},
            }, "", secured=False),
        },
        "/metrics": {
            "get": _op("metrics", "Prometheus metrics", {"200": {
                "description": "Prometheus text format",
                "content": {"text/plain": {"schema": STRING}}}}, "", secured=False),
        },
        "/openapi.json": {
            "get": _op("openapi", "This document", {"200": {
                "description": "OpenAPI 3.1", "content": {JSON: {"schema": {"type": "object"}}}}},
                "", secured=False),
        },
        "/": {
            "get": _op("dashboard", "The operator dashboard", {"200": {
                "description": "HTML", "content": {"text/html": {"schema": STRING}}}}, "",
                secured=False),
        },
    }


BACKFILL_LIMIT_TEXT = "10,000 fire times"


@cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cronman",
            "version": __version__,
            "description": (
                "Distributed cron and delayed callbacks. Errors are "
                '`{"error": {"code", "message", "field"}}` where `field` is the dotted '
                "path of the offending value. Times are RFC 3339 in UTC. Secrets in "
                "target headers (and container env) are returned redacted."),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths(),
        "components": components(),
    }


class OpenApi(ApiView):
    def get(self) -> Response:
        return json_response(openapi_document())


bp.add_url_rule("/openapi.json", view_func=OpenApi.as_view("openapi"))
