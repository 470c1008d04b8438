"""The component schemas of ``/openapi.json``: what the API accepts and answers.

Request schemas say what the server accepts, as far as JSON Schema can say
it: the job definition's are derived from its declaration
(``cronman.api.job_fields``, ``cronman.callbacks.target_fields``), which the
validator runs too.
The rules JSON Schema cannot express -- one field compared with another or
with the clock, the cron grammar, a URL's host, byte (not character)
lengths -- are listed in ``SEMANTIC_RULES`` (the document carries them as
``x-semantic-rules``), each with the error field and message the API
answers when it is broken.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from cronman.api import validation as v
from cronman.api.job_fields import JOB, MISFIRE, POLICY_STATE_KEYS, RETRY
from cronman.api.openapi.parts import (
    JOB_TIME,
    STRING,
    STRING_MAP,
    TEXT,
    TIME,
    list_of,
    nullable,
    obj,
    ref,
)
from cronman.api.openapi.targets import DEAD_LETTER_TARGETS, TARGETS
from cronman.api.openapi.workflows import EXCLUDED, GATE, after_schedule
from cronman.callbacks.target_fields import DEAD_LETTER, TARGET, WHITESPACE
from cronman.schedules.cron import zone_names
from cronman.schedules.cronexpr import MAX_CRON_LENGTH
from cronman.schedules.simple import MAX_EVERY_SECONDS
from cronman.vocabulary import (
    CONCURRENCY_POLICIES,
    DELIVERY_MODES,
    RUN_ORIGINS,
    RUN_STATUSES,
)

_SPACE = f"[{WHITESPACE}]"  # the cron parser splits on Python's whitespace
_FIELD = f"[^{WHITESPACE}\\u0000]+"
CRON_PATTERN = f"^{_SPACE}*(?:@{_FIELD}|{_FIELD}(?:{_SPACE}+{_FIELD}){{4,5}}){_SPACE}*$"

SCHEDULES = {
    "OnceSchedule": obj({
        "kind": {"const": "once"},
        "at": {**JOB_TIME, "description": "RFC 3339 with offset; not in the past when the "
                                          "schedule is new or changed"},
    }, ("kind", "at")),
    "IntervalSchedule": obj({
        "kind": {"const": "interval"},
        "every": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_EVERY_SECONDS,
                  "multipleOf": 0.001, "description": "seconds, a whole number of ms; at "
                  "least CRONMAN_MIN_INTERVAL (default 1) from a namespace token"},
        "anchor": {**nullable(JOB_TIME), "description": "default: the creation time, to the "
                                                        "second"},
    }, ("kind", "every")),
    "CronSchedule": obj({
        "kind": {"const": "cron"},
        "cron": {"type": "string", "maxLength": MAX_CRON_LENGTH, "pattern": CRON_PATTERN,
                 "description": "5 fields, 6 with leading seconds, or @hourly/@daily/...; "
                                "Vixie cron syntax plus Quartz's day forms: L, L-n, LW, "
                                "L-nW, nW (day-of-month), D#k, DL (day-of-week; Sunday "
                                "is 0 or 7, so 5#3 is the third Friday)"},
        "timezone": {"enum": [*sorted(zone_names()), None], "default": "UTC",
                     "description": "an IANA zone"},
        "dst": nullable(obj({
            "gap": {"enum": ["shift", "skip"]},
            "repeat": {"enum": ["first", "both"]},
        })),
    }, ("kind", "cron")),
}


# JSON whose strings hold no NUL (what any request body may carry).
PLAIN_JSON = {"anyOf": [
    {"type": ["number", "boolean", "null"]},
    TEXT,
    {"type": "array", "items": ref("PlainJson")},
    {"type": "object", "propertyNames": TEXT, "additionalProperties": ref("PlainJson")},
]}


def _definition_props() -> dict[str, Any]:
    return JOB.properties()


def _sent_back_props() -> dict[str, Any]:
    """Read-only keys a PUT/PATCH may send back as it read them."""
    return {
        "id": {**STRING, "readOnly": True, "description": "the job id of the URL"},
        "version": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**62,
                    "description": "the version read: the write is made only if the job "
                                   "is still at it (else 409)"},
        "created_at": {**TIME, "readOnly": True, "description": "as stored"},
        "updated_at": {**nullable(TIME), "description": "ignored"},
        "next_fire_at": {**nullable(TIME), "description": "ignored"},
        "last_run": {"type": ["object", "null"], "propertyNames": TEXT,
                     "additionalProperties": ref("PlainJson"), "description": "ignored"},
        **{key: {**ref("PlainJson"), "description": "ignored"} for key in POLICY_STATE_KEYS},
    }


def _policy_state_props() -> dict[str, Any]:
    """What the service keeps for a job's policies, as answers show it."""
    count = {"type": "integer", "minimum": 0}
    return {
        "state": {"enum": ["active", "paused", "done"], "description": (
            "done: max_runs reached (kept, no more fires)")},
        "pause_reason": {**nullable(STRING), "description": (
            "why the job paused itself (pause_after_failures); cleared by resume")},
        "pause_note": {**nullable(STRING), "description": "the note of the last pause or resume"},
        "failure_streak": {**count, "description": "failed or lost runs in a row"},
        "runs_done": {**count, "description": "runs ended (skipped fires not counted)"},
        "runs_left": {"type": ["integer", "null"], "minimum": 0,
                      "description": "max_runs less runs_done; null without max_runs"},
        "done_at": nullable(TIME),
        "paused_at": {**nullable(TIME), "description": "when the job was paused; null while "
                                                       "it is not"},
        "buffered": {**count, "description": (
            "fires the buffer holds (buffer_one, buffer_all); GET /v1/jobs/{id} only")},
    }


def _job_schemas() -> dict[str, Any]:
    definition = _definition_props()
    job_props: dict[str, Any] = {"id": STRING, **deepcopy(definition), **_sent_back_props()}
    # Answers carry normalised values: no nulls where a default exists.
    job_props.update({
        "namespace": STRING, "name": STRING, "version": {"type": "integer", "minimum": 1},
        "created_at": TIME, "updated_at": TIME, "next_fire_at": nullable(TIME),
        "last_run": nullable(ref("Run")), "start_at": nullable(TIME), "end_at": nullable(TIME),
        "schedule": {"type": "object"}, "target": {"type": "object"},
        "dead_letter": {"type": ["object", "null"]},
        "retry": ref("Retry"), "misfire": ref("Misfire"),
        "delivery": {"enum": list(DELIVERY_MODES)},
        "concurrency": {"enum": list(CONCURRENCY_POLICIES)},
        "priority": {"type": "integer"}, "paused": {"type": "boolean"},
        "labels": STRING_MAP,
        **_policy_state_props(),
    })
    answer_required = ("id", *v.DEFINITION_KEYS, "version", "created_at", "updated_at",
                       "next_fire_at", *(k for k in POLICY_STATE_KEYS if k != "buffered"))
    writable = {**deepcopy(definition), **_sent_back_props()}
    create = obj(deepcopy(definition), v.REQUIRED_KEYS, description=(
        "A new job. Unknown and read-only keys are refused (400)."))
    create["examples"] = [JOB_EXAMPLE]
    replace = obj(writable, v.REQUIRED_KEYS, description=(
        "The whole new definition. Read-only keys may be sent back as read: id and "
        "created_at must match; with version, the write is made only if the job is still "
        "at that version (else 409). A redacted header or env value equal to the redacted "
        "stored one keeps it, unless the destination changed (scheme, host or port; image "
        "or command): then it must be given again (400 naming it)."))
    replace["examples"] = [{**JOB_EXAMPLE, "name": "daily-digest-v2"}]
    patch = obj(deepcopy(writable), description=(
        "Top-level keys to change, and only those: nested objects (schedule, target, "
        "retry, ...) are replaced whole, null resets a key to its default. The merged "
        "definition is validated as a PUT. Without version, a write that lost to a "
        "concurrent one is applied again to the job as it then is (a concurrent pause "
        "stays); with version, it is a 409."))
    patch["examples"] = [{"priority": 5, "labels": {"team": "billing", "tier": "1"}},
                         {"paused": True}]
    return {"JobCreate": create, "JobReplace": replace, "JobPatch": patch,
            "Job": obj(job_props, answer_required, closed=True)}


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

RUN = obj({
    "id": STRING,
    "job_id": STRING,
    "scheduled_for": TIME,
    "status": {"enum": list(RUN_STATUSES)},
    "attempt": {"type": "integer", "minimum": 0},
    "origin": {"enum": list(RUN_ORIGINS), "description": (
        "why the run exists: schedule (a fire time of its schedule, a misfire catch-up "
        "included), upstream (the success of the jobs an after schedule names), or a "
        "request through the API: trigger, replay, backfill. Manual runs are not lateness: "
        "their lateness_ms is measured from the request, and run statistics leave them "
        "out")},
    "node_id": nullable(STRING),
    "claimed_at": nullable(TIME),
    "started_at": nullable(TIME),
    "finished_at": nullable(TIME),
    "next_attempt_at": nullable(TIME),
    "lateness_ms": {"type": ["integer", "null"], "description": (
        "start of the first attempt minus the due time: the scheduled time, or for a "
        "manual run the later of that and its request")},
    "duration_ms": {"type": ["integer", "null"]},
    "skipped_before": {"type": "integer", "minimum": 0},
    "result": {"type": ["object", "null"]},
    "error": nullable(STRING),
    "gate": {"type": ["object", "null"]},
    "earlier_attempts": {"type": "array", "items": obj({
        "attempt": {"type": "integer", "minimum": 1},
        "status": {**STRING, "description": (
            "the row's status when the next attempt began: retrying, or a final one a replay "
            "followed; running or claimed when the attempt's end was never written (its "
            "node died and the lease sweeper took the run)")},
        "node_id": nullable(STRING),
        "started_at": nullable(TIME),
        "finished_at": nullable(TIME),
        "duration_ms": {"type": ["integer", "null"]},
        "result": {"type": ["object", "null"]},
        "error": nullable(STRING),
    }, ("attempt", "status", "node_id", "started_at", "finished_at", "duration_ms", "result",
        "error")), "description": (
        "GET /v1/runs/{run_id} only: the run's attempts before its latest (whose outcome is "
        "the run's own fields), oldest first, the last 20 at most")},
    "live_output": {**obj({
        "agent_id": nullable(STRING), "stdout": nullable(STRING), "stderr": nullable(STRING),
        "at": nullable(TIME)}, ("agent_id", "stdout", "stderr", "at")), "description": (
        "GET /v1/runs/{run_id} only, while a container run runs: the tails of its stdout "
        "and stderr so far (4096 bytes each) as its agent published them last (every 2 s "
        "when they change; the result's logs_tail holds them once it ends)")},
    "trace_id": {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": (
        "GET /v1/runs/{run_id} only, when tracing is on: the run's trace (derived from its "
        "id)")},
}, ("id", "job_id", "scheduled_for", "status", "attempt", "origin", "result", "error"))

ERROR = obj({
    "error": obj({
        "code": STRING,
        "message": STRING,
        "field": {**nullable(STRING), "description": "dotted path of the offending value"},
    }, ("code", "message", "field")),
}, ("error",))

NODE = obj({
    "id": STRING,
    "address": STRING,
    "started_at": nullable(TIME),
    "last_heartbeat": nullable(TIME),
    "heartbeat_age_s": {"type": ["number", "null"], "minimum": 0},
    "owned_jobs": {"type": "integer"},
    "fires_last_minute": {"type": "integer"},
    "lock_wins": {"type": "integer"},
    "lock_losses": {"type": "integer"},
    "backlog": {"type": "integer", "description": "fires due, waiting for an attempt slot"},
    "held_back": {"type": "integer",
                  "description": "fires due, held back unclaimed while the node is far behind"},
    "behind_ms": {"type": "integer", "description": "how long its oldest due fire has waited"},
    "saturation_pct": {"type": "integer",
                       "description": "attempts in flight over the most it runs at once"},
    "state": {"enum": ["ok", "overloaded"],
              "description": "overloaded: alive and working, its oldest due fire waiting 1 s"},
}, ("id", "address", "started_at", "last_heartbeat", "heartbeat_age_s", "owned_jobs",
    "fires_last_minute", "lock_wins", "lock_losses", "backlog", "held_back", "behind_ms",
    "saturation_pct", "state"))

AUTH_STATE = obj({
    "mode": {"enum": ["required", "off", "open", "unknown"],
             "description": "whether /v1 calls need a token"},
    "reason": STRING,
}, ("mode", "reason"))

# Query parameters (strings in the URL).

# What JSON Schema cannot say. A (positive) request refused with a 400 whose
# ``field`` ends with one of these and whose message contains the text given
# broke that rule, not the document. "" matches any message of the field.
SEMANTIC_RULES: list[dict[str, str]] = [
    {"field": "late_after", "message": "is required when `events` holds late",
     "rule": "a notification rule with the late event says late_after"},
    {"field": "late_after", "message": "only applies when `events` holds late",
     "rule": "late_after is given only with the late event"},
    {"field": "cursor", "message": "is a position of",
     "rule": "a jobs cursor goes back with the sort order it was answered with "
             "(sort=name: namespace/name; else a job id)"},
    {"field": "end_at", "message": "must be later than start_at",
     "rule": "end_at is later than start_at"},
    {"field": "retry.max_backoff", "message": "must not be less than min_backoff",
     "rule": "max_backoff is at least min_backoff"},
    {"field": "schedule.every", "message": "for a namespace token",
     "rule": "from a namespace token, a new or changed interval is at least "
             "CRONMAN_MIN_INTERVAL seconds (default 1; admin tokens and auth off are not bound)"},
    {"field": "schedule.cron", "message": "for a namespace token",
     "rule": "from a namespace token, a new or changed cron schedule's fires are at least "
             "CRONMAN_MIN_INTERVAL seconds apart (cron cannot go under 1 s)"},
    {"field": "retry.min_backoff", "message": "for a namespace token",
     "rule": "from a namespace token, a job that retries waits at least CRONMAN_MIN_INTERVAL "
             "or 1 s, whichever is less, before a retry"},
    {"field": "schedule.at", "message": "is in the past",
     "rule": "a new or changed once schedule is not in the past"},
    {"field": "schedule.cron", "message": "",
     "rule": "the cron expression parses (fields, ranges, steps, names: Vixie cron)"},
    {"field": "since", "message": "must be earlier than until",
     "rule": "a backfill's since is earlier than its until and than now"},
    {"field": "until", "message": "fire times",
     "rule": "a backfill's range holds at most 10,000 fire times"},
    {"field": "url", "message": "", "rule": "a target URL's host is a valid host"},
    {"field": "queue_url", "message": "", "rule": "an sqs queue_url's host is a valid host"},
    {"field": "endpoint_url", "message": "", "rule": "an endpoint_url's host is a valid host"},
    {"field": "body", "message": "bytes", "rule": "a body is at most 64 KiB of UTF-8"},
    {"field": "headers", "message": "", "rule": "header names are case-insensitive: no "
                                                "duplicates; values at most 8 KiB of UTF-8"},
    {"field": "target.completion", "message": "needs CRONMAN_PUBLIC_URL",
     "rule": 'an http target with "completion": "callback" needs CRONMAN_PUBLIC_URL set '
             "on the API"},
    {"field": "heartbeat_timeout", "message": 'only applies with "completion"',
     "rule": 'an http target\'s heartbeat_timeout goes with "completion": "callback"'},
    {"field": "completion_timeout", "message": 'only applies with "completion"',
     "rule": 'an http target\'s completion_timeout goes with "completion": "callback"'},
    {"field": "attributes", "message": "",
     "rule": "sqs attributes and body together fit 256 KiB"},
    {"field": "id", "message": "does not match the job id",
     "rule": "an id sent back is the job's"},
    {"field": "created_at", "message": "does not match the stored job",
     "rule": "a created_at sent back is the job's"},
    {"field": "", "message": "must be between 1970 and",
     "rule": "a job's times lie in [1970, 9000) in UTC (an offset can carry a time across)"},
]


def components() -> dict[str, Any]:
    schemas: dict[str, Any] = {**deepcopy(SCHEDULES), **deepcopy(TARGETS),
                               **deepcopy(DEAD_LETTER_TARGETS)}
    schemas["AfterSchedule"] = after_schedule()
    schemas["Schedule"] = {"oneOf": [ref(k) for k in (*SCHEDULES, "AfterSchedule")]}
    schemas["Target"] = TARGET.definition()
    schemas["DeadLetterTarget"] = DEAD_LETTER.definition()
    schemas["Retry"] = RETRY.definition()
    schemas["Misfire"] = MISFIRE.definition()
    schemas["PlainJson"] = PLAIN_JSON
    schemas.update(_job_schemas())
    schemas["Run"] = deepcopy(RUN)
    schemas["Run"]["properties"]["gate"] = GATE
    schemas["Error"] = ERROR
    schemas["JobList"] = list_of("Job")
    schemas["RunList"] = list_of("Run")
    schemas["BulkCreate"] = obj({"jobs": {"type": "array", "items": ref("JobCreate"),
                                           "minItems": 1, "maxItems": v.BULK_MAX}}, ("jobs",))
    schemas["BulkCreated"] = obj({"items": {"type": "array", "items": ref("Job")}},
                                  ("items",))
    schemas["FireTimes"] = obj({"fire_times": {"type": "array", "items": TIME},
                                 "excluded": EXCLUDED}, ("fire_times",))
    schemas["Backfill"] = obj({"since": JOB_TIME, "until": JOB_TIME}, ("since", "until"))
    schemas["BackfillAccepted"] = obj({
        "requested": {"type": "integer", "minimum": 0,
                      "description": "runs stored (fire times that had none yet)"},
        "fire_times": {"type": "integer", "minimum": 0,
                       "description": "fire times in the range"},
    }, ("requested", "fire_times"))
    schemas["Node"] = NODE
    schemas["DatabaseMember"] = obj(
        {"member": {"type": "string", "description": "host:port written to"},
         "since": {**TIME, "description": "the first connection, "
                   "or the last move to another member"}},
        ("member", "since"))
    schemas["Cluster"] = obj({
        "replicas": {"type": "integer", "minimum": 1},
        "nodes": {"type": "array", "items": ref("Node")},
        "agents": {"type": "array", "items": {"type": "object"}},
        "database_member": nullable(ref("DatabaseMember")),
    }, ("replicas", "nodes", "agents", "database_member"))
    schemas["Health"] = obj({"status": STRING}, ("status",), closed=False)
    schemas["AuthState"] = AUTH_STATE
    schemas["Ready"] = obj({"status": STRING, "checks": STRING_MAP, "auth": ref("AuthState"),
                             "error": ERROR["properties"]["error"],
                             "database_member": nullable(ref("DatabaseMember"))},
                            ("status", "checks", "auth"))
    return {
        "schemas": schemas,
        "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Needed on /v1 when CRONMAN_AUTH=required, when the API "
                           "listens beyond loopback, and once any API token has been "
                           "created (`cronman tokens create`), revoked or not; /readyz "
                           "says which (auth).",
        }},
        "responses": {
            name: {"description": desc, "content": {"application/json": {
                "schema": ref("Error")}}}
            for name, desc in (
                ("BadRequest", "invalid input; `field` names the offending value"),
                ("Unauthorized", "missing, unknown or revoked token"),
                ("Forbidden", "namespace outside the token's namespaces, a read-only "
                              "token's write, or a cross-site request (an Origin or "
                              "Referer that is not the API's own nor in "
                              "CRONMAN_ALLOWED_ORIGINS; while the API needs no token, "
                              "a Host that is no loopback name, IP address nor one of "
                              "CRONMAN_ALLOWED_HOSTS)"),
                ("NotFound", "no such resource"),
                ("Conflict", "name taken in its namespace, stale version, or run in flight"),
                ("TooLarge", "request body too large"),
                ("UnsupportedMediaType", "a request body not sent as "
                                         "`Content-Type: application/json`"),
                ("Unavailable", "database or Redis unreachable"),
            )
        },
    }


