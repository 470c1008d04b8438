"""The rate limit: a job failing again and again sends one message, then one
digest per interval holding every event in between -- none lost, none twice --
and a recovery closes the story; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import timedelta

import pytest

from tests.support.notify import (
    create_job,
    finish_run,
    notifications,
    notify_settings,
    running_notifier,
    webhook_rule,
)
from tests.support.receiver import Receiver
from tests.support.store_data import base_time
from tests.support.waiting import wait_for

INTERVAL = 1.0
# Real time passes here: PostgreSQL only (the standalone test covers SQLite).
pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def _events(store, notes):
    by_note = store.notifications.events([n.id for n in notes], 1000)
    return [e for n in notes for e in by_note[n.id]]


def test_a_storm_becomes_one_message_then_digests(store, database_url):
    t0 = base_time()
    with Receiver() as rx:
        job = create_job(store, "storm", notify=[webhook_rule(
            rx.url("/hook"), events=("failed", "recovered"), digest_interval=INTERVAL)])
        other = create_job(store, "bystander", notify=[webhook_rule(
            rx.url("/other"), events=("failed",), digest_interval=INTERVAL)])
        with running_notifier(store, notify_settings(database_url)):
            failures = 0
            started = time.monotonic()
            while time.monotonic() - started < 2.2:  # a failure every 0.2 s
                finish_run(store, job.id, t0 + timedelta(seconds=failures), "failed")
                failures += 1
                time.sleep(0.2)
            finish_run(store, other.id, t0, "failed")
            finish_run(store, job.id, t0 + timedelta(seconds=failures), "succeeded")
            span = time.monotonic() - started  # from the first event to the last

            def settled():
                notes = notifications(store, job_id=job.id)
                done = all(n.status == "sent" for n in notes)
                return notes if done and sum(n.event_count for n in notes) == failures + 1 \
                    else None

            notes = wait_for(settled, 15, "every event sent")
            wait_for(lambda: rx.requests_for("/other"), 5, "the bystander's message")
        notes.sort(key=lambda n: n.due_at)
        kinds = [n.kind for n in notes]
        assert kinds[0] == "event" and set(kinds[1:]) == {"digest"}, kinds
        # The first event alone, then one digest per interval the events spanned.
        assert 3 <= len(notes) <= 2 + int(span // INTERVAL), (
            span, [(n.kind, n.event_count, n.due_at) for n in notes])
        for before, after in zip(notes, notes[1:], strict=False):
            assert after.due_at - before.due_at >= timedelta(seconds=INTERVAL)
        events = _events(store, notes)
        assert Counter(e.event for e in events) == {"failed": failures, "recovered": 1}
        assert len({e.event_key for e in events}) == len(events)  # none twice
        assert events[-1].event == "recovered"
        # The receiver got each message once, and the digests list their events.
        got = rx.requests_for("/hook")
        assert sorted(r.header("Cronman-Notification-Id") for r in got) == \
            sorted(n.id for n in notes)
        listed = sum(len(json.loads(r.body)["events"]) for r in got)
        assert listed == failures + 1
        # A bystander job has its own group: not held back by the storm.
        [other_note] = notifications(store, job_id=other.id)
        assert other_note.kind == "event"


def test_after_a_quiet_interval_the_next_event_goes_out_alone(store, database_url):
    t0 = base_time()
    with Receiver() as rx:
        job = create_job(store, "intermittent", notify=[webhook_rule(
            rx.url("/hook"), events=("failed",), digest_interval=1)])
        with running_notifier(store, notify_settings(database_url)):
            finish_run(store, job.id, t0, "failed")
            rx.wait_for(1, timeout=10)
            time.sleep(1.5)
            finish_run(store, job.id, t0 + timedelta(seconds=1), "failed")
            rx.wait_for(2, timeout=10)
        notes = notifications(store, job_id=job.id)
        assert [n.kind for n in notes] == ["event", "event"]
