"""Notifier failover between two real scheduler nodes (PostgreSQL, Redis): the
active notifier's node is SIGKILLed while failures keep coming; the standby
takes the lock over and every failure is notified -- in exactly one message,
none lost, none counted twice."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import timedelta

import pytest

from tests.support.notify import create_job, finish_run, notifications, webhook_rule
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.signing import notification_verifies
from tests.support.store_data import base_time
from tests.support.waiting import wait_for

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
ENV = {"CRONMAN_NOTIFY_POLL_INTERVAL": "0.3", "CRONMAN_SIGNING_SECRET": "failover-secret"}
ACTIVE = "is the active notifier"


def test_killing_the_active_notifier_loses_and_doubles_no_event(store, database_url,
                                                                  redis_url, tmp_path):
    with Receiver() as rx, Processes(tmp_path) as procs:
        jobs = [create_job(store, f"job-{i}", paused=True, notify=[webhook_rule(
            rx.url("/hook"), events=("failed", "lost"), digest_interval=1)]) for i in range(4)]
        a = procs.scheduler(database_url, "node-a", redis_url=redis_url, env=ENV)
        a.wait_for_log(ACTIVE)
        b = procs.scheduler(database_url, "node-b", redis_url=redis_url, env=ENV)
        b.wait_for_log("standing by")
        t0 = base_time()
        written: list[str] = []
        killed_at = None
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 3.5:
            job = jobs[i % len(jobs)]
            status = "lost" if i % 7 == 0 else "failed"
            written.append(finish_run(store, job.id, t0 + timedelta(seconds=i), status).id)
            i += 1
            if killed_at is None and time.monotonic() - started > 1.2:
                a.kill()  # SIGKILL: its lock goes with its database session
                killed_at = time.monotonic()
            time.sleep(0.05)
        b.wait_for_log(ACTIVE, timeout=15)

        def all_sent():
            notes = notifications(store)
            total = sum(n.event_count for n in notes)
            return notes if total >= len(written) and all(
                n.status == "sent" for n in notes) else None

        notes = wait_for(all_sent, 20, "every failure notified and sent")
        events = store.notifications.events([n.id for n in notes], 10_000)
        stored = [e for n in notes for e in events[n.id]]
        # Every failure once: one event per run, each in one message.
        assert Counter(e.run_id for e in stored) == Counter(written)
        assert sum(n.event_count for n in notes) == len(written)
        # Every message reached the receiver, signed; what it lists adds up.
        got = rx.requests_for("/hook")
        for req in got:
            assert notification_verifies("failover-secret", "default", req, rx.url("/hook"))
        assert any(req.arrived_monotonic < killed_at for req in got)  # a was active
        delivered = {req.header("Cronman-Notification-Id"): req for req in got}
        assert set(delivered) == {n.id for n in notes}
        listed = Counter(e["run_id"] for req in delivered.values()
                         for e in json.loads(req.body)["events"])
        assert listed == Counter(written)
        # A message is sent again only if its sender died in the middle of it:
        # every repeat's first copy arrived before the kill, and no more messages
        # can be in the middle of sending than one digest per job (the sender
        # runs up to SEND_CONCURRENCY at once; the receiver dedupes on the id).
        copies = Counter(req.header("Cronman-Notification-Id") for req in got)
        repeated = [nid for nid, n in copies.items() if n > 1]
        for nid in repeated:
            first = min(r.arrived_monotonic for r in got
                        if r.header("Cronman-Notification-Id") == nid)
            assert first < killed_at, nid
        assert all(copies[nid] == 2 for nid in repeated), copies
        assert len(repeated) <= len(jobs), repeated
        b.stop()
