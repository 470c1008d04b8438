"""Worker agents and scheduler nodes as real processes, killed and restarted:
reattach, re-dispatch, lost, fencing, containerd restart, node death, replace
(real containerd, Redis and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta
from functools import partial

import pytest

from cronman.callbacks.validation import validate_target
from cronman.models import RunFilter
from cronman.store import open_store
from cronman.timeutil import utcnow
from cronman.worker_agent.runtimes.containerd import ContainerdRuntime
from tests.support.containerd import TEST_IMAGE
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.store_data import job_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

LEASE = 3
STARTED = re.compile(r"run (\S+) attempt (\d+): container \S+ started")


@pytest.fixture
def db_url():
    with migrated_pg_database() as url:
        yield url


@pytest.fixture
def store(db_url):
    s = open_store(db_url)
    yield s
    s.close()


@pytest.fixture
def env(containerd, namespace, redis_url):
    return {"CRONMAN_REDIS_URL": redis_url,
            "CRONMAN_REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
            "CRONMAN_LEASE_SECONDS": str(LEASE), "CRONMAN_HEARTBEAT_TTL": str(LEASE),
            "CRONMAN_CONTAINERD_ADDRESS": containerd.socket,
            "CRONMAN_CONTAINERD_NAMESPACE": namespace,
            "CRONMAN_AGENT_STATE_DIR": str(containerd.dir / "fifos")}


def container_job(store, name, command, *, in_s=1.0, target_extra=None, **overrides):
    target = validate_target({"kind": "container", "image": TEST_IMAGE, "command": command,
                              "memory_mb": 64, "timeout": 120, **(target_extra or {})})
    spec = job_spec(name, target=target,
                    schedule={"kind": "once",
                              "at": (utcnow() + timedelta(seconds=in_s)).isoformat()},
                    **overrides)
    (job,) = store.jobs.create_jobs([spec])
    return job


def runs_of(store, job_id):
    return sorted(store.runs.list_runs(job_id, RunFilter(), 100, None).items,
                  key=lambda r: r.scheduled_for)


def final_run(store, job_id, timeout=30):
    def done():
        runs = [r for r in runs_of(store, job_id) if r.status in ("succeeded", "failed", "lost")]
        return runs[0] if runs else None

    return wait_for(done, timeout, f"a final run of job {job_id}")


def starts(procs, run_id=None):
    """(run id, attempt) of every container start in the agents' logs."""
    found = []
    for p in procs.started:
        if p.argv[3:4] == ["agent"]:
            found += [(m.group(1), int(m.group(2))) for m in STARTED.finditer(p.log_text())]
    return [s for s in found if run_id is None or s[0] == run_id]


def agent_containers(containerd, namespace, agent_id):
    async def main():
        rt = ContainerdRuntime(containerd.socket, namespace, state_dir=containerd.dir / "fifos")
        try:
            return await rt.list({"cronman.agent": agent_id})
        finally:
            await rt.close()

    return asyncio.run(main())


def test_agent_killed_and_back_within_its_lease_reattaches(tmp_path, db_url, store, env):
    # A lease that outlasts an agent's start on a loaded machine (~3 s at worst).
    env = {**env, "CRONMAN_LEASE_SECONDS": str(3 * LEASE)}
    with Processes(tmp_path) as procs:
        procs.scheduler(db_url, "n1", env=env)
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        # Output before the kill, while no agent runs, and after its return.
        job = container_job(store, "reattach", ["sh", "-c", "echo start; sleep 1.5; "
                                                "echo away >&2; sleep 2; echo done"])
        quick = container_job(store, "quick", ["sh", "-c", "echo before; sleep 0.5; "
                                               "echo after >&2; exit 4"],
                              retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1})
        wait_for(lambda: len(starts(procs)) == 2, 15, "the containers to start")
        a1.kill()
        # The quick one ends while no agent watches it (the agent takes longer to start).
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        run = final_run(store, job.id)
        assert run.status == "succeeded", run
        assert run.attempt == 1 and run.result["agent_id"] == "a1"
        assert run.result["logs_tail"] == {"stdout": "start\ndone\n", "stderr": "away\n"}
        ended = final_run(store, quick.id)
        assert ended.status == "failed" and ended.result["exit_code"] == 4, ended
        assert ended.result["logs_tail"] == {"stdout": "before\n", "stderr": "after\n"}
        assert a1.log_text().count("reattached to container") == 2
        assert sorted(starts(procs)) == sorted([(run.id, 1), (ended.id, 1)])  # no second start


def test_a_process_agent_killed_and_back_reattaches_with_the_output_of_both_sides(
        tmp_path, db_url, store, env):
    """The process runtime's commands outlive a SIGKILLed agent (no SIGPIPE on
    a pipe to the dead agent) and are reported once by the agent back."""
    env = {**env, "CRONMAN_LEASE_SECONDS": str(3 * LEASE),
           "CRONMAN_AGENT_LABELS": "kind=host"}
    with Processes(tmp_path) as procs:
        procs.scheduler(db_url, "n1", env=env)
        agent = partial(procs.agent, "p1", redis_url=env["CRONMAN_REDIS_URL"],
                        runtime="process", env=env)
        p1 = agent()
        store.host_policies.put("ops", {"process": True}, by=None)
        job = container_job(store, "host", ["sh", "-c", "echo start; sleep 1.5; "
                                            "echo away >&2; sleep 1.5; echo done"],
                            target_extra={"selector": {"kind": "host"}}, namespace="ops")
        wait_for(lambda: starts(procs), 15, "the command to start")
        p1.kill()
        p1 = agent()
        run = final_run(store, job.id)
        assert run.status == "succeeded" and run.attempt == 1, run
        assert run.result["logs_tail"] == {"stdout": "start\ndone\n", "stderr": "away\n"}
        assert p1.log_text().count("reattached to container") == 1
        assert starts(procs) == [(run.id, 1)]


def test_agent_that_never_returns_loses_its_runs_and_is_fenced_on_return(
        tmp_path, db_url, store, env, containerd, namespace):
    script = ('if [ "$CRONMAN_ATTEMPT" = 1 ]; then sleep 60; fi; '
              'echo attempt $CRONMAN_ATTEMPT')
    with Processes(tmp_path) as procs:
        procs.scheduler(db_url, "n1", env=env)
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        again = container_job(store, "again", ["sh", "-c", script], delivery="at_least_once")
        once = container_job(store, "once", ["sh", "-c", script], delivery="at_most_once")
        wait_for(lambda: len(starts(procs)) == 2, 15, "both containers to start")
        a1.kill()
        procs.agent("a2", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        lost = final_run(store, once.id, timeout=4 * LEASE + 10)
        assert lost.status == "lost" and "lost" in lost.error, lost
        redone = final_run(store, again.id, timeout=4 * LEASE + 10)
        assert redone.status == "succeeded" and redone.attempt == 2, redone
        assert redone.result["agent_id"] == "a2"
        assert redone.result["logs_tail"]["stdout"] == "attempt 2\n"
        # The containers of a1 were left running; a1 comes back and is fenced.
        assert len(agent_containers(containerd, namespace, "a1")) == 2
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        wait_for(lambda: not agent_containers(containerd, namespace, "a1"), 10,
                 "the fenced containers to be killed and removed")
        assert a1.log_text().count("is fenced: killing it") == 2
        assert runs_of(store, again.id)[0].result["agent_id"] == "a2"  # not overwritten
        assert sorted(a for _, a in starts(procs)) == [1, 1, 2]


def test_containerd_restarted_under_a_running_agent(tmp_path, db_url, store, env, containerd):
    with Processes(tmp_path) as procs:
        procs.scheduler(db_url, "n1", env=env)
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        job = container_job(store, "through", ["sh", "-c", "sleep 3; echo through"])
        wait_for(lambda: starts(procs), 15, "the container to start")
        containerd.restart()
        run = final_run(store, job.id)
        assert run.status == "succeeded" and run.attempt == 1, run
        assert run.result["logs_tail"]["stdout"] == "through\n"
        assert starts(procs) == [(run.id, 1)]
        assert a1.log_text().count("outcome not recorded") == 0


@pytest.mark.parametrize("stop", ["kill", "terminate"])
def test_a_node_stopped_mid_run_its_run_is_adopted_not_started_again(tmp_path, db_url, store,
                                                                      env, stop):
    with Processes(tmp_path) as procs:
        nodes = {n: procs.scheduler(db_url, n, env=env, ready_count=1) for n in ("n1", "n2")}
        procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        # Still running when the run is re-dispatched (a lease and a heartbeat TTL on).
        job = container_job(store, "adopt", ["sh", "-c", f"sleep {2 * LEASE}; echo once"],
                            in_s=2.0)
        wait_for(lambda: starts(procs), 15, "the container to start")
        holder = wait_for(lambda: [r.node_id for r in runs_of(store, job.id) if r.node_id],
                          10, "the run's node")[0]
        getattr(nodes[holder], stop)()  # SIGKILL, or SIGTERM: it hands the run back
        run = final_run(store, job.id, timeout=6 * LEASE + 15)
        assert run.status == "succeeded" and run.attempt == 2, run
        assert run.node_id != holder
        assert run.result["logs_tail"]["stdout"] == "once\n"
        assert starts(procs) == [(run.id, 1)]  # adopted: one container


def test_policies_replace_forbid_and_dead_letter(tmp_path, db_url, store, env):
    with Processes(tmp_path) as procs, Receiver() as rx:
        procs.scheduler(db_url, "n1", env=env)
        a1 = procs.agent("a1", redis_url=env["CRONMAN_REDIS_URL"], env=env)
        target = validate_target({"kind": "container", "image": TEST_IMAGE, "memory_mb": 64,
                                  "command": ["sleep", "60"], "timeout": 120})
        every2, every3 = {"kind": "interval", "every": 2}, {"kind": "interval", "every": 3}
        (job, forbid) = store.jobs.create_jobs([
            job_spec("replace", target=target, concurrency="replace", schedule=every3),
            job_spec("forbid", target=target, concurrency="forbid", schedule=every2)])
        failing = container_job(store, "dead", ["sh", "-c", "echo bad >&2; exit 9"],
                                retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1},
                                dead_letter={"kind": "http", "url": rx.url("/dlq"),
                                             "method": "POST", "headers": {}, "body": "",
                                             "timeout": 10})
        (letter,) = rx.wait_for(1, timeout=20, path="/dlq")
        record = json.loads(letter.body)
        assert record["job_id"] == failing.id and record["status"] == "failed"
        assert record["result"]["exit_code"] == 9
        assert record["result"]["logs_tail"]["stderr"] == "bad\n"
        forbidden = wait_for(lambda: [r for r in runs_of(store, forbid.id)
                                      if r.status == "skipped"], 15, "a skipped fire")
        assert forbidden[0].error.startswith("previous run")
        wait_for(lambda: len([s for s in starts(procs)
                              if s[0] in {r.id for r in runs_of(store, job.id)}]) >= 2,
                 15, "two fires of the replace job")
        wait_for(lambda: runs_of(store, job.id)[0].status == "failed", 5, "the replaced run")
        first = runs_of(store, job.id)[0]
        assert first.error.startswith("replaced by run"), first
        log = a1.log_text()
        # The first container was stopped (and gone) before any later one of the job started.
        stopped = log.index(f"run {first.id}: stopping container")
        job_runs = {r.id for r in runs_of(store, job.id)}
        later = [m.start() for m in STARTED.finditer(log)
                 if m.group(1) in job_runs and m.group(1) != first.id]
        assert later and all(at > stopped for at in later)
        store.jobs.delete_job(job.id)
        store.jobs.delete_job(forbid.id)


def test_a_process_agent_in_a_cluster_runs_granted_namespaces_only(tmp_path, db_url, store,
                                                                       env):
    """The process runtime runs commands on the agent's host: a namespace runs
    there only with a grant that says so, and never as root, nor with a run
    of another namespace's secrets or the agent's own environment."""
    once = {"retry": {"max_attempts": 1, "min_backoff": 1, "max_backoff": 1}}
    with Processes(tmp_path) as procs:
        procs.scheduler(db_url, "n1", env={**env, "CRONMAN_AGENT_PLACEMENT_TIMEOUT": "3"})
        procs.agent("p1", redis_url=env["CRONMAN_REDIS_URL"], runtime="process",
                    env={**env, "CRONMAN_AGENT_LABELS": "kind=host",
                         "CRONMAN_DATABASE_URL": db_url, "AGENT_SECRET": "s3cret"})
        store.host_policies.put("ops", {"process": True}, by=None)
        selector = {"selector": {"kind": "host"}}
        job = container_job(store, "host", ["sh", "-c", "echo on $CRONMAN_RUN_ID; id -u; env"],
                            target_extra=selector, namespace="ops")
        tenant = container_job(store, "tenant", ["sh", "-c", "id"], target_extra=selector,
                               namespace="tenant", **once)
        # Written straight to the database: root and the host's network in a
        # namespace granted the process runtime only. The node refuses it
        # whatever the row says (the agents' own checks: test_host_policy).
        forged = container_job(store, "forged", ["sh", "-c", "id"], namespace="ops",
                               target_extra={**selector, "user": "root", "network": "host"},
                               **once)
        run = final_run(store, job.id)
        assert run.status == "succeeded" and run.result["agent_id"] == "p1", run
        out = run.result["logs_tail"]["stdout"]
        assert out.startswith(f"on {run.id}\n")
        assert out.splitlines()[1] != "0"  # not root, whoever the agent runs as
        assert "CRONMAN_DATABASE_URL" not in out and "s3cret" not in out
        assert "CRONMAN_REDIS_URL" not in out and f"CRONMAN_RUN_ID={run.id}" in out
        run = final_run(store, tenant.id)
        assert run.status == "failed" and "process runtime" in run.error, run
        assert "'tenant'" in run.error and "logs_tail" not in (run.result or {})
        run = final_run(store, forged.id)
        assert run.status == "failed" and run.attempt == 1, run
        assert "refused by the host policy of namespace 'ops' (its grant): target.user" in (
            run.error), run
        assert "logs_tail" not in (run.result or {})
