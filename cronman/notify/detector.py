"""One detection pass: from the database's run history to events in the outbox.

A pass (``step``, blocking: run it off the event loop) reads

1. failed and lost runs not read yet (``Outbox.unnotified_runs``),
2. the first success of each failing job watched for recovery,
3. the fire times whose ``late`` deadline passed (``late.LateWatch``, kept in
   step with job changes through the jobs' ``change_seq`` and with the
   namespace rules, re-read at every pass),
4. among those job changes, the jobs that paused themselves after failed
   runs (``paused`` events),

turns them into events (``detect``) and stores everything in one
transaction (``Outbox.write_pass``). Nothing is taken from memory that the
database does not also hold: a notifier that takes over re-reads the same
unread runs, the failing set and the ``late`` cursor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronman.ids import run_id_for
from cronman.notify import detect
from cronman.notify.late import Check, LateWatch
from cronman.notify.metrics import NotifierMetrics
from cronman.notify.model import JobSource, Outbox, RuleSource
from cronman.outbox.records import Event, FailingJob, PassResult, Rule
from cronman.timeutil import format_rfc3339, to_ms
from cronman.vocabulary import MANUAL_ORIGINS, NotifyEvent, RunStatus

log = logging.getLogger(__name__)

RUN_BATCH = 1000
# A fire's start is written by its node in a batch, shortly after it starts:
# deadlines are judged this long after they pass.
LATE_SETTLE = timedelta(seconds=5)
# How far back a notifier that was away looks for late fires.
LATE_CATCHUP = timedelta(hours=1)
# Failures found longer than this after they happened are not sent.
MAX_EVENT_AGE = timedelta(hours=24)
LATE_CURSOR = "late"


@dataclass(frozen=True)
class StepStats:
    runs_read: int
    events: int
    messages: int
    more: bool  # a full batch was read: run the next pass at once


def _late_fingerprint(rules: Mapping[str, Sequence[Rule]]) -> dict[str, str]:
    out = {}
    for namespace, items in rules.items():
        late = sorted((r.key, r.late_after, r.digest_interval, json.dumps(dict(r.channel),
                                                                          sort_keys=True))
                      for r in items if r.wants(NotifyEvent.LATE))
        if late:
            out[namespace] = repr(late)
    return out


class Detector:
    """The notifier's reading side (see the module doc)."""

    def __init__(self, outbox: Outbox, jobs: JobSource, rules: RuleSource, *, node_id: str,
                 metrics: NotifierMetrics, late_settle: timedelta = LATE_SETTLE,
                 max_event_age: timedelta = MAX_EVENT_AGE) -> None:
        self.outbox = outbox
        self.jobs = jobs
        self.rules = rules
        self.node_id = node_id
        self.metrics = metrics
        self.late_settle = late_settle
        self.max_event_age = max_event_age
        self.watch = LateWatch()
        self._change_seq = 0
        self._late_through: datetime | None = None
        self._late_rules: dict[str, str] = {}
        self._skipped_seen = 0

    # -- activation -------------------------------------------------------------

    def activate(self, now: datetime) -> None:
        """Become the active detector: load the ``late`` watch from the database."""
        self.watch.clear()
        self._skipped_seen = self.watch.skipped
        stored = self.outbox.cursor(LATE_CURSOR)
        start = now - self.late_settle
        self._late_through = max(stored or start, now - LATE_CATCHUP)
        self._change_seq = self.jobs.current_change_seq()
        rules = self.rules.all_rules()
        self._late_rules = _late_fingerprint(rules)
        for job in self.outbox.jobs_to_watch(sorted(self._late_rules), with_rules=True):
            self.watch.set_job(job, detect.rules_of(job, rules), self._late_through)
        self.metrics.watched.set(len(self.watch))
        log.info("notifier: watching %d (job, rule) pairs for late fires, checked through %s",
                 len(self.watch), format_rfc3339(self._late_through))

    def _follow_changes(self, rules: Mapping[str, Sequence[Rule]], now: datetime
                        ) -> list[Event]:
        """Follow the jobs' changes (the ``late`` watch); the ``paused`` events they hold."""
        assert self._late_through is not None
        paused: list[Event] = []
        while True:
            changed = self.jobs.jobs_changed_since(self._change_seq)
            for job in changed:
                self.watch.set_job(job, detect.rules_of(job, rules), self._late_through)
                self._change_seq = max(self._change_seq, job.change_seq)
            paused += detect.self_paused(changed, rules, now=now, max_age=self.max_event_age)
            if len(changed) < 10_000:
                break
        fingerprint = _late_fingerprint(rules)
        moved = {ns for ns in set(fingerprint) | set(self._late_rules)
                 if fingerprint.get(ns) != self._late_rules.get(ns)}
        if moved:
            self._late_rules = fingerprint
            watched = {job.id: job for job in self.watch.watched_jobs()
                       if job.namespace in moved}
            for job in self.outbox.jobs_to_watch(sorted(moved), with_rules=False):
                watched[job.id] = job
            for job in watched.values():
                self.watch.set_job(job, detect.rules_of(job, rules), self._late_through)
        self.metrics.watched.set(len(self.watch))
        return paused

    # -- one pass ---------------------------------------------------------------

    def step(self, now: datetime) -> StepStats:
        if self._late_through is None:
            self.activate(now)
        rules = self.rules.all_rules()
        paused_events = self._follow_changes(rules, now)
        failing = {f.job_id: f for f in self.outbox.failing_jobs()}
        runs = self.outbox.unnotified_runs(RUN_BATCH)
        jobs = {j.id: j for j in self.jobs.get_jobs(sorted({r.job_id for r in runs}))}
        found = detect.failures(runs, jobs, rules, failing, now=now,
                                max_age=self.max_event_age)
        if found.too_old:
            self.metrics.dropped.labels("too_old").inc(found.too_old)
            log.warning("notifier: %d failures found more than %s after they happened were "
                        "not notified", found.too_old, self.max_event_age)
        merged: dict[str, FailingJob] = {**failing, **found.failing}
        successes = self.outbox.first_successes({j: f.last_failure_at
                                                 for j, f in merged.items()})
        missing = sorted(set(successes) - set(jobs))
        jobs.update((j.id, j) for j in self.jobs.get_jobs(missing))
        recovered_events, recovered = detect.recoveries(
            {j: merged[j] for j in successes}, successes, jobs, rules, now=now)
        late_events, late_through = self._late(now)
        events = [*found.events, *recovered_events, *late_events, *paused_events]
        still = [f for j, f in found.failing.items() if j not in set(recovered)]
        result = PassResult(seen_runs=found.seen, events=events, failing=still,
                            recovered=recovered, late_through=late_through)
        messages = 0
        if found.seen or events or still or recovered or late_through is not None:
            messages = self.outbox.write_pass(result, now=now, node_id=self.node_id)
        if late_through is not None:
            self._late_through = late_through
        for event in events:
            self.metrics.events.labels(event.kind).inc()
        skipped = self.watch.skipped - self._skipped_seen
        if skipped:
            self._skipped_seen = self.watch.skipped
            self.metrics.dropped.labels("late_catch_up").inc(skipped)
        return StepStats(len(runs), len(events), messages, len(runs) >= RUN_BATCH)

    def _late(self, now: datetime) -> tuple[list[Event], datetime | None]:
        if not len(self.watch):
            return [], None
        until = now - self.late_settle
        checks = self.watch.due(until)
        if not checks:
            return [], until
        starts = self.outbox.run_starts([(c.job.id, c.fire_time) for c in checks])
        events = []
        for check in checks:
            run = starts.get((check.job.id, check.fire_time))
            if run is not None:
                status, started, origin = run
                # Decided (skipped), started in time, or taken over by a
                # person's request (its start is when it was asked for).
                if (status == RunStatus.SKIPPED or origin in MANUAL_ORIGINS
                        or (started is not None and started <= check.deadline)):
                    continue
            events.append(self._late_event(check, None if run is None else run[:2]))
        return events, until

    @staticmethod
    def _late_event(check: Check, run: tuple[str, datetime | None] | None) -> Event:
        job = check.job
        status, started = run if run is not None else (None, None)
        detail = {"late_after": check.rule.late_after, "deadline": format_rfc3339(check.deadline),
                  "status": status, "started_at": format_rfc3339(started)}
        return Event(rule=check.rule, kind=NotifyEvent.LATE.value,
                     event_key=f"late:{job.id}:{to_ms(check.fire_time)}", job_id=job.id,
                     namespace=job.namespace, job_name=job.name, occurred_at=check.deadline,
                     run_id=None if run is None else run_id_for(job.id, check.fire_time),
                     scheduled_for=check.fire_time, detail=detail)
