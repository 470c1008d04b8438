"""`cronman standalone` runs container jobs on its in-process `process` agent."""

from __future__ import annotations

import pytest

from cronman.store import open_store
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]


def test_standalone_runs_container_jobs_as_processes(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with Processes(tmp_path) as procs:
        sa = procs.standalone(db, env={"CRONMAN_AGENT_LABELS": "zone=local"})
        base = sa.url
        status, ok_job, _ = http("POST", f"{base}/v1/jobs", {
            "name": "echo",
            "schedule": {"kind": "once", "at": "2099-01-01T00:00:00Z"},
            "target": {"kind": "container", "image": "unused", "selector": {"zone": "local"},
                       "command": ["sh", "-c", "echo out-$GREETING; echo err >&2"],
                       "env": {"GREETING": "hi"}},
        })
        assert status == 201, ok_job
        status, bad_job, _ = http("POST", f"{base}/v1/jobs", {
            "name": "exit3",
            "schedule": {"kind": "once", "at": "2099-01-01T00:00:00Z"},
            "retry": {"max_attempts": 1},
            "target": {"kind": "container", "image": "unused", "command": ["sh", "-c", "exit 3"]},
        })
        assert status == 201, bad_job
        for job in (ok_job, bad_job):
            status, _, _ = http("POST", f"{base}/v1/jobs/{job['id']}/trigger")
            assert status == 202

        def finished(job_id: str):
            _, page, _ = http("GET", f"{base}/v1/jobs/{job_id}/runs")
            return [r for r in page["items"] if r["status"] in ("succeeded", "failed")]

        run = wait_for(lambda: finished(ok_job["id"]), 20, "the echo run")[0]
        assert run["status"] == "succeeded", run
        assert run["result"]["exit_code"] == 0
        assert run["result"]["logs_tail"] == {"stdout": "out-hi\n", "stderr": "err\n"}
        assert run["result"]["agent_id"]
        run = wait_for(lambda: finished(bad_job["id"]), 20, "the exit-3 run")[0]
        assert run["status"] == "failed" and run["result"]["exit_code"] == 3
        assert "exited with code 3" in run["error"]

        _, cluster, _ = http("GET", f"{base}/v1/cluster")
        (agent,) = cluster["agents"]
        assert agent["runtime"] == "process" and agent["labels"] == "zone=local"
        assert agent["slots_free"] == agent["slots"] and agent["heartbeat_age_s"] < 30


def test_standalone_with_tokens_runs_a_namespace_there_only_once_granted(tmp_path):
    """Once tokens are required, the in-process agent (commands on this host)
    runs a namespace's jobs only with an admin's grant, never as root, with
    none of the process's own environment."""
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with Processes(tmp_path) as procs:
        sa = procs.standalone(db, env={"CRONMAN_AGENT_PLACEMENT_TIMEOUT": "2",
                                       "CRONMAN_DATABASE_URL": db, "AGENT_SECRET": "s3cret"})
        base = sa.url
        with open_store(db) as store:
            beta, _ = store.tokens.create_token("beta", ["beta"])
            admin, _ = store.tokens.create_token("admin", None)
        wait_for(lambda: http("GET", f"{base}/v1/jobs")[0] == 401, 10, "auth to be required")
        job = {"name": "probe", "namespace": "beta", "retry": {"max_attempts": 1},
               "schedule": {"kind": "once", "at": "2099-01-01T00:00:00Z"},
               "target": {"kind": "container", "image": "unused",
                          "command": ["sh", "-c", "id -u; env"]}}
        status, err, _ = http("POST", f"{base}/v1/jobs", {
            **job, "target": {**job["target"], "user": "root"}}, token=beta)
        assert status == 403 and err["error"]["field"] == "target.user", err
        status, created, _ = http("POST", f"{base}/v1/jobs", job, token=beta)
        assert status == 201, created

        def final(count: int):
            _, page, _ = http("GET", f"{base}/v1/jobs/{created['id']}/runs", token=beta)
            done = [r for r in page["items"] if r["status"] in ("succeeded", "failed")]
            return done if len(done) >= count else None

        assert http("POST", f"{base}/v1/jobs/{created['id']}/trigger", token=beta)[0] == 202
        (run,) = wait_for(lambda: final(1), 20, "the ungranted run")
        assert run["status"] == "failed" and "process runtime" in run["error"], run
        assert "'beta'" in run["error"]
        status, grant, _ = http("PUT", f"{base}/v1/namespaces/beta/host-policy",
                                {"process": True}, token=admin)
        assert status == 200 and grant["process"] is True, grant
        assert http("POST", f"{base}/v1/jobs/{created['id']}/trigger", token=beta)[0] == 202
        run = next(r for r in wait_for(lambda: final(2), 20, "the granted run")
                   if r["status"] == "succeeded")
        out = run["result"]["logs_tail"]["stdout"]
        assert out.splitlines()[0] != "0", out
        assert "CRONMAN_DATABASE_URL" not in out and "s3cret" not in out, out
        assert f"CRONMAN_RUN_ID={run['id']}" in out
