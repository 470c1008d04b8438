"""Worker targets in a real cluster: 3 ``cronman scheduler`` processes and two
``cronman api`` processes on PostgreSQL and Redis, workers in the test making
plain HTTP calls (claim, heartbeat, complete) to either API.

Jobs fire every second onto one queue. While workers hold runs, one node is
SIGKILLed, then one API process (the workers carry on through the other,
with the leases they hold); a worker that claims a run and then goes silent
lets its lease lapse (its run is re-queued as attempt 2 and finished by
another worker; the silent worker's late report is refused). Once the jobs
are paused and the queue drained: every run row succeeded, each exactly once
(no completion accepted twice; a report whose answer the killed API never
sent is refused as stale when repeated, and its run stands succeeded), none
lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from cronman.models import RunFilter
from cronman.store import open_store
from tests.cluster.harness import Cluster
from tests.support.api import http, running_api
from tests.support.processes import Processes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.counts_only, pytest.mark.postgres,
              pytest.mark.slow]

JOBS = 6
WORKERS = 3
HEARTBEAT_TIMEOUT = 2
WORK_SECONDS = 0.6


class Workers:
    """Worker threads: claim, heartbeat while working, report success; a call
    an API process cannot answer goes to the other one."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.stop = threading.Event()
        self.completed: list[str] = []
        self.uncertain: list[str] = []  # reported, answer lost, repeated: stale
        self.refused: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                        for i in range(WORKERS)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _call(self, i: int, path: str, body: dict[str, Any]) -> tuple[int, Any, bool]:
        """(status, answer, whether an API failed to answer first)."""
        failed = False
        for n in range(len(self.bases) * 2):
            base = self.bases[(i + n) % len(self.bases)]
            try:
                status, got, _ = http("POST", base + path, body, timeout=10)
                return status, got, failed
            except OSError:
                failed = True
                time.sleep(0.1)
        return 0, None, failed

    def _loop(self, i: int) -> None:
        worker_id = f"w{i}"
        while not self.stop.is_set():
            status, got, _ = self._call(i, "/v1/queues/q/claim",
                                        {"worker_id": worker_id, "namespace": "wq", "wait": 1})
            if status != 200:
                continue
            run_id, token = got["run"]["id"], got["lease_token"]
            end = time.monotonic() + WORK_SECONDS
            while time.monotonic() < end:
                self._call(i, f"/v1/runs/{run_id}/heartbeat",
                           {"lease_token": token, "progress": "working"})
                time.sleep(0.2)
            status, _, retried = self._call(i, f"/v1/runs/{run_id}/complete",
                                            {"lease_token": token, "status": "succeeded",
                                             "result": {"attempt": got["attempt"]}})
            with self.lock:
                if status == 200:
                    self.completed.append(run_id)
                elif status == 409 and retried:
                    self.uncertain.append(run_id)
                else:
                    self.refused.append((run_id, status))


def test_runs_survive_node_and_api_kills_and_a_lapsed_lease(cluster: Cluster,
                                                            procs: Processes):
    nodes = cluster.start(3, wait=False)  # the processes start side by side
    api_b, base_b = cluster.start_api("api-b")
    with running_api(cluster.database_url,
                     extra_env={"CRONMAN_REDIS_URL": cluster.redis_url}) as base:
        for node in nodes:
            cluster.wait_ready(node)
        job_ids = []
        for i in range(JOBS):
            status, job, _ = http("POST", f"{base}/v1/jobs", {
                "name": f"work-{i}", "namespace": "wq",
                "schedule": {"kind": "interval", "every": 1},
                "target": {"kind": "worker", "queue": "q", "payload": {"i": i},
                           "heartbeat_timeout": HEARTBEAT_TIMEOUT, "timeout": 600},
                "retry": {"max_attempts": 3, "min_backoff": 0.2, "max_backoff": 1}})
            assert status == 201, job
            job_ids.append(job["id"])
        # A silent worker: claims one run and never calls again.
        silent = None
        for _ in range(50):
            status, silent, _ = http("POST", f"{base}/v1/queues/q/claim",
                                     {"worker_id": "silent", "namespace": "wq", "wait": 1})
            if status == 200:
                break
        assert silent is not None and "lease_token" in silent, silent
        workers = Workers([base_b, base])
        workers.start()
        time.sleep(3)
        _, queues, _ = http("GET", f"{base}/v1/queues?namespace=wq")
        assert queues["items"][0]["held"] >= 1, queues  # workers hold runs as the node dies
        cluster.kill("n2")
        time.sleep(1.5)
        _, queues, _ = http("GET", f"{base}/v1/queues?namespace=wq")
        assert queues["items"][0]["held"] >= 1, queues  # ...and as an API process dies
        api_b.kill_with_children()
        time.sleep(4)
        for job_id in job_ids:
            status, _, _ = http("POST", f"{base}/v1/jobs/{job_id}/pause")
            assert status == 200
        silent_id = silent["run"]["id"]
        late, _, _ = http("POST", f"{base}/v1/runs/{silent_id}/complete",
                          {"lease_token": silent["lease_token"], "status": "succeeded"})
        store = open_store(cluster.database_url)
        try:
            def drained() -> bool:
                runs = [r for j in job_ids
                        for r in store.runs.list_runs(j, RunFilter(), 1000, None).items]
                return bool(runs) and all(r.status in ("succeeded", "failed", "lost", "skipped")
                                          for r in runs)

            # The killed node's runs wait for their lease (6 s) and the sweeper.
            wait_for(drained, 40, "every run ended", interval=0.5,
                     alive=cluster.assert_all_running)
            workers.join()
            runs = [r for j in job_ids
                    for r in store.runs.list_runs(j, RunFilter(), 1000, None).items]
        finally:
            store.close()
    cluster.assert_all_running()
    # Fires the pause caught before their start are skipped; every other run succeeded.
    odd = [(r.id, r.status, r.error) for r in runs if r.status != "succeeded"
           and not (r.status == "skipped" and "paused" in (r.error or ""))]
    assert odd == []
    done = [r.id for r in runs if r.status == "succeeded"]
    # Each run's success was accepted once, by the workers (a report whose
    # answer was lost with the killed API came back stale when repeated), and
    # none of their reports was refused otherwise (the silent worker's came
    # from outside them).
    assert sorted(workers.completed + workers.uncertain) == sorted(done)
    assert workers.refused == []
    assert late == 409
    silent_run = next(r for r in runs if r.id == silent_id)
    assert silent_run.attempt == 2 and silent_run.result["worker_id"] != "silent"
    assert silent_run.result["attempt"] == 2
    assert len(runs) >= JOBS * 6
