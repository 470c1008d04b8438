"""Interval jobs written straight into a store, for cluster tests.

The tests time their fires from the moment the jobs are written (the first
ones fall due a second or two later), so the jobs go through the API's
validation in-process and into the store in batches, with no API server to
start. The benchmark creates its jobs through a real API instead
(``cronman_bench.jobs``).
"""

from __future__ import annotations

from typing import Any

from cronman.api.validation import validate_job
from cronman.ids import new_job_id
from cronman.schedules import parse_schedule
from cronman.store import open_store
from cronman.timeutil import utcnow
from cronman_bench.workload import Jobs, cronman_definition


def create_jobs_in_store(database_url: str, w: Jobs, url: str, run_label: str, *,
                         batch: int = 5000) -> list[str]:
    """Create the workload's jobs; their ids, index ``i`` at position ``i``.

    The first definition of each group goes through the API's full validation;
    the others differ from it only in name and schedule anchor, so each reuses
    its validated fields and has its schedule checked by the schedule parser.
    """
    store = open_store(database_url)
    ids: list[str] = []
    templates: dict[int, dict[str, Any]] = {}
    try:
        for lo in range(0, w.count, batch):
            specs: list[dict[str, Any]] = []
            now = utcnow()
            for i in range(lo, min(lo + batch, w.count)):
                job_id = new_job_id()
                definition = cronman_definition(w, i, url, run_label)
                part = w.part_of(i)
                if part not in templates:
                    templates[part] = validate_job(definition, job_id=job_id, now=now)
                    spec = dict(templates[part])
                else:
                    spec = dict(templates[part])
                    spec["name"] = definition["name"]
                    spec["schedule"] = parse_schedule(definition["schedule"], job_id=job_id,
                                                      created_at=now).to_dict()
                spec["id"] = job_id
                specs.append(spec)
            ids.extend(j.id for j in store.jobs.create_jobs(specs))
    finally:
        store.close()
    return ids
