"""One real `cronman scheduler` process on PostgreSQL firing at a real HTTP receiver.

All jobs of this module run side by side on one node for about half a
minute (to keep the suite short); each test checks one behaviour at the
receiver and in the run history. The last test stops the node with SIGTERM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from cronman.vocabulary import FINAL_STATUSES
from tests.support.databases import migrated_pg_database
from tests.support.processes import CronmanProcess, Processes
from tests.support.receiver import ReceivedRequest, Receiver
from tests.support.signing import callback_verifies
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SECRET = "s3cret-for-tests"
OBSERVE = 30.0  # seconds the 1 s interval job is watched


@dataclass
class Env:
    url: str
    rx: Receiver
    node: CronmanProcess
    client: Any
    t0: float
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def create(self, key: str, **spec: Any) -> dict[str, Any]:
        body = {"name": key, **spec}
        body["target"] = {"kind": "http", "url": self.rx.url(f"/{key}"),
                          **body.get("target", {})}
        resp = self.client.post("/v1/jobs", json=body)
        assert resp.status_code == 201, resp.get_json()
        self.jobs[key] = resp.get_json()
        return self.jobs[key]

    def arrivals(self, key: str) -> list[ReceivedRequest]:
        return self.rx.requests_for(f"/{key}")

    def runs(self, key: str) -> list[dict[str, Any]]:
        resp = self.client.get(f"/v1/jobs/{self.jobs[key]['id']}/runs?limit=1000")
        assert resp.status_code == 200
        return list(reversed(resp.get_json()["items"]))

    def wait(self, check, timeout: float, what: str) -> Any:
        return wait_for(check, timeout, what, alive=self._assert_running)

    def _assert_running(self) -> None:
        assert self.node.running(), self.node.log_text()[-3000:]


def _scheduled(req: ReceivedRequest):
    return parse_rfc3339(req.header("Cronman-Scheduled-For"))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sched")
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp) as procs:
        rx.reply("/retry", status=500, body="nope")
        rx.reply("/forbid", status=204, delay=2.5)
        rx.reply("/replace", status=204, delay=30)
        rx.reply("/refused-dlq", status=204)
        node = procs.scheduler(url, "fires-1", env={"CRONMAN_SIGNING_SECRET": SECRET,
                                                     "CRONMAN_LEASE_SECONDS": "6"})
        app = make_app(Settings(database_url=url, allow_private_targets=True))
        e = Env(url, rx, node, app.test_client(), time.monotonic())
        now = utcnow()
        in2 = format_rfc3339((now + timedelta(seconds=2)).replace(microsecond=0))
        in3 = format_rfc3339((now + timedelta(seconds=3)).replace(microsecond=0))
        e.create("interval", schedule={"kind": "interval", "every": 1},
                 target={"body": '{"hello":"world"}',
                         "headers": {"Content-Type": "application/json"}})
        e.create("cron", schedule={"kind": "cron", "cron": "*/2 * * * * *", "timezone": "UTC"})
        e.create("retry", schedule={"kind": "once", "at": in2},
                 retry={"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
                 dead_letter={"kind": "http", "url": rx.url("/dlq")})
        e.create("forbid", schedule={"kind": "interval", "every": 1}, concurrency="forbid")
        e.create("replace", schedule={"kind": "interval", "every": 2}, concurrency="replace",
                 target={"timeout": 60})
        e.create("once", schedule={"kind": "once", "at": in3})
        e.create("manual", schedule={"kind": "interval", "every": 3600,
                                     "anchor": "2026-01-01T00:00:00Z"})
        e.create("delete", schedule={"kind": "interval", "every": 1})
        e.create("pause", schedule={"kind": "interval", "every": 1})
        e.create("refused", schedule={"kind": "once", "at": in2},
                 target={"url": "http://127.0.0.1:9/refused"},
                 retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1},
                 dead_letter={"kind": "http", "url": rx.url("/refused-dlq")})
        yield e
        if node.running():
            node.kill()


def test_delete_stops_fires_within_two_seconds(env):
    job = env.jobs["delete"]
    env.wait(lambda: len(env.arrivals("delete")) >= 2, 10, "delete-job fires")
    assert env.client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    answered = time.time()
    time.sleep(4.0)
    late = [r for r in env.arrivals("delete") if r.arrived_at > answered + 2.0]
    assert not late, [r.header("Cronman-Scheduled-For") for r in late]


def test_pause_stops_fires_and_resume_restarts_them(env):
    job = env.jobs["pause"]
    env.wait(lambda: len(env.arrivals("pause")) >= 2, 10, "pause-job fires")
    assert env.client.post(f"/v1/jobs/{job['id']}/pause").status_code == 200
    answered = time.time()
    time.sleep(3.5)
    assert not [r for r in env.arrivals("pause") if r.arrived_at > answered + 2.0]
    before = len(env.arrivals("pause"))
    assert env.client.post(f"/v1/jobs/{job['id']}/resume").status_code == 200
    resumed = time.time()
    env.wait(lambda: len(env.arrivals("pause")) > before, 4, "fires after resume")
    after = [r for r in env.arrivals("pause") if r.arrived_at > resumed]
    # Fire times from the pause are not made up for.
    assert all(_scheduled(r).timestamp() > resumed - 1.0 for r in after)


def test_callbacks_are_signed(env):
    got = env.wait(lambda: env.arrivals("interval")[:3] if len(env.arrivals("interval")) >= 3
                   else None, 10, "interval arrivals")
    for req in got:
        assert req.body == b'{"hello":"world"}'
        url = env.rx.url("/interval")
        assert callback_verifies(SECRET, "default", req, url)
        assert not callback_verifies("other-secret", "default", req, url)
        assert not callback_verifies(SECRET, "other", req, url)


def test_six_field_cron_fires_on_even_seconds(env):
    got = env.wait(lambda: len(env.arrivals("cron")) >= 4 and env.arrivals("cron"), 15,
                   "4 cron arrivals")
    times = [_scheduled(r) for r in got]
    assert all(t.second % 2 == 0 and t.microsecond == 0 for t in times), times
    assert [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)] == \
        [2.0] * (len(times) - 1)
    for r in got:
        assert 0 <= r.arrived_at - _scheduled(r).timestamp() < 0.5


def test_retries_with_backoff_then_failed_and_dead_letter(env):
    got = env.wait(lambda: len(env.arrivals("retry")) >= 3 and env.arrivals("retry"), 15,
                   "3 attempts")
    assert [r.header("Cronman-Attempt") for r in got] == ["1", "2", "3"]
    assert len({r.header("Cronman-Run-Id") for r in got}) == 1
    gaps = [b.arrived_at - a.arrived_at for a, b in zip(got, got[1:], strict=False)]
    assert 0.9 <= gaps[0] < 1.5, gaps
    assert 1.9 <= gaps[1] < 2.5, gaps
    [run] = env.wait(lambda: [r for r in env.runs("retry") if r["status"] == "failed"], 5,
                     "the run to fail")
    assert run["attempt"] == 3
    assert "500" in run["error"]
    [dlq] = env.wait(lambda: env.rx.requests_for("/dlq"), 5, "the dead letter")
    import json

    record = json.loads(dlq.body)
    assert record["id"] == run["id"] and record["status"] == "failed"
    assert record["attempt"] == 3
    time.sleep(1.5)
    assert len(env.arrivals("retry")) == 3


def test_connection_refused_fails_the_run_and_fires_dead_letter(env):
    [run] = env.wait(lambda: [r for r in env.runs("refused") if r["status"] == "failed"], 10,
                     "the refused run to fail")
    assert run["error"] and "refused" in run["error"].lower()
    env.wait(lambda: env.rx.requests_for("/refused-dlq"), 5, "the dead letter")
    assert env.node.running()


def test_forbid_skips_fires_while_the_previous_run_is_in_flight(env):
    env.wait(lambda: len(env.arrivals("forbid")) >= 3, 15, "3 forbid arrivals")
    got = env.arrivals("forbid")
    starts = [r.arrived_at for r in got]
    assert all(b - a >= 2.4 for a, b in zip(starts, starts[1:], strict=False)), starts
    runs = env.runs("forbid")
    skipped = [r for r in runs if r["status"] == "skipped"]
    assert skipped, runs
    assert all(r["error"].startswith("previous run ") and r["error"].endswith(" still in flight")
               for r in skipped)
    assert {r.header("Cronman-Run-Id") for r in got}.isdisjoint({r["id"] for r in skipped})


def test_replace_stops_the_previous_run(env):
    env.wait(lambda: len(env.arrivals("replace")) >= 3, 10, "3 replace arrivals")
    # The replaced runs' rows are written in the node's next result batch.
    env.wait(lambda: sum(r["status"] == "failed" for r in env.runs("replace")) >= 2, 5,
             "2 replaced runs written")
    runs = env.runs("replace")
    replaced = [r for r in runs if r["status"] == "failed"]
    by_id = {r["id"]: r for r in runs}
    for r in replaced:
        assert r["error"].startswith("replaced by run ")
        successor = r["error"].removeprefix("replaced by run ")
        assert successor in by_id
        assert by_id[successor]["scheduled_for"] > r["scheduled_for"]
    assert sum(r["status"] in ("claimed", "running") for r in runs) <= 2


def test_once_job_fires_once(env):
    got = env.wait(lambda: env.arrivals("once"), 10, "the once fire")
    time.sleep(1.5)
    assert len(env.arrivals("once")) == 1
    assert format_rfc3339(_scheduled(got[0])) == env.jobs["once"]["schedule"]["at"]
    [run] = env.runs("once")
    assert run["status"] == "succeeded"


def test_trigger_replay_and_backfill_are_carried_out(env):
    job = env.jobs["manual"]
    resp = env.client.post(f"/v1/jobs/{job['id']}/trigger")
    assert resp.status_code == 202
    trig = resp.get_json()
    [req] = env.wait(lambda: env.arrivals("manual"), 5, "the triggered fire")
    assert req.header("Cronman-Run-Id") == trig["id"]
    run = env.wait(lambda: (r := env.client.get(f"/v1/runs/{trig['id']}").get_json())
                   ["status"] == "succeeded" and r, 5, "the triggered run to succeed")
    assert run["origin"] == "trigger"

    assert env.client.post(f"/v1/runs/{trig['id']}/replay").status_code == 202
    got = env.wait(lambda: len(env.arrivals("manual")) >= 2 and env.arrivals("manual"), 5,
                   "the replay")
    assert got[1].header("Cronman-Run-Id") == trig["id"]
    assert got[1].header("Cronman-Attempt") == "2"

    now = utcnow()
    resp = env.client.post(f"/v1/jobs/{job['id']}/backfill", json={
        "since": format_rfc3339(now - timedelta(hours=3)), "until": format_rfc3339(now)})
    assert resp.status_code == 202, resp.get_json()
    requested = resp.get_json()["requested"]
    assert requested == 3
    got = env.wait(lambda: len(env.arrivals("manual")) >= 2 + requested
                   and env.arrivals("manual"), 5, "the backfilled fires")
    backfilled = got[2:]
    assert len({r.header("Cronman-Run-Id") for r in backfilled}) == requested
    assert all(_scheduled(r).minute == 0 and _scheduled(r).second == 0 for r in backfilled)
    env.wait(lambda: sum(r["origin"] == "backfill" and r["status"] == "succeeded"
                         for r in env.runs("manual")) == requested, 5, "backfilled runs")


def test_interval_job_fires_every_second_without_gap_or_duplicate(env):
    job = env.jobs["interval"]
    got = env.wait(lambda: len(env.arrivals("interval")) >= OBSERVE + 1 and env.arrivals("interval"),
                   OBSERVE + 10, "31 interval arrivals")
    times = [_scheduled(r) for r in got]
    run_ids = [r.header("Cronman-Run-Id") for r in got]
    assert len(set(run_ids)) == len(run_ids), "a fire was delivered twice"
    assert times == sorted(times)
    gaps = {(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)}
    assert gaps == {1.0}, f"not consecutive: {sorted(gaps)}"
    assert all(t.microsecond == 0 for t in times)
    assert {r.header("Cronman-Job-Id") for r in got} == {job["id"]}
    lateness = sorted(r.arrived_at - _scheduled(r).timestamp() for r in got)
    assert lateness[0] >= 0, "fired before its time"
    assert lateness[len(lateness) // 2] < 0.1, lateness
    assert lateness[-1] < 1.0, lateness
    runs = {r["id"]: r for r in env.runs("interval")}
    for rid in run_ids[:-2]:
        assert runs[rid]["status"] == "succeeded"
        assert runs[rid]["attempt"] == 1
        assert runs[rid]["lateness_ms"] is not None and runs[rid]["lateness_ms"] < 1000
        assert runs[rid]["result"]["http_status"] == 204


def test_sigterm_exits_within_ten_seconds_leaving_every_run_accounted_for(env):
    env.wait(lambda: any(r["status"] in ("claimed", "running") for r in env.runs("replace")),
             5, "a replace run in flight")
    started = time.monotonic()
    rc = env.node.stop(timeout=12)
    took = time.monotonic() - started
    assert rc == 0, env.node.log_text()[-3000:]
    assert took < 10.0
    log = env.node.log_text()
    assert "Traceback" not in log, log[-3000:]
    store = open_store(env.url)
    try:
        now = utcnow()
        for key in env.jobs:
            if key == "delete":
                continue
            page = store.runs.list_runs(env.jobs[key]["id"], _all(), 1000, None)
            for run in page.items:
                if run.status in FINAL_STATUSES:
                    continue
                assert run.lease_expires_at is not None and run.lease_expires_at <= now, \
                    (key, run)
    finally:
        store.close()


def _all():
    from cronman.models import RunFilter

    return RunFilter()
