"""The cases of the end-to-end tests of `cronman worker` (test_worker_sqlite.py,
test_worker_postgres.py give them their ``backend``): `cronman worker` processes
running real commands for `worker`-target jobs. Runs fire, commands run with their payload, exit codes and output tails are
recorded; a SIGKILLed worker's run comes back as attempt 2 with one success recorded; a
worker SIGSTOPped past its heartbeat timeout has its late completion refused while the
re-run's result stands; a cancel reaches the command as SIGTERM; a timeout ends a run.
Heartbeat timeouts of 2 s keep it short."""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronman.client import CronmanClient, Worker
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.processes import CronmanProcess, Processes
from tests.support.waiting import wait_for

HEARTBEAT = 2
FAR = {"kind": "once", "at": "2099-01-01T00:00:00Z"}  # fired by a trigger only
FINAL = ("succeeded", "failed", "lost")


class Cluster:
    """A cronman API with a scheduler node behind it, and `cronman worker` processes."""

    def __init__(self, url: str, procs: Processes, *, admin_token: str | None = None,
                 worker_token: str | None = None) -> None:
        self.url = url
        self.procs = procs
        self.api = CronmanClient(url, admin_token)
        self.worker_token = worker_token  # the workers' (of the jobs' namespace)
        self.workers: list[CronmanProcess] = []

    def job(self, command_queue: str, *, payload: Any = None, schedule: dict | None = None,
            retry: dict | None = None, timeout: int = 60,
            capacity: dict | None = None, **job: Any) -> dict[str, Any]:
        target = {"kind": "worker", "queue": command_queue, "payload": payload,
                  "heartbeat_timeout": HEARTBEAT, "timeout": timeout}
        if capacity is not None:
            target["capacity"] = capacity
        spec = {"name": f"w-{uuid.uuid4().hex[:8]}", "schedule": schedule or FAR,
                "target": target, "retry": retry or {"max_attempts": 1}, **job}
        return dict(self.api.create_job(spec))

    def worker(self, queue: str, worker_id: str, *command: str, args: tuple[str, ...] = (),
               token: str | None = None) -> CronmanProcess:
        token = token or self.worker_token
        env = {"CRONMAN_TOKEN": token} if token else {}
        worker = self.procs.start(worker_id, ["worker", "--queue", queue, "--url", self.url,
                                              "--worker-id", worker_id, "--wait", "1",
                                              "--kill-after", "1", *args, "--", *command],
                                  env)
        self.workers.append(worker)
        return worker

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.api.get_run(run_id))

    def until(self, run_id: str, check, timeout: float = 20.0, what: str = "") -> dict:
        return wait_for(lambda: (lambda r: r if check(r) else None)(self.run(run_id)),
                        timeout, what or f"run {run_id}")

    def ended(self, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
        return self.until(run_id, lambda r: r["status"] in FINAL, timeout, "the run's end")


@pytest.fixture
def cluster(backend) -> Iterator[Cluster]:
    """The module's cluster; the workers a test started are stopped after it (SIGTERM)."""
    yield backend
    for worker in backend.workers:
        if worker.running():
            worker.stop(20)
    backend.workers.clear()


def queue() -> str:
    return f"q{uuid.uuid4().hex[:10]}"


def test_a_fired_run_runs_its_command_and_the_exit_and_output_are_recorded(cluster):
    q = queue()
    at = format_rfc3339(utcnow() + timedelta(seconds=2))
    ok = cluster.job(q, payload={"table": "users"}, schedule={"kind": "once", "at": at})
    cluster.worker(q, "w-ok", "sh", "-c",
                   'read -r p; echo "got $p attempt $CRONMAN_ATTEMPT"; '
                   'echo "CRONMAN_PROGRESS 50 half"; sleep 1; '
                   'if [ "$CRONMAN_JOB_ID" = "' + ok["id"] + '" ]; then exit 0; fi; '
                   "printf 'bro\\0ken\\n' >&2; exit 3")
    run = wait_for(lambda: next(iter(cluster.api.list_job_runs(ok["id"]).items), None), 15,
                   "the fire")
    run = cluster.ended(run["id"])
    assert run["status"] == "succeeded" and run["attempt"] == 1
    assert run["result"]["exit_code"] == 0 and run["result"]["worker_id"] == "w-ok"
    assert run["result"]["logs_tail"]["stdout"].startswith('got {"table": "users"} attempt 1\n')

    bad = cluster.job(q, payload=[1, 2])
    run = cluster.ended(cluster.api.trigger_job(bad["id"])["id"])
    assert run["status"] == "failed" and run["error"] == "exit code 3"
    assert run["result"]["exit_code"] == 3
    assert run["result"]["logs_tail"]["stderr"] == "bro\ufffdken\n"  # the API takes no NUL


def test_a_sigkilled_workers_run_comes_back_as_attempt_2_with_one_success(cluster, tmp_path):
    q = queue()
    pids = tmp_path / "pids"
    job = cluster.job(q, retry={"max_attempts": 3, "min_backoff": 1, "max_backoff": 1})
    script = (f'if [ "$CRONMAN_ATTEMPT" = 1 ]; then echo $$ > {pids}; sleep 60; fi; '
              'echo "done by attempt $CRONMAN_ATTEMPT"')
    w1 = cluster.worker(q, "w-killed", "sh", "-c", script)
    run_id = cluster.api.trigger_job(job["id"])["id"]
    wait_for(lambda: pids.exists() and pids.read_text().strip(), 20, "attempt 1 running")
    child = _Process(int(pids.read_text()))
    w1.kill()
    killed = time.monotonic()
    child.wait_gone("the killed worker's command gone")
    cluster.worker(q, "w-second", "sh", "-c", script)
    run = cluster.ended(run_id, 30)
    assert run["status"] == "succeeded" and run["attempt"] == 2, run
    assert time.monotonic() - killed >= HEARTBEAT - 0.5  # taken back after the lease
    assert run["result"]["worker_id"] == "w-second"
    assert run["result"]["logs_tail"]["stdout"] == "done by attempt 2\n"
    assert [r["status"] for r in cluster.api.list_job_runs(job["id"]).items] == ["succeeded"]


def test_a_worker_stopped_past_its_lease_is_refused_and_the_rerun_stands(cluster, tmp_path):
    q = queue()
    started = tmp_path / "started"
    job = cluster.job(q, retry={"max_attempts": 3, "min_backoff": 1, "max_backoff": 1})
    script = (f'echo $CRONMAN_ATTEMPT >> {started}; '
              'if [ "$CRONMAN_ATTEMPT" = 1 ]; then sleep 3; fi; echo "by $CRONMAN_ATTEMPT"')
    w1 = cluster.worker(q, "w-paused", "sh", "-c", script)
    run_id = cluster.api.trigger_job(job["id"])["id"]
    wait_for(lambda: started.exists(), 20, "attempt 1 started")
    w1.proc.send_signal(signal.SIGSTOP)
    try:
        w2 = cluster.worker(q, "w-rerun", "sh", "-c", script)
        run = cluster.ended(run_id, 30)
        assert run["status"] == "succeeded" and run["attempt"] == 2
        assert run["result"]["worker_id"] == "w-rerun"
        time.sleep(max(0.0, 3.5 - HEARTBEAT))  # attempt 1's command is done by now
    finally:
        w1.proc.send_signal(signal.SIGCONT)
    # Its heartbeat (409: not reported) or its completion (409: not recorded) was refused.
    w1.wait_until(lambda: "not reported" in w1.log_text() or "not recorded" in w1.log_text(),
                  15, "the paused worker's refusal")
    assert "409" in w1.log_text()
    after = cluster.run(run_id)
    assert after["status"] == "succeeded" and after["result"]["worker_id"] == "w-rerun"
    assert after["attempt"] == 2
    assert w2.running()


def test_a_cancel_reaches_the_command_as_sigterm(cluster, tmp_path):
    q = queue()
    got = tmp_path / "got"
    job = cluster.job(q)
    cluster.worker(q, "w-cancel", "sh", "-c",
                   f"trap 'echo TERM > {got}; exit 143' TERM; touch {got}.started; "
                   "while :; do sleep 0.1; done")
    run_id = cluster.api.trigger_job(job["id"])["id"]
    wait_for(lambda: Path(f"{got}.started").exists(), 20, "the command started")
    cluster.api.cancel_run(run_id, "test")
    run = cluster.ended(run_id, 15)
    assert got.read_text() == "TERM\n"
    assert run["status"] == "failed" and "cancel" in (run["error"] or "")


def test_replace_cancels_the_held_run_and_its_command(cluster, tmp_path):
    q = queue()
    first, got = tmp_path / "first", tmp_path / "got"
    job = cluster.job(q, schedule={"kind": "interval", "every": 3}, concurrency="replace")
    cluster.worker(q, "w-replace", "sh", "-c",
                   f"if [ -e {first} ]; then echo later; exit 0; fi; touch {first}; "
                   f"trap 'echo TERM > {got}; exit 143' TERM; while :; do sleep 0.1; done")
    wait_for(first.exists, 20, "the first run's command started")
    held = next(r for r in cluster.api.list_job_runs(job["id"]).items
                if r["status"] == "running")
    replaced = cluster.ended(held["id"], 15)  # by the next fire, 3 s later at most
    cluster.api.pause_job(job["id"])
    assert got.read_text() == "TERM\n"  # its worker heard it at its next heartbeat
    assert replaced["status"] == "failed", replaced
    replacing = re.search(r"replaced by run (\S+)", replaced["error"] or "")
    assert replacing is not None, replaced
    run = cluster.ended(replacing.group(1), 20)
    assert run["status"] == "succeeded" and run["result"]["logs_tail"]["stdout"] == "later\n"


def test_a_runs_timeout_ends_it_and_its_command(cluster, tmp_path):
    q = queue()
    pids = tmp_path / "pids"
    job = cluster.job(q, timeout=2)
    cluster.worker(q, "w-timeout", "sh", "-c", f"echo $$ > {pids}; sleep 60")
    run_id = cluster.api.trigger_job(job["id"])["id"]
    run = cluster.ended(run_id, 20)
    assert run["status"] == "failed" and "timed out" in (run["error"] or ""), run
    child = _Process(int(pids.read_text()))
    child.wait_gone("the command stopped")


def test_the_clients_worker_runs_a_python_handler_with_progress(cluster):
    q = queue()
    job = cluster.job(q, payload={"steps": 3})
    run_id = cluster.api.trigger_job(job["id"])["id"]
    seen: list[dict[str, Any]] = []

    def handler(payload, ctx):
        ctx.progress("step 2 of 3", percent=66)
        seen.append(cluster.until(
            run_id, lambda r: (r.get("worker") or {}).get("progress") == "step 2 of 3", 10,
            "the progress on the run"))
        return {"steps_done": payload["steps"], "attempt": ctx.attempt}

    worker = Worker(cluster.api, q, handler, worker_id="py-1", wait=2)
    report = wait_for(worker.run_once, 20, "a claim")
    assert report.accepted and report.status == "succeeded"
    held = seen[0]["worker"]
    assert held["worker_id"] == "py-1" and held["percent"] == 66 and held["state"] == "held"
    run = cluster.run(run_id)
    assert run["status"] == "succeeded", run
    assert run["result"] == {"steps_done": 3, "attempt": 1, "worker_id": "py-1"}  # the API adds the id


def test_an_idle_worker_is_the_capacity_a_job_asks_for(cluster):
    q = queue()
    job = cluster.job(q, capacity={"idle_workers": 1, "wait": 3})
    run_id = cluster.api.trigger_job(job["id"])["id"]
    held_back = cluster.until(run_id, lambda r: (r.get("worker") or {}).get("state")
                              == "waiting_capacity", 10, "the run waiting for room")
    assert held_back["worker"]["waiting_for"] == f"capacity on queue {q}: 0 of 1 idle"
    waiting = cluster.ended(run_id, 15)
    assert waiting["status"] == "failed" and "capacity" in (waiting["error"] or "")
    worker = cluster.worker(q, "w-idle", "sh", "-c", "echo ran")
    worker.wait_for_log("claiming from", 15)
    time.sleep(0.5)  # its first claim is in: the worker is seen idle
    run = cluster.ended(cluster.api.trigger_job(job["id"])["id"], 15)
    assert run["status"] == "succeeded" and run["result"]["logs_tail"]["stdout"] == "ran\n"


class _Process:
    """A process seen in /proc, told apart from a later one given its PID by its start time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        stat = self._stat()
        self.started = stat[19] if stat else None

    def _stat(self) -> list[str]:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return []

    def gone(self) -> bool:
        """Ended (a zombie counts), or its PID is another process's now."""
        stat = self._stat()
        return not stat or stat[0] == "Z" or stat[19] != self.started

    def wait_gone(self, what: str, timeout: float = 10.0) -> None:
        try:
            wait_for(self.gone, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc} ({self})") from None

    def __str__(self) -> str:
        stat = self._stat()
        return f"pid {self.pid}: " + (f"state {stat[0]}, parent {stat[1]}, group {stat[2]}"
                                      if stat else "gone")
