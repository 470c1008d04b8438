"""Dead letters: a run that ends ``failed`` or ``lost`` sends its record to the
job's ``dead_letter`` target, in the background (it never delays the run)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cronman.callbacks import TargetRegistry
from cronman.callbacks.base import Outcome
from cronman.callbacks.dead_letter import dead_letter_delivery, run_record
from cronman.models import Job, Run
from cronman.scheduler.dispatch.deadlines import timeout_of
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog

log = logging.getLogger(__name__)

# Added to a dead-letter target's own timeout before it is given up.
TIMEOUT_MARGIN = 5.0


class DeadLetters:
    """Sends run records to dead-letter targets; each send is a side task."""

    def __init__(self, targets: TargetRegistry, metrics: NodeMetrics,
                 side_tasks: set[asyncio.Task[Any]]) -> None:
        self._targets = targets
        self._metrics = metrics
        self._side_tasks = side_tasks
        self._ratelog = RateLimitedLog(log)

    def send(self, job: Job, run: Run) -> None:
        """Send ``run``'s record to ``job``'s dead-letter target (in the background)."""
        task = asyncio.get_running_loop().create_task(self._send(job, run))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _send(self, job: Job, run: Run) -> None:
        spec = job.dead_letter or {}
        try:
            delivery = dead_letter_delivery(spec, run_record(run, job=job),
                                            namespace=job.namespace, job_name=job.name)
            outcome = await asyncio.wait_for(self._targets.deliver(delivery),
                                             timeout_of(spec) + TIMEOUT_MARGIN)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = Outcome(ok=False, error=repr(exc))
        self._metrics.dead_letters.labels("ok" if outcome.ok else "failed").inc()
        if not outcome.ok:
            self._ratelog.error(f"dlq:{job.id}", "dead-letter delivery for run %s of job %s "
                                "failed: %s", run.id, job.id, outcome.error)
