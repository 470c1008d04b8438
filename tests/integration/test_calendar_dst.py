"""Exclusion calendars around DST changes, in a real scheduler.

``cronman standalone`` runs under libfaketime (Debian's ``faketime``), its
clock started a few seconds before a local midnight at the end of a DST-change
day in Europe/Berlin: 2026-03-29 (23 hours, spring forward) ends at
22:00 UTC, 2026-10-25 (25 hours, fall back) at 23:00 UTC. A job firing every
2 seconds names a calendar excluding that day: its fires up to the instant the
day ends are recorded ``skipped`` naming the calendar; from the next local day
on they go out. An offset taken from the standard time (+01:00) would put the
boundary an hour off on the spring day and on the autumn day alike.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pytest

from cronman.timeutil import parse_rfc3339
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
LEAD = 24  # seconds of fake clock before the boundary (start-up takes some)


@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB),
                    reason="libfaketime missing (ops/setup installs Debian's faketime)")
@pytest.mark.parametrize(("day", "day_ends"), [
    ("2026-03-29", "2026-03-29T22:00:00Z"),  # CEST from 02:00: 00:00 on the 30th is 22:00 UTC
    ("2026-10-25", "2026-10-25T23:00:00Z"),  # CET from 03:00: 00:00 on the 26th is 23:00 UTC
])
def test_a_calendar_day_ends_at_local_midnight_after_a_dst_change(tmp_path, day, day_ends):
    boundary = parse_rfc3339(day_ends)
    start = boundary - timedelta(seconds=LEAD)
    env = {"LD_PRELOAD": FAKETIME_LIB, "TZ": "UTC",
           "FAKETIME": "@" + start.strftime("%Y-%m-%d %H:%M:%S"),
           "FAKETIME_DONT_RESET": "1"}
    with Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(f"sqlite:///{tmp_path / 'cronman.db'}", env=env)
        status, _, _ = http("POST", sa.url + "/v1/calendars", {
            "name": "berlin-day", "timezone": "Europe/Berlin", "dates": [day]})
        assert status == 201
        status, job, _ = http("POST", sa.url + "/v1/jobs", {
            "name": "every-2s", "calendars": ["berlin-day"],
            "schedule": {"kind": "cron", "cron": "*/2 * * * * *", "timezone": "UTC"},
            "target": {"kind": "http", "url": rx.url("/fire")}})
        assert status == 201, job

        def past_boundary() -> list[dict] | None:
            _, page, _ = http("GET", f"{sa.url}/v1/jobs/{job['id']}/runs?limit=100")
            runs = page["items"]
            late = [r for r in runs if parse_rfc3339(r["scheduled_for"]) >= boundary
                    and r["status"] == "succeeded"]
            return runs if len(late) >= 3 else None

        runs = wait_for(past_boundary, LEAD + 40, "fires past the local midnight")
        before = [r for r in runs if parse_rfc3339(r["scheduled_for"]) < boundary]
        after = [r for r in runs if parse_rfc3339(r["scheduled_for"]) >= boundary]
        assert len(before) >= 3, runs
        for r in before:
            assert r["status"] == "skipped", r
            assert r["error"].startswith("excluded by calendar 'berlin-day'")
            assert r["gate"] == {"calendar": "berlin-day"}
        assert all(r["status"] in ("succeeded", "claimed", "running") for r in after), after
        sent = [parse_rfc3339(r.header("Cronman-Scheduled-For")) for r in rx.requests_for("/fire")]
        assert sent and min(sent) == boundary  # the first fire of the next local day
        assert all(isinstance(t, datetime) and t >= boundary for t in sent)
        assert "Traceback" not in sa.log_text()
