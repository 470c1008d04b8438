"""Carrying out a plan through the API client.

Creates go in bulk requests (≤ 1,000 jobs each, all or nothing per request),
each with an ``Idempotency-Key`` of its own (the client's): one whose answer
was lost is sent again and creates its jobs once. An apply run again needs
no key of the first's: it creates only what it finds missing. When a
request is refused (a name taken meanwhile: 409), its jobs are created one
by one so only the job at fault fails. Updates are ``PUT`` with the version
the plan compared, so a job changed by someone else since it was read is
refused (409) and reported, never overwritten. Updates and deletes run on
``parallel`` threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cronman.apply.labels import is_managed
from cronman.apply.plan import Change, Plan
from cronman.client import (
    BULK_MAX,
    ApiError,
    BulkCreateError,
    ConflictError,
    CronmanClient,
    NotFoundError,
    Unavailable,
)

DEFAULT_PARALLEL = 8


@dataclass(frozen=True)
class Outcome:
    """What became of one change: ``status`` is created, updated, deleted,
    conflict (changed meanwhile) or failed."""

    change: Change
    status: str
    error: ApiError | None = None
    job_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("created", "updated", "deleted")


@dataclass
class Result:
    outcomes: list[Outcome] = field(default_factory=list)
    unchanged: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> str:
        parts = [f"{self.count('created')} created", f"{self.count('updated')} updated",
                 f"{self.count('deleted')} deleted", f"{self.unchanged} unchanged"]
        if self.count("conflict"):
            parts.append(f"{self.count('conflict')} conflicts")
        if self.count("failed"):
            parts.append(f"{self.count('failed')} failed")
        return ", ".join(parts)


def execute(client: CronmanClient, plan: Plan, *, parallel: int = DEFAULT_PARALLEL,
            chunk_size: int = BULK_MAX,
            progress: Callable[[int], None] | None = None) -> Result:
    """Apply ``plan``; every change ends as one ``Outcome`` (none raises for an API error)."""
    tick = progress or (lambda n: None)
    result = Result(unchanged=len(plan.unchanged))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        creates = [plan.creates[i:i + chunk_size]
                   for i in range(0, len(plan.creates), chunk_size)]
        for outcomes in pool.map(lambda chunk: _create(client, chunk), creates):
            result.outcomes += outcomes
            tick(len(outcomes))
        for outcome in pool.map(lambda c: _update(client, c), plan.updates):
            result.outcomes.append(outcome)
            tick(1)
        for outcome in pool.map(lambda c: _delete(client, c), plan.deletes):
            result.outcomes.append(outcome)
            tick(1)
    return result


def _create(client: CronmanClient, chunk: Sequence[Change]) -> list[Outcome]:
    specs = [c.spec or {} for c in chunk]
    try:
        jobs = client.create_jobs(specs)
    except BulkCreateError as exc:
        if isinstance(exc.cause, Unavailable):
            return [Outcome(c, "failed", exc) for c in chunk]
        # One job spoiled the request (a name taken meanwhile, or refused):
        # the others are created on their own, and each failure is its job's.
        return list(_create_one_by_one(client, chunk))
    return [Outcome(c, "created", job_id=j["id"]) for c, j in zip(chunk, jobs, strict=True)]


def _create_one_by_one(client: CronmanClient, chunk: Sequence[Change]) -> Iterator[Outcome]:
    for change in chunk:
        try:
            job = client.create_job(change.spec or {})
        except ConflictError as exc:
            yield Outcome(change, "conflict", exc)
        except ApiError as exc:
            yield Outcome(change, "failed", exc)
        else:
            yield Outcome(change, "created", job_id=job["id"])


def _update(client: CronmanClient, change: Change) -> Outcome:
    assert change.live is not None and change.spec is not None
    try:
        job = client.replace_job(change.live["id"], change.spec, version=change.live["version"])
    except ConflictError as exc:
        return Outcome(change, "conflict", exc, change.live["id"])
    except ApiError as exc:
        return Outcome(change, "failed", exc, change.live["id"])
    return Outcome(change, "updated", job_id=job["id"])


def _delete(client: CronmanClient, change: Change) -> Outcome:
    """Delete a pruned job if it is still the one compared (DELETE takes no version:
    reading it again narrows the window in which a change by hand could be lost)."""
    assert change.live is not None
    try:
        current = client.get_job(change.live["id"])
        if current["version"] != change.live["version"] or not is_managed(current["labels"]):
            return Outcome(change, "conflict", ConflictError(
                409, "conflict", f"the job changed since it was read (version "
                                 f"{current['version']}); not deleted"), change.live["id"])
        client.delete_job(change.live["id"])
    except NotFoundError:  # gone already: what prune wanted
        return Outcome(change, "deleted", job_id=change.live["id"])
    except ApiError as exc:
        return Outcome(change, "failed", exc, change.live["id"])
    return Outcome(change, "deleted", job_id=change.live["id"])
