"""Where the stages read jobs by id: the ``JobSource`` contract and the node's
``JobReader`` (held jobs from the table, the rest from the database)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cronman.models import Job
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.runtime.lifecycle import Pool
from cronman.store.base import JobStore


class JobSource(Protocol):
    async def jobs_of(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The listed jobs by id (tombstones included; unknown ids left out)."""


class JobReader:
    """Jobs by id (a ``JobSource``): held ones from the table, read on the
    loop that owns it; the others from the database."""

    def __init__(self, table: JobTable, jobs: JobStore, pool: Pool) -> None:
        self._table = table
        self._jobs = jobs
        self._pool = pool

    async def jobs_of(self, job_ids: Sequence[str]) -> dict[str, Job]:
        wanted = sorted(set(job_ids))
        jobs = self._table.held_jobs(wanted)
        missing = [job_id for job_id in wanted if job_id not in jobs]
        if missing:
            for job in await self._pool(self._jobs.get_jobs, missing):
                jobs[job.id] = job
        return jobs
