"""A workload for the audit export tests whose every change can be checked.

Jobs are created and updated (each update bumps ``version``: a job's
exported versions must read 1, 2, 3, ... in log order, each once), every
update also writes a history row, and runs are claimed in several daily
partitions (and the default partition) and then moved through attempts
(each write sets ``attempt`` to the next number: a run's exported attempts
must read 0, 1, 2, ... in log order, each once).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cronman.models import RunUpdate
from cronman.store import open_store
from cronman.store.records import ChangeContext
from cronman.vocabulary import JobAction
from tests.support.store_data import base_time, job_spec, make_run


def _describe(job: Any) -> dict[str, Any]:
    return {"id": job.id, "version": job.version, "priority": job.priority}


@dataclass
class Expected:
    """What the workload wrote: final version per job, final attempt per run."""

    versions: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    history_rows: int = 0
    transactions: int = 0


def run_workload(database_url: str, stop: threading.Event, *, jobs: int = 10,
                 runs_per_round: int = 20, pause: float = 0.02, max_rounds: int = 10_000,
                 seed: int = 7, prefix: str = "audit") -> Expected:
    """Write until ``stop`` is set (or ``max_rounds``); returns what was written."""
    rnd = random.Random(seed)
    expected = Expected()
    store = open_store(database_url)
    try:
        made = store.jobs.create_jobs(
            [job_spec(f"{prefix}-{i}") for i in range(jobs)],
            ChangeContext(action=JobAction.CREATE, describe=_describe, actor_name="workload"))
        expected.transactions += 1
        expected.history_rows += len(made)
        for job in made:
            expected.versions[job.id] = 1
        job_ids = [j.id for j in made]
        in_flight: list[tuple[str, Any]] = []
        base = base_time()
        # Yesterday, today, tomorrow (daily partitions) and far ahead (default partition).
        days = [timedelta(days=-1), timedelta(0), timedelta(days=1), timedelta(days=400)]
        tick = 0
        for _ in range(max_rounds):
            if stop.is_set():
                break
            jid = rnd.choice(job_ids)
            job = store.jobs.update_job(
                jid, {"priority": rnd.randint(0, 9)},
                change=ChangeContext(action=JobAction.PATCH, describe=_describe,
                                     actor_name="workload"))
            expected.versions[jid] = job.version
            expected.history_rows += 1
            expected.transactions += 1
            runs = []
            for _ in range(runs_per_round):
                tick += 1
                t = base + rnd.choice(days) + timedelta(milliseconds=tick)
                runs.append(make_run(rnd.choice(job_ids), t))
            inserted = store.runs.claim_runs(runs)
            expected.transactions += 1
            for run in runs:
                if run.id in inserted:
                    expected.attempts[run.id] = 0
                    in_flight.append((run.id, run.scheduled_for))
            moving = rnd.sample(in_flight, min(len(in_flight), runs_per_round))
            updates = []
            for run_id, scheduled_for in moving:
                attempt = expected.attempts[run_id] + 1
                expected.attempts[run_id] = attempt
                updates.append(RunUpdate(id=run_id, scheduled_for=scheduled_for,
                                         status="retrying" if attempt < 3 else "succeeded",
                                         attempt=attempt))
                if attempt >= 3:
                    in_flight.remove((run_id, scheduled_for))
            if updates:
                store.runs.write_run_updates(updates)
                expected.transactions += 1
            time.sleep(pause)
    finally:
        store.close()
    return expected
