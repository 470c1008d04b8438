"""What a pause, a resume or a new definition does to the state the service
keeps for a job's policies (``cronman.store.run_policies``).

- ``pause`` and ``resume`` take an optional ``{"note": "..."}`` (at most
  ``NOTE_MAX`` characters), shown with the job as ``pause_note``.
- ``resume`` clears ``pause_reason`` and the failure count; a job that is
  ``done`` (its ``max_runs`` reached) is not resumed (409) until its
  ``max_runs`` is raised or removed.
- A PUT or PATCH that unpauses the job is a resume; one that raises or
  removes the ``max_runs`` of a done job ends its being done (it stays
  paused until resumed, unless the definition unpauses it); a done job that
  stays done stays paused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronman.callbacks.target_fields import NO_NUL
from cronman.errors import Conflict
from cronman.fieldspec import Obj, Str
from cronman.models import Job

NOTE_MAX = 1024
NOTE_BODY = Obj({"note": Str(max_len=NOTE_MAX, nullable=True, extra=NO_NUL)}, name="PauseNote")


def read_note(body: Any) -> str | None:
    """The note of a pause or resume body (None: no body, or no note); 400 naming ``note``."""
    if body is None:
        return None
    checked: dict[str, Any] = NOTE_BODY.check(body)
    note: str | None = checked.get("note")
    return note or None


def is_done(job: Job) -> bool:
    """Whether the job reached its ``max_runs`` and stays done under it."""
    return (job.done_at is not None and job.max_runs is not None
            and job.runs_done >= job.max_runs)


def pause_changes(job: Job, note: str | None, now: datetime) -> dict[str, Any]:
    """The changes of an operator's pause."""
    changes: dict[str, Any] = {"paused": True, "pause_note": note}
    if not job.paused:
        changes["paused_at"] = now
    return changes


def resume_changes(job: Job, note: str | None) -> dict[str, Any]:
    """The changes of a resume; ``Conflict`` for a job that is done."""
    if is_done(job):
        raise Conflict(f"the job is done: it ran {job.runs_done} times, its max_runs; raise "
                       "or remove max_runs (PUT or PATCH) to fire it again", field="max_runs")
    return {"paused": False, "pause_reason": None, "failure_streak": 0, "done_at": None,
            "pause_note": note, "paused_at": None}


def replacement_changes(job: Job, spec: dict[str, Any], now: datetime) -> dict[str, Any]:
    """What a new definition (``spec``, validated) changes beyond itself."""
    extra: dict[str, Any] = {}
    if not job.paused and spec.get("paused"):
        extra["paused_at"] = now
    if job.done_at is not None:
        max_runs = spec.get("max_runs", job.max_runs)
        if max_runs is not None and job.runs_done >= max_runs:
            extra["paused"] = True  # still done: no fires
            return extra
        extra["done_at"] = None
    if job.paused and not spec.get("paused", job.paused):
        extra.update(pause_reason=None, failure_streak=0, paused_at=None)
    return extra
