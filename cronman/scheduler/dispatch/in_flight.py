"""The runs of a job in flight beyond the ones at hand: what its concurrency
policy and overlap buffer weigh for a fire (``claim``) or a run an upstream
made (``recovery.requested``) before its first attempt."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from cronman.errors import StoreUnavailable
from cronman.models import Run
from cronman.store.base import RunStore


def in_flight_besides(runs: RunStore, job_ids: Sequence[str],
                      mine: Collection[str]) -> dict[str, list[Run]]:
    """The jobs' runs in flight (on other nodes, or with a work queue) but
    ``mine``; none if the database is away (then only the runs held here
    count)."""
    try:
        found = runs.in_flight_runs(job_ids)
    except StoreUnavailable:
        return {}
    return {job_id: [r for r in rs if r.id not in mine] for job_id, rs in found.items()}
