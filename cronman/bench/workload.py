"""The benchmark's workload: J interval jobs, and the fires they owe.

Job ``i`` fires at ``anchor_i + k * every`` (``k`` any integer). Anchors are
spread evenly across one interval (steady load: J/every fires per second,
smooth) or all equal (a herd). The fires a system owes in a window are
computed from these definitions alone, never from what the system reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cronman.timeutil import format_rfc3339, from_ms

BENCH_NAMESPACE = "bench"


@dataclass(frozen=True, slots=True)
class Workload:
    """``count`` interval jobs every ``every_ms``; anchors from ``base_ms``.

    ``spread``: anchor_i = base + floor(i * every / count); otherwise every
    anchor is ``base_ms`` (all jobs due at the same instant).
    """

    count: int
    every_ms: int
    base_ms: int
    spread: bool = True
    # cronman's misfire policy for the jobs (None: the default, fire_once).
    misfire: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a workload needs at least one job")
        if self.every_ms < 1000 or self.every_ms % 1000:
            raise ValueError("every must be a whole number of seconds")

    @property
    def rate(self) -> float:
        """Fires per second the workload asks for."""
        return self.count * 1000.0 / self.every_ms

    def anchor_ms(self, i: int) -> int:
        if not self.spread:
            return self.base_ms
        return self.base_ms + (i * self.every_ms) // self.count

    def fires_of(self, i: int, start_ms: int, end_ms: int) -> Iterator[int]:
        """Fire times (ms) of job ``i`` with start_ms <= t < end_ms."""
        a, e = self.anchor_ms(i), self.every_ms
        k = -((a - start_ms) // e)  # ceil((start - a) / e)
        t = a + k * e
        while t < end_ms:
            yield t
            t += e

    def expected(self, start_ms: int, end_ms: int) -> Iterator[tuple[int, int]]:
        """Every (job index, fire time ms) owed in [start_ms, end_ms)."""
        for i in range(self.count):
            for t in self.fires_of(i, start_ms, end_ms):
                yield i, t

    def expected_count(self, start_ms: int, end_ms: int) -> int:
        return sum(1 for _ in self.expected(start_ms, end_ms))

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.count, "every_s": self.every_ms / 1000, "base_ms": self.base_ms,
                "spread": self.spread, "rate_per_s": round(self.rate, 3),
                "misfire": self.misfire}


def cronman_definition(w: Workload, i: int, url: str, run_label: str) -> dict[str, Any]:
    """The job definition (API JSON) of job ``i`` of the workload."""
    return {
        "name": f"bench-{i:07d}",
        "namespace": BENCH_NAMESPACE,
        "schedule": {"kind": "interval", "every": w.every_ms // 1000,
                     "anchor": format_rfc3339(from_ms(w.anchor_ms(i)))},
        "target": {"kind": "http", "url": url, "method": "POST", "timeout": 10},
        "labels": {"bench": run_label},
        **({"misfire": {"policy": w.misfire}} if w.misfire else {}),
    }


def create_cronman_jobs(
    database_url: str,
    w: Workload,
    url: str,
    run_label: str,
    *,
    batch: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Create the workload's jobs through cronman's own validation and store.

    The first definition goes through the API's full validation; the others
    differ from it only in name and schedule anchor, so each of them reuses
    its validated fields and has its schedule checked by cronman's schedule
    parser (a million full validations would dominate the run's set-up).
    Returns the job ids, index ``i`` at position ``i``.
    """
    from cronman.api.validation import validate_job
    from cronman.ids import new_job_id
    from cronman.schedules import parse_schedule
    from cronman.store import open_store
    from cronman.timeutil import utcnow

    store = open_store(database_url)
    ids: list[str] = []
    template: dict[str, Any] | None = None
    try:
        for lo in range(0, w.count, batch):
            specs: list[dict[str, Any]] = []
            now = utcnow()
            for i in range(lo, min(lo + batch, w.count)):
                job_id = new_job_id()
                definition = cronman_definition(w, i, url, run_label)
                if template is None:
                    template = validate_job(definition, job_id=job_id, now=now)
                    spec = dict(template)
                else:
                    spec = dict(template)
                    spec["name"] = definition["name"]
                    spec["schedule"] = parse_schedule(definition["schedule"], job_id=job_id,
                                                      created_at=now).to_dict()
                spec["id"] = job_id
                specs.append(spec)
            jobs = store.jobs.create_jobs(specs)
            ids.extend(j.id for j in jobs)
            if progress is not None:
                progress(len(ids))
    finally:
        store.close()
    return ids


def index_of(keys: Sequence[str]) -> dict[str, int]:
    return {k: i for i, k in enumerate(keys)}
