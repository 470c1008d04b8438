"""``after`` schedules: a job fired by the success of other jobs (a DAG edge).

``{"kind": "after", "jobs": ["<ref>", ...], "mode": "all" | "any"}`` has no
fire times of its own: ``next_after`` is always None, so every place that
computes fire times (the scheduler's table, ``/next``, backfill, misfire
handling, late notifications) finds none. Its runs are made in the database,
in the transaction that records an upstream's success
(:mod:`cronman.store.triggers`): with ``any`` one run per upstream success,
with ``all`` one run each time every named upstream has succeeded since the
job's last such run.

A job reference (here and in ``depends_on``) is a job id, ``namespace/name``,
or a bare name in the referring job's own namespace (a reference shaped like
a job id is taken for one). The API resolves references to ids before it
stores a job (:mod:`cronman.api.references`); this module only checks their
shape. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from cronman.errors import ValidationError
from cronman.vocabulary import DEFAULT_TRIGGER_MODE, TRIGGER_MODES

KEYS = ("kind", "jobs", "mode")
MAX_UPSTREAM_JOBS = 50
# Longest reference: a namespace (128), "/", a name (256).
JOB_REF_MAX = 385
# A job id, a name, or namespace/name: the characters of names, led by a
# letter or digit (each part is checked when the reference is resolved).
JOB_REF_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*"
JOB_ID_PATTERN = (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
                  r"-[0-9a-fA-F]{12}")
JOB_REF_RE = re.compile(f"^{JOB_REF_PATTERN}$")
JOB_ID_RE = re.compile(f"^{JOB_ID_PATTERN}$")


def check_job_ref(value: Any, field: str) -> str:
    """A job reference's shape (not whether it names a job)."""
    if not isinstance(value, str):
        raise ValidationError("must be a string: a job id or namespace/name", field=field)
    if not value or len(value) > JOB_REF_MAX or JOB_REF_RE.match(value) is None:
        raise ValidationError(f"{value[:80]!r} names no job: give a job id, namespace/name, "
                              "or a name in this job's namespace", field=field)
    return value


class AfterSchedule:
    """The upstream jobs whose success fires a job, and how (``all``/``any``)."""

    kind = "after"
    __slots__ = ("jobs", "mode")

    def __init__(self, jobs: tuple[str, ...], mode: str) -> None:
        self.jobs = jobs
        self.mode = mode

    def next_after(self, t: object) -> None:
        """Never: an ``after`` job has no fire times of its own."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "after", "jobs": list(self.jobs), "mode": self.mode}


def parse_after(spec: dict[str, Any]) -> AfterSchedule:
    """Validate an ``after`` schedule object (keys already checked); error
    fields are relative to it (``jobs[2]``, ``mode``). Duplicate references
    are kept once, in their first place."""
    raw = spec.get("jobs")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("is required: a list of the upstream jobs (ids or "
                              "namespace/name) whose success fires this job", field="jobs")
    if len(raw) > MAX_UPSTREAM_JOBS:
        raise ValidationError(f"names {len(raw)} jobs; at most {MAX_UPSTREAM_JOBS}",
                              field="jobs")
    refs = [check_job_ref(value, f"jobs[{i}]") for i, value in enumerate(raw)]
    mode = spec.get("mode")
    if mode is None:
        mode = DEFAULT_TRIGGER_MODE.value
    if not isinstance(mode, str) or mode not in TRIGGER_MODES:
        raise ValidationError(f"must be one of {', '.join(TRIGGER_MODES)}", field="mode")
    return AfterSchedule(tuple(dict.fromkeys(refs)), str.__str__(mode))
