"""A proposal the herd forecast counts instead of what is live (``POST
/v1/forecast``: what ``jobs apply --dry-run`` would make of the cluster).

- ``jobs``: job definitions, validated as a create would validate them; one
  with the ``id`` of a live job replaces that job (validated as its PUT);
- ``delete_jobs``: ids of live jobs left out;
- ``limits``: the limits as they would be, in place of the live ones (the
  namespaces' quotas stay as they are); absent: the live ones.

Nothing is written. Bounded by ``MAX_PROPOSED`` jobs and limits each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronman.api import validation as v
from cronman.api.auth import Principal
from cronman.errors import ValidationError
from cronman.ids import new_job_id
from cronman.limits import Limit, parse_limit
from cronman.store.base import Store

MAX_PROPOSED = 10_000
PROPOSAL_KEYS = ("jobs", "delete_jobs", "limits")


@dataclass(frozen=True, slots=True)
class ProposedJob:
    """A job as the proposal would make it (a ``herd.HerdRow``)."""

    id: str
    namespace: str
    schedule: str
    target: str
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    created_at: datetime
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Proposal:
    jobs: list[ProposedJob]
    removed: frozenset[str]  # live jobs left out: replaced or deleted
    limits: list[Limit] | None

    def labelled(self, live: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
        """Per label a limit matches, the ids of the jobs carrying it once the
        proposal is made (``live``: the live jobs' ids per label)."""
        out = {}
        for label, ids in live.items():
            key, _, value = label.partition(":")
            kept = ids - self.removed
            out[label] = kept | {j.id for j in self.jobs if j.labels.get(key) == value}
        return out


def _list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key, [])
    if not isinstance(value, list):
        raise ValidationError("must be a list", field=key)
    if len(value) > MAX_PROPOSED:
        raise ValidationError(f"must hold at most {MAX_PROPOSED} items", field=key)
    return value


def _proposed(spec: Mapping[str, Any], job_id: str, created_at: datetime) -> ProposedJob:
    return ProposedJob(id=job_id, namespace=spec["namespace"],
                       schedule=json.dumps(spec["schedule"]), target=json.dumps(spec["target"]),
                       start_at=spec.get("start_at"), end_at=spec.get("end_at"),
                       paused=bool(spec.get("paused")), created_at=created_at,
                       labels=dict(spec.get("labels") or {}))


def _jobs(store: Store, items: Sequence[Any], who: Principal, now: datetime
          ) -> tuple[list[ProposedJob], set[str]]:
    """The jobs proposed, and the ids of the live jobs they replace."""
    ids = [item["id"] for item in items if isinstance(item, dict)
           and isinstance(item.get("id"), str)]
    live = {row.id: row for row in store.jobs.live_job_rows(ids)} if ids else {}
    out: list[ProposedJob] = []
    replaced: set[str] = set()
    for i, item in enumerate(items):
        prefix = f"jobs[{i}]"
        obj = v.require_object(item, prefix)
        job_id = obj.get("id")
        if job_id is None:
            job_id = new_job_id()
            spec, _ = v.validate_job_parsed(obj, job_id=job_id, now=now, prefix=prefix)
            created_at = now
        else:
            row = live.get(job_id) if isinstance(job_id, str) else None
            if row is None or not who.allows(row.namespace):
                raise ValidationError("is no live job", field=f"{prefix}.id")
            given = {k: val for k, val in obj.items() if k != "id"}
            spec, _ = v.validate_job_parsed(given, job_id=row.id, now=now,
                                            created_at=row.created_at,
                                            previous_schedule=json.loads(row.schedule),
                                            prefix=prefix)
            created_at = row.created_at
            replaced.add(row.id)
        who.require(spec["namespace"], field=f"{prefix}.namespace")
        out.append(_proposed(spec, job_id, created_at))
    return out, replaced


def _limits(items: Sequence[Any]) -> list[Limit]:
    out: dict[str, Limit] = {}
    for i, item in enumerate(items):
        try:
            limit = parse_limit(item)
        except ValidationError as exc:
            raise exc.prefixed(f"limits[{i}]") from None
        if limit.name in out:
            raise ValidationError(f"limit {limit.name!r} is given twice",
                                  field=f"limits[{i}].name")
        out[limit.name] = limit
    return list(out.values())


def parse_proposal(body: Mapping[str, Any], store: Store, who: Principal,
                   now: datetime) -> Proposal:
    """The proposal of a ``POST /v1/forecast`` body (400 naming the field)."""
    jobs, replaced = _jobs(store, _list(body, "jobs"), who, now)
    deleted = _list(body, "delete_jobs")
    for i, job_id in enumerate(deleted):
        if not isinstance(job_id, str):
            raise ValidationError("must be a job id", field=f"delete_jobs[{i}]")
    limits = _limits(_list(body, "limits")) if "limits" in body else None
    return Proposal(jobs, frozenset(deleted) | replaced, limits)
