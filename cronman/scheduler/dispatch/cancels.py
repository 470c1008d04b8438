"""An operator's cancel of a run this node holds (``POST /v1/runs/{id}/cancel``
on a run of a ``NODE_CANCELLED_KINDS`` target: recorded on its row, read at
this node's lease renewal, ``recovery.leases``).

- An attempt under way on a target that can stop it and still answer
  (``callbacks.base.Stoppable``: a container on a worker agent, SIGTERM then
  SIGKILL after the agent's grace) is asked to stop. Its answer, a failure,
  ends the run ``failed`` and not retried, with the cancel's error (who
  asked, why) and the attempt's result (exit code, output) kept. An attempt
  that succeeded before the stop reached it stands.
- Otherwise -- waiting for its due time, a retry, a limit or a buffer, or
  for room on an agent -- the run ends now, ``failed`` with that error.

A run is cancelled once here: the renewals that read the request again
until the run's end change nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from cronman.callbacks import TargetRegistry
from cronman.callbacks.base import Outcome, Stoppable
from cronman.scheduler.fires import ActiveRun
from cronman.vocabulary import RunStatus

log = logging.getLogger(__name__)


class CancelHost(Protocol):
    """What a cancel needs of the dispatcher."""

    active: dict[str, ActiveRun]
    targets: TargetRegistry

    def end(self, ar: ActiveRun, status: str, error: str) -> None: ...


def cancel_error(request: Mapping[str, Any]) -> str:
    """The error a cancelled run ends with: ``cancelled by token ops-admin: <reason>``."""
    by = str(request.get("by") or "an operator")
    reason = request.get("reason")
    return f"cancelled by {by}" + (f": {reason}" if reason else "")


def cancelled(outcome: Outcome, error: str) -> Outcome:
    """The answer of an attempt stopped by a cancel: failed, not retried,
    its result kept and its exit code said."""
    code = outcome.result.get("exit_code") if outcome.result else None
    return dataclasses.replace(
        outcome, ok=False, retryable=False, lost=False,
        error=error if code is None else f"{error} (exit code {code})")


class Cancels:
    """Carries out the cancels the lease renewal finds."""

    def __init__(self, host: CancelHost, side_tasks: set[asyncio.Task[Any]]) -> None:
        self._host = host
        self._side_tasks = side_tasks

    def cancel(self, run_id: str, error: str) -> None:
        """Cancel the held run ``run_id`` with ``error`` (see the module docstring)."""
        ar = self._host.active.get(run_id)
        if ar is None or ar.done or ar.cancel_error is not None:
            return
        ar.cancel_error = error
        log.info("run %s of job %s: %s", run_id, ar.job.id, error)
        target = self._host.targets.get(str(ar.job.target.get("kind", "")))
        if ar.in_attempt and isinstance(target, Stoppable):
            task = asyncio.get_running_loop().create_task(self._stop(ar, target))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
            return
        self._host.end(ar, RunStatus.FAILED.value, error)

    async def _stop(self, ar: ActiveRun, target: Stoppable) -> None:
        try:
            asked = await target.stop_run(ar.run_id)
        except Exception as exc:  # the directory is away: the delivery's cancel asks again
            log.warning("run %s: could not ask for its attempt to stop: %s", ar.run_id, exc)
            asked = False
        if not asked and not ar.done and ar.cancel_error is not None:
            self._host.end(ar, RunStatus.FAILED.value, ar.cancel_error)
