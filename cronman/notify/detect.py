"""From run history to events: failures, losses and recoveries. Pure.

- A run read with status ``failed`` or ``lost`` is an event of that kind for
  every rule of its job (its own ``notify`` rules and its namespace's) that
  listens to it. Each run is read once per attempt (a replayed run that fails
  again is a new event). A deleted job's runs, and failures older than
  ``max_age`` (a notifier back after a long absence), are read and dropped.
- A job with a rule listening to ``recovered`` enters the failing set with
  its failure; its first ``succeeded`` run scheduled at or after its latest
  failure is the recovery event, and takes it out of the set.
- A job that paused itself after failed runs (``pause_after_failures``: its
  change shows ``paused`` with a ``pause_reason``) is a ``paused`` event for
  every rule of its job that listens to it, once per pause (its ``paused_at``:
  later changes of the paused job are no new event).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronman.models import Job
from cronman.outbox.records import Event, FailingJob, FinishedRun, Rule, job_rules
from cronman.timeutil import format_rfc3339, to_ms
from cronman.vocabulary import NotifyEvent

ERROR_CHARS = 2000


def rules_of(job: Job, namespace_rules: Mapping[str, Sequence[Rule]]) -> list[Rule]:
    """Every rule that applies to ``job``: its own, then its namespace's."""
    return [*job_rules(job.id, job.notify), *namespace_rules.get(job.namespace, ())]


def _event(rule: Rule, kind: str, key: str, job: Job, occurred_at: datetime,
           run: FinishedRun | None, detail: dict[str, object]) -> Event:
    return Event(rule=rule, kind=kind, event_key=key, job_id=job.id, namespace=job.namespace,
                 job_name=job.name, occurred_at=occurred_at,
                 run_id=None if run is None else run.id,
                 scheduled_for=None if run is None else run.scheduled_for, detail=detail)


@dataclass
class Failures:
    """What a batch of failed/lost runs gives."""

    events: list[Event] = field(default_factory=list)
    seen: list[tuple[str, datetime, int]] = field(default_factory=list)
    failing: dict[str, FailingJob] = field(default_factory=dict)
    too_old: int = 0


def failures(runs: Sequence[FinishedRun], jobs: Mapping[str, Job],
             namespace_rules: Mapping[str, Sequence[Rule]],
             failing: Mapping[str, FailingJob], *, now: datetime,
             max_age: timedelta) -> Failures:
    """Events of failed and lost runs; ``failing`` is the failing set so far."""
    out = Failures()
    for run in runs:
        out.seen.append((run.id, run.scheduled_for, run.attempt))
        job = jobs.get(run.job_id)
        if job is None or job.deleted_at is not None:
            continue
        occurred = run.finished_at or now
        if now - occurred > max_age:
            out.too_old += 1
            continue
        rules = rules_of(job, namespace_rules)
        kind = NotifyEvent.LOST if run.status == NotifyEvent.LOST else NotifyEvent.FAILED
        detail: dict[str, object] = {
            "status": run.status, "attempt": run.attempt, "node_id": run.node_id,
            "finished_at": format_rfc3339(run.finished_at),
            "error": None if run.error is None else run.error[:ERROR_CHARS]}
        key = f"{kind.value}:{run.id}:{run.attempt}"
        out.events.extend(_event(rule, kind.value, key, job, occurred, run, detail)
                          for rule in rules if rule.wants(kind))
        if any(rule.wants(NotifyEvent.RECOVERED) for rule in rules):
            before = out.failing.get(job.id) or failing.get(job.id)
            if before is None:
                out.failing[job.id] = FailingJob(job.id, run.scheduled_for, run.id, 1, now)
            elif run.scheduled_for >= before.last_failure_at:
                out.failing[job.id] = FailingJob(job.id, run.scheduled_for, run.id,
                                                 before.failures + 1, before.since)
            else:  # an older run failing late: counted, the latest failure stays
                out.failing[job.id] = FailingJob(job.id, before.last_failure_at,
                                                 before.last_failure_run_id,
                                                 before.failures + 1, before.since)
    return out


def recoveries(failing: Mapping[str, FailingJob], successes: Mapping[str, FinishedRun],
               jobs: Mapping[str, Job], namespace_rules: Mapping[str, Sequence[Rule]], *,
               now: datetime) -> tuple[list[Event], list[str]]:
    """Recovery events of failing jobs that succeeded since their latest
    failure, and the jobs that leave the failing set (recovered, or gone)."""
    events: list[Event] = []
    done: list[str] = []
    for job_id, state in failing.items():
        job = jobs.get(job_id)
        if job is None or job.deleted_at is not None:
            done.append(job_id)
            continue
        run = successes.get(job_id)
        if run is None:
            continue
        done.append(job_id)
        detail: dict[str, object] = {
            "attempt": run.attempt, "finished_at": format_rfc3339(run.finished_at),
            "failures": state.failures, "failing_since": format_rfc3339(state.since),
            "last_failed_run_id": state.last_failure_run_id}
        key = f"recovered:{run.id}:{run.attempt}"
        events.extend(_event(rule, NotifyEvent.RECOVERED.value, key, job,
                             run.finished_at or now, run, detail)
                      for rule in rules_of(job, namespace_rules)
                      if rule.wants(NotifyEvent.RECOVERED))
    return events, done


def self_paused(changed: Sequence[Job], namespace_rules: Mapping[str, Sequence[Rule]], *,
                now: datetime, max_age: timedelta) -> list[Event]:
    """``paused`` events of the jobs among ``changed`` that paused themselves."""
    events: list[Event] = []
    for job in changed:
        paused_at = job.paused_at
        if (job.deleted_at is not None or not job.paused or job.pause_reason is None
                or paused_at is None or now - paused_at > max_age):
            continue
        detail: dict[str, object] = {"reason": job.pause_reason,
                                     "failure_streak": job.failure_streak,
                                     "pause_after_failures": job.pause_after_failures}
        key = f"{NotifyEvent.PAUSED.value}:{job.id}:{to_ms(paused_at)}"
        events.extend(_event(rule, NotifyEvent.PAUSED.value, key, job, paused_at, None,
                             detail)
                      for rule in rules_of(job, namespace_rules)
                      if rule.wants(NotifyEvent.PAUSED))
    return events
