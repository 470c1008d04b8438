"""The OpenAPI description of the operator console's routes: runs across
jobs, run statistics, ``whoami``, membership changes, the job list's search
parameters, the dashboard's and the docs page's files. ``openapi.py``
merges it into ``/openapi.json``."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from cronman.api.names import ID_PATTERN, NAME_MAX, NAME_RE
from cronman.api.openapi import parts as pt
from cronman.api.openapi import schemas as sc
from cronman.api.run_search import JOB_FILTER_MAX, STATS_MAX_STEP
from cronman.api.timeparams import RELATIVE_PATTERN
from cronman.store.codec import JOB_CURSOR_PATTERN, NAME_CURSOR_PATTERN, SEARCH_CURSOR_PATTERN
from cronman.vocabulary import TARGET_KINDS

HTML = {"text/html": {"schema": pt.STRING}}

WHEN = {"anyOf": [pt.TIME, {"type": "string", "pattern": f"^(?:now|{RELATIVE_PATTERN})$",
                            "description": "relative to now: -1h, -30m, -1h30m, -7d, now"}]}
_KIND = "(?:" + "|".join(k.value for k in TARGET_KINDS) + ")"
KIND_LIST_PATTERN = f"^(?:{_KIND}(?:,{_KIND})*)?$"
_LATENESS = ("nearest rank over the step's runs that started, manual ones (origin trigger, "
             "replay, backfill) left out: they are not lateness; null when none started")


def _schemas() -> dict[str, Any]:
    run_item = deepcopy(sc.RUN)
    run_item["properties"]["job_name"] = pt.nullable(pt.STRING)
    run_item["properties"]["namespace"] = pt.nullable(pt.STRING)
    run_item["required"] = [*run_item["required"], "job_name", "namespace"]
    return {
        "RunItem": run_item,
        "RunItemList": pt.list_of("RunItem"),
        "StatsBucket": pt.obj({
            "t": {**pt.TIME, "description": "start of the step"},
            "fires": {"type": "integer", "minimum": 0,
                      "description": "runs scheduled in the step, dispatched (not skipped), "
                                     "manual ones included"},
            "fires_per_s": {"type": "number", "minimum": 0},
            "failures": {"type": "integer", "minimum": 0,
                         "description": "of those, runs that ended failed or lost"},
            "lateness_p50_ms": {"type": ["integer", "null"], "description": _LATENESS},
            "lateness_p99_ms": {"type": ["integer", "null"], "description": _LATENESS},
        }, ("t", "fires", "fires_per_s", "failures", "lateness_p50_ms", "lateness_p99_ms")),
        "RunStats": pt.obj({
            "since": pt.TIME, "until": pt.TIME,
            "step_seconds": {"type": "integer", "minimum": 1},
            "namespace": pt.nullable(pt.STRING),
            "buckets": {"type": "array", "items": pt.ref("StatsBucket")},
        }, ("since", "until", "step_seconds", "namespace", "buckets")),
        "WhoAmI": pt.obj({
            "token": {"anyOf": [pt.obj({"id": pt.STRING, "name": pt.STRING}, ("id", "name")),
                                {"type": "null"}]},
            "namespaces": {"type": ["array", "null"], "items": pt.STRING},
            "admin": {"type": "boolean"},
            "read_only": {"type": "boolean"},
            "can_write": {"type": "boolean"},
        }, ("token", "namespaces", "admin", "read_only", "can_write")),
        "MembershipChange": pt.obj({
            "node_id": pt.STRING,
            "kind": {"enum": ["joined", "left", "expired"]},
            "at": pt.TIME,
            "started_at": pt.nullable(pt.TIME),
            "address": pt.STRING,
        }, ("node_id", "kind", "at", "started_at", "address")),
        "MembershipChangeList": pt.list_of("MembershipChange"),
    }


def console_components(components: dict[str, Any]) -> dict[str, Any]:
    components["schemas"].update(_schemas())
    forbidden = components["responses"]["Forbidden"]
    forbidden["description"] += ", or a change asked with a read-only token"
    return components


def _job_list_params() -> list[dict[str, Any]]:
    return [
        pt.query("name", {"type": "string", "minLength": 1, "maxLength": NAME_MAX,
                          "pattern": NAME_RE.pattern},
                  "only the jobs of exactly this name (case-sensitive); with namespace, "
                  "at most one: how a client finds the id of namespace/name"),
        pt.query("name_prefix", {"type": "string", "maxLength": NAME_MAX},
                  "only jobs whose name starts with this (case-sensitive)"),
        pt.query("sort", {"enum": ["id", "name"], "default": "id"},
                  "id: creation order; name: (namespace, name) order. A cursor belongs "
                  "to the order it came from"),
        pt.query("with_last_run", {"type": "boolean", "default": False},
                  "each job carries last_run"),
    ]


def _static(op_id: str, summary: str, media: str) -> dict[str, Any]:
    return pt.op(op_id, summary, {"200": {"description": summary,
                                           "content": {media: {"schema": pt.STRING}}}},
                  "404", [{"name": "asset", "in": "path", "required": True,
                           "schema": {"type": "string"}}], secured=False)


def console_paths(paths: dict[str, Any]) -> dict[str, Any]:
    job_list = paths["/v1/jobs"]["get"]["parameters"]
    for param in job_list:
        if param["name"] == "cursor":  # in name order, a (namespace, name) position
            param["schema"] = {"type": "string", "pattern": (
                f"^(?:{JOB_CURSOR_PATTERN})?$|^(?:{NAME_CURSOR_PATTERN})$")}
    job_list.extend(_job_list_params())
    paths["/v1/jobs"]["get"]["summary"] = (
        "List jobs (id or name order, keyset pagination), by namespace, labels, name, name prefix")
    paths["/v1/runs"] = {"get": pt.op(
        "searchRuns", "Runs across jobs, newest scheduled first",
        pt.ok("200", "RunItemList", "a page of runs, each with its job's name and namespace"),
        "400 403", [
            pt.query("status", {"type": "array", "items": {
                "type": "string", "pattern": pt.STATUS_LIST_PATTERN}},
                "only these statuses (repeat, or comma-separated)", style="form",
                explode=True),
            pt.query("since", WHEN, "scheduled at or after (default: the oldest retained "
                      "history)"),
            pt.query("until", WHEN, "scheduled before (default: a day from now)"),
            pt.query("namespace", pt.NAMESPACE, "only jobs of this namespace"),
            pt.query("job", {"type": "array", "maxItems": JOB_FILTER_MAX, "items": {
                "type": "string", "pattern": f"^{ID_PATTERN}$"}},
                f"only these jobs (at most {JOB_FILTER_MAX})", style="form", explode=True),
            pt.query("target_kind", {"type": "array", "items": {
                "type": "string", "pattern": KIND_LIST_PATTERN}},
                "only jobs with these target kinds", style="form", explode=True),
            pt.LIMIT, pt.query("cursor", {"type": "string",
                                           "pattern": f"^(?:{SEARCH_CURSOR_PATTERN})?$"},
                                pt.CURSOR_TEXT)])}
    paths["/v1/stats/runs"] = {"get": pt.op(
        "runStats", "Fires, failures and lateness p50/p99 per time step, from the run history",
        pt.ok("200", "RunStats", "every step of the window, oldest first"), "400 403", [
            pt.query("since", WHEN, "default: an hour ago"),
            pt.query("until", WHEN, "default: now"),
            pt.query("step", {"type": "integer", "minimum": 1, "maximum": STATS_MAX_STEP},
                      "seconds per step (widened when the window would hold more than "
                      "1,440 steps; default: about 120 steps)"),
            pt.query("namespace", pt.NAMESPACE, "only jobs of this namespace")])}
    paths["/v1/whoami"] = {"get": pt.op(
        "whoami", "What the caller's token allows", pt.ok("200", "WhoAmI", "the caller"), "")}
    paths["/v1/cluster/events"] = {"get": pt.op(
        "clusterEvents", "Membership changes (nodes joining, leaving, expiring), newest first",
        pt.ok("200", "MembershipChangeList", "the changes kept (the last 1,000)"), "400",
        [pt.query("since", WHEN, "default: an hour ago")])}
    paths["/docs"] = {"get": pt.op("docs", "This document, browsable (Swagger UI)",
                                    {"200": {"description": "HTML", "content": HTML}}, "",
                                    secured=False)}
    paths["/docs/{asset}"] = {"get": _static("docsAsset", "Swagger UI's files",
                                             "text/javascript")}
    paths["/ui/{asset}"] = {"get": _static("dashboardAsset", "The dashboard's files",
                                           "text/javascript")}
    return paths
