"""``cronman queues`` and ``cronman runs cancel`` against a live ``cronman api``
(SQLite), through the light client (``queues()``, ``cancel_run()``)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.client import CronmanClient
from cronman.ids import run_id_for
from cronman.models import Run
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.store.work_records import WorkOrder
from cronman.timeutil import utcnow
from tests.support.api import job_spec, running_api

WORKER = {"kind": "worker", "queue": "etl", "payload": {"day": "2026-12-01"}}


@pytest.fixture
def world(tmp_path):
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    store = open_store(url)
    try:
        with running_api(url) as base, CronmanClient(base) as api:
            job = api.create_job(job_spec("nightly", namespace="data", target=WORKER))
            run_ids = []
            for i in range(2):
                t = utcnow().replace(microsecond=0) - timedelta(seconds=30 - i)
                run = Run(id=run_id_for(job["id"], t), job_id=job["id"], scheduled_for=t,
                          status="running", attempt=1, node_id="n1", claimed_at=t)
                store.runs.claim_runs([run])
                store.work.enqueue(WorkOrder(
                    run_id=run.id, scheduled_for=t, job_id=job["id"], namespace="data",
                    queue="etl", priority=0, due_at=t, attempt=1, payload=WORKER["payload"],
                    heartbeat_timeout=60, timeout=3600, delivery="at_least_once",
                    retry=job["retry"], node_id="n1"))
                run_ids.append(run.id)
            yield base, api, run_ids
    finally:
        store.close()


def test_queues_and_cancel(world):
    base, api, run_ids = world
    runner = CliRunner()
    env = {"CRONMAN_URL": base}
    table = runner.invoke(cli, ["queues"], env=env, catch_exceptions=False)
    assert table.exit_code == 0, table.output
    assert "NAMESPACE" in table.output and "etl" in table.output and "data" in table.output
    listed = runner.invoke(cli, ["queues", "-n", "data", "-o", "json"], env=env,
                           catch_exceptions=False)
    items = json.loads(listed.output)["items"]
    assert [(q["queue"], q["depth"], q["held"]) for q in items] == [("etl", 2, 0)]
    done = runner.invoke(cli, ["runs", "cancel", run_ids[0], "--reason", "bad day", "-o",
                               "json"], env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    run = json.loads(done.output)
    assert (run["status"], run["error"]) == ("failed", "cancelled: bad day")
    again = runner.invoke(cli, ["runs", "cancel", run_ids[0]], env=env)
    assert again.exit_code != 0 and "already ended" in again.output
    assert [q["depth"] for q in api.queues(namespace="data")] == [1]
    assert api.cancel_run(run_ids[1])["status"] == "failed"
