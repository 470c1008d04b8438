"""Overlap buffers, the circuit breaker and run limits on real `cronman scheduler`
processes (PostgreSQL) firing at a real HTTP receiver.

The jobs of the first part run side by side on one node; the last test runs
two nodes and SIGKILLs the one holding a buffered fire.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.timeutil import parse_rfc3339
from cronman.vocabulary import BUFFERED_PREFIX
from tests.support.databases import migrated_pg_database
from tests.support.processes import CronmanProcess, Processes
from tests.support.receiver import ReceivedRequest, Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SLOW = 3.0  # seconds the buffered jobs' receiver takes to answer


@dataclass
class Env:
    rx: Receiver
    node: CronmanProcess
    client: Any
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def create(self, key: str, **spec: Any) -> dict[str, Any]:
        body = {"name": key, "schedule": {"kind": "interval", "every": 1},
                "target": {"kind": "http", "url": self.rx.url(f"/{key}")}, **spec}
        resp = self.client.post("/v1/jobs", json=body)
        assert resp.status_code == 201, resp.get_json()
        self.jobs[key] = resp.get_json()
        return self.jobs[key]

    def job(self, key: str) -> dict[str, Any]:
        return self.client.get(f"/v1/jobs/{self.jobs[key]['id']}").get_json()

    def runs(self, key: str) -> list[dict[str, Any]]:
        resp = self.client.get(f"/v1/jobs/{self.jobs[key]['id']}/runs?limit=1000")
        return list(reversed(resp.get_json()["items"]))

    def arrivals(self, key: str) -> list[ReceivedRequest]:
        return self.rx.requests_for(f"/{key}")

    def wait(self, check, timeout: float, what: str) -> Any:
        return wait_for(check, timeout, what, alive=lambda: self._alive())

    def _alive(self) -> None:
        assert self.node.running(), self.node.log_text()[-3000:]


def _scheduled(req: ReceivedRequest) -> Any:
    return parse_rfc3339(req.header("Cronman-Scheduled-For"))


def _no_overlap(arrivals: list[ReceivedRequest], took: float) -> None:
    """Each request came after the one before it was answered."""
    for a, b in zip(arrivals, arrivals[1:], strict=False):
        assert b.arrived_monotonic - a.arrived_monotonic >= took - 0.05, (
            f"{b.header('Cronman-Scheduled-For')} came "
            f"{b.arrived_monotonic - a.arrived_monotonic:.2f} s after "
            f"{a.header('Cronman-Scheduled-For')}")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("policies")
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp) as procs:
        for path in ("/one", "/all"):
            rx.reply(path, status=204, delay=SLOW)
        rx.reply("/breaker", status=500, body="down")
        rx.reply("/limited", status=204)
        node = procs.scheduler(url, "policies-1", env={"CRONMAN_LEASE_SECONDS": "6"})
        app = make_app(Settings(database_url=url, allow_private_targets=True))
        e = Env(rx, node, app.test_client())
        e.create("one", concurrency="buffer_one", target={"kind": "http",
                                                          "url": rx.url("/one"), "timeout": 30})
        e.create("all", concurrency="buffer_all", buffer_limit=2,
                 target={"kind": "http", "url": rx.url("/all"), "timeout": 30})
        e.create("breaker", schedule={"kind": "interval", "every": 2}, pause_after_failures=3,
                 retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1})
        e.create("limited", schedule={"kind": "interval", "every": 2}, max_runs=3)
        yield e
        if node.running():
            node.kill()


def test_buffer_one_keeps_the_latest_fire_and_starts_it_when_the_run_ends(env):
    env.wait(lambda: len(env.arrivals("one")) >= 3, 25, "three runs of the buffer_one job")
    arrivals = env.arrivals("one")
    _no_overlap(arrivals, SLOW)
    # Each run started as soon as the one before ended (the buffered fire waited for it).
    for a, b in zip(arrivals, arrivals[1:], strict=False):
        assert b.arrived_monotonic - a.arrived_monotonic < SLOW + 1.5
    # The one started after a run is the latest fire due by its end: the newest kept.
    times = [_scheduled(r) for r in arrivals]
    assert times == sorted(times)
    runs = env.runs("one")
    replaced = [r for r in runs if r["status"] == "skipped"]
    assert replaced and all("replaced in the buffer by the fire of" in r["error"]
                            for r in replaced)
    assert all(r["gate"]["buffered"]["policy"] == "buffer_one" for r in replaced)
    env.wait(lambda: any(r["status"] == "succeeded" and "buffered_since" in (r["gate"] or {})
                         for r in env.runs("one")), 10, "a run that was buffered to succeed")
    # While a run is in flight, one fire waits (never more), and the job says so.
    env.wait(lambda: env.job("one")["buffered"] == 1, 5, "a buffered fire on the job")
    waiting = [r for r in env.runs("one") if r["status"] == "claimed"
               and (r["error"] or "").startswith(BUFFERED_PREFIX)]
    assert len(waiting) == 1


def test_buffer_all_keeps_fires_in_order_up_to_its_limit(env):
    env.wait(lambda: len(env.arrivals("all")) >= 3, 25, "three runs of the buffer_all job")
    arrivals = env.arrivals("all")
    _no_overlap(arrivals, SLOW)
    times = [_scheduled(r) for r in arrivals]
    assert times == sorted(times)
    gaps = {round((b - a).total_seconds()) for a, b in zip(times, times[1:], strict=False)}
    assert gaps == {1}, times  # every fire kept, in order (none skipped between them)...
    runs = env.runs("all")
    full = [r for r in runs if r["status"] == "skipped"]
    assert full and all("the buffer is full: 2 fires of the job wait (buffer_limit 2)"
                        in r["error"] for r in full)  # ...but those beyond the limit
    assert env.job("all")["buffered"] <= 2


def test_the_breaker_pauses_the_job_after_three_failed_runs(env):
    env.wait(lambda: env.job("breaker")["paused"], 20, "the breaker to pause the job")
    job = env.job("breaker")
    assert job["state"] == "paused" and job["failure_streak"] == 3
    assert job["pause_reason"].startswith("paused after 3 consecutive failed runs; last "
                                          "error: ")
    time.sleep(4.5)
    assert len(env.arrivals("breaker")) == 3
    failed = [r for r in env.runs("breaker") if r["status"] == "failed"]
    assert len(failed) == 3
    # Resumed, it fires again; its count started over.
    resumed = env.client.post(f"/v1/jobs/{job['id']}/resume", json={"note": "fixed"})
    assert resumed.get_json()["failure_streak"] == 0
    env.rx.reply("/breaker", status=204)
    env.wait(lambda: len(env.arrivals("breaker")) >= 4, 10, "a fire after the resume")


def test_max_runs_ends_the_job_after_its_runs(env):
    env.wait(lambda: env.job("limited")["state"] == "done", 20, "the job to be done")
    job = env.job("limited")
    assert (job["runs_done"], job["runs_left"], job["next_fire_at"]) == (3, 0, None)
    time.sleep(4.5)
    assert len(env.arrivals("limited")) == 3
    assert [r["status"] for r in env.runs("limited")] == ["succeeded"] * 3


def test_a_buffered_fire_outlives_its_node(tmp_path):
    """A node SIGKILLed while a fire waits in its job's buffer: the node that
    takes the runs over holds the fire again behind the run it re-sends, and
    ends it (run, or replaced by a newer fire), never leaving it waiting."""
    env = {"CRONMAN_LEASE_SECONDS": "3"}
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp_path) as procs:
        rx.reply("/held", status=204, delay=6.0)
        app = make_app(Settings(database_url=url, allow_private_targets=True))
        client = app.test_client()
        job = client.post("/v1/jobs", json={
            "name": "held", "schedule": {"kind": "interval", "every": 2},
            "concurrency": "buffer_one", "misfire": {"policy": "skip", "grace": 1},
            "target": {"kind": "http", "url": rx.url("/held"), "timeout": 30}}).get_json()
        a = procs.scheduler(url, "holder", env=env)

        def runs():
            got = client.get(f"/v1/jobs/{job['id']}/runs?limit=1000").get_json()["items"]
            return list(reversed(got))

        rx.wait_for(1, timeout=10, path="/held")
        wait_for(lambda: client.get(f"/v1/jobs/{job['id']}").get_json()["buffered"] == 1, 5,
                 "a fire in the buffer")
        (held,) = [r for r in runs() if r["status"] == "claimed"]
        assert held["node_id"] == "holder" and held["error"].startswith(BUFFERED_PREFIX)
        a.kill()
        killed = time.monotonic()
        rx.reply("/held", status=204, delay=1.0)
        b = procs.scheduler(url, "taker", env=env)
        wait_for(lambda: next(r for r in runs() if r["id"] == held["id"])["status"]
                 in ("succeeded", "skipped"), 20, "the buffered fire to end")
        after = next(r for r in runs() if r["id"] == held["id"])
        assert after["node_id"] == "taker"
        if after["status"] == "skipped":
            assert "replaced in the buffer by the fire of" in after["error"]
        # The taker's requests never overlap: each after the one before it ended.
        wait_for(lambda: len([r for r in rx.requests_for("/held")
                              if r.arrived_monotonic > killed]) >= 3, 15, "the taker's runs")
        taker = [r for r in rx.requests_for("/held") if r.arrived_monotonic > killed]
        _no_overlap(taker, 1.0)
        # The run in flight at the kill was sent again, first.
        first = rx.requests_for("/held")[0]
        assert taker[0].header("Cronman-Run-Id") == first.header("Cronman-Run-Id")
        assert b.stop() == 0
