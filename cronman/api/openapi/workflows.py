"""The OpenAPI description of workflows (merged by ``document``): ``after``
schedules, a job's ``depends_on`` and ``calendars``, a run's ``gate``, and a
job's upstream and downstream jobs (the calendars themselves are in
``calendars``). Patterns and bounds come from the validation modules."""

from __future__ import annotations

from typing import Any

from cronman.api import workflow_validation as wv
from cronman.api.openapi.parts import (
    STRING,
    TIME,
    nullable,
    obj,
    ok,
    op,
    path_param,
    ref,
)
from cronman.schedules.after import JOB_REF_MAX, JOB_REF_PATTERN, MAX_UPSTREAM_JOBS
from cronman.vocabulary import (
    DEFAULT_DEPENDENCY_WAIT,
    DEFAULT_TRIGGER_MODE,
    TRIGGER_MODES,
    EdgeKind,
)

JOB_REF = {"type": "string", "minLength": 1, "maxLength": JOB_REF_MAX,
           "pattern": f"^{JOB_REF_PATTERN}$",
           "description": "a job id, namespace/name, or a name in this job's namespace "
                          "(stored as the job's id)"}


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
    "calendar whose date skipped it), limit (the limit that held it: name and reason, "
    "with since while it waits, waited_ms once it started), buffered (while its job's "
    "overlap buffer holds it: policy, behind: the run ids in flight, since), "
    "buffered_behind/buffered_since (once the buffer let it go)")}

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
]


def schemas() -> dict[str, Any]:
    edge = obj({
        "job_id": STRING, "kind": {"enum": [k.value for k in EdgeKind]},
        "namespace": nullable(STRING), "name": nullable(STRING), "deleted": {"type": "boolean"},
    }, ("job_id", "kind", "namespace", "name", "deleted"), description=(
        "namespace and name are null for a job outside the token's namespaces"))
    return {
        "JobEdge": edge,
        "JobDependencies": obj({"upstream": {"type": "array", "items": ref("JobEdge")},
                                 "downstream": {"type": "array", "items": ref("JobEdge")}},
                                ("upstream", "downstream")),
    }


def paths() -> dict[str, Any]:
    return {
        "/v1/jobs/{job_id}/dependencies": {
            "get": op("getJobDependencies", "A job's upstream jobs (it depends on them or "
                       "runs after them) and downstream jobs (the reverse)",
                       ok("200", "JobDependencies", "the job's edges"), "403 404",
                       [path_param("job_id")]),
        },
    }
