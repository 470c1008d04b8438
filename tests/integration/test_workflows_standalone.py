"""Workflows in a real scheduler: ``cronman standalone`` (SQLite, one process)
with a local receiver. A chain fires one downstream run per upstream success;
a fire with ``depends_on`` waits, is woken by the upstream's success (its wait
is far longer than it takes: no polling), or is skipped naming the stale
upstream; an exclusion calendar skips fires as runs naming it, and a change
to the calendar reaches the scheduler at once."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]


class Api:
    def __init__(self, base: str) -> None:
        self.base = base

    def __call__(self, method: str, path: str, body=None, status: int | None = None):
        got, data, _ = http(method, self.base + path, body)
        if status is not None:
            assert got == status, data
        return data

    def create(self, spec):
        return self("POST", "/v1/jobs", spec, status=201)

    def runs(self, job_id: str, limit: int = 200) -> list[dict]:
        return self("GET", f"/v1/jobs/{job_id}/runs?limit={limit}", status=200)["items"]


@pytest.fixture
def standalone(tmp_path):
    with Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(f"sqlite:///{tmp_path / 'cronman.db'}")
        yield Api(sa.url), rx, sa
        assert "Traceback" not in sa.log_text()


def test_a_chain_fires_one_downstream_run_per_upstream_success(standalone):
    api, rx, _ = standalone
    up = api.create({"name": "features", "schedule": {"kind": "interval", "every": 1},
                     "target": {"kind": "http", "url": rx.url("/up")}})
    down = api.create({"name": "train", "schedule": {"kind": "after", "jobs": ["features"],
                                                     "mode": "any"},
                       "target": {"kind": "http", "url": rx.url("/down")}})
    rx.wait_for(6, timeout=20, path="/down")
    api("POST", f"/v1/jobs/{up['id']}/pause", status=200)
    time.sleep(1.5)  # the last successes' downstream runs go out

    def settled():
        done = [r for r in api.runs(down["id"]) if r["status"] in ("succeeded", "failed")]
        ups = [r for r in api.runs(up["id"]) if r["status"] == "succeeded"]
        return (ups, done) if len(done) == len(ups) else None

    ups, downs = wait_for(settled, 10, "a downstream run for every upstream success")
    consumed = [u["run_id"] for d in downs for u in d["gate"]["upstream"]]
    assert sorted(consumed) == sorted(r["id"] for r in ups)  # each success exactly once
    assert all(d["status"] == "succeeded" and d["origin"] == "upstream" for d in downs)
    sent = [r.header("Cronman-Run-Id") for r in rx.requests_for("/down")]
    assert sorted(set(sent)) == sorted(d["id"] for d in downs)
    # The callback follows the upstream's by a fraction of a second.
    up_at = {r.header("Cronman-Run-Id"): r.arrived_at for r in rx.requests_for("/up")}
    down_at = {r.header("Cronman-Run-Id"): r.arrived_at for r in rx.requests_for("/down")}
    gaps = sorted(down_at[d["id"]] - up_at[d["gate"]["upstream"][0]["run_id"]]
                  for d in downs)
    assert gaps[len(gaps) // 2] < 1.0, gaps


def test_a_fire_waits_for_its_upstream_and_is_woken_by_its_success(standalone):
    api, rx, _ = standalone
    # The upstream's fire times are every 5 minutes; it is paused, so the
    # one before the dependent's fire only happens when backfilled.
    feats = api.create({"name": "features", "paused": True,
                        "schedule": {"kind": "interval", "every": 300},
                        "target": {"kind": "http", "url": rx.url("/features")}})
    at = format_rfc3339((utcnow() + timedelta(seconds=3)).replace(microsecond=0))
    waiter = api.create({"name": "train", "schedule": {"kind": "once", "at": at},
                         "depends_on": [{"job": "features", "within": 3600, "wait": 120}],
                         "target": {"kind": "http", "url": rx.url("/train")}})
    skipper = api.create({"name": "report", "schedule": {"kind": "once", "at": at},
                          "depends_on": [{"job": "features", "within": 3600, "wait": 2}],
                          "target": {"kind": "http", "url": rx.url("/report")}})

    def waiting():
        runs = api.runs(waiter["id"])
        return runs if runs and (runs[0]["gate"] or {}).get("waiting_for") else None

    [run] = wait_for(waiting, 15, "the dependent's fire waiting for its upstream")
    assert run["status"] == "claimed" and run["gate"]["waiting_for"] == [feats["id"]]
    # The other dependent waits 2 s at most: skipped, naming the stale upstream.
    [skipped] = wait_for(lambda: [r for r in api.runs(skipper["id"])
                                  if r["status"] == "skipped"], 15, "a skipped run")
    assert "default/features" in skipped["error"] and "within 3600 s" in skipped["error"]
    assert skipped["gate"]["stale"] == [feats["id"]]
    # The wait runs out 2 s after the due time; ``waited_ms`` counts from the
    # gate's first look, a few ms after it.
    assert (parse_rfc3339(skipped["finished_at"])
            - parse_rfc3339(skipped["scheduled_for"])) >= timedelta(seconds=2)
    assert 1500 <= skipped["gate"]["waited_ms"] < 4000
    assert not rx.requests_for("/report")
    time.sleep(2.0)
    assert not rx.requests_for("/train")
    # The upstream's missed fire time runs now (backfill) and succeeds: the waiter goes.
    since = format_rfc3339(parse_rfc3339(at) - timedelta(seconds=600))
    api("POST", f"/v1/jobs/{feats['id']}/backfill", {"since": since, "until": at},
        status=202)
    # The 600 s backfill window holds two or three of its 300 s fire times.
    rx.wait_for(1, timeout=10, path="/features")
    [train_call] = rx.wait_for(1, timeout=10, path="/train")
    woke_after = min(train_call.arrived_at - c.arrived_at for c in rx.requests_for("/features")
                     if c.arrived_at <= train_call.arrived_at)
    assert woke_after < 2.0  # woken, not polled
    [done] = wait_for(lambda: [r for r in api.runs(waiter["id"])
                               if r["status"] == "succeeded"], 10, "the waiter's success")
    [fresh] = done["gate"]["depends_on"]  # the newest of the backfilled successes
    assert fresh["run_id"] in {c.header("Cronman-Run-Id") for c in rx.requests_for("/features")}
    assert parse_rfc3339(fresh["scheduled_for"]) <= parse_rfc3339(at)
    assert done["gate"]["waited_for"] == [feats["id"]] and done["gate"]["waited_ms"] > 2000
    assert done["lateness_ms"] > 2000  # it started when its upstream was fresh


def test_a_calendar_skips_fires_as_runs_naming_it(standalone):
    api, rx, _ = standalone
    today = utcnow().date()
    cal = api("POST", "/v1/calendars", {"name": "freeze", "timezone": "UTC", "dates": [
        (today + timedelta(days=d)).isoformat() for d in (-1, 0, 1)]}, status=201)
    job = api.create({"name": "deploy", "schedule": {"kind": "interval", "every": 1},
                      "calendars": ["freeze"], "target": {"kind": "http",
                                                          "url": rx.url("/deploy")}})
    skipped = wait_for(lambda: [r for r in api.runs(job["id"]) if r["status"] == "skipped"]
                       if len(api.runs(job["id"])) >= 3 else None, 15, "skipped runs")
    for r in skipped:
        assert r["error"].startswith("excluded by calendar 'freeze'")
        assert r["gate"] == {"calendar": "freeze"}
    assert not rx.requests_for("/deploy")
    # The calendar changes: the scheduler hears it at once and fires again.
    api("PUT", f"/v1/calendars/{cal['id']}", {**cal, "dates": []}, status=200)
    changed = time.time()
    [first] = rx.wait_for(1, timeout=10, path="/deploy")
    assert first.arrived_at - changed < 3.0
