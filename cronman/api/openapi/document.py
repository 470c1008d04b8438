"""``GET /openapi.json``: the OpenAPI 3.1 description of the API, kept as data.

The core paths are here and the document is assembled here: the building
blocks are in ``parts``, the component schemas in ``schemas``
and ``targets``, each feature's paths in its own module of this package.
tests/integration/test_api_openapi.py checks that every Flask route is here
and every path here is a Flask route, and fuzzes the API against it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flask import Blueprint, Response

from cronman import __version__
from cronman.api import validation as v
from cronman.api.common import ApiView, json_response
from cronman.api.openapi import (
    audit,
    calendars,
    host_policies,
    job_policies,
    limits,
    notifications,
    signing,
    tokens,
    work,
    workflows,
)
from cronman.api.openapi.console import console_components, console_paths
from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    JOB_CURSOR,
    JSON,
    LIMIT,
    NAMESPACE_QUERY,
    RUN_CURSOR,
    STATUS_LIST_PATTERN,
    STRING,
    TIME,
    URI_TOO_LONG,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.api.openapi.schemas import SEMANTIC_RULES, components
from cronman.vocabulary import RUN_STATUSES

bp = Blueprint("openapi", __name__)



def paths() -> dict[str, Any]:
    job = [path_param("job_id")]
    run = [path_param("run_id")]
    return {
        "/v1/jobs": {
            "get": op("listJobs", "List jobs (id order, keyset pagination)",
                       ok("200", "JobList", "a page of jobs"), "400 403", [
                           NAMESPACE_QUERY,
                           query("label", {"type": "array",
                                            "items": {"type": "string",
                                                      "pattern": "^[^:\\x00]+:[^\\x00]*$"}},
                                  "key:value; repeat for more (all must match)",
                                  style="form", explode=True),
                           query("paused", {"type": "boolean"}, "only paused / active jobs"),
                           LIMIT, query("cursor", JOB_CURSOR, CURSOR_TEXT)],
                       extra={"414": URI_TOO_LONG}),
            "post": op("createJob", "Create a job",
                        ok("201", "Job", "the job created"), "400 403 409 413",
                        body="JobCreate"),
        },
        "/v1/jobs/bulk": {
            "post": op("createJobs", f"Create up to {v.BULK_MAX} jobs, all or nothing",
                        ok("201", "BulkCreated", "the jobs created, in request order"),
                        "400 403 409 413", body="BulkCreate"),
        },
        "/v1/jobs/{job_id}": {
            "get": op("getJob", "A job, with its last run",
                       ok("200", "Job", "the job"), "403 404", job),
            "put": op("replaceJob", "Replace a job's definition",
                       ok("200", "Job", "the job"), "400 403 404 409 413", job,
                       body="JobReplace"),
            "patch": op("updateJob", "Change some top-level keys of a job",
                         ok("200", "Job", "the job"), "400 403 404 409 413", job,
                         body="JobPatch"),
            "delete": op("deleteJob", "Delete a job (409 while other jobs depend on it, "
                          "unless forced: the error's field is force)",
                          ok("204", None, "deleted; no fire after the answer plus 2 s"),
                          "400 403 404 409", [*job, query(
                              "force", {"type": "boolean", "default": False},
                              "delete even though jobs depend on it")]),
        },
        "/v1/jobs/{job_id}/pause": {
            "post": op("pauseJob", "Pause a job", ok("200", "Job", "the job"),
                        "403 404", job),
        },
        "/v1/jobs/{job_id}/resume": {
            "post": op("resumeJob", "Resume a job", ok("200", "Job", "the job"),
                        "403 404", job),
        },
        "/v1/jobs/{job_id}/trigger": {
            "post": op("triggerJob", "Fire once now, outside the schedule",
                        ok("202", "Run", "the requested run"), "403 404 409", job),
        },
        "/v1/jobs/{job_id}/next": {
            "get": op("nextFireTimes", "The next fire times of the schedule",
                       ok("200", "FireTimes", "fire times, earliest first"), "400 403 404",
                       [*job, query("count", {"type": "integer", "minimum": 1,
                                               "maximum": 100, "default": 10},
                                     "how many")]),
        },
        "/v1/jobs/{job_id}/runs": {
            "get": op("listRuns", "A job's runs, newest first",
                       ok("200", "RunList", "a page of runs"), "400 403 404", [
                           *job,
                           query("since", TIME, "scheduled at or after"),
                           query("until", TIME, "scheduled before"),
                           query("status", {"type": "array", "items": {
                               "type": "string", "pattern": STATUS_LIST_PATTERN,
                               "description": "a status, or a comma-separated list: "
                                              + ", ".join(RUN_STATUSES)}},
                                  "only these statuses", style="form", explode=True),
                           LIMIT, query("cursor", RUN_CURSOR, CURSOR_TEXT)],
                       extra={"414": URI_TOO_LONG}),
        },
        "/v1/jobs/{job_id}/backfill": {
            "post": op("backfillJob",
                        f"Fire every scheduled time in [since, until) with no run yet "
                        f"(at most {BACKFILL_LIMIT_TEXT})",
                        ok("202", "BackfillAccepted", "runs requested"),
                        "400 403 404 413", job, body="Backfill"),
        },
        "/v1/runs/{run_id}": {
            "get": op("getRun", "A run", ok("200", "Run", "the run"), "403 404", run),
        },
        "/v1/runs/{run_id}/replay": {
            "post": op("replayRun", "Dispatch a finished run's target again",
                        ok("202", "Run", "the run, back in flight"), "403 404 409", run),
        },
        "/v1/cluster": {
            "get": op("getCluster", "Scheduler nodes and worker agents",
                       ok("200", "Cluster", "the membership"), ""),
        },
        "/healthz": {
            "get": op("healthz", "Liveness", ok("200", "Health", "alive"), "",
                       secured=False),
        },
        "/readyz": {
            "get": op("readyz", "Readiness (database, Redis, the process's own checks) "
                       "and the auth state", {
                "200": {"description": "ready", "content": {JSON: {"schema": ref("Ready")}}},
                "503": {"description": "not ready",
                        "content": {JSON: {"schema": ref("Ready")}}},
            }, "", secured=False),
        },
        "/metrics": {
            "get": op("metrics", "Prometheus metrics", {"200": {
                "description": "Prometheus text format",
                "content": {"text/plain": {"schema": STRING}}}}, "", secured=False),
        },
        "/openapi.json": {
            "get": op("openapi", "This document", {"200": {
                "description": "OpenAPI 3.1", "content": {JSON: {"schema": {"type": "object"}}}}},
                "", secured=False),
        },
        "/": {
            "get": op("dashboard", "The operator dashboard", {"200": {
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
                "target headers (and container env) are returned redacted. The rules "
                "JSON Schema cannot state are listed in x-semantic-rules."),
        },
        "servers": [{"url": "/"}],
        "x-semantic-rules": [*SEMANTIC_RULES, *workflows.SEMANTIC_RULES,
                             *calendars.SEMANTIC_RULES, *work.SEMANTIC_RULES,
                             *limits.SEMANTIC_RULES],
        "security": [{"bearer": []}],
        "paths": {**console_paths(job_policies.decorate(paths())), **audit.paths(),
                  **notifications.paths(), **tokens.paths(), **calendars.paths(),
                  **workflows.paths(), **signing.paths(),
                  **host_policies.paths(), **work.paths(), **limits.paths()},
        "components": _with_schemas(console_components(components()),
                                    {**audit.schemas(), **notifications.schemas(),
                                     **tokens.schemas(), **calendars.schemas(),
                                     **workflows.schemas(),
                                     **signing.schemas(),
                                     **host_policies.schemas(), **work.schemas(),
                                     **limits.schemas(), **job_policies.schemas()}),
    }


def _with_schemas(parts: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    parts["schemas"].update(more)
    schemas = parts["schemas"]
    # A worker run carries its queue's item, a container run its cancel; the
    # cluster its queues.
    schemas["Run"]["properties"]["worker"] = work.run_worker()
    schemas["Run"]["properties"]["cancel_request"] = work.run_cancel_request()
    schemas["Cluster"]["properties"]["queues"] = {
        "anyOf": [{"type": "array", "items": ref("Queue")}, {"type": "null"}],
        "description": "the work queues of the caller's namespaces (null: the database "
                       "cannot be read)"}
    return parts


class OpenApi(ApiView):
    def get(self) -> Response:
        return json_response(openapi_document())


bp.add_url_rule("/openapi.json", view_func=OpenApi.as_view("openapi"))
