"""The OpenAPI description of ``/v1/limits``, ``/v1/namespaces/{namespace}/quotas``
and ``/v1/forecast`` (merged by ``openapi``): limits per destination, the
namespaces' quotas and the herd forecast (``cronman.api.limits``,
``cronman.api.quotas``, ``cronman.api.forecast``)."""

from __future__ import annotations

from typing import Any

from cronman.api.forecast_proposal import MAX_PROPOSED
from cronman.api.openapi.parts import (
    JSON,
    NAMESPACE,
    TIME,
    nullable,
    obj,
    ok,
    op,
    query,
    ref,
)
from cronman.api.timeparams import RELATIVE_PATTERN
from cronman.limits import (
    LIMIT_NAME_PATTERN,
    MANAGED_BY_PATTERN,
    MATCH_PATTERNS,
    MAX_CONCURRENCY,
    MAX_JOBS_QUOTA,
    MAX_MATCH_VALUE,
    MAX_RATE,
)

NOT_ADMIN = {"description": "not an admin token (or a read-only one)",
             "content": {JSON: {"schema": ref("Error")}}}
NO_ADMIN_TOKEN = {"description": "no token: limits and quotas are set with an admin token, "
                                 "whatever the auth state",
                  "content": {JSON: {"schema": ref("Error")}}}
DENIED = {"401": NO_ADMIN_TOKEN, "403": NOT_ADMIN}
NAME = {"type": "string", "pattern": LIMIT_NAME_PATTERN}
NAME_PARAM = {"name": "name", "in": "path", "required": True, "schema": NAME}
NAMESPACE_PARAM = {"name": "namespace", "in": "path", "required": True, "schema": NAMESPACE}
RATE = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RATE}
COUNT = {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY}
AHEAD = {"anyOf": [TIME, {"type": "string",
                          "pattern": f"^(?:now|{RELATIVE_PATTERN}|\\+{RELATIVE_PATTERN[1:]})$",
                          "description": "relative to now: +1h (ahead), -10m, now"}]}

SEMANTIC_RULES: list[dict[str, str]] = [
    {"field": "name", "message": "does not match the limit name of the URL",
     "rule": "a PUT's name, when given, is the URL's"},
    {"field": "namespace", "message": "does not match the namespace of the URL",
     "rule": "a quota's namespace, when given, is the URL's"},
    {"field": "to", "message": "must be after 'from'", "rule": "a forecast's to is after from"},
    {"field": "to", "message": "the range must be at most",
     "rule": "a forecast covers at most 24 h"},
    {"field": "to", "message": "the range holds more than",
     "rule": "a forecast counts at most 1,000,000 fire times"},
]


def _limit_fields() -> dict[str, Any]:
    match = obj({kind: {"type": "string", "minLength": 1, "maxLength": MAX_MATCH_VALUE,
                        "pattern": pattern} for kind, pattern in MATCH_PATTERNS.items()},
                description="what the limit holds: the host of an http target, the queue "
                            "of an sqs target, a job label (key:value) or a namespace; "
                            "exactly one key")
    match["minProperties"] = 1
    match["maxProperties"] = 1
    return {
        "name": NAME,
        "match": match,
        "rate": {**RATE, "description": "starts a second, cluster-wide: never more than this "
                                        "in any second (below 1: one start every 1/rate s)"},
        "burst": {**COUNT, "description": "a token bucket of this size, refilled at the rate: "
                                          "spreads the starts within the second"},
        "concurrency": {**COUNT, "description": "attempts in flight at once, cluster-wide"},
        "managed_by": {"type": "string", "pattern": MANAGED_BY_PATTERN,
                       "description": "the tool that manages the limit: jobs apply writes "
                                      "'apply' and prunes only those; absent: made by hand"},
    }


def _limit_body(*, update: bool) -> dict[str, Any]:
    fields = _limit_fields()
    required: tuple[str, ...] = ("match",) if update else ("name", "match")
    if update:
        fields["version"] = {"type": "integer", "minimum": 1,
                             "description": "the version read: a stale one is a 409"}
    body = obj(fields, required)
    body["anyOf"] = [{"required": ["rate"]}, {"required": ["concurrency"]}]
    body["dependentRequired"] = {"burst": ["rate"]}
    return body


def schemas() -> dict[str, Any]:
    limit = _limit_fields()
    quota_fields = {
        "max_jobs": {"type": "integer", "minimum": 0, "maximum": MAX_JOBS_QUOTA,
                     "description": "live jobs the namespace may hold: a create past it is "
                                    "refused (403 quota_exceeded)"},
        "fires_per_second": {**RATE, "description": "the namespace's starts a second, "
                                                    "cluster-wide"},
        "burst": {**COUNT, "description": "the token bucket of fires_per_second"},
        "concurrent_runs": {**COUNT, "description": "the namespace's attempts in flight"},
    }
    quota_put = obj({"namespace": NAMESPACE, **quota_fields},
                    description="the bounds given (the others unbounded)")
    quota_put["dependentRequired"] = {"burst": ["fires_per_second"]}
    per = {"type": "object", "additionalProperties": {"type": "integer"}}
    return {
        "LimitCreate": _limit_body(update=False),
        "LimitReplace": _limit_body(update=True),
        "Limit": obj({**limit, "version": {"type": "integer"},
                      "usage": nullable(obj({
                          "in_flight": {"type": "integer"},
                          "starts_in_window": {"type": "integer"}},
                          ("in_flight", "starts_in_window"),
                          description="now, cluster-wide (null without Redis or while it "
                                      "does not answer)")),
                      "waiting": {"type": "integer",
                                  "description": "attempts waiting on the limit now"}},
                     ("name", "match", "version")),
        "LimitList": obj({"items": {"type": "array", "items": ref("Limit")}}, ("items",)),
        "QuotaPut": quota_put,
        "Quota": obj({"namespace": NAMESPACE,
                      **{k: nullable(v) for k, v in quota_fields.items()},
                      "default": {"type": "boolean",
                                  "description": "true: the namespace has no quota"}},
                     ("namespace", "max_jobs", "fires_per_second", "burst", "concurrent_runs",
                      "default")),
        "Forecast": obj({
            "from": TIME, "to": TIME, "namespace": NAMESPACE,
            "jobs": {"type": "integer", "description": "live, unpaused jobs counted"},
            "jobs_truncated": {"type": "boolean",
                               "description": "more jobs than a forecast scans (100,000)"},
            "fires": {"type": "integer"},
            "peak": nullable(obj({"at": TIME, "fires": {"type": "integer"}})),
            "seconds": {"type": "array", "description": "the busiest seconds",
                        "items": obj({"at": TIME, "fires": {"type": "integer"},
                                      "namespaces": per, "hosts": per})},
            "namespaces": per, "hosts": per,
            "limits": {"type": "array", "items": obj({
                "name": {"type": "string"}, "fires": {"type": "integer"},
                "peak_per_second": {"type": "integer"}, "rate": nullable({"type": "number"}),
                "seconds_held": {"type": "integer"}, "max_waiting": {"type": "integer"}})},
            "held": {"type": "array", "description": "the seconds a limit's rate holds fires "
                                                     "back, most waiting first",
                     "items": obj({"at": TIME, "limit": {"type": "string"},
                                   "arriving": {"type": "integer"},
                                   "allowed": {"type": "number"},
                                   "waiting": {"type": "integer"}})},
                "held_truncated": {"type": "boolean"},
            "proposal": obj({"jobs": {"type": "integer"}, "removed": {"type": "integer"},
                             "limits": nullable({"type": "integer"})},
                            description="a POST's: jobs proposed, live jobs left out "
                                        "(replaced or deleted), limits proposed"),
        }, ("from", "to", "jobs", "jobs_truncated", "fires", "peak", "seconds", "namespaces",
            "hosts", "limits", "held", "held_truncated")),
        "ForecastProposal": obj({
            "from": AHEAD, "to": AHEAD, "namespace": NAMESPACE,
            "top": {"type": "integer", "minimum": 1, "maximum": 1000},
            "jobs": {"type": "array", "maxItems": MAX_PROPOSED,
                     "description": "job definitions (as JobCreate) counted as if made; one "
                                    "with the id of a live job replaces it (as JobReplace)",
                     "items": {"anyOf": [ref("JobCreate"), ref("JobReplace")]}},
            "delete_jobs": {"type": "array", "maxItems": MAX_PROPOSED,
                            "items": {"type": "string"},
                            "description": "live jobs left out"},
            "limits": {"type": "array", "maxItems": MAX_PROPOSED, "items": ref("LimitCreate"),
                       "description": "the limits as they would be, in place of the live "
                                      "ones (quotas stay); absent: the live ones"},
        }, description="a proposal the forecast counts in place of what is live; nothing "
                       "is written"),
    }


def paths() -> dict[str, Any]:
    return {
        "/v1/limits": {
            "get": op("listLimits", "Every limit (admin tokens only)",
                      ok("200", "LimitList", "the limits, by name"), "", extra=DENIED),
            "post": op("createLimit", "Make a limit (admin tokens only)",
                       ok("201", "Limit", "made"), "400 409 413", body="LimitCreate",
                       extra=DENIED),
        },
        "/v1/limits/{name}": {
            "get": op("getLimit", "One limit (admin tokens only)", ok("200", "Limit", "the limit"),
                      "404", [NAME_PARAM], extra=DENIED),
            "put": op("replaceLimit", "Replace a limit (admin tokens only)",
                      ok("200", "Limit", "replaced"), "400 404 409 413", [NAME_PARAM],
                      body="LimitReplace", extra=DENIED),
            "delete": op("deleteLimit", "Delete a limit (admin tokens only)",
                         ok("204", None, "deleted"), "404", [NAME_PARAM], extra=DENIED),
        },
        "/v1/namespaces/{namespace}/quotas": {
            "get": op("getQuota", "The namespace's quota",
                      ok("200", "Quota", "the quota (all null: none)"), "400 403",
                      [NAMESPACE_PARAM]),
            "put": op("putQuota", "Set the namespace's quota (admin tokens only)",
                      ok("200", "Quota", "set"), "400 413", [NAMESPACE_PARAM], body="QuotaPut",
                      extra=DENIED),
            "delete": op("deleteQuota", "Drop the namespace's quota (admin tokens only)",
                         ok("204", None, "dropped (or there was none)"), "400",
                         [NAMESPACE_PARAM], extra=DENIED),
        },
        "/v1/forecast": {
            "get": op("getForecast", "Fires per second ahead, per namespace and destination, "
                      "and where a limit would hold them back",
                      ok("200", "Forecast", "the forecast"), "400 403", [
                          query("from", AHEAD, "default: now"),
                          query("to", AHEAD, "default: an hour after from; at most 24 h "
                                             "after it"),
                          query("namespace", NAMESPACE, "only this namespace"),
                          query("top", {"type": "integer", "minimum": 1, "maximum": 1000},
                                "busiest seconds listed (default 20)")]),
            "post": op("forecastProposal", "The forecast of a proposal: jobs made, replaced "
                       "or left out and limits changed (what jobs apply --dry-run shows); "
                       "changes nothing, read-only tokens may ask",
                       ok("200", "Forecast", "the forecast"), "400 403 413",
                       body="ForecastProposal"),
        },
    }
