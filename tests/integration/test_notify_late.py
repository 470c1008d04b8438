"""``late``: a fire not started within late_after seconds of its time is an event;
one started in time, decided (skipped) or asked for (a replay, a backfill) is
not; on SQLite and PostgreSQL.
No scheduler runs here: the test writes the runs a node would, at the times it
would."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from cronman.notify.rules import validate_rule
from cronman.schedules import job_times
from cronman.timeutil import utcnow
from tests.support.notify import (
    create_job,
    finish_run,
    notifications,
    notify_settings,
    running_notifier,
    webhook_rule,
)
from tests.support.receiver import Receiver

EVERY_1S = {"kind": "interval", "every": 1}
# Real time passes here: PostgreSQL only (the standalone test covers SQLite).
pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def _late_job(store, name, url, **extra):
    return create_job(store, name, schedule=EVERY_1S, notify=[webhook_rule(
        url, events=("late",), late_after=1, digest_interval=1)], **extra)


def _late_events(store, job):
    notes = notifications(store, job_id=job.id)
    events = store.notifications.events([n.id for n in notes], 1000)
    return [e for n in notes for e in events[n.id]]


def test_late_fires_are_found_and_fires_in_time_are_not(store, database_url):
    with Receiver() as rx:
        missed = _late_job(store, "missed", rx.url("/hook"))
        ontime = _late_job(store, "ontime", rx.url("/hook"))
        skipped = _late_job(store, "skipped", rx.url("/hook"))
        slow = _late_job(store, "slow", rx.url("/hook"))
        # Runs at the fire times that a person asked for, started as late as
        # the slow ones: a replay, a backfill.
        manual = {origin: _late_job(store, origin, rx.url("/hook"))
                  for origin in ("replay", "backfill")}
        paused = _late_job(store, "paused", rx.url("/hook"), paused=True)
        # A job with no rule of its own, in a namespace whose rule comes later.
        in_namespace = create_job(store, "ns-job", namespace="ops", schedule=EVERY_1S)
        stop = threading.Event()

        def node() -> None:  # what the cluster would write for the watched jobs
            times = job_times(ontime)
            # From before the jobs were made: a fire due while they were being
            # created (a loaded machine) is written too, not left missing.
            fire = times.next_fire_after(ontime.created_at - timedelta(seconds=1))
            while not stop.is_set():
                assert fire is not None
                time.sleep(max(0.0, (fire - utcnow()).total_seconds()) + 0.05)
                finish_run(store, ontime.id, fire, "succeeded", started_at=fire)
                finish_run(store, skipped.id, fire, "skipped", error="concurrency: forbid")
                finish_run(store, slow.id, fire, "succeeded",
                           started_at=fire + timedelta(seconds=1.6))
                for origin, job in manual.items():
                    finish_run(store, job.id, fire, "succeeded", origin=origin,
                               started_at=fire + timedelta(seconds=1.6))
                fire = times.next_fire_after(fire)

        writer = threading.Thread(target=node, daemon=True)
        writer.start()
        try:
            with running_notifier(store, notify_settings(database_url)):
                time.sleep(0.5)
                rule = webhook_rule(rx.url("/ops"), events=("late",), late_after=1,
                                    digest_interval=1)
                ns_rule = store.notification_rules.create("ops", "late-ops",
                                                          validate_rule(rule, ""))
                time.sleep(3.0)
        finally:
            stop.set()
            writer.join(5)
        late_missed = _late_events(store, missed)
        assert len(late_missed) >= 2
        for event in late_missed:
            assert event.event == "late" and event.run_id is None
            assert event.detail["status"] is None and event.detail["late_after"] == 1
            assert event.occurred_at == event.scheduled_for + timedelta(seconds=1)
            assert event.scheduled_for >= missed.created_at
        assert len({e.scheduled_for for e in late_missed}) == len(late_missed)
        assert _late_events(store, ontime) == []
        assert _late_events(store, skipped) == []
        assert _late_events(store, paused) == []
        for job in manual.values():
            assert _late_events(store, job) == [], job.name
        late_slow = _late_events(store, slow)
        assert late_slow
        for event in late_slow:  # started, but after its deadline
            assert event.run_id is not None and event.detail["status"] == "succeeded"
            assert event.detail["started_at"] is not None
        assert {r.header("Cronman-Event") for r in rx.requests} <= {"late", "digest"}
        from_namespace = _late_events(store, in_namespace)
        assert from_namespace
        assert {e.rule_key for e in from_namespace} == {f"ns:{ns_rule.id}"}
        assert rx.requests_for("/ops")


def test_a_notifier_taking_over_carries_on_from_the_stored_cursor(store, database_url):
    with Receiver() as rx:
        job = _late_job(store, "handover", rx.url("/hook"))
        settings = notify_settings(database_url)
        with running_notifier(store, settings):
            time.sleep(2.4)
        first = {e.scheduled_for for e in _late_events(store, job)}
        assert first
        time.sleep(1.2)  # no notifier: the next one must look back to its cursor
        with running_notifier(store, settings):
            time.sleep(2.2)
        times = sorted(e.scheduled_for for e in _late_events(store, job))
        assert len(times) == len(set(times))  # none twice
        steps = {b - a for a, b in zip(times, times[1:], strict=False)}
        assert steps == {timedelta(seconds=1)}, times  # none missed across the gap
