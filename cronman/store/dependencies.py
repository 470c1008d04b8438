"""Reads of the job graph: a fire's fresh upstream runs, a job's upstream and
downstream jobs, jobs by name (resolving references).

``fresh_upstream_runs`` is what a fire with ``depends_on`` asks right before
its first attempt (and again when an upstream succeeds): one small query per
upstream, each on the unique (job_id, scheduled_for) index and, on
PostgreSQL, pruned to the partitions of its window.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from cronman.models import Job, Run
from cronman.store.base import Edge
from cronman.store.codec import job_from_row, run_from_row
from cronman.store.engine import Database
from cronman.store.tables import job_edges, jobs, scheduled_jobs
from cronman.vocabulary import RunStatus

sj = scheduled_jobs
_CHUNK = 200


class SqlDependencyStore:
    """The job graph's reads (its writes are in ``cronman.store.dag``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def fresh_upstream_runs(self, windows: Sequence[tuple[str, datetime, datetime]]
                            ) -> dict[str, Run]:
        found: dict[str, Run] = {}
        with self._db.read() as conn:
            for job_id, since, until in windows:
                row = conn.execute(
                    select(sj).where(sj.c.job_id == job_id,
                                     sj.c.status == RunStatus.SUCCEEDED.value,
                                     sj.c.scheduled_for >= since, sj.c.scheduled_for <= until)
                    .order_by(sj.c.scheduled_for.desc()).limit(1)).first()
                if row is not None:
                    run = run_from_row(row)
                    prev = found.get(job_id)
                    if prev is None or run.scheduled_for > prev.scheduled_for:
                        found[job_id] = run
        return found

    def edges(self, job_id: str) -> tuple[list[Edge], list[Edge]]:
        e = job_edges
        with self._db.read() as conn:
            up = conn.execute(
                select(e.c.upstream_id, e.c.kind, jobs.c.namespace, jobs.c.name,
                       jobs.c.deleted_at)
                .select_from(e.outerjoin(jobs, jobs.c.id == e.c.upstream_id))
                .where(e.c.downstream_id == job_id).order_by(e.c.kind, e.c.upstream_id)).all()
            down = conn.execute(
                select(e.c.downstream_id, e.c.kind, jobs.c.namespace, jobs.c.name,
                       jobs.c.deleted_at)
                .select_from(e.join(jobs, jobs.c.id == e.c.downstream_id))
                .where(e.c.upstream_id == job_id, jobs.c.deleted_at.is_(None))
                .order_by(jobs.c.namespace, jobs.c.name, e.c.kind)).all()
        return ([_edge(r) for r in up], [_edge(r) for r in down])

    def find_jobs(self, refs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Job]:
        wanted = sorted(set(refs))
        found: dict[tuple[str, str], Job] = {}
        with self._db.read() as conn:
            for start in range(0, len(wanted), _CHUNK):
                part = wanted[start:start + _CHUNK]
                stmt = select(jobs).where(jobs.c.deleted_at.is_(None), or_(*[
                    and_(jobs.c.namespace == ns, jobs.c.name == name) for ns, name in part]))
                for row in conn.execute(stmt):
                    job = job_from_row(row)
                    found[(job.namespace, job.name)] = job
        return found


def _edge(row: Any) -> Edge:
    job_id, kind, namespace, name, deleted_at = tuple(row)
    gone = namespace is None or deleted_at is not None
    return Edge(job_id=job_id, kind=kind, namespace=namespace, name=name, deleted=gone)
