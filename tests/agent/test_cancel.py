"""An operator cancels a long container run through the API (real API, node
and process agent on PostgreSQL and Redis): the node reads the cancel at its
lease renewal, the agent stops the command (SIGTERM, then SIGKILL after its
grace), and the run ends failed, not retried, with an error naming who
cancelled it and its output kept. A run that ended, and a plain http run in
flight, answer 409 saying why."""

from __future__ import annotations

import time
import uuid

import pytest

from cronman.store import open_store
from tests.support.api import http, running_api
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes, processes_with
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

LEASE = 3  # the node reads cancels every second
LATER = {"kind": "once", "at": "2099-01-01T00:00:00Z"}


def test_a_long_container_run_is_cancelled_through_the_api(tmp_path, redis_url):
    # A unique sleep: its process is found by its command line.
    sleep = ["sleep", f"3600.{uuid.uuid4().int % 10**6:06d}"]
    env = {"CRONMAN_REDIS_URL": redis_url,
           "CRONMAN_REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
           "CRONMAN_LEASE_SECONDS": str(LEASE), "CRONMAN_HEARTBEAT_TTL": str(LEASE)}
    with migrated_pg_database() as url, Processes(tmp_path) as procs, \
            Receiver() as rx:
        with open_store(url) as store:
            token, _ = store.tokens.create_token("ops-admin", None)
            store.host_policies.put("ops", {"process": True}, by=None)
        rx.reply("/slow", status=204, delay=6)
        with running_api(url, extra_env={**env, "CRONMAN_ALLOW_PRIVATE_TARGETS": "true"}
                         ) as base:
            def api(method: str, path: str, body: object = None) -> tuple[int, dict]:
                status, data, _ = http(method, base + path, body, token=token)
                return status, data

            procs.scheduler(url, "n1", env=env)
            procs.agent("p1", redis_url=redis_url, runtime="process", env={
                **env, "CRONMAN_AGENT_LABELS": "kind=host",
                "CRONMAN_AGENT_STATE_DIR": str(tmp_path / "agent-state")})
            status, job = api("POST", "/v1/jobs", {
                "name": "long", "namespace": "ops", "schedule": LATER,
                "target": {"kind": "container", "image": "unused", "timeout": 7200,
                           "selector": {"kind": "host"},
                           "command": ["sh", "-c", f"echo begun; exec {' '.join(sleep)}"]}})
            assert status == 201, job
            status, run = api("POST", f"/v1/jobs/{job['id']}/trigger")
            assert status == 202, run
            wait_for(lambda: processes_with(sleep), 30, "the run's command")
            wait_for(lambda: api("GET", f"/v1/runs/{run['id']}")[1]["status"] == "running",
                     10, "the run to be running")

            asked_at = time.monotonic()
            status, asked = api("POST", f"/v1/runs/{run['id']}/cancel", {"reason": "too long"})
            assert status == 202, asked
            assert asked["cancel_request"]["by"] == "token ops-admin"
            assert api("GET", f"/v1/runs/{run['id']}")[1]["cancel_request"]["reason"] == (
                "too long")

            def ended() -> dict | None:
                got = api("GET", f"/v1/runs/{run['id']}")[1]
                return got if got["status"] not in ("claimed", "running", "retrying") else None
            done = wait_for(ended, 20, "the cancelled run's end")
            took = time.monotonic() - asked_at
            assert done["status"] == "failed" and done["attempt"] == 1, done
            assert done["error"].startswith("cancelled by token ops-admin: too long (exit code "), (
                done["error"])
            assert done["result"]["agent_id"] == "p1"
            assert done["result"]["logs_tail"]["stdout"] == "begun\n"
            assert not processes_with(sleep)
            assert took < LEASE + 6, took  # a renewal (lease/3), the stop and its grace
            time.sleep(LEASE)  # not retried, nor started again
            assert api("GET", f"/v1/runs/{run['id']}")[1]["attempt"] == 1
            assert not processes_with(sleep)

            status, error = api("POST", f"/v1/runs/{run['id']}/cancel")
            assert status == 409 and error["error"]["message"] == (
                "the run already ended (failed)"), error

            # Still waiting for room on an agent: nothing started, it ends at once.
            status, nowhere = api("POST", "/v1/jobs", {
                "name": "nowhere", "namespace": "ops", "schedule": LATER,
                "target": {"kind": "container", "image": "unused", "command": sleep,
                           "selector": {"kind": "elsewhere"}}})
            assert status == 201, nowhere
            status, waiting = api("POST", f"/v1/jobs/{nowhere['id']}/trigger")
            assert status == 202
            wait_for(lambda: api("GET", f"/v1/runs/{waiting['id']}")[1]["status"] == "running",
                     10, "the run to wait for room")
            assert api("POST", f"/v1/runs/{waiting['id']}/cancel")[0] == 202
            done = wait_for(lambda: (lambda r: r if r["status"] == "failed" else None)(
                api("GET", f"/v1/runs/{waiting['id']}")[1]), 10, "the waiting run's end")
            assert (done["attempt"], done["error"]) == (1, "cancelled by token ops-admin")

            # A plain http request in flight has nothing to stop: a 409 that says so.
            status, slow = api("POST", "/v1/jobs", {
                "name": "slow", "namespace": "ops", "schedule": LATER,
                "target": {"kind": "http", "url": rx.url("/slow"), "timeout": 10}})
            assert status == 201, slow
            status, slow_run = api("POST", f"/v1/jobs/{slow['id']}/trigger")
            assert status == 202
            rx.wait_for(1, timeout=20, path="/slow")
            status, error = api("POST", f"/v1/runs/{slow_run['id']}/cancel")
            assert status == 409, error
            assert error["error"]["message"] == (
                "an http run cannot be cancelled: its request is sent and ends within the "
                "target's timeout (10 s); only an http run completed by callback can be")
